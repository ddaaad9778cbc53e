"""SessionRunActionRegistry: actions run before and after every session run (SPEC.md, REG).

AntMan's ``session_run_action_registry.{h,cc}``: two groupings, integer phases run in
ascending order (negative phases allowed), registration order within a phase, the first
error stops the grouping and propagates from ``session.run``. Unlike the original the
registry is safe under concurrent use: registration takes a lock, and ``run_grouping``
iterates an immutable snapshot, so actions run without the registry's lock and may
themselves register or unregister actions (taking effect from the next run).
"""

from __future__ import annotations

import abc
import enum
import logging
import threading
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Callable, TypeVar

__all__ = [
    "Grouping", "SessionRunAction", "SessionRunActionOptions", "SessionRunActionRegistry",
    "global_registry", "register_session_run_action",
]

log = logging.getLogger(__name__)

_UINT64_MAX = (1 << 64) - 1


class Grouping(enum.IntEnum):
    PRE_SESSION_RUN = 0
    POST_SESSION_RUN = 1


@dataclass
class SessionRunActionOptions:
    """What a session hands to its actions (TF ``SessionRunActionOptions``)."""

    device_mgr: Any = None
    session: Any = None
    graph_id: int = 0
    sess_duration_us: int = 0

    def __setattr__(self, field: str, value: Any) -> None:
        if field in ("graph_id", "sess_duration_us"):     # AntMan's uint64s (REG-9)
            value = _uint64(value, field)
        super().__setattr__(field, value)


def _uint64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"SessionRunActionOptions: {what} must be an int, got {value!r}")
    value = int(value)
    if not 0 <= value <= _UINT64_MAX:
        raise ValueError(f"SessionRunActionOptions: {what} must be in [0, 2^64-1], got {value}")
    return value


class SessionRunAction(abc.ABC):
    """An action: ``run_action(options)``; raising an exception is its error status."""

    _name: str | None = None

    @property
    def name(self) -> str:
        """The action's name; by default its class name (as REGISTER_SESSION_RUN_ACTION)."""
        return self._name if self._name is not None else type(self).__name__

    @name.setter
    def name(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"an action's name must be a str, got {value!r}")
        self._name = value

    @abc.abstractmethod
    def run_action(self, options: SessionRunActionOptions) -> None:
        """Run once per session run; raise to fail the run."""


def _grouping(grouping: Any) -> Grouping:
    if isinstance(grouping, bool) or not isinstance(grouping, int):   # 1.0 == 1, True == 1
        raise ValueError(f"grouping must be a Grouping or an int, got {grouping!r}")
    try:
        return Grouping(grouping)
    except ValueError:
        raise ValueError(f"unknown grouping {grouping!r}; expected PRE_SESSION_RUN (0) or "
                         f"POST_SESSION_RUN (1)") from None


def _phase(phase: Any) -> int:
    if not isinstance(phase, int) or isinstance(phase, bool):
        raise TypeError(f"phase must be an int, got {phase!r}")
    return phase


class SessionRunActionRegistry:
    """Actions per grouping, run by phase ascending then registration order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # grouping -> (phase, action) registrations in registration order
        self._groups: dict[Grouping, list[tuple[int, Any]]] = {g: [] for g in Grouping}
        # grouping -> flattened (phase, action) tuples in run order; replaced on change
        self._snapshots: dict[Grouping, tuple[tuple[int, Any], ...]] = {g: () for g in Grouping}

    def register(self, grouping: Grouping | int, phase: int, action: Any) -> None:
        """Append ``action`` to ``phase`` of ``grouping`` (duplicates allowed)."""
        g, p = _grouping(grouping), _phase(phase)
        if not callable(getattr(action, "run_action", None)):
            raise TypeError(f"register({g.name}, {p}, {action!r}): not a SessionRunAction "
                            f"(no run_action method)")
        with self._lock:
            self._groups[g].append((p, action))
            self._rebuild(g)
        log.debug("registered session run action %s at %s/%d",
                  getattr(action, "name", action), g.name, p)

    def unregister(self, grouping: Grouping | int, phase: int, action: Any) -> bool:
        """Remove the first registration of this very object; False when absent."""
        g, p = _grouping(grouping), _phase(phase)
        with self._lock:
            registrations = self._groups[g]
            for i, (q, a) in enumerate(registrations):
                if q == p and a is action:
                    del registrations[i]
                    self._rebuild(g)
                    return True
        return False

    def _rebuild(self, g: Grouping) -> None:
        # Ascending phase; a stable sort keeps registration order within a phase.
        self._snapshots[g] = tuple(sorted(self._groups[g], key=lambda entry: entry[0]))

    def run_grouping(self, grouping: Grouping | int, options: SessionRunActionOptions) -> None:
        """Run every action of ``grouping``; the first exception stops and propagates."""
        snapshot = self._snapshots.get(grouping) if type(grouping) in (Grouping, int) else None
        if snapshot is None:
            snapshot = self._snapshots[_grouping(grouping)]
        for _, action in snapshot:
            action.run_action(options)

    def get_action(self, grouping: Grouping | int, phase: int, name: str) -> Any:
        """The first action at exactly (grouping, phase) whose name is ``name``, or None."""
        g, p = _grouping(grouping), _phase(phase)
        if not isinstance(name, str):
            raise TypeError(f"get_action: name must be a str, got {name!r}")
        for q, a in self._snapshots[g]:           # an immutable snapshot: no lock
            if q == p and getattr(a, "name", None) == name:
                return a
        return None

    def actions(self, grouping: Grouping | int) -> list[tuple[int, Any]]:
        """``(phase, action)`` pairs of ``grouping`` in run order."""
        return list(self._snapshots[_grouping(grouping)])

    def clear(self) -> None:
        with self._lock:
            for g in Grouping:
                self._groups[g].clear()
                self._rebuild(g)


_global_registry = SessionRunActionRegistry()


def global_registry() -> SessionRunActionRegistry:
    """The process-wide registry (TF ``SessionRunActionRegistry::Global()``)."""
    return _global_registry


T = TypeVar("T", bound=type)


def register_session_run_action(grouping: Grouping | int, phase: int,
                                registry: SessionRunActionRegistry | None = None
                                ) -> Callable[[T], T]:
    """Class decorator in the spirit of REGISTER_SESSION_RUN_ACTION.

    Instantiates the class with no arguments, names the instance after the class and
    registers it (in ``registry``, default the global one). Returns the class unchanged.
    """
    g, p = _grouping(grouping), _phase(phase)
    if registry is not None and not isinstance(registry, SessionRunActionRegistry):
        raise TypeError(f"register_session_run_action: registry must be None or a "
                        f"SessionRunActionRegistry, got {registry!r}")

    def decorate(cls: T) -> T:
        action = cls()
        action.name = cls.__name__
        (registry if registry is not None else _global_registry).register(g, p, action)
        return cls

    return decorate
