"""Session-run action dispatch: resource management enabled but idle against disabled.

Per step the session runs ``run_grouping(PRE)`` and ``run_grouping(POST)``. "Idle" means
GPUResourceManagement registered at POST/2 with perfControl 100 and no limit change, which
is what every un-throttled job pays. The ratio test measures both in one run (interleaved,
best of several rounds) and reports the extra cost as a share of a 1 ms step; the target is
under 0.5 %. Figures only: nothing asserts a speed. Run with
``python -m pytest benchmarks -p no:xdist --benchmark-only`` (the ratio test runs without
``--benchmark-only`` too).
"""

from __future__ import annotations

import os
import tempfile
import time
import types
from collections.abc import Iterator

import pytest

from fixtures.virtual_clock import VirtualClock

STEP_US = 1000.0
TARGET_SHARE = 0.005


@pytest.fixture
def registries(rt: types.ModuleType, monkeypatch) -> Iterator[tuple]:
    """(disabled, enabled, options): an empty registry, and one with an idle RM at POST/2."""
    for name in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_VMEM", "GPU_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cfg.json")
        with open(path, "w") as f:
            f.write('{"perfControl": 100}')
        clock = VirtualClock()
        listener = rt.FileListener(clock=clock, poll_interval_s=3600.0)
        enabled = rt.SessionRunActionRegistry()
        rm = rt.GPUResourceManagement(path, clock=clock, file_listener=listener,
                                      registry=enabled)
        disabled = rt.SessionRunActionRegistry()
        options = rt.SessionRunActionOptions(graph_id=1, sess_duration_us=1000)
        try:
            yield disabled, enabled, options
        finally:
            rm.close()
            listener.close()


def dispatch(rt, registry, options):
    pre, post = rt.Grouping.PRE_SESSION_RUN, rt.Grouping.POST_SESSION_RUN

    def step() -> None:
        registry.run_grouping(pre, options)
        registry.run_grouping(post, options)

    return step


@pytest.mark.capability("session_run_actions", "resource_management")
def test_bench_dispatch_disabled(rt, bench, registries) -> None:
    disabled, _, options = registries
    bench(dispatch(rt, disabled, options))


@pytest.mark.capability("session_run_actions", "resource_management")
def test_bench_dispatch_management_idle(rt, bench, registries) -> None:
    _, enabled, options = registries
    bench(dispatch(rt, enabled, options))


def per_call_ns(fn, n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - start) / n


@pytest.mark.capability("session_run_actions", "resource_management")
def test_dispatch_overhead_ratio(rt, registries) -> None:
    """Extra dispatch cost of idle management, as a share of a 1 ms step (one run)."""
    disabled, enabled, options = registries
    off, on = dispatch(rt, disabled, options), dispatch(rt, enabled, options)
    n, rounds = 20_000, 7
    best_off = best_on = float("inf")
    for _ in range(rounds):                    # interleaved, best of rounds: least noise
        best_off = min(best_off, per_call_ns(off, n))
        best_on = min(best_on, per_call_ns(on, n))
    extra_us = max(0.0, best_on - best_off) / 1000
    share = extra_us / STEP_US
    summary = (f"dispatch per step: disabled {best_off / 1000:.3f} µs, management idle "
               f"{best_on / 1000:.3f} µs, extra {extra_us:.3f} µs = {share * 100:.4f} % of a "
               f"1 ms step (target < {TARGET_SHARE * 100} %)")
    print(summary)
    post = [a.name for _, a in enabled.actions(rt.Grouping.POST_SESSION_RUN)]
    assert post == ["GPUResourceManagement"], f"the idle case dispatched {post}"
