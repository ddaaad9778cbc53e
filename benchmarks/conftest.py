"""Benchmark fixtures: the runtime comes from the suite's ``rt`` fixture (``--runtime``).

``bench`` is pytest-benchmark's ``benchmark`` with the environment of the run recorded in
``extra_info`` (CPU count, Python, platform, runtime; on a machine with an NVIDIA GPU also
its model, driver and CUDA versions, read through NVML), so saved figures can be compared.

``bench_runtime`` builds runtimes for the throttling benchmarks (``make(**kwargs)`` →
``rt.create_runtime``, resource management enabled by a config file at perfControl 100,
statistics off); they are closed, and the variables enabling sets (RM-1) restored, at
teardown.

The ``suite_speed`` marker: benchmarks that run the whole conformance suite (minutes). They
are deselected unless ``ANTMAN_BENCH_SUITE=1`` or the ``-m`` expression names the marker
(``tox -e bench-suite``, or ``pytest -p no:xdist benchmarks -m suite_speed``).
"""

from __future__ import annotations

import functools
import os
import platform
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

SUITE_SPEED = "suite_speed"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("antman-bench", "AntMan benchmarks")
    group.addoption("--bench-against", default=None, metavar="MODULE",
                    help="compare the runtime under test (--runtime) with MODULE: only the "
                         "comparable benchmarks run, interleaved on both, and report ratios "
                         "runtime / MODULE with 95 %% intervals (benchmarks/against.py)")
    group.addoption("--bench-against-rounds", type=int, default=3, metavar="N",
                    help="paired rounds of each comparison (default 3; at least 2)")


def pytest_configure(config: pytest.Config) -> None:
    from benchmarks import claims
    if not config.pluginmanager.has_plugin("benchmarks.claims"):
        config.pluginmanager.register(claims, "benchmarks.claims")
    config.addinivalue_line("markers", f"{SUITE_SPEED}: runs the whole conformance suite "
                                       "(minutes); selected only by -m or ANTMAN_BENCH_SUITE=1")
    config.addinivalue_line("markers", "against: compares --runtime with --bench-against; "
                                       "selected only by --bench-against (and then alone)")
    name = config.getoption("--bench-against", default=None)
    if name is not None:
        from benchmarks.against import load_reference
        if config.getoption("--bench-against-rounds") < 2:
            raise pytest.UsageError("--bench-against-rounds: at least 2 paired rounds")
        config._antman_bench_reference = load_reference(name)  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    against = config.getoption("--bench-against", default=None) is not None
    keep, drop = [], []
    for item in items:      # --bench-against: the comparisons alone; otherwise none of them
        (keep if bool(item.get_closest_marker("against")) == against else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if os.environ.get("ANTMAN_BENCH_SUITE", "").strip() in ("1", "true", "yes") \
            or SUITE_SPEED in (config.getoption("markexpr", "") or ""):
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker(SUITE_SPEED) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@functools.lru_cache(maxsize=1)
def gpu_environment() -> dict[str, Any]:
    """GPU model, driver and CUDA versions through NVML; empty without an NVIDIA GPU."""
    try:
        from fixtures.nvml import execution_target
        target = execution_target()
    except Exception:  # no pynvml, no driver: a machine without a GPU
        target = None
    if not target:
        return {}
    return {"gpu_model": target["model"], "gpu_driver": target["driver_version"],
            "cuda_driver": target["cuda_driver_version"],
            "cuda_runtime": target["cuda_runtime_version"], "gpu_count": len(target["gpus"])}


@pytest.fixture
def bench(benchmark, rt: types.ModuleType):
    """pytest-benchmark's fixture with the run's environment in ``extra_info``, and the GPU's
    clocks (NVML: SM, memory, SM maximum) when the benchmark started and when it ended."""
    from benchmarks.bench_support import FULL
    from benchmarks.job_driver import gpu_clocks
    benchmark.extra_info.update({
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "runtime": f"{rt.NAME} {rt.VERSION}",
        "device_env": os.environ.get("ANTMAN_DEVICE", ""),
        "bench_size": "full" if FULL else "short",
        **gpu_environment(),
    })
    start = gpu_clocks()
    yield benchmark
    if start is not None:
        benchmark.extra_info["gpu_clocks"] = {"start": start, "end": gpu_clocks()}


@pytest.fixture
def bench_runtime(rt: types.ModuleType, monkeypatch: pytest.MonkeyPatch,
                  tmp_path) -> Iterator[Callable[..., Any]]:
    """``make(**kwargs)``: a runtime with resource management on (config at perfControl 100);
    see ``runtime_maker``."""
    from benchmarks.bench_support import runtime_maker
    with runtime_maker(rt, monkeypatch, tmp_path) as make:
        yield make
