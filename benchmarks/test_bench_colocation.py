"""Co-location on one GPU: a guaranteed job beside an opportunistic job throttled to p.

Two job processes (``benchmarks.job_driver.Job``), each its own runtime with its own
``GPU_CONFIG_FILE``, train the same workload on GPU 0. The guaranteed job runs at
perfControl 100 throughout; both are measured from outside (steps per second from their step
records' end times on the shared monotonic clock; each process's SM utilisation from NVML) in
windows of W seconds:

1. the guaranteed job alone (solo);
2. beside the opportunistic job at perfControl 10, then 25, then 50 (its config rewritten in
   place of a scheduler; each window starts once the new value is in force and a few of its
   steps have run);
3. the guaranteed job alone again (solo is the mean of 1 and 3; their difference is drift).

The opportunistic job throttles with our runtime under an idle-time variant
(``benchmarks.idle_variants``: on a GPU every variant, ``ANTMAN_BENCH_VARIANTS`` picks some;
the reference only on the simulated device), or, with ``ANTMAN_HAMI_LIB`` set, with HAMi-core's
``CUDA_DEVICE_SM_LIMIT`` at the same percentages (one process per limit: the limit is read at
start-up; our throttle stays at 100).

Figures: what the guaranteed job keeps (throughput relative to its solo runs; target: at least
90 % beside p = 10 on a GPU) and what the opportunistic job gets (throughput relative to the
same workload alone, the solo runs, and to p % of it). On the simulated device the jobs share
the CPU cores instead of a GPU: a short smoke of the mechanism, not the GPU figure.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.bench_support import (WORKLOADS, Figure, now_us, one_shot, record_figures,
                                      size, write_config)
from benchmarks.job_driver import GpuSampler, Job, measure_for
from benchmarks.test_bench_delivered_share import (HAMI_WARMUP_S, hami_env, hami_library,
                                                   on_gpu, selected_variants)

pytestmark = pytest.mark.capability("executor", "gpu_op_manager", "resource_management",
                                    "workload")

PERFS = (10, 25, 50)
WINDOW_S = size(1.0, 5.0)
GUARANTEED_TARGET = 0.90


def tenants() -> list[str]:
    return selected_variants() + (["hami"] if hami_library() is not None and on_gpu() else [])


def window(job: Job, sampler: GpuSampler, t0: int, t1: int) -> dict[str, Any]:
    return {**job.window(t0, t1).to_json(),
            "process_sm_pct": sampler.process_sm_percent(job.pid, t0, t1)}


@pytest.mark.parametrize("tenant", tenants())
@pytest.mark.parametrize("size_name", list(WORKLOADS))
def test_bench_colocation(rt, bench, tmp_path, report_artifacts, size_name: str,
                          tenant: str) -> None:
    workload = WORKLOADS[size_name]
    g_cfg, o_cfg = tmp_path / "guaranteed.json", tmp_path / "opportunistic.json"
    write_config(g_cfg, perf=100)
    write_config(o_cfg, perf=100 if tenant == "hami" else PERFS[0])
    phases: dict[str, dict[str, Any]] = {}
    sampler = GpuSampler().start()
    hami = hami_library() if tenant == "hami" else None

    def opportunistic(limit: int) -> Job:
        if hami is not None:
            return Job(f"opportunistic-hami-{limit}", runtime=rt.__name__, config=o_cfg,
                       workload=workload, seed=1,
                       env=hami_env(hami, limit, tmp_path / f"hami-{limit}.cache"))
        return Job("opportunistic", runtime=rt.__name__, config=o_cfg, workload=workload,
                   seed=1, variant=tenant)

    def experiment() -> None:
        with Job("guaranteed", runtime=rt.__name__, config=g_cfg, workload=workload) as g:
            g.wait_steps(size(50, 30))         # warmed up: allocator pool grown, caches hot
            phases["solo_before"] = {"guaranteed": window(g, sampler, *measure_for(WINDOW_S))}
            o: Job | None = None
            try:
                for p in PERFS:
                    if hami is not None:
                        if o is not None:
                            o.stop()
                        o = opportunistic(p)
                        o.wait_steps(5)
                        time.sleep(HAMI_WARMUP_S)
                    else:
                        if o is None:
                            o = opportunistic(p)
                        write_config(o_cfg, perf=p)
                        o.wait_steps(3, after_us=now_us(), perf=p)
                    t0, t1 = measure_for(WINDOW_S)
                    phases[f"p{p}"] = {"guaranteed": window(g, sampler, t0, t1),
                                       "opportunistic": window(o, sampler, t0, t1)}
            finally:
                if o is not None:
                    o.stop()
            g.wait_steps(3, after_us=now_us())
            phases["solo_after"] = {"guaranteed": window(g, sampler, *measure_for(WINDOW_S))}
            g.stop()

    try:
        one_shot(bench, experiment)
    finally:
        sampler.stop()
    solo_runs = [phases[k]["guaranteed"]["steps_per_s"] for k in ("solo_before", "solo_after")]
    assert all(solo_runs), f"no solo throughput: {phases}"
    solo = sum(solo_runs) / 2
    label = f"{size_name} workload, opportunistic: " + (
        "HAMi-core CUDA_DEVICE_SM_LIMIT" if hami is not None else f"variant {tenant}")
    gpu = on_gpu()
    figures, g_rel, o_rel = [], [], []
    for p in PERFS:
        gp, op = phases[f"p{p}"]["guaranteed"], phases[f"p{p}"]["opportunistic"]
        rel = gp["steps_per_s"] / solo if gp["steps_per_s"] else None
        orel = op["steps_per_s"] / solo if op["steps_per_s"] else None
        g_rel.append(rel)
        o_rel.append(orel)
        figures.append(Figure(
            f"guaranteed job keeps, beside opportunistic p={p} ({label})",
            None if rel is None else 100 * rel, "% of solo",
            f"≥ {GUARANTEED_TARGET * 100:.0f} % (GPU)" if p == 10 else "",
            (rel is not None and rel >= GUARANTEED_TARGET) if p == 10 and gpu else None,
            f"steps/s over a {WINDOW_S} s window with both jobs running, over the mean of "
            "two solo windows (before and after)",
            {"steps_per_s": gp["steps_per_s"], "solo_steps_per_s": solo,
             "process_sm_pct": gp["process_sm_pct"]}))
        figures.append(Figure(
            f"opportunistic job gets, at p={p} ({label})",
            None if orel is None else 100 * orel, "% of solo", "", None,
            f"steps/s over the same {WINDOW_S} s window, over the solo throughput of the "
            "same workload",
            {"steps_per_s": op["steps_per_s"], "of_its_share_pct":
                None if orel is None else 100 * orel / (p / 100),
             "busy_share_pct": None if op["busy_share"] is None else 100 * op["busy_share"],
             "process_sm_pct": op["process_sm_pct"], "steps_in_window": op["steps"]}))
    drift = (solo_runs[1] - solo_runs[0]) / solo_runs[0] * 100
    record_figures(bench, figures, host_cpu=size_name == "small" or not gpu,
                   workload=workload, tenant=tenant, window_s=WINDOW_S,
                   solo_steps_per_s=solo_runs, solo_drift_pct=drift, phases=phases,
                   nvml_error=sampler.error)
    pct = lambda v: None if v is None else round(100 * v, 2)  # noqa: E731
    report_artifacts.add("colocation_throughput", {
        "categories": ["solo"] + [f"p = {p}" for p in PERFS],
        "series": {"guaranteed job (% of solo)": [100.0] + [pct(v) for v in g_rel],
                   "opportunistic job (% of solo)": [None] + [pct(v) for v in o_rel]},
        "targets": [None, GUARANTEED_TARGET * 100] + [None] * (len(PERFS) - 1),
        "ylabel": "throughput, % of the job alone",
        "title": f"Co-location on one {'GPU' if gpu else 'simulated device'}: {label} "
                 f"(solo {solo:.1f} steps/s)"})
    print(f"\nco-location ({label}): solo {solo_runs} steps/s (drift {drift:+.1f} %); "
          + ", ".join(f"p={p}: guaranteed {pct(g)} %, opportunistic {pct(o)} %"
                      for p, g, o in zip(PERFS, g_rel, o_rel)))
