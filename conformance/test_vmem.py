"""VMEM clauses: AntMan's GPUVMemAllocator, device first with a pinned-host fallback."""

from __future__ import annotations

import logging
import threading

import pytest

from conformance.checks import names_identifier
from conformance.control_helpers import runtime_records
from conformance.preconditions import precondition
from fixtures.env_toggles import BAD_BOOL_VALUES, BAD_INT64_VALUES
from fixtures.virtual_clock import VirtualClock

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
T_10S = 10_000_000

pytestmark = pytest.mark.capability("bfc", "vmem")


class Stack:
    """A device BFC (no growth) and a VMem allocator over it, built through the factory."""

    def __init__(self, rt, *, device_limit=MiB, host_capacity=GiB, physical=0,
                 device_clock=None, host_clock=None, timeout_us=0, tf_gpu_id=0):
        self.rt = rt
        self.dev_sim = rt.SimulatedDeviceMemory(device_limit)
        self.device_clock = device_clock or VirtualClock(auto_advance=True, clause="BFC-12")
        self.host_clock = host_clock or VirtualClock(auto_advance=True, clause="BFC-12")
        self.device = rt.BFCAllocator(self.dev_sim, device_limit, False, f"GPU_{tf_gpu_id}_bfc",
                                      clock=self.device_clock, retry_timeout_us=T_10S)
        self.host_sim = rt.SimulatedHostMemory(host_capacity)
        self.vmem = rt.maybe_create_gpu_vmem_allocator(
            self.device, host_sub_allocator=self.host_sim, tf_gpu_id=tf_gpu_id,
            physical_total_memory=physical, clock=self.host_clock, retry_timeout_us=timeout_us)

    @property
    def host(self):
        return self.vmem.host_allocator

    # What a test of another clause relies on is checked with the clause that states it, so
    # that a broken fallback, host limit or routing is blamed on itself (SPEC.md section 7).
    def require_host_limit(self, mib: int) -> None:
        """The host limit is TF_CUDA_HOST_MEM_LIMIT_IN_MB = ``mib`` (VMEM-2)."""
        got = self.host.memory_map().memory_limit
        assert got == mib * MiB, (f"host limit {got} with TF_CUDA_HOST_MEM_LIMIT_IN_MB={mib}, "
                                  f"expected {mib * MiB} [VMEM-2]")

    def fallback(self, num_bytes: int, attributes=None) -> int:
        """An allocation the full device cannot hold, served by the host (VMEM-4, or VMEM-5
        with attributes)."""
        p = (self.vmem.allocate_raw(256, num_bytes) if attributes is None
             else self.vmem.allocate_raw(256, num_bytes, attributes))
        assert p is not None and in_region(self.host_sim, p), (
            f"allocate_raw(256, {num_bytes}) with the device full returned {p}, expected host "
            f"memory [{'VMEM-4' if attributes is None else 'VMEM-5'}]")
        return p

    def free(self, ptr: int) -> None:
        """A free through the VMem allocator of one of its own allocations (VMEM-7)."""
        try:
            self.vmem.deallocate_raw(ptr)
        except self.rt.InvalidPointerError as exc:
            raise AssertionError(f"vmem.deallocate_raw({ptr:#x}) of its own allocation raised "
                                 f"{exc!r}: a free goes to the allocator that owns the pointer "
                                 f"[VMEM-7]") from exc

    def fill_device(self) -> int:
        p = self.vmem.allocate_raw(256, self.device.memory_map().memory_limit)
        assert p is not None and in_region(self.dev_sim, p), (
            f"filling the device gave {p} [VMEM-3]")
        return p


def in_region(sim, ptr: int) -> bool:
    return any(base <= ptr < base + size for base, size in sim.live_regions.items())


# --- VMEM-1 ------------------------------------------------------------------------------

@pytest.mark.clause("VMEM-1")
@pytest.mark.parametrize("value", ["false", "FALSE", "0", "False"])
def test_vmem_disabled_returns_the_gpu_allocator(rt, tf_env, value):
    tf_env.set("TF_GPU_VMEM", value)
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc")
    host_sim = rt.SimulatedHostMemory(GiB)
    got = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=host_sim)
    assert got is gpu, (f"maybe_create_gpu_vmem_allocator with TF_GPU_VMEM={value!r} returned "
                        f"{got!r}, expected the GPU allocator itself [VMEM-1]")
    assert got.allocate_raw(256, 2 * MiB, rt.AllocationAttributes(True)) is None, "[VMEM-1]"
    assert host_sim.alloc_calls == [], "[VMEM-1]"


@pytest.mark.clause("VMEM-1", "ENV-1")
@pytest.mark.parametrize("value", [None, "true", "1", "TRUE", *BAD_BOOL_VALUES[:5]])
def test_vmem_enabled_builds_the_wrapper(rt, tf_env, value):
    if value is not None:
        tf_env.set("TF_GPU_VMEM", value)
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_3_bfc")
    host_sim = rt.SimulatedHostMemory(GiB)
    vmem = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=host_sim, tf_gpu_id=3)
    assert isinstance(vmem, rt.GPUVMemAllocator), f"TF_GPU_VMEM={value!r}: got {vmem!r} [VMEM-1]"
    assert vmem.name == "GPUVMem_3_bfc", f"name {vmem.name!r} [VMEM-1]"
    assert vmem.device_allocator is gpu, "[VMEM-1]"
    host = vmem.host_allocator
    assert isinstance(host, rt.BFCAllocator) and host.name == "GPUHost_3_bfc", (
        f"host allocator {host!r} [VMEM-1]")
    mm = host.memory_map()
    assert (mm.memory_limit, mm.next_region_size, mm.regions) == (65536 * MiB, MiB, ()), (
        f"host allocator {mm}: expected limit 64 GiB, first region 1 MiB (growth) [VMEM-1]")
    assert host_sim.alloc_calls == [], "building the VMem allocator allocated host memory [VMEM-1]"


@pytest.mark.clause("VMEM-1", "VMEM-6")
def test_factory_and_constructor_defaults(rt, tf_env, caplog):
    """tf_gpu_id=0 and physical_total_memory=0, when not given."""
    caplog.set_level(logging.WARNING)
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc")
    vmem = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=rt.SimulatedHostMemory(0))
    got = (vmem.name, vmem.host_allocator.name, vmem.memory_planned)
    assert got == ("GPUVMem_0_bfc", "GPUHost_0_bfc", 0), (
        f"maybe_create_gpu_vmem_allocator without tf_gpu_id or physical_total_memory: "
        f"(name, host name, memory_planned) = {got}, expected ('GPUVMem_0_bfc', "
        f"'GPUHost_0_bfc', 0) [VMEM-1]")
    direct = rt.GPUVMemAllocator(gpu, vmem.host_allocator)
    assert (direct.name, direct.memory_planned) == ("GPUVMem_0_bfc", 0), (
        f"GPUVMemAllocator(device, host): ({direct.name!r}, {direct.memory_planned}), "
        f"expected ('GPUVMem_0_bfc', 0) [VMEM-6]")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert not errors, (f"GPUVMemAllocator(device, host) logged {errors}: the default "
                        f"physical_total_memory is 0, not a negative value [VMEM-6]")


@pytest.mark.clause("BFC-12", "VMEM-4")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_factory_host_allocator_retries_10_s_by_default(rt, tf_env):
    """The factory's host BFC keeps BFC-12's default retry timeout of 10 s."""
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc")
    clock = VirtualClock(auto_advance=True, clause="BFC-12")
    host = rt.SimulatedHostMemory(0)
    vmem = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=host, clock=clock)
    assert vmem.allocate_raw(256, 2 * MiB) is None, \
        "a fallback without host memory succeeded [VMEM-4]"
    assert host.alloc_calls, \
        "a request the device cannot meet never reached the host allocator [VMEM-4]"
    waits = [r.duration_us for r in clock.records]
    assert waits == [T_10S], f"the host allocator's retry waited {waits}, expected [{T_10S}] " \
                             f"(retry_timeout_us defaults to 10 s) [BFC-12]"


@pytest.mark.clause("VMEM-1")
def test_factory_without_a_clock_retries_on_the_real_clock(rt, tf_env):
    """Without ``clock`` the factory's host allocator keeps the real clock (API-4's default):
    a fallback the host cannot meet retries for its 1 ms on that clock and gives None, as
    with a clock given, rather than failing on a clock that is not one."""
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc")
    host = rt.SimulatedHostMemory(0)
    vmem = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=host,
                                              retry_timeout_us=1000)
    try:
        # three arguments: the fallback of either overload retries (VMEM-4 is the other's)
        got = vmem.allocate_raw(256, 2 * MiB, rt.AllocationAttributes())
    except Exception as exc:                    # noqa: BLE001 - any error is the failure
        pytest.fail(f"maybe_create_gpu_vmem_allocator without a clock: a fallback the host "
                    f"cannot meet raised {exc!r}, expected None after a 1 ms retry on the "
                    f"real clock [VMEM-1]")
    assert got is None, f"a fallback without host memory returned {got!r} [VMEM-1]"
    assert host.alloc_calls, \
        "a request the device cannot meet never reached the host allocator [VMEM-1]"


@pytest.mark.clause("VMEM-1")
def test_host_allocator_has_no_garbage_collection(rt, tf_env):
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "4")
    s = Stack(rt)
    s.require_host_limit(4)
    s.fill_device()
    a = s.fallback(MiB)                        # host region 1 MiB, next 2 MiB
    b = s.fallback(2 * MiB)                    # host region 2 MiB; pool 3 MiB
    s.free(a)                                  # 1 MiB region fully free
    # with GC, 2 MiB <= 4 - 3 + 1 would release it; the host BFC has GC off
    # two-argument: no planned check
    assert s.vmem.allocate_raw(256, 2 * MiB) is None, "[VMEM-1]"
    assert s.host_sim.free_calls == [], f"host GC released {s.host_sim.free_calls} [VMEM-1]"
    assert b is not None, "[VMEM-1]"


# --- VMEM-2 ------------------------------------------------------------------------------

def host_limit(rt) -> int:
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc")
    vmem = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=rt.SimulatedHostMemory(1))
    return vmem.host_allocator.memory_map().memory_limit


@pytest.mark.clause("VMEM-2", "ENV-2")
@pytest.mark.parametrize("value,mb", [(None, 65536), ("100", 100), ("0", 0), (" 7 ", 7),
                                      ("8796093022207", 2**43 - 1)])
def test_host_limit_from_env(rt, tf_env, caplog, value, mb):
    if value is not None:
        tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", value)
    got = host_limit(rt)
    assert got == mb * 2**20, (f"TF_CUDA_HOST_MEM_LIMIT_IN_MB={value!r}: host limit {got}, "
                               f"expected {mb} × 2^20 [VMEM-2]")
    assert not runtime_records(caplog, rt, logging.ERROR), "[ENV-2]"


@pytest.mark.clause("VMEM-2", "ENV-2")
@pytest.mark.parametrize("value", ["-5", "-1", "8796093022208", *BAD_INT64_VALUES])
def test_host_limit_bad_values_use_default(rt, tf_env, caplog, value):
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", value)
    got = host_limit(rt)
    assert got == 65536 * 2**20, (f"TF_CUDA_HOST_MEM_LIMIT_IN_MB={value!r}: host limit {got}, "
                                  f"expected the 64 GiB default [VMEM-2]")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 1, (f"TF_CUDA_HOST_MEM_LIMIT_IN_MB={value!r}: {len(errors)} error "
                              f"records, expected 1 [VMEM-2]")


# --- VMEM-3 ------------------------------------------------------------------------------

@pytest.mark.clause("VMEM-3")
def test_device_first(rt, tf_env):
    s = Stack(rt)
    p = s.vmem.allocate_raw(256, 1000)
    assert p is not None and in_region(s.dev_sim, p), f"allocate_raw(256, 1000) = {p} [VMEM-3]"
    assert s.host_sim.alloc_calls == [], "a device success touched the host [VMEM-3]"
    assert s.device.allocation_id(p) == 1, "[VMEM-3]"


@pytest.mark.clause("VMEM-3")
@pytest.mark.parametrize("attrs", [None, "default"])
def test_device_attempt_never_retries(rt, tf_env, attrs):
    s = Stack(rt, physical=GiB)
    s.fill_device()
    a = rt.AllocationAttributes() if attrs == "default" else None
    p = s.vmem.allocate_raw(256, 4096, a)
    assert s.device_clock.records == [], (
        f"allocate_raw(256, 4096, {a}) on a full device waited on the device clock "
        f"{s.device_clock.records}: the device attempt must not retry [VMEM-3]")
    assert p is not None and in_region(s.host_sim, p), (
        f"fallback returned {p} [{'VMEM-4' if a is None else 'VMEM-5'}]")


@pytest.mark.clause("VMEM-3", "BFC-1")
@pytest.mark.parametrize("bad", [-1, 1.5, "1"])
def test_bad_sizes_raise_before_the_host(rt, tf_env, bad):
    s = Stack(rt)
    with pytest.raises(ValueError):
        s.vmem.allocate_raw(256, bad)
    assert s.host_sim.alloc_calls == [], "[VMEM-3]"


@pytest.mark.clause("VMEM-3", "BFC-1")
def test_zero_and_huge_sizes(rt, tf_env):
    s = Stack(rt, host_clock=VirtualClock(clause="BFC-12"), timeout_us=T_10S)
    assert s.vmem.allocate_raw(256, 0) is None, "allocate_raw(256, 0) [VMEM-3]"
    assert s.vmem.allocate_raw(256, 2**64) is None, "allocate_raw(256, 2**64) [VMEM-3]"
    assert s.host_sim.alloc_calls == [] and s.host_clock.records == [], "[VMEM-3]"


# --- VMEM-4 / VMEM-5 / VMEM-6 ------------------------------------------------------------

@pytest.mark.clause("VMEM-4")
def test_two_argument_fallback_has_no_planned_check(rt, tf_env):
    s = Stack(rt, physical=0)           # memory_planned 0
    s.fill_device()                     # peak 1 MiB > 0
    p = s.vmem.allocate_raw(256, 4096)
    assert p is not None and in_region(s.host_sim, p), (
        f"allocate_raw(256, 4096) with peak > memory_planned = 0 returned {p}: the two-"
        f"argument call has no planned check [VMEM-4]")
    assert s.host.allocation_id(p) == 1 and s.host.requested_size(p) == 4096, "[VMEM-4]"


@pytest.mark.clause("VMEM-4", "VMEM-10")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_two_argument_fallback_retries_on_the_host(rt, tf_env):
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "1")
    s = Stack(rt, timeout_us=T_10S)
    s.require_host_limit(1)
    s.fill_device()
    assert s.vmem.allocate_raw(256, 2 * MiB) is None, "[VMEM-10]"
    assert [r.duration_us for r in s.host_clock.records] == [T_10S], (
        f"host waits {s.host_clock.records}: the two-argument fallback uses the host "
        f"allocator's retry [VMEM-4]")
    assert s.host_sim.alloc_calls == [], "[VMEM-10]"
    assert s.host.memory_map().total_region_allocated_bytes == 0, "[VMEM-10]"


def _planned_stack(rt, tf_env):
    tf_env.set("TF_RO_PLANNED_GPU", "100")
    s = Stack(rt, physical=5 * MiB)
    assert s.vmem.memory_planned == 5 * MiB, "[VMEM-6]"
    s.fill_device()                                # device peak 1 MiB
    return s


@pytest.mark.clause("VMEM-5", "VMEM-8")
def test_three_argument_fallback_planned_check(rt, tf_env, caplog):
    s = _planned_stack(rt, tf_env)
    caplog.set_level(logging.WARNING)
    attrs = rt.AllocationAttributes()
    a = s.vmem.allocate_raw(256, 2 * MiB, attrs)  # merged peak 1 MiB → host region 2 MiB
    b = s.vmem.allocate_raw(256, 2 * MiB, attrs)  # merged 3 MiB → host region 2 MiB
    assert s.vmem.get_stats().peak_bytes_in_use == 5 * MiB, "[VMEM-8]"
    c = s.vmem.allocate_raw(256, 256, attrs)      # merged 5 MiB == planned: not greater
    assert None not in (a, b, c), f"fallbacks up to the planned memory: {a, b, c} [VMEM-5]"
    peak = s.vmem.get_stats().peak_bytes_in_use
    assert peak == 5 * MiB + 256, f"merged peak {peak}, expected {5 * MiB + 256} [VMEM-8]"
    calls = list(s.host_sim.alloc_calls)
    assert s.vmem.allocate_raw(256, 256, attrs) is None, (
        f"allocate_raw(256, 256, attrs) with merged peak {peak} > memory_planned {5 * MiB} "
        f"must be refused [VMEM-5]")
    assert s.host_sim.alloc_calls == calls, "[VMEM-5]"
    assert s.host.get_stats().num_allocs == 3, "the refused request reached the host [VMEM-5]"
    refused = runtime_records(caplog, rt, logging.WARNING, containing=s.vmem.name)
    assert refused, (f"the refused fallback logged no warning naming {s.vmem.name!r} "
                     f"(records: {caplog.records}) [VMEM-5]")
    d = s.vmem.allocate_raw(256, 256)             # the two-argument call is not checked
    assert d is not None and in_region(s.host_sim, d), f"2-arg after refusal: {d} [VMEM-4]"


@pytest.mark.clause("VMEM-5", "VMEM-10")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_three_argument_fallback_forwards_attributes(rt, tf_env):
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "1")
    s = Stack(rt, physical=GiB, timeout_us=T_10S)
    s.require_host_limit(1)
    s.fill_device()
    assert s.vmem.allocate_raw(256, 2 * MiB, rt.AllocationAttributes(True)) is None, "[VMEM-10]"
    assert s.host_clock.records == [], (
        f"no_retry_on_failure=True was not forwarded to the host: waits "
        f"{s.host_clock.records} [VMEM-5]")
    assert s.vmem.allocate_raw(256, 2 * MiB, rt.AllocationAttributes(False)) is None, "[VMEM-10]"
    assert [r.duration_us for r in s.host_clock.records] == [T_10S], (
        f"host waits {s.host_clock.records}, expected one {T_10S} µs retry [VMEM-5]")


@pytest.mark.clause("VMEM-6")
@pytest.mark.parametrize("physical,percent,env", [
    (1000, 100, None), (1001, 33, "33"), (8 * GiB, 90, "90"), (1000, -10, "-10"),
    (0, 100, None), (3, 50, "50"), (10**12 + 7, 73, "73"),
])
def test_memory_planned(rt, tf_env, physical, percent, env):
    if env is not None:
        tf_env.set("TF_RO_PLANNED_GPU", env)
    expected = int(physical * percent / 100.0)    # int64(total * P / 100.0), C truncation
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    host = rt.BFCAllocator(rt.SimulatedHostMemory(MiB), MiB, True, "GPUHost_0_bfc")
    vmem = rt.GPUVMemAllocator(device, host, tf_gpu_id=0, physical_total_memory=physical)
    assert vmem.memory_planned == expected, (
        f"GPUVMemAllocator(physical_total_memory={physical}) with TF_RO_PLANNED_GPU={env!r}: "
        f"memory_planned {vmem.memory_planned}, expected {expected} [VMEM-6]")


@pytest.mark.clause("VMEM-6")
@pytest.mark.parametrize("physical,planned,errors", [(-1, 0, 1), (-GiB, 0, 1), (0, 0, 0),
                                                     (1, 1, 0)])
def test_negative_physical_memory_counts_as_zero(rt, tf_env, caplog, physical, planned, errors):
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    host = rt.BFCAllocator(rt.SimulatedHostMemory(MiB), MiB, True, "GPUHost_0_bfc")
    vmem = rt.GPUVMemAllocator(device, host, physical_total_memory=physical)
    assert vmem.memory_planned == planned, (
        f"GPUVMemAllocator(physical_total_memory={physical}): memory_planned "
        f"{vmem.memory_planned}, expected {planned} [VMEM-6]")
    logged = runtime_records(caplog, rt, logging.ERROR)
    assert len(logged) == errors, (f"physical_total_memory={physical} logged {len(logged)} "
                                   f"errors, expected {errors} [VMEM-6]")


@pytest.mark.clause("VMEM-6", "ENV-2")
@pytest.mark.parametrize("value", ["1e3", "", "abc", "99999999999999999999"])
def test_memory_planned_bad_env(rt, tf_env, caplog, value):
    tf_env.set("TF_RO_PLANNED_GPU", value)
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    host = rt.BFCAllocator(rt.SimulatedHostMemory(MiB), MiB, True, "GPUHost_0_bfc")
    vmem = rt.GPUVMemAllocator(device, host, physical_total_memory=4000)
    assert vmem.memory_planned == 4000, f"TF_RO_PLANNED_GPU={value!r} [VMEM-6]"
    assert len(runtime_records(caplog, rt, logging.ERROR)) == 1, "[ENV-2]"


@pytest.mark.clause("VMEM-5", "VMEM-6")
def test_negative_percent_refuses_every_three_argument_fallback(rt, tf_env):
    tf_env.set("TF_RO_PLANNED_GPU", "-1")
    s = Stack(rt, physical=GiB)
    s.fill_device()
    assert s.vmem.allocate_raw(256, 256, rt.AllocationAttributes()) is None, "[VMEM-6]"
    assert s.host_sim.alloc_calls == [], "[VMEM-6]"


# --- VMEM-7 ------------------------------------------------------------------------------

@pytest.mark.clause("VMEM-7")
def test_frees_and_queries_route_by_ownership(rt, tf_env):
    s = Stack(rt)
    d = s.vmem.allocate_raw(256, 1000)
    assert in_region(s.dev_sim, d), f"allocate_raw(256, 1000) gave {d} [VMEM-3]"
    h = s.fallback(MiB)                      # device has 1 MiB - 1024 left → host
    assert (s.vmem.requested_size(d), s.vmem.allocated_size(d), s.vmem.allocation_id(d)) == (
        1000, 1024, 1), "device pointer queries [VMEM-7]"
    assert (s.vmem.requested_size(h), s.vmem.allocated_size(h), s.vmem.allocation_id(h)) == (
        MiB, MiB, 1), "host pointer queries [VMEM-7]"
    assert s.vmem.tracks_allocation_sizes() is True, "[VMEM-7]"
    s.vmem.deallocate_raw(h)
    assert (s.device.get_stats().bytes_in_use, s.host.get_stats().bytes_in_use) == (1024, 0), (
        "deallocate_raw(host pointer) did not free on the host [VMEM-7]")
    s.vmem.deallocate_raw(d)
    assert s.device.get_stats().bytes_in_use == 0, "deallocate_raw(device pointer) [VMEM-7]"
    s.vmem.deallocate_raw(None)


@pytest.mark.clause("VMEM-7")
def test_unknown_pointers_raise_clear_errors(rt, tf_env):
    s = Stack(rt)
    d = s.vmem.allocate_raw(256, 256)
    h = s.fallback(MiB)
    s.free(d)
    s.free(h)
    for ptr in (0xDEAD00, d, h, d + 256):
        for name in ("deallocate_raw", "requested_size", "allocated_size", "allocation_id"):
            if name != "deallocate_raw" and ptr in (d, h):
                continue   # a freed chunk may still answer queries (BFC-15)
            with pytest.raises(rt.InvalidPointerError) as info:
                getattr(s.vmem, name)(ptr)
            assert names_identifier(info.value, "GPUVMem_0_bfc"), (
                f"{name}({ptr:#x}) error {info.value!r} does not name the VMem allocator "
                f"[VMEM-7]")
    assert s.device.get_stats().bytes_in_use == 0 and s.host.get_stats().bytes_in_use == 0, (
        "[VMEM-7]")


class TerseHostAllocator:
    """A host allocator that owns no pointer and says so without naming it: whatever names
    the pointer in a VMem allocator's error must come from the VMem allocator itself."""

    name = "terse_host"

    def __init__(self, rt) -> None:
        self.rt = rt

    def allocate_raw(self, alignment, num_bytes, attributes=None):
        return None

    def _unknown(self, ptr):
        raise self.rt.InvalidPointerError("unknown pointer")

    deallocate_raw = requested_size = allocated_size = allocation_id = _unknown

    def tracks_allocation_sizes(self):
        return True

    def get_stats(self):
        return None

    def clear_stats(self):
        pass


@pytest.mark.clause("VMEM-7")
def test_unknown_pointer_errors_name_the_pointer_themselves(rt, tf_env):
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc",
                             retry_timeout_us=0)
    vmem = rt.GPUVMemAllocator(device, TerseHostAllocator(rt))
    ptr = 0xDEAD00
    for name in ("deallocate_raw", "requested_size", "allocated_size", "allocation_id"):
        errors: list[str] = []
        try:
            getattr(vmem, name)(ptr)
        except rt.InvalidPointerError as exc:
            errors.append(str(exc))
        assert errors, f"vmem.{name}({ptr:#x}) of a pointer nobody owns did not raise [VMEM-7]"
        assert f"{ptr:#x}" in errors[0] or str(ptr) in errors[0], (
            f"vmem.{name}({ptr:#x}) raised {errors[0]!r}, which does not name the pointer "
            f"(the host allocator's own error does not either) [VMEM-7]")


@pytest.mark.clause("VMEM-7")
def test_deallocate_none_asks_neither_allocator(rt, tf_env):
    """deallocate_raw(None) does nothing: it is not passed to a host allocator, which here
    answers every pointer it is given with InvalidPointerError."""
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc",
                             retry_timeout_us=0)
    vmem = rt.GPUVMemAllocator(device, TerseHostAllocator(rt))
    try:
        vmem.deallocate_raw(None)
    except rt.InvalidPointerError as exc:
        pytest.fail(f"vmem.deallocate_raw(None) raised {exc!r}: it must do nothing [VMEM-7]")


@pytest.mark.clause("VMEM-7")
def test_address_reused_during_a_free_is_routed_to_the_device(rt, tf_env, monkeypatch):
    """A device pointer is forgotten before the device allocator may hand its address out
    again: an allocation made by another thread the moment the device allocator freed the
    address (a hook on the device allocator's deallocate_raw runs it, before the free through
    the VMem allocator returns) gets that address, and it stays a device pointer."""
    from conformance.control_helpers import joined, run_in_thread
    s = Stack(rt)
    p = s.vmem.allocate_raw(256, 4096)
    assert p is not None and in_region(s.dev_sim, p), "[VMEM-3]"
    device_free = s.device.deallocate_raw
    reused: dict = {}

    def free_then_reallocate(ptr):
        device_free(ptr)
        if not reused:
            t, out = run_in_thread(lambda: s.vmem.allocate_raw(256, 4096), name="realloc")
            reused["joined"] = joined(t)
            reused.update(out)

    monkeypatch.setattr(s.device, "deallocate_raw", free_then_reallocate)
    s.free(p)
    monkeypatch.undo()
    if not reused:             # the free did not go through the hooked method
        in_use = s.device.get_stats().bytes_in_use
        assert in_use == 0, (f"vmem.deallocate_raw({p:#x}) of a device pointer left {in_use} "
                             f"bytes in use on the device allocator [VMEM-7]")
        pytest.skip("the VMem allocator freed the device pointer without calling the device "
                    "allocator's deallocate_raw that this test hooks: no allocation can be "
                    "forced between the free and the forgetting (compiled allocators)")
    q = reused.get("result")
    assert reused.get("joined") and q is not None, f"the concurrent allocation: {reused} [VMEM-3]"
    assert q == p, f"the device allocator gave {q:#x}, not the address just freed {p:#x} [BFC-3]"
    try:
        size = s.vmem.requested_size(q)
        s.vmem.deallocate_raw(q)
    except rt.InvalidPointerError as exc:
        raise AssertionError(
            f"{q:#x}, allocated on the device by another thread while the free of the same "
            f"address was in progress, is routed to the host allocator ({exc}): the freeing "
            f"thread forgot the address after the device allocator could hand it out again "
            f"[VMEM-7]") from None
    assert size == 4096 and s.device.get_stats().bytes_in_use == 0, (
        f"requested_size {size}, device bytes in use {s.device.get_stats().bytes_in_use} "
        f"after the free: the re-allocated address was not routed to the device [VMEM-7]")


# --- VMEM-8 ------------------------------------------------------------------------------

@pytest.mark.clause("VMEM-8")
def test_stats_merge_only_the_peak(rt, tf_env):
    s = Stack(rt)
    d = s.vmem.allocate_raw(256, 3000)        # device chunk 3072
    h = s.fallback(MiB)                       # host chunk 1 MiB (the host's first region)
    s.free(d)
    dev = s.device.get_stats()
    got = s.vmem.get_stats()
    assert (got.num_allocs, got.bytes_in_use, got.largest_alloc_size, got.bytes_limit) == (
        1, 0, 3072, MiB), f"vmem.get_stats() {got}: expected the device's values [VMEM-8]"
    assert got.peak_bytes_in_use == 3072 + MiB, (
        f"merged peak {got.peak_bytes_in_use}, expected device 3072 + host {MiB} [VMEM-8]")
    assert dev.peak_bytes_in_use == 3072, "[VMEM-8]"
    s.vmem.clear_stats()
    dev, host = s.device.get_stats(), s.host.get_stats()
    assert (dev.num_allocs, dev.peak_bytes_in_use, dev.largest_alloc_size) == (0, 0, 0), "[VMEM-8]"
    assert (host.num_allocs, host.peak_bytes_in_use, host.largest_alloc_size) == (0, MiB, 0), (
        f"host stats after vmem.clear_stats(): {host} [VMEM-8]")
    assert s.vmem.get_stats().peak_bytes_in_use == MiB and h is not None, "[VMEM-8]"


class SharedStatsAllocator:
    """A minimal device or host allocator whose get_stats() returns one shared object (or
    None); it serves nothing, so a VMem allocator over it only forwards stats."""

    def __init__(self, rt, stats) -> None:
        self.stats = stats
        self.name = "shared"

    def allocate_raw(self, alignment, num_bytes, attributes=None):
        return None

    def deallocate_raw(self, ptr):
        pass

    def tracks_allocation_sizes(self):
        return True

    def get_stats(self):
        return self.stats

    def clear_stats(self):
        pass


@pytest.mark.clause("VMEM-8")
def test_stats_are_a_new_copy_every_time(rt, tf_env):
    shared = rt.AllocatorStats(num_allocs=3, bytes_in_use=1000, peak_bytes_in_use=4000,
                               largest_alloc_size=2000, bytes_limit=8000)
    device = SharedStatsAllocator(rt, shared)
    host = rt.BFCAllocator(rt.SimulatedHostMemory(GiB), GiB, True, "GPUHost_0_bfc",
                           retry_timeout_us=0)
    h = host.allocate_raw(256, 512)
    vmem = rt.GPUVMemAllocator(device, host)
    first = vmem.get_stats()
    assert first is not shared and first.peak_bytes_in_use == 4000 + 512, (
        f"vmem.get_stats() = {first}, expected a copy with peak 4000 + 512 [VMEM-8]")
    assert (shared.peak_bytes_in_use, shared.num_allocs) == (4000, 3), (
        f"vmem.get_stats() changed the device's own stats object: {shared} [VMEM-8]")
    first.num_allocs = 99
    first.peak_bytes_in_use = 1
    second = vmem.get_stats()
    assert (second.num_allocs, second.peak_bytes_in_use, second.bytes_in_use,
            second.largest_alloc_size, second.bytes_limit) == (3, 4512, 1000, 2000, 8000), (
        f"after the caller changed the returned stats the next call gave {second} [VMEM-8]")
    host.deallocate_raw(h)


@pytest.mark.clause("VMEM-8")
def test_stats_without_host_or_device_stats(rt, tf_env):
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc",
                             retry_timeout_us=0)
    p = device.allocate_raw(256, 4096)
    vmem = rt.GPUVMemAllocator(device, SharedStatsAllocator(rt, None))
    got = vmem.get_stats()
    assert got is not None and got.peak_bytes_in_use == 4096, (
        f"a host allocator without stats counts as 0: got {got} [VMEM-8]")
    vmem_none = rt.GPUVMemAllocator(SharedStatsAllocator(rt, None), device)
    assert vmem_none.get_stats() is None, \
        "a device allocator without stats gave the VMem allocator stats [VMEM-8]"
    device.deallocate_raw(p)


class ServingAllocatorWithoutStats(SharedStatsAllocator):
    """A host allocator without stats that serves every request at one fixed address."""

    PTR = 1 << 20

    def __init__(self, rt) -> None:
        super().__init__(rt, None)
        self.calls = []

    def allocate_raw(self, alignment, num_bytes, attributes=None):
        self.calls.append(num_bytes)
        return self.PTR


@pytest.mark.clause("VMEM-5")
@pytest.mark.parametrize("device_stats", ["none", "peak 0"])
def test_three_argument_fallback_counts_an_allocator_without_stats_as_0(rt, tf_env,
                                                                         device_stats):
    """memory_planned is 0 (physical_total_memory 0) and the merged peak is 0: the host
    allocator has no stats, and the device allocator has none or a peak of 0; 0 is not
    greater than 0, so the three-argument fallback reaches the host."""
    tf_env.set("TF_RO_PLANNED_GPU", "100")
    stats = None if device_stats == "none" else rt.AllocatorStats()
    host = ServingAllocatorWithoutStats(rt)
    vmem = rt.GPUVMemAllocator(SharedStatsAllocator(rt, stats), host)
    assert vmem.memory_planned == 0, f"memory_planned {vmem.memory_planned} [VMEM-6]"
    got = vmem.allocate_raw(256, 4096, rt.AllocationAttributes())
    assert (got, host.calls) == (host.PTR, [4096]), (
        f"allocate_raw(256, 4096, attrs) with a merged peak of 0 (device stats "
        f"{device_stats}, host without stats) == memory_planned 0 returned {got!r} after "
        f"host calls {host.calls}, expected the host's {host.PTR:#x} [VMEM-5]")


@pytest.mark.clause("VMEM-5")
@pytest.mark.parametrize("device_stats", ["none", "peak 0"])
@pytest.mark.parametrize("above", [1, 0], ids=["peak-above-planned", "peak-at-planned"])
def test_a_device_without_stats_adds_0_to_the_host_peak(rt, tf_env, device_stats, above):
    """The host's peak alone (4096 bytes) decides the three-argument fallback when the device
    allocator has no stats: refused with memory_planned a byte below it, served at it."""
    tf_env.set("TF_RO_PLANNED_GPU", "100")
    stats = None if device_stats == "none" else rt.AllocatorStats()
    host = rt.BFCAllocator(rt.SimulatedHostMemory(MiB), MiB, True, "GPUHost_0_bfc",
                           retry_timeout_us=0)
    vmem = rt.GPUVMemAllocator(SharedStatsAllocator(rt, stats), host,
                               physical_total_memory=4096 - above)
    first = vmem.allocate_raw(256, 4096)        # two-argument: no planned check (VMEM-4)
    assert first is not None and host.get_stats().peak_bytes_in_use == 4096, (
        f"allocate_raw(256, 4096) through a device that serves nothing gave {first!r}, host "
        f"stats {host.get_stats()} [VMEM-4]")
    got = vmem.allocate_raw(256, 256, rt.AllocationAttributes())
    expected = "refused" if above else "served"
    assert ("refused" if got is None else "served") == expected, (
        f"allocate_raw(256, 256, attrs) with a device without stats ({device_stats}) and a "
        f"host peak of 4096 against memory_planned {4096 - above}: {got!r}, expected it "
        f"{expected} (the merged peak is the host's alone) [VMEM-5]")


@pytest.mark.clause("VMEM-5")
@pytest.mark.parametrize("above", [1, 0], ids=["peak-above-planned", "peak-at-planned"])
def test_a_host_without_stats_adds_0_to_the_device_peak(rt, tf_env, above):
    """The device's peak alone (a full device of 4096 bytes) decides the three-argument
    fallback when the host allocator has no stats: refused with memory_planned a byte below
    it, served at it."""
    tf_env.set("TF_RO_PLANNED_GPU", "100")
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), 4096, False, "GPU_0_bfc",
                             retry_timeout_us=0)
    host = ServingAllocatorWithoutStats(rt)
    vmem = rt.GPUVMemAllocator(device, host, physical_total_memory=4096 - above)
    first = vmem.allocate_raw(256, 4096)
    assert first is not None and host.calls == [] \
        and device.get_stats().peak_bytes_in_use == 4096, (
            f"allocate_raw(256, 4096) on a free device of 4096 bytes gave {first!r} (host calls "
            f"{host.calls}), device stats {device.get_stats()} [VMEM-3]")
    got = vmem.allocate_raw(256, 256, rt.AllocationAttributes())
    expected = ([], None) if above else ([256], host.PTR)
    assert (host.calls, got) == expected, (
        f"allocate_raw(256, 256, attrs) with the device full (peak 4096) and a host without "
        f"stats against memory_planned {4096 - above}: host calls {host.calls}, returned "
        f"{got!r}, expected {expected} (the merged peak is the device's alone) [VMEM-5]")


# --- VMEM-9 ------------------------------------------------------------------------------

@pytest.mark.clause("VMEM-9", "BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_no_stall_while_the_host_waits(rt, tf_env):
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "1")
    clock = VirtualClock(clause="BFC-12")
    s = Stack(rt, host_clock=clock, timeout_us=T_10S)
    s.require_host_limit(1)
    with precondition("BFC-4", "two 512 KiB chunks fill the 1 MiB device pool"):
        d1 = s.vmem.allocate_raw(256, 512 * KiB)
        d2 = s.vmem.allocate_raw(256, 512 * KiB)        # device full
        assert in_region(s.dev_sim, d1) and in_region(s.dev_sim, d2), \
            f"allocate_raw(256, 512 KiB) twice gave {d1}, {d2} [BFC-4]"
    h = s.fallback(MiB)                                 # host full (limit 1 MiB): VMEM-4
    result: list = []
    waiter = threading.Thread(target=lambda: result.append(s.vmem.allocate_raw(256, MiB)),
                              name="antman-test-host-waiter", daemon=True)
    waiter.start()
    done = threading.Event()
    steps: list = []

    def other_thread():
        try:
            s.free(d1)                                  # device free through the VMem
            steps.append(s.vmem.allocate_raw(256, 1000))    # device allocation through it
            steps.append(s.vmem.get_stats().bytes_in_use)
            steps.append(s.vmem.allocation_id(d2))
            s.free(h)                                   # host free: wakes the waiter
        except AssertionError as exc:
            steps.append(exc)
        done.set()

    try:
        clock.wait_for_waiters(1, clause="VMEM-9")
        other = threading.Thread(target=other_thread, name="antman-test-other", daemon=True)
        other.start()
        other.join(5)
        assert done.is_set(), ("frees/allocations through the VMem allocator blocked while a "
                               "host allocation waited [VMEM-9]")
        failed = [x for x in steps if isinstance(x, AssertionError)]
        if failed:
            raise failed[0]
        waiter.join(5)
        assert not waiter.is_alive(), "a host free did not wake the waiting fallback [VMEM-9]"
        assert result == [h], f"woken fallback returned {result}, expected {h:#x} [VMEM-9]"
        assert in_region(s.dev_sim, steps[0]) and steps[1:] == [512 * KiB + 1024, 2], "[VMEM-9]"
        assert clock.now_us() == 0, "the waiter needed the clock to advance [VMEM-9]"
    finally:
        clock.advance(2 * T_10S)
        waiter.join(5)


# --- VMEM-10 -----------------------------------------------------------------------------

@pytest.mark.clause("VMEM-10")
def test_host_limit_reached(rt, tf_env):
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "3")
    s = Stack(rt, physical=GiB, timeout_us=0)
    s.require_host_limit(3)
    s.fill_device()
    got = [s.fallback(MiB)]                 # a fallback within the limit (VMEM-4) ...
    with precondition("BFC-4", "1 MiB requests split the 2 MiB host region into 1 + 1"):
        got += [s.vmem.allocate_raw(256, MiB) for _ in range(2)]
        assert None not in got, f"three 1 MiB fallbacks in 3 MiB of host regions: {got} [BFC-4]"
    got += [s.vmem.allocate_raw(256, MiB) for _ in range(2)]
    # host regions 1 MiB, then 2 MiB (split into 1 + 1); the limit allows no third region
    assert [p is not None for p in got] == [True, True, True, False, False], (
        f"1 MiB fallbacks under a 3 MiB host limit: {got} [VMEM-10]")
    assert s.host_sim.alloc_calls == [MiB, 2 * MiB], (
        f"host regions {s.host_sim.alloc_calls} [VMEM-10]")
    assert s.host.memory_map().total_region_allocated_bytes <= 3 * MiB, "[VMEM-10]"
    assert s.vmem.allocate_raw(256, 4 * MiB, rt.AllocationAttributes(True)) is None, "[VMEM-10]"


# --- argument edges ------------------------------------------------------------------------

@pytest.mark.clause("VMEM-1")
@pytest.mark.parametrize("vmem_on", ["true", "false"])
@pytest.mark.parametrize("argument,bad", [
    ("tf_gpu_id", True), ("tf_gpu_id", 1.0), ("tf_gpu_id", "0"),
    ("tf_gpu_id", None), ("physical_total_memory", True), ("physical_total_memory", 1024.0),
    ("physical_total_memory", float("nan")), ("physical_total_memory", "1024"),
    ("physical_total_memory", None)])
def test_ids_and_sizes_must_be_integers(rt, tf_env, vmem_on, argument, bad):
    tf_env.set("TF_GPU_VMEM", vmem_on)
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc")
    host_sim = rt.SimulatedHostMemory(GiB)
    with pytest.raises(ValueError) as info:
        rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=host_sim, **{argument: bad})
    assert names_identifier(info.value, argument), (
        f"maybe_create_gpu_vmem_allocator({argument}={bad!r}) with TF_GPU_VMEM={vmem_on}: the "
        f"ValueError {info.value!r} does not name the argument [VMEM-1]")
    host = rt.BFCAllocator(host_sim, MiB, True, "GPUHost_0_bfc")
    with pytest.raises(ValueError) as info:
        rt.GPUVMemAllocator(gpu, host, **{argument: bad})
    assert names_identifier(info.value, argument), (
        f"GPUVMemAllocator({argument}={bad!r}): the ValueError {info.value!r} does not name "
        f"the argument [VMEM-1]")
    assert host_sim.alloc_calls == [], f"rejected, yet called the host {host_sim.alloc_calls} [VMEM-1]"
