"""Executor and GpuOpManager costs.

- Op-manager cost per op with zero idle time: a chain of GPU ops run in a managed step
  (perfControl 50, E = 1 µs, so every slot but one is 0 µs and the 1 µs one passes on a
  virtual clock at once) against the same step unmanaged (perfControl 100); the difference
  per op is what queueing, the manager thread and the extra thread hops cost.
- Workload step time with resource management enabled but idle (perfControl 100, no limit)
  against disabled (no action), as a ratio in one run (interleaved, best of rounds); the
  target is within 1 %.

Figures only: nothing asserts a speed. Run with
``python -m pytest benchmarks/test_bench_executor.py -p no:xdist -s`` (add
``--benchmark-only`` for the pytest-benchmark figures alone).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from fixtures.virtual_clock import VirtualClock

GPU = "/device:GPU:0"
CHAIN = 32
TARGET_RATIO = 0.01

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
def config_file(tmp_path):
    """An idle config (perfControl 100, no limit); the process environment is restored."""
    saved = {k: os.environ.get(k) for k in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_VMEM")}
    for k in saved:                         # both runtimes get what enabling forces (RM-1)
        os.environ[k] = "true"
    path = tmp_path / "config.json"
    path.write_text('{"perfControl": 100}')
    yield str(path)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


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


def best_of(fn, n: int, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - start) / n)
    return out


def test_op_manager_cost_per_op(chain_session) -> None:
    """(managed step - unmanaged step) / ops, with zero idle time."""
    off, on = chain_session(100), chain_session(50)
    offs, ons = [], []
    for _ in range(7):                      # interleaved rounds: least drift between the two
        offs += best_of(off, 20, 1)
        ons += best_of(on, 20, 1)
    t_off, t_on = min(offs), min(ons)
    per_op_us = (t_on - t_off) / CHAIN * 1e6
    print(f"\nGPU op chain of {CHAIN}: unmanaged {t_off * 1e6:.0f} µs/step, managed with zero "
          f"idle {t_on * 1e6:.0f} µs/step: op manager {per_op_us:.1f} µs per op")


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


def test_workload_step_ratio(workloads) -> None:
    """Step time with idle management over step time without, in one run."""
    off, on = workloads(False), workloads(True)
    for wl in (off, on):
        for _ in range(20):
            wl.step()
    offs, ons = [], []
    for i in range(15):                     # interleaved, alternating which goes first
        pair = (off, on) if i % 2 == 0 else (on, off)
        for wl in pair:
            (offs if wl is off else ons).extend(best_of(wl.step, 30, 1))
    t_off, t_on = min(offs), min(ons)
    ratio = t_on / t_off - 1
    print(f"\nMLP workload step: management disabled {t_off * 1e6:.0f} µs, idle "
          f"{t_on * 1e6:.0f} µs (best of 15 interleaved rounds of 30 steps): "
          f"{ratio * 100:+.2f} % (target within {TARGET_RATIO * 100:.0f} %; "
          f"medians {np.median(offs) * 1e6:.0f} / {np.median(ons) * 1e6:.0f} µs)")
