"""Delivered share: what a throttled job really gets, measured from outside (SPEC.md RM-10).

A user who sets perfControl p expects the job to run at p % of its unthrottled speed and to
leave the rest of the GPU to its neighbours. This benchmark measures that as the user would,
on a job process (``benchmarks.job_driver.Job``) whose config file it rewrites as a scheduler
does, in one run:

- throughput: steps per second in a window at perfControl p, over the mean of the two windows
  at perfControl 100 measured just before and just after it (interleaved controls: drift of
  the machine between settings cancels). Each p is measured in cycles (100, p, 100, p, ...,
  100); the figure is the mean of the cycles' ratios with its 95 % confidence interval
  (Student's t over cycles), and cycles are added until the interval's half-width is at most
  ``CI_TARGET_PP`` or the time budget of that p is spent;
- the GPU's busy fraction: NVML's utilisation samples inside the same windows, in the same
  ratio (on a GPU);
- the runtime's own accounting beside them: the busy time the job reports (its session time
  minus the idle slots it slept) over the window's wall time, which is what RM-10 steers;
- where the time went: per step, the host time in ``session.run``, the busy time and the GPU
  span of the step (CUDA events), at p against perfControl 100, and the SM clock (NVML).

Variants (``benchmarks.idle_variants``) run the same sequence with another distribution of the
idle time, so the design SPEC.md chose is compared with AntMan's and the alternatives in one
run: ``ANTMAN_BENCH_VARIANTS=all`` (or a list of names); by default only the reference runs.
On the simulated device the figures are a short smoke of the mechanism (the CPU is not a GPU).

The peer: HAMi-core's ``libvgpu.so`` (``LD_PRELOAD``, ``CUDA_DEVICE_SM_LIMIT=p``) limits the
same job, unthrottled by our runtime, to the same percentages; each limit is a new process (the
limit is read at start-up), with controls without the library before, between and after. The
path of a built library comes from ``ANTMAN_HAMI_LIB`` (README: Benchmarks); without one that
benchmark is skipped, saying so.

Target (GPU): delivered throughput within ±2 percentage points of p, "met" only when the
whole confidence interval is inside p ± 2. Figures only: nothing asserts a speed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_support import (WORKLOADS, Figure, mean_ci95, now_us, one_shot,
                                      record_figures, size, write_config)
from benchmarks.idle_variants import VARIANTS, describe
from benchmarks.job_driver import GpuSampler, Job
from reports.render_md import bench_machine

pytestmark = pytest.mark.capability("executor", "gpu_op_manager", "resource_management",
                                    "workload")

PERFS = (90, 75, 50, 25, 10)
TOLERANCE_PP = 2.0
CI_TARGET_PP = 0.5              # stop adding cycles once the 95 % CI is this narrow
#: Cycles per perfControl: at least MIN_CYCLES, at most MAX_CYCLES, adding cycles while the CI
#: is wider than CI_TARGET_PP and the budget of the perfControl (seconds) lasts. Full sizes
#: can be shortened for a quick comparison: ANTMAN_BENCH_SHARE_CYCLES=1 (minimum cycles) and
#: ANTMAN_BENCH_SHARE_BUDGET_S.
MIN_CYCLES = size(1, int(os.environ.get("ANTMAN_BENCH_SHARE_CYCLES", "3")))
MAX_CYCLES = size(1, 10)
CYCLE_BUDGET_S = size(0.0, float(os.environ.get("ANTMAN_BENCH_SHARE_BUDGET_S", "25")))
MIN_WINDOW_S = size(0.5, 1.2)
MIN_STEPS = size(6, 15)
SETTLE_STEPS = 2
WARMUP_STEPS = size(10, 30)
HAMI_WARMUP_S = 2.5            # HAMi-core's watcher adjusts its tokens every ~120 ms
HAMI_ENV = "ANTMAN_HAMI_LIB"
HOOK_CYCLES = 2                # HAMi-core loaded without a limit, against controls


#: The per-test limit (pytest-timeout) follows the budgets: every perfControl may spend its
#: budget and finish the cycle under way, plus the warm-up and the controls.
TEST_TIMEOUT_S = 180 + 2 * len(PERFS) * CYCLE_BUDGET_S


def on_gpu() -> bool:
    return os.environ.get("ANTMAN_DEVICE", "").strip().lower() == "cuda"


def selected_variants() -> list[str]:
    """The reference, or the variants named in ``ANTMAN_BENCH_VARIANTS`` (``all``: every one)."""
    chosen = os.environ.get("ANTMAN_BENCH_VARIANTS", "").strip()
    if chosen == "all":
        return list(VARIANTS)
    if chosen:
        names = [v.strip() for v in chosen.split(",") if v.strip()]
        unknown = sorted({n.partition("+spin")[0] for n in names} - set(VARIANTS))
        if unknown:
            raise pytest.UsageError(f"ANTMAN_BENCH_VARIANTS: unknown {unknown}; "
                                    f"known: {sorted(VARIANTS)}")
        return names
    return ["reference"]


def measure_phase(job: Job, sampler: GpuSampler, perf: int) -> dict[str, Any]:
    """Put ``perf`` in force, let it settle, then measure a window of it."""
    write_config(job.config, perf=perf)
    job.wait_steps(SETTLE_STEPS, after_us=now_us(), perf=perf)
    return measure_window(job, sampler, perf)


def measure_window(job: Job, sampler: GpuSampler, perf: int) -> dict[str, Any]:
    t0 = now_us()
    job.wait_steps(MIN_STEPS, after_us=t0, perf=perf)
    left = MIN_WINDOW_S - (now_us() - t0) / 1e6
    if left > 0:
        time.sleep(left)
    t1 = now_us()
    w = job.window(t0, t1)
    return {"perf": perf, **w.to_json(),
            "gpu_busy_pct": sampler.busy_percent(t0, t1),
            "process_sm_pct": sampler.process_sm_percent(job.pid, t0, t1),
            "sm_clock_mhz": sampler.sm_clock_mhz(t0, t1)}


def relative(phases: list[dict[str, Any]], i: int, key: str) -> float | None:
    """Phase ``i``'s ``key`` over the mean of the control phases beside it, in %."""
    controls = [phases[j][key] for j in (i - 1, i + 1)
                if 0 <= j < len(phases) and phases[j]["perf"] == 100
                and phases[j].get(key) is not None]
    if phases[i].get(key) is None or not controls:
        return None
    base = sum(controls) / len(controls)
    return 100.0 * phases[i][key] / base if base else None


def summarise(phases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per perfControl: throughput, NVML and accounting against the controls, the
    mean over its cycles with a 95 % confidence interval."""
    by_perf: dict[int, list[int]] = {}
    for i, ph in enumerate(phases):
        if ph["perf"] != 100:
            by_perf.setdefault(ph["perf"], []).append(i)
    rows = []
    for perf, idx in by_perf.items():
        ctrl = [phases[j] for i in idx for j in (i - 1, i + 1)
                if 0 <= j < len(phases) and phases[j]["perf"] == 100]
        ratios = [r for r in (relative(phases, i, "steps_per_s") for i in idx) if r is not None]
        thr, half = mean_ci95(ratios)
        rows.append({
            "perf": perf,
            "throughput_pct": thr if ratios else None,
            "throughput_ci95_pp": half if len(ratios) > 1 else None,
            "cycles": len(ratios),
            "nvml_busy_pct": _mean(relative(phases, i, "gpu_busy_pct") for i in idx),
            "process_sm_pct": _mean(relative(phases, i, "process_sm_pct") for i in idx),
            "accounting_pct": _mean(None if phases[i]["busy_share"] is None
                                    else 100 * phases[i]["busy_share"] for i in idx),
            "busy_per_step_us": _mean(phases[i]["busy_per_step_us"] for i in idx),
            "control_busy_per_step_us": _mean(c["busy_per_step_us"] for c in ctrl),
            "gpu_span_per_step_us": _mean(phases[i]["gpu_span_per_step_us"] for i in idx),
            "control_gpu_span_per_step_us": _mean(c["gpu_span_per_step_us"] for c in ctrl),
            "duration_per_step_us": _mean(phases[i]["duration_per_step_us"] for i in idx),
            "control_duration_per_step_us": _mean(c["duration_per_step_us"] for c in ctrl),
            "period_us": _mean(1e6 / phases[i]["steps_per_s"] for i in idx
                               if phases[i]["steps_per_s"]),
            "control_period_us": _mean(1e6 / c["steps_per_s"] for c in ctrl
                                       if c["steps_per_s"]),
            "sleep_req_per_step_us": _mean(phases[i]["sleep_req_per_step_us"] for i in idx),
            "sleep_act_per_step_us": _mean(phases[i]["sleep_act_per_step_us"] for i in idx),
            "sm_clock_mhz": _mean(phases[i]["sm_clock_mhz"] for i in idx),
            "control_sm_clock_mhz": _mean(c["sm_clock_mhz"] for c in ctrl),
            "steps": sum(phases[i]["steps"] for i in idx)})
    return rows


def measure_perf(job: Job, sampler: GpuSampler, perf: int,
                 phases: list[dict[str, Any]]) -> None:
    """Cycles of (perf, 100) after the control phase already in ``phases``, until the
    confidence interval is narrow enough or the budget is spent (see the docstring)."""
    deadline = time.monotonic() + CYCLE_BUDGET_S
    ratios: list[float] = []
    while True:
        phases.append(measure_phase(job, sampler, perf))
        phases.append(measure_phase(job, sampler, 100))
        r = relative(phases, len(phases) - 2, "steps_per_s")
        if r is not None:
            ratios.append(r)
        _, half = mean_ci95(ratios)
        if len(ratios) >= MAX_CYCLES or (len(ratios) >= MIN_CYCLES and (
                half <= CI_TARGET_PP or time.monotonic() > deadline)):
            return


def _mean(values: Any) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def share_figures(rows: list[dict[str, Any]], label: str, gpu: bool) -> list[Figure]:
    figures = []
    for r in rows:
        thr, half = r["throughput_pct"], r["throughput_ci95_pp"]
        err = None if thr is None else thr - r["perf"]
        inside = (thr is not None and half is not None
                  and abs(err) + half <= TOLERANCE_PP)
        figures.append(Figure(
            f"delivered throughput at perfControl {r['perf']} ({label})", thr,
            "% of perfControl 100", f"{r['perf']} ± {TOLERANCE_PP} pp, whole 95 % CI (GPU)",
            inside if gpu else None,
            f"steps/s at p over the mean of the interleaved perfControl 100 windows beside it, "
            f"mean of {r['cycles']} cycles ± {_fmt(half)} pp (95 % CI; job process, step end "
            "times)",
            {"error_pp": err, **{k: v for k, v in r.items() if k != "throughput_pct"}}))
    return figures


def add_plot(report_artifacts: Any, bench: Any, rows: list[dict[str, Any]], label: str,
             control_step_us: float | None) -> None:
    report_artifacts.add("delivered_share", {
        "target_percent": [r["perf"] for r in rows],
        "series": {
            "throughput (job, from outside)": [_round(r["throughput_pct"]) for r in rows],
            "GPU busy (NVML)": [_round(r["nvml_busy_pct"]) for r in rows],
            "runtime's accounting": [_round(r["accounting_pct"]) for r in rows]},
        "tolerance_percent": TOLERANCE_PP,
        "machine": f"{bench_machine(bench.extra_info)}, {label}"
                   + (f" (step {control_step_us / 1000:.2f} ms)" if control_step_us else "")})


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("variant", selected_variants())
@pytest.mark.parametrize("size_name", list(WORKLOADS))
def test_bench_delivered_share(rt, bench, tmp_path, report_artifacts, size_name: str,
                               variant: str) -> None:
    workload = WORKLOADS[size_name]
    config = tmp_path / "job.json"
    write_config(config, perf=100)
    phases: list[dict[str, Any]] = []
    sampler = GpuSampler().start()

    def experiment() -> None:
        with Job(f"{variant}-{size_name}", runtime=rt.__name__, config=config,
                 workload=workload, variant=variant) as job:
            job.wait_steps(WARMUP_STEPS)
            phases.append(measure_phase(job, sampler, 100))
            for p in PERFS:
                measure_perf(job, sampler, p, phases)
            job.stop()

    try:
        one_shot(bench, experiment)
    finally:
        sampler.stop()
    rows = summarise(phases)
    label = f"{size_name} workload, variant {variant}"
    gpu = on_gpu()
    control_step = _mean(p["duration_per_step_us"] for p in phases if p["perf"] == 100)
    record_figures(bench, share_figures(rows, label, gpu),
                   host_cpu=size_name == "small" or not gpu, workload=workload, variant=variant,
                   variant_description=describe(variant.partition("+spin")[0]), phases=phases, rows=rows,
                   nvml_error=sampler.error,
                   control_step_us=control_step)
    add_plot(report_artifacts, bench, rows, label, control_step)
    print(f"\ndelivered share ({label}): " + ", ".join(
        f"p={r['perf']}: {_fmt(r['throughput_pct'])} ± {_fmt(r['throughput_ci95_pp'])} % thr "
        f"({r['cycles']} cycles), {_fmt(r['nvml_busy_pct'])} % NVML, "
        f"{_fmt(r['accounting_pct'])} % acct" for r in rows))
    assert len(rows) == len(PERFS) and all(r["steps"] >= 2 for r in rows), rows


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v or v == float("inf") else f"{v:.1f}"


# --- the peer: HAMi-core ----------------------------------------------------------------------

def hami_library() -> Path | None:
    value = os.environ.get(HAMI_ENV, "").strip()
    return Path(value) if value else None


def hami_env(lib: Path, limit: int, cache: Path) -> dict[str, str]:
    return {"LD_PRELOAD": str(lib), "CUDA_DEVICE_SM_LIMIT": str(limit),
            "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(cache), "LIBCUDA_LOG_LEVEL": "0"}


@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("size_name", list(WORKLOADS))
def test_bench_delivered_share_hami(rt, bench, tmp_path, report_artifacts,
                                    size_name: str) -> None:
    lib = hami_library()
    if lib is None:
        pytest.skip(f"HAMi-core not measured: set {HAMI_ENV} to a built libvgpu.so "
                    "(README: Benchmarks, the HAMi-core peer)")
    if not lib.is_file():
        pytest.fail(f"{HAMI_ENV}={lib}: no such file")
    if not on_gpu():
        pytest.skip("HAMi-core limits a real GPU: run with ANTMAN_DEVICE=cuda")
    Path("/tmp/vgpulock").mkdir(exist_ok=True)     # HAMi-core's lock directory
    workload = WORKLOADS[size_name]
    config = tmp_path / "job.json"
    write_config(config, perf=100)                  # our throttle stays at 100 throughout
    phases: list[dict[str, Any]] = []
    sampler = GpuSampler().start()

    def run_one(limit: int | None) -> dict[str, Any]:
        env = {} if limit is None else hami_env(lib, limit, tmp_path / f"hami-{limit}.cache")
        with Job(f"hami-{limit}", runtime=rt.__name__, config=config, workload=workload,
                 env=env) as job:
            job.wait_steps(WARMUP_STEPS)
            if limit is not None:
                time.sleep(HAMI_WARMUP_S)
            out = measure_window(job, sampler, 100)
            job.stop()
        out["perf"] = 100 if limit is None else limit
        out["hami_limit"] = limit
        return out

    def experiment() -> None:
        phases.append(run_one(None))
        for p in PERFS:
            phases.append(run_one(p))
            phases.append(run_one(None))
        for _ in range(HOOK_CYCLES):                  # the library's own cost, no limit
            phases.append(run_one(100))
            phases.append(run_one(None))

    try:
        one_shot(bench, experiment)
    finally:
        sampler.stop()
    throttled = phases[:-2 * HOOK_CYCLES]
    rows = summarise(throttled)
    hooked = [i for i, ph in enumerate(phases) if ph.get("hami_limit") == 100]
    hook_cost, hook_ci = mean_ci95([r for r in (relative(phases, i, "steps_per_s")
                                                for i in hooked) if r is not None])
    label = f"{size_name} workload, HAMi-core CUDA_DEVICE_SM_LIMIT"
    figures = share_figures(rows, label, False)   # one cycle a limit: no interval to judge
    figures.append(Figure(f"HAMi-core loaded, no limit: throughput ({size_name} workload)",
                          hook_cost, "% of the job without it", "", None,
                          f"steps/s with LD_PRELOAD and CUDA_DEVICE_SM_LIMIT=100 over the "
                          f"control runs beside it, mean of {len(hooked)} ± {hook_ci:.2f} pp "
                          "(95 % CI)"))
    control_step = _mean(p["duration_per_step_us"] for p in throttled if p["perf"] == 100)
    record_figures(bench, figures, host_cpu=size_name == "small", workload=workload,
                   peer="HAMi-core", library=str(lib),
                   phases=phases, rows=rows, nvml_error=sampler.error,
                   control_step_us=control_step)
    add_plot(report_artifacts, bench, rows, label, control_step)
    print(f"\nHAMi-core delivered share ({size_name}): " + ", ".join(
        f"limit={r['perf']}: {_fmt(r['throughput_pct'])} % thr, "
        f"{_fmt(r['nvml_busy_pct'])} % NVML" for r in rows))
    assert len(rows) == len(PERFS), rows
