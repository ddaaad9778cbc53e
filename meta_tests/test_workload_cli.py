"""The reference runtime's workload command line (``python -m reference_runtime.workload``):
it prints a header line, then trains and prints one JSON line a step, and bad arguments end in a usage error (exit 2)
naming the argument, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def workload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reference_runtime.workload", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_trains_and_prints_one_record_a_step() -> None:
    done = workload("--steps", "3", "--backend", "sim")
    assert done.returncode == 0, done.stderr
    header, *records = [json.loads(line) for line in done.stdout.splitlines()]
    assert header["backend"] == "sim" and "MLPWorkload" in header["workload"]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(r["device_bytes_in_use"] > 0 for r in records)


@pytest.mark.parametrize("args,named", [
    (("--batch", "0"), "batch must be a positive int"),
    (("--layers", "0"), "layers must be a positive int"),
    (("--gpu-memory", "inf"), "--gpu-memory"),
    (("--gpu-memory", "nan"), "--gpu-memory"),
    (("--gpu-memory", "-1G"), "--gpu-memory"),
    (("--steps", "-1"), "--steps"),
])
def test_bad_arguments_are_usage_errors(args: tuple[str, ...], named: str) -> None:
    done = workload(*args, "--backend", "sim")
    assert done.returncode == 2, (args, done.returncode, done.stderr[-400:])
    assert "Traceback" not in done.stderr and named in done.stderr, done.stderr[-400:]
