"""Session-run action dispatch: resource management enabled but idle against disabled.

Per step the session runs ``run_grouping(PRE)`` and ``run_grouping(POST)``. "Idle" means
GPUResourceManagement registered at POST/2 with perfControl 100 and no limit change, which
is what every un-throttled job pays. pytest-benchmark times the dispatch each way; the
dispatch cost per run as a share of the step (target under 0.5 %) is recorded by
``test_bench_throttle.py::test_bench_throttle_overhead`` (figure "session-run action
dispatch per run"). Figures only: nothing asserts a speed. Run with
``python -m pytest benchmarks -p no:xdist --benchmark-only``.
"""

from __future__ import annotations

import os
import tempfile
import types
from collections.abc import Iterator

import pytest

from fixtures.virtual_clock import VirtualClock


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
    post = [a.name for _, a in enabled.actions(rt.Grouping.POST_SESSION_RUN)]
    assert post == ["GPUResourceManagement"], f"the idle case dispatched {post}"

