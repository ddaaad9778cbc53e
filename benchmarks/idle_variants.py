"""Ways of distributing a throttled job's idle time, compared on the GPU (SPEC.md RM-10, OPM).

The throttle (RM-10) decides how much idle time a throttled step's period needs; where that idle
time goes is a design choice with measurable costs. Each variant here is the reference runtime
with one mechanism changed, the way a fork changes it (``patch_source`` from
``meta_tests.broken_forks``: the reference function recompiled with named lines replaced, and a
loud ``ForkOutOfDate`` when the reference no longer holds them). A benchmark job applies one
with ``python -m benchmarks.bench_job --variant NAME`` before it builds its runtime; the
variant ``reference`` changes nothing.

- ``reference``: the runtime as SPEC.md states it: the whole idle time of a period is slept
  after the step (D-RM-12).
- ``spread``: AntMan's split: after each throttled step the throttle also gives the next step
  an idle budget ``E`` equal to its sleep, which the GpuOpManager spreads as a drained idle slot
  before every GPU op (OPM, D-OPM-2, D-OPM-3, D-OPM-12): at steady state half of the period's
  idle time is in the step and half after it.
- ``antman``: AntMan's original code: ``spread``'s budget, but only asynchronous GPU kernels
  are queued (D-OPM-2), the slot divides by the per-graph high-water mark of queued ops (fixed
  during the step, 0 in the first throttled step: D-OPM-3), no drain before a slot (D-OPM-12),
  and what is deducted from the budget is the slot requested (D-OPM-10).
- ``spread_nodrain``: ``spread`` without the drain (the slot overlaps the GPU's queued work).
- ``coarse4``: ``spread`` with at most four slots a step (before every ceil(n/4)-th GPU op).

Only the benchmark jobs apply variants; nothing in the suite or the reference imports this.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["VARIANTS", "apply", "describe"]


def _package(runtime: str) -> tuple:
    rt = importlib.import_module(runtime)
    pkg = runtime.split(".")[0]
    executor = importlib.import_module(f"{pkg}.executor")
    opm = importlib.import_module(f"{pkg}.gpu_op_manager")
    rm = importlib.import_module(f"{pkg}.gpu_resource_management")
    return rt, executor, opm, rm


def _patch(owner, name: str, *replacements: tuple[str, str]) -> None:
    from meta_tests.broken_forks import patch_source
    patch_source(owner, name, *replacements)


def _reference(runtime: str) -> None:
    _package(runtime)


def _spread(runtime: str) -> None:
    """The throttle gives the next step an idle budget equal to its sleep (AntMan)."""
    _, _, _, rm = _package(runtime)
    _patch(rm.GPUResourceManagement, "_sleep_or_suspend", (
        "            self._total_time_slot_us = sleep_us   # all of it after the step (D-RM-12)\n",
        "            self._total_time_slot_us = sleep_us\n"
        "            self._estimated_idle_us = sleep_us    # variant: the next step's budget\n"))


def _spread_nodrain(runtime: str) -> None:
    _spread(runtime)
    _, executor, _, _ = _package(runtime)
    _patch(executor.ExecutorState, "__init__", (
        "clock=self.clock, drain=self._sync_gpus,", "clock=self.clock, drain=None,"))


def _coarse4(runtime: str) -> None:
    _spread(runtime)
    _, _, opm, _ = _package(runtime)
    _patch(opm.GpuOpManager, "_idle_slot", (
        "        n = max(self._remaining, 1)\n"
        "        self._remaining = max(self._remaining - 1, 0)\n"
        "        slot = int(self._rm.get_estimated_idle_time()) // n\n",
        "        total = max(getattr(self, '_total_ops', 0), self._remaining)\n"
        "        self._total_ops = total\n"
        "        stride = -(-total // 4) or 1\n"
        "        index = total - self._remaining\n"
        "        self._remaining = max(self._remaining - 1, 0)\n"
        "        if index % stride:\n"
        "            return\n"
        "        n = max(-(-(self._remaining + 1) // stride), 1)\n"
        "        slot = int(self._rm.get_estimated_idle_time()) // n\n"))


def _antman(runtime: str) -> None:
    _spread(runtime)
    _, executor, opm, _ = _package(runtime)
    # Only asynchronous GPU kernels are queued (the rest run as in an unmanaged step).
    _patch(executor.ExecutorState, "schedule_ready", (
        "                if opm is not None and items[nid].is_gpu:\n",
        "                if opm is not None and items[nid].is_gpu and items[nid].is_async:\n"))
    _patch(executor.ExecutorState, "process", (
        "                elif self.opm is not None and item.is_gpu:\n",
        "                elif self.opm is not None and item.is_gpu and item.is_async:\n"))
    # N: the per-graph high-water mark of queued ops, fixed for the step; no drain.
    _patch(executor.ExecutorState, "__init__", (
        "                self.opm = GpuOpManager(resource_management, num_ops=impl.num_gpu_nodes,\n"
        "                                        clock=self.clock, drain=self._sync_gpus,\n",
        "                self.opm = GpuOpManager(resource_management,\n"
        "                                        num_ops=resource_management."
        "get_executor_queued_op_num(key),\n"
        "                                        clock=self.clock, drain=None,\n"))
    # The slot requested is deducted, with N fixed (0: no idle at all).
    _patch(opm.GpuOpManager, "_idle_slot", (
        "        n = max(self._remaining, 1)\n"
        "        self._remaining = max(self._remaining - 1, 0)\n"
        "        slot = int(self._rm.get_estimated_idle_time()) // n\n"
        "        if slot <= 0:\n"
        "            return\n",
        "        n = self._remaining\n"
        "        if n <= 0:\n"
        "            return\n"
        "        slot = int(self._rm.get_estimated_idle_time()) // n\n"
        "        if slot <= 0:\n"
        "            return\n"),
        ("        spent = max(0, int(self._clock.now_us()) - start)\n",
         "        spent = slot\n"))


VARIANTS: dict[str, tuple[str, Callable[[str], None]]] = {
    "reference": ("the whole idle time after the step (SPEC.md)", _reference),
    "antman": ("AntMan's original: async GPU ops only, high-water N, no drain", _antman),
    "spread": ("half the idle in drained slots before every GPU op", _spread),
    "spread_nodrain": ("half the idle in slots before every GPU op, no drain",
                       _spread_nodrain),
    "coarse4": ("half the idle in at most four drained slots a step", _coarse4),
}


def apply(name: str, runtime: str = "reference_runtime") -> None:
    """Apply variant ``name`` to ``runtime``'s modules in this process."""
    try:
        _, fn = VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown idle variant {name!r}; known: {sorted(VARIANTS)}") from None
    fn(runtime)


def describe(name: str) -> str:
    return VARIANTS[name][0]
