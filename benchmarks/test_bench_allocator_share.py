"""Share of the training step spent in our allocator (the BFC pair and VMem host fallback
benchmarks are in ``test_bench_allocator.py``).

The GPU's allocator (``device.get_allocator()``: the VMem allocator, since resource
management forces ``TF_GPU_VMEM``) gets a timing proxy: its ``allocate_raw`` and
``deallocate_raw`` are replaced on that object by wrappers that add the time of each call
(every thread: the kernels' buffers, CuPy's temporaries routed through it on a GPU, frees from
any thread) to a counter. After warm-up (the pool has grown), over N steps at perfControl
100: share = time in the allocator / wall time of the steps. Target: under 5 % of the step
time on the GPU workload. The wrappers' own cost (the clock reads and a lock per call,
calibrated by the same wrapper around no-op stand-ins) is subtracted; the raw figure is
recorded beside it. Full runs also measure the large, device-bound workload.

Two clocks time each call: the wall clock (``perf_counter_ns``), and the calling thread's CPU
time (``thread_time_ns``). The headline is the wall-clock figure; the CPU-time figure beside
it leaves out the time a call spent waiting for the GIL while another thread of the step (the
executor's pool, the op manager) ran, which the wall clock charges to the allocator.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.bench_support import (WORKLOADS, Figure, gpu_device, on_cuda, one_shot,
                                      record_figures, size)

pytestmark = pytest.mark.capability("executor", "resource_management", "workload", "vmem")

TARGET_SHARE = 0.05
WARMUP, STEPS = size(10, 20), size(40, 200)


class TimedAllocator:
    """Wraps ``allocate_raw``/``deallocate_raw`` of one allocator object with timers (wall
    clock and the calling thread's CPU time)."""

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self._lock = threading.Lock()
        self.ns = 0
        self.cpu_ns = 0
        self.allocs = 0
        self.frees = 0
        allocator.allocate_raw = self._timed(allocator.allocate_raw, "allocs")
        allocator.deallocate_raw = self._timed(allocator.deallocate_raw, "frees")

    def _timed(self, fn: Callable[..., Any], counter: str) -> Callable[..., Any]:
        """``fn`` with each call's wall and CPU time added to the totals, counted in
        ``counter``. The CPU clock is read outside the wall interval on both sides."""
        wall, cpu = time.perf_counter_ns, time.thread_time_ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            c, t = cpu(), wall()
            try:
                return fn(*args, **kwargs)
            finally:
                dt, dc = wall() - t, cpu() - c
                with self._lock:
                    self.ns += dt
                    self.cpu_ns += dc
                    setattr(self, counter, getattr(self, counter) + 1)

        return timed

    def reset(self) -> None:
        with self._lock:
            self.ns = self.cpu_ns = self.allocs = self.frees = 0

    def restore(self) -> None:
        del self.allocator.allocate_raw
        del self.allocator.deallocate_raw


def wrapper_cost_ns() -> tuple[float, float]:
    """Wall and CPU time per call that the wrapper adds to its own counters: a
    ``TimedAllocator`` around a stand-in whose ``allocate_raw``/``deallocate_raw`` do
    nothing, called n times (allocations and frees alternating)."""

    def allocate_raw(alignment: int, num_bytes: int, attributes: Any = None) -> None:
        return None

    def deallocate_raw(ptr: int) -> None:
        return None

    stand_in = types.SimpleNamespace(allocate_raw=allocate_raw, deallocate_raw=deallocate_raw)
    timed = TimedAllocator(stand_in)
    n = 50_000
    for _ in range(n // 2):
        stand_in.allocate_raw(64, 256)
        stand_in.deallocate_raw(0)
    return timed.ns / n, timed.cpu_ns / n


@pytest.mark.parametrize("size_name", list(WORKLOADS))
def test_bench_allocator_share_of_step(rt, bench, bench_runtime, report_artifacts,
                                       size_name: str) -> None:
    workload = WORKLOADS[size_name]
    ctx = bench_runtime()
    device = gpu_device(ctx)
    timed = TimedAllocator(device.get_allocator())
    try:
        wl = rt.MLPWorkload(ctx, **workload)
        for _ in range(WARMUP):
            wl.step()
        out: dict[str, float] = {}

        def experiment() -> None:
            timed.reset()
            t = time.perf_counter_ns()
            for _ in range(STEPS):
                wl.step()
            out["wall_ns"] = time.perf_counter_ns() - t
            out["alloc_ns"] = timed.ns
            out["alloc_cpu_ns"] = timed.cpu_ns

        one_shot(bench, experiment)
    finally:
        timed.restore()
    calls = timed.allocs + timed.frees
    wrapper_ns, wrapper_cpu_ns = wrapper_cost_ns()
    raw = out["alloc_ns"] / out["wall_ns"]
    share = max(0.0, out["alloc_ns"] - calls * wrapper_ns) / out["wall_ns"]
    cpu_share = max(0.0, out["alloc_cpu_ns"] - calls * wrapper_cpu_ns) / out["wall_ns"]
    step_us = out["wall_ns"] / STEPS / 1000
    how = (f"timing proxy on {device.get_allocator().name}.allocate_raw/deallocate_raw, all "
           f"threads, over {STEPS} steps of {step_us / 1000:.2f} ms after {WARMUP} warm-up, "
           "perfControl 100, the proxy's own cost subtracted")
    figures = [Figure(
        f"time in the allocator, share of step time ({size_name} workload)", 100 * share, "%",
        f"< {TARGET_SHARE * 100:.0f} % (GPU)", share < TARGET_SHARE if on_cuda(ctx) else None,
        how + "; wall clock inside the calls",
        {"raw_share_pct": 100 * raw, "allocs_per_step": timed.allocs / STEPS,
         "frees_per_step": timed.frees / STEPS,
         "ns_per_call": out["alloc_ns"] / max(calls, 1) - wrapper_ns,
         "step_us": step_us, "wrapper_ns_per_call": wrapper_ns}), Figure(
        f"allocator CPU time, share of step time ({size_name} workload)", 100 * cpu_share,
        "%", f"< {TARGET_SHARE * 100:.0f} % (GPU)",
        cpu_share < TARGET_SHARE if on_cuda(ctx) else None,
        how + "; the calling threads' CPU time inside the calls (GIL waits left out)",
        {"cpu_ns_per_call": out["alloc_cpu_ns"] / max(calls, 1) - wrapper_cpu_ns,
         "wrapper_cpu_ns_per_call": wrapper_cpu_ns})]
    record_figures(bench, figures, host_cpu=True, backend=ctx.backend.name, workload=workload,
                   allocator=device.get_allocator().name)
    report_artifacts.add("allocator_share", {
        "categories": [f"{size_name} workload\n(step {step_us / 1000:.2f} ms)"],
        "series": {"allocator time (wall clock), % of step": [round(100 * share, 4)],
                   "allocator CPU time, % of step": [round(100 * cpu_share, 4)]},
        "targets": [TARGET_SHARE * 100], "ylabel": "% of the step time",
        "title": f"Allocator share of the training step ({ctx.backend.name}, "
                 f"{size_name} workload)"})
    print(f"\nallocator share ({ctx.backend.name}, {size_name}): {100 * share:.3f} % "
          f"(raw {100 * raw:.3f} %; CPU time {100 * cpu_share:.3f} %) of {step_us:.0f} µs "
          f"steps, {calls / STEPS:.1f} calls/step, "
          f"{out['alloc_ns'] / max(calls, 1) - wrapper_ns:.0f} ns/call")
    assert timed.allocs > 0 and timed.frees > 0, "the proxy saw no allocator call"
