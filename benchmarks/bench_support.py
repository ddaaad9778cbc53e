"""Shared pieces of the throttling benchmarks: sizes, clocks, step probes, figures.

- ``FULL``: full sizes on a real GPU (``ANTMAN_DEVICE=cuda``) or when ``ANTMAN_BENCH_FULL=1``;
  short sizes otherwise (the simulated device in CI: each benchmark a few seconds).
- ``TimingClock``: a ``Clock`` (SPEC.md API-4) over the real clock that times the sleeps on
  GpuOpManager threads (OPM-3 names them ``antman-gpu-op-manager...``): the step's idle
  slots, requested and actually slept; other sleeps pass through uncounted.
  ``instant_sleep=True`` makes every sleep return at once (zero idle time), for cost
  measurements.
- ``StepProbe``: a session-run action registered at ``(POST_SESSION_RUN, 1)``, before
  GPUResourceManagement (phase 2) throttles, that records each step's ``sess_duration_us``
  (what the throttle arithmetic RM-10 is given), its idle slots and its ``graph_id``.
- ``now_us``: the system-wide monotonic clock in µs (co-location, memory scaling).
- ``Figure`` / ``record_figures``: one measured value against its target, kept in the
  benchmark's ``extra_info["figures"]`` (the JSON of ``--benchmark-json``) and shown by the
  certification report's benchmark table.

Only the public runtime API (SPEC.md section 1) is used; the runtime is the suite's ``rt``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

OPM_THREAD_PREFIX = "antman-gpu-op-manager"
GPU = "/device:GPU:0"
MiB = 1 << 20
GiB = 1 << 30


def full_mode() -> bool:
    """Full sizes: ``ANTMAN_BENCH_FULL=1``, or the cuda backend selected by ``ANTMAN_DEVICE``."""
    if os.environ.get("ANTMAN_BENCH_FULL", "").strip() in ("1", "true", "yes"):
        return True
    return os.environ.get("ANTMAN_DEVICE", "").strip().lower() == "cuda"


FULL = full_mode()


def size(short: Any, full: Any) -> Any:
    return full if FULL else short


def on_cuda(ctx: Any) -> bool:
    return getattr(getattr(ctx, "backend", None), "name", None) == "cuda"


#: The training workload of the throttle, overhead, co-location and allocator benchmarks. On
#: the GPU a step multiplies 4096×2048 matrices (about 0.1 TFLOP a step; a few ms on an H200,
#: much of it the runtime's own per-op work).
WORKLOAD = size(dict(batch=64, input_dim=64, hidden=128, layers=3, classes=10, seed=0),
                dict(batch=4096, input_dim=256, hidden=2048, layers=3, classes=10, seed=0))
#: A device-bound step for the full runs (about 1 TFLOP a step: tens of ms on an H200), where
#: the runtime's fixed per-op costs weigh as they do in a real training job.
LARGE_WORKLOAD = dict(batch=8192, input_dim=1024, hidden=4096, layers=3, classes=10, seed=0)
#: The workloads a benchmark runs: the small one always, the large one on a GPU
#: (``ANTMAN_DEVICE=cuda``; on the simulated device a large step would take minutes).
WORKLOADS = {"small": WORKLOAD,
             **({"large": LARGE_WORKLOAD}
                if os.environ.get("ANTMAN_DEVICE", "").strip().lower() == "cuda" else {})}
GPU_MEMORY = size(256 * MiB, 4 * GiB)


# --- clocks ---------------------------------------------------------------------------------

class TimingClock:
    """The real clock, timing the op manager's sleeps; see the module docstring."""

    def __init__(self, base: Any = None, *, instant_sleep: bool = False,
                 spin_us: int = 0) -> None:
        if base is None:
            from reference_runtime.clock import REAL_CLOCK as base  # noqa: N811
        self._base = base
        self.instant_sleep = instant_sleep
        self.spin_us = spin_us           # the last spin_us of a sleep are busy-waited
        self._lock = threading.Lock()
        self.idle_requested_us = 0       # op-manager sleeps: requested ...
        self.idle_actual_us = 0          # ... and actually slept
        self.other_requested_us = 0      # every other sleep (the throttle's, after a step) ...
        self.other_actual_us = 0         # ... and how long it really took

    def now_us(self) -> int:
        return self._base.now_us()

    def time_s(self) -> int:
        return self._base.time_s()

    def wait(self, event: threading.Event, timeout_us: int) -> bool:
        return self._base.wait(event, timeout_us)

    def sleep_us(self, duration_us: int, cancel: threading.Event | None = None) -> bool:
        start = time.perf_counter_ns()
        if self.instant_sleep:
            done = not (cancel is not None and cancel.is_set())
        elif self.spin_us > 0:
            done = self._spin_sleep(duration_us, cancel)
        else:
            done = self._base.sleep_us(duration_us, cancel)
        slept = (time.perf_counter_ns() - start) // 1000
        with self._lock:
            if threading.current_thread().name.startswith(OPM_THREAD_PREFIX):
                self.idle_requested_us += max(0, int(duration_us))
                self.idle_actual_us += slept
            else:
                self.other_requested_us += max(0, int(duration_us))
                self.other_actual_us += slept
        return done

    def other_sleeps(self) -> tuple[int, int]:
        """(sleeps off the op manager requested, actually slept), µs, since the clock was made."""
        with self._lock:
            return self.other_requested_us, self.other_actual_us

    def _spin_sleep(self, duration_us: int, cancel: threading.Event | None) -> bool:
        deadline = self._base.now_us() + max(0, int(duration_us))
        if not self._base.sleep_us(max(0, int(duration_us) - self.spin_us), cancel):
            return False
        while self._base.now_us() < deadline:
            if cancel is not None and cancel.is_set():
                return False
        return True

    def snapshot(self) -> tuple[int, int]:
        """(idle slots requested, idle slots slept), µs, since the clock was made."""
        with self._lock:
            return self.idle_requested_us, self.idle_actual_us


# --- step probes ----------------------------------------------------------------------------

@dataclass
class StepRecord:
    sess_us: int            # sess_duration_us handed to the POST actions (RM-10's d)
    idle_req_us: int        # idle slots requested in the step (OPM-4)
    idle_act_us: int        # idle slots actually slept
    graph_id: int
    t_us: int               # clock time at the step boundary


class StepProbe:
    """POST/1 action: one ``StepRecord`` per step (see the module docstring)."""

    PHASE = 1

    def __init__(self, clock: TimingClock | None) -> None:
        self.name = "BenchStepProbe"
        self.clock = clock
        self.records: list[StepRecord] = []
        self._last = clock.snapshot() if clock is not None else (0, 0)

    def run_action(self, options: Any) -> None:
        now = self.clock.snapshot() if self.clock is not None else (0, 0)
        req, act = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        t = self.clock.now_us() if self.clock is not None else time.monotonic_ns() // 1000
        self.records.append(StepRecord(int(options.sess_duration_us), req, act,
                                       int(options.graph_id), t))

    def install(self, rt: types.ModuleType, registry: Any) -> "StepProbe":
        registry.register(rt.Grouping.POST_SESSION_RUN, self.PHASE, self)
        return self

    def clear(self) -> None:
        self.records.clear()


class GpuSpanProbe:
    """CUDA events around each step on GPU 0's stream: PRE records the start, POST (phase 0,
    after the executor waited for the step's GPU work, EXEC-14) the end; ``take()`` returns the
    last step's span in µs on the GPU's clock (None before a complete pair)."""

    def __init__(self, device: int = 0) -> None:
        import cupy
        self._cupy = cupy
        self._device = device
        self._start = self._end = None
        self._span_us: float | None = None
        outer = self

        class _Start:
            name = "BenchGpuSpanStart"

            def run_action(self, options: Any) -> None:
                outer._record("start")

        class _End:
            name = "BenchGpuSpanEnd"

            def run_action(self, options: Any) -> None:
                outer._record("end")

        self._actions = (_Start(), _End())

    def _record(self, which: str) -> None:
        cp = self._cupy
        with cp.cuda.Device(self._device):
            event = cp.cuda.Event()
            event.record()
        if which == "start":
            self._start = event
            return
        event.synchronize()
        if self._start is not None:
            self._span_us = cp.cuda.get_elapsed_time(self._start, event) * 1000.0
        self._start = None

    def take(self) -> float | None:
        span, self._span_us = self._span_us, None
        return None if span is None else round(span, 1)

    def install(self, rt: types.ModuleType, registry: Any) -> "GpuSpanProbe":
        registry.register(rt.Grouping.PRE_SESSION_RUN, 0, self._actions[0])
        registry.register(rt.Grouping.POST_SESSION_RUN, 0, self._actions[1])
        return self


# --- figures --------------------------------------------------------------------------------

@dataclass
class Figure:
    """One measured value against its target, with how it was measured."""

    name: str
    value: float | None
    unit: str
    target: str = ""
    met: bool | None = None
    how: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    host_cpu: bool = False     # the figure depends on the host CPU (the report marks it)


def record_figures(benchmark: Any, figures: list[Figure], *, host_cpu: bool = False,
                   **extra: Any) -> None:
    """Put ``figures`` (and ``extra``) into the benchmark's ``extra_info``; ``host_cpu``
    marks them all as depending on the host CPU."""
    info = benchmark.extra_info
    info.setdefault("figures", [])
    info["figures"].extend(_clean({**asdict(f), "host_cpu": f.host_cpu or host_cpu})
                           for f in figures)
    info.update(_clean(extra))


def _clean(value: Any) -> Any:
    """JSON-safe: floats rounded, NaN/inf as None."""
    if isinstance(value, float):
        return None if value != value or value in (float("inf"), float("-inf")) \
            else round(value, 6)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


#: Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (then 1.96 + 2.4/df).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96 + 2.4 / df


def mean_ci95(xs: list[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % confidence interval; inf with fewer than 2 values)."""
    if not xs:
        return float("nan"), float("inf")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, float("inf")
    return m, t95(len(xs) - 1) * statistics.stdev(xs) / len(xs) ** 0.5


def now_us() -> int:
    """The system-wide monotonic clock in µs (``bench_job``'s step records use it too)."""
    return time.monotonic_ns() // 1000


def one_shot(benchmark: Any, fn: Any) -> Any:
    """Run a whole experiment once under pytest-benchmark (its time is the experiment's)."""
    return benchmark.pedantic(fn, rounds=1, iterations=1, warmup_rounds=0)


def write_config(path: Any, **doc: Any) -> None:
    """Replace the config atomically (temp file, fsync, rename), as a scheduler does."""
    from fixtures.config_writer import ConfigWriter, config_document
    ConfigWriter(path).write(config_document(**doc))


def gpu_device(ctx: Any) -> Any:
    return ctx.device_mgr.lookup_device(GPU)


def device_bfc(device: Any) -> Any:
    """The GPU's BFC: the VMem allocator's device side, or the allocator itself."""
    allocator = device.get_allocator()
    return getattr(allocator, "device_allocator", allocator)


@contextlib.contextmanager
def runtime_maker(rt: types.ModuleType, monkeypatch: Any,
                  tmp_path: Any) -> Iterator[Callable[..., Any]]:
    """``make(**kwargs)``: a runtime with resource management on (config at perfControl 100).

    Defaults: backend from ``ANTMAN_DEVICE`` (the simulated device unless ``cuda``), one GPU of
    ``GPU_MEMORY`` bytes, the real clock, ``poll_interval_s=1.0``, no statistics file.
    ``make.config(ctx)`` is the runtime's config path (a ``pathlib.Path``). The runtimes are
    closed on exit; ``monkeypatch`` restores the variables enabling sets (RM-1).
    """
    for name in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_VMEM", "GPU_CONFIG_FILE",
                 "GPU_STATUS_FILE"):
        monkeypatch.setenv(name, "")              # restored at teardown
        monkeypatch.delenv(name)
    made: list[Any] = []
    paths: dict[int, Any] = {}

    def make(**kwargs: Any) -> Any:
        path = tmp_path / f"sche2pai-{len(made)}.json"
        write_config(path, perf=100)
        kwargs.setdefault("config_file", str(path))
        kwargs.setdefault("status_file", None)
        kwargs.setdefault("gpu_memory_bytes", GPU_MEMORY)
        ctx = rt.create_runtime(**kwargs)
        made.append(ctx)
        paths[id(ctx)] = path
        return ctx

    make.config = lambda ctx: paths[id(ctx)]  # type: ignore[attr-defined]
    try:
        yield make
    finally:
        for ctx in reversed(made):
            ctx.close()
