"""A fork beside the reference in one run: ``--bench-against MODULE`` (with ``--runtime FORK``).

Absolute figures do not compare across machines; ratios from interleaved runs on one machine
do. Each comparable benchmark's own body (the test function, called with a ``RoundBench`` in
place of pytest-benchmark's fixture) runs once a round on each runtime, in this process,
interleaved A B, B A, A B, ... (``--bench-against-rounds`` rounds; the order alternates so a
drift of the machine weighs on both alike). Each round gives one paired value per metric;
the ratio fork / reference is reported with a 95 % interval over the paired rounds:

- all values positive: the geometric mean of the per-round ratios, Student's t-interval over
  their logarithms;
- otherwise: the ratio of the means, a percentile bootstrap over the paired rounds (fixed
  seed); no ratio where the reference's mean is not positive.

The metrics: delivered share at each perfControl (``test_bench_delivered_share``), the
management overhead as a step-time factor (1 + overhead) and the op manager's cost per queued
op (``test_bench_throttle_overhead``), and the BFC allocate+free pair
(``test_bench_bfc_allocate_free_pair``, median ns a pair).

Each round is a whole run of the body at the sizes of the device: seconds a round on the
simulated device, minutes on a GPU (the overhead body's budget is
``ANTMAN_BENCH_OVERHEAD_BUDGET_S``); the delivered share uses the small workload.
"""

from __future__ import annotations

import math
import re
import statistics
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_support import Figure, mean_ci95, runtime_maker

OPTION = "--bench-against"
ROUNDS_OPTION = "--bench-against-rounds"
MARKER = "against"
BOOTSTRAP_RESAMPLES = 2000
PAIR_BATCHES, PAIR_CALLS = 7, 2000


class NoArtifacts:
    """``report_artifacts`` for a round: its plots are not drawn."""

    def add(self, *args: Any, **kwargs: Any) -> None:
        pass


@dataclass
class RoundBench:
    """pytest-benchmark's fixture for one round of a benchmark body: ``pedantic`` runs the
    experiment once; calling it times a small function (``call_ns``: median ns a call of
    ``PAIR_BATCHES`` batches of ``PAIR_CALLS``)."""

    extra_info: dict[str, Any] = field(default_factory=dict)
    call_ns: float | None = None

    def pedantic(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
                 setup: Callable[[], Any] | None = None, rounds: int = 1, **_: Any) -> Any:
        result = None
        for _round in range(rounds):
            a, k = args, kwargs or {}
            if setup is not None:
                made = setup()
                if made is not None:
                    a, k = made
            result = fn(*a, **k)
        return result

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        batches = []
        for _ in range(PAIR_BATCHES):
            t = time.perf_counter_ns()
            for _ in range(PAIR_CALLS):
                fn(*args, **kwargs)
            batches.append((time.perf_counter_ns() - t) / PAIR_CALLS)
        self.call_ns = statistics.median(batches)
        return fn(*args, **kwargs)


@dataclass(frozen=True)
class Round:
    """What one round of a comparable gives a runtime: ``tmp`` a fresh folder, ``env`` a
    ``pytest.MonkeyPatch`` undone after the round."""

    rt: types.ModuleType
    tmp: Path
    env: pytest.MonkeyPatch


def _figures(bench: RoundBench) -> dict[str, float | None]:
    return {f["name"]: f.get("value") for f in bench.extra_info.get("figures", [])}


def delivered_share(r: Round) -> dict[str, float | None]:
    from benchmarks import test_bench_delivered_share as share
    bench = RoundBench()
    share.test_bench_delivered_share(r.rt, bench, r.tmp, NoArtifacts(), "small",
                                     share.selected_variants()[0])
    out = {}
    for name, value in _figures(bench).items():
        m = re.match(r"delivered throughput at perfControl (\d+)", name)
        if m:
            out[f"delivered share at perfControl {m.group(1)}"] = value
    return out


def throttle(r: Round) -> dict[str, float | None]:
    from benchmarks import test_bench_throttle as throttle_bench
    bench = RoundBench()
    with runtime_maker(r.rt, r.env, r.tmp) as make:
        throttle_bench.test_bench_throttle_overhead(r.rt, bench, make, NoArtifacts(), "small")
    figs = {name.partition(" (")[0]: v for name, v in _figures(bench).items()}
    over = figs.get("step time, management idle / disabled")
    return {"management overhead (step-time factor, 1 + overhead)":
            None if over is None else 1 + over / 100,
            "op manager cost per queued op": figs.get(
                "op manager cost per queued op, zero idle time")}


def allocator_pair(r: Round) -> dict[str, float | None]:
    from benchmarks import test_bench_allocator as allocator_bench
    if "bfc" not in getattr(r.rt, "CAPABILITIES", ()):
        return {"allocator pair cost": None}
    bench = RoundBench()
    allocator_bench.test_bench_bfc_allocate_free_pair(r.rt, bench)
    return {"allocator pair cost": bench.call_ns}


#: name → one round's metrics of a runtime (metric → value; None: not measured).
COMPARABLES: dict[str, Callable[[Round], dict[str, float | None]]] = {
    "delivered_share": delivered_share, "overhead_and_op_manager": throttle,
    "allocator_pair": allocator_pair}


@dataclass
class Comparison:
    order: list[str] = field(default_factory=list)            # runtime of each run, in order
    fork: dict[str, list[float | None]] = field(default_factory=dict)
    reference: dict[str, list[float | None]] = field(default_factory=dict)


def interleave(measure: Callable[[Round], dict[str, float | None]], fork: types.ModuleType,
               reference: types.ModuleType, rounds: int, tmp: Path) -> Comparison:
    """``rounds`` paired rounds, reference and fork alternating first (A B, B A, ...)."""
    out = Comparison()
    for i in range(rounds):
        pair = [("reference", reference), ("fork", fork)]
        for role, rt in (pair if i % 2 == 0 else pair[::-1]):
            folder = tmp / f"round{i}-{role}"
            folder.mkdir(parents=True)
            with pytest.MonkeyPatch.context() as env:
                values = measure(Round(rt, folder, env))
            out.order.append(role)
            for metric, value in values.items():
                getattr(out, role).setdefault(metric, []).append(value)
    return out


@dataclass(frozen=True)
class Ratio:
    value: float | None
    low: float | None
    high: float | None
    method: str
    rounds: int


def paired_ratio(fork: list[float | None], reference: list[float | None]) -> Ratio:
    """fork / reference over paired rounds, with a 95 % interval (see the module docstring).
    Rounds where either value is missing are dropped."""
    pairs = [(f, r) for f, r in zip(fork, reference) if _finite(f) and _finite(r)]
    n = len(pairs)
    if n and all(f > 0 and r > 0 for f, r in pairs):
        logs = [math.log(f / r) for f, r in pairs]
        mean, half = mean_ci95(logs)
        finite = math.isfinite(half)
        return Ratio(math.exp(mean), math.exp(mean - half) if finite else None,
                     math.exp(mean + half) if finite else None,
                     "geometric mean of paired ratios, t-interval over their logs", n)
    method = "ratio of means, percentile bootstrap over paired rounds"
    if not n or statistics.fmean(r for _, r in pairs) <= 0:
        return Ratio(None, None, None, method + " (reference mean not positive)", n)
    import numpy as np
    f_arr, r_arr = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    idx = np.random.default_rng(0).integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    num, den = f_arr[idx].mean(axis=1), r_arr[idx].mean(axis=1)
    ok = den > 0
    boot = num[ok] / den[ok]
    value = float(f_arr.mean() / r_arr.mean())
    if n < 2 or boot.size < BOOTSTRAP_RESAMPLES // 2:
        return Ratio(value, None, None, method, n)
    low, high = np.percentile(boot, [2.5, 97.5])
    return Ratio(value, float(low), float(high), method, n)


def ratio_figures(comparison: Comparison, fork_name: str,
                  reference_name: str) -> list[Figure]:
    figures = []
    for metric, ref_values in comparison.reference.items():
        fork_values = comparison.fork.get(metric, [])
        r = paired_ratio(fork_values, ref_values)
        figures.append(Figure(
            f"{metric}: {fork_name} / {reference_name}", r.value, "× reference", "", None,
            f"{r.method}; {r.rounds} paired rounds, interleaved in one process",
            {"interval": [r.low, r.high], "rounds": r.rounds, "method": r.method,
             "fork_values": fork_values, "reference_values": ref_values}))
    return figures


def load_reference(name: str) -> types.ModuleType:
    """The runtime module to compare against, checked like ``--runtime`` (API-1, API-2); a
    problem is a one-line ``pytest.UsageError``."""
    import importlib

    from conformance.plugin import _where, runtime_problem
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise pytest.UsageError(f"{OPTION} {name!r}: cannot import it "
                                f"({_where(exc)})") from None
    problem = runtime_problem(module)
    if problem:
        raise pytest.UsageError(f"{OPTION} {name!r}: {problem}")
    return module


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
