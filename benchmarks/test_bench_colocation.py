"""Co-location on one GPU: a guaranteed job beside an opportunistic job throttled to p.

Two processes (``python -m benchmarks.bench_job``), each its own runtime with its own
``GPU_CONFIG_FILE``, train the same workload on GPU 0. The guaranteed job runs at
perfControl 100 throughout; its throughput (steps per second, from the step records' end
times on the shared monotonic clock) is measured in windows of W seconds:

1. alone (solo);
2. beside the opportunistic job at perfControl 10, then 25, then 50 (its config rewritten
   in place of a scheduler; each window starts once the new value is in force and a few
   of its steps have run);
3. alone again (the solo figure is the mean of 1 and 3; their difference shows drift).

Figures: the guaranteed job's throughput relative to solo (target: at least 90 % at p = 10)
and the opportunistic job's throughput, absolute and relative to the same workload alone,
with its compute share as its runtime measures it. On the simulated device the two jobs
share the CPU cores instead of a GPU: a short smoke of the mechanism, not the GPU figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_support import (GPU_MEMORY, WORKLOADS, Figure, now_us, one_shot,
                                      record_figures, size, write_config)

pytestmark = pytest.mark.capability("executor", "gpu_op_manager", "resource_management",
                                    "workload")

ROOT = Path(__file__).resolve().parent.parent
PERFS = (10, 25, 50)
WINDOW_S = size(1.0, 8.0)
POLL_S = 0.1
START_TIMEOUT_S = 120.0
GUARANTEED_TARGET = 0.90


class Job:
    """One job process and the records it wrote (with the time each was read)."""

    def __init__(self, name: str, rt_name: str, config: Path, seed: int,
                 workload: dict[str, Any]) -> None:
        self.name = name
        self.config = config
        self.records: list[dict[str, Any]] = []
        self.hello: dict[str, Any] | None = None
        self._cv = threading.Condition()
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ, ANTMAN_RUNTIME=rt_name, GPU_CONFIG_FILE=str(config),
                   PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
        env.pop("GPU_STATUS_FILE", None)
        w = workload
        cmd = [sys.executable, "-m", "benchmarks.bench_job", "--batch", str(w["batch"]),
               "--input-dim", str(w["input_dim"]), "--hidden", str(w["hidden"]),
               "--layers", str(w["layers"]), "--seed", str(seed),
               "--gpu-memory", str(GPU_MEMORY), "--poll-interval", str(POLL_S)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr)
        self._reader = threading.Thread(target=self._read, name=f"bench-{name}-reader",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            with self._cv:
                if rec.get("type") == "hello":
                    self.hello = rec
                elif rec.get("type") == "step":
                    self.records.append(rec)
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-3000:]

    def wait_steps(self, n: int, after_us: int = 0, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until ``n`` steps ended after ``after_us`` (monotonic µs)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while sum(1 for r in self.records if r["t_us"] > after_us) < n:
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, (
                    f"{self.name} job: {n} steps after {after_us} not seen "
                    f"(exit {self.proc.poll()}); stderr:\n{self.stderr()}")
                self._cv.wait(min(left, 0.5))

    def window(self, t0: int, t1: int) -> dict[str, Any]:
        with self._cv:
            recs = [r for r in self.records if t0 <= r["t_us"] <= t1]
        out: dict[str, Any] = {"steps": len(recs)}
        if len(recs) >= 2:
            span = recs[-1]["t_us"] - recs[0]["t_us"]
            out["steps_per_s"] = (len(recs) - 1) / span * 1e6 if span > 0 else None
            out["busy_share"] = sum(r["busy_us"] for r in recs[1:]) / span if span else None
        else:
            out["steps_per_s"] = None
            out["busy_share"] = None
        return out

    def stop(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)
        self._stderr.close()


def measure(seconds: float) -> tuple[int, int]:
    t0 = now_us()
    time.sleep(seconds)
    return t0, now_us()


@pytest.mark.parametrize("size_name", list(WORKLOADS))
def test_bench_colocation(rt, bench, tmp_path, report_artifacts, size_name: str) -> None:
    workload = WORKLOADS[size_name]
    g_cfg, o_cfg = tmp_path / "guaranteed.json", tmp_path / "opportunistic.json"
    write_config(g_cfg, perf=100)
    write_config(o_cfg, perf=PERFS[0])
    jobs: list[Job] = []
    phases: dict[str, dict[str, Any]] = {}

    def experiment() -> None:
        g = Job("guaranteed", rt.__name__, g_cfg, seed=0, workload=workload)
        jobs.append(g)
        g.wait_steps(size(50, 30))         # warmed up: allocator pool grown, caches hot
        phases["solo_before"] = {"guaranteed": g.window(*measure(WINDOW_S))}
        o = Job("opportunistic", rt.__name__, o_cfg, seed=1, workload=workload)
        jobs.append(o)
        for i, p in enumerate(PERFS):
            if i:
                write_config(o_cfg, perf=p)
            t = now_us()
            time.sleep(2 * POLL_S + 0.05)       # detected, then in force at a boundary
            o.wait_steps(3, after_us=t + int((2 * POLL_S + 0.05) * 1e6))
            t0, t1 = measure(WINDOW_S)
            phases[f"p{p}"] = {"guaranteed": g.window(t0, t1), "opportunistic": o.window(t0, t1)}
        o.stop()
        t = now_us()
        g.wait_steps(3, after_us=t)
        phases["solo_after"] = {"guaranteed": g.window(*measure(WINDOW_S))}
        g.stop()

    try:
        one_shot(bench, experiment)
    finally:
        for job in jobs:
            if job.proc.poll() is None:
                job.stop()
    backend = (jobs[0].hello or {}).get("backend")
    solo_runs = [phases[k]["guaranteed"]["steps_per_s"] for k in ("solo_before", "solo_after")]
    assert all(solo_runs), f"no solo throughput: {phases}"
    solo = sum(solo_runs) / 2
    figures, g_rel, o_rel = [], [], []
    for p in PERFS:
        gp, op = phases[f"p{p}"]["guaranteed"], phases[f"p{p}"]["opportunistic"]
        rel = gp["steps_per_s"] / solo if gp["steps_per_s"] else None
        orel = op["steps_per_s"] / solo if op["steps_per_s"] else None
        g_rel.append(rel)
        o_rel.append(orel)
        figures.append(Figure(
            f"guaranteed throughput beside opportunistic p={p} ({size_name} workload)",
            None if rel is None else 100 * rel, "% of solo",
            f"≥ {GUARANTEED_TARGET * 100:.0f} % (GPU)" if p == 10 else "",
            (rel is not None and rel >= GUARANTEED_TARGET) if p == 10 and backend == "cuda"
            else None,
            f"steps/s over a {WINDOW_S} s window with both jobs running, over the mean of "
            "two solo windows (before and after)",
            {"steps_per_s": gp["steps_per_s"], "solo_steps_per_s": solo}))
        figures.append(Figure(
            f"opportunistic throughput at p={p} ({size_name} workload)", op["steps_per_s"],
            "steps/s", "", None,
            f"steps/s over the same {WINDOW_S} s window",
            {"relative_to_solo_pct": None if orel is None else 100 * orel,
             "busy_share_pct": None if op["busy_share"] is None else 100 * op["busy_share"],
             "steps_in_window": op["steps"]}))
    drift = (solo_runs[1] - solo_runs[0]) / solo_runs[0] * 100
    record_figures(bench, figures, backend=backend, workload=workload, window_s=WINDOW_S,
                   solo_steps_per_s=solo_runs, solo_drift_pct=drift, phases=phases)
    pct = lambda v: None if v is None else round(100 * v, 2)  # noqa: E731
    report_artifacts.add("colocation_throughput", {
        "categories": ["solo"] + [f"p = {p}" for p in PERFS],
        "series": {"guaranteed job (% of solo)": [100.0] + [pct(v) for v in g_rel],
                   "opportunistic job (% of solo)": [None] + [pct(v) for v in o_rel],
                   "opportunistic job's compute share (%)": [None] + [
                       pct(phases[f"p{p}"]["opportunistic"]["busy_share"]) for p in PERFS]},
        "targets": [None, GUARANTEED_TARGET * 100] + [None] * (len(PERFS) - 1),
        "ylabel": "throughput, % of the job alone",
        "title": f"Co-location on one {'GPU' if backend == 'cuda' else 'simulated device'}: "
                 f"guaranteed job beside an opportunistic job at perfControl p ({size_name} "
                 f"workload, solo {solo:.1f} steps/s)"})
    print(f"\nco-location ({backend}, {size_name}): solo {solo_runs} steps/s (drift {drift:+.1f} %); "
          + ", ".join(f"p={p}: guaranteed {pct(g)} %, opportunistic {pct(o)} %"
                      for p, g, o in zip(PERFS, g_rel, o_rel)))
