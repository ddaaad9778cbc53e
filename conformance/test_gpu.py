"""GPU clauses (SPEC.md GPU): the runtime on a real NVIDIA GPU, observed through NVML.

Tests marked ``gpu`` need an NVIDIA GPU (NVML) and a runtime declaring ``cuda``; without a
GPU they are skipped, or fail under ``--require-gpu`` (fixtures/nvml.py). They use CUDA
device 0 and check addresses with CUDA itself (CuPy's ``pointerGetAttributes``). The
co-tenant (fixtures/cotenant.py) is another process that takes the GPU's memory to cause
real out-of-memory conditions. GPU-12 is also checked on simulated GPUs, on any machine.
"""

from __future__ import annotations

import gc
import json
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from conformance.control_helpers import (POLL_US, bus_id, control_env, runtime_factory,  # noqa: F401
                                         device_bfc, expect_value_error, gpus, runtimes,
                                         wait_for_poller)
from conformance.device_choice import need_real_gpus
from conformance.execution_helpers import wait_until
from fixtures.config_writer import ConfigWriter, config_document
from fixtures.status_reader import validate_status
from fixtures.virtual_clock import VirtualClock

MiB = 1 << 20
GiB = 1 << 30
SLACK = 2 * MiB                  # the driver maps device memory in 2 MiB pages (GPU terms)
REL_TOL = 1e-4                   # float32 results against the NumPy reference (GPU-8..10)
COTENANT_LEAVES = 48 * MiB       # free memory the co-tenant leaves on the GPU (GPU-8: <= 64)
OUTSIDE_GROWTH = 64 * MiB        # GPU-7 bound on memory held outside the allocator
LIBRARY_ALLOWANCE = 32 * MiB     # GPU-11: device memory CUDA libraries may take during a step
WARM_STEPS = 4                   # steps before a co-tenant attack: kernels and handles exist
FREE_WAIT_S = 10.0               # generous bound for frees queued by a garbage collection
STEPS_WAIT_S = 30.0              # bound on waiting for a few training steps (GPU-10)

#: GPU tests share one GPU (and a co-tenant takes all of it): under ``-n N --dist loadgroup``
#: they run one after another on one worker.
GPU = (pytest.mark.gpu, pytest.mark.capability("cuda"), pytest.mark.xdist_group("gpu"))

#: A workload whose step needs ~340 MiB on the device while its variables take ~1.6 MiB, so
#: a pool shrunk to the variables cannot hold a step.
BIG = dict(batch=16384, input_dim=256, hidden=512, layers=3, classes=10, num_batches=2,
           seed=7)
VARIABLES = [f"{kind}{i}" for i in range(BIG["layers"]) for kind in ("w", "b")]
#: GPU-7's workload: a step peaks near 300 MiB on the device.
WIDE = {**BIG, "batch": 32768}


def gpu_marks(*clauses: str) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable) -> Callable:
        for mark in (*GPU, pytest.mark.clause(*clauses)):
            fn = mark(fn)
        return fn
    return wrap


# --- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture(scope="module")
def cupy() -> types.ModuleType:
    """CUDA, for checking what the runtime's addresses are."""
    return pytest.importorskip("cupy", reason="the GPU checks read addresses through CuPy")


@pytest.fixture
def cuda_runtimes(rt: types.ModuleType, control_env: pytest.MonkeyPatch, nvml: Any,
                  cupy: types.ModuleType) -> Iterator[Callable[..., Any]]:
    """``make(**kwargs)``: ``rt.create_runtime(backend="cuda", ...)``; all closed afterwards.

    Defaults: one GPU, a 2 GiB limit, growth on, no config and no status file.
    """
    yield from runtime_factory(rt, backend="cuda", num_gpus=1, gpu_memory_bytes=2 * GiB,
                               allow_growth=True)


def gpu0(ctx: Any) -> Any:
    return ctx.device_mgr.lookup_device("/device:GPU:0")


def host_bfc(device: Any) -> Any:
    host = getattr(device.get_allocator(), "host_allocator", None)
    assert host is not None, (
        f"{device.name}: no host fallback allocator (TF_GPU_VMEM off?) [VMEM-1]")
    return host


def pool_of(rt: types.ModuleType, bfc: Any) -> int:
    return rt.GPUAdjustableAllocator().get_mem_pool_stats(bfc).pool_bytes


def pointer_kind(cupy: types.ModuleType, ptr: int) -> tuple[int, int]:
    """(memory type, device) of an address: type 2 device memory, 1 host memory."""
    attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
    return int(attrs.type), int(attrs.device)


def process_memory(nvml: Any, cupy: types.ModuleType, key: str) -> int:
    cupy.cuda.runtime.deviceSynchronize()
    return nvml.process_used(key).bytes


def figures(clause: str, **values: Any) -> None:
    """Print the NVML figures of a GPU test (shown with ``-rA``; kept for the run's record)."""
    print(f"NVML {clause}: {json.dumps(values, sort_keys=True)}")


def rel_err(value: Any, ref: Any) -> float:
    v = np.asarray(value, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if v.ndim == 0:
        return float(abs(v - r) / max(abs(r), 1e-30))
    return float(np.linalg.norm(v - r) / max(np.linalg.norm(r), 1e-30))


def cpu_reference(rt: types.ModuleType, steps: int, **shape: Any) -> tuple[list[float], list]:
    """Losses of ``steps`` steps and the variables after them, on the simulated device."""
    shape = {**BIG, **shape}
    with rt.create_runtime(backend="sim", gpu_memory_bytes=4 * GiB, config_file=None,
                           status_file=None) as ctx:
        wl = rt.MLPWorkload(ctx, **shape)
        losses = [wl.step() for _ in range(steps)]
        variables = wl.session.run(VARIABLES)
        wl.close()
    return losses, variables


def assert_matches_reference(losses: list[float], variables: list | None,
                             ref: tuple[list[float], list], what: str, clause: str) -> None:
    ref_losses, ref_vars = ref
    assert len(losses) == len(ref_losses), f"{what}: {losses} against {ref_losses} [{clause}]"
    for i, (got, want) in enumerate(zip(losses, ref_losses)):
        assert np.isfinite(got) and rel_err(got, want) <= REL_TOL, (
            f"{what}: loss of step {i + 1} = {got!r}, CPU reference {want!r} "
            f"(relative error {rel_err(got, want):.2e} > {REL_TOL}) [{clause}]")
    if variables is not None:
        for name, got, want in zip(VARIABLES, variables, ref_vars):
            err = rel_err(got, want)
            assert err <= REL_TOL, (f"{what}: variable {name} after {len(losses)} steps differs "
                                    f"from the CPU reference by {err:.2e} > {REL_TOL} [{clause}]")


def shrink_to_variables(rt: types.ModuleType, bfc: Any) -> int:
    """Release every fully free region of ``bfc`` (adjust to 0); returns the pool kept."""
    rt.GPUAdjustableAllocator().adjust_memory_limit(0, bfc)
    return pool_of(rt, bfc)


# --- GPU-1 and GPU-2: the backend and its devices -------------------------------------------

@gpu_marks("GPU-1")
def test_cuda_backend_builds_gpu_i_over_cuda_device_i(rt, cuda_runtimes, cupy) -> None:
    count = int(cupy.cuda.runtime.getDeviceCount())
    ctx = cuda_runtimes(num_gpus=count, gpu_memory_bytes=64 * MiB)
    devices = gpus(ctx)
    assert [d.name.rsplit("/", 1)[-1] for d in devices] == [
        f"device:GPU:{i}" for i in range(count)], (
        f"create_runtime(backend='cuda') {devices} [GPU-1]")
    for i, device in enumerate(devices):
        ptr = device.get_allocator().allocate_raw(256, MiB)
        assert ptr is not None, f"{device.name}.allocate_raw(256, 1 MiB) returned None [GPU-1]"
        try:
            kind = pointer_kind(cupy, ptr)
            assert kind == (2, i), (f"{device.name}.allocate_raw(256, 1 MiB) = {ptr:#x} is "
                                    f"memory type/device {kind}, expected device memory of "
                                    f"CUDA device {i} [GPU-1]")
        finally:
            device.get_allocator().deallocate_raw(ptr)
    expect_value_error(lambda: rt.create_runtime(backend="cuda", num_gpus=count + 1,
                                                 config_file=None, status_file=None),
                       f"create_runtime(backend='cuda', num_gpus={count + 1}) on {count} GPU(s)",
                       "GPU-1")


@gpu_marks("GPU-1")
def test_antman_device_cuda_and_auto_select_the_gpu(rt, cuda_runtimes, cupy,
                                                    control_env) -> None:
    for value in ("cuda", "auto", " CUDA "):
        control_env.setenv("ANTMAN_DEVICE", value)
        ctx = cuda_runtimes(backend=None, gpu_memory_bytes=64 * MiB)
        device = gpu0(ctx)
        ptr = device.get_allocator().allocate_raw(256, MiB)
        try:
            assert pointer_kind(cupy, ptr)[0] == 2, (
                f"ANTMAN_DEVICE={value!r}: GPU:0 memory is not device memory [GPU-1]")
        finally:
            device.get_allocator().deallocate_raw(ptr)
        ctx.close()


def _relu_graph(rt: types.ModuleType, device: str) -> Any:
    g = rt.Graph()
    g.add_node("p", "Placeholder", device=device, dtype="float32")
    g.add_node("r", "Relu", ["p"], device=device)
    return g


@gpu_marks("GPU-1")
def test_a_cupy_array_is_fed_as_its_host_copy(rt, cuda_runtimes, cupy) -> None:
    s = cuda_runtimes(gpu_memory_bytes=64 * MiB).new_session(_relu_graph(rt, "/device:GPU:0"))
    fed = cupy.asarray(np.array([[-1.5, 2.0], [3.0, -4.0]], np.float64))
    try:
        p, r = s.run(["p", "r"], {"p": fed})
    except rt.OpError as exc:
        pytest.fail(f"a CuPy array fed to a Placeholder on GPU:0 was refused: {exc} [GPU-1]")
    assert isinstance(p, np.ndarray) and p.dtype == np.float32, (
        f"the fed CuPy float64 array came back as {type(p).__name__} {p.dtype}, expected a "
        f"NumPy float32 array [GPU-1]")
    np.testing.assert_array_equal(p, [[-1.5, 2.0], [3.0, -4.0]], err_msg="the fed value [GPU-1]")
    np.testing.assert_array_equal(r, [[0.0, 2.0], [3.0, 0.0]], err_msg="Relu of it [GPU-1]")


@gpu_marks("GPU-1")
def test_empty_tensors_compute_on_the_gpu(rt, cuda_runtimes, cupy) -> None:
    s = cuda_runtimes(gpu_memory_bytes=64 * MiB).new_session(_relu_graph(rt, "/device:GPU:0"))
    for shape in ((0,), (0, 4), (3, 0)):
        try:
            p, r = s.run(["p", "r"], {"p": np.zeros(shape, np.float32)})
        except rt.OpError as exc:
            pytest.fail(f"a step feeding an empty {shape} tensor on GPU:0 failed: {exc} "
                        f"[GPU-1]")
        for name, value in (("p", p), ("r", r)):
            assert value.shape == shape and value.dtype == np.float32, (
                f"fetched {name!r} of an empty {shape} feed is {value.dtype} {value.shape} "
                f"[GPU-1]")


@gpu_marks("GPU-2")
def test_gpu_descriptions_carry_the_real_pci_bus_ids(rt, cuda_runtimes, nvml, cupy) -> None:
    count = int(cupy.cuda.runtime.getDeviceCount())
    ctx = cuda_runtimes(num_gpus=count, gpu_memory_bytes=64 * MiB)
    nvml_keys = set(nvml.bus_ids())
    keys = []
    for i, device in enumerate(gpus(ctx)):
        key = bus_id(rt, device)
        cuda_key = rt.get_pci_bus_id(
            f"pci bus id: {cupy.cuda.runtime.deviceGetPCIBusId(i)}")
        assert key == cuda_key, (f"{device.name}: get_pci_bus_id(desc) = {key!r}, but CUDA "
                                 f"device {i} is at {cuda_key!r} [GPU-2]")
        assert key in nvml_keys, (
            f"{device.name}: {key!r} is not a GPU NVML sees {nvml_keys} [GPU-2]")
        keys.append(key)
    assert len(set(keys)) == len(keys), f"bus ids {keys} are not distinct [GPU-2]"


# --- GPU-3 to GPU-6: memory NVML sees -------------------------------------------------------

@gpu_marks("GPU-3")
def test_device_regions_are_device_memory_nvml_sees(rt, cuda_runtimes, nvml, cupy) -> None:
    ctx = cuda_runtimes()
    device = gpu0(ctx)
    key, bfc = bus_id(rt, device), device_bfc(device)
    size = 256 * MiB
    before, pool_before = process_memory(nvml, cupy, key), pool_of(rt, bfc)
    ptr = bfc.allocate_raw(256, size)
    assert ptr is not None, "GPU_0_bfc.allocate_raw(256, 256 MiB) returned None [GPU-3]"
    try:
        grown = process_memory(nvml, cupy, key) - before
        region = pool_of(rt, bfc) - pool_before
        assert region >= size, "[GPU-3]"
        assert grown >= region - SLACK, (
            f"allocate_raw(256, {size}) obtained a {region}-byte region but NVML process "
            f"memory grew by {grown} [GPU-3]")
        assert pointer_kind(cupy, ptr) == (2, 0), f"{ptr:#x} is not device memory [GPU-3]"
        figures("GPU-3", region=region, nvml_growth=grown, nvml_before=before)
    finally:
        bfc.deallocate_raw(ptr)


@gpu_marks("GPU-4")
def test_shrink_releases_memory_that_nvml_sees(rt, cuda_runtimes, nvml, cupy) -> None:
    ctx = cuda_runtimes()
    device = gpu0(ctx)
    key, bfc, vmem = bus_id(rt, device), device_bfc(device), device.get_allocator()
    ptrs = [vmem.allocate_raw(256, s) for s in (100 * MiB, 300 * MiB, 500 * MiB)]
    assert None not in ptrs, "[GPU-4]"
    keep = vmem.allocate_raw(256, MiB)                  # a region that stays in use
    for p in ptrs:
        vmem.deallocate_raw(p)
    try:
        pool_before = pool_of(rt, bfc)
        nvml_before = process_memory(nvml, cupy, key)
        limit = rt.GPUAdjustableAllocator().adjust_memory_limit(64 * MiB, bfc)
        nvml_after = process_memory(nvml, cupy, key)
        released = pool_before - pool_of(rt, bfc)
        assert released >= 512 * MiB, (
            f"adjust_memory_limit(64 MiB) released only {released} [GPU-4]")
        drop = nvml_before - nvml_after
        figures("GPU-4", pool_before=pool_before, released=released, limit=limit,
                nvml_before=nvml_before, nvml_after=nvml_after, nvml_drop=drop,
                method=nvml.process_used(key).method)
        assert drop >= released - SLACK, (
            f"adjust_memory_limit(64 MiB, bfc) -> {limit} released {released} bytes of pool, "
            f"but NVML process memory dropped by {drop} ({nvml_before} -> {nvml_after}) [GPU-4]")
    finally:
        vmem.deallocate_raw(keep)


@gpu_marks("GPU-5")
def test_growing_again_returns_allocations_to_the_device(rt, cuda_runtimes, nvml,
                                                         cupy) -> None:
    ctx = cuda_runtimes()
    device = gpu0(ctx)
    bfc, vmem, host = device_bfc(device), device.get_allocator(), host_bfc(device)
    adj = rt.GPUAdjustableAllocator()
    p = vmem.allocate_raw(256, 512 * MiB)
    vmem.deallocate_raw(p)
    adj.adjust_memory_limit(16 * MiB, bfc)               # shrink: the 512 MiB region goes
    size = 256 * MiB
    on_host = vmem.allocate_raw(256, size)
    assert on_host is not None and pointer_kind(cupy, on_host)[0] == 1, (
        "under a 16 MiB limit a 256 MiB allocation should fall back to host memory (VMEM) [GPU-5]")
    vmem.deallocate_raw(on_host)
    host_in_use = host.get_stats().bytes_in_use
    adj.adjust_memory_limit(2 * GiB, bfc)                # grow again
    free, _ = cupy.cuda.runtime.memGetInfo()
    assert free >= size + 64 * MiB, "[GPU-5]"
    ptr = vmem.allocate_raw(256, size)
    try:
        assert ptr is not None, "[GPU-5]"
        assert pointer_kind(cupy, ptr) == (2, 0), (
            f"after adjust_memory_limit(2 GiB) allocate_raw(256, {size}) = {ptr:#x} is not "
            f"device memory [GPU-5]")
        assert host.get_stats().bytes_in_use == host_in_use, "host allocator grew [GPU-5]"
        assert bfc.get_stats().bytes_in_use >= size, "the device side did not serve it [GPU-5]"
    finally:
        vmem.deallocate_raw(ptr)


@gpu_marks("GPU-6")
def test_host_fallback_is_pinned_mapped_memory_kernels_use_in_place(rt, cuda_runtimes,
                                                                      cupy) -> None:
    ctx = cuda_runtimes(gpu_memory_bytes=MiB)            # the device side holds 1 MiB only
    device = gpu0(ctx)
    vmem = device.get_allocator()
    n = 1 << 20
    ptr = vmem.allocate_raw(256, 4 * n)
    assert ptr is not None, "[GPU-6]"
    try:
        kind = pointer_kind(cupy, ptr)
        assert kind[0] == 1, f"host fallback address {ptr:#x} has memory type {kind} [GPU-6]"
        mem = cupy.cuda.memory.UnownedMemory(ptr, 4 * n, None, 0)
        on_host = cupy.ndarray((n,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))
        on_device = cupy.arange(n, dtype=cupy.float32)
        on_host[...] = on_device
        for arr in (on_host, on_device):
            arr *= 3
            arr += 1
        assert bool((on_host == on_device).all()), (
            "an element-wise kernel on the host fallback address computed different values "
            "than on device memory [GPU-6]")
        del on_host, on_device, mem
    finally:
        vmem.deallocate_raw(ptr)


# --- GPU-7 to GPU-10: workloads under memory pressure -------------------------------------

@gpu_marks("GPU-7")
def test_every_gpu_buffer_of_a_step_is_placed_by_the_allocator(rt, cuda_runtimes, nvml,
                                                               cupy) -> None:
    ctx = cuda_runtimes()
    device = gpu0(ctx)
    key, bfc = bus_id(rt, device), device_bfc(device)
    wl = rt.MLPWorkload(ctx, **WIDE)
    outside = []
    for _ in range(5):
        wl.step()
        outside.append(process_memory(nvml, cupy, key) - pool_of(rt, bfc))
    assert bfc.get_stats().peak_bytes_in_use >= 256 * MiB, "[GPU-7]"
    growth = max(outside) - outside[0]
    figures("GPU-7", outside_after_each_step=outside, growth=growth,
            peak=bfc.get_stats().peak_bytes_in_use)
    assert growth <= OUTSIDE_GROWTH, (
        f"NVML process memory outside the allocator's pool grew by {growth} bytes over 5 steps "
        f"({outside}) [GPU-7]")


@gpu_marks("GPU-7")
def test_a_kernel_computes_in_place_in_its_one_allocation(rt, cuda_runtimes, cupy) -> None:
    ctx = cuda_runtimes(gpu_memory_bytes=256 * MiB)
    bfc = device_bfc(gpu0(ctx))
    s = ctx.new_session(_relu_graph(rt, "/device:GPU:0"))
    n = MiB                                          # float32: N = 4 MiB
    x = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    s.run(["r"], {"p": x})                            # kernels loaded
    before = bfc.get_stats().bytes_in_use
    bfc.clear_stats()
    (r,) = s.run(["r"], {"p": x})
    stats = bfc.get_stats()
    assert (stats.num_allocs, stats.largest_alloc_size) == (2, 4 * n), (
        f"feeding a Placeholder of {4 * n} bytes and fetching Relu of it made "
        f"{stats.num_allocs} allocations (largest {stats.largest_alloc_size}) in GPU:0's "
        f"device BFC, expected 2 of {4 * n}: one per output, computed in place [GPU-7]")
    assert stats.peak_bytes_in_use - before == 2 * 4 * n, (
        f"the step peaked at {stats.peak_bytes_in_use - before} bytes in use, expected "
        f"{2 * 4 * n} (its two outputs) [GPU-7]")
    np.testing.assert_array_equal(r, np.maximum(x, 0), err_msg="Relu on GPU:0 [GPU-7]")


@gpu_marks("GPU-7")
def test_a_gradient_descent_update_allocates_no_temporary(rt, cuda_runtimes, cupy) -> None:
    ctx = cuda_runtimes(gpu_memory_bytes=256 * MiB)
    bfc = device_bfc(gpu0(ctx))
    n = MiB                                          # float32: N = 4 MiB
    g = rt.Graph()
    g.add_node("v", "Variable", device="/device:GPU:0",
               initial_value=np.ones(n, np.float32))
    g.add_node("alpha", "Const", device="/device:GPU:0", value=np.float32(0.5))
    g.add_node("delta", "Placeholder", device="/device:GPU:0", dtype="float32")
    g.add_node("step", "ApplyGradientDescent", ["v", "alpha", "delta"], device="/device:GPU:0")
    s = ctx.new_session(g)
    delta = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    s.run([], {"delta": delta}, ["step"])            # variable initialised, kernel loaded
    before = bfc.get_stats().bytes_in_use
    bfc.clear_stats()
    s.run([], {"delta": delta}, ["step"])
    stats = bfc.get_stats()
    assert (stats.num_allocs, stats.largest_alloc_size) == (1, 4 * n), (
        f"feeding delta of {4 * n} bytes and running ApplyGradientDescent of a variable made "
        f"{stats.num_allocs} allocations (largest {stats.largest_alloc_size}) in GPU:0's "
        f"device BFC, expected 1 of {4 * n}: the fed delta, updated in place [GPU-7]")
    assert stats.peak_bytes_in_use - before == 4 * n, (
        f"the step peaked at {stats.peak_bytes_in_use - before} bytes in use, expected "
        f"{4 * n} (the fed delta) [GPU-7]")
    (v,) = s.run(["v"])
    np.testing.assert_allclose(v, 1.0 - 2 * 0.5 * delta, rtol=1e-5, atol=1e-6,
                               err_msg="two updates of ApplyGradientDescent on GPU:0 [GPU-7]")


def _xent_graph(rt: types.ModuleType, device: str) -> Any:
    g = rt.Graph()
    g.add_node("logits", "Placeholder", device=device, dtype="float32")
    g.add_node("labels", "Placeholder", device=device, dtype="float32")
    g.add_node("xent", "SoftmaxCrossEntropyWithLogits", ["logits", "labels"], device=device)
    return g


def _xent_reference(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    log_softmax = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -(labels * log_softmax).sum(axis=1), np.exp(log_softmax) - labels


@gpu_marks("GPU-7")
def test_kernels_of_gpu_1_allocate_from_gpu_1_only(rt, cuda_runtimes, cupy) -> None:
    need_real_gpus(2, int(cupy.cuda.runtime.getDeviceCount()), "GPU-7 on GPU:1")
    ctx = cuda_runtimes(num_gpus=2, gpu_memory_bytes=256 * MiB)
    bfcs = [device_bfc(d) for d in gpus(ctx)[:2]]
    s = ctx.new_session(_xent_graph(rt, "/device:GPU:1"))
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((256, 10)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)]
    try:
        loss, backprop = s.run(["xent:0", "xent:1"], {"logits": logits, "labels": labels})
    except rt.OpError as exc:
        pytest.fail(f"SoftmaxCrossEntropyWithLogits on GPU:1 failed: {exc} [GPU-7]")
    on_0, on_1 = (b.get_stats().num_allocs for b in bfcs)
    assert on_0 == 0 and on_1 >= 2, (
        f"a step whose nodes are all on GPU:1 made {on_0} allocations in GPU:0's device BFC "
        f"and {on_1} in GPU:1's: its kernels must run with CUDA device 1 current [GPU-7]")
    want_loss, want_backprop = _xent_reference(logits, labels)
    for name, got, want in (("loss", loss, want_loss), ("backprop", backprop, want_backprop)):
        assert rel_err(got, want) <= REL_TOL, (
            f"{name} on GPU:1 differs from NumPy by {rel_err(got, want):.2e} [GPU-7]")


@gpu_marks("GPU-8", "GPU-7")
def test_real_oom_falls_back_to_host_and_computes_the_cpu_values(rt, cuda_runtimes, cotenant,
                                                                 cupy) -> None:
    ctx = cuda_runtimes()
    device = gpu0(ctx)
    bfc, host = device_bfc(device), host_bfc(device)
    wl = rt.MLPWorkload(ctx, **BIG)
    losses = [wl.step() for _ in range(WARM_STEPS)]       # on the device; kernels loaded
    assert host.get_stats().peak_bytes_in_use == 0, "[GPU-8]"
    kept = shrink_to_variables(rt, bfc)
    tenant = cotenant(bus_id(rt, device))
    hold = tenant.leave(COTENANT_LEAVES)
    assert hold.free <= COTENANT_LEAVES + SLACK, f"{hold} [GPU-8]"
    rt.GPUAdjustableAllocator().adjust_memory_limit(2 * GiB, bfc)
    losses += [wl.step(), wl.step()]
    variables = wl.session.run(VARIABLES)
    figures("GPU-8", cotenant_held=hold.held, free_left=hold.free, pool_kept=kept,
            host_peak=host.get_stats().peak_bytes_in_use, losses=losses)
    assert host.get_stats().peak_bytes_in_use > 0, (
        f"with {hold.free} bytes free on the GPU and a {kept}-byte pool the steps did not use "
        f"host memory [GPU-8]")
    assert_matches_reference(losses, variables, cpu_reference(rt, len(losses)),
                             "real OOM, VMem on", "GPU-8")


@gpu_marks("GPU-9")
def test_without_vmem_oom_is_a_clean_error_and_the_next_step_succeeds(rt, cuda_runtimes,
                                                                      cotenant, cupy,
                                                                      control_env) -> None:
    control_env.setenv("TF_GPU_VMEM", "false")
    clock = VirtualClock(auto_advance=True)               # the BFC's retry waits pass at once
    ctx = cuda_runtimes(clock=clock)
    device = gpu0(ctx)
    bfc = device.get_allocator()
    assert not hasattr(bfc, "host_allocator"), "TF_GPU_VMEM=false still built VMem [GPU-9]"
    wl = rt.MLPWorkload(ctx, **BIG)
    losses = [wl.step() for _ in range(WARM_STEPS)]
    shrink_to_variables(rt, bfc)
    in_use = bfc.get_stats().bytes_in_use
    tenant = cotenant(bus_id(rt, device))
    tenant.leave(COTENANT_LEAVES)
    rt.GPUAdjustableAllocator().adjust_memory_limit(2 * GiB, bfc)
    with pytest.raises(rt.ResourceExhaustedError) as excinfo:
        wl.step()
    del excinfo
    gc.collect()                                          # the traceback's frames, and arrays
    try:
        wait_until(lambda: bfc.get_stats().bytes_in_use == in_use,
                   f"the device allocator to hold its {in_use} bytes of before the failed step",
                   timeout_s=FREE_WAIT_S)
    except AssertionError as exc:
        raise AssertionError(
            f"after the failed step the device allocator holds {bfc.get_stats().bytes_in_use} "
            f"bytes, {in_use} before it [GPU-9]") from exc
    tenant.release()
    losses += [wl.step(), wl.step()]
    assert_matches_reference(losses, None, cpu_reference(rt, len(losses)), "after a clean OOM",
                             "GPU-9")


@gpu_marks("GPU-10")
def test_a_cotenant_taking_memory_mid_run_does_not_break_the_job(rt, cuda_runtimes, cotenant,
                                                                 cupy) -> None:
    ctx = cuda_runtimes()
    device = gpu0(ctx)
    bfc, host = device_bfc(device), host_bfc(device)
    tenant = cotenant(bus_id(rt, device))                 # started before the job runs
    wl = rt.MLPWorkload(ctx, **BIG)
    max_steps = 30
    losses: list[float] = []
    errors: list[BaseException] = []
    done = threading.Semaphore(0)
    stop = threading.Event()

    def train() -> None:
        try:
            while len(losses) < max_steps and not stop.is_set():
                losses.append(wl.step())
                done.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        done.release()

    def steps_done(n: int) -> None:
        deadline = time.monotonic() + STEPS_WAIT_S
        while len(losses) < n and not errors and trainer.is_alive():
            assert time.monotonic() < deadline, (
                f"the job ran {len(losses)} steps, {n} awaited: no step ended in "
                f"{STEPS_WAIT_S} s [GPU-10]")
            done.acquire(timeout=1)

    trainer = threading.Thread(target=train, name="gpu-10-trainer", daemon=True)
    trainer.start()
    try:
        steps_done(WARM_STEPS)
        full = pool_of(rt, bfc)
        adj = rt.GPUAdjustableAllocator()
        deadline = time.monotonic() + STEPS_WAIT_S
        while pool_of(rt, bfc) > full // 2 and trainer.is_alive():
            assert time.monotonic() < deadline, (
                f"no moment with free regions to release in {STEPS_WAIT_S} s [GPU-10]")
            adj.adjust_memory_limit(0, bfc)               # AntMan shrinks the running job ...
            time.sleep(0.0002)
        tenant.leave(COTENANT_LEAVES)                     # ... and another job takes the GPU
        adj.adjust_memory_limit(2 * GiB, bfc)
        grabbed_at = len(losses)
        steps_done(grabbed_at + 3)
        tenant.release()
        steps_done(len(losses) + 1)
    finally:                                              # no step runs on after the test
        stop.set()
        trainer.join(timeout=STEPS_WAIT_S)
    assert not trainer.is_alive(), f"the job's step did not end {STEPS_WAIT_S} s after the " \
                                   f"stop [GPU-10]"
    assert not errors, f"training failed: {errors!r} [GPU-10]"
    assert len(losses) >= grabbed_at + 3, (
        f"only {len(losses) - grabbed_at} steps ran while the co-tenant held the GPU [GPU-10]")
    assert host.get_stats().peak_bytes_in_use > 0, (
        "the co-tenant never pushed the job to host [GPU-10]")
    ref_losses, _ = cpu_reference(rt, len(losses))
    assert_matches_reference(losses, None, (ref_losses, []), "co-tenant mid-run", "GPU-10")


# --- GPU-11: the end-to-end config scenario on the GPU --------------------------------------

@gpu_marks("GPU-11")
def test_end_to_end_config_scenario_on_the_gpu(rt, cuda_runtimes, nvml, cupy,
                                               tmp_path) -> None:
    clock = VirtualClock()
    config = ConfigWriter(tmp_path / "config.json")
    config.write(config_document(perf=100))
    status = tmp_path / "status.json"
    ctx = cuda_runtimes(clock=clock, config_file=str(config.path), status_file=str(status),
                        poll_interval_s=1.0)
    wait_for_poller(clock)
    device = gpu0(ctx)
    key, bfc, host = bus_id(rt, device), device_bfc(device), host_bfc(device)
    wl = rt.MLPWorkload(ctx, **BIG)
    losses = [wl.step() for _ in range(3)]
    doc = json.loads(status.read_text())
    assert validate_status(doc) == [], f"{validate_status(doc)} [GPU-11]"
    assert set(doc["gpuUsageInfo"]) == {key}, (
        f"gpuUsageInfo keys {sorted(doc['gpuUsageInfo'])}, expected the GPU's {key!r} [GPU-11]")

    limit = 64 * MiB
    config.write(config_document(limits={key: limit}, perf=100))
    clock.tick(POLL_US)                                   # the listener delivers the config
    pool_before, nvml_before = pool_of(rt, bfc), process_memory(nvml, cupy, key)
    losses.append(wl.step())                              # the shrink happens at its end
    pool_after, nvml_after = pool_of(rt, bfc), process_memory(nvml, cupy, key)
    assert bfc.get_stats().bytes_limit == limit, "maxDeviceMem not in force [GPU-11]"
    assert pool_after <= limit < pool_before, f"pool {pool_before} -> {pool_after} [GPU-11]"
    drop = nvml_before - nvml_after
    figures("GPU-11", pool_before=pool_before, pool_after=pool_after, nvml_before=nvml_before,
            nvml_after=nvml_after, nvml_drop=drop)
    assert drop >= pool_before - pool_after - LIBRARY_ALLOWANCE, (
        f"the config shrink released {pool_before - pool_after} bytes of pool, NVML process "
        f"memory dropped by {drop} [GPU-11]")

    losses += [wl.step() for _ in range(3)]               # on host memory beyond the limit
    assert host.get_stats().peak_bytes_in_use > 0, "[GPU-11]"
    clock.tick(11_000_000)                                # past the 10 s dump interval
    losses.append(wl.step())
    doc = json.loads(status.read_text())
    assert validate_status(doc) == [], f"{validate_status(doc)} [GPU-11]"
    usage = doc["gpuUsageInfo"][key]
    assert usage["deviceMemPoolSize"] == pool_of(rt, bfc) <= limit, (
        f"{usage}, pool {pool_of(rt, bfc)} [GPU-11]")
    assert usage["hostMemUsedMax"] > 0 and usage["swapReason"] != "", f"{usage} [GPU-11]"
    assert all(np.isfinite(losses)) and np.mean(losses[-3:]) < np.mean(losses[:3]), (
        f"the loss did not fall through the scenario: {losses} [GPU-11]")
    wl.close()


# --- GPU-12: per-bus-id limits with several GPUs ----------------------------------------------

def _limits_apply_to_their_gpu(rt: types.ModuleType, ctx: Any, config: ConfigWriter,
                               clock: VirtualClock) -> None:
    """``config`` named GPU:1 before the runtime started: applied at the first step boundary
    (the workloads' init). A rewrite naming two GPUs is applied after one listener poll."""
    devices = gpus(ctx)
    assert len(devices) >= 2, "[GPU-12]"
    keys = [bus_id(rt, d) for d in devices]
    initial = device_bfc(devices[0]).get_stats().bytes_limit
    wls = [rt.MLPWorkload(ctx, device=d.name, seed=i) for i, d in enumerate(devices)]
    for wl in wls:
        wl.step()
    limits = [device_bfc(d).get_stats().bytes_limit for d in devices]
    want = [FIRST_LIMIT if i == 1 else initial for i in range(len(devices))]
    assert limits == want, (f"gpuConfigInfo {{{keys[1]!r}: {FIRST_LIMIT}}} gave the GPUs "
                            f"{dict(zip(keys, limits))}, expected {dict(zip(keys, want))} "
                            f"[GPU-12]")
    both = {keys[0]: 12 * MiB, keys[-1]: 10 * MiB}
    config.write(config_document(limits=both))
    clock.tick(POLL_US)                                   # one listener poll delivers it
    wls[0].step()                                         # applied at this step boundary
    limits = [device_bfc(d).get_stats().bytes_limit for d in devices]
    want = [both.get(k, FIRST_LIMIT if i == 1 else initial) for i, k in enumerate(keys)]
    assert limits == want, (f"after gpuConfigInfo {both} the GPUs have "
                            f"{dict(zip(keys, limits))}, expected {dict(zip(keys, want))} "
                            f"[GPU-12]")
    for wl in wls:
        wl.close()


FIRST_LIMIT = 8 * MiB


def _config_naming_gpu_1(tmp_path: Any, bus_of_gpu_1: str) -> ConfigWriter:
    config = ConfigWriter(tmp_path / "config.json")
    config.write(config_document(limits={bus_of_gpu_1: FIRST_LIMIT}))
    return config


@pytest.mark.clause("GPU-12")
@pytest.mark.capability("resource_management", "workload", "virtual_clock")
def test_per_bus_id_limits_apply_to_the_right_simulated_gpu(rt, runtimes, tmp_path) -> None:
    config = _config_naming_gpu_1(tmp_path, "3c:00.0")    # GPU:1 of the simulated backend
    clock = VirtualClock()
    ctx = runtimes(backend="sim", num_gpus=3, gpu_memory_bytes=64 * MiB, clock=clock,
                   config_file=str(config.path), poll_interval_s=1.0)
    _limits_apply_to_their_gpu(rt, ctx, config, clock)


@gpu_marks("GPU-12")
def test_per_bus_id_limits_apply_to_the_right_real_gpu(rt, cuda_runtimes, cupy,
                                                       tmp_path) -> None:
    count = int(cupy.cuda.runtime.getDeviceCount())
    need_real_gpus(2, count, "GPU-12 on real GPUs")
    key_1 = rt.get_pci_bus_id(f"pci bus id: {cupy.cuda.runtime.deviceGetPCIBusId(1)}")
    config = _config_naming_gpu_1(tmp_path, key_1)
    clock = VirtualClock()
    ctx = cuda_runtimes(num_gpus=count, gpu_memory_bytes=256 * MiB, clock=clock,
                        config_file=str(config.path), poll_interval_s=1.0)
    _limits_apply_to_their_gpu(rt, ctx, config, clock)
