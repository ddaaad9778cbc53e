"""The worker harness under attack: it always ends, kills every process, holds no flood.

Each test runs ``fixtures.worker.WorkerProcess`` in this process against a fake worker of
``meta_tests/workers`` with one hostile behaviour, and checks the harness's own figures:
the time ``close()`` takes, the memory it allocates (``tracemalloc``, every thread), and
the process table afterwards (every process a fake starts carries a tag in its command
line). The floods are scaled (256 MiB of stdout, 64 MiB of stderr): the bounds are
constants, so a harness that held the flood shows it at any size. A test that finds a
survivor kills it, so that a broken harness leaves the machine clean.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.worker import WorkerProcess
from fixtures.worker_stream import MAX_LINE_BYTES

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ROOT / "meta_tests" / "workers"
CLOSE_BOUND_S = 10.0         # close(): 2 s grace to SIGKILL, then the reaper's own work
FLOOD_MIB = 256
STDERR_MIB = 64
READER_PEAK_BOUND = 16 << 20     # bytes: a few lines of MAX_LINE_BYTES at most
TAIL_PEAK_BOUND = 1 << 20


def tagged_processes(tag: str) -> list[int]:
    """Pids whose command line holds ``tag``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


@pytest.fixture
def tag(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A tag the fakes put in their descendants' command lines; survivors are killed."""
    value = f"antman-fake-descendant-{uuid.uuid4().hex}"
    monkeypatch.setenv("FAKE_WORKER_TAG", value)
    yield value
    for pid in tagged_processes(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def fake(name: str, tmp_path: Path, *args: str, timeout_s: float = 10.0,
         **knobs: str) -> WorkerProcess:
    return WorkerProcess([sys.executable, str(WORKERS / f"{name}.py"), *args],
                         workdir=tmp_path / name, cwd=ROOT, timeout_s=timeout_s, knobs=knobs)


def timed_close(w: WorkerProcess, bound_s: float) -> float:
    start = time.monotonic()
    closer = threading.Thread(target=w.close, name="harness-close", daemon=True)
    closer.start()
    closer.join(bound_s)
    took = time.monotonic() - start
    assert not closer.is_alive(), f"WorkerProcess.close() did not return within {bound_s} s"
    return took


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to read the process table")
@pytest.mark.parametrize("name", ["setsid_child_holds_stdout", "setsid_orphans"])
def test_close_ends_and_kills_every_process_of_the_worker(tmp_path: Path, tag: str,
                                                          name: str) -> None:
    w = fake(name, tmp_path)
    w.start()
    w.wait_hello()
    w.steps(2)
    deadline = time.monotonic() + 10
    while len(tagged_processes(tag)) < (1 if name == "setsid_child_holds_stdout" else 2):
        assert time.monotonic() < deadline, "the fake did not start its descendants"
        time.sleep(0.05)
    took = timed_close(w, CLOSE_BOUND_S)
    left = tagged_processes(tag)
    assert left == [], (f"{name}: {len(left)} process(es) the worker started survived close() "
                        f"(took {took:.2f} s): {left}")


def test_close_ends_when_the_worker_ignores_sigterm(tmp_path: Path) -> None:
    w = fake("hang_after_hello", tmp_path)
    w.start()
    w.wait_hello()
    took = timed_close(w, CLOSE_BOUND_S)
    assert w.proc is not None and w.proc.poll() is not None, "the reaper is still running"
    assert w.worker_pid is not None
    assert not os.path.exists(f"/proc/{w.worker_pid}") or \
        Path(f"/proc/{w.worker_pid}/stat").read_text().split(") ")[1][0] == "Z", \
        f"the worker {w.worker_pid} survived close() ({took:.2f} s)"


def traced_peak(fn) -> tuple[object, int]:
    """(fn(), peak bytes allocated by every thread of this process while it ran)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        try:
            result: object = fn()
        except AssertionError as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_flood_without_newline_is_a_failure_and_holds_no_memory(tmp_path: Path) -> None:
    w = fake("flood", tmp_path, str(FLOOD_MIB), timeout_s=60)
    try:
        w.start()
        w.wait_hello()

        def read_through_the_flood() -> object:
            with pytest.raises(AssertionError) as failure:
                w.next_record()
            record = w.next_record()           # the step after the flood: all of it was read
            return failure.value, record

        (failure, record), peak = traced_peak(read_through_the_flood)
        message = str(failure)
        assert "longer than" in message and "[WORKER-2]" in message and "xxxxxxxx" in message, \
            message[:500]
        assert record is not None and record["type"] == "step", record
        assert peak <= READER_PEAK_BOUND, (
            f"reading a {FLOOD_MIB} MiB line allocated {peak / (1 << 20):.1f} MiB at the peak, "
            f"more than {READER_PEAK_BOUND >> 20} MiB (lines are cut at "
            f"{MAX_LINE_BYTES >> 20} MiB)")
    finally:
        w.close()


def test_the_stderr_tail_reads_only_the_end(tmp_path: Path) -> None:
    w = fake("stderr_flood", tmp_path, str(STDERR_MIB))
    try:
        w.start()
        w.wait_hello()
        w.steps(2)
        with pytest.raises(Exception) as crash:
            w.next_step()
        tail, peak = traced_peak(w.stderr_tail)
    finally:
        w.close()
    assert getattr(crash.value, "antman_outcome", None) == "CRASH", repr(crash.value)[:300]
    assert "fake: the last line of standard error" in str(crash.value), str(crash.value)[-500:]
    assert isinstance(tail, str) and len(tail) <= 4000 and tail.endswith("standard error"), \
        repr(tail)[-200:]
    assert peak <= TAIL_PEAK_BOUND, (
        f"the tail of a {STDERR_MIB} MiB stderr file allocated {peak / (1 << 20):.1f} MiB")


@pytest.mark.parametrize("mode,text", [
    ("float_step", "step"), ("memory_limit_1e30", "memory_limit"),
    ("t_us_1e400", "out of range"), ("duration_2_64", "duration_us"),
    ("deep", "nested deeper than 64")])
def test_numbers_the_protocol_forbids_fail_quoting_the_line(tmp_path: Path, mode: str,
                                                            text: str) -> None:
    w = fake("odd_numbers", tmp_path, mode)
    try:
        w.start()
        with pytest.raises(AssertionError) as failure:
            w.wait_hello()
            w.steps(3)
    finally:
        w.close()
    message = str(failure.value)
    assert "[WORKER-2]" in message and text in message, message[:600]
    quoted = "stdout line " in message and '"type": ' in message
    assert quoted, f"the failure does not quote the line: {message[:600]}"
    assert len(message) < 20_000, f"the failure message is {len(message)} characters long"


def test_a_poll_interval_beyond_the_bound_is_a_tagged_failure(tmp_path: Path) -> None:
    """``poll_interval_s: 1e308`` made the detection bound infinite, and the first wait on it
    raised an untagged OverflowError; the hello record is a WORKER-2 failure instead."""
    w = fake("odd_numbers", tmp_path, "poll_1e308")
    try:
        w.start()
        with pytest.raises(AssertionError, match=r"poll_interval_s.*\[WORKER-2\]") as caught:
            w.wait_hello()
            w.detection_bound_s
        assert "OverflowError" not in str(caught.value)
    finally:
        timed_close(w, CLOSE_BOUND_S)

