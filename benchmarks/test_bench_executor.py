"""Executor and GpuOpManager costs (pytest-benchmark timings).

- A chain of GPU ops run in a managed step (perfControl 50, E = 1 µs, so every slot but one
  is 0 µs and the 1 µs one passes on a virtual clock at once) against the same step
  unmanaged (perfControl 100): what queueing, the manager thread and the extra thread hops
  cost.
- Workload step time with resource management enabled but idle (perfControl 100, no limit)
  against disabled (no action).

The derived figures (op-manager cost per queued op; step time with management idle over
disabled, target within 0.5 %) are recorded by
``test_bench_throttle.py::test_bench_throttle_overhead``. Figures only: nothing asserts a
speed. Run with ``python -m pytest benchmarks/test_bench_executor.py -p no:xdist
--benchmark-only``.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.bench_support import GPU
from fixtures.virtual_clock import VirtualClock

CHAIN = 32

pytestmark = pytest.mark.capability("executor", "gpu_op_manager", "resource_management",
                                    "workload")


class Setup:
    """A simulated runtime; with ``config`` an enabled GPUResourceManagement at POST/2."""

    def __init__(self, rt, *, config: str | None, clock=None) -> None:
        self.registry = rt.SessionRunActionRegistry()
        self.listener = rt.FileListener(poll_interval_s=1.0)
        self.rm = rt.GPUResourceManagement(config, clock=clock, file_listener=self.listener,
                                           registry=self.registry)
        self.ctx = rt.create_runtime(backend="sim", clock=clock, config_file=None,
                                     status_file=None, registry=self.registry)

    def close(self) -> None:
        self.rm.close()
        self.ctx.close()
        self.listener.close()


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    """An idle config (perfControl 100, no limit); the process environment is restored."""
    for k in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_VMEM"):
        monkeypatch.setenv(k, "true")       # both runtimes get what enabling forces (RM-1)
    path = tmp_path / "config.json"
    path.write_text('{"perfControl": 100}')
    return str(path)


@pytest.fixture
def chain_session(rt, config_file):
    setup = Setup(rt, config=config_file, clock=VirtualClock(auto_advance=True))
    g = rt.Graph()
    for i in range(CHAIN):
        g.add_node(f"op{i}", "PyFunc", [f"op{i - 1}"] if i else [], device=GPU,
                   func=(lambda *a: np.float32(0)))
    session = setup.ctx.new_session(g)

    def step(perf: int):
        def run() -> None:
            setup.rm.parse_manage_info_from_json(f'{{"perfControl": {perf}}}')
            setup.rm.set_estimated_idle_time(1 if perf < 100 else 0)
            session.run([f"op{CHAIN - 1}"])
        return run

    yield step
    setup.close()


def test_bench_chain_unmanaged(bench, chain_session) -> None:
    bench(chain_session(100))


def test_bench_chain_managed_zero_idle(bench, chain_session) -> None:
    bench(chain_session(50))


@pytest.fixture
def workloads(rt, config_file):
    made = []

    def make(managed: bool):
        setup = Setup(rt, config=config_file if managed else None)
        wl = rt.MLPWorkload(setup.ctx, batch=64, hidden=128, layers=3, seed=0)
        made.append(setup)
        return wl

    yield make
    for s in made:
        s.close()


def test_bench_workload_management_disabled(bench, workloads) -> None:
    wl = workloads(False)
    bench(wl.step)


def test_bench_workload_management_idle(bench, workloads) -> None:
    wl = workloads(True)
    bench(wl.step)

