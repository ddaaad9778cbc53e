"""TF 1.15 ``AllocatorRetry``: wait for frees before giving up on an allocation (BFC-12).

The loop calls ``alloc_func(verbose=False)``; the first failure sets a deadline of
``now + max_wait_us`` on the injected clock; while ``now < deadline`` it waits until a
``notify_dealloc`` or the deadline and tries again; once the deadline has passed it makes a
last call with ``verbose=True`` and returns its result (possibly None).

Unlike the condition variable of the original, a free that happens between a failed
attempt and the wait is never missed: each waiter waits on the event that was current
when it started its attempt.
"""

from __future__ import annotations

import threading
from typing import Callable

from .clock import REAL_CLOCK, Clock

__all__ = ["AllocatorRetry", "DEFAULT_MAX_WAIT_US"]

DEFAULT_MAX_WAIT_US = 10_000_000  # kMaxMillisToWait = 10000


class AllocatorRetry:
    """Retries a failed allocation while frees happen, up to a deadline on ``clock``."""

    __slots__ = ("_clock", "_mu", "_event", "_waiters")

    def __init__(self, clock: Clock | None) -> None:
        self._clock = clock if clock is not None else REAL_CLOCK
        self._mu = threading.Lock()
        self._event = threading.Event()
        self._waiters = 0

    def allocate_raw(self, alloc_func: Callable[[bool], int | None],
                     max_wait_us: int) -> int | None:
        """Run ``alloc_func(verbose)`` until it succeeds or ``max_wait_us`` has passed. A
        request of 0 bytes never comes here: the allocator answers it with None first."""
        clock = self._clock
        deadline: int | None = None
        with self._mu:
            self._waiters += 1
        try:
            while True:
                with self._mu:
                    event = self._event
                ptr = alloc_func(False)
                if ptr is not None:
                    return ptr
                now = clock.now_us()
                if deadline is None:
                    deadline = now + max_wait_us
                if now < deadline:
                    clock.wait(event, deadline - now)
                else:
                    return alloc_func(True)
        finally:
            with self._mu:
                self._waiters -= 1

    def notify_dealloc(self) -> None:
        """Wake every waiter (TF ``NotifyDealloc``); free of cost when nobody waits."""
        if self._waiters:
            with self._mu:
                event = self._event
                self._event = threading.Event()
            event.set()
