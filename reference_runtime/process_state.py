"""The runtime context: what TensorFlow's process start builds (SPEC.md API-7, DEVICE).

``create_runtime`` builds, in this order: the file listener; the AntMan actions
(``GPUStatistics`` at POST/1, ``GPUResourceManagement`` at POST/2, each only when its file
is configured), whose construction applies the environment side effects of RM-1; then the
devices and their allocators, which read those variables. ``RuntimeContext.close()``
wakes suspended steps, closes sessions, unregisters everything and joins every thread the
runtime started.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from .clock import REAL_CLOCK, Clock
from .device import Backend, DeviceMgr, create_devices, get_pci_bus_id, select_backend
from .env import ENV_DEFAULT, path_from_env
from .file_listener import DEFAULT_POLL_INTERVAL_S, FileListener
from .gpu_resource_management import (CONFIG_FILE_ENV_VAR,
                                                       GPUResourceManagement)
from .gpu_resource_management import PHASE as RM_PHASE
from .gpu_statistics import STATUS_FILE_ENV_VAR, GPUStatistics
from .gpu_statistics import PHASE as STAT_PHASE
from .session_run_action_registry import Grouping, SessionRunActionRegistry

__all__ = ["RuntimeContext", "create_runtime"]

log = logging.getLogger(__name__)


class RuntimeContext:
    """Devices, actions, listener and sessions of one runtime; ``close()`` tears all down."""

    def __init__(self, *, device_mgr: DeviceMgr, registry: SessionRunActionRegistry,
                 clock: Clock, file_listener: FileListener, backend: Backend,
                 resource_management: GPUResourceManagement | None,
                 statistics: GPUStatistics | None) -> None:
        self.device_mgr = device_mgr
        self.registry = registry
        self.clock = clock
        self.file_listener = file_listener
        self.backend = backend
        self.resource_management = resource_management
        self.statistics = statistics
        self._lock = threading.Lock()
        self._sessions: dict[int, Any] = {}      # the open sessions, by id() (API-7)
        self._closed = False

    def new_session(self, graph: Any) -> Any:
        """A ``DirectSession`` over this runtime's devices, registry and clock."""
        from .direct_session import DirectSession
        with self._lock:
            if self._closed:
                raise RuntimeError("new_session(): the runtime is closed")
            session = DirectSession(self.device_mgr, graph, registry=self.registry,
                                    clock=self.clock, on_close=self._forget_session)
            self._sessions[id(session)] = session
        return session

    def _forget_session(self, session: Any) -> None:
        """A closed session is not kept (API-7: memory bounded by the open sessions)."""
        with self._lock:
            if self._sessions.get(id(session)) is session:
                del self._sessions[id(session)]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close sessions and actions, stop the listener, close devices; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
        errors: list[BaseException] = []
        rm = self.resource_management
        if rm is not None:
            rm.close()                       # wakes suspended steps and throttle sleeps
        for session in sessions:
            try:
                session.close()
            except Exception as exc:         # keep tearing down; report the first error
                log.exception("closing session %r failed", session)
                errors.append(exc)
        # Resource management or statistics disabled (None) was never registered:
        # unregister then finds nothing.
        self.registry.unregister(Grouping.POST_SESSION_RUN, RM_PHASE, rm)
        self.registry.unregister(Grouping.POST_SESSION_RUN, STAT_PHASE, self.statistics)
        self.file_listener.close()
        self.device_mgr.close()
        self.backend.detach(self.device_mgr)
        if errors:
            raise errors[0]

    def __enter__(self) -> "RuntimeContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"RuntimeContext(backend={self.backend.name!r}, devices="
                f"{[d.name for d in self.device_mgr.list_devices()]}, "
                f"resource_management={self.resource_management is not None}, "
                f"statistics={self.statistics is not None})")


def create_runtime(*, num_gpus: int = 1, gpu_memory_bytes: int = 1 << 30,
                   backend: Backend | str | None = None, clock: Clock | None = None,
                   config_file: str | os.PathLike | None = ENV_DEFAULT,
                   status_file: str | os.PathLike | None = ENV_DEFAULT,
                   poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
                   registry: SessionRunActionRegistry | None = None,
                   allow_growth: bool = False) -> RuntimeContext:
    """Build a runtime (API-7). File paths default to ``$GPU_CONFIG_FILE`` / ``$GPU_STATUS_FILE``;
    an empty path or None disables the action."""
    clock = clock if clock is not None else REAL_CLOCK
    if backend is None or isinstance(backend, str):
        backend = select_backend(backend, num_gpus=num_gpus, gpu_memory_bytes=gpu_memory_bytes)
    config_file = path_from_env(config_file, CONFIG_FILE_ENV_VAR)
    status_file = path_from_env(status_file, STATUS_FILE_ENV_VAR)
    registry = registry if registry is not None else SessionRunActionRegistry()
    listener = FileListener(clock=clock, poll_interval_s=poll_interval_s)
    statistics: GPUStatistics | None = None
    rm: GPUResourceManagement | None = None
    try:
        if status_file:
            statistics = GPUStatistics(status_file, clock=clock)
            registry.register(Grouping.POST_SESSION_RUN, STAT_PHASE, statistics)
        if config_file:
            # Registers itself at POST/2 before its listener delivers the start-up content,
            # and forces TF_FORCE_GPU_ALLOW_GROWTH / TF_GPU_VMEM before the devices exist.
            rm = GPUResourceManagement(config_file, clock=clock, file_listener=listener,
                                       registry=registry,
                                       gpu_bus_ids=_gpu_bus_ids(backend, num_gpus))
        device_mgr = create_devices(backend=backend, clock=clock, num_gpus=num_gpus,
                                    gpu_memory_bytes=gpu_memory_bytes,
                                    allow_growth=allow_growth)
        backend.attach(device_mgr)
    except BaseException:
        # No step ran: closing the listener drops the management's handler and joins its thread.
        if rm is not None:
            registry.unregister(Grouping.POST_SESSION_RUN, RM_PHASE, rm)
        if statistics is not None:
            registry.unregister(Grouping.POST_SESSION_RUN, STAT_PHASE, statistics)
        listener.close()
        raise
    return RuntimeContext(device_mgr=device_mgr, registry=registry, clock=clock,
                          file_listener=listener, backend=backend, resource_management=rm,
                          statistics=statistics)


def _gpu_bus_ids(backend: Backend, num_gpus: int | None) -> list[str]:
    """The bus ids of the GPUs the devices will have, as ``get_pci_bus_id`` gives them (so
    that a config's entry for one is never the one RM-20's bound drops); a GPU the backend
    cannot describe is left out (creating the devices reports it)."""
    found = []
    try:
        count = backend.gpu_count()
        if num_gpus is not None:                # None: every GPU of the backend (DEVICE-8)
            count = min(int(num_gpus), count)
    except Exception:                         # noqa: BLE001 - create_devices reports it
        return found
    for index in range(count):              # none for a count of 0 or less
        try:
            bus_id = get_pci_bus_id(f"pci bus id: {backend.gpu_info(index).pci_bus_id}")
        except Exception:                     # noqa: BLE001 - create_devices reports it
            continue
        if bus_id:
            found.append(bus_id)
    return found
