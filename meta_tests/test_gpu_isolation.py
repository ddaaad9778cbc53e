"""GPU tests have the GPU to themselves and leave it as they found it (fixtures/gpu_isolation.py),
checked on a CPU through a stand-in NVML (meta_tests/fake_pynvml.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from conformance import spec
from fixtures import gpu_isolation as gi
from meta_tests import fake_pynvml
from meta_tests.child_env import python_path

MiB = 1 << 20
GiB = 1 << 30
OWN, WORKER, OUTSIDER = 100, 200, 300


class FakeObserver:
    """What ``GpuGuard`` reads of NVML, changed by the test as it goes."""

    def __init__(self, used: int = GiB) -> None:
        self.used = used
        self.procs: dict[int, int | None] = {OWN: 600 * MiB}

    def device_count(self) -> int:
        return 1

    def memory(self, device: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(used=self.used)

    def processes(self, device: int) -> dict[int, int | None]:
        return dict(self.procs)

    def process_used(self, device: int, pid: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(bytes=self.procs.get(pid, 0))


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep: list = []

    def sleep(self, s: float) -> None:
        self.now += s
        if self.on_sleep:
            self.on_sleep.pop(0)()

    def monotonic(self) -> float:
        return self.now


def guard(obs: FakeObserver, clock: FakeTime, pids: set[int]) -> gi.GpuGuard:
    return gi.GpuGuard(obs, own_pid=OWN, run_pids=lambda: pids, settle_s=5.0,
                       tolerance=64 * MiB, sleep=clock.sleep, monotonic=clock.monotonic)


def test_a_cuda_context_of_another_process_of_the_run_stops_the_gpu_test() -> None:
    obs, clock = FakeObserver(), FakeTime()
    obs.procs[WORKER] = 512 * MiB                        # an xdist worker initialised CUDA
    with pytest.raises(gi.GpuIsolationError, match=rf"pid {WORKER} holds 512 MiB") as info:
        guard(obs, clock, {OWN, WORKER}).before()
    assert "other than the GPU group" in str(info.value)
    assert 5.0 <= clock.now < 6.0, "the wait is bounded by settle_s"


def test_a_process_outside_the_run_is_not_a_stray_and_a_leaving_cotenant_is_waited_for() -> None:
    obs, clock = FakeObserver(), FakeTime()
    obs.procs[OUTSIDER] = GiB
    obs.procs[WORKER] = GiB                               # the last test's co-tenant, exiting
    clock.on_sleep = [lambda: None, lambda: obs.procs.pop(WORKER)]
    baseline = guard(obs, clock, {OWN, WORKER}).before()
    assert baseline.used == {0: GiB} and baseline.own == {0: 600 * MiB}
    assert clock.now < 1.0


def test_a_leak_fails_the_test_that_leaked_and_the_next_test_starts_from_a_new_baseline() -> None:
    obs, clock = FakeObserver(), FakeTime()
    g = guard(obs, clock, {OWN})
    baseline = g.before()
    obs.used += 2 * GiB                                   # a runtime not closed
    obs.procs[OWN] += 2 * GiB
    with pytest.raises(gi.GpuIsolationError, match="GPU memory leak") as info:
        g.after(baseline)
    assert "2048 MiB more in use" in str(info.value) and "this process 600 -> 2648 MiB" in \
        str(info.value), str(info.value)
    nxt = g.before()                                      # the next test is not blamed
    obs.used += 32 * MiB                                  # within the tolerance
    g.after(nxt)


def test_memory_given_back_late_within_the_bound_is_no_leak() -> None:
    obs, clock = FakeObserver(), FakeTime()
    g = guard(obs, clock, {OWN, WORKER})
    baseline = g.before()
    obs.used += GiB
    obs.procs[WORKER] = GiB                               # a co-tenant still exiting
    clock.on_sleep = [lambda: None, lambda: (obs.procs.pop(WORKER),
                                             setattr(obs, "used", obs.used - GiB))]
    g.after(baseline)


def test_the_processes_of_the_run_are_the_root_and_its_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pids = gi.run_processes(os.getpid())
        assert {os.getpid(), child.pid} <= pids and os.getppid() not in pids
    finally:
        child.kill()
        child.wait(timeout=10)


CONFTEST = """
from fixtures import gpu_isolation
gpu_isolation.SETTLE_S = 1.0
pytest_plugins = ["fixtures.nvml", "fixtures.gpu_isolation"]

def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU")
"""

TESTS = """
import json, os, subprocess, sys
import pytest

STATE = os.environ["FAKE_NVML_STATE"]
GiB = 1 << 30

def change(**values):
    with open(STATE) as f:
        state = json.load(f)
    state.update(values)
    with open(STATE + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(STATE + ".tmp", STATE)

@pytest.mark.gpu
def test_gpu_leaks():
    with open(STATE) as f:
        used = json.load(f)["used"]
    change(used=used + 2 * GiB)

@pytest.mark.gpu
def test_gpu_next():
    pass

CHILD = []

def test_cpu_test_starts_a_process_with_a_cuda_context():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    CHILD.append(child)
    change(processes=[[child.pid, 512 << 20]])

@pytest.mark.gpu
def test_gpu_after_a_stray():
    pass

def test_cleanup():
    for child in CHILD:
        child.kill()
        child.wait(timeout=10)
"""


def stand_in_host(tmp_path: Path) -> tuple[Path, Path]:
    """A folder to put first on a child's PYTHONPATH, where NVML is the stand-in (one GPU,
    1 GiB in use, no process) and CuPy cannot be imported, and the stand-in's state file: the
    child's guard then observes no real GPU, whatever other processes of the host do there."""
    host = tmp_path / "host"
    host.mkdir()
    fake_pynvml.install(host)
    # No CuPy on the stand-in host: a real GPU's CUDA context (the guard's warm-up) must not
    # meet the fake NVML, which would not list this process and so hide every stray.
    (host / "cupy.py").write_text("raise ImportError('no CuPy on this stand-in host')\n")
    state = tmp_path / "nvml.json"
    fake_pynvml.write_state(state, used=GiB, processes=[])
    return host, state


def test_end_to_end_a_leak_errs_in_its_own_teardown_and_a_stray_context_is_named(
        tmp_path: Path) -> None:
    host, state = stand_in_host(tmp_path)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_fake_gpu.py").write_text(textwrap.dedent(TESTS))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["PYTHONPATH"] = python_path(host, spec.ROOT)
    env["FAKE_NVML_STATE"] = str(state)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "no:randomly", "-rA", "-q", "-n", "0", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines()
             if line.startswith(("PASSED ", "ERROR ", "FAILED "))]
    summary = {line.split()[1].split("::")[-1]: line.split()[0] for line in lines}
    # the leaking test passes its body and errs in its teardown; the next one passes
    assert summary.get("test_gpu_leaks") == "ERROR", out[-4000:]
    assert "PASSED test_fake_gpu.py::test_gpu_leaks" in done.stdout, out[-4000:]
    assert summary.get("test_gpu_next") == "PASSED", out[-4000:]
    assert "GPU memory leak" in out and "2048 MiB more in use" in out, out[-4000:]
    # a process of the run holding a CUDA context stops the next GPU test, named
    assert summary.get("test_gpu_after_a_stray") == "ERROR", out[-4000:]
    assert "the GPU is not this test's alone" in out and "holds 512 MiB" in out, out[-4000:]


GROUPED = """
import os
import pytest

def record(name):
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"{name} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")

@pytest.mark.parametrize("i", range(8))
@pytest.mark.gpu
@pytest.mark.xdist_group("gpu")
def test_gpu(i):
    record(f"gpu{i}")

@pytest.mark.parametrize("i", range(8))
def test_cpu(i):
    record(f"cpu{i}")
"""


def test_a_plain_xdist_run_keeps_the_gpu_group_in_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        'pytest_plugins = ["fixtures.gpu_isolation"]\n\n'
        'def pytest_configure(config):\n'
        '    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU")\n')
    (suite / "test_grouped.py").write_text(GROUPED)
    # The guard observes the stand-in NVML: on a GPU host the real GPUs are shared with the
    # other tests of this run, whose CUDA contexts and co-tenants it would take for leaks.
    host, state = stand_in_host(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["PYTHONPATH"] = python_path(host, spec.ROOT)
    env["FAKE_NVML_STATE"] = str(state)
    env["WHERE"] = str(tmp_path / "where.txt")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p",
                           "no:randomly", "-q", "-n", "2", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    where = dict(line.split() for line in (tmp_path / "where.txt").read_text().splitlines())
    gpu_workers = {w for name, w in where.items() if name.startswith("gpu")}
    assert len(where) == 16 and len(gpu_workers) == 1, where


def test_in_a_pid_namespace_nvml_pids_are_not_taken_for_the_runs() -> None:
    obs, clock = FakeObserver(), FakeTime()
    obs.procs = {90001: 600 * MiB, WORKER: GiB}        # host PIDs; WORKER collides with ours
    g = guard(obs, clock, {OWN, WORKER})
    g.note_own_context()
    assert g.pid_namespaced and g.strays() == {}
    g.before()
    obs.procs = {OWN: 600 * MiB, WORKER: GiB}
    g = guard(obs, clock, {OWN, WORKER})
    g.note_own_context()
    assert not g.pid_namespaced and g.strays() == {0: {WORKER: GiB}}
