"""The reference worker's knobs (SPEC.md WORKER-3): a value it cannot use is replaced by its
default with one line on standard error, before the hello record, never a crash (an
``ANTMAN_WORKER_STEP_MS`` of ``1e308`` once overflowed before the hello record)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import reference_runtime
from reference_runtime import worker as reference_worker

ROOT = Path(__file__).resolve().parent.parent


def run_worker(tmp_path: Path, **knobs: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTMAN_", "GPU_CONFIG", "GPU_STATUS", "PYTEST_"))}
    env.update({"GPU_CONFIG_FILE": str(tmp_path / "sche2pai.json"),
                "GPU_STATUS_FILE": str(tmp_path / "pai2sche.json"),
                "ANTMAN_WORKER_MAX_STEPS": "2", **knobs})
    stdin_r, stdin_w = os.pipe()                 # open until the worker exits (WORKER-4)
    try:
        return subprocess.run(reference_runtime.WORKER_COMMAND, cwd=ROOT, env=env, text=True,
                              capture_output=True, stdin=stdin_r, timeout=120)
    finally:
        os.close(stdin_r)
        os.close(stdin_w)


@pytest.mark.parametrize("name,value,default", [
    ("ANTMAN_WORKER_STEP_MS", "1e308", 50.0),
    ("ANTMAN_WORKER_STEP_MS", "inf", 50.0),
    ("ANTMAN_WORKER_POLL_INTERVAL_S", "1e10", 1.0),
    ("ANTMAN_WORKER_POLL_INTERVAL_S", "61", 1.0),        # beyond WORKER-2's 60 s
    ("ANTMAN_WORKER_SEED", "9" * 5000, 0),
])
def test_unusable_knob_falls_back_to_its_default(tmp_path: Path, name: str, value: str,
                                                 default: float) -> None:
    done = run_worker(tmp_path, **{name: value})
    assert done.returncode == 0, done.stderr[-2000:]
    hello, *steps = [json.loads(line) for line in done.stdout.splitlines()]
    assert hello["type"] == "hello" and len(steps) == 2, done.stdout[-500:]
    key = {"ANTMAN_WORKER_STEP_MS": "step_ms", "ANTMAN_WORKER_SEED": "seed"}.get(name)
    got = hello["workload"][key] if key else hello["poll_interval_s"]
    assert got == default, (name, got)
    lines = [line for line in done.stderr.splitlines() if name in line]
    assert len(lines) == 1 and "invalid" in lines[0], done.stderr[-1000:]


@pytest.mark.parametrize("value", [None, " ", "nan", "0", "-1", "x"])
def test_knob_defaults(value: str | None) -> None:
    """``STEP_MS`` 50, ``MAX_STEPS`` 0 and ``SEED`` 0 when unset, empty or invalid
    (WORKER-3's defaults, which the hello record states; conformance/test_worker_protocol.py
    checks them from outside for three of these values)."""
    names = ("ANTMAN_WORKER_STEP_MS", "ANTMAN_WORKER_MAX_STEPS", "ANTMAN_WORKER_SEED")
    env = {} if value is None else dict.fromkeys(names, value)
    knobs = reference_worker.read_knobs(env)
    assert (knobs.step_ms, knobs.max_steps, knobs.seed) == (50, 0, 0), (value, knobs)


@pytest.mark.parametrize("value,step_ms", [("3600000", 3_600_000.0),
                                            ("3600000.5", 50.0), ("1e12", 50.0)])
def test_step_ms_is_bounded_at_an_hour(value: str, step_ms: float) -> None:
    """``STEP_MS`` 3 600 000 (a step of an hour) is valid and kept; above it the default 50
    is in effect (WORKER-3). conformance/test_worker_protocol.py checks the values above it
    from outside; this one checks the bound itself, without running a step of an hour."""
    knobs = reference_worker.read_knobs({"ANTMAN_WORKER_STEP_MS": value})
    assert knobs.step_ms == step_ms, (value, knobs)


@pytest.mark.parametrize("args", [["--steps"], ["x", "y"]])
def test_a_command_line_argument_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    """The worker reads its environment only: any argument is refused with a usage line and
    status 2, before anything is written to standard output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTMAN_", "PYTEST_"))}
    env.update(GPU_CONFIG_FILE=str(tmp_path / "sche2pai.json"),
               GPU_STATUS_FILE=str(tmp_path / "pai2sche.json"))
    done = subprocess.run([*reference_runtime.WORKER_COMMAND, *args], cwd=ROOT, env=env,
                          text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout[:200])
    assert done.stderr.startswith("usage: "), done.stderr[-500:]
