"""Memory-scaling latency: from a config rewrite to the step that applies it, and to NVML.

The workload trains step after step while another thread rewrites ``GPU_CONFIG_FILE``
(atomically, as a scheduler does) at random moments, alternating a ``maxDeviceMem`` below
the pool (a shrink) and the initial limit (a grow); each rewrite waits until the previous one
is in force. Measured on the real clock, for each rewrite written at ``t_w``:

- detection: when the runtime's file listener delivered that content (a second handler on the
  same path through ``ctx.file_listener``, FL-6), minus ``t_w``; target: within the
  configured poll interval;
- application: the first step boundary after detection (a POST/3 probe action, after
  GPUResourceManagement's POST/2) must show the new ``bytes_limit`` of the GPU's BFC (RM-8);
  its time minus ``t_w`` is the latency; target: applied at that first boundary;
- on a GPU, for shrinks: when NVML first shows the process's memory down by the pool released
  (within 2 MiB), polled from that boundary on, minus ``t_w`` (GPU-4).

Runs at poll interval 0.1 s (short and full) and at AntMan's 1 s (full only).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from typing import Any

import pytest

from benchmarks.bench_support import (FULL, MiB, Figure, device_bfc, gpu_device, median,
                                      now_us, on_cuda, one_shot, record_figures, size,
                                      write_config)

pytestmark = pytest.mark.capability("executor", "resource_management", "file_listener",
                                    "workload", "adjustable", "session_run_actions")

#: A step needs many times the memory of the variables (on the GPU about 340 MiB against
#: 1.6 MiB), so a shrink to SMALL releases most of the pool and the next steps fall back to
#: host memory for the rest.
SCALING_WORKLOAD = size(dict(batch=2048, input_dim=64, hidden=256, layers=3, seed=0,
                             num_batches=2),
                        dict(batch=16384, input_dim=256, hidden=512, layers=3, seed=7,
                             num_batches=2))
SMALL = size(1 * MiB, 64 * MiB)      # the first region, which holds the variables, fits
POLLS = (0.1, 1.0) if FULL else (0.1,)
REWRITES = {0.1: size(6, 12), 1.0: 6}
SLACK = 2 * MiB
NVML_WAIT_S = 2.0


class Boundaries:
    """POST/1 and POST/3 probes around GPUResourceManagement (POST/2)."""

    def __init__(self, rt, ctx, bfc, nvml, outstanding) -> None:
        self.rt, self.bfc, self.nvml = rt, bfc, nvml
        self.adj = rt.GPUAdjustableAllocator()
        self.outstanding = outstanding          # () -> True while a delivery is not applied
        self.records: list[dict[str, Any]] = []
        self._nvml_before: int | None = None
        self._last_limit = bfc.get_stats().bytes_limit
        self._last_pool = self.pool()
        probe = self

        class Pre:
            name = "BenchScalingPre"

            def run_action(self, options: Any) -> None:
                probe._nvml_before = probe.nvml_bytes() if probe.outstanding() else None

        class Post:
            name = "BenchScalingPost"

            def run_action(self, options: Any) -> None:
                probe.after_boundary()

        post = rt.Grouping.POST_SESSION_RUN
        ctx.registry.register(post, 1, Pre())
        ctx.registry.register(post, 3, Post())

    def pool(self) -> int:
        return self.adj.get_mem_pool_stats(self.bfc).pool_bytes

    def nvml_bytes(self) -> int | None:
        if self.nvml is None:
            return None
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            cupy.cuda.runtime.deviceSynchronize()
        return self.nvml.process_used(0).bytes

    def after_boundary(self) -> None:
        t = now_us()
        limit, pool = self.bfc.get_stats().bytes_limit, self.pool()
        rec = {"t_us": t, "limit": limit, "pool": pool, "nvml_t_us": None,
               "nvml_drop": None, "released": None}
        if limit < self._last_limit and self._nvml_before is not None:
            released = self._last_pool - pool
            rec["released"] = released
            deadline = time.monotonic() + NVML_WAIT_S
            while True:
                reading = self.nvml_bytes() or 0
                drop = self._nvml_before - reading
                if drop >= released - SLACK or time.monotonic() > deadline:
                    rec["nvml_t_us"], rec["nvml_drop"] = now_us(), drop
                    break
                time.sleep(0.0005)
        self._last_limit, self._last_pool = limit, pool
        self.records.append(rec)


@pytest.mark.parametrize("poll_s", POLLS)
def test_bench_memory_scaling_latency(rt, bench, bench_runtime, report_artifacts,
                                      poll_s: float) -> None:
    ctx = bench_runtime(poll_interval_s=poll_s, gpu_memory_bytes=size(64 * MiB, 2 << 30))
    path = bench_runtime.config(ctx)
    cuda = on_cuda(ctx)
    nvml = None
    if cuda:
        from fixtures.nvml import NvmlObserver
        nvml = NvmlObserver()
    device = gpu_device(ctx)
    bfc = device_bfc(device)
    key = rt.get_pci_bus_id(device.attributes.physical_device_desc)
    wl = rt.MLPWorkload(ctx, **SCALING_WORKLOAD)
    for _ in range(5):
        wl.step()
    initial = bfc.get_stats().bytes_limit
    pool0 = rt.GPUAdjustableAllocator().get_mem_pool_stats(bfc).pool_bytes
    small = SMALL
    assert pool0 > 2 * small, f"the pool ({pool0} bytes) is too small to shrink to {small}"

    deliveries: list[tuple[int, str]] = []
    seen = [0]                                   # deliveries already followed by a boundary
    ctx.file_listener.register_file_listener(str(path), "bench-scaling-probe",
                                             lambda c: deliveries.append((now_us(), c)))
    probes = Boundaries(rt, ctx, bfc, nvml, lambda: len(deliveries) > seen[0])
    writes: list[dict[str, Any]] = []
    done = threading.Event()
    failure: list[BaseException] = []

    def writer() -> None:
        rng = random.Random(0)
        try:
            for i in range(REWRITES[poll_s]):
                time.sleep(rng.uniform(0.2, 1.2) * poll_s)
                limit = small if i % 2 == 0 else initial
                t = now_us()
                write_config(path, limits={key: limit}, perf=100, name=f"bench-{i}")
                writes.append({"t_us": t, "limit": limit, "shrink": i % 2 == 0,
                               "text": path.read_text()})
                deadline = time.monotonic() + 5 * poll_s + 5
                while not any(b["t_us"] > t and b["limit"] == limit for b in probes.records):
                    assert time.monotonic() < deadline, f"rewrite {i} ({limit}) never applied"
                    time.sleep(0.002)
        except BaseException as exc:
            failure.append(exc)
        finally:
            done.set()

    def experiment() -> None:
        thread = threading.Thread(target=writer, name="bench-config-writer")
        thread.start()
        while not done.is_set():
            wl.step()
            seen[0] = len(deliveries)
        thread.join()

    try:
        one_shot(bench, experiment)
    finally:
        ctx.file_listener.unregister_file_listener(str(path), "bench-scaling-probe")
        if nvml is not None:
            nvml.close()
    assert not failure, failure[0]

    rows = []
    for i, w in enumerate(writes):
        t_det = next((t for t, c in deliveries if t >= w["t_us"] and c == w["text"]), None)
        first = next((b for b in probes.records if t_det is not None and b["t_us"] > t_det),
                     None)
        applied = next((b for b in probes.records
                        if b["t_us"] > w["t_us"] and b["limit"] == w["limit"]), None)
        row = {"rewrite": i, "kind": "shrink" if w["shrink"] else "grow",
               "limit": w["limit"],
               "detect_ms": None if t_det is None else (t_det - w["t_us"]) / 1000,
               "applied_ms": None if applied is None else (applied["t_us"] - w["t_us"]) / 1000,
               "applied_at_first_boundary": bool(first and first["limit"] == w["limit"]),
               "boundary_after_detect_ms": None if (first is None or t_det is None)
               else (first["t_us"] - t_det) / 1000,
               "nvml_ms": None, "released": None, "nvml_drop": None}
        if applied is not None and applied["nvml_t_us"] is not None:
            row.update(nvml_ms=(applied["nvml_t_us"] - w["t_us"]) / 1000,
                       released=applied["released"], nvml_drop=applied["nvml_drop"])
        rows.append(row)
    detects = [r["detect_ms"] for r in rows if r["detect_ms"] is not None]
    applies = [r["applied_ms"] for r in rows if r["applied_ms"] is not None]
    nvmls = [r["nvml_ms"] for r in rows if r["nvml_ms"] is not None]
    first_ok = sum(r["applied_at_first_boundary"] for r in rows)
    poll_ms = poll_s * 1000
    figures = [
        Figure(f"detection latency, max (poll {poll_s} s)", max(detects), "ms",
               f"≤ poll interval {poll_ms:.0f} ms", max(detects) <= poll_ms,
               f"listener delivery − rewrite, over {len(rows)} rewrites at random phases",
               {"median_ms": median(detects), "all_ms": detects}),
        Figure(f"applied at the first step boundary after detection (poll {poll_s} s)",
               first_ok, f"of {len(rows)} rewrites", f"{len(rows)} of {len(rows)}",
               first_ok == len(rows), "POST/3 probe: bytes_limit of the GPU's BFC at the "
               "first boundary after delivery",
               {"boundary_after_detect_ms": [r["boundary_after_detect_ms"] for r in rows]}),
        Figure(f"rewrite → limit in force, median (poll {poll_s} s)", median(applies), "ms",
               "", None, "first boundary with the new limit − rewrite",
               {"max_ms": max(applies), "all_ms": applies}),
    ]
    if nvmls:
        figures.append(Figure(
            f"rewrite → NVML shows the memory released, median (poll {poll_s} s)",
            median(nvmls), "ms", "", None,
            "NVML process memory down by the pool released (2 MiB slack), polled from the "
            "applying boundary",
            {"max_ms": max(nvmls), "all_ms": nvmls,
             "released_bytes": [r["released"] for r in rows if r["nvml_ms"] is not None],
             "nvml_drop_bytes": [r["nvml_drop"] for r in rows if r["nvml_ms"] is not None],
             "after_boundary_ms": [r["nvml_ms"] - r["applied_ms"] for r in rows
                                   if r["nvml_ms"] is not None]}))
    record_figures(bench, figures, host_cpu=True, backend=ctx.backend.name, poll_interval_s=poll_s,
                   workload=SCALING_WORKLOAD, small_limit=small, initial_limit=initial,
                   rewrites=rows)
    series = {"detected": [r["detect_ms"] for r in rows],
              "limit in force": [r["applied_ms"] for r in rows]}
    if nvmls:
        series["NVML shows release"] = [r["nvml_ms"] for r in rows]
    report_artifacts.add("memory_scaling_latency", {
        "categories": [f"#{r['rewrite'] + 1} {r['kind']}" for r in rows],
        "series": series, "target": poll_ms, "target_label": f"poll interval {poll_ms:.0f} ms",
        "ylabel": "ms after the config rewrite",
        "title": f"Memory-scaling latency ({ctx.backend.name}, poll {poll_s} s)"})
    print(f"\nmemory scaling ({ctx.backend.name}, poll {poll_s} s): detect max "
          f"{max(detects):.1f} ms, applied at first boundary {first_ok}/{len(rows)}, applied "
          f"median {median(applies):.1f} ms" + (f", NVML median {median(nvmls):.1f} ms"
                                                 if nvmls else ""))
    assert len(rows) == REWRITES[poll_s] and len(detects) == len(rows), rows
