"""No test waits for a clock nobody moves (fixtures/virtual_clock.py, SPEC.md section 7).

A manual virtual clock whose every test thread waits on it, with no thread left to advance
it, fails at once (``ClockStall``) naming the waiters and the clause; a wait that another
thread of the test can still end (by an advance or an event) is left alone. The harness's
own checks carry the clause their caller passes.
"""

from __future__ import annotations

import threading
import time

import pytest

from fixtures.virtual_clock import SPIN_LIMIT, ClockStall, SettleTimeout, VirtualClock

BOUND_S = 30.0         # real time: a stall is reported within 0.1 s; generous for a loaded host


def in_test_thread(body, name: str = "test-main") -> tuple[threading.Thread, list]:
    """Run ``body`` (which makes its own clock) in a thread standing for the test's thread."""
    out: list = []

    def run() -> None:
        try:
            out.append(("ok", body()))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            out.append(("raised", exc))

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    return t, out


def test_the_only_thread_waiting_on_the_clock_fails_at_once() -> None:
    clocks: list[VirtualClock] = []

    def body():
        clock = VirtualClock(clause="BFC-12")
        clocks.append(clock)
        return clock.sleep_us(10_000_000)

    t, out = in_test_thread(body)
    t.join(BOUND_S)
    if t.is_alive():
        clocks[0].advance(10_000_000)
        t.join(BOUND_S)
        pytest.fail("a wait that no thread could end was not reported: the test would hang")
    (kind, exc), = out
    assert kind == "raised" and isinstance(exc, ClockStall), out
    assert "test-main (waits 10000000 us from 0 us)" in str(exc) and str(exc).endswith(
        "[BFC-12]"), str(exc)


def test_a_stall_names_every_waiter() -> None:
    clocks: list[VirtualClock] = []

    def body():
        clock = VirtualClock()
        clocks.append(clock)
        helper = threading.Thread(target=lambda: clock.sleep_us(5), name="test-helper",
                                  daemon=True)
        helper.start()
        clock.wait_for_waiters(1)
        try:
            return clock.wait(threading.Event(), 7)
        finally:
            clock.advance(10)
            helper.join(BOUND_S)

    t, out = in_test_thread(body)
    t.join(BOUND_S)
    if t.is_alive():
        clocks[0].advance(100)
        t.join(BOUND_S)
        pytest.fail("two threads waiting on an unmoved clock were not reported")
    (kind, exc), = out
    assert kind == "raised" and isinstance(exc, ClockStall), out
    assert "test-helper (waits 5 us" in str(exc) and "test-main (waits 7 us" in str(exc)
    assert "[" not in str(exc).rsplit(":", 1)[-1], "no clause was given: no tag"


@pytest.mark.parametrize("how", ["event", "advance"])
def test_a_wait_another_thread_will_end_is_left_alone(how: str) -> None:
    def body():
        clock = VirtualClock(clause="RM-12")
        event = threading.Event()

        def later() -> None:
            time.sleep(0.4)            # longer than the stall delay: the waiter is not alone
            if how == "event":
                event.set()
            else:
                clock.advance(1_000)

        helper = threading.Thread(target=later, name="test-helper", daemon=True)
        helper.start()
        try:
            return clock.wait(event, 1_000)
        finally:
            helper.join(BOUND_S)

    t, out = in_test_thread(body)
    t.join(BOUND_S)
    assert not t.is_alive() and out == [("ok", how == "event")], out


def test_threads_that_were_running_before_the_clock_are_not_the_tests() -> None:
    stop = threading.Event()
    bystander = threading.Thread(target=stop.wait, name="bystander", daemon=True)
    bystander.start()
    try:
        t, out = in_test_thread(lambda: VirtualClock(clause="CLK-3").sleep_us(1))
        t.join(BOUND_S)
        assert not t.is_alive() and out and isinstance(out[0][1], ClockStall), out
    finally:
        stop.set()
        bystander.join(BOUND_S)


def test_auto_advance_never_stalls() -> None:
    t, out = in_test_thread(lambda: VirtualClock(auto_advance=True).sleep_us(10))
    t.join(BOUND_S)
    assert out == [("ok", True)], out


def test_harness_checks_carry_the_callers_clause() -> None:
    clock = VirtualClock()
    with pytest.raises(SettleTimeout) as caught:
        clock.wait_for_waiters(1, timeout_s=0.05, clause="RM-12")
    assert str(caught.value) == "expected 1 threads waiting on the clock, found 0: [] [RM-12]"
    with pytest.raises(SettleTimeout) as caught:
        VirtualClock(clause="FL-2").wait_for_waiters(2, timeout_s=0.05)
    assert str(caught.value).endswith("[FL-2]")
    with pytest.raises(SettleTimeout) as caught:
        clock.wait_for_waiters(1, timeout_s=0.05)
    assert str(caught.value).endswith("found 0: []"), "no clause was given: no tag"


@pytest.mark.parametrize("auto", [False, True])
def test_a_thread_spinning_on_zero_waits_fails_at_once(auto: bool) -> None:
    """A retry loop that waits ``deadline - now`` while ``now <= deadline`` spins at the
    deadline: time never passes between its waits."""
    clock = VirtualClock(auto_advance=auto, clause="BFC-12")
    deadline = 1_000
    if not auto:
        clock.advance(deadline)                 # the test moved time to the deadline
    with pytest.raises(ClockStall, match=r"waited 0 us 10000 times in a row at 1000 us: time "
                                         r"never passes between its waits \[BFC-12\]$"):
        while True:
            now = clock.now_us()
            if now <= deadline:
                clock.wait(threading.Event(), deadline - now)
            else:                                   # never reached: the loop spins
                break
    # Zero waits at instants that move on are no spin.
    for _ in range(2 * SPIN_LIMIT):
        clock.wait(threading.Event(), 0)
        clock.advance(1)
