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
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "RealClock", "REAL_CLOCK"]


@runtime_checkable
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
    """The process's real clocks: ``time.monotonic_ns`` and ``time.time``."""

    def now_us(self) -> int:
        return time.monotonic_ns() // 1000

    def time_s(self) -> int:
        return int(time.time())

    def wait(self, event: threading.Event, timeout_us: int) -> bool:
        if timeout_us <= 0:
            return event.is_set()
        return event.wait(timeout_us / 1e6)

    def sleep_us(self, duration_us: int, cancel: threading.Event | None = None) -> bool:
        if duration_us <= 0:
            return not (cancel is not None and cancel.is_set())
        if cancel is None:
            time.sleep(duration_us / 1e6)
            return True
        return not cancel.wait(duration_us / 1e6)

    def __repr__(self) -> str:
        return "RealClock()"


REAL_CLOCK = RealClock()
