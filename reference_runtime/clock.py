"""The injectable clock (SPEC.md, CLK clauses).

Every sleep, wait and timestamp in the runtime goes through a ``Clock``, so that a test
can replace real time with a virtual clock it advances explicitly
(``fixtures.virtual_clock.VirtualClock``). Waits take a ``threading.Event`` so that a
shutdown can interrupt them: suspension, listener polling and idle slots all wait on
their owner's stop event.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "RealClock", "REAL_CLOCK"]


class Clock(Protocol):
    """Time source and waiting primitive of the runtime."""

    def now_us(self) -> int:
        """Monotonic time in integer microseconds."""
        ...

    def time_s(self) -> int:
        """Wall-clock time in whole seconds, as C's ``time(0)`` (statistics timestamps)."""
        ...

    def wait(self, event: threading.Event, timeout_us: int) -> bool:
        """Block until ``event`` is set or ``timeout_us`` microseconds have passed.

        Returns True when the event was set (the wait was interrupted), False on timeout.
        A timeout of 0 or less returns at once with the event's state.
        """
        ...

    def sleep_us(self, duration_us: int, cancel: threading.Event | None = None) -> bool:
        """Sleep ``duration_us`` microseconds unless ``cancel`` is set first.

        Returns True when the whole duration elapsed, False when it was cancelled.
        """
        ...


class RealClock:
    """The process's real clocks: ``time.monotonic_ns`` and ``time.time``.

    Waits of any length are accepted: ``threading`` refuses timeouts above
    ``threading.TIMEOUT_MAX`` (about 292 years) with ``OverflowError``, so a longer wait is
    made of waits of at most that length (a poll interval of 1e10 s is a valid, if useless,
    setting and must not kill the thread that waits).
    """

    def now_us(self) -> int:
        return time.monotonic_ns() // 1000

    def time_s(self) -> int:
        return int(time.time())

    def wait(self, event: threading.Event, timeout_us: int) -> bool:
        if timeout_us <= 0:
            return event.is_set()
        deadline_ns = time.monotonic_ns() + int(timeout_us) * 1000
        while True:
            left_s = (deadline_ns - time.monotonic_ns()) / 1e9
            if left_s <= 0:
                return event.is_set()
            if event.wait(min(left_s, threading.TIMEOUT_MAX)):   # a piece of a longer wait
                return True

    def sleep_us(self, duration_us: int, cancel: threading.Event | None = None) -> bool:
        # A sleep is a wait on ``cancel``, or on an event nobody sets: one deadline rule.
        return not self.wait(cancel if cancel is not None else threading.Event(), duration_us)

    def __repr__(self) -> str:
        return "RealClock()"


REAL_CLOCK = RealClock()
