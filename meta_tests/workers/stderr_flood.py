"""Fake worker that writes N MiB (argument, default 64) to standard error before its hello
record, then dies after 2 steps (expected: CRASH, the message quoting the end of that
standard error, which the harness reads without loading the rest)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
block = b"e" * ((1 << 20) - 1) + b"\n"
for _ in range(mib):
    sys.stderr.buffer.write(block)
sys.stderr.buffer.write(b"fake: the last line of standard error\n")
sys.stderr.flush()


def die() -> None:
    os._exit(3)


_fake.run(defect_at_step=2, defect=die)
