"""Helpers of the execution tests (SESS, EXEC, OPM, E2E): runtimes, recorders, graph pieces.

Everything here reaches the implementation through the ``rt`` module it is given.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from conformance.control_helpers import run_in_thread  # noqa: F401 - shared helper

CPU = "/device:CPU:0"
GPU = "/device:GPU:0"
OP_MANAGER_PREFIX = "antman-gpu-op-manager"
INTER_OP_PREFIX = "antman-session-inter-op"
POST = 1  # Grouping.POST_SESSION_RUN
PRE = 0   # Grouping.PRE_SESSION_RUN


@contextlib.contextmanager
def sim_runtime(rt: Any, **kw: Any) -> Iterator[Any]:
    """``create_runtime`` on the simulated backend, without config or status file by default."""
    kw.setdefault("backend", "sim")
    kw.setdefault("config_file", None)
    kw.setdefault("status_file", None)
    ctx = rt.create_runtime(**kw)
    try:
        yield ctx
    finally:
        ctx.close()


class Log:
    """A thread-safe event log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Any] = []

    def add(self, event: Any) -> None:
        with self._lock:
            self.events.append(event)

    def clear(self) -> None:
        with self._lock:
            self.events.clear()

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self.events)


class RecordingBackend:
    """A backend (EXEC-14's ``Backend`` protocol) wrapping another one, logging each
    ``synchronize(index)`` as ``("synchronize", index)`` in ``log`` and then calling
    ``on_sync(index)`` if given (e.g. to let a virtual clock's time pass, as a GPU finishing
    its queued work would)."""

    def __init__(self, inner: Any, log: Log,
                 on_sync: Callable[[int | None], None] | None = None) -> None:
        self._inner, self._log, self._on_sync = inner, log, on_sync
        self.name, self.xp = inner.name, inner.xp

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def synchronize(self, index: int | None = None) -> None:
        self._log.add(("synchronize", index))
        if self._on_sync is not None:
            self._on_sync(index)
        self._inner.synchronize(index)


def recording_action(rt: Any, name: str, log: Log, *, raises: BaseException | None = None,
                     on_run: Callable[[Any], None] | None = None) -> Any:
    """A SessionRunAction that logs ``(name, options fields)`` and optionally raises."""

    class Recorder(rt.SessionRunAction):
        def run_action(self, options: Any) -> None:
            log.add((name, options.graph_id, options.sess_duration_us, options.session,
                     options.device_mgr))
            if on_run is not None:
                on_run(options)
            if raises is not None:
                raise raises

    action = Recorder()
    action.name = name
    return action


def py_func(log: Log | None, tag: str, *, value: Any = 0.0, record: str = "name",
            before: Callable[[], None] | None = None) -> Callable[..., Any]:
    """A PyFunc body that logs ``tag`` (or ``(tag, thread name)``) and returns ``value``."""

    def func(*args: Any) -> Any:
        if before is not None:
            before()
        if log is not None:
            if record == "thread":
                log.add((tag, threading.current_thread().name, threading.get_ident()))
            else:
                log.add(tag)
        return np.float32(value)

    return func


#: Manager threads alive when the current test began: an earlier test's, left behind by a
#: broken implementation. That test failed on them; this one must not be blamed for them.
_EARLIER_MANAGERS: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def earlier_manager_threads_set_aside() -> None:
    """Autouse in the modules that import it: at a test's start, the manager threads alive
    are not the test's (``manager_threads``)."""
    _EARLIER_MANAGERS.clear()
    _EARLIER_MANAGERS.update(t for t in threading.enumerate()
                             if t.name.startswith(OP_MANAGER_PREFIX))


def manager_threads() -> list[str]:
    """The GpuOpManager threads alive that the current test's steps started."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith(OP_MANAGER_PREFIX) and t not in _EARLIER_MANAGERS]


def antman_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("antman-")}


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` in real time (generous bound: a loaded machine is slow)."""
    limit = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > limit:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.005)


