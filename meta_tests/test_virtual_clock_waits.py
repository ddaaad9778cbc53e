"""``VirtualClock.advance_to_wait_of``: a test moves the clock to a named thread's next clock
wait (a recheck it makes on a period), never past a bound, and never overtakes a thread that
an event already woke (fixtures/virtual_clock.py)."""

from __future__ import annotations

import threading

from fixtures.virtual_clock import VirtualClock


def waiting(clock: VirtualClock, name: str, event: threading.Event, timeout_us: int
            ) -> threading.Thread:
    t = threading.Thread(target=clock.wait, args=(event, timeout_us), name=name, daemon=True)
    t.start()
    clock.wait_for_waiters(1)
    return t


def test_moves_to_the_deadline_of_the_named_threads_wait_within_the_bound() -> None:
    clock = VirtualClock()
    t = waiting(clock, "step", threading.Event(), 100)
    assert clock.advance_to_wait_of("other", 1_000) is None           # no such waiter
    assert clock.advance_to_wait_of("step", 99) is None               # beyond the bound
    assert clock.now_us() == 0
    assert clock.advance_to_wait_of("step", 100) == 100               # at the bound
    t.join(5)
    assert not t.is_alive() and clock.now_us() == 100
    assert clock.advance_to_wait_of("step", 100) is None              # nobody waits now


def test_a_wait_whose_event_is_set_is_not_overtaken() -> None:
    clock = VirtualClock()
    event = threading.Event()
    t = waiting(clock, "step", event, 100_000)
    event.set()                       # woken: it returns without time moving
    assert clock.advance_to_wait_of("step", 100_000) is None
    t.join(5)
    assert not t.is_alive() and clock.now_us() == 0
