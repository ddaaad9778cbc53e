"""Bounds on AntMan's hangs and aborts, so that a certification of the adapter ends.

Where AntMan 1.15 aborts the process (a failed ``CHECK``, a jsoncpp assertion, a thread
joining itself, SIGFPE) the adapter raises ``AntManGuardError`` naming what the original
does; where it waits for ever (a busy loop no event ends, an unbounded join, a wait that
``close()`` cannot interrupt) the wait is bounded by ``GUARD_S`` seconds of real time after
the event that would end it in the specification, and then ends as the specification's
would (or raises, where nothing would end it at all).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["AntManGuardError", "GUARD_S", "SPIN_LIMIT", "LateEvent", "WhenEvent"]

#: Real seconds an AntMan wait that never ends is kept going after the event the
#: specification ends it on (longer than the suite's bounded waits, shorter than its
#: per-test timeout).
GUARD_S = 8.0
#: Attempts of a loop that never ends in AntMan (the backpedal of D-BFC-1, the doubling of
#: D-BFC-5) before the adapter gives up.
SPIN_LIMIT = 10_000


class AntManGuardError(RuntimeError):
    """AntMan 1.15 would abort the process or never return here."""


class LateEvent(threading.Event):
    """Set ``GUARD_S`` real seconds after ``cause`` is set: a wait on it models AntMan's
    uninterruptible ``usleep`` loop, which ``cause`` (``close()``) does not end, bounded so
    that the thread ends."""

    def __init__(self, cause: threading.Event, guard_s: float = GUARD_S) -> None:
        super().__init__()
        self._cause = cause
        self._guard_s = guard_s
        self._seen: float | None = None

    def is_set(self) -> bool:
        if super().is_set():
            return True
        if not self._cause.is_set():
            return False
        now = time.monotonic()
        if self._seen is None:
            self._seen = now
        if now - self._seen >= self._guard_s:
            self.set()
            return True
        return False

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = 0.01 if deadline is None else min(0.01, deadline - time.monotonic())
            if left <= 0:
                return self.is_set()
            time.sleep(left)
        return True


class WhenEvent(threading.Event):
    """Set as soon as ``condition()`` holds, seen by whoever asks (``is_set``): the cause of a
    ``LateEvent`` that nothing sets, because the loop that would notice it is itself blocked
    in the wait (a suspension that a closing session ends in the specification)."""

    def __init__(self, condition: Callable[[], bool]) -> None:
        super().__init__()
        self._condition = condition

    def is_set(self) -> bool:
        if not super().is_set() and self._condition():
            self.set()
        return super().is_set()
