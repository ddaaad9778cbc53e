"""The graph executor (TensorFlow's ``ExecutorImpl`` / ``ExecutorState``), SPEC.md EXEC and OPM.

``ExecutorImpl`` is built once per feed/fetch/target signature: the graph pruned to what
the fetches and targets need (fed nodes become roots), each node bound to its kernel and
device. ``ExecutorState`` runs one step, as TF 1.15 does:

- ``run_async``: the root nodes (no inputs) are handed to the runner, one ``process`` each;
- ``process``: runs nodes from its inline queue until empty; a node's outputs are
  propagated to its consumers, and consumers whose inputs are all there become ready;
- ``schedule_ready``: inexpensive ready nodes stay on the current thread (inline queue),
  expensive ones go to the runner, except that the last expensive one runs inline when
  nothing else is inline (TF's tail-recursion rule); roots and the consumers of async or
  queued kernels go to the runner, except the GPU ops of a throttled step, which the
  thread that made them ready queues at once (no thread hand-off per op);
- the first error (kernel error or failed allocation) aborts the step: no node starts after
  it, the step ends once running kernels return, and every buffer of the step is freed.

While the step is throttled, a ``GpuOpManager`` launches the step's GPU kernels (OPM).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .clock import Clock
from .errors import (CancelledError, InvalidArgumentError, OpError,
                                      UnknownError)
from .gpu_op_manager import GpuOpManager, QueuedOp
from .graph import Graph, GraphError, Node, parse_tensor_name
from .kernels import (KernelDef, OpKernelContext, OpRegistry,
                                       SessionResources)
from .tensor import Buffer, StepAllocations, kernel_context, to_host

__all__ = ["ExecutorImpl", "ExecutorState", "NodeItem"]

log = logging.getLogger(__name__)


@dataclass
class NodeItem:
    """A node bound to its kernel and device (TF ``NodeItem``)."""

    id: int
    node: Node
    kernel: KernelDef
    device: Any
    num_outputs: int
    is_gpu: bool
    is_expensive: bool
    is_async: bool
    cost_us: int
    inputs: list[tuple[int, int]] = field(default_factory=list)            # (src id, slot)
    out_edges: list[list[tuple[int, int]]] = field(default_factory=list)   # slot -> (dst, i)
    successors: list[int] = field(default_factory=list)   # one entry per in-edge of a dst
    num_in_edges: int = 0
    fetches: dict[int, list[int]] = field(default_factory=dict)   # slot -> fetch indices

    @property
    def name(self) -> str:
        return self.node.name


class ExecutorImpl:
    """The executable form of a graph for one feed/fetch/target signature."""

    def __init__(self, graph: Graph, device_mgr: Any, *, feeds: Sequence[str],
                 fetches: Sequence[str], targets: Sequence[str],
                 registry: OpRegistry | None = None) -> None:
        registry = registry or OpRegistry.global_registry()
        graph.validate()
        self.fetches = fetches          # the session's signature: a tuple it never changes
        fed: set[str] = set()
        for name in feeds:
            node_name, slot = parse_tensor_name(name)
            if node_name not in graph:
                raise InvalidArgumentError(f"Feed {name!r} is not a node of the graph")
            n_out = registry.lookup(graph.node(node_name).op).num_outputs_for(
                graph.node(node_name).attrs)
            if slot != 0 or n_out != 1:
                raise InvalidArgumentError(f"Feed {name!r}: only single-output nodes can be "
                                           f"fed (output 0)")
            fed.add(node_name)
        fetch_refs: list[tuple[str, int]] = []
        for name in fetches:
            node_name, slot = parse_tensor_name(name)
            if node_name not in graph:
                raise InvalidArgumentError(f"Fetch {name!r} is not a node of the graph")
            node = graph.node(node_name)
            # The node's own output count, also when fed (its consumers keep their slots).
            n_out = registry.lookup(node.op).num_outputs_for(node.attrs)
            if slot >= n_out:
                raise InvalidArgumentError(f"Fetch {name!r}: node {node_name!r} ({node.op}) "
                                           f"has {n_out} output(s)")
            fetch_refs.append((node_name, slot))
        for name in targets:
            if name not in graph:
                raise InvalidArgumentError(f"Target {name!r} is not a node of the graph")
        # Prune: everything the fetches and targets need, stopping at fed nodes.
        needed: set[str] = set()
        stack = [n for n, _ in fetch_refs] + list(targets)
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            needed.add(name)
            if name not in fed:
                stack.extend(graph.predecessors(name))
        order = [n for n in graph.nodes if n.name in needed]
        ids = {n.name: i for i, n in enumerate(order)}
        self.items: list[NodeItem] = []
        for i, node in enumerate(order):
            kernel = registry.lookup("Placeholder" if node.name in fed else node.op)
            try:
                device = device_mgr.lookup_device(node.device)
            except (KeyError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"Cannot assign a device for operation {node.name!r}: {node.device} is "
                    f"not available ({exc})", node_name=node.name, op=node.op) from None
            is_gpu = device.device_type.upper() == "GPU"
            # TF 1.15: kernels placed on a GPU only enqueue work, so never expensive.
            expensive = kernel.expensive_for(node.attrs) and not is_gpu
            cost = node.attrs.get("cost_us", 0)
            if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0:
                raise GraphError(f"node {node.name!r}: cost_us must be a non-negative int, "
                                 f"got {cost!r}")
            # The node's own output count, also when fed (its consumers keep their slots).
            n_out = registry.lookup(node.op).num_outputs_for(node.attrs)
            item = NodeItem(i, node, kernel, device, n_out, is_gpu, expensive,
                            kernel.async_for(node.attrs), cost)
            item.out_edges = [[] for _ in range(n_out)]
            self.items.append(item)
        for item in self.items:
            if item.name in fed:
                continue
            for k, (src, slot) in enumerate(item.node.input_refs()):
                s = self.items[ids[src]]
                item.inputs.append((s.id, slot))
                s.out_edges[slot].append((item.id, k))
                s.successors.append(item.id)
                item.num_in_edges += 1
            for src in item.node.control_inputs:
                s = self.items[ids[src]]
                s.successors.append(item.id)
                item.num_in_edges += 1
        for f, (node_name, slot) in enumerate(fetch_refs):
            self.items[ids[node_name]].fetches.setdefault(slot, []).append(f)
        self.roots = [it.id for it in self.items if it.num_in_edges == 0]
        self.num_gpu_nodes = sum(1 for it in self.items if it.is_gpu)
        self.gpu_devices = {id(it.device): it.device     # each GPU once, a fresh view
                            for it in self.items if it.is_gpu}.values()

    def run(self, *, feeds: dict[str, np.ndarray],
            runner: Callable[[Callable[[], None]], None],
            resources: SessionResources, clock: Clock, resource_management: Any,
            step_id: int, key: Any,
            on_start: Callable[["ExecutorState"], None]) -> list[np.ndarray]:
        """Run one step synchronously; returns the fetched values (host arrays) or raises.
        ``on_start`` is given the step before it starts (the session keeps it to cancel it)."""
        state = ExecutorState(self, feeds=feeds, runner=runner, resources=resources,
                              clock=clock, resource_management=resource_management,
                              step_id=step_id, key=key)
        on_start(state)
        return state.run()


class ExecutorState:
    """One step of an ``ExecutorImpl`` (TF ``ExecutorState``)."""

    def __init__(self, impl: ExecutorImpl, *, feeds: dict[str, np.ndarray],
                 runner: Callable[[Callable[[], None]], None],
                 resources: SessionResources, clock: Clock,
                 resource_management: Any, step_id: int, key: Any) -> None:
        self.impl = impl
        self.feeds = feeds            # the session's own dict, made for this run
        self.runner = runner
        self.resources = resources
        self.clock = clock
        self.key = key
        self.rm = resource_management
        self.step = StepAllocations()
        self._lock = threading.Lock()
        self._pending = [it.num_in_edges for it in impl.items]
        self._inputs: list[list[Buffer | None]] = [[None] * len(it.inputs) for it in impl.items]
        self._outstanding = len(impl.roots)    # the nodes handed out and not yet done
        self._status: OpError | None = None
        self._abort = threading.Event()
        self._done = threading.Event()
        self.fetch_values: list[np.ndarray | None] = [None] * len(impl.fetches)
        self.opm: GpuOpManager | None = None
        if resource_management is not None and impl.num_gpu_nodes > 0:
            perf = resource_management.perf_control                      # read once (OPM-1)
            if perf < 100 and resource_management.get_estimated_idle_time() > 0:
                self.opm = GpuOpManager(resource_management, num_ops=impl.num_gpu_nodes,
                                        clock=self.clock, drain=self._sync_gpus,
                                        label=f"{key}-{step_id}")

    # -- driving the step -----------------------------------------------------------------
    def run(self) -> list[np.ndarray]:
        self.run_async()
        self._done.wait()
        if self.opm is not None:
            self.opm.join()
        if self._status is not None:
            raise self._status
        self._sync_gpus()   # TF Finish with sync_on_finish: GPU work is in the step (EXEC-14)
        # A step without error ran every node it needs, so every fetch was set (_propagate).
        return self.fetch_values  # type: ignore[return-value]

    def _sync_gpus(self) -> None:
        """Wait until every GPU the step placed a node on has finished its queued work."""
        for device in self.impl.gpu_devices:
            device.sync()

    def run_async(self) -> None:
        # A run has a fetch or a target (SESS-2): the pruned graph has a node, and, acyclic
        # (EXEC-2), a root.
        roots = list(self.impl.roots)
        self.schedule_ready(roots, None)

    def cancel(self, error: OpError) -> None:
        """Abort the step from outside (e.g. the session is closing)."""
        self._record_error(error)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    # -- scheduling -------------------------------------------------------------------------
    def schedule_ready(self, ready: list[int], inline: collections.deque[int] | None) -> None:
        """TF ``ScheduleReady``."""
        if inline is None:
            items, opm = self.impl.items, self.opm
            for nid in ready:
                if opm is not None and items[nid].is_gpu:
                    self._enqueue(items[nid])     # queued here, not via the runner (OPM-2)
                else:
                    self._dispatch(nid)
            return
        items = self.impl.items
        curr_expensive: int | None = None
        for nid in ready:
            if not items[nid].is_expensive:
                inline.append(nid)
            else:
                if curr_expensive is not None:
                    self._dispatch(curr_expensive)
                curr_expensive = nid
        if curr_expensive is not None:
            if not inline:
                inline.append(curr_expensive)
            else:
                self._dispatch(curr_expensive)

    def _dispatch(self, nid: int) -> None:
        try:
            self.runner(lambda: self.process(nid))
        except RuntimeError as exc:  # the pool takes no more work (interpreter exit, SESS-7)
            self._record_error(CancelledError(f"step cancelled: cannot schedule node "
                                              f"{self.impl.items[nid].name!r}: {exc}"))
            self.process(nid)

    def process(self, nid: int) -> None:
        """TF ``Process``: run ``nid`` and the nodes it makes ready inline."""
        inline: collections.deque[int] = collections.deque([nid])
        try:
            completed = False
            items = self.impl.items
            while inline:
                item = items[inline.popleft()]
                if self._abort.is_set():
                    completed = self._skip(item)
                elif self.opm is not None and item.is_gpu:
                    self._enqueue(item)
                elif item.is_async:
                    self._launch(item)
                else:
                    error, ready = self._run_node(item)
                    completed = self._node_done(error, ready, inline)
            if completed:
                self._finish()
        except BaseException as exc:  # an executor bug must not hang the step
            log.exception("executor: unexpected error in process()")
            self._record_error(UnknownError(f"internal executor error: {exc!r}"))
            # The node in hand and those queued inline behind it will not be done by anyone:
            # count them done, so that the step ends (with this error) instead of waiting.
            with self._lock:
                self._outstanding -= 1 + len(inline)
                completed = self._outstanding <= 0
            if completed:
                self._finish()

    def _enqueue(self, item: NodeItem) -> None:
        """Queue a GPU op of a managed step on the GpuOpManager (OPM-2)."""
        assert self.opm is not None
        self.opm.enqueue(QueuedOp(item.name, functools.partial(self._launch, item),
                                  functools.partial(self._retire_unrun, item),
                                  functools.partial(self._slot_failed, item)))

    def _launch(self, item: NodeItem) -> None:
        """Run an async or queued kernel; its successors go to the runner (TF's done callback),
        or to the queue for the GPU ops of a managed step (OPM-2)."""
        if self._abort.is_set():
            self._retire_unrun(item)     # the step failed since the caller's check (OPM-7)
            return
        error, ready = self._run_node(item)
        if self._node_done(error, ready, None):
            self._finish()

    def _slot_failed(self, item: NodeItem, exc: BaseException) -> None:
        """The idle slot before a queued op raised (a backend's synchronize, an RM call): the
        step fails as if the op's kernel had raised it, and the op does not run (OPM-8)."""
        error = UnknownError(f"idle slot before {item.node.op} node {item.name!r} on "
                             f"{item.device.name}: {type(exc).__name__}: {exc}",
                             node_name=item.name, op=item.node.op, device=item.device.name)
        error.__cause__ = exc
        self._record_error(error)
        self._retire_unrun(item)

    def _retire_unrun(self, item: NodeItem) -> None:
        if self._skip(item):
            self._finish()

    def _skip(self, item: NodeItem) -> bool:
        """A node that will not run because the step is aborting."""
        self._release_inputs(item)
        return self._node_done(CancelledError("step aborted"), [], None)

    # -- running one node -------------------------------------------------------------------
    def _run_node(self, item: NodeItem) -> tuple[OpError | None, list[int]]:
        # A node runs once every producer propagated to it (a failed one aborts the step, and
        # its consumers are skipped), so each of its input slots holds a buffer; the context
        # only reads the list.
        ctx = OpKernelContext(node=item.node, device=item.device, inputs=self._inputs[item.id],
                              step=self.step, resources=self.resources, feeds=self.feeds,
                              num_outputs=item.num_outputs)
        error: OpError | None = None
        try:
            if item.cost_us:
                if not self.clock.sleep_us(item.cost_us, self._abort):
                    raise CancelledError("step aborted during the kernel's compute time")
            with kernel_context(item.device):
                item.kernel.compute(ctx)      # sets every output or raises (kernels.py)
        except OpError as exc:
            error = exc
        except BaseException as exc:  # noqa: BLE001 - a kernel's own failure is the step's
            error = UnknownError(f"{item.node.op} node {item.name!r} on {item.device.name}: "
                                 f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc
        if error is not None:
            if error.node_name is None:
                error.node_name = item.name
            if error.op is None:
                error.op = item.node.op
            if error.device is None:
                error.device = item.device.name
            for out in ctx.outputs:
                if out is not None:
                    self.step.unref(out)
            self._release_inputs(item)
            return error, []
        self._release_inputs(item)
        return None, self._propagate(item, ctx.outputs)

    def _release_inputs(self, item: NodeItem) -> None:
        # Called once per node (it runs or is skipped once), when every slot holds a buffer.
        for buf in self._inputs[item.id]:
            self.step.unref(buf)

    def _propagate(self, item: NodeItem, outputs: list[Buffer | None]) -> list[int]:
        """TF ``PropagateOutputs``: hand outputs to consumers; return the newly ready nodes."""
        for slot, buf in enumerate(outputs):
            assert buf is not None
            for f in item.fetches.get(slot, ()):
                self.fetch_values[f] = to_host(buf.array)
            edges = item.out_edges[slot]
            self.step.ref(buf, len(edges))
            for dst, k in edges:
                self._inputs[dst][k] = buf
            self.step.unref(buf)          # the producer's own reference
        ready: list[int] = []
        with self._lock:
            for dst in item.successors:
                self._pending[dst] -= 1
                if self._pending[dst] == 0:
                    ready.append(dst)
        return ready

    def _record_error(self, error: OpError) -> None:
        """Keep the step's first error and abort the step; a later error changes nothing."""
        with self._lock:
            if self._status is not None:
                return
            self._status = error
        self._abort.set()
        if self.opm is not None:
            self.opm.abort()

    def _node_done(self, error: OpError | None, ready: list[int],
                   inline: collections.deque[int] | None) -> bool:
        """TF ``NodeDone``: returns True when this was the step's last outstanding node."""
        if error is not None:
            self._record_error(error)     # keeps the first error only
        with self._lock:
            if not ready or error is not None:
                self._outstanding -= 1
                completed = self._outstanding == 0
            else:
                self._outstanding += len(ready) - 1
                completed = False
        if error is None:
            self.schedule_ready(ready, inline)
        return completed

    def _finish(self) -> None:
        """TF ``Finish``: free what is left of the step, stop the op manager, signal done.
        Called once per step, by the thread whose node took the outstanding count to 0."""
        try:
            self.step.free_all()
            if self.opm is not None:
                self.opm.shutdown()        # never joins when called from the manager thread
                if self.opm.num_queued:
                    self.rm.set_executor_queued_op_num(self.key, self.opm.num_queued)
        except BaseException as exc:
            log.exception("executor: error while finishing the step")
            with self._lock:
                if self._status is None:
                    self._status = UnknownError(f"error while finishing the step: {exc!r}")
        finally:
            self._done.set()
