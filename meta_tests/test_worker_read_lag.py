"""A suite that reads a record late does not blame the worker for it (WORKER-2, WORKER-5).

On a loaded machine the suite's process can be descheduled for longer than the detection
bound D right after it rewrites GPU_CONFIG_FILE. Every line the worker wrote meanwhile is
then read late; read time minus ``duration_us`` puts the start of a step the worker began
before the write after ``T + D``, and a worker that crashed on the config (CRASH) or that
applied the limit in time (PASS) was reported FAIL. These tests make that stall
deterministic: the suite's process stops itself (SIGSTOP) right after the write and a
helper resumes it ``STALL_S`` later, as the scheduler of a loaded machine would. The write
lands inside a step the fake holds on purpose (``FAKE_DESCHEDULE_MARKER``, below): a write
timed against the fake's own steps could land between a step's record and the next step's
config check, where the fake aborts without another record and the stall reproduces nothing.

The fake had a race of its own: it checked the config, then read its clock to start the
step, so a fake descheduled between the two started, after the write, a step that had not
seen it. It now reads its clock first; the last test stops it right after a check
(``FAKE_DESCHEDULE_MARKER``) and writes the config meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.test_worker_protocol import expect_limit, half_limit, until_in_force
from fixtures.worker import Record, WorkerCrash, WorkerProcess, step_start_s

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "meta_tests" / "workers"
WARM_UP_STEPS = 3
MARKER_WAIT_S = 30.0          # the fake takes the marker at its next step (bound, not a wait)
STEP_MS = 300
#: The held step lasts the fake's DESCHEDULED_S (1.5 s) plus STEP_MS and ends inside the
#: stall; read when the stall ends, read time minus its duration lies 1.2 s after the write,
#: past D = 2 x 0.1 s + 0.5 s (the fakes' poll_interval_s): a suite that dated steps by read
#: time would put this step, begun before the write, after T + D.
STALL_S = 3.0


class Stall:
    """Stops this whole process (every thread) for ``seconds`` on ``now()``: a helper started
    beforehand, so that nothing lies between the call and the stop, sends SIGCONT."""

    def __init__(self, seconds: float) -> None:
        self.helper = subprocess.Popen(
            ["sh", "-c", f"read go; sleep {seconds}; kill -CONT {os.getpid()}"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)

    def now(self) -> None:
        assert self.helper.stdin is not None
        try:
            self.helper.stdin.write(b"go\n")
            self.helper.stdin.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
        finally:
            self.helper.stdin.close()
            self.helper.wait()


@pytest.fixture
def crash_on_config(tmp_path: Path) -> Iterator[WorkerProcess]:
    w = WorkerProcess([sys.executable, str(WORKERS / "crash_on_config.py")],
                      workdir=tmp_path / "worker", cwd=ROOT, timeout_s=30.0,
                      knobs={"ANTMAN_WORKER_STEP_MS": str(STEP_MS),
                             "FAKE_DESCHEDULE_MARKER": str(tmp_path / "deschedule")})
    try:
        w.start()
        w.wait_hello()
        yield w
    finally:
        w.close()


def hold_a_step(marker: Path) -> None:
    """Returns once the fake has begun a step it holds for DESCHEDULED_S: it took the marker
    right after a config check that saw no change, so a write now lands inside that step."""
    marker.touch()
    deadline = time.monotonic() + MARKER_WAIT_S
    while marker.exists():                   # the fake took it: it is stopped now
        assert time.monotonic() < deadline, "the fake never took the deschedule marker"
        time.sleep(0.01)


def test_a_stall_after_the_write_does_not_turn_a_crash_into_a_failure(
        crash_on_config: WorkerProcess, tmp_path: Path) -> None:
    """The fake aborts at the first step boundary after the write; every record it wrote
    began before the write, so WORKER-7's first wait ends in CRASH, however late the suite
    read those records."""
    w = crash_on_config
    w.steps(WARM_UP_STEPS)
    limit = half_limit(w, 2)
    stall = Stall(STALL_S)
    hold_a_step(tmp_path / "deschedule")
    t = w.rewrite_config(w.config(limit=limit))
    stall.now()
    late: list[Record] = []
    with pytest.raises(WorkerCrash):
        late = until_in_force(w, t, expect_limit(w, t, limit, limit, "WORKER-7"), n=1)
    after = [r for r in w.records if r["type"] == "step" and r.read_s >= t]
    assert after, "no step record was read after the write: the stall reproduced nothing"
    assert all(r.read_s >= t + STALL_S for r in after), \
        [(r["step"], r.read_s - t) for r in after]
    assert not late


def test_a_late_read_record_keeps_its_start_on_the_workers_clock(
        crash_on_config: WorkerProcess, tmp_path: Path) -> None:
    """The start the suite gives a record read after the stall is where the worker's clock
    puts it (before the write), not its read time minus its duration."""
    w = crash_on_config
    w.steps(WARM_UP_STEPS)
    stall = Stall(STALL_S)
    hold_a_step(tmp_path / "deschedule")
    t = w.rewrite_config(w.config(limit=half_limit(w, 2)))
    stall.now()
    with pytest.raises(WorkerCrash):
        while True:
            w.next_step()
    after = [r for r in w.records if r["type"] == "step" and r.read_s >= t]
    assert after, "no step record was read after the write: the stall reproduced nothing"
    for rec in after:
        assert rec.read_s - rec["duration_us"] / 1e6 >= t + w.detection_bound_s
        assert rec.start_s < t + w.detection_bound_s, (rec["step"], rec.start_s - t)


def test_the_workers_clock_moves_a_start_earlier_never_later() -> None:
    """``step_start_s`` against read time minus the duration: earlier by the record's extra
    read lag, never later, and never more than the bound earlier (a slow or leaping worker
    clock)."""
    read, duration_us = 100.0, 50_000
    by_read = read - 0.05
    # prompt reads put the worker's clock 10 s behind the suite's; this line waited 1.5 s
    assert step_start_s(read, 88_500_000, duration_us, 10.0, 30.0) == pytest.approx(
        by_read - 1.5)
    # read as promptly as the best: the same as read time minus the duration
    assert step_start_s(read, 90_000_000, duration_us, 10.0, 30.0) == pytest.approx(by_read)
    # a clock that claims the step ended after it was read: never later than by_read
    assert step_start_s(read, 95_000_000, duration_us, 10.0, 30.0) == pytest.approx(by_read)
    # a clock that stands still or leaps back: at most the bound earlier
    assert step_start_s(read, 0, duration_us, 10.0, 30.0) == pytest.approx(by_read - 30.0)


def test_a_fake_descheduled_after_its_config_check_still_crashes(
        crash_on_config: WorkerProcess, tmp_path: Path) -> None:
    """The fake stops for 1.5 s right after a config check that saw no change, and the write
    lands meanwhile: its step started before the check (the fake reads its clock first), so
    the record it then writes dates the step before the write, and the next check aborts
    (CRASH). A fake that read its clock after the check would date that step 1.5 s after
    the write, past D, and be reported FAIL with the old limit."""
    w = crash_on_config
    w.steps(WARM_UP_STEPS)
    hold_a_step(tmp_path / "deschedule")
    limit = half_limit(w, 2)
    t = w.rewrite_config(w.config(limit=limit))
    with pytest.raises(WorkerCrash):
        until_in_force(w, t, expect_limit(w, t, limit, limit, "WORKER-7"), n=1)
    after = [r for r in w.records if r["type"] == "step" and r.read_s >= t]
    assert after and after[0]["duration_us"] >= 1_000_000, \
        [(r["step"], r["duration_us"]) for r in after]
