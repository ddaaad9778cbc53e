"""The CUDA backend's book-keeping, checked on a CPU against a stand-in for CuPy.

The real GPU is exercised by ``conformance/test_gpu.py`` (marked ``gpu``) and
``benchmarks/gpu_smoke.py``; these tests pin down what can be checked without one: region
accounting, the CuPy allocator routing (device first, host fallback, out-of-memory error),
buffer lifetimes across threads and the garbage collector, and install/uninstall.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest

import reference_runtime as rt
from meta_tests.child_env import python_path
from meta_tests.fake_cupy import make_fake_cupy
from reference_runtime import cuda_backend as cb

MiB = 1 << 20


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch):
    fake = make_fake_cupy(num_gpus=2, gpu_bytes=64 * MiB)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


@pytest.fixture
def backend(cupy, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)   # restored afterwards
    return cb.CudaBackend()


def test_backend_keeps_cublas_workspaces_small_unless_the_user_chose(cupy, monkeypatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    cb.CudaBackend()
    import os
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == cb.CUBLAS_WORKSPACE
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    cb.CudaBackend()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_without_cupy_the_backend_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)   # import cupy -> ImportError
    with pytest.raises(cb.CudaUnavailableError, match=r"cuda12|cuda13"):
        cb.CudaBackend()
    assert cb.cuda_available() is False


def test_gpu_info_carries_the_real_bus_id(backend) -> None:
    info = backend.gpu_info(1)
    assert info.pci_bus_id == "0000:3c:00.0"
    assert info.total_memory == 64 * MiB and info.compute_capability == (9, 0)
    assert backend.gpu_count() == 2 and backend.name == "cuda"
    with pytest.raises(ValueError):
        backend.gpu_info(2)


def test_device_regions_are_cuda_allocations_on_their_gpu(backend, cupy) -> None:
    mem = backend.device_memory(1, 32 * MiB)
    p = mem.alloc(256, 16 * MiB)
    assert cupy._device_live[p] == (1, 16 * MiB)
    assert mem.alloc(256, 32 * MiB) is None, "over the capacity"
    assert mem.bytes_in_use == 16 * MiB and mem.live_regions == {p: 16 * MiB}
    with pytest.raises(rt.InvalidPointerError):
        mem.free(p, 8 * MiB)                        # the wrong size frees nothing
    assert cupy._device_live[p] == (1, 16 * MiB) and mem.free_calls == []
    mem.free(p, 16 * MiB)
    assert p not in cupy._device_live and mem.free_calls == [(p, 16 * MiB)]
    with pytest.raises(rt.InvalidPointerError):
        mem.free(p, 16 * MiB)
    mem.fail = True
    assert mem.alloc(256, MiB) is None


def test_driver_out_of_memory_is_none_not_an_exception(backend, cupy) -> None:
    mem = backend.device_memory(0, None)
    p = mem.alloc(256, 60 * MiB)
    assert mem.alloc(256, 8 * MiB) is None and mem.driver_failures == 1
    mem.free(p, 60 * MiB)


def test_host_regions_are_pinned_mapped_portable(backend, cupy) -> None:
    host = backend.host_memory(0)
    p = host.alloc(256, 4 * MiB)
    assert cupy._events[-1] == ("hostAlloc", 1 | 2, 4 * MiB)
    host.free(p, 4 * MiB)
    assert not cupy._host_live


def _stack(backend, limit: int):
    bfc = rt.GPUBFCAllocator(backend.device_memory(0, limit), limit, "GPU_0_bfc",
                             allow_growth=True)
    vmem = rt.maybe_create_gpu_vmem_allocator(bfc, host_sub_allocator=backend.host_memory(0))
    return bfc, vmem


def test_routing_places_device_first_then_host(backend, cupy) -> None:
    bfc, vmem = _stack(backend, 8 * MiB)
    with cb.CupyAllocatorRouting({0: vmem}) as routing:
        a = cupy.empty(6 * MiB)
        assert bfc.get_stats().bytes_in_use >= 6 * MiB, "within the device limit: device"
        b = cupy.empty(6 * MiB)
        assert bfc.get_stats().bytes_in_use < 12 * MiB, "over the device limit: host"
        assert vmem.host_allocator.get_stats().bytes_in_use >= 6 * MiB
        assert routing.live_buffers == 2
        del a, b
        assert routing.live_buffers == 0
        assert bfc.get_stats().bytes_in_use == 0
        assert vmem.host_allocator.get_stats().bytes_in_use == 0


def test_refused_allocation_raises_cupy_out_of_memory(backend, cupy,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_GPU_VMEM", "false")
    bfc, vmem = _stack(backend, 8 * MiB)
    assert vmem is bfc
    routing = cb.CupyAllocatorRouting(
        {0: bfc}, attributes=rt.AllocationAttributes(no_retry_on_failure=True))
    with routing:
        a = cupy.empty(6 * MiB)
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError) as excinfo:
            cupy.empty(6 * MiB)
        assert isinstance(excinfo.value, rt.ResourceExhaustedError), "a step must fail with OOM"
        assert excinfo.value.num_bytes == 6 * MiB
        del excinfo
        del a
        b = cupy.empty(6 * MiB)   # after the free the next allocation succeeds
        del b
    assert bfc.get_stats().bytes_in_use == 0


def _drop_array_into_a_cycle(cupy) -> None:
    """Leave a 1 MiB array reachable only from a reference cycle: the collector frees it."""
    class Cycle:
        pass

    c = Cycle()
    c.me = c
    c.arr = cupy.empty(MiB)


def _wait_for_the_free_thread(routing) -> None:
    deadline = time.monotonic() + 10.0   # generous: the thread frees within microseconds
    while routing.live_buffers and time.monotonic() < deadline:
        time.sleep(0.001)


def test_frees_from_another_thread_and_from_the_collector(backend, cupy) -> None:
    bfc, vmem = _stack(backend, 32 * MiB)
    with cb.CupyAllocatorRouting({0: vmem}) as routing:
        arrays = [cupy.empty(MiB) for _ in range(8)]
        t = threading.Thread(target=arrays.clear, name="antman-test-free")
        t.start()
        t.join()
        assert routing.live_buffers == 0 and bfc.get_stats().bytes_in_use == 0

        gc.disable()
        try:
            _drop_array_into_a_cycle(cupy)
            gc.collect()
        finally:
            gc.enable()
        # freed inside the collector: queued for the free thread, never done in place
        _wait_for_the_free_thread(routing)
        assert routing.deferred_frees == 1
        assert routing.live_buffers == 0 and bfc.get_stats().bytes_in_use == 0


def test_queued_frees_wait_for_a_held_allocator_lock(backend, cupy) -> None:
    """A free inside the collector while this thread holds the BFC lock must not deadlock."""
    bfc, vmem = _stack(backend, 32 * MiB)
    with cb.CupyAllocatorRouting({0: vmem}) as routing:
        gc.disable()
        try:
            _drop_array_into_a_cycle(cupy)
            with bfc._lock:                   # as if the collector ran inside the BFC
                gc.collect()
                assert routing.live_buffers == 1, "freed under the held lock"
        finally:
            gc.enable()
        _wait_for_the_free_thread(routing)
        assert routing.live_buffers == 0 and bfc.get_stats().bytes_in_use == 0


def test_the_free_thread_is_named_and_joined(backend, cupy) -> None:
    bfc, vmem = _stack(backend, 8 * MiB)
    routing = cb.CupyAllocatorRouting({0: vmem}).install()
    names = [t.name for t in threading.enumerate() if t.name.startswith("antman-cupy-free-")]
    assert len(names) == 1
    routing.uninstall()
    assert not [t for t in threading.enumerate() if t.name == names[0]]


def test_zero_bytes_and_unknown_device(backend, cupy) -> None:
    bfc, vmem = _stack(backend, 8 * MiB)
    with cb.CupyAllocatorRouting({0: vmem}) as routing:
        z = cupy.empty(0)
        assert z.data.ptr == 0 and routing.live_buffers == 0
        with cupy.cuda.Device(1):
            with pytest.raises(RuntimeError, match="CUDA device 1"):
                cupy.empty(MiB)


def test_install_and_uninstall_restore_the_previous_allocator(backend, cupy) -> None:
    previous = cupy.cuda.get_allocator()
    bfc, vmem = _stack(backend, 8 * MiB)
    routing = cb.CupyAllocatorRouting({0: vmem}).install()
    assert cupy.cuda.get_allocator() == routing.malloc
    assert ("pool_free_all_blocks", 0, 0) in cupy._events
    kept = cupy.empty(MiB)
    routing.uninstall()
    assert cupy.cuda.get_allocator() is previous
    del kept                               # a buffer outliving the routing still goes home
    assert bfc.get_stats().bytes_in_use == 0


def test_as_cupy_array_requires_room(cupy, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError):
        cb.as_cupy_array(1 << 32, (4, 4), "float32", device_id=0, nbytes=32)


# --- the co-tenant fixture's protocol, against the stand-in ------------------------------------

FAKE_CUPY_MODULE = """
import sys
from meta_tests.fake_cupy import make_fake_cupy
_fake = make_fake_cupy(num_gpus=1, gpu_bytes=256 << 20)
sys.modules["cupy"] = _fake
sys.modules["cupy.cuda"] = _fake.cuda
"""


@pytest.fixture
def fake_cupy_path(tmp_path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "cupy.py").write_text(FAKE_CUPY_MODULE)
    from conformance import spec
    monkeypatch.setenv("PYTHONPATH", python_path(tmp_path, spec.ROOT))
    return tmp_path


def test_cotenant_takes_leaves_and_gives_back(fake_cupy_path) -> None:
    from fixtures.cotenant import CoTenant
    with CoTenant(timeout_s=60) as tenant:
        assert tenant.device_total == 256 * MiB
        hold = tenant.take(100 * MiB + 12345)
        assert hold.held == 100 * MiB and hold.free == 156 * MiB
        hold = tenant.leave(20 * MiB)
        assert 20 * MiB <= hold.free < 22 * MiB and hold.held == 256 * MiB - hold.free
        assert tenant.release() == 256 * MiB and tenant.held == 0
        pid = tenant.pid
    assert tenant.pid is None and pid is not None


def test_cotenant_reports_a_child_that_cannot_start(tmp_path, monkeypatch) -> None:
    from fixtures.cotenant import CoTenant, CoTenantError
    (tmp_path / "cupy.py").write_text("raise ImportError('no GPU here')\n")
    monkeypatch.setenv("PYTHONPATH", python_path(tmp_path))
    tenant = CoTenant(timeout_s=60)
    with pytest.raises(CoTenantError, match="no GPU here"):
        tenant.start()
    tenant.close()


def test_attach_routes_each_gpu_and_detach_gives_the_memory_back(backend, cupy) -> None:
    from reference_runtime.device import create_devices
    previous = cupy.cuda.get_allocator()
    mgr = create_devices(backend=backend, clock=None, num_gpus=2,
                         gpu_memory_bytes=32 * MiB, allow_growth=True)
    try:
        routing = backend.attach(mgr)
        assert backend.attach(mgr) is routing
        gpu1 = mgr.lookup_device("GPU:1")
        assert "pci bus id: 0000:3c:00.0" in gpu1.attributes.physical_device_desc
        with cupy.cuda.Device(1):
            a = cupy.empty(4 * MiB)
        assert gpu1.get_allocator().device_allocator.get_stats().bytes_in_use >= 4 * MiB
        assert any(d == 1 for d, _ in cupy._device_live.values()), "no region on GPU 1"
        del a
    finally:
        mgr.close()
        backend.detach(mgr)
    assert cupy.cuda.get_allocator() is previous
    assert not cupy._device_live and not cupy._host_live, "regions left with the driver"


def test_routings_uninstalled_in_any_order_leave_cupy_consistent(backend, cupy) -> None:
    original = cupy.cuda.get_allocator()
    _, vmem_a = _stack(backend, 8 * MiB)
    _, vmem_b = _stack(backend, 8 * MiB)
    a = cb.CupyAllocatorRouting({0: vmem_a}).install()
    b = cb.CupyAllocatorRouting({0: vmem_b}).install()
    assert cupy.cuda.get_allocator() == b.malloc
    a.uninstall()                         # not the serving one: b keeps serving
    assert cupy.cuda.get_allocator() == b.malloc
    b.uninstall()
    assert cupy.cuda.get_allocator() is original


class _Nvml:
    """What the co-tenant fixture reads of NVML: free memory and the compute processes."""

    def __init__(self, free: int, procs: dict[int, int | None]) -> None:
        self.free, self.procs = free, procs

    def memory(self, device):
        import types
        return types.SimpleNamespace(free=self.free)

    def processes(self, device):
        return dict(self.procs)


def test_a_cotenant_needs_room_for_its_cuda_context_and_says_who_holds_the_gpu() -> None:
    from fixtures.cotenant import CONTEXT_HEADROOM, CoTenantError, check_headroom
    assert check_headroom(_Nvml(CONTEXT_HEADROOM, {}), None) == CONTEXT_HEADROOM
    with pytest.raises(CoTenantError, match=r"NVML shows 100 MiB free.*pid 7: 79000 MiB"):
        check_headroom(_Nvml(100 * MiB, {7: 79000 * MiB}), "3b:00.0")


def test_a_stopped_cotenant_is_waited_for_until_nvml_no_longer_lists_it() -> None:
    from fixtures.cotenant import CoTenantError, wait_released
    nvml = _Nvml(0, {7: MiB, 8: MiB})
    timer = threading.Timer(0.3, lambda: nvml.procs.pop(7))
    timer.start()
    try:
        wait_released(nvml, [7], None, timeout_s=20)
    finally:
        timer.join()
    assert 7 not in nvml.procs
    start = time.monotonic()
    with pytest.raises(CoTenantError, match=r"still lists stopped co-tenant\(s\) \[8\]"):
        wait_released(nvml, [8], None, timeout_s=0.5)
    assert time.monotonic() - start < 5
