"""DirectSession: runs a graph's steps and the session-run actions around them (SPEC.md, SESS).

TensorFlow 1.15's ``DirectSession::Run`` / ``RunInternal`` with AntMan's hooks:

1. the executors for the feed/fetch/target signature are looked up or built (cached; one
   ``graph_id`` per signature, whatever the order of the names);
2. the start time is taken on the injected clock, PRE_SESSION_RUN actions run (an error
   ends the run before the step);
3. the step runs on the executor (a failed step raises its error, POST actions are skipped);
4. POST_SESSION_RUN actions run with ``sess_duration_us`` = now - start (PRE time included)
   and the signature's ``graph_id``; an error from them is raised from ``run``.

Nodes run on the session's inter-op thread pool (``antman-session-inter-op_*``), TF's
default runner; ``close()`` cancels running steps, waits for them, joins the pool and frees
the session's variables and constants.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from .clock import REAL_CLOCK, Clock
from .errors import CancelledError, InvalidArgumentError
from .executor import ExecutorImpl, ExecutorState
from .gpu_resource_management import PHASE as RM_PHASE
from .gpu_resource_management import GPUResourceManagement
from .graph import Graph, parse_tensor_name
from .kernels import SessionResources
from .session_run_action_registry import (Grouping, SessionRunActionOptions,
                                                           SessionRunActionRegistry,
                                                           global_registry)

__all__ = ["DirectSession", "INTER_OP_THREAD_PREFIX"]

INTER_OP_THREAD_PREFIX = "antman-session-inter-op"
_graph_ids = itertools.count(1)
_session_ids = itertools.count()     # tells the pools' thread names apart (SESS-8)


@dataclass
class _ExecutorsAndKeys:
    impl: ExecutorImpl
    graph_id: int
    fetch_index: dict[str, int]            # fetch key -> position in impl.fetches


def _fetch_key(name: str) -> str:
    return "%s:%d" % parse_tensor_name(name)


def _names(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        raise TypeError(f"{what} must be a str or a sequence of str, got {value!r}") from None
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"{what} must contain str names, got {n!r}")
    return names


class DirectSession:
    """A session over a graph and a device manager."""

    def __init__(self, device_mgr: Any, graph: Graph, *,
                 registry: SessionRunActionRegistry | None = None, clock: Clock | None = None,
                 inter_op_threads: int | None = None,
                 on_close: Callable[["DirectSession"], None] | None = None) -> None:
        if not isinstance(graph, Graph):
            raise TypeError(f"graph must be a Graph, got {type(graph).__name__}")
        graph.validate()
        self._device_mgr = device_mgr
        self._graph = graph
        self._registry = registry if registry is not None else global_registry()
        self._clock = clock if clock is not None else REAL_CLOCK
        self._id = next(_session_ids)
        self._pool_prefix = f"{INTER_OP_THREAD_PREFIX}-{self._id}"
        self._lock = threading.Lock()
        self._runs_done = threading.Condition(self._lock)
        self._executors: dict[tuple, _ExecutorsAndKeys] = {}
        self._resources = SessionResources()
        self._in_flight: set[ExecutorState] = set()
        self._running_threads: dict[int, int] = {}    # thread ident -> active run() calls
        self._closed = False
        self._on_close = on_close        # the owner forgets the session (API-7)
        self._step_ids = itertools.count()
        n = inter_op_threads if inter_op_threads is not None else max(4, os.cpu_count() or 1)
        if not isinstance(n, int) or n < 2:
            raise ValueError(f"inter_op_threads must be an int >= 2, got {n!r}")
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=n, thread_name_prefix=self._pool_prefix)

    # -- properties -------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def device_mgr(self) -> Any:
        return self._device_mgr

    @property
    def registry(self) -> SessionRunActionRegistry:
        return self._registry

    @property
    def closed(self) -> bool:
        return self._closed

    def graph_id(self, fetches: Any, feed_dict: Mapping | Iterable[str] | None = None,
                 target_nodes: Any = None) -> int:
        """The ``graph_id`` of a signature (building its executors if needed)."""
        feeds = _names(feed_dict.keys() if isinstance(feed_dict, Mapping) else feed_dict,
                       "feed_dict")
        return self._get_or_create(_names(fetches, "fetches"), feeds,
                                   _names(target_nodes, "target_nodes")).graph_id

    # -- running ----------------------------------------------------------------------------
    def run(self, fetches: Any, feed_dict: Mapping[str, Any] | None = None,
            target_nodes: Any = None) -> list[np.ndarray]:
        """Run one step; returns the fetched values as host (NumPy) arrays, in fetch order."""
        start_us = self._clock.now_us()  # sess_duration_us counts from run entry (SESS clauses)
        fetch_names = _names(fetches, "fetches")
        targets = _names(target_nodes, "target_nodes")
        feeds: dict[str, np.ndarray] = {}
        if feed_dict is not None:
            if not isinstance(feed_dict, Mapping):
                raise TypeError(f"feed_dict must be a mapping, got {type(feed_dict).__name__}")
            for key, value in feed_dict.items():
                if not isinstance(key, str):
                    raise TypeError(f"feed_dict keys must be str tensor names, got {key!r}")
                node_name, _ = parse_tensor_name(key)
                if node_name in feeds:
                    raise InvalidArgumentError(f"{key!r} is fed twice")
                feeds[node_name] = self._to_host_array(key, value)
        if not fetch_names and not targets:
            raise InvalidArgumentError("Must specify at least one fetch or target node")
        me = threading.get_ident()
        with self._lock:
            if self._closed:
                raise RuntimeError("Attempted to use a closed Session.")
            self._running_threads[me] = self._running_threads.get(me, 0) + 1
        try:
            return self._run(start_us, fetch_names, feeds, targets)
        finally:
            with self._lock:
                left = self._running_threads[me] - 1
                if left:
                    self._running_threads[me] = left
                else:
                    del self._running_threads[me]
                self._runs_done.notify_all()

    def _run(self, start_us: int, fetch_names: list[str], feeds: dict[str, np.ndarray],
             targets: list[str]) -> list[np.ndarray]:
        eak = self._get_or_create(fetch_names, feeds, targets)    # keyed by the fed nodes
        step_id = next(self._step_ids)
        pre = SessionRunActionOptions(device_mgr=self._device_mgr, session=self,
                                      graph_id=eak.graph_id, sess_duration_us=0)
        self._registry.run_grouping(Grouping.PRE_SESSION_RUN, pre)
        rm = self._resource_management()
        started: list[ExecutorState] = []

        def on_start(state: ExecutorState) -> None:
            started.append(state)
            with self._lock:
                self._in_flight.add(state)
                if self._closed:
                    state.cancel(CancelledError("Session was closed."))

        try:
            values = eak.impl.run(feeds=feeds, runner=self._runner, resources=self._resources,
                                  clock=self._clock, resource_management=rm, step_id=step_id,
                                  key=eak.graph_id, on_start=on_start)
        except BaseException as exc:
            # Left while the step runs (a KeyboardInterrupt in the wait, SESS-9): the step is
            # cancelled as close() cancels it, so that nothing of it outlives the call.
            for state in started:            # the one step of this run, once it started
                if not state.done:
                    state.cancel(CancelledError(
                        f"the run was interrupted ({type(exc).__name__})"))
            raise
        finally:
            for state in started:
                with self._lock:
                    self._in_flight.discard(state)
        outputs = [values[eak.fetch_index[_fetch_key(f)]] for f in fetch_names]
        post = SessionRunActionOptions(device_mgr=self._device_mgr, session=self,
                                       graph_id=eak.graph_id,
                                       sess_duration_us=self._clock.now_us() - start_us)
        self._registry.run_grouping(Grouping.POST_SESSION_RUN, post)
        return outputs

    def _runner(self, closure: Callable[[], None]) -> None:
        self._pool.submit(closure)

    def _to_host_array(self, key: str, value: Any) -> np.ndarray:
        get = getattr(value, "get", None)
        if not isinstance(value, np.ndarray) and callable(get) and hasattr(value, "device"):
            value = get()  # a CuPy array
        try:
            return np.asarray(value)  # the Placeholder kernel copies it into a device buffer
        except Exception as exc:
            raise InvalidArgumentError(f"cannot feed {key!r}: {exc}") from None

    def _get_or_create(self, fetches: list[str], feeds: Iterable[str],
                       targets: list[str]) -> _ExecutorsAndKeys:
        """TF ``GetOrCreateExecutors``: one entry per signature, names in any order."""
        key = (tuple(sorted({parse_tensor_name(f)[0] for f in feeds})),
               tuple(sorted({_fetch_key(f) for f in fetches})),
               tuple(sorted(set(targets))))
        with self._lock:                 # a signature's first runs build its executor once
            eak = self._executors.get(key)
            if eak is None:
                impl = ExecutorImpl(self._graph, self._device_mgr, feeds=key[0],
                                    fetches=key[1], targets=key[2])
                eak = _ExecutorsAndKeys(impl, next(_graph_ids),
                                        {name: i for i, name in enumerate(impl.fetches)})
                self._executors[key] = eak
        return eak

    def _resource_management(self) -> GPUResourceManagement | None:
        """The registry's GPUResourceManagement action (POST, phase 2), if one is registered."""
        rm = self._registry.get_action(Grouping.POST_SESSION_RUN, RM_PHASE,
                                       "GPUResourceManagement")
        return rm if isinstance(rm, GPUResourceManagement) else None

    # -- closing ----------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel running steps, wait for them, join the thread pool, free variables."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            states = list(self._in_flight)
        for state in states:
            state.cancel(CancelledError("Session was closed."))
        rm = self._resource_management()
        if rm is not None:
            rm.wake_suspended()                    # a step suspended at perfControl 0
        me = threading.get_ident()
        # One of this session's own pool threads cannot wait for the runs it is part of.
        on_pool = threading.current_thread().name.startswith(self._pool_prefix + "_")
        with self._lock:
            while not on_pool and any(t != me for t in self._running_threads):
                self._runs_done.wait()
        self._pool.shutdown(wait=not on_pool)
        self._resources.release_all()
        if self._on_close is not None:
            self._on_close(self)

    def __enter__(self) -> "DirectSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"DirectSession(graph={self._graph!r}, signatures={len(self._executors)}, "
                f"closed={self._closed})")
