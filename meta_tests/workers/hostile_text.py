"""Fake worker whose every text is hostile (fixtures/hostile_text.py): its hello record names
the runtime, version, device and workload with lone surrogates, NUL, ESC sequences, CR and
bidi overrides (valid JSON: the surrogates are escapes), its step records carry the same in
an extra member, and its standard error holds them as raw bytes, with invalid UTF-8 and a
megabyte line. After 2 steps it writes a line that is not JSON and holds NUL, ESC and CR
(expected: FAIL quoting that line and the tail of standard error); with the argument
``conforming`` it does not (expected: PASS, the hostile text only in what it reports). The
suite's report and terminal must stay complete and readable (SPEC.md section 7, Report)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(os.path.dirname(HERE)))
import _fake  # noqa: E402
from fixtures.hostile_text import HOSTILE_TEXTS, hostile_mix, hostile_stderr_bytes  # noqa: E402

MIX = hostile_mix()

sys.stderr.buffer.write(hostile_stderr_bytes())
sys.stderr.flush()


def emit_hello() -> None:
    _fake.emit({"type": "hello", "protocol": 1,
                "runtime": {"name": f"fake-worker {MIX}", "version": HOSTILE_TEXTS["nul"]},
                "spec_version": "2026.11", "pid": os.getpid(), "t_us": _fake.now_us(),
                "poll_interval_s": 0.1,
                "devices": [{"name": MIX, "pci_bus_id": _fake.BUS_ID,
                             "memory_limit": _fake.LIMIT}],
                "workload": {"model": MIX, HOSTILE_TEXTS["lone_high_surrogate"]: MIX}})


def with_note(record: dict) -> dict:
    return {**record, "note": MIX}


def garbage() -> None:
    sys.stdout.buffer.write(b"not json \x00 \x1b[2J\x1b]0;owned\x07 NOT CERTIFIED\rCERTIFIED"
                            + HOSTILE_TEXTS["bidi_override"].encode() + b"\n")
    sys.stdout.flush()


_fake.hello = emit_hello
conforming = sys.argv[1:] == ["conforming"]
_fake.run(defect_at_step=None if conforming else 2, defect=None if conforming else garbage,
          mangle=with_note)
