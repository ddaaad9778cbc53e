"""CLK clauses: the clock protocol, routing of every wait through the injected clock, and
waits that end on shutdown."""

from __future__ import annotations

import json
import threading
import time

import pytest

from conformance.control_helpers import (MiB, control_env, joined, perf_in_force,  # noqa: F401
                                         run_in_thread, runtimes)
from conformance.preconditions import precondition
from fixtures.threads import no_thread_leak  # noqa: F401
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("virtual_clock")


def real_clock(rt):
    clock = getattr(rt, "REAL_CLOCK", None)
    if clock is None:
        pytest.skip("NOT_SUPPORTED: the runtime exports no REAL_CLOCK")
    return clock


@pytest.mark.clause("CLK-1")
def test_real_clock_readings(rt) -> None:
    clock = real_clock(rt)
    a = clock.now_us()
    b = clock.now_us()
    assert isinstance(a, int) and b >= a, f"now_us() gave {a} then {b} [CLK-1]"
    t = clock.time_s()
    assert isinstance(t, int) and abs(t - time.time()) < 5, f"time_s() = {t} [CLK-1]"


@pytest.mark.clause("CLK-1")
def test_real_clock_waits(rt) -> None:
    clock = real_clock(rt)
    ev = threading.Event()
    assert clock.wait(ev, 1000) is False, "wait(unset, 1000) did not time out with False [CLK-1]"
    assert clock.wait(ev, 0) is False and clock.wait(ev, -5) is False, "[CLK-1]"
    ev.set()
    assert clock.wait(ev, 600_000_000) is True, "wait(set event) did not return True [CLK-1]"
    assert clock.wait(ev, 0) is True, "[CLK-1]"
    assert clock.sleep_us(100) is True, "sleep_us(100) did not report completion [CLK-1]"
    clock.sleep_us(0)
    clock.sleep_us(-1)
    assert clock.sleep_us(600_000_000, ev) is False, "sleep_us with cancel set did not return False [CLK-1]"
    cancel = threading.Event()
    timer = threading.Timer(0.05, cancel.set)
    timer.start()
    try:
        assert clock.sleep_us(600_000_000, cancel) is False, \
            "sleep_us was not cancelled by its event [CLK-1]"
    finally:
        timer.cancel()


@pytest.mark.clause("CLK-1")
def test_real_clock_reads_the_monotonic_clock_in_microseconds(rt) -> None:
    clock = real_clock(rt)
    for _ in range(20):
        before = time.monotonic_ns() // 1000
        now = clock.now_us()
        after = time.monotonic_ns() // 1000
        assert before <= now <= after, (
            f"now_us() = {now} outside [{before}, {after}], the monotonic clock in µs read "
            f"around it [CLK-1]")
        wall_before = int(time.time())
        t = clock.time_s()
        wall_after = int(time.time())
        assert wall_before <= t <= wall_after, \
            f"time_s() = {t} outside [{wall_before}, {wall_after}] [CLK-1]"


@pytest.mark.clause("CLK-1")
@pytest.mark.parametrize("duration_us", [30_000, 250_000])
def test_real_clock_waits_last_their_duration(rt, duration_us) -> None:
    """Lower bounds only: a wait may end late on a loaded machine, never early."""
    clock = real_clock(rt)
    ev, cancel = threading.Event(), threading.Event()
    for what, call, expected in (
            ("wait(unset event)", lambda: clock.wait(ev, duration_us), False),
            ("sleep_us()", lambda: clock.sleep_us(duration_us), True),
            ("sleep_us(unset cancel)", lambda: clock.sleep_us(duration_us, cancel), True)):
        start = time.monotonic_ns()
        got = call()
        took_us = (time.monotonic_ns() - start) // 1000
        assert got is expected, f"{what} of {duration_us} µs returned {got!r} [CLK-1]"
        assert took_us >= duration_us - 1000, (
            f"{what} of {duration_us} µs returned after {took_us} µs [CLK-1]")


class _SetWhenWaitedOn(threading.Event):
    """An event that records the timeout of each of its waits and is set by the first."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout)
        self.set()
        return super().wait(0)


@pytest.mark.clause("CLK-1")
@pytest.mark.parametrize("timeout_us", [1_000_000, 100_000_000, 10**17])
def test_real_clock_waits_no_longer_than_asked(rt, timeout_us) -> None:
    """The real clock waits on the event for what is left of the timeout, never more (an
    uninterrupted wait ends at its deadline, give or take the system's wake-up)."""
    clock = real_clock(rt)
    ev = _SetWhenWaitedOn()
    got = clock.wait(ev, timeout_us)
    assert got is True, f"wait(event set during the wait, {timeout_us}) returned {got!r} [CLK-1]"
    assert ev.asked, f"wait(event, {timeout_us}) did not wait on the event [CLK-1]"
    too_long = [t for t in ev.asked if t is None or t > timeout_us / 1e6]
    assert not too_long, (
        f"wait(event, {timeout_us} µs) waited on the event with the timeouts {ev.asked} s, "
        f"more than the {timeout_us / 1e6:g} s asked [CLK-1]")


@pytest.mark.clause("CLK-1")
def test_real_clock_zero_sleeps(rt) -> None:
    clock = real_clock(rt)
    cancel = threading.Event()
    got = (clock.sleep_us(0), clock.sleep_us(-5), clock.sleep_us(0, cancel))
    cancel.set()
    got += (clock.sleep_us(0, cancel), clock.sleep_us(-5, cancel))
    assert got == (True, True, True, False, False), (
        f"sleep_us(0), sleep_us(-5), sleep_us(0, unset), sleep_us(0, set), sleep_us(-5, set) "
        f"returned {got}, expected (True, True, True, False, False) [CLK-1]")


@pytest.mark.clause("CLK-1")
def test_real_clock_minus_infinity_returns_at_once(rt) -> None:
    """A timeout of minus infinity is a timeout <= 0 like any other: the wait and the sleep
    return at once with the event's state, they do not raise converting it to nanoseconds."""
    clock = real_clock(rt)
    ev = threading.Event()
    got = []
    for call in (lambda: clock.wait(ev, float("-inf")), lambda: clock.sleep_us(float("-inf")),
                 lambda: clock.sleep_us(float("-inf"), ev), ev.set,
                 lambda: clock.wait(ev, float("-inf")),
                 lambda: clock.sleep_us(float("-inf"), ev)):
        try:
            got.append(call())
        except Exception as exc:  # noqa: BLE001 - any error is the finding
            got.append(type(exc).__name__)
    assert got == [False, True, True, None, True, False], (
        f"wait(unset, -inf), sleep_us(-inf), sleep_us(-inf, unset), then with the event set "
        f"wait(set, -inf), sleep_us(-inf, set) gave {got}, expected "
        f"[False, True, True, None, True, False] [CLK-1]")


@pytest.mark.clause("CLK-2")
@pytest.mark.capability("resource_management", "file_listener")
def test_runtime_routes_waits_through_its_clock(rt, runtimes, tmp_path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"perfControl": 1}))
    clock = VirtualClock()
    ctx = runtimes(config_file=str(cfg), clock=clock, poll_interval_s=2.5)
    clock.wait_for_waiters(1, clause="CLK-2")
    assert clock.sleeps_of("antman-file-listener") == [2_500_000], \
        f"listener waits {clock.sleeps_of('antman-file-listener')} [CLK-2]"
    step, _ = run_in_thread(lambda: ctx.resource_management.run_action(
        rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, sess_duration_us=10_000_000)),
        name="clk-step")
    clock.wait_for_waiters(2, clause="CLK-2")
    # perf 1: total = 10^9, sleep = 10^9 - 10^7 - 50 µs (16 virtual minutes)
    assert clock.sleeps_of("clk-step") == [990_000_000 - 50], \
        f"throttle sleep {clock.sleeps_of('clk-step')} not through the clock [CLK-2]"
    clock.advance(990_000_000 - 50)
    assert joined(step), "the throttle sleep did not end when the virtual clock passed it [CLK-2]"


@pytest.mark.clause("CLK-2")
@pytest.mark.capability("statistics")
def test_statistics_timestamps_from_the_clock(rt, runtimes, tmp_path) -> None:
    ctx = runtimes()
    path = tmp_path / "s.json"
    clock = VirtualClock()
    stats = rt.GPUStatistics(str(path), clock=clock)
    opts = rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1, sess_duration_us=5)
    stats.run_action(opts)
    path.unlink()
    p = ctx.device_mgr.lookup_device("GPU:0").get_allocator().allocate_raw(256, MiB)
    stats.run_action(opts)
    assert not path.exists(), "[CLK-2]"
    clock.advance(10_000_000)
    stats.run_action(opts)
    assert path.exists(), "10 virtual seconds did not open the next check: real time used [CLK-2]"
    ctx.device_mgr.lookup_device("GPU:0").get_allocator().deallocate_raw(p)


@pytest.mark.clause("CLK-2")
@pytest.mark.parametrize("given", [{}, {"clock": None}], ids=["default", "none"])
def test_statistics_without_a_clock_use_the_real_clock(rt, runtimes, tmp_path, given) -> None:
    """``GPUStatistics`` built without a clock, or with ``clock=None``, times its figures on
    the real clock: its first step boundary dumps the duration it was given."""
    if "statistics" not in rt.CAPABILITIES:
        pytest.skip("NOT_SUPPORTED: the runtime has no statistics")
    ctx = runtimes()
    path = tmp_path / "s.json"
    stats = rt.GPUStatistics(str(path), **given)
    stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                sess_duration_us=1234))
    assert path.exists(), f"GPUStatistics({given or ''}) wrote no statistics [CLK-2]"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert (doc["Durations"], doc["miniBatchDuration"]) == ({"graph_1": 1234}, 1234), (
        f"GPUStatistics({given or ''}) dumped Durations {doc['Durations']} and "
        f"miniBatchDuration {doc['miniBatchDuration']}, expected {{'graph_1': 1234}} and 1234 "
        f"[CLK-2]")


@pytest.mark.clause("CLK-3")
@pytest.mark.capability("file_listener")
def test_listener_close_ends_its_wait(rt, no_thread_leak, tmp_path) -> None:
    clock = VirtualClock()
    fl = rt.FileListener(clock=clock, poll_interval_s=3600.0)
    fl.register_file_listener(str(tmp_path / "c.json"), "h", lambda c: None)
    with precondition("FL-2", "the listener waits for its next poll"):
        clock.wait_for_waiters(1, clause="FL-2")
    closer, out = run_in_thread(fl.close, name="closer")
    assert joined(closer), "FileListener.close() did not end the poll wait [CLK-3]"
    assert "error" not in out, "[CLK-3]"


@pytest.mark.clause("CLK-3", "DEVICE-8")
@pytest.mark.capability("resource_management")
def test_runtime_close_ends_a_suspended_step(rt, no_thread_leak, control_env, tmp_path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"perfControl": 0}))
    clock = VirtualClock()
    ctx = rt.create_runtime(num_gpus=1, gpu_memory_bytes=16 * MiB, clock=clock,
                            config_file=str(cfg), status_file=None)
    try:
        perf_in_force(ctx.resource_management, 0)
        step, _ = run_in_thread(lambda: ctx.resource_management.run_action(
            rt.SessionRunActionOptions(device_mgr=ctx.device_mgr)), name="suspended")
        with precondition("RM-12", "perfControl 0 suspends the step"):
            clock.wait_for_waiters(2, clause="RM-12")
            assert step.is_alive(), "perfControl 0 did not suspend the step [RM-12]"
    finally:
        closer, _ = run_in_thread(ctx.close, name="closer")
        assert joined(closer), "RuntimeContext.close() hung with a suspended step [CLK-3]"
    assert joined(step), "RuntimeContext.close() did not end the suspended step [CLK-3]"


@pytest.mark.clause("CLK-1")
@pytest.mark.parametrize("duration_us", [1, 2, 3])
def test_real_clock_waits_of_a_few_microseconds_last_them(rt, duration_us) -> None:
    """Only `timeout_us <= 0` returns at once: a wait of 1 µs lasts at least 1 µs, to the
    nanosecond, each of many times (a call that returns at once takes a fraction of one)."""
    clock = real_clock(rt)
    ev = threading.Event()
    took_ns = []
    for _ in range(50):
        start = time.monotonic_ns()
        got = clock.wait(ev, duration_us)
        took_ns.append(time.monotonic_ns() - start)
        assert got is False, f"wait(unset event, {duration_us}) returned {got!r} [CLK-1]"
    short = [t for t in took_ns if t < duration_us * 1000]
    assert not short, (f"wait(unset event, {duration_us} µs) returned after {min(short)} ns "
                       f"({len(short)} of {len(took_ns)} waits short of it) [CLK-1]")


@pytest.mark.clause("CLK-1")
@pytest.mark.parametrize("timeout_us", [10**15, 9 * 10**15])
def test_real_clock_waits_for_all_that_is_left(rt, timeout_us) -> None:
    """Each wait on the event asks for what is left of the timeout, not less: a wait of 10^9 s
    set by its first event wait saw that wait asked for 10^9 s, less only the time the call
    took before it (a wait that asks for less wakes before its deadline for nothing)."""
    clock = real_clock(rt)
    ev = _SetWhenWaitedOn()
    start = time.monotonic_ns()
    got = clock.wait(ev, timeout_us)
    took_s = (time.monotonic_ns() - start) / 1e9
    assert got is True, f"wait(event set during the wait, {timeout_us}) returned {got!r} [CLK-1]"
    assert ev.asked, f"wait(event, {timeout_us}) did not wait on the event [CLK-1]"
    want_s = min(timeout_us / 1e6, threading.TIMEOUT_MAX) - took_s - 1e-3
    asked = ev.asked[0]
    assert asked is not None and asked >= want_s, (
        f"wait(event, {timeout_us} µs) first waited on the event for {asked} s, less than the "
        f"{want_s:.6f} s left of it [CLK-1]")
