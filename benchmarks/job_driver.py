"""Training jobs measured from outside: job processes, their windows, and the GPU beside them.

What a user of a GPU-sharing runtime sees of a throttled job is its throughput and what the GPU
did, not the runtime's bookkeeping. This module drives benchmark jobs as separate processes and
measures them as a user would:

- ``Job``: one ``python -m benchmarks.bench_job`` process (its own runtime, its own
  ``GPU_CONFIG_FILE``), optionally under another idle-time variant (``benchmarks.idle_variants``)
  or another environment (``LD_PRELOAD`` of a peer's library). Its step records carry the
  system-wide monotonic time at which each step returned; ``window(t0, t1)`` turns the records
  of a time window into throughput (steps per second between the first and the last step end
  inside the window), the job's own accounting (busy time) and the perfControl in force.
- ``GpuSampler``: a thread reading NVML while jobs run: the device's utilisation (the fraction
  of time a kernel ran, from the driver's utilisation samples), each process's SM utilisation,
  and the SM clock, so that a window's GPU busy fraction and clock can be read beside its
  throughput. Without NVML it records nothing and every NVML figure is None.

``now_us()`` (``bench_support``) is the clock of the step records and of the windows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean as mean
from typing import Any

from benchmarks.bench_support import GPU_MEMORY, median, now_us

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 180.0
POLL_S = 0.1


class Job:
    """One job process and the records it wrote (see the module docstring)."""

    def __init__(self, name: str, *, runtime: str, config: Path, workload: dict[str, Any],
                 seed: int = 0, variant: str = "reference", env: dict[str, str] | None = None,
                 gpu_memory: int = GPU_MEMORY, poll_s: float = POLL_S,
                 events: bool = True) -> None:
        self.name = name
        self.config = config
        self.variant = variant
        self.records: list[dict[str, Any]] = []
        self.hello: dict[str, Any] | None = None
        self._cv = threading.Condition()
        self._stderr = tempfile.TemporaryFile()
        full_env = dict(os.environ, ANTMAN_RUNTIME=runtime, GPU_CONFIG_FILE=str(config),
                        PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
        full_env.pop("GPU_STATUS_FILE", None)
        full_env.update(env or {})
        w = workload
        cmd = [sys.executable, "-m", "benchmarks.bench_job", "--batch", str(w["batch"]),
               "--input-dim", str(w["input_dim"]), "--hidden", str(w["hidden"]),
               "--layers", str(w["layers"]), "--seed", str(seed),
               "--gpu-memory", str(gpu_memory), "--poll-interval", str(poll_s),
               "--variant", variant, *(["--events"] if events else [])]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdin=subprocess.PIPE,
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

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")[-3000:]

    def wait_steps(self, n: int, after_us: int = 0, timeout_s: float = START_TIMEOUT_S,
                   perf: int | None = None) -> int:
        """Until ``n`` steps ended after ``after_us`` (with ``perf`` in force, when given);
        returns the end time of the last of them."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while True:
                recs = [r for r in self.records if r["t_us"] > after_us
                        and (perf is None or r.get("perf") == perf)]
                if len(recs) >= n:
                    return recs[n - 1]["t_us"]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} job: {n} steps after {after_us}"
                        f"{'' if perf is None else f' at perfControl {perf}'} not seen "
                        f"(exit {self.proc.poll()}); stderr:\n{self.stderr()}")
                self._cv.wait(min(left, 0.5))

    def window(self, t0: int, t1: int) -> "Window":
        with self._cv:
            recs = [r for r in self.records if t0 <= r["t_us"] <= t1]
        return Window.of(recs, t0, t1)

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

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


@dataclass
class Window:
    """A job's steps that ended inside ``[t0, t1]`` (monotonic µs)."""

    t0: int
    t1: int
    steps: int
    steps_per_s: float | None          # (steps − 1) / (last end − first end)
    busy_share: float | None           # Σ busy_us of the steps after the first / that span
    busy_per_step_us: float | None     # mean; the job's own accounting: session − idle slots
    duration_per_step_us: float | None  # mean host time of a step, the throttle sleep included
    gpu_span_per_step_us: float | None  # mean; CUDA events: the step's start → its last kernel
    busy_median_us: float | None = None
    busy_p95_us: float | None = None
    sleep_req_per_step_us: float | None = None   # the throttle's sleep, requested (mean) ...
    sleep_act_per_step_us: float | None = None   # ... and as long as it really lasted
    perfs: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, recs: list[dict[str, Any]], t0: int, t1: int) -> "Window":
        perfs = sorted({int(r["perf"]) for r in recs if r.get("perf") is not None})
        if len(recs) < 2:
            return cls(t0, t1, len(recs), None, None, None, None, None, perfs=perfs)
        span = recs[-1]["t_us"] - recs[0]["t_us"]
        tail = recs[1:]                       # the steps that ended after the first end
        busy = sorted(r["busy_us"] for r in tail)
        spans = [r["gpu_span_us"] for r in tail if r.get("gpu_span_us") is not None]
        return cls(t0, t1, len(recs),
                   (len(recs) - 1) / span * 1e6 if span > 0 else None,
                   sum(busy) / span if span > 0 else None,
                   mean(busy), mean([r["duration_us"] for r in tail]),
                   mean(spans) if spans else None,
                   median(busy), busy[min(len(busy) - 1, int(0.95 * len(busy)))],
                   mean([r.get("sleep_req_us", 0) for r in tail]),
                   mean([r.get("sleep_act_us", 0) for r in tail]), perfs)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class GpuSampler:
    """NVML readings while jobs run (see the module docstring)."""

    def __init__(self, device: int = 0, period_s: float = 0.05) -> None:
        self.period_s = period_s
        self.util: list[tuple[int, float]] = []        # (monotonic µs, device utilisation %)
        self.sm_clock: list[tuple[int, float]] = []    # (monotonic µs, SM clock MHz)
        self.process_sm: list[tuple[int, int, float]] = []  # (monotonic µs, pid, SM util %)
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        except Exception as exc:  # no NVML: nothing is sampled, every figure is None
            self._nvml = None
            self.error = f"{type(exc).__name__}: {exc}"

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def start(self) -> "GpuSampler":
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._run, name="bench-nvml-sampler",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        nv, h = self._nvml, self._handle
        last_util_ts = last_proc_ts = 0
        epoch_offset = time.time() * 1e6 - now_us()       # NVML stamps are wall-clock µs
        while not self._stop.wait(self.period_s):
            try:
                _, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES,
                                                     last_util_ts)
                for s in samples:
                    if s.timeStamp > last_util_ts:
                        last_util_ts = s.timeStamp
                        self.util.append((int(s.timeStamp - epoch_offset),
                                          float(s.sampleValue.uiVal)))
            except Exception as exc:
                self.error = self.error or f"nvmlDeviceGetSamples: {exc}"
            try:
                clock = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
                self.sm_clock.append((now_us(), float(clock)))
            except Exception as exc:
                self.error = self.error or f"nvmlDeviceGetClockInfo: {exc}"
            try:
                procs = nv.nvmlDeviceGetProcessUtilization(h, last_proc_ts)
            except Exception as exc:  # "Not Found": no sample since the last read
                procs = []
                if "Not Found" not in str(exc):
                    self.error = self.error or f"nvmlDeviceGetProcessUtilization: {exc}"
            for p in procs:
                if p.timeStamp > last_proc_ts:
                    self.process_sm.append((int(p.timeStamp - epoch_offset), int(p.pid),
                                            float(p.smUtil)))
            if procs:
                last_proc_ts = max([last_proc_ts] + [p.timeStamp for p in procs])

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    def __enter__(self) -> "GpuSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- figures of a window -------------------------------------------------------------
    def busy_percent(self, t0: int, t1: int) -> float | None:
        """Mean device utilisation of the samples taken inside the window."""
        vals = [v for t, v in self.util if t0 <= t <= t1]
        return sum(vals) / len(vals) if vals else None

    def process_sm_percent(self, pid: int, t0: int, t1: int) -> float | None:
        vals = [v for t, p, v in self.process_sm if p == pid and t0 <= t <= t1]
        return sum(vals) / len(vals) if vals else None

    def sm_clock_mhz(self, t0: int, t1: int) -> float | None:
        vals = [v for t, v in self.sm_clock if t0 <= t <= t1]
        return median(vals) if vals else None

    def clocks(self) -> dict[str, Any] | None:
        """The SM and memory clocks now, and the SM clock's maximum (MHz)."""
        if self._nvml is None:
            return None
        nv, h = self._nvml, self._handle
        out: dict[str, Any] = {}
        for key, fn, arg in (("sm_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
                             ("mem_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
                             ("sm_max_mhz", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM)):
            try:
                out[key] = int(fn(h, arg))
            except Exception:
                out[key] = None
        return out


def gpu_clocks(device: int = 0) -> dict[str, Any] | None:
    """The GPU's clocks now (see ``GpuSampler.clocks``); None without NVML."""
    sampler = GpuSampler(device)
    try:
        return sampler.clocks()
    finally:
        sampler.stop()


def measure_for(seconds: float) -> tuple[int, int]:
    t0 = now_us()
    time.sleep(seconds)
    return t0, now_us()
