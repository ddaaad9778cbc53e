"""Fake worker that writes a line that is not JSON after 2 steps (expected: FAIL)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402


def garbage() -> None:
    sys.stdout.write("2026-11-21 05:00:00.000 I tensorflow: step done, loss=0.5\n")
    sys.stdout.flush()


_fake.run(defect_at_step=2, defect=garbage)
