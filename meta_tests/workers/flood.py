"""Fake worker that writes a line of N MiB (argument, default 1024) without a newline after
its hello record, as fast as it can, then a newline and normal steps (expected: FAIL, the
line is longer than the protocol allows, and the harness holds none of it)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024


def flood() -> None:
    block = b"x" * (1 << 20)
    out = sys.stdout.buffer
    for _ in range(mib):
        out.write(block)
    out.write(b"\n")
    out.flush()


_fake.run(defect_at_step=0, defect=flood)
