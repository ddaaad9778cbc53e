"""Fake worker whose records hold numbers the protocol does not allow (expected: FAIL,
quoting the line). The argument picks the defect:

- ``float_step``: ``"step": 12.0`` (an integer member written as a fraction);
- ``memory_limit_1e30``: ``"memory_limit": 1e30`` in the hello record;
- ``t_us_1e400``: a number beyond the float range;
- ``duration_2_64``: ``"duration_us"`` of 2^64, beyond 64 bits;
- ``deep``: a member nested 5000 levels deep in a step record;
- ``poll_1e308``: ``"poll_interval_s": 1e308`` in the hello record (a detection bound of
  WORKER-5 that is no finite wait).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

mode = sys.argv[1] if len(sys.argv) > 1 else "float_step"


def mangle(rec: dict) -> dict:
    if mode == "float_step":
        rec["step"] = float(rec["step"])
    elif mode == "duration_2_64":
        rec["duration_us"] = 1 << 64
    return rec


def emit_raw(rec: dict) -> None:
    import json
    text = json.dumps(rec)
    if mode == "t_us_1e400":
        text = text.replace('"t_us": %d' % rec["t_us"], '"t_us": 1e400')
    elif mode == "deep":
        text = text[:-1] + ', "extra": ' + "[" * 5000 + "]" * 5000 + "}"
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


if mode == "poll_1e308":
    _fake.emit = lambda rec, _emit=_fake.emit: _emit(
        {**rec, "poll_interval_s": 1e308} if rec.get("type") == "hello" else rec)
if mode == "memory_limit_1e30":
    _fake.LIMIT = 1e30
if mode in ("t_us_1e400", "deep"):
    _fake.emit = lambda rec, _emit=_fake.emit: (emit_raw(rec) if rec.get("type") == "step"
                                                else _emit(rec))
_fake.run(mangle=mangle)
