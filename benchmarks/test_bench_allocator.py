"""Allocator hot paths: the BFC allocate+free pair, VMem host fallback, adjusting the limit.

Figures only; nothing here asserts a speed (the suite never times wall-clock behaviour).
The target for the BFC pair is a median of at most 2 µs on a 2-core CI machine. Run with
``python -m pytest benchmarks -p no:xdist --benchmark-only``.
"""

from __future__ import annotations

import types

import pytest

MIB = 1 << 20


def warm_bfc(rt: types.ModuleType, limit: int = 1 << 30):
    """A BFC whose single region already holds a mix of live and free chunks."""
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(limit), limit, False, "GPU_0_bfc",
                          retry_timeout_us=0)
    ptrs = [bfc.allocate_raw(256, size) for size in (1000, 5000, 70_000, 300, MIB) * 20]
    assert None not in ptrs
    for ptr in ptrs[::2]:
        bfc.deallocate_raw(ptr)
    return bfc


@pytest.mark.capability("bfc")
def test_bench_bfc_allocate_free_pair(rt: types.ModuleType, bench) -> None:
    """One 4 KiB allocate_raw + deallocate_raw on a warm pool (a free chunk fits)."""
    bfc = warm_bfc(rt)
    in_use = bfc.get_stats().bytes_in_use

    def pair() -> None:
        bfc.deallocate_raw(bfc.allocate_raw(256, 4096))

    bench(pair)
    assert bfc.get_stats().bytes_in_use == in_use, "a benchmarked pair leaked"


@pytest.mark.capability("bfc", "vmem")
def test_bench_vmem_host_fallback(rt: types.ModuleType, bench) -> None:
    """Device full (no retry there) → host BFC; allocate + free through GPUVMemAllocator."""
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MIB), MIB, False, "GPU_0_bfc",
                             retry_timeout_us=0)
    host = rt.BFCAllocator(rt.SimulatedHostMemory(64 * MIB), 64 * MIB, True,
                           "GPUHost_0_bfc", retry_timeout_us=0)
    vm = rt.GPUVMemAllocator(device, host)
    filler = vm.allocate_raw(256, MIB)
    assert filler is not None and device.get_stats().bytes_in_use == MIB
    vm.deallocate_raw(vm.allocate_raw(256, 4096))  # the host's first region
    host_allocs = host.get_stats().num_allocs

    def pair() -> None:
        vm.deallocate_raw(vm.allocate_raw(256, 4096))

    bench(pair)
    assert host.get_stats().num_allocs > host_allocs, "the benchmark never reached the host"
    assert device.get_stats().bytes_in_use == MIB


REGIONS = 256


@pytest.mark.capability("bfc", "adjustable")
def test_bench_adjust_memory_limit_fragmented(rt: types.ModuleType, bench) -> None:
    """Shrink a pool of 256 one-MiB regions, every other one fully free, to its used part."""
    adj = rt.GPUAdjustableAllocator()

    def fragmented_pool():
        bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(REGIONS * MIB), MIB, True,
                              "GPU_0_bfc", retry_timeout_us=0)
        ptrs = []
        for i in range(REGIONS):
            # Cap the limit one MiB above the pool: the next region is exactly one MiB.
            adj.adjust_memory_limit((i + 1) * MIB, bfc)
            ptrs.append(bfc.allocate_raw(256, MIB))
        for ptr in ptrs[1::2]:
            bfc.deallocate_raw(ptr)
        bfc.deallocate_raw(ptrs[0])  # a free region at the lowest address too
        ptrs[0] = bfc.allocate_raw(256, 256)  # ...and one region partly used
        return (bfc,), {}

    def shrink(bfc) -> None:
        result = adj.adjust_memory_limit(REGIONS // 2 * MIB, bfc)
        assert result == REGIONS // 2 * MIB, result

    bench.extra_info["regions"] = REGIONS
    bench.pedantic(shrink, setup=fragmented_pool, rounds=100, iterations=1, warmup_rounds=1)
