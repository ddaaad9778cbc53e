"""E2E clauses: the training workload under the control plane, config rewritten mid-run.

The resource management and statistics actions run on the test's virtual clock; their file
listener polls in real time (every 10 ms) so that it never moves virtual time, and each test
waits (real time, generously bounded) until a rewritten config is in force before measuring.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np
import pytest

from conformance.checks import names_identifier
from conformance.execution_helpers import (GPU, OP_MANAGER_PREFIX, POST, manager_threads,
                                           sim_runtime, wait_until)
from conformance.execution_helpers import earlier_manager_threads_set_aside  # noqa: F401 - autouse
from conformance.preconditions import precondition, precondition_holds
from fixtures.config_writer import ConfigWriter, config_document

pytestmark = pytest.mark.capability("workload", "executor")


MiB = 1 << 20


class ManagedRuntime:
    """A simulated runtime with GPUStatistics and GPUResourceManagement on ``clock``."""

    def __init__(self, rt, tmp_path, clock, *, gpu_memory_bytes: int = 64 * MiB) -> None:
        self.rt = rt
        self.clock = clock
        self.config = tmp_path / "config.json"
        self.status = tmp_path / "status.json"
        self.writer = ConfigWriter(self.config)
        self.writer.write(config_document(perf=100))
        self.listener = rt.FileListener(poll_interval_s=0.01)       # real clock, see above
        self.registry = rt.SessionRunActionRegistry()
        self.statistics = rt.GPUStatistics(str(self.status), clock=clock)
        self.registry.register(POST, 1, self.statistics)
        self.rm = rt.GPUResourceManagement(str(self.config), clock=clock,
                                           file_listener=self.listener, registry=self.registry)
        self.ctx = rt.create_runtime(backend="sim", gpu_memory_bytes=gpu_memory_bytes,
                                     clock=clock, config_file=None, status_file=None,
                                     registry=self.registry)
        self.gpu = self.ctx.device_mgr.lookup_device(GPU)
        self.bus_id = rt.get_pci_bus_id(self.gpu.attributes.physical_device_desc)

    def set_perf(self, perf: int, *, in_place: bool = False) -> None:
        doc = config_document(perf=perf)
        if in_place:
            self.writer.write_in_place(doc)
        else:
            self.writer.write(doc)
        with precondition("RM-4", f"perfControl {perf} written to the config is read as {perf}"):
            wait_until(lambda: self.rm.perf_control == perf,
                       f"perfControl {perf} to be in force (read {self.rm.perf_control})")

    def status_doc(self) -> dict:
        return json.loads(self.status.read_text())

    def close(self) -> None:
        self.rm.close()
        self.ctx.close()
        self.listener.close()
        self.writer.cleanup()


@pytest.fixture
def managed_factory(rt, tmp_path, tf_env):
    made: list[ManagedRuntime] = []

    def make(clock, **kw) -> ManagedRuntime:
        m = ManagedRuntime(rt, tmp_path, clock, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def periods(workload, clock, steps: int) -> list[int]:
    """Start-to-start step periods on the clock (``steps`` periods, ``steps + 1`` steps)."""
    starts = []
    for _ in range(steps + 1):
        starts.append(clock.now_us())
        workload.step()
    return [b - a for a, b in zip(starts, starts[1:])]


# -- E2E-1, E2E-2 ----------------------------------------------------------------------------

@pytest.mark.clause("E2E-1")
def test_workload_graph_and_api(rt) -> None:
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=8, input_dim=6, hidden=12, layers=3, classes=4,
                            cost_us=5)
        nodes = list(wl.graph.nodes)
        assert {n.device for n in nodes} == {GPU}, "every node on GPU:0 [E2E-1]"
        ops = {n.op for n in nodes}
        for op in ("MatMul", "BiasAdd", "Relu", "SoftmaxCrossEntropyWithLogits", "Mean",
                   "BiasAddGrad", "ReluGrad", "ApplyGradientDescent"):
            assert op in ops, f"the training graph lacks {op} [E2E-1]"
        assert sum(n.op == "ApplyGradientDescent" for n in nodes) == 6, \
            "one SGD update per weight and bias of 3 layers [E2E-1]"
        costed = {n.op for n in nodes if n.attrs.get("cost_us") == 5}
        assert costed == {"MatMul", "BiasAdd", "Relu", "ReluGrad", "BiasAddGrad",
                          "SoftmaxCrossEntropyWithLogits", "Mean", "ApplyGradientDescent"}, \
            f"cost_us set on {sorted(costed)} [E2E-1]"
        loss = wl.step()
        assert isinstance(loss, float) and np.isfinite(loss), f"step() returned {loss!r} [E2E-1]"
        assert isinstance(wl.evaluate(), float), "[E2E-1]"
        assert wl.param_bytes == 4 * (6 * 12 + 12 + 12 * 12 + 12 + 12 * 4 + 4), "[E2E-1]"
        big = rt.MLPWorkload.sized_for(ctx, 4 * MiB, layers=2, batch=64, input_dim=32)
        assert big.param_bytes + big.step_bytes <= 4 * MiB, "sized_for overshoots [E2E-1]"
        wider = rt.MLPWorkload(ctx, batch=64, input_dim=32, hidden=big.hidden + 1, layers=2)
        assert wider.param_bytes + wider.step_bytes > 4 * MiB, \
            "sized_for must pick the widest hidden that fits [E2E-1]"
        wl.close()
        assert wl.session.closed and not ctx.closed, "close() closes the session only [E2E-1]"


@pytest.mark.clause("E2E-1")
def test_workload_defaults(rt) -> None:
    """MLPWorkload(target) is MLPWorkload(target, batch=32, input_dim=32, hidden=64, layers=2,
    classes=10, learning_rate=None, seed=0, device="/device:GPU:0", cost_us=0,
    num_batches=4): the same graph and the same losses."""
    spelled = dict(batch=32, input_dim=32, hidden=64, layers=2, classes=10, learning_rate=None,
                   seed=0, device=GPU, cost_us=0, num_batches=4)
    runs = []
    for kwargs in ({}, spelled):
        with sim_runtime(rt) as ctx:
            wl = rt.MLPWorkload(ctx, **kwargs)
            graph = [(n.name, n.op, tuple(n.inputs), tuple(n.control_inputs), n.device,
                      sorted((k, repr(v)) for k, v in n.attrs.items()
                             if not isinstance(v, np.ndarray)))
                     for n in wl.graph.nodes]
            runs.append((graph, wl.param_bytes, wl.step_bytes,
                         [wl.step() for _ in range(6)], wl.evaluate()))
    assert runs[0][0] == runs[1][0], "MLPWorkload(target) builds another graph than with " \
                                     "its documented defaults spelled out [E2E-1]"
    assert runs[0][1:] == runs[1][1:], (
        f"MLPWorkload(target) and MLPWorkload(target, <documented defaults>) differ: "
        f"(param_bytes, step_bytes, losses, evaluate) {runs[0][1:]} vs {runs[1][1:]} [E2E-1]")
    assert runs[0][1] == 4 * (32 * 64 + 64 + 64 * 10 + 10), \
        f"param_bytes {runs[0][1]} of the default workload [E2E-1]"


@pytest.mark.clause("E2E-1")
def test_workload_command_line(rt) -> None:
    env = dict(os.environ, ANTMAN_DEVICE="sim")
    env.pop("GPU_CONFIG_FILE", None)
    env.pop("GPU_STATUS_FILE", None)
    proc = subprocess.run([sys.executable, "-m", f"{rt.__name__}.workload", "--steps", "3",
                           "--backend", "sim", "--hidden", "16", "--gpu-memory", "64M"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"workload CLI failed: {proc.stderr[-2000:]} [E2E-1]"
    first = json.loads(proc.stdout.splitlines()[0])
    steps = [json.loads(line) for line in proc.stdout.splitlines() if '"step"' in line]
    assert [s["step"] for s in steps] == [0, 1, 2], f"CLI output {proc.stdout!r} [E2E-1]"
    assert all(isinstance(s["loss"], float) and "duration_us" in s for s in steps), "[E2E-1]"
    for s in steps:
        figures = {k: s.get(k) for k in ("device_bytes_in_use", "device_peak_bytes_in_use",
                                         "device_bytes_limit")}
        assert all(type(v) is int for v in figures.values()), (
            f"step {s['step']}: allocator figures {figures} [E2E-1]")
        assert first["param_bytes"] <= figures["device_bytes_in_use"] \
            <= figures["device_peak_bytes_in_use"] <= figures["device_bytes_limit"] == 64 * MiB, (
            f"step {s['step']}: the variables ({first['param_bytes']} bytes) live on the GPU "
            f"of 64 MiB, yet its figures are {figures} [E2E-1]")


def _workload_cli(rt, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANTMAN_DEVICE="sim")
    env.pop("GPU_CONFIG_FILE", None)
    env.pop("GPU_STATUS_FILE", None)
    return subprocess.run([sys.executable, "-m", f"{rt.__name__}.workload", "--backend", "sim",
                           *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("size,expected", [("3m", 3 * MiB), ("2MiB", 2 * MiB),
                                           ("1536K", 1536 * 1024), ("0.5g", 512 * MiB),
                                           ("1048576", MiB), ("2MB", 2 * MiB),
                                           ("1536kb", 1536 * 1024),
                                           ("0.0000019073486328125T", 2 * MiB)])
def test_workload_command_line_sizes_a_workload(rt, size: str, expected: int) -> None:
    """``--target-bytes SIZE`` builds ``sized_for(ctx, SIZE)`` with its defaults: the same
    sizes as in process, whatever spelling of the unit."""
    proc = _workload_cli(rt, "--steps", "0", "--target-bytes", size,
                         "--gpu-memory", "2G")
    assert proc.returncode == 0, f"--target-bytes {size}: {proc.stderr[-2000:]} [E2E-1]"
    first = json.loads(proc.stdout.splitlines()[0])
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload.sized_for(ctx, expected)
        want = (wl.param_bytes, wl.step_bytes)
        wl.close()
    got = (first["param_bytes"], first["step_bytes"])
    assert got == want, (f"--target-bytes {size}: (param_bytes, step_bytes) {got}, "
                         f"sized_for(ctx, {expected}) gives {want} [E2E-1]")


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("option,value", [("--target-bytes", "0"), ("--target-bytes", "-1M"),
                                          ("--target-bytes", "2X"), ("--target-bytes", "nan"),
                                          ("--gpu-memory", "0K"), ("--steps", "-1"),
                                          ("--hidden", "0"), ("--target-bytes", "1")])
def test_workload_command_line_refuses_bad_values(rt, option: str, value: str) -> None:
    """A value the command line refuses (a SIZE, ``--steps``) or the workload does (a width
    of 0, a size below what ``hidden=1`` needs: ``ValueError``) is a usage error."""
    proc = _workload_cli(rt, option, value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (
        f"{option} {value}: exit {proc.returncode}, stderr {proc.stderr[-1000:]!r}; "
        f"expected a usage error (exit status 2) [E2E-1]")


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("option,value", [("--steps", "-1"), ("--target-bytes", "2X"),
                                          ("--gpu-memory", "0K")])
def test_workload_command_line_usage_error_names_the_option(rt, option: str,
                                                            value: str) -> None:
    """The last line of standard error of a bad ``--steps`` or SIZE names the option, as a
    word of its own (the usage text before it names every option anyway)."""
    proc = _workload_cli(rt, option, value)
    lines = proc.stderr.strip().splitlines() or [""]
    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", lines[-1]), (
        f"{option} {value}: the last line of standard error, {lines[-1]!r}, does not name "
        f"{option} (exit {proc.returncode}) [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_workload_command_line_defaults(rt) -> None:
    """Without ``--target-bytes`` or size options the command line trains
    ``MLPWorkload(ctx)``: the constructor's defaults, the same sizes as in process, and the
    same seed, hence the same losses (E2E-2: the simulated backend is deterministic), on GPUs
    of 1 GiB (the default of ``--gpu-memory``)."""
    proc = _workload_cli(rt, "--steps", "2")
    assert proc.returncode == 0, f"--steps 2: {proc.stderr[-2000:]} [E2E-1]"
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    first = lines[0]
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx)
        want = (wl.param_bytes, wl.step_bytes)
        losses = [wl.step() for _ in range(2)]
        wl.close()
    got = (first["param_bytes"], first["step_bytes"])
    assert got == want, (f"the command line without size options trains a workload of "
                         f"(param_bytes, step_bytes) {got}; MLPWorkload(ctx) has {want} [E2E-1]")
    got_losses = [line.get("loss") for line in lines[1:]]
    assert got_losses == losses, (
        f"the command line without options had the losses {got_losses}; MLPWorkload(ctx) "
        f"(seed 0 and every other default) has {losses} [E2E-1]")
    limits = [line.get("device_bytes_limit") for line in lines[1:]]
    assert limits == [1 << 30] * 2, (
        f"the command line without --gpu-memory reported the device limits {limits}; each "
        f"GPU's memory defaults to 1 GiB ({1 << 30}) [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_workload_command_line_trains_20_steps_by_default(rt) -> None:
    """Without ``--steps`` the command line trains 20 steps: 20 step objects after the
    first object, numbered 0 to 19."""
    proc = _workload_cli(rt, "--hidden", "4", "--gpu-memory", "64M")
    assert proc.returncode == 0, f"without --steps: {proc.stderr[-2000:]} [E2E-1]"
    steps = [json.loads(line).get("step") for line in proc.stdout.splitlines()[1:]]
    assert steps == list(range(20)), (
        f"the command line without --steps wrote the steps {steps}; --steps defaults to 20 "
        f"[E2E-1]")


# The default each option's help states after the word "default" (E2E-1).
HELP_DEFAULTS = {"--steps": r"20", "--batch": r"32", "--input-dim": r"32", "--hidden": r"64",
                 "--layers": r"2", "--classes": r"10", "--learning-rate": r"0\.1",
                 "--seed": r"0", "--device": r"/device:GPU:0",
                 "--gpu-memory": r"(?:1\s?(?:G|GiB|GB)|1073741824)"}


@pytest.mark.clause("E2E-1")
def test_workload_command_line_help_states_the_defaults(rt) -> None:
    """``--help`` exits with status 0 and, in the help of each option with a fixed default,
    states that default after the word ``default``, and the help of ``--backend`` names the
    backends and, after that word, ``ANTMAN_DEVICE``; an option's help is the text from its
    name to the next option's."""
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", f"{rt.__name__}.workload", "--help"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, (f"--help: exit {proc.returncode}, {proc.stderr[-1000:]} "
                                  f"[E2E-1]")
    text = proc.stdout
    for option, value in HELP_DEFAULTS.items():
        entry = re.search(rf"^[ \t]*{re.escape(option)}\b(.*?)(?=^[ \t]*-|\Z)", text,
                          re.M | re.S)
        assert entry is not None, f"--help does not name {option}: {text!r} [E2E-1]"
        assert re.search(rf"\bdefault\b\W*{value}(?![\w.])", entry.group(1)), (
            f"the help of {option}, {entry.group(0).strip()!r}, does not state its default "
            f"after the word 'default' [E2E-1]")
    entry = re.search(r"^[ \t]*--backend\b(.*?)(?=^[ \t]*-|\Z)", text, re.M | re.S)
    assert entry is not None, f"--help does not name --backend: {text!r} [E2E-1]"
    unnamed = [word for word in ("sim", "cuda", "auto") if not re.search(rf"\b{word}\b",
                                                                          entry.group(1))]
    assert not unnamed and re.search(r"\bdefault\b\W*ANTMAN_DEVICE\b", entry.group(1)), (
        f"the help of --backend, {entry.group(0).strip()!r}, names neither "
        f"{' nor '.join(unnamed) or 'ANTMAN_DEVICE after the word default'}: it names the "
        f"backends sim, cuda and auto and, after the word 'default', ANTMAN_DEVICE [E2E-1]")


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("option,variable", [
    pytest.param(["--backend", "sim"], "cuda", id="option-over-variable"),
    pytest.param(["--backend", " Sim "], "cuda", id="option-as-select-backend"),
    pytest.param([], " SIM ", id="variable")])
def test_workload_command_line_names_its_backend(rt, option: list[str], variable: str) -> None:
    """The first object describes the model (``workload``, a string) and names the backend the
    runtime was built on: ``--backend`` resolved as ``select_backend`` resolves a name (case
    and white space aside), which wins over ``$ANTMAN_DEVICE`` (here ``cuda``, never built);
    without the option, the variable."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_CONFIG_FILE", "GPU_STATUS_FILE")}
    env["ANTMAN_DEVICE"] = variable
    proc = subprocess.run([sys.executable, "-m", f"{rt.__name__}.workload", *option,
                           "--steps", "0", "--hidden", "4", "--gpu-memory", "64M"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, (f"{' '.join(option)} with ANTMAN_DEVICE={variable!r}: "
                                  f"{proc.stderr[-2000:]} [E2E-1]")
    first = json.loads(proc.stdout.splitlines()[0])
    assert first.get("backend") == "sim", (
        f"{' '.join(option) or 'without --backend'}, ANTMAN_DEVICE={variable!r}: the first "
        f"object {first} names the backend {first.get('backend')!r}, not 'sim' [E2E-1]")
    described = first.get("workload")
    assert isinstance(described, str) and described.strip(), (
        f"the first object {first} has no workload describing the model, a non-empty "
        f"string [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_workload_command_line_figures_are_the_device_bfcs_under_vmem(rt) -> None:
    """A GPU of 24 KiB is too small for a step of the default workload: with VMem on and a
    planned memory of ten times the GPU (TF_RO_PLANNED_GPU=1000, VMEM-5, VMEM-6) the step's
    last buffers go to host memory. The device figures stay the device BFC's: its peak is at
    most its limit, whatever the host side held (the VMem allocator's own peak adds it)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GPU_CONFIG_FILE", "GPU_STATUS_FILE", "TF_FORCE_GPU_ALLOW_GROWTH",
                        "TF_CUDA_HOST_MEM_LIMIT_IN_MB", "TF_GPU_ALLOCATOR")}
    env.update(ANTMAN_DEVICE="sim", TF_GPU_VMEM="true", TF_RO_PLANNED_GPU="1000")
    proc = subprocess.run([sys.executable, "-m", f"{rt.__name__}.workload", "--backend", "sim",
                           "--steps", "2", "--gpu-memory", "24K"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"workload CLI on a 24 KiB GPU: {proc.stderr[-2000:]} [E2E-1]"
    steps = [json.loads(line) for line in proc.stdout.splitlines()[1:]]
    precondition_holds("VMEM-5", any(s.get("host_peak_bytes_in_use") for s in steps),
                       f"a step of the default workload on a 24 KiB GPU with VMem on and "
                       f"TF_RO_PLANNED_GPU=1000 used host memory: {steps}")
    for s in steps:
        figures = {k: s.get(k) for k in ("device_bytes_in_use", "device_peak_bytes_in_use",
                                         "device_bytes_limit", "host_peak_bytes_in_use")}
        assert figures["device_bytes_limit"] == 24 * 1024 \
            and figures["device_peak_bytes_in_use"] <= figures["device_bytes_limit"], (
            f"step {s['step']}: figures {figures}: the device figures must be the device "
            f"BFC's under VMem (a peak within its 24 KiB limit), not the VMem allocator's "
            f"[E2E-1]")


@pytest.mark.clause("E2E-1")
def test_workload_command_line_without_vmem_has_no_host_figures(rt) -> None:
    """With VMem off (``TF_GPU_VMEM=false``) the GPU's allocator has no host fallback: each
    step object has the device allocator's figures and no host figure."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GPU_CONFIG_FILE", "GPU_STATUS_FILE", "TF_GPU_ALLOCATOR")}
    env.update(ANTMAN_DEVICE="sim", TF_GPU_VMEM="false")
    proc = subprocess.run([sys.executable, "-m", f"{rt.__name__}.workload", "--backend", "sim",
                           "--steps", "2", "--gpu-memory", "64M"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, (f"workload CLI with TF_GPU_VMEM=false: "
                                  f"{proc.stderr[-2000:]} [E2E-1]")
    steps = [json.loads(line) for line in proc.stdout.splitlines()[1:]]
    assert [s.get("step") for s in steps] == [0, 1], f"CLI output {proc.stdout!r} [E2E-1]"
    for s in steps:
        host = sorted(k for k in s if k.startswith("host_"))
        assert not host and s.get("device_bytes_limit") == 64 * MiB \
            and type(s.get("device_bytes_in_use")) is int, (
            f"step {s['step']} without VMem (no host fallback): {s}; expected the device "
            f"figures of the 64 MiB GPU and no host figure [E2E-1]")


@contextmanager
def streaming_workload_cli(rt, tmp_path: Path, config: Path,
                           *args: str) -> Iterator[tuple[subprocess.Popen, BinaryIO]]:
    """``python -m <runtime>.workload --backend sim --gpu-memory 64M *args`` with its standard
    output a pipe as a user's has it (no ``PYTHONUNBUFFERED``) and ``config`` as its
    ``GPU_CONFIG_FILE``; yields the process and its standard error (a file); kills it at the
    end."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_GPU_ALLOCATOR", "PYTHONUNBUFFERED")}
    env.update(ANTMAN_DEVICE="sim", GPU_CONFIG_FILE=str(config),
               GPU_STATUS_FILE=str(tmp_path / "pai2sche.json"))
    with open(tmp_path / "stderr.txt", "w+b") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", f"{rt.__name__}.workload", "--backend",
                                 "sim", "--gpu-memory", "64M", *args],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                env=env)
        try:
            yield proc, stderr
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.clause("E2E-1")
def test_workload_command_line_flushes_each_step_line(rt, tmp_path) -> None:
    """Each line is flushed when complete: a step held back by perfControl 0 (RM-12, through
    the ``GPU_CONFIG_FILE`` the command line honours as any AntMan job) leaves every earlier
    step's line readable while it is held. The held step is the first whose ``duration_us``
    covers the 3 s of quiet the test waits for; a line kept in a buffer shows up only once
    the steps go on."""
    if "resource_management" not in rt.CAPABILITIES:
        pytest.skip("holding a step of the command line needs perfControl 0 (RM-12)")
    writer = ConfigWriter(tmp_path / "sche2pai.json")
    writer.write(config_document(perf=100))
    quiet_s, held_us = 3.0, 2_000_000
    received = bytearray()
    arrived = [time.monotonic()]
    with streaming_workload_cli(rt, tmp_path, writer.path, "--steps", "1000000",
                                "--hidden", "16") as (proc, stderr):

        def read() -> None:
            while chunk := os.read(proc.stdout.fileno(), 1 << 16):
                received.extend(chunk)
                arrived[0] = time.monotonic()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def records(data: bytes) -> list[dict]:
            return [json.loads(line) for line in data.split(b"\n")[1:-1]]

        def wait(predicate, what: str, limit_s: float = 15.0) -> None:
            end = time.monotonic() + limit_s
            while not predicate():
                if time.monotonic() > end or proc.poll() is not None:
                    stderr.seek(0)
                    pytest.fail(f"the workload command line: no {what} within {limit_s} s "
                                f"(exit {proc.poll()}, stdout {bytes(received[-300:])!r}, "
                                f"stderr {stderr.read()[-1000:]!r}) [E2E-1]")
                time.sleep(0.01)

        try:
            wait(lambda: len(records(bytes(received))) >= 2, "first two step lines")
            writer.write(config_document(perf=0))
            # Every wait is bounded inside the test's 45 s: a runtime whose steps perfControl
            # 0 does not hold fails here on RM-12, not as a TIMEOUT of this clause.
            end = time.monotonic() + 12.0
            while time.monotonic() - arrived[0] < quiet_s and proc.poll() is None:
                precondition_holds("RM-12", time.monotonic() < end,
                                   f"perfControl 0 holds the command line's steps (its output "
                                   f"went on for 12 s after it was written)")
                time.sleep(0.01)
            wait(lambda: time.monotonic() - arrived[0] >= quiet_s,   # or it exited: E2E-1
                 f"{quiet_s} s without output after perfControl 0", 0.0)
            before = bytes(received)
            writer.write(config_document(perf=100))
            wait(lambda: any(r.get("duration_us", 0) >= held_us
                             for r in records(bytes(received))),
                 f"step line with duration_us >= {held_us} after perfControl 100")
        finally:
            proc.kill()
            proc.wait()
            reader.join(10)
            writer.cleanup()
    held = next(r["step"] for r in records(bytes(received)) if r["duration_us"] >= held_us)
    seen = [r["step"] for r in records(before)]
    assert before.endswith(b"\n") and seen == list(range(held)), (
        f"while step {held} was held by perfControl 0 (its duration_us covers {quiet_s} s "
        f"of quiet), the lines read were of steps {seen[:3]}...{seen[-3:]} "
        f"(ending {before[-60:]!r}); each line must be flushed when complete, steps 0 to "
        f"{held - 1} [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_workload_command_line_flushes_its_first_line_before_the_first_step(rt,
                                                                             tmp_path) -> None:
    """The first line (``param_bytes``, ``step_bytes``) is flushed when complete, before the
    first step runs: with perfControl 1 in the config from the start (in effect when the
    runtime is built, RM-2), the first step sleeps 99 times its duration after it (RM-10),
    so its line comes seconds after the first one, in another write; a first line kept in a
    buffer comes out with the step's line, in the same write and the same read. (perfControl
    0 cannot hold the first step alone: the variables' initialising run comes before the
    first line and would be suspended too.) The reader would have to stay descheduled for
    the whole throttle sleep, 99 times a step of 256 x 2048 (1.1 to 2.3 s measured on an idle
    2-core machine), to read both lines at once from a runtime that flushed."""
    if "resource_management" not in rt.CAPABILITIES:
        pytest.skip("slowing the first step of the command line needs perfControl (RM-10)")
    writer = ConfigWriter(tmp_path / "sche2pai.json")
    writer.write(config_document(perf=1))
    reads: list[bytes] = []
    try:
        with streaming_workload_cli(rt, tmp_path, writer.path, "--steps", "1",
                                    "--hidden", "2048", "--batch", "256") as (proc, stderr):
            while chunk := os.read(proc.stdout.fileno(), 1 << 16):
                reads.append(chunk)
            status = proc.wait(120)
            stderr.seek(0)
            errors = stderr.read()[-1000:]
    finally:
        writer.cleanup()
    data = b"".join(reads)
    lines = data.split(b"\n")
    assert status == 0 and len(lines) == 3 and lines[2] == b"", (
        f"the workload command line with --steps 1 exited {status} with {data[-300:]!r} "
        f"(stderr {errors!r}); expected a first line and one step line [E2E-1]")
    first = len(lines[0]) + 1
    ends = [sum(map(len, reads[:i + 1])) for i in range(len(reads))]
    assert first in ends, (
        f"the first line ({first} bytes) was read together with the first step's line "
        f"(reads of {[len(r) for r in reads]} bytes): it was not flushed before the step "
        f"ran; each line must be flushed when complete [E2E-1]")


def training_graph(wl) -> tuple[str, str, list[tuple[str, str]]]:
    """(x placeholder, y placeholder, [(weight, bias) per layer]) found by walking the graph:
    x -> MatMul(h, w) -> BiasAdd(., b) [-> Relu] ... -> SoftmaxCrossEntropyWithLogits(., y)."""
    nodes = {n.name: n for n in wl.graph.nodes}

    def consumers(name: str, op: str) -> list:
        return [n for n in nodes.values() if n.op == op and n.inputs and
                n.inputs[0].split(":")[0] == name and not n.attrs.get("transpose_a")
                and not n.attrs.get("transpose_b")]

    xent = next(n for n in nodes.values() if n.op == "SoftmaxCrossEntropyWithLogits")
    layers: list[tuple[str, str]] = []
    x = next(n.name for n in nodes.values() if n.op == "Placeholder"
             and any(consumers(n.name, "MatMul")))
    h = x
    while True:
        (mm,) = consumers(h, "MatMul")
        (ba,) = consumers(mm.name, "BiasAdd")
        layers.append((mm.inputs[1], ba.inputs[1]))
        if xent.inputs[0].split(":")[0] == ba.name:
            return x, xent.inputs[1].split(":")[0], layers
        (relu,) = consumers(ba.name, "Relu")
        h = relu.name


def fed_to(wl, placeholder: str, act: Callable[[], Any]) -> list[np.ndarray]:
    """The values fed for ``placeholder`` through the workload's session run while ``act()``
    runs (the run attribute is wrapped for that time only)."""
    fed: list = []
    run = wl.session.run

    def recording_run(fetches, feed_dict=None, *args, **kwargs):
        fed.append(dict(feed_dict or {}))
        return run(fetches, feed_dict, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wl.session, "run", recording_run)
        act()
    return [np.asarray(value) for feed in fed for key, value in feed.items()
            if str(getattr(key, "name", key)).split(":")[0] == placeholder]


def initial_scale(layer: int, layers: int, fan_in: int) -> float:
    """The standard deviation of a layer's initial weights: sqrt(2/n) before a Relu,
    sqrt(1/n) for the logits (n inputs)."""
    return math.sqrt((2.0 if layer < layers - 1 else 1.0) / fan_in)


def reference_sgd_step(x, y, params, lr):
    """Mean softmax cross-entropy of an MLP (Relu between layers) and one SGD step, float64."""
    hs, zs, h = [x], [], x
    for i, (w, b) in enumerate(params):
        z = h @ w + b
        zs.append(z)
        h = np.maximum(z, 0) if i < len(params) - 1 else z
        hs.append(h)
    m = h.max(axis=1, keepdims=True)
    logp = h - m - np.log(np.exp(h - m).sum(axis=1, keepdims=True))
    loss = float(-(y * logp).sum(axis=1).mean())
    g = (np.exp(logp) - y) / x.shape[0]
    new = [None] * len(params)
    for i in reversed(range(len(params))):
        w, b = params[i]
        new[i] = (w - lr * (hs[i].T @ g), b - lr * g.sum(axis=0))
        if i:
            g = (g @ w.T) * (zs[i - 1] > 0)
    return loss, new


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_every_read_of_a_variable_precedes_its_update(rt, layers) -> None:
    """The gradients are taken at the values before the step whatever order the pool runs
    ready nodes in: every node that reads a variable is an ancestor (through data or control
    inputs) of the node that updates it, so no schedule lets the update run first."""
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=2, input_dim=3, hidden=4, layers=layers, classes=2)
        nodes = {n.name: n for n in wl.graph.nodes}
        updates = [n for n in nodes.values() if n.op == "ApplyGradientDescent"]
        assert len(updates) == 2 * layers, (
            f"{len(updates)} ApplyGradientDescent nodes for {layers} layers [E2E-1]")

        def ancestors(name: str) -> set[str]:
            seen: set[str] = set()
            stack = [name]
            while stack:
                node = nodes[stack.pop()]
                for src in [ref.split(":")[0] for ref in node.inputs] + list(node.control_inputs):
                    if src not in seen:
                        seen.add(src)
                        stack.append(src)
            return seen

        for update in updates:
            var = update.inputs[0].split(":")[0]
            readers = [n.name for n in nodes.values() if n is not update
                       and any(ref.split(":")[0] == var for ref in n.inputs)]
            unordered = sorted(set(readers) - ancestors(update.name))
            assert not unordered, (
                f"{unordered} read {var!r} but {update.name!r}, which updates it, does not "
                f"depend on them: the update may run first and the gradients would not be "
                f"taken at the values before the step [E2E-1]")


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("layers,hidden,lr,expected_lr", [
    (1, 7, None, 0.1), (2, 7, None, 0.1), (3, 100, None, 0.1 * (64 / 100) ** 0.5),
    (2, 64, None, 0.1), (2, 9, 0.3, 0.3)])
def test_a_step_is_sgd_on_the_mean_loss(rt, layers, hidden, lr, expected_lr) -> None:
    batch, input_dim, classes = 6, 5, 3
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=batch, input_dim=input_dim, hidden=hidden,
                            layers=layers, classes=classes, learning_rate=lr, seed=3)
        x_name, y_name, params = training_graph(wl)
        assert len(params) == layers, f"{len(params)} layers in the graph, expected {layers} [E2E-1]"
        names = [n for pair in params for n in pair]
        rng = np.random.default_rng(11)
        x = rng.standard_normal((batch, input_dim)).astype(np.float32)
        y = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, batch)]
        for step in range(2):
            values = wl.session.run(names)
            before = [(values[2 * i].astype(np.float64), values[2 * i + 1].astype(np.float64))
                      for i in range(layers)]
            expected_loss, expected = reference_sgd_step(x.astype(np.float64), y, before,
                                                         expected_lr)
            (loss,) = wl.session.run(["loss"], {x_name: x, y_name: y}, ["train"])
            assert float(loss) == pytest.approx(expected_loss, rel=1e-4), (
                f"step {step}: loss {float(loss)}, expected the mean softmax cross-entropy "
                f"before the update {expected_loss} [E2E-1]")
            after = wl.session.run(names)
            for i, (w, b) in enumerate(expected):
                np.testing.assert_allclose(
                    after[2 * i], w, rtol=1e-4, atol=1e-6,
                    err_msg=f"step {step}: weights of layer {i} after one SGD step with "
                            f"learning rate {expected_lr} [E2E-1]")
                np.testing.assert_allclose(
                    after[2 * i + 1], b, rtol=1e-4, atol=1e-6,
                    err_msg=f"step {step}: biases of layer {i} after one SGD step [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_batches_are_fed_in_turn(rt) -> None:
    """Two batches and a learning rate too small to move the loss: two steps return the
    losses of the two batches, whose mean is what evaluate() gives (a workload that fed one
    batch twice would give that batch's loss twice)."""
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=4, input_dim=5, hidden=6, layers=2, classes=3,
                            num_batches=2, learning_rate=1e-12)
        mean = wl.evaluate()
        losses = [wl.step() for _ in range(4)]
        assert losses[0] != pytest.approx(losses[1], rel=1e-6) \
            and (losses[0] + losses[1]) / 2 == pytest.approx(mean, rel=1e-6) \
            and losses[2:] == pytest.approx(losses[:2], rel=1e-6), (
                f"with two batches the steps returned the losses {losses}, whose first two do "
                f"not average to evaluate()'s {mean} in turn: the batches are not fed in "
                f"turn [E2E-1]")
        wl.close()


@pytest.mark.clause("E2E-1")
def test_labels_are_one_hot(rt) -> None:
    """The labels each step feeds (what its session run receives for the ``y`` placeholder)
    are one-hot rows: the loss is then the mean cross-entropy of one class per example, not
    a multiple of it."""
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=8, input_dim=5, hidden=6, layers=2, classes=4,
                            num_batches=2)
        _, y_name, _ = training_graph(wl)
        labels = fed_to(wl, y_name, lambda: [wl.step() for _ in range(2)])
        wl.close()
    if not labels:
        pytest.skip(f"the workload's step() feeds no {y_name!r} through its session's run "
                    f"attribute, so the labels cannot be seen")
    for i, y in enumerate(labels):
        one_hot = (y.shape == (8, 4) and bool(np.all((y == 0) | (y == 1)))
                   and bool(np.all(y.sum(axis=1) == 1)))
        assert one_hot, (f"step {i} fed the labels {y.tolist()} for {y_name!r}, expected "
                         f"one-hot rows (a 1 for the teacher's class, 0 elsewhere) [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_step_returns_the_loss_before_the_update_and_evaluate_trains_nothing(rt) -> None:
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=4, input_dim=5, hidden=6, layers=2, classes=3,
                            num_batches=1, learning_rate=0.5)
        _, _, params = training_graph(wl)
        names = [n for pair in params for n in pair]
        values = wl.session.run(names)
        first = wl.evaluate()
        assert [v.tolist() for v in wl.session.run(names)] == [v.tolist() for v in values], \
            "evaluate() changed a variable [E2E-1]"
        assert wl.evaluate() == first, "evaluate() twice gave two values [E2E-1]"
        loss = wl.step()
        assert loss == pytest.approx(first, rel=1e-6), (
            f"with one batch, step() returned {loss}, expected the loss before the update "
            f"{first} (what evaluate() gave) [E2E-1]")
        assert wl.evaluate() < first, "the step did not update the variables [E2E-1]"


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("arg,value", [
    ("batch", 0), ("batch", -1), ("batch", True), ("batch", 2.0), ("input_dim", 0),
    ("hidden", 0), ("layers", 0), ("num_batches", 0), ("classes", 1), ("classes", 0),
    ("cost_us", -1), ("cost_us", 1.5), ("learning_rate", 0), ("learning_rate", -0.1)])
def test_bad_workload_arguments_are_value_errors(rt, arg, value) -> None:
    with sim_runtime(rt) as ctx:
        with pytest.raises(ValueError) as info:
            rt.MLPWorkload(ctx, **{arg: value})
            pytest.fail(f"MLPWorkload({arg}={value!r}) was accepted [E2E-1]")
        assert names_identifier(info.value, arg), \
            f"MLPWorkload({arg}={value!r}) error {info.value} does not name {arg} [E2E-1]"


@pytest.mark.clause("E2E-1")
def test_smallest_workload_arguments_are_valid(rt) -> None:
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=1, input_dim=1, hidden=1, layers=1, classes=2,
                            num_batches=1, cost_us=0)
        assert np.isfinite(wl.step()), "the smallest workload did not train [E2E-1]"


@pytest.mark.clause("E2E-1")
def test_a_device_manager_is_a_target_too(rt) -> None:
    """``target`` may be a device manager instead of a runtime context: the workload makes
    its own session on it and trains the same as on the context (same seed, same losses)."""
    sizes = dict(batch=4, input_dim=3, hidden=5, layers=2, classes=2)
    with sim_runtime(rt) as ctx:
        on_ctx = rt.MLPWorkload(ctx, **sizes)
        expected = [on_ctx.step() for _ in range(3)]
        on_ctx.close()
    with sim_runtime(rt) as ctx:
        on_mgr = rt.MLPWorkload(ctx.device_mgr, **sizes)
        assert on_mgr.session is not None and not on_mgr.session.closed, (
            "MLPWorkload(device_mgr) has no open session [E2E-1]")
        losses = [on_mgr.step() for _ in range(3)]
        on_mgr.close()
    assert losses == expected, (f"MLPWorkload(device_mgr) trained {losses}, the same workload "
                                f"on the runtime context {expected} [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_sized_for_at_the_smallest_size_and_one_byte_below(rt) -> None:
    """``sized_for`` at exactly what ``hidden=1`` needs gives ``hidden=1``; one byte less,
    or a size that is not an int, raises ValueError (never a workload that overshoots)."""
    sizes = dict(layers=2, batch=4, input_dim=3, classes=2)
    with sim_runtime(rt) as ctx:
        one = rt.MLPWorkload(ctx, hidden=1, **sizes)
        smallest = one.param_bytes + one.step_bytes
        one.close()
        at = rt.MLPWorkload.sized_for(ctx, smallest, **sizes)
        assert at.hidden == 1, (f"sized_for({smallest}) built hidden={at.hidden}; hidden=1 "
                                f"needs exactly {smallest} bytes [E2E-1]")
        at.close()
        default, spelled = (rt.MLPWorkload.sized_for(ctx, 8 * MiB, **kw) for kw in (
            {}, dict(layers=3, batch=256, input_dim=256, classes=10)))
        assert (default.hidden, default.param_bytes, default.step_bytes) == (
            spelled.hidden, spelled.param_bytes, spelled.step_bytes), (
            "sized_for(target, 8 MiB) differs from sized_for with its documented defaults "
            "(layers=3, batch=256, input_dim=256, classes=10) spelled out [E2E-1]")
        default.close()
        spelled.close()
        for bad in (smallest - 1, float(smallest), True):
            with pytest.raises(ValueError):
                wl = rt.MLPWorkload.sized_for(ctx, bad, **sizes)
                pytest.fail(f"sized_for({bad!r}) built hidden={wl.hidden} needing "
                            f"{wl.param_bytes + wl.step_bytes} bytes [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_sized_for_has_no_width_bound_of_its_own(rt) -> None:
    """One input, two classes, a batch of one: about 52 bytes per unit of width, so 96 MiB
    holds a hidden layer of about two million units, beyond any round bound (2**20) an
    implementation might search below."""
    sizes = dict(layers=2, batch=1, input_dim=1, classes=2)
    budget = 96 * MiB
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload.sized_for(ctx, budget, **sizes)
        hidden, fits = wl.hidden, wl.param_bytes + wl.step_bytes
        wl.close()
        assert fits <= budget, f"sized_for({budget}) overshoots: {fits} bytes [E2E-1]"
        wider = rt.MLPWorkload(ctx, hidden=hidden + 1, **sizes)
        wider_need = wider.param_bytes + wider.step_bytes
        wider.close()
        assert wider_need > budget, (
            f"sized_for({budget}, {sizes}) built hidden={hidden}, yet hidden={hidden + 1} "
            f"needs {wider_need} bytes, within the budget: not the widest [E2E-1]")
        exact = rt.MLPWorkload.sized_for(ctx, fits, **sizes)     # a budget that fits exactly
        again = exact.hidden
        exact.close()
    assert again == hidden, (
        f"sized_for({fits}, {sizes}) built hidden={again}; hidden={hidden} needs exactly "
        f"{fits} bytes [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_sized_for_one_layer_has_the_default_width(rt) -> None:
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload.sized_for(ctx, 8 * MiB, layers=1)
        hidden = wl.hidden
        wl.close()
    assert hidden == 64, (f"sized_for(8 MiB, layers=1) built hidden={hidden}: with one layer "
                          f"no tensor has the hidden width, and hidden is 64 [E2E-1]")


STEP_SHAPES = pytest.mark.parametrize("sizes", [
    dict(), dict(batch=64, input_dim=32, hidden=200, layers=3),
    dict(batch=1, input_dim=300, hidden=2, layers=1, classes=2),
    dict(batch=256, input_dim=2, hidden=8, layers=4, classes=2),
    dict(batch=2, input_dim=4, hidden=512, layers=2, classes=64),
    dict(batch=128, input_dim=16, hidden=16, layers=1, classes=128),
], ids=["default", "deep", "wide-input", "big-batch", "wide-hidden", "many-classes"])


def tensor_elements_of_a_step(batch: int, input_dim: int, hidden: int, layers: int,
                              classes: int) -> int:
    """Elements of every tensor a training step's nodes produce beyond the variables and
    constants (E2E-1), layer by layer."""
    widths = [input_dim] + [hidden] * (layers - 1) + [classes]
    elements = batch * input_dim + batch * classes                  # fed x and y
    for i in range(layers):
        fan_in, fan_out = widths[i], widths[i + 1]
        elements += 2 * batch * fan_out                 # forward MatMul and BiasAdd
        if i < layers - 1:
            elements += batch * fan_out                 # Relu
        elements += fan_in * fan_out + fan_out          # weight gradient, BiasAddGrad
        if i > 0:
            elements += 2 * batch * fan_in              # input gradient, ReluGrad
    return elements + batch + batch * classes + 1       # cross-entropy's two outputs, Mean


@pytest.mark.clause("E2E-1")
@STEP_SHAPES
def test_step_bytes_counts_every_tensor_of_a_step(rt, sizes) -> None:
    """4 bytes per element of every tensor a step produces: a size then builds the same
    model on every runtime (sized_for, --target-bytes)."""
    shape = dict(batch=32, input_dim=32, hidden=64, layers=2, classes=10) | sizes
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, **sizes)
        got = wl.step_bytes
        wl.close()
    want = 4 * tensor_elements_of_a_step(**shape)
    assert got == want, (f"step_bytes of MLPWorkload({shape}) is {got}; 4 bytes per element "
                         f"of every tensor a step produces is {want} [E2E-1]")


@pytest.mark.clause("E2E-1")
@pytest.mark.parametrize("seed", [0, 7])
def test_initial_weights_are_scaled_by_their_inputs(rt, seed: int) -> None:
    """Weights of a layer with n inputs: mean 0, standard deviation sqrt(2/n) before a Relu,
    sqrt(1/n) for the logits; biases 0. With 32768 weights or more per layer the sample
    deviation is within 0.4 % (one standard error) of the distribution's; the bound is 6 %,
    while a scale off by sqrt(2) is 41 % off."""
    layers, n = 3, 512
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, batch=1, input_dim=n, hidden=n, layers=layers, classes=64,
                            seed=seed)
        _, _, params = training_graph(wl)
        values = wl.session.run([name for pair in params for name in pair])
        wl.close()
    for i in range(layers):
        w, b = values[2 * i].astype(np.float64), values[2 * i + 1]
        want = initial_scale(i, layers, n)
        assert abs(w.std() / want - 1) < 0.06, (
            f"seed {seed}: the initial weights of layer {i} ({n} inputs) have a standard "
            f"deviation of {w.std():.5f}, expected sqrt({2 if i < layers - 1 else 1}/{n}) = "
            f"{want:.5f} [E2E-1]")
        assert abs(w.mean()) < 6 * want / math.sqrt(w.size), (
            f"seed {seed}: the initial weights of layer {i} have a mean of {w.mean():.5f}, "
            f"expected 0 [E2E-1]")
        assert not np.any(b), f"seed {seed}: the initial biases of layer {i} are {b} [E2E-1]"


@pytest.mark.clause("E2E-1")
def test_initial_weights_reuse_no_draw_of_the_data_of_any_seed(rt) -> None:
    """The initial weights, divided by their layer's scale, are standard normal draws; none
    of them is an input value fed for ``x`` by the same workload or by one of another seed
    (a generator restarted on the data's seed, or on another seed's, would repeat those
    draws). Independent draws match one of the 64 inputs to within 1e-5 (relative) about
    once in ten thousand weights: the bound is a quarter of the inputs."""
    sizes = dict(batch=4, input_dim=8, hidden=16, layers=2, classes=3, num_batches=2)
    seeds = (0, 1, 2)
    weights, inputs = {}, {}
    with sim_runtime(rt) as ctx:
        for seed in seeds:
            wl = rt.MLPWorkload(ctx, seed=seed, **sizes)
            x_name, _, params = training_graph(wl)
            values = wl.session.run([w for w, _ in params])
            fan_in = [sizes["input_dim"], sizes["hidden"]]
            weights[seed] = np.concatenate([
                (v.astype(np.float64) / initial_scale(i, len(params), fan_in[i])).ravel()
                for i, v in enumerate(values)])
            xs = [x.astype(np.float64).ravel() for x in fed_to(wl, x_name, wl.evaluate)]
            if not xs:
                pytest.skip(f"the workload's evaluate() feeds no {x_name!r} through its "
                            f"session's run attribute, so the inputs cannot be seen")
            inputs[seed] = np.unique(np.concatenate(xs))
            wl.close()
    for w_seed in seeds:
        for x_seed in seeds:
            x = inputs[x_seed]
            w = weights[w_seed]
            at = np.clip(np.searchsorted(x, w), 1, len(x) - 1)
            nearest = np.where(np.abs(x[at] - w) < np.abs(x[at - 1] - w), x[at], x[at - 1])
            repeated = int(np.sum(np.abs(nearest - w) <= 1e-5 * np.abs(w)))
            assert repeated <= len(x) // 4, (
                f"{repeated} of the {w.size} initial weights of the workload of seed "
                f"{w_seed}, divided by their layer's scale, repeat one of the {len(x)} "
                f"inputs fed by the workload of seed {x_seed}: the weights are not drawn "
                f"independently of the data [E2E-1]")


@pytest.mark.clause("E2E-1")
def test_a_workload_is_a_context_manager_that_closes_it(rt) -> None:
    """``with MLPWorkload(...) as wl`` binds the workload and closes it (its session, not the
    runtime) when the block ends, normally or by an exception, which goes on."""
    sizes = dict(batch=2, input_dim=3, hidden=4, layers=2, classes=2)
    with sim_runtime(rt) as ctx:
        workload = rt.MLPWorkload(ctx, **sizes)
        with workload as entered:
            assert entered is workload, (
                f"with MLPWorkload(...) as wl bound {entered!r}, not the workload [E2E-1]")
            assert np.isfinite(entered.step()), "a step in the with block failed [E2E-1]"
            assert not workload.session.closed, "the session closed inside the block [E2E-1]"
        assert workload.session.closed and not ctx.closed, (
            f"after the with block the workload's session is "
            f"{'closed' if workload.session.closed else 'open'} and the runtime "
            f"{'closed' if ctx.closed else 'open'}: leaving the block closes the workload "
            f"(its session only) [E2E-1]")
        failing = rt.MLPWorkload(ctx, **sizes)
        with pytest.raises(KeyError):
            with failing:
                raise KeyError("in the block")
            pytest.fail("an exception raised in a workload's with block was swallowed "
                        "[E2E-1]")
        assert failing.session.closed and not ctx.closed, (
            "a with block left by an exception did not close the workload's session (or "
            "closed the runtime) [E2E-1]")


@pytest.mark.clause("E2E-1")
@STEP_SHAPES
def test_step_bytes_bounds_a_steps_peak(rt, sizes) -> None:
    """On the CPU device, whose allocator counts requested bytes (DEVICE-6), unrounded."""
    cpu = "/device:CPU:0"
    with sim_runtime(rt) as ctx:
        wl = rt.MLPWorkload(ctx, device=cpu, **sizes)
        allocator = ctx.device_mgr.lookup_device(cpu).get_allocator()
        held = allocator.get_stats().bytes_in_use         # variables and constants
        allocator.clear_stats()
        wl.step()
        peak = allocator.get_stats().peak_bytes_in_use - held
        assert 0 < peak <= wl.step_bytes, (
            f"a step of {wl!r} held {peak} bytes beyond its variables at its peak, more than "
            f"step_bytes = {wl.step_bytes} [E2E-1]")


@pytest.mark.clause("E2E-2")
@pytest.mark.parametrize("seed", [0, 5])
def test_loss_falls_and_is_deterministic(rt, seed: int) -> None:
    runs = []
    for _ in range(2):
        with sim_runtime(rt) as ctx:
            wl = rt.MLPWorkload(ctx, seed=seed)
            runs.append([wl.step() for _ in range(50)])
    losses = runs[0]
    assert runs[0] == runs[1], "two identical workloads must give identical losses [E2E-2]"
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < first / 2, f"seed {seed}: loss {first:.3f} -> {last:.3f} over 50 steps " \
                             f"[E2E-2]"


# -- E2E-3 -----------------------------------------------------------------------------------

@pytest.mark.clause("E2E-3", "RM-8", "STAT-5", "STAT-6")
@pytest.mark.capability("resource_management", "statistics", "vmem", "adjustable",
                        "virtual_clock")
def test_shrink_mid_run_uses_host_fallback_and_keeps_learning(rt, managed_factory,
                                                              virtual_clock) -> None:
    m = managed_factory(virtual_clock)
    wl = rt.MLPWorkload(m.ctx, batch=1024, input_dim=8, hidden=256, seed=3)
    alloc = m.gpu.get_allocator()
    bfc = alloc.device_allocator
    pools = rt.GPUAdjustableAllocator()
    for _ in range(5):
        wl.step()
    pool_before = pools.get_mem_pool_stats(bfc).pool_bytes
    assert pool_before > MiB and alloc.host_allocator.get_stats().peak_bytes_in_use == 0, \
        f"the workload must fit on the GPU first (pool {pool_before}) [E2E-3]"
    virtual_clock.advance(11_000_000)
    wl.step()
    info = m.status_doc()["gpuUsageInfo"][m.bus_id]
    assert info["deviceMemPoolSize"] == pool_before and info["hostMemUsedMax"] == 0, "[STAT-5]"

    m.writer.write_in_place(config_document(limits={m.bus_id: MiB}, perf=100))
    wait_until(lambda: m.rm.memory_limits.get(m.bus_id) == MiB, "the 1 MiB limit to arrive")
    eval_at_shrink = wl.evaluate()             # runs, so its boundary applies the limit
    pool_after = pools.get_mem_pool_stats(bfc).pool_bytes
    assert bfc.get_stats().bytes_limit == MiB, \
        f"bytes_limit {bfc.get_stats().bytes_limit} after the boundary, expected {MiB} [E2E-3]"
    assert pool_after <= MiB < pool_before, \
        f"pool {pool_before} -> {pool_after} bytes, expected at most {MiB} [E2E-3]"
    losses = [wl.step() for _ in range(10)]
    assert all(np.isfinite(losses)), "[E2E-3]"
    assert alloc.host_allocator.get_stats().peak_bytes_in_use > 0, \
        "steps beyond the device limit must use host fallback [E2E-3]"
    assert pools.get_mem_pool_stats(bfc).pool_bytes <= MiB, "the pool grew past the limit [E2E-3]"
    eval_after = wl.evaluate()
    assert eval_after < eval_at_shrink, \
        f"loss {eval_at_shrink:.3f} -> {eval_after:.3f} over 10 steps after the shrink [E2E-3]"
    virtual_clock.advance(11_000_000)
    wl.step()
    info = m.status_doc()["gpuUsageInfo"][m.bus_id]
    assert info["deviceMemPoolSize"] <= MiB and info["hostMemUsedMax"] > 0 \
        and info["swapReason"] in ("OOM", "FRAGMENT"), \
        f"statistics after the shrink: {info} [E2E-3]"


# -- E2E-4, E2E-6 ----------------------------------------------------------------------------

@pytest.mark.clause("E2E-4", "E2E-6", "RM-10", "RM-11")
@pytest.mark.capability("resource_management", "gpu_op_manager", "virtual_clock")
def test_perf_control_sets_the_step_period(rt, managed_factory, auto_clock) -> None:
    m = managed_factory(auto_clock)
    wl = rt.MLPWorkload(m.ctx, cost_us=1000, seed=1)
    base = periods(wl, auto_clock, 3)
    c = base[0]
    assert c > 0 and base == [c] * 3, f"unthrottled periods {base} [E2E-4]"
    losses = [wl.step()]
    for perf in (50, 25):
        m.set_perf(perf, in_place=perf == 25)
        before = len(auto_clock.sleeps_of(OP_MANAGER_PREFIX))
        got = periods(wl, auto_clock, 6)
        expected = c * 100 // perf - 50
        assert got == [expected] * 6, (
            f"perfControl {perf}: periods {got} µs, expected {expected} = {c} * 100 // {perf}"
            f" - 50 [E2E-4]")
        # Every step sleeps T - C - 50 after it, on the thread that called run; none waits
        # an idle slot inside the step: no GpuOpManager runs.
        in_step = auto_clock.sleeps_of(OP_MANAGER_PREFIX)[before:]
        assert in_step == [], (
            f"perfControl {perf}: GpuOpManager threads waited {in_step} µs: the throttle gave "
            f"the steps an idle budget [RM-10]")
        after = auto_clock.sleeps_of(threading.current_thread().name)[-6:]
        assert after == [c * 100 // perf - c - 50] * 6, (
            f"perfControl {perf}: sleeps after the steps {after} µs, expected "
            f"{c * 100 // perf - c - 50} after each [E2E-4]")
        losses.append(wl.step())
    m.set_perf(100)
    before = len(auto_clock.sleeps_of(OP_MANAGER_PREFIX))
    assert periods(wl, auto_clock, 4) == [c] * 4, "periods back at perfControl 100 [E2E-6]"
    assert auto_clock.sleeps_of(OP_MANAGER_PREFIX)[before:] == [] and manager_threads() == [], \
        "no GpuOpManager after returning to perfControl 100 [E2E-6]"
    assert losses[-1] < losses[0], f"loss must keep falling while throttled: {losses} [E2E-4]"


# -- E2E-5 -----------------------------------------------------------------------------------

RECHECK_BOUND_US = 100_000     # a suspended step rechecks perfControl this often (RM-12)


@pytest.mark.clause("E2E-5", "RM-12")
@pytest.mark.capability("resource_management", "virtual_clock")
def test_perf_control_zero_suspends_until_nonzero(rt, managed_factory, virtual_clock) -> None:
    m = managed_factory(virtual_clock)
    wl = rt.MLPWorkload(m.ctx, seed=2)
    losses: list[float] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def train() -> None:
        try:
            while not stop.is_set():
                losses.append(wl.step())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    worker = threading.Thread(target=train, name="test-trainer", daemon=True)
    worker.start()
    try:
        wait_until(lambda: len(losses) >= 10, "10 training steps")
        m.set_perf(0)
        with precondition("RM-12", "perfControl 0 suspends the step at its boundary"):
            wait_until(lambda: "test-trainer" in virtual_clock.waiting_threads(),
                       "the training step to suspend at its step boundary")
        held = len(losses)
        time.sleep(0.1)
        assert len(losses) == held and worker.is_alive(), \
            "training went on at perfControl 0 [E2E-5]"
        assert not errors, f"the suspended step failed: {errors} [E2E-5]"
        m.set_perf(50)
        # RM-12 rechecks at least every 100 000 µs of the clock: a step the change did not
        # wake (one that rechecks on a period, as AntMan's 100 µs loop) resumes at its next
        # recheck, so the clock is moved to it while it is still suspended, never further.
        virtual_clock.advance_to_wait_of("test-trainer", RECHECK_BOUND_US)
        wait_until(lambda: len(losses) >= held + 40, "training to resume after perfControl 50")
    finally:
        stop.set()
        m.rm.wake_suspended()
        worker.join(10)
    assert not worker.is_alive() and not errors, f"training failed: {errors} [E2E-5]"
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), "the loss must keep falling [E2E-5]"
