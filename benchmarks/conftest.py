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


def pytest_configure(config: pytest.Config) -> None:
    from benchmarks import claims
    if not config.pluginmanager.has_plugin("benchmarks.claims"):
        config.pluginmanager.register(claims, "benchmarks.claims")
    config.addinivalue_line("markers", f"{SUITE_SPEED}: runs the whole conformance suite "
                                       "(minutes); selected only by -m or ANTMAN_BENCH_SUITE=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
    """``make(**kwargs)``: a runtime with resource management on (config at perfControl 100).

    Defaults: backend from ``ANTMAN_DEVICE`` (the simulated device unless ``cuda``), one GPU of
    ``GPU_MEMORY`` bytes, the real clock, ``poll_interval_s=1.0``, no statistics file.
    ``make.config(ctx)`` is the runtime's config path (a ``pathlib.Path``).
    """
    from benchmarks.bench_support import GPU_MEMORY, write_config
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
    yield make
    for ctx in reversed(made):
        ctx.close()
