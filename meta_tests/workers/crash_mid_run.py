"""Fake worker that aborts after 2 steps (expected: CRASH)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402


def crash() -> None:
    sys.stderr.write("F tensorflow/core/common_runtime/bfc_allocator.cc:1] Check failed\n")
    sys.stderr.flush()
    os.abort()


_fake.run(defect_at_step=2, defect=crash)
