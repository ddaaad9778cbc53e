"""BFC clauses: the TensorFlow 1.15 BFC allocator, byte for byte.

Every expectation is computed here from TF's arithmetic (written out in the helpers below),
never read back from the implementation under test.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conformance import spec
from conformance.checks import names_identifier, raises
from conformance.control_helpers import joined, run_in_thread, runtime_records
from conformance.preconditions import precondition, precondition_holds
from fixtures.oom import FaultInjectingSubAllocator, assert_bfc_valid
from fixtures.virtual_clock import VirtualClock

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
T_10S = 10_000_000

pytestmark = pytest.mark.capability("bfc")


# --- TF arithmetic, written out ----------------------------------------------------------

def rounded(n: int) -> int:
    """RoundedBytes(n) = 256 * ceil(n / 256)."""
    return -(-n // 256) * 256


def bin_num(n: int) -> int:
    """BinNumForSize(n) = min(20, floor(log2(max(n, 256) >> 8)))."""
    n = max(n, 256) >> 8
    b = 0
    while n > 1:
        n >>= 1
        b += 1
    return min(b, 20)


def f32(x: float) -> float:
    """Round a double to IEEE-754 single precision."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def backpedal(size: int) -> int:
    """RoundedBytes(size_t(float(size) * 0.9f)); the product of two floats is exact in double."""
    return rounded(int(f32(f32(float(size)) * f32(0.9))))


def floor256(n: int) -> int:
    return (n // 256) * 256


class RecordingSub:
    """A sub-allocator that records (alignment, size) and hands out adjacent regions."""

    def __init__(self, base: int = 1 << 40, capacity: int = 1 << 40) -> None:
        self.next = base
        self.capacity = capacity
        self.used = 0
        self.calls: list[tuple[int, int]] = []
        self.frees: list[tuple[int, int]] = []

    def alloc(self, alignment: int, num_bytes: int) -> int | None:
        self.calls.append((alignment, num_bytes))
        if self.used + num_bytes > self.capacity:
            return None
        ptr, self.next = self.next, self.next + num_bytes   # no gap: regions adjacent
        self.used += num_bytes
        return ptr

    def free(self, ptr: int, num_bytes: int) -> None:
        self.frees.append((ptr, num_bytes))
        self.used -= num_bytes


def make(rt, limit: int, growth: bool = True, gc: bool = False, capacity: int | None = None,
         clock=None, timeout_us: int = 0):
    sim = rt.SimulatedDeviceMemory(capacity if capacity is not None else 4 * limit + GiB)
    if clock is None:                  # an allocator's clock serves its retry (BFC-12)
        clock = VirtualClock(auto_advance=True, clause="BFC-12")
    bfc = rt.BFCAllocator(sim, limit, growth, "GPU_0_bfc", gc, clock=clock,
                          retry_timeout_us=timeout_us)
    return bfc, sim


def chunks(bfc) -> list[tuple[int, int, bool]]:
    return [(c.ptr, c.size, c.in_use) for r in bfc.memory_map().regions for c in r.chunks]


def no_retry(rt):
    return rt.AllocationAttributes(no_retry_on_failure=True)


# --- BFC-1 -------------------------------------------------------------------------------

@pytest.mark.clause("BFC-1")
@pytest.mark.parametrize("n", [1, 100, 255, 256, 257, 511, 512, 1000, 1024, 1025, 4097, 65535])
def test_requests_round_up_to_256(rt, n):
    bfc, _ = make(rt, 64 * MiB)
    p = bfc.allocate_raw(256, n)
    assert p is not None, f"allocate_raw(256, {n}) returned None [BFC-1]"
    assert bfc.allocated_size(p) == rounded(n), (
        f"allocated_size(allocate_raw(256, {n})) = {bfc.allocated_size(p)}, expected "
        f"RoundedBytes = {rounded(n)} [BFC-1]")
    q = bfc.allocate_raw(256, 1)
    assert q - p == rounded(n), (f"allocate_raw(256, 1) after a {n}-byte request at {p:#x} "
                                 f"returned {q:#x}, expected {p + rounded(n):#x} [BFC-1]")


@pytest.mark.clause("BFC-1", "BFC-2")
def test_helpers_rounded_bytes_and_bin_num(rt):
    for n in [1, 255, 256, 257, 1000, 4096, 123456789]:
        assert rt.rounded_bytes(n) == rounded(n), f"rounded_bytes({n}) [BFC-1]"
    for n in [1, 255, 256, 257, 511, 512, 1000, 1024, 4096, 65535, 65536,
              256 << 19, (256 << 20) - 1, 256 << 20, 256 << 21, 123456789, 1 << 40]:
        got = rt.bin_num_for_size(n)
        assert got == bin_num(n), f"bin_num_for_size({n}) = {got}, expected {bin_num(n)} [BFC-2]"


@pytest.mark.clause("BFC-1", "BFC-12")
def test_zero_bytes_returns_none_at_once(rt):
    clock = VirtualClock(clause="BFC-12")  # manual: a retry wait would block this test
    bfc, sim = make(rt, MiB, clock=clock, timeout_us=T_10S)
    assert bfc.allocate_raw(256, 0) is None, "allocate_raw(256, 0) is not None [BFC-1]"
    assert sim.alloc_calls == [], (
        f"allocate_raw(256, 0) called the sub-allocator: {sim.alloc_calls} [BFC-1]")
    assert clock.records == [], f"allocate_raw(256, 0) waited: {clock.records} [BFC-12]"
    stats = bfc.get_stats()
    assert (stats.num_allocs, stats.bytes_in_use) == (0, 0), (
        f"stats after 0-byte request: {stats} [BFC-1]")
    p = bfc.allocate_raw(256, 1)
    assert bfc.allocation_id(p) == 1, "a 0-byte request consumed an allocation id [BFC-1]"


@pytest.mark.clause("BFC-1")
@pytest.mark.parametrize("bad", [-1, -256, 1.5, 256.0, "256", True, None, 2**70 * -1])
def test_bad_sizes_raise_value_error(rt, bad):
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, clock=clock, timeout_us=T_10S)
    keep = bfc.allocate_raw(256, 512)
    before = (bfc.memory_map(), bfc.get_stats())
    with pytest.raises(ValueError) as info:
        bfc.allocate_raw(256, bad)
    assert names_identifier(info.value, "GPU_0_bfc"), (
        f"allocate_raw(256, {bad!r}) error {info.value!r} does not name the allocator [BFC-1]")
    assert (bfc.memory_map(), bfc.get_stats()) == before, (
        f"allocate_raw(256, {bad!r}) changed the allocator's state [BFC-1]")
    assert clock.records == [] and keep is not None, "[BFC-1]"


@pytest.mark.clause("BFC-1")
@pytest.mark.parametrize("huge", [2**64, 2**64 + 1, 2**100])
def test_sizes_beyond_size_t_return_none_at_once(rt, huge):
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, clock=clock, timeout_us=T_10S)
    assert bfc.allocate_raw(256, huge) is None, f"allocate_raw(256, {huge}) is not None [BFC-1]"
    assert sim.alloc_calls == [] and clock.records == [], (
        f"allocate_raw(256, {huge}) called the sub-allocator {sim.alloc_calls} or waited "
        f"{clock.records} [BFC-1]")


@pytest.mark.clause("BFC-1", "BFC-9")
@pytest.mark.parametrize("huge", [MiB + 1, 2**63, 2**64 - 1])
def test_sizes_above_the_limit_fail_without_a_region(rt, huge):
    bfc, sim = make(rt, MiB, timeout_us=0)
    assert bfc.allocate_raw(256, huge) is None, f"allocate_raw(256, {huge}) is not None [BFC-9]"
    assert bfc.allocate_raw(256, huge, no_retry(rt)) is None, "[BFC-9]"
    assert sim.alloc_calls == [], (
        f"allocate_raw(256, {huge}) with limit 1 MiB called the sub-allocator "
        f"{sim.alloc_calls} [BFC-9]")
    assert bfc.allocate_raw(256, 256) is not None, (
        "allocator unusable after a huge request [BFC-1]")


@pytest.mark.clause("BFC-12")              # a size BFC-1 lets through retries
@pytest.mark.capability("virtual_clock")   # observes the retry's wait
@pytest.mark.parametrize("largest", [2**64 - 1, np.uint64(2**64 - 1)],
                         ids=["int", "numpy.uint64"])
def test_the_largest_size_t_is_an_ordinary_failing_request(rt, largest):
    """2^64-1 is not beyond ``size_t``: as an int or a NumPy integer it is a request that
    cannot be met, so it retries (one wait of T) instead of returning at once."""
    clock = VirtualClock(auto_advance=True, clause="BFC-12")
    bfc, sim = make(rt, MiB, clock=clock, timeout_us=T_10S)
    assert bfc.allocate_raw(256, largest) is None, (
        f"allocate_raw(256, {largest!r}) is not None [BFC-12]")
    waits = [r.duration_us for r in clock.records]
    assert waits == [T_10S], (
        f"allocate_raw(256, {type(largest).__name__}(2^64-1)) waited {waits}, expected the "
        f"retry's one wait of {T_10S} µs: only a size above 2^64-1 returns at once (BFC-1) "
        f"[BFC-12]")


@pytest.mark.clause("BFC-1")
def test_alignment_is_only_forwarded(rt):
    sub = RecordingSub()
    bfc = rt.BFCAllocator(sub, 64 * MiB, True, "GPU_0_bfc", retry_timeout_us=0)
    p = bfc.allocate_raw(4096, 256)
    q = bfc.allocate_raw(4096, 256)
    assert sub.calls == [(4096, MiB)], (f"sub-allocator calls {sub.calls}, expected the "
                                        f"alignment forwarded: [(4096, {MiB})] [BFC-1]")
    assert q - p == 256, (f"two allocate_raw(4096, 256) returned {p:#x} and {q:#x}: alignment "
                          f"above 256 is not honoured in TF 1.15, expected adjacent [BFC-1]")


# --- BFC-2 -------------------------------------------------------------------------------

@pytest.mark.clause("BFC-2")
def test_bin_num_for_size_boundaries(rt):
    for b in range(21):
        size = 256 << b
        for n in (size, size + 255, 2 * size - 1):
            assert rt.bin_num_for_size(n) == b, f"bin_num_for_size({n}) != {b} [BFC-2]"
        if b < 20:
            assert rt.bin_num_for_size(2 * size) == b + 1, f"bin_num_for_size({2 * size}) [BFC-2]"
    for n in (0, 1, 255):
        assert rt.bin_num_for_size(n) == 0, f"bin_num_for_size({n}) != 0 [BFC-2]"
    assert rt.bin_num_for_size(1 << 40) == 20, "bin_num_for_size(2^40) != 20 [BFC-2]"


@pytest.mark.clause("BFC-2", "BFC-16")
def test_free_chunks_sit_in_their_bins(rt):
    bfc, _ = make(rt, MiB, growth=False)
    sizes = [256, 512, 768, 1024, 3000, 4096, 10000, 65536, 100000]
    ptrs, layout = [], []
    for s in sizes:
        ptrs.append(bfc.allocate_raw(256, s))
        bfc.allocate_raw(256, 256)          # a used guard keeps the free chunks apart
    addr = ptrs[0]
    for s in sizes:
        layout.append((addr, rounded(s)))
        addr += rounded(s) + 256
    for p in ptrs:
        bfc.deallocate_raw(p)
    infos = bfc.get_bin_debug_info()
    assert len(infos) == 21, f"get_bin_debug_info() has {len(infos)} entries, expected 21 [BFC-16]"
    by_ptr = {c.ptr: c for r in bfc.memory_map().regions for c in r.chunks}
    for ptr, size in layout:
        c = by_ptr[ptr]
        assert (c.size, c.in_use, c.bin_num) == (size, False, bin_num(size)), (
            f"free chunk at {ptr:#x}: (size, in_use, bin) = ({c.size}, {c.in_use}, "
            f"{c.bin_num}), expected ({size}, False, {bin_num(size)}) [BFC-2]")
    used = [c for c in by_ptr.values() if c.in_use]
    assert used and all(c.bin_num == -1 for c in used), "a chunk in use has a bin [BFC-2]"


@pytest.mark.clause("BFC-2", "BFC-3")
@pytest.mark.parametrize("first", [256, 700 * MiB, 896 * MiB], ids=["1GiB-rest", "324MiB-rest",
                                                                   "128MiB-rest"])
def test_a_large_split_rest_sits_in_its_bin_and_is_found(rt, first):
    """The free rest a split leaves in a 1 GiB region (no growth) is 128 MiB or more: it is in
    bin BinNumForSize(rest) (bin 20 from 256 MiB on), and a request of that whole rest takes
    it instead of failing for want of room."""
    bfc, _ = make(rt, GiB, growth=False)
    a = bfc.allocate_raw(256, first)
    assert a is not None, f"allocate_raw(256, {first}) in an empty 1 GiB allocator [BFC-3]"
    rest = GiB - rounded(first)
    chunks = {c.ptr: c for r in bfc.memory_map().regions for c in r.chunks}
    precondition_holds("BFC-4", a + rounded(first) in chunks,
                       f"allocate_raw(256, {first}) splits the 1 GiB region (a rest of "
                       f"128 MiB or more)")
    got = chunks[a + rounded(first)].bin_num
    assert got == bin_num(rest), (
        f"the free rest of {rest} bytes after allocate_raw(256, {first}) is in bin {got}, "
        f"expected {bin_num(rest)} [BFC-2]")
    b = bfc.allocate_raw(256, rest)
    assert b == a + rounded(first), (
        f"allocate_raw(256, {rest}) returned {b!r}, expected the free rest at "
        f"{a + rounded(first):#x} [BFC-3]")


@pytest.mark.clause("BFC-2")
@pytest.mark.parametrize("size", [256 * MiB - 256, 256 * MiB, 512 * MiB - 256, 512 * MiB,
                                  768 * MiB, GiB - 256, GiB, 3 * GiB])
def test_a_large_freed_chunk_sits_in_bin_20(rt, size):
    """A whole region of `size` bytes (no growth) allocated and freed: the free chunk is in
    bin BinNumForSize(size) (bin 20 for every size of 256 MiB or more, however many doublings
    above it), and allocating it again takes the same chunk."""
    bfc, _ = make(rt, size, growth=False)
    p = bfc.allocate_raw(256, size)
    assert p is not None, f"allocate_raw(256, {size}) in an empty allocator of {size} [BFC-2]"
    bfc.deallocate_raw(p)
    got = [(c.ptr, c.size, c.in_use, c.bin_num) for r in bfc.memory_map().regions
           for c in r.chunks]
    assert got == [(p, size, False, bin_num(size))], (
        f"after freeing the whole region of {size} bytes the chunks are {got}, expected one "
        f"free chunk in bin {bin_num(size)} [BFC-2]")
    in_bins = [b for b, info in enumerate(bfc.get_bin_debug_info()) if info.total_chunks_in_bin]
    assert in_bins == [bin_num(size)], (
        f"get_bin_debug_info() counts free chunks in bins {in_bins}, expected only in bin "
        f"{bin_num(size)} [BFC-2]")
    again = bfc.allocate_raw(256, size)
    assert again == p, (
        f"allocate_raw(256, {size}) after the free returned {again!r}, expected {p:#x} [BFC-2]")


# --- BFC-3 / BFC-4 -----------------------------------------------------------------------

def _holes(rt):
    """Region of 1 MiB; free holes of 1024 @a, 2048 @c, 1024 @e, separated by used 256s."""
    bfc, sim = make(rt, MiB, growth=False)
    a = bfc.allocate_raw(256, 1024)
    b = bfc.allocate_raw(256, 256)
    c = bfc.allocate_raw(256, 2048)
    d = bfc.allocate_raw(256, 256)
    e = bfc.allocate_raw(256, 1024)
    f = bfc.allocate_raw(256, 256)
    assert [b - a, c - b, d - c, e - d, f - e] == [1024, 256, 2048, 256, 1024], "[BFC-3]"
    for p in (a, c, e):
        bfc.deallocate_raw(p)
    return bfc, sim, a, c, e


@pytest.mark.clause("BFC-3")
def test_best_fit_smallest_then_lowest_address(rt):
    bfc, sim, a, c, e = _holes(rt)
    calls = list(sim.alloc_calls)
    got = bfc.allocate_raw(256, 1000)
    assert got == a, f"allocate_raw(256, 1000) = {got:#x}, expected lowest 1024 hole {a:#x} [BFC-3]"
    got = bfc.allocate_raw(256, 769)
    assert got == e, (
        f"allocate_raw(256, 769) = {got:#x}, expected the other 1024 hole {e:#x} [BFC-3]")
    got = bfc.allocate_raw(256, 1025)
    assert got == c, f"allocate_raw(256, 1025) = {got:#x}, expected the 2048 hole {c:#x} [BFC-3]"
    assert sim.alloc_calls == calls, "best fit grew the pool although a chunk fitted [BFC-3]"


def _hole_beside_a_merge(rt, side: str, hole: int):
    """A free hole of ``hole`` bytes at the region's start, then a free of 4096 bytes that
    merges with its free neighbour of 256 bytes (``side``) into one chunk of 4352 bytes in
    bin 4. Returns the allocator, its sub-allocator and the hole's address."""
    bfc, sim = make(rt, MiB, growth=False)
    sizes = [hole, 256, 4096, 256, 256] if side == "next" else [hole, 256, 256, 4096, 256]
    ptrs = [bfc.allocate_raw(256, n) for n in sizes]
    small, big = (ptrs[3], ptrs[2]) if side == "next" else (ptrs[2], ptrs[3])
    assert [q - p for p, q in zip(ptrs, ptrs[1:])] == sizes[:-1], "[BFC-3]"
    for p in (ptrs[0], small, big):           # the hole, the 256, then the merge
        bfc.deallocate_raw(p)
    low = min(small, big)
    free = [c for c in chunks(bfc) if c[0] in (ptrs[0], low)]
    precondition_holds("BFC-5", free == [(ptrs[0], hole, False), (low, 4352, False)],
                       f"freeing the 4096 beside the free 256 ({side}) merges them into one "
                       f"free chunk of 4352 bytes and leaves the {hole}-byte hole free (got "
                       f"{free})")
    return bfc, sim, ptrs[0]


@pytest.mark.clause("BFC-3")
@pytest.mark.parametrize("side", ["next", "prev"])
def test_a_merge_that_empties_a_bin_leaves_the_next_bin_searched(rt, side):
    """The merge takes the only chunk of bin 0; the 512-byte hole X, alone in bin 1, is
    still the best fit of a 512-byte request afterwards (not the merged 4352-byte chunk of
    bin 4 above it)."""
    bfc, sim, x = _hole_beside_a_merge(rt, side, 512)
    calls = list(sim.alloc_calls)
    got = bfc.allocate_raw(256, 512)
    assert got == x, (
        f"allocate_raw(256, 512) after a merge emptied bin 0 returned {got and hex(got)}, "
        f"expected the 512-byte hole {x:#x}, the only chunk of bin 1 and the best fit "
        f"[BFC-3]")
    assert sim.alloc_calls == calls and bfc.allocated_size(got) == 512, (
        f"the best fit grew the pool ({sim.alloc_calls[len(calls):]}) or handed out "
        f"{bfc.allocated_size(got)} bytes [BFC-3]")


@pytest.mark.clause("BFC-3")
@pytest.mark.parametrize("side", ["next", "prev"])
def test_a_merge_that_leaves_its_bin_non_empty_keeps_it_searched(rt, side):
    """The merge takes one of bin 0's two chunks; the 256-byte hole Y, still in bin 0, is
    the best fit of a 256-byte request afterwards, not a piece of the merged 4352-byte chunk
    of bin 4 (bin 0 is not taken for empty because one of its chunks left it)."""
    bfc, sim, y = _hole_beside_a_merge(rt, side, 256)
    calls = list(sim.alloc_calls)
    got = bfc.allocate_raw(256, 256)
    assert got == y, (
        f"allocate_raw(256, 256) after a merge took one of bin 0's two chunks returned "
        f"{got and hex(got)}, expected the 256-byte hole {y:#x} still in bin 0, the best fit "
        f"[BFC-3]")
    assert sim.alloc_calls == calls, (
        f"the best fit grew the pool ({sim.alloc_calls[len(calls):]}) [BFC-3]")


@pytest.mark.clause("BFC-4")
def test_no_split_below_twice_the_request(rt):
    bfc, _, a, c, e = _holes(rt)
    p = bfc.allocate_raw(256, 1025)  # rounded 1280; 2048 < 2560, 768 < 128 MiB
    assert p == c and bfc.allocated_size(p) == 2048, (
        f"allocate_raw(256, 1025) from a 2048 hole: allocated_size {bfc.allocated_size(p)}, "
        f"expected the whole 2048-byte chunk [BFC-4]")
    assert bfc.requested_size(p) == 1025, "[BFC-4]"


@pytest.mark.clause("BFC-4")
def test_split_at_exactly_twice_the_request(rt):
    bfc, _, a, c, e = _holes(rt)
    p = bfc.allocate_raw(256, 1024)  # a: 1024 hole, exact
    p2 = bfc.allocate_raw(256, 1024)  # e
    p3 = bfc.allocate_raw(256, 1024)  # c: 2048 >= 2*1024 → split
    assert (p, p2, p3) == (a, e, c), f"got {(p, p2, p3)}, expected {(a, e, c)} [BFC-4]"
    assert bfc.allocated_size(p3) == 1024, (
        f"allocate_raw(256, 1024) from a 2048 chunk: allocated_size "
        f"{bfc.allocated_size(p3)}, expected 1024 (split) [BFC-4]")
    rest = [x for x in chunks(bfc) if x[0] == c + 1024]
    assert rest == [(c + 1024, 1024, False)], f"remainder after split: {rest} [BFC-4]"


@pytest.mark.clause("BFC-4")
@pytest.mark.parametrize("request_bytes,expect_split", [
    (1024 * MiB - 128 * MiB, True),          # remainder exactly 128 MiB → split
    (1024 * MiB - 128 * MiB + 256, False),   # remainder 128 MiB - 256 → whole chunk
    (600 * MiB, True),                       # remainder 424 MiB
    (512 * MiB, True),                       # exactly half
    (512 * MiB + 256, True),                 # remainder 512 MiB - 256 ≥ 128 MiB
])
def test_128_mib_split_rule(rt, request_bytes, expect_split):
    bfc, _ = make(rt, GiB, growth=False)
    p = bfc.allocate_raw(256, request_bytes)
    r = rounded(request_bytes)
    expected = r if (GiB >= 2 * r or GiB - r >= 128 * MiB) else GiB
    assert expect_split == (expected == r), "[BFC-4]"
    assert bfc.allocated_size(p) == expected, (
        f"allocate_raw(256, {request_bytes}) from a 1 GiB chunk: allocated_size "
        f"{bfc.allocated_size(p)}, expected {expected} [BFC-4]")
    if expected == r:
        assert chunks(bfc)[1] == (p + r, GiB - r, False), (
            f"remainder chunk {chunks(bfc)[1:]} [BFC-4]")


@pytest.mark.clause("BFC-4")
def test_split_just_below_twice_keeps_whole_chunk(rt):
    bfc, _ = make(rt, MiB, growth=False)
    n = 512 * KiB + 1    # rounded 524544; 2*r > 1 MiB and remainder < 128 MiB
    p = bfc.allocate_raw(256, n)
    assert bfc.allocated_size(p) == MiB, (f"allocate_raw(256, {n}) from a 1 MiB chunk: "
                                          f"allocated_size {bfc.allocated_size(p)}, expected "
                                          f"{MiB} [BFC-4]")


# --- BFC-5 -------------------------------------------------------------------------------

@pytest.mark.clause("BFC-5", "BFC-15")
def test_coalescing_next_then_prev(rt):
    bfc, _ = make(rt, MiB, growth=False)
    a = bfc.allocate_raw(256, 200)
    b = bfc.allocate_raw(256, 256)
    c = bfc.allocate_raw(256, 256)
    base = a
    bfc.deallocate_raw(b)
    assert chunks(bfc) == [(base, 256, True), (base + 256, 256, False), (base + 512, 256, True),
                           (base + 768, MiB - 768, False)], f"after free(b): {chunks(bfc)} [BFC-5]"
    bfc.deallocate_raw(a)   # merges with its free next (b)
    assert chunks(bfc)[:2] == [(base, 512, False), (base + 512, 256, True)], (
        f"free(a) with a free next chunk: {chunks(bfc)} [BFC-5]")
    assert bfc.allocation_id(a) == -1 and bfc.requested_size(a) == 200, (
        f"after free(a): allocation_id {bfc.allocation_id(a)}, requested_size "
        f"{bfc.requested_size(a)}, expected -1 and the stale 200 [BFC-15]")
    assert bfc.allocated_size(a) == 512, f"allocated_size(a) after merge [BFC-15]"
    with pytest.raises(rt.InvalidPointerError):
        bfc.allocation_id(b)   # b merged into a: no chunk starts there
    bfc.deallocate_raw(c)   # merges next (tail) then into prev (a)
    assert chunks(bfc) == [(base, MiB, False)], f"after freeing everything: {chunks(bfc)} [BFC-5]"
    with pytest.raises(rt.InvalidPointerError):
        bfc.allocated_size(c)


@pytest.mark.clause("BFC-5")
def test_deallocate_none_is_a_no_op(rt):
    bfc, _ = make(rt, MiB)
    p = bfc.allocate_raw(256, 256)
    before = (bfc.memory_map(), bfc.get_stats())
    bfc.deallocate_raw(None)
    assert (bfc.memory_map(), bfc.get_stats()) == before, (
        "deallocate_raw(None) changed state [BFC-5]")
    assert p is not None, "[BFC-5]"


@pytest.mark.clause("BFC-5")
def test_adjacent_regions_never_merge(rt):
    sub = RecordingSub()
    bfc = rt.BFCAllocator(sub, 64 * MiB, True, "GPU_0_bfc", retry_timeout_us=0)
    p = bfc.allocate_raw(256, MiB)          # region 1: 1 MiB, whole
    q = bfc.allocate_raw(256, 2 * MiB)      # region 2: 2 MiB, adjacent
    assert q == p + MiB, "the test sub-allocator should give adjacent regions [BFC-5]"
    bfc.deallocate_raw(p)
    bfc.deallocate_raw(q)
    mm = bfc.memory_map()
    got = [(r.ptr, r.size, [(c.ptr, c.size, c.in_use) for c in r.chunks]) for r in mm.regions]
    assert got == [(p, MiB, [(p, MiB, False)]), (q, 2 * MiB, [(q, 2 * MiB, False)])], (
        f"two adjacent free regions: {got}; chunks must not merge across regions [BFC-5]")
    r = bfc.allocate_raw(256, 3 * MiB)
    assert r is not None and r >= q + 2 * MiB, (
        f"allocate_raw(256, 3 MiB) = {r}: two adjacent 1+2 MiB free regions must not serve a "
        f"3 MiB request [BFC-5]")


# --- BFC-6 -------------------------------------------------------------------------------

# How a message says a pointer was already freed (BFC-6): a double free, or the word freed.
ALREADY_FREED = re.compile(r"double[- ]free|(?<![A-Za-z0-9_])freed(?![A-Za-z0-9_])",
                           re.IGNORECASE)


@pytest.mark.clause("BFC-6")
def test_invalid_pointers_raise_and_change_nothing(rt):
    bfc, _ = make(rt, MiB, growth=False)
    p = bfc.allocate_raw(256, 1024)
    q = bfc.allocate_raw(256, 256)
    bfc.deallocate_raw(q)
    before = (bfc.memory_map(), bfc.get_stats())
    bad = [0x1234, p + 256, p + 1, p + MiB * 7, -1, float(p), str(p)]  # never a chunk's start
    for ptr in bad:
        for name in ("deallocate_raw", "requested_size", "allocated_size", "allocation_id"):
            with pytest.raises(rt.InvalidPointerError) as info:
                getattr(bfc, name)(ptr)
            assert names_identifier(info.value, "GPU_0_bfc"), (
                f"{name}({ptr!r}) error {info.value!r} does not name the allocator [BFC-6]")
            assert names_identifier(info.value, name), (
                f"{name}({ptr!r}) error {info.value!r} does not name the method called "
                f"(as a whole word) [BFC-6]")
            assert not ALREADY_FREED.search(str(info.value)), (
                f"{name}({ptr!r}) error {info.value!r} reports a pointer this allocator never "
                f"handed out as already freed (a double free) [BFC-6]")
    with pytest.raises(rt.InvalidPointerError) as info:
        bfc.deallocate_raw(q)   # double free (q's chunk merged with the free tail)
    assert ALREADY_FREED.search(str(info.value)), (
        f"double free error {info.value!r} does not say the pointer was already freed "
        f"('double free' or 'freed') [BFC-6]")
    assert (bfc.memory_map(), bfc.get_stats()) == before, (
        "an invalid pointer changed state [BFC-6]")
    assert issubclass(rt.InvalidPointerError, ValueError), "[BFC-6]"


@pytest.mark.clause("BFC-6")
def test_double_free_of_an_unmerged_chunk(rt):
    bfc, _ = make(rt, MiB, growth=False)
    p = bfc.allocate_raw(256, 256)
    q = bfc.allocate_raw(256, 256)  # noqa: F841 - keeps p from merging forward
    bfc.deallocate_raw(p)
    before = (bfc.memory_map(), bfc.get_stats())
    with pytest.raises(rt.InvalidPointerError) as info:
        bfc.deallocate_raw(p)
    assert f"{p:#x}" in str(info.value) or str(p) in str(info.value), (
        f"double free error {info.value!r} does not name the pointer [BFC-6]")
    assert names_identifier(info.value, "deallocate_raw"), (
        f"double free error {info.value!r} does not name the method called [BFC-6]")
    assert ALREADY_FREED.search(str(info.value)), (
        f"double free error {info.value!r} does not say the pointer was already freed "
        f"('double free' or 'freed') [BFC-6]")
    assert (bfc.memory_map(), bfc.get_stats()) == before, "a double free changed state [BFC-6]"


@pytest.mark.clause("BFC-6")
@pytest.mark.parametrize("as_numpy", [np.uint64, np.int64], ids=["numpy.uint64", "numpy.int64"])
def test_a_numpy_integer_pointer_is_the_equal_int(rt, as_numpy):
    bfc, _ = make(rt, MiB, growth=False)
    p = bfc.allocate_raw(256, 1000)
    q = bfc.allocate_raw(256, 256)  # noqa: F841 - keeps p from merging forward
    ptr = as_numpy(p)
    for name, want in (("requested_size", 1000), ("allocated_size", 1024),
                       ("allocation_id", bfc.allocation_id(p))):
        got = getattr(bfc, name)(ptr)
        assert got == want, f"{name}({ptr!r}) = {got!r}, expected {want!r} as for {p} [BFC-6]"
    bfc.deallocate_raw(ptr)
    assert chunks(bfc)[0] == (p, 1024, False), (
        f"deallocate_raw({ptr!r}) did not free the chunk at {p}: {chunks(bfc)} [BFC-6]")
    assert bfc.get_stats().bytes_in_use == 256, (
        f"bytes_in_use {bfc.get_stats().bytes_in_use} after deallocate_raw({ptr!r}) of a "
        f"1024-byte chunk, 256 expected [BFC-6]")
    before = (bfc.memory_map(), bfc.get_stats())
    with pytest.raises(rt.InvalidPointerError) as info:
        bfc.deallocate_raw(ptr)
    assert ALREADY_FREED.search(str(info.value)), (
        f"a second deallocate_raw({ptr!r}) raised {info.value!r}, which does not say the "
        f"pointer was already freed [BFC-6]")
    for bad in (True, False):
        with pytest.raises(rt.InvalidPointerError):
            bfc.deallocate_raw(bad)
            pytest.fail(f"deallocate_raw({bad!r}) did not raise InvalidPointerError [BFC-6]")
    assert (bfc.memory_map(), bfc.get_stats()) == before, (
        "an invalid pointer changed state [BFC-6]")


# --- BFC-7 -------------------------------------------------------------------------------

@pytest.mark.clause("BFC-7")
@pytest.mark.parametrize("total,growth,expected_next", [
    (3 * MiB, True, MiB), (MiB, True, MiB), (1000, True, 1024), (100, True, 256),
    (0, True, 0), (3 * MiB, False, 3 * MiB), (1000, False, 1024), (5 * MiB + 1, False,
                                                                  5 * MiB + 256),
])
def test_construction(rt, total, growth, expected_next):
    sim = rt.SimulatedDeviceMemory(GiB)
    bfc = rt.BFCAllocator(sim, total, growth, "GPU_0_bfc")
    mm = bfc.memory_map()
    assert sim.alloc_calls == [], f"BFCAllocator(...) called the sub-allocator [BFC-7]"
    assert (mm.memory_limit, mm.total_region_allocated_bytes, mm.next_region_size,
            mm.regions) == (total, 0, expected_next, ()), (
        f"BFCAllocator(total={total}, allow_growth={growth}): memory_map {mm}, expected "
        f"limit {total}, pool 0, next {expected_next}, no region [BFC-7]")
    assert bfc.get_stats().bytes_limit == total and bfc.name == "GPU_0_bfc", "[BFC-7]"


@pytest.mark.clause("BFC-7")
@pytest.mark.parametrize("given,expected", [((), False), ((False,), False), ((True,), True),
                                            ((0,), False), ((1,), True)])
def test_garbage_collection_attribute(rt, given, expected):
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc", *given)
    got = bfc.garbage_collection
    assert got is expected, (
        f"BFCAllocator(..., garbage_collection={given[0] if given else 'not given'}): the "
        f"garbage_collection attribute is {got!r}, expected {expected} [BFC-7]")


@pytest.mark.clause("BFC-7")
@pytest.mark.parametrize("bad", [-1, 1.5, "1024"])
def test_construction_rejects_bad_sizes(rt, bad):
    with pytest.raises(ValueError):
        rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), bad, True, "GPU_0_bfc")
    with pytest.raises(ValueError):
        rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc",
                        retry_timeout_us=bad)


# --- BFC-8 / BFC-9 -----------------------------------------------------------------------

@pytest.mark.clause("BFC-8")
def test_region_growth_doubles(rt):
    bfc, sim = make(rt, GiB)
    nexts = []
    for n in (MiB, 2 * MiB, 4 * MiB):
        assert bfc.allocate_raw(256, n) is not None, f"allocate_raw(256, {n}) [BFC-8]"
        nexts.append(bfc.memory_map().next_region_size)
    assert sim.alloc_calls == [MiB, 2 * MiB, 4 * MiB], (
        f"regions for requests 1, 2, 4 MiB: {sim.alloc_calls}, expected [1, 2, 4] MiB [BFC-8]")
    assert nexts == [2 * MiB, 4 * MiB, 8 * MiB], f"next region sizes {nexts} [BFC-8]"


@pytest.mark.clause("BFC-8")
def test_forced_doubling_is_not_doubled_again(rt):
    bfc, sim = make(rt, GiB)
    bfc.allocate_raw(256, MiB)             # region 1 MiB, next 2 MiB
    bfc.allocate_raw(256, 3 * MiB)         # 2 → 4 MiB (increased), next stays 4 MiB
    assert sim.alloc_calls == [MiB, 4 * MiB], f"regions {sim.alloc_calls} [BFC-8]"
    assert bfc.memory_map().next_region_size == 4 * MiB, (
        f"next after a request that forced doubling: {bfc.memory_map().next_region_size}, "
        f"expected {4 * MiB} [BFC-8]")
    bfc.allocate_raw(256, 5 * MiB)         # 4 → 8 MiB
    bfc.allocate_raw(256, 8 * MiB)         # 8 MiB, not increased → next 16 MiB
    assert sim.alloc_calls == [MiB, 4 * MiB, 8 * MiB, 8 * MiB], (
        f"regions {sim.alloc_calls} [BFC-8]")
    assert bfc.memory_map().next_region_size == 16 * MiB, "[BFC-8]"


@pytest.mark.clause("BFC-8", "BFC-9")
def test_region_is_capped_by_the_limit(rt):
    bfc, sim = make(rt, 3 * MiB)
    a = bfc.allocate_raw(256, MiB)               # region 1 MiB, next 2 MiB
    b = bfc.allocate_raw(256, MiB)               # region min(next 2, available 2) MiB
    assert sim.alloc_calls == [MiB, 2 * MiB], f"regions {sim.alloc_calls} [BFC-8]"
    with precondition("BFC-4", "a 1 MiB request splits the 2 MiB region"):
        c = bfc.allocate_raw(256, MiB)           # the 1 MiB left in region 2
        assert None not in (a, b, c), f"allocations {a}, {b}, {c} [BFC-4]"
    assert bfc.allocate_raw(256, 256, no_retry(rt)) is None, "allocation beyond the limit [BFC-9]"
    assert sim.alloc_calls == [MiB, 2 * MiB], (
        f"a request beyond floor256(limit - pool) = 0 called the sub-allocator "
        f"{sim.alloc_calls[2:]} [BFC-9]")


@pytest.mark.clause("BFC-9")
def test_limit_not_multiple_of_256(rt):
    bfc, sim = make(rt, 1000, growth=False)
    assert bfc.memory_map().next_region_size == 1024, "[BFC-9]"
    assert bfc.allocate_raw(256, 800) is None, "allocate_raw(256, 800) with limit 1000 [BFC-9]"
    assert sim.alloc_calls == [], f"request 800 > floor256(1000) called {sim.alloc_calls} [BFC-9]"
    p = bfc.allocate_raw(256, 700)
    assert sim.alloc_calls == [768] and bfc.allocated_size(p) == 768, (
        f"limit 1000: region {sim.alloc_calls}, chunk {bfc.allocated_size(p)}, expected one "
        f"768-byte region [BFC-9]")


@pytest.mark.clause("BFC-8", "BFC-9")
def test_pool_never_exceeds_limit_random(rt):
    rng = random.Random(7)
    limit = 5 * MiB + 12345
    bfc, sim = make(rt, limit, gc=True)
    live = []
    for _ in range(300):
        if live and rng.random() < 0.45:
            bfc.deallocate_raw(live.pop(rng.randrange(len(live))))
        else:
            p = bfc.allocate_raw(256, rng.choice([100, 3000, 70000, 600 * KiB, 2 * MiB]),
                                 no_retry(rt))
            if p is not None:
                live.append(p)
        pool = bfc.memory_map().total_region_allocated_bytes
        assert pool <= limit, f"pool {pool} above limit {limit} [BFC-9]"
    assert_bfc_valid(bfc, sim)


# --- BFC-10 ------------------------------------------------------------------------------

def _backpedal_calls(first: int, request: int, capacity: int) -> list[int]:
    calls, size = [first], first
    if first <= capacity:
        return calls
    while True:
        smaller = backpedal(size)
        if smaller < request or smaller >= size:
            return calls
        size = smaller
        calls.append(size)
        if size <= capacity:
            return calls


@pytest.mark.clause("BFC-10")
def test_backpedal_sequence(rt):
    capacity = 700_000
    bfc, sim = make(rt, MiB, growth=False, capacity=capacity)
    p = bfc.allocate_raw(256, 256)
    expected = _backpedal_calls(MiB, 256, capacity)
    assert expected[:4] == [1048576, 943872, 849664, 764928], "[BFC-10]"
    assert sim.alloc_calls == expected, (
        f"sub-allocator calls with capacity {capacity}: {sim.alloc_calls}, expected "
        f"{expected} [BFC-10]")
    assert p is not None and bfc.memory_map().total_region_allocated_bytes == expected[-1], (
        "[BFC-10]")


@pytest.mark.clause("BFC-10")
def test_backpedal_uses_float32(rt):
    # From 1 GiB, float32 and double arithmetic part at the 4th step.
    expected = _backpedal_calls(GiB, 256, 0)[:5]
    double = [GiB]
    for _ in range(4):
        double.append(rounded(int(double[-1] * 0.9)))
    assert expected[4] == 704482304 and double[4] == 704482560 != expected[4], "[BFC-10]"
    capacity = expected[4] + 100          # float32's 5th size fits, double's does not
    bfc, sim = make(rt, GiB, growth=False, capacity=capacity)
    assert bfc.allocate_raw(256, 256) is not None, "[BFC-10]"
    assert sim.alloc_calls == expected, (
        f"backpedal from 1 GiB: {sim.alloc_calls}, expected the float32 sequence "
        f"{expected} [BFC-10]")


@pytest.mark.clause("BFC-10")
def test_backpedal_only_once_per_lifetime(rt):
    bfc, sim = make(rt, GiB)
    assert bfc.allocate_raw(256, 256) is not None, "[BFC-10]"          # region 1 MiB, next 2 MiB
    sim.fail = True
    assert bfc.allocate_raw(256, 2 * MiB, no_retry(rt)) is None, "[BFC-10]"
    first = sim.alloc_calls[1:]
    assert first == _backpedal_calls(2 * MiB, 2 * MiB, 0), f"first refusal: {first} [BFC-10]"
    assert bfc.allocate_raw(256, MiB + 256, no_retry(rt)) is None, "[BFC-10]"
    later = sim.alloc_calls[1 + len(first):]
    assert later == [2 * MiB], (f"a refusal after the one backpedal made calls {later}, "
                                f"expected one call of {2 * MiB} [BFC-10]")


@pytest.mark.clause("BFC-10")
@pytest.mark.parametrize("request_bytes", [2048, 2304, 2305])
def test_backpedal_tries_a_size_equal_to_the_request(rt, request_bytes):
    """From 2560 bytes the backpedal's one step is 2304: tried for a request that rounds to
    2304 or less (the step is not below it), not for one that rounds to 2560."""
    bfc, sim = make(rt, 2560, growth=False, capacity=2400)
    p = bfc.allocate_raw(256, request_bytes, no_retry(rt))
    need = rounded(request_bytes)
    expected = _backpedal_calls(2560, need, 2400)
    assert expected == ([2560, 2304] if need <= 2304 else [2560]), "[BFC-10]"
    assert sim.alloc_calls == expected, (
        f"allocate_raw(256, {request_bytes}) with the sub-allocator refusing 2560 and serving "
        f"2304: calls {sim.alloc_calls}, expected {expected} [BFC-10]")
    assert (p is not None) == (need <= 2304), (
        f"allocate_raw(256, {request_bytes}) = {p!r}: a backpedal step of 2304 serves a "
        f"request rounded to {need} exactly when it is not below it [BFC-10]")


@pytest.mark.clause("BFC-10")
@pytest.mark.parametrize("limit", [256, 512, 2304, 2560, 5000])
def test_backpedal_terminates_for_tiny_sizes(rt, limit):
    bfc, sim = make(rt, limit, growth=False)
    sim.fail = True
    assert bfc.allocate_raw(256, 256, no_retry(rt)) is None, "[BFC-10]"
    first = min(rounded(limit), floor256(limit))   # min(next, available)
    expected = _backpedal_calls(first, 256, 0)
    assert sim.alloc_calls == expected, (
        f"limit {limit}, sub-allocator always refusing: calls {sim.alloc_calls}, expected "
        f"{expected}; the loop must stop when the size stops shrinking [BFC-10]")
    sim.fail = False
    assert bfc.allocate_raw(256, 256) is not None, "[BFC-10]"


# --- BFC-11 ------------------------------------------------------------------------------

def _gc_setup(rt, gc: bool):
    bfc, sim = make(rt, 4 * MiB, gc=gc)
    a = bfc.allocate_raw(256, MiB)        # region R1 = 1 MiB, next 2 MiB
    b = bfc.allocate_raw(256, 2 * MiB)    # region R2 = 2 MiB, next 4 MiB
    bfc.deallocate_raw(a)                 # R1 fully free; pool 3 MiB
    return bfc, sim, a, b


@pytest.mark.clause("BFC-11")
def test_gc_releases_free_regions_then_extends(rt):
    bfc, sim, a, b = _gc_setup(rt, gc=True)
    p = bfc.allocate_raw(256, 2 * MiB, no_retry(rt))
    # Extend fails (available 1 MiB); F = 1 MiB; 2 MiB <= 4 - 3 + 1 → release R1; Extend:
    # available 2 MiB, next 4 MiB → region min(4, 2) = 2 MiB, next doubled to 8 MiB.
    assert p is not None, "allocate_raw(256, 2 MiB) with GC on returned None [BFC-11]"
    assert sim.free_calls == [(a, MiB)], f"released {sim.free_calls}, expected [R1] [BFC-11]"
    assert sim.alloc_calls == [MiB, 2 * MiB, 2 * MiB], f"regions {sim.alloc_calls} [BFC-11]"
    mm = bfc.memory_map()
    assert ([r.size for r in mm.regions], mm.total_region_allocated_bytes,
            mm.next_region_size) == ([2 * MiB, 2 * MiB], 4 * MiB, 8 * MiB), f"{mm} [BFC-11]"
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("BFC-11")
def test_a_release_logs_one_warning(rt, caplog):
    """Garbage collection that releases a region reports it: the allocation it serves logs
    exactly one warning (TF's "Garbage collection: deallocate free memory regions")."""
    bfc, sim, a, b = _gc_setup(rt, gc=True)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    p = bfc.allocate_raw(256, 2 * MiB, no_retry(rt))     # releases R1, as above
    precondition_holds("BFC-11", p is not None and sim.free_calls == [(a, MiB)],
                       f"allocate_raw(256, 2 MiB) with GC on releases R1 and succeeds (got "
                       f"{p!r}, released {sim.free_calls})")
    logged = runtime_records(caplog, rt, logging.WARNING)
    assert len(logged) == 1, (
        f"the allocation that garbage collection served by releasing R1 logged {logged}, "
        f"expected exactly one warning (the garbage-collection report) [BFC-11]")
    bfc.deallocate_raw(p)
    bfc.deallocate_raw(b)


@pytest.mark.clause("BFC-11")
def test_gc_releases_every_free_region(rt):
    bfc, sim = make(rt, 8 * MiB + 512 * 1024, gc=True)
    a = bfc.allocate_raw(256, MiB)            # R1 = 1 MiB, next 2 MiB
    b = bfc.allocate_raw(256, 2 * MiB)        # R2 = 2 MiB, next 4 MiB
    c = bfc.allocate_raw(256, 4 * MiB)        # R3 = 4 MiB, next 8 MiB; pool 7 MiB
    bfc.deallocate_raw(a)
    bfc.deallocate_raw(b)                     # R1, R2 fully free: F = 3 MiB
    r = 2 * MiB + 256                         # fits no free chunk; available 1.5 MiB
    p = bfc.allocate_raw(256, r, no_retry(rt))
    # Extend fails; r <= limit - pool + F = 4.5 MiB → release R1 AND R2 (releasing R1 alone
    # would already make room for r), then Extend: region min(next 8 MiB, available 4.5 MiB)
    assert p is not None, f"allocate_raw(256, {r}) with GC on returned None [BFC-11]"
    assert sim.free_calls == [(a, MiB), (b, 2 * MiB)], (
        f"GC released {sim.free_calls}, expected every fully free region [(R1, 1 MiB), "
        f"(R2, 2 MiB)], not only enough of them [BFC-11]")
    assert sim.alloc_calls == [MiB, 2 * MiB, 4 * MiB, 4 * MiB + 512 * 1024], (
        f"regions {sim.alloc_calls}: after releasing every free region the new region is "
        f"min(next, available) = 4.5 MiB [BFC-11]")
    assert bfc.memory_map().total_region_allocated_bytes == 8 * MiB + 512 * 1024, "[BFC-11]"
    bfc.deallocate_raw(p)
    bfc.deallocate_raw(c)
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("BFC-11")
def test_gc_after_the_sub_allocator_refused_the_region(rt):
    """Extending fails because the sub-allocator refuses the region (the device is full),
    not because of the limit: garbage collection still releases the free region, and the
    second extension succeeds."""
    bfc, sim = make(rt, 16 * MiB, gc=True, capacity=6 * MiB)
    a = bfc.allocate_raw(256, MiB)            # R1 = 1 MiB, next 2 MiB
    b = bfc.allocate_raw(256, 2 * MiB)        # R2 = 2 MiB, next 4 MiB; device 3 of 6 MiB
    bfc.deallocate_raw(a)                     # R1 fully free: F = 1 MiB
    p = bfc.allocate_raw(256, 4 * MiB, no_retry(rt))
    # Extend: region 4 MiB refused (3 + 4 > 6 MiB); the backpedal's 3.6 MiB < r stops it.
    # F = 1 MiB, r <= 16 - 3 + 1 → release R1; Extend: 4 MiB fits (2 + 4 <= 6 MiB).
    assert p is not None and sim.free_calls == [(a, MiB)], (
        f"allocate_raw(256, 4 MiB) with GC on, the 4 MiB region refused by the sub-allocator "
        f"while R1 (1 MiB) was free: returned {p!r}, released {sim.free_calls}; expected R1 "
        f"released and the request served from a new 4 MiB region [BFC-11]")
    assert sim.alloc_calls == [MiB, 2 * MiB, 4 * MiB, 4 * MiB], (
        f"regions {sim.alloc_calls} [BFC-11]")
    bfc.deallocate_raw(p)
    bfc.deallocate_raw(b)
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("BFC-11")
def test_gc_feasibility_check(rt):
    bfc, sim, a, b = _gc_setup(rt, gc=True)
    # 2 MiB + 256 > limit - pool + F = 2 MiB → nothing released
    assert bfc.allocate_raw(256, 2 * MiB + 256, no_retry(rt)) is None, "[BFC-11]"
    assert sim.free_calls == [], f"infeasible GC released {sim.free_calls} [BFC-11]"
    assert bfc.memory_map().total_region_allocated_bytes == 3 * MiB, "[BFC-11]"


@pytest.mark.clause("BFC-11")
def test_gc_off_releases_nothing(rt):
    bfc, sim, a, b = _gc_setup(rt, gc=False)
    assert bfc.allocate_raw(256, 2 * MiB, no_retry(rt)) is None, "GC off: expected None [BFC-11]"
    assert sim.free_calls == [], f"GC off released {sim.free_calls} [BFC-11]"


@pytest.mark.clause("BFC-11")
def test_gc_releases_all_free_regions(rt):
    bfc, sim = make(rt, 8 * MiB, gc=True)
    a = bfc.allocate_raw(256, MiB)        # R1 1 MiB
    b = bfc.allocate_raw(256, 2 * MiB)    # R2 2 MiB
    c = bfc.allocate_raw(256, 4 * MiB)    # R3 4 MiB, next 8 MiB; pool 7 MiB
    bfc.deallocate_raw(a)
    bfc.deallocate_raw(b)
    p = bfc.allocate_raw(256, 3 * MiB, no_retry(rt))
    # F = 3 MiB, 3 <= 8 - 7 + 3: both released although R2 alone would do; region
    # min(8 MiB, 8 - 4) = 4 MiB, no split (4 < 6 MiB, 1 MiB < 128 MiB).
    assert sorted(sim.free_calls) == sorted([(a, MiB), (b, 2 * MiB)]), (
        f"released {sim.free_calls}, expected both free regions [BFC-11]")
    assert p is not None and bfc.allocated_size(p) == 4 * MiB, (
        f"allocated_size after GC: {p and bfc.allocated_size(p)}, expected {4 * MiB} [BFC-11]")
    assert bfc.memory_map().next_region_size == 16 * MiB and c is not None, "[BFC-11]"


@pytest.mark.clause("BFC-11", "BFC-8")
def test_gc_only_after_extend_fails(rt):
    bfc, sim = make(rt, 8 * MiB, gc=True)
    a = bfc.allocate_raw(256, MiB)
    bfc.deallocate_raw(a)
    p = bfc.allocate_raw(256, 2 * MiB)    # Extend succeeds: R1 kept
    assert p is not None and sim.free_calls == [], (
        f"GC ran although Extend could succeed: released {sim.free_calls} [BFC-8]")


class DescendingSub(RecordingSub):
    """A sub-allocator whose each new region lies below the previous ones (with a gap)."""

    def alloc(self, alignment: int, num_bytes: int) -> int | None:
        self.calls.append((alignment, num_bytes))
        self.next -= num_bytes + 4096
        return self.next


@pytest.mark.clause("BFC-11")
def test_a_released_region_leaves_the_other_free_chunks_of_its_bin(rt):
    """The region that garbage collection releases is not the first chunk of its bin: a
    free chunk of the same size at a lower address (regions here come at lower and lower
    addresses) stays free and is the best fit of the next request."""
    sub = DescendingSub(base=1 << 44)
    bfc = rt.BFCAllocator(sub, 4 * MiB + 512 * KiB, True, "GPU_0_bfc", True,
                          retry_timeout_us=0)
    a = bfc.allocate_raw(256, MiB)        # R0 = 1 MiB, whole; next 2 MiB
    b = bfc.allocate_raw(256, MiB)        # R1 = 2 MiB below R0, split: free K = b + 1 MiB
    precondition_holds("BFC-4", b is not None and bfc.allocated_size(b) == MiB,
                       "a 1 MiB request splits the 2 MiB region R1")
    bfc.deallocate_raw(a)                 # R0 fully free: bin of 1 MiB = [K, R0]
    assert b + MiB < a, f"regions at {a:#x} then {b:#x}: the second is not below [BFC-11]"
    p = bfc.allocate_raw(256, 2 * MiB, no_retry(rt))
    # Extend fails (available 1.5 MiB); F = 1 MiB; 2 MiB <= 4.5 - 3 + 1 → release R0; Extend:
    # region min(4 MiB, 2.5 MiB), whole.
    assert p is not None and sub.frees == [(a, MiB)], (
        f"allocate_raw(256, 2 MiB): {p}, released {sub.frees}, expected R0 released [BFC-11]")
    try:
        q = bfc.allocate_raw(256, MiB, no_retry(rt))
    except Exception as exc:   # a bin still listing a released chunk, say
        pytest.fail(f"after R0 was released, allocate_raw(256, 1 MiB) raised {exc!r} [BFC-11]")
    assert q == b + MiB, (
        f"after R0 was released, allocate_raw(256, 1 MiB) returned {q and hex(q)}, expected "
        f"the free chunk {b + MiB:#x} of R1, which must stay in its bin [BFC-11]")
    assert_bfc_valid(bfc)


@pytest.mark.clause("BFC-11", "BFC-6")
def test_a_released_region_empties_its_bin_and_leaves_the_next_bin(rt):
    """The released region was the only free chunk of its bin (1 MiB), and the next bin up
    (2 to 4 MiB) holds the free rest of another region: that rest is still the best fit of
    later requests (a 1 MiB one included, which finds its own bin empty), and the released
    region's chunk is no longer a chunk of the allocator (its queries and its free raise
    InvalidPointerError)."""
    bfc, sim = make(rt, 10 * MiB, gc=True)
    a = bfc.allocate_raw(256, MiB)            # R0 = 1 MiB, next 2 MiB
    d = bfc.allocate_raw(256, 2 * MiB)        # R1 = 2 MiB, next 4 MiB
    c = bfc.allocate_raw(256, MiB)            # R2 = 4 MiB split: free rest K of 3 MiB
    precondition_holds("BFC-4", None not in (a, d, c) and bfc.allocated_size(c) == MiB,
                       "a 1 MiB request splits the 4 MiB region R2")
    k = c + MiB
    bfc.deallocate_raw(a)                     # R0 fully free, alone in the bin of 1 MiB
    p = bfc.allocate_raw(256, 4 * MiB, no_retry(rt))
    # Extend fails (available 3 MiB); F = 1 MiB; 4 MiB <= 10 - 7 + 1 → release R0; Extend:
    # region min(8 MiB, 4 MiB), whole. The pool is now the limit.
    assert p is not None and sim.free_calls == [(a, MiB)], (
        f"allocate_raw(256, 4 MiB): {p}, released {sim.free_calls}, expected R0 released "
        f"[BFC-11]")
    for size in (3 * MiB, 2 * MiB, MiB):
        try:
            q = bfc.allocate_raw(256, size, no_retry(rt))
        except Exception as exc:   # a bin still listing a released chunk, say
            pytest.fail(f"after R0 was released, allocate_raw(256, {size}) raised {exc!r} "
                        f"[BFC-11]")
        assert q == k, (
            f"after R0 (the only free chunk of its bin) was released, allocate_raw(256, "
            f"{size}) returned {q and hex(q)}, expected the free 3 MiB chunk {k:#x} of R2, "
            f"which stays in its bin [BFC-11]")
        bfc.deallocate_raw(q)
    before = (bfc.memory_map(), bfc.get_stats())
    for name in ("requested_size", "allocated_size", "allocation_id", "deallocate_raw"):
        with raises(rt.InvalidPointerError, "BFC-6",
                    f"{name}({a:#x}) of the released region's chunk") as refused:
            getattr(bfc, name)(a)
        assert names_identifier(refused.value, name), (
            f"{name}({a:#x}) error {refused.value!r} does not name the method called [BFC-6]")
    assert (bfc.memory_map(), bfc.get_stats()) == before, (
        "a pointer of a released region changed state [BFC-6]")
    for ptr in (p, c, d):
        bfc.deallocate_raw(ptr)
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("BFC-11")
def test_nothing_to_release_makes_no_second_extend(rt):
    """F == 0 (the only region holds a chunk in use): garbage collection releases nothing,
    so the failed extension is not tried again (one sub-allocator call after the backpedal)."""
    bfc, sim = make(rt, GiB, gc=True)
    assert bfc.allocate_raw(256, 256) is not None, "[BFC-11]"       # region 1 MiB, in use
    sim.fail = True
    assert bfc.allocate_raw(256, 2 * MiB, no_retry(rt)) is None, "[BFC-11]"   # the backpedal
    n = len(sim.alloc_calls)
    assert bfc.allocate_raw(256, 2 * MiB, no_retry(rt)) is None, "[BFC-11]"
    assert sim.alloc_calls[n:] == [2 * MiB] and sim.free_calls == [], (
        f"with no free region the refused extension made calls {sim.alloc_calls[n:]} and "
        f"released {sim.free_calls}, expected one call of {2 * MiB} and nothing released "
        f"[BFC-11]")


# --- BFC-12 ------------------------------------------------------------------------------

def _refusing(rt, clock, timeout_us):
    """Allocator whose sub-allocator refuses every region after the first; backpedal spent."""
    bfc, sim = make(rt, GiB, clock=clock, timeout_us=timeout_us)
    assert bfc.allocate_raw(256, 256) is not None, "[BFC-12]"      # region 1 MiB, next 2 MiB
    sim.fail = True
    # spends the backpedal
    assert bfc.allocate_raw(256, 2 * MiB, no_retry(rt)) is None, "[BFC-12]"
    return bfc, sim, len(sim.alloc_calls)


@pytest.mark.clause("BFC-12")
def test_no_retry_makes_one_attempt(rt):
    clock = VirtualClock(clause="BFC-12")
    bfc, sim, n = _refusing(rt, clock, T_10S)
    assert bfc.allocate_raw(256, 2 * MiB, no_retry(rt)) is None, "[BFC-12]"
    assert sim.alloc_calls[n:] == [2 * MiB] and clock.records == [], (
        f"no_retry_on_failure: calls {sim.alloc_calls[n:]}, waits {clock.records}, expected "
        f"one attempt and no wait [BFC-12]")


#: Run in a new process (the count of no-retry warnings is the process's): 12 no-retry
#: failures, alternately of two allocators with a limit of 0; prints, per failure, the
#: (level, message) of every record the runtime's loggers received during it.
NO_RETRY_PROBE = r"""
import importlib, json, logging, sys
rt = importlib.import_module(sys.argv[1])
records = []
top = sys.argv[1].split(".")[0]
class Keep(logging.Handler):   # on the root logger: a record is the runtime's by its name
    def emit(self, record):
        if record.name == top or record.name.startswith(top + "."):
            records.append(record)
logging.getLogger().addHandler(Keep())
logging.getLogger().setLevel(logging.DEBUG)
allocators = [rt.BFCAllocator(rt.SimulatedDeviceMemory(1 << 20), 0, True, name,
                              retry_timeout_us=0) for name in ("GPU_7_bfc", "GPU_8_bfc")]
out = []
for i in range(12):
    before = len(records)
    got = allocators[i % 2].allocate_raw(256, 256,
                                         rt.AllocationAttributes(no_retry_on_failure=True))
    out.append({"result": got,
                "records": [[r.levelno, r.getMessage()] for r in records[before:]]})
print(json.dumps(out))
"""
PROBE_TIMEOUT_S = 60


@pytest.mark.clause("BFC-12")
def test_the_first_10_no_retry_failures_of_a_process_log_a_warning(rt):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(spec.ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    try:
        done = subprocess.run([sys.executable, "-c", NO_RETRY_PROBE, rt.__name__], env=env,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"12 no-retry failures in a new process took over {PROBE_TIMEOUT_S} s "
                    f"[BFC-12]")
    assert done.returncode == 0, \
        f"12 no-retry failures in a new process: {done.stderr[-2000:]} [BFC-12]"
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    for i, failure in enumerate(failures):
        name = ("GPU_7_bfc", "GPU_8_bfc")[i % 2]
        warnings = [m for level, m in failure["records"] if level == logging.WARNING]
        if i < 10:
            assert failure["result"] is None and len(warnings) == 1 \
                and names_identifier(warnings[0], name), (
                f"no-retry failure {i + 1} of the process ({name}, limit 0) returned "
                f"{failure['result']} and logged the warnings {warnings}: expected None and "
                f"one warning naming {name} [BFC-12]")
        else:
            assert failure["result"] is None and warnings == [], (
                f"no-retry failure {i + 1} of the process ({name}) logged {warnings}: only "
                f"the first 10 of a process log a warning [BFC-12]")


@pytest.mark.clause("BFC-12")
def test_retry_with_zero_timeout_makes_three_attempts(rt):
    clock = VirtualClock(clause="BFC-12")
    bfc, sim, n = _refusing(rt, clock, 0)
    for attrs in (None, rt.AllocationAttributes()):
        start = len(sim.alloc_calls)
        assert bfc.allocate_raw(256, 2 * MiB, attrs) is None, "[BFC-12]"
        assert sim.alloc_calls[start:] == [2 * MiB] * 3, (
            f"allocate_raw(256, 2 MiB, {attrs}) with retry_timeout_us=0: calls "
            f"{sim.alloc_calls[start:]}, expected 3 attempts [BFC-12]")
    assert clock.records == [] or all(r.duration_us <= 0 for r in clock.records), "[BFC-12]"


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
@pytest.mark.parametrize("timeout_us", [T_10S, 1500, 999])   # not whole milliseconds too
def test_retry_waits_exactly_the_timeout(rt, timeout_us):
    clock = VirtualClock(auto_advance=True, clause="BFC-12")
    bfc, sim, n = _refusing(rt, clock, timeout_us)
    assert bfc.allocate_raw(256, 2 * MiB) is None, "[BFC-12]"
    assert sim.alloc_calls[n:] == [2 * MiB] * 4, (
        f"allocate_raw(256, 2 MiB) with a {timeout_us} µs retry and no frees: calls "
        f"{sim.alloc_calls[n:]}, expected 4 attempts [BFC-12]")
    waits = [r.duration_us for r in clock.records]
    assert waits == [timeout_us] and clock.now_us() == timeout_us, (
        f"waits {waits}, clock {clock.now_us()}, expected one wait of {timeout_us} µs "
        f"[BFC-12]")


class _FreeOnFirstReading(VirtualClock):
    """A manual virtual clock that, the first time the retrying thread reads it (after its
    second attempt failed, before its wait), has another thread free ``ptr`` and waits for
    that free to return: a free between a failed attempt and the wait."""

    def __init__(self) -> None:
        super().__init__()
        self.free = None             # set by the test: the free to make
        self.waiter = None           # the retrying thread's name
        self.freed = threading.Event()

    def now_us(self) -> int:
        if self.free is not None and threading.current_thread().name == self.waiter \
                and not self.freed.is_set():
            self.freed.set()
            t = threading.Thread(target=self.free, name="antman-test-freer", daemon=True)
            t.start()
            t.join(5)
        return super().now_us()


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # places the free between attempt and wait
def test_a_free_between_a_failed_attempt_and_the_wait_is_not_missed(rt):
    clock = _FreeOnFirstReading()
    bfc, sim = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    p = bfc.allocate_raw(256, MiB)                       # the whole pool
    clock.free, clock.waiter = (lambda: bfc.deallocate_raw(p)), "antman-test-waiter"
    t, out = _run(lambda: bfc.allocate_raw(256, 1000), "antman-test-waiter")
    try:
        t.join(5)
        assert clock.freed.is_set(), "the retrying allocation never read the clock [BFC-12]"
        assert not t.is_alive(), (
            "a free made after the failed attempt and before the wait was missed: the "
            "allocation waits for its deadline [BFC-12]")
        assert out == [p] and clock.now_us() == 0, (
            f"allocation returned {out} at {clock.now_us()} µs, expected {p:#x} at once "
            f"[BFC-12]")
    finally:
        clock.advance(T_10S + 1)                         # end a missed wait
        t.join(5)


def _run(target, name: str) -> tuple[threading.Thread, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(target()), name=name, daemon=True)
    t.start()
    return t, out


@pytest.mark.clause("BFC-12", "BFC-17")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_free_wakes_the_waiter_without_the_lock_held(rt):
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    p = bfc.allocate_raw(256, MiB)                       # the whole pool
    t, out = _run(lambda: bfc.allocate_raw(256, 1000), "antman-test-waiter")
    try:
        clock.wait_for_waiters(1, clause="BFC-12")
        # the lock is free while the waiter waits
        assert bfc.get_stats().bytes_in_use == MiB, "[BFC-17]"
        assert bfc.allocation_id(p) == 1, "[BFC-17]"
        assert bfc.allocate_raw(256, 256, no_retry(rt)) is None, "[BFC-17]"
        bfc.deallocate_raw(p)
        t.join(5)
        assert not t.is_alive(), "deallocate_raw did not wake the retrying allocation [BFC-12]"
        assert out == [p], f"woken allocation returned {out}, expected {p:#x} [BFC-12]"
        assert clock.now_us() == 0, (
            f"the wake needed the clock to advance ({clock.now_us()}) [BFC-12]")
    finally:
        clock.advance(T_10S)
        t.join(5)


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_retry_deadline_on_virtual_clock(rt):
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    bfc.allocate_raw(256, MiB)
    t, out = _run(lambda: bfc.allocate_raw(256, 1000), "antman-test-deadline")
    try:
        clock.wait_for_waiters(1, clause="BFC-12")
        clock.tick(T_10S - 1)
        assert "antman-test-deadline" in clock.waiting_threads(), (
            "the retry gave up before its 10 s deadline [BFC-12]")
        clock.advance(1)
        t.join(5)
        assert not t.is_alive() and out == [None], f"after the deadline: {out} [BFC-12]"
        assert [r.duration_us for r in clock.records] == [T_10S], "[BFC-12]"
    finally:
        clock.advance(2 * T_10S)
        t.join(5)


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # holds the retry in its wait
def test_only_the_final_attempt_reports_the_failure(rt, caplog):
    """The two attempts before the wait are quiet (TF's ``dump_log_on_failure`` is false
    until the final attempt): a retry that a free will soon satisfy logs nothing."""
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    p = bfc.allocate_raw(256, MiB)                       # the whole pool
    caplog.set_level(logging.WARNING)
    caplog.clear()
    t, out = _run(lambda: bfc.allocate_raw(256, 1000), "antman-test-quiet-retry")
    try:
        clock.wait_for_waiters(1, clause="BFC-12")
        logged = runtime_records(caplog, rt, logging.WARNING)
        assert not logged, (
            f"the attempts before the retry's wait logged {logged}: only the final attempt "
            f"may report the failure [BFC-12]")
    finally:
        clock.advance(2 * T_10S)
        t.join(5)
    assert not t.is_alive() and out == [None], f"after the deadline: {out} [BFC-12]"
    reported = runtime_records(caplog, rt, logging.WARNING, containing="GPU_0_bfc")
    assert reported, (f"the final attempt's failure logged no warning naming the allocator "
                      f"'GPU_0_bfc' (all records: {caplog.records}) [BFC-12]")
    bfc.deallocate_raw(p)


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
@pytest.mark.parametrize("kind", ["BFCAllocator", "GPUBFCAllocator"])
def test_default_retry_timeout_is_10_s(rt, tf_env, kind):
    clock = VirtualClock(auto_advance=True, clause="BFC-12")
    sim = rt.SimulatedDeviceMemory(GiB)
    if kind == "BFCAllocator":
        bfc = rt.BFCAllocator(sim, MiB, False, "GPU_0_bfc", clock=clock)
    else:
        bfc = rt.GPUBFCAllocator(sim, MiB, "GPU_0_bfc", clock=clock)
    assert bfc.allocate_raw(256, MiB) is not None, f"{kind}: allocate_raw(256, 1 MiB) [BFC-12]"
    assert bfc.allocate_raw(256, 256) is None, f"{kind}: a request beyond the pool [BFC-12]"
    waits = [r.duration_us for r in clock.records]
    assert waits == [T_10S], (f"{kind} built without retry_timeout_us waited {waits} for a "
                              f"request it cannot meet, expected one wait of {T_10S} µs "
                              f"[BFC-12]")


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_retry_deadline_counts_from_the_second_failed_attempt(rt):
    """Attempts that take clock time (a slow sub-allocator): the deadline is set after the
    second attempt failed, so the one wait is the whole T whatever the attempts took."""
    clock = VirtualClock(auto_advance=True, clause="BFC-12")
    bfc, sim, n = _refusing(rt, clock, T_10S)
    attempt_us = 3_000

    class Slow:
        def alloc(self, alignment, num_bytes):
            clock.advance(attempt_us)
            return sim.alloc(alignment, num_bytes)

        def free(self, ptr, num_bytes):
            sim.free(ptr, num_bytes)

    slow = rt.BFCAllocator(Slow(), GiB, True, "GPU_0_bfc", clock=clock,
                           retry_timeout_us=T_10S)
    sim.fail = False
    first = slow.allocate_raw(256, 256)                     # region 1 MiB, next 2 MiB
    sim.fail = True
    spent = slow.allocate_raw(256, 2 * MiB, no_retry(rt))   # spends the backpedal
    assert first is not None and spent is None, f"setup: {first}, {spent} [BFC-12]"
    start, records, calls = clock.now_us(), len(clock.records), len(sim.alloc_calls)
    assert slow.allocate_raw(256, 2 * MiB) is None, "a refused request succeeded [BFC-12]"
    waits = [r.duration_us for r in clock.records[records:]]
    assert sim.alloc_calls[calls:] == [2 * MiB] * 4, (
        f"attempts {sim.alloc_calls[calls:]}, expected 4 [BFC-12]")
    assert waits == [T_10S], (
        f"with attempts of {attempt_us} µs each the retry waited {waits}, expected one wait of "
        f"T = {T_10S} µs: the deadline is now + T after the second failed attempt [BFC-12]")
    assert clock.now_us() - start == 4 * attempt_us + T_10S, (
        f"the request took {clock.now_us() - start} µs of clock time, expected 4 attempts of "
        f"{attempt_us} plus T [BFC-12]")


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_each_free_wakes_every_waiter_of_its_time(rt):
    """Two requests wait; the first free wakes both (one is served, the other waits again);
    the second free wakes the one left. The count of waiters must stay exact throughout."""
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    with precondition("BFC-4", "two 512 KiB chunks fill the 1 MiB pool (split rule)"):
        p1 = bfc.allocate_raw(256, 512 * KiB)
        p2 = bfc.allocate_raw(256, 512 * KiB, no_retry(rt))
        assert bfc.memory_map().total_region_allocated_bytes == MiB and None not in (p1, p2), \
            f"two 512 KiB chunks fill the 1 MiB pool: {p1}, {p2} [BFC-4]"
    waiters = [_run(lambda: bfc.allocate_raw(256, 512 * KiB), f"antman-test-waiter-{i}")
               for i in range(2)]
    try:
        clock.wait_for_waiters(2, clause="BFC-12")
        bfc.deallocate_raw(p1)
        limit = time.monotonic() + 5            # real time, generous: one waiter is served
        while not any(out for _, out in waiters) and time.monotonic() < limit:
            time.sleep(0.002)
        # the other is back in its wait: a third wait began (its first wait, already woken,
        # must not count, or the second free could serve it without any wake-up)
        while len(clock.records) < 3 and time.monotonic() < limit:
            time.sleep(0.002)
        clock.wait_for_waiters(1, clause="BFC-12")
        assert len(clock.records) == 3, (
            f"after the first free the unserved waiter did not wait again: "
            f"{len(clock.records)} waits [BFC-12]")
        served = [out[0] for t, out in waiters if out]
        assert served == [p1], f"after the first free the waiters got {served} [BFC-12]"
        bfc.deallocate_raw(p2)
        for t, _ in waiters:
            t.join(5)
        results = sorted(out[0] for _, out in waiters if out)
        assert all(not t.is_alive() for t, _ in waiters) and results == sorted([p1, p2]), (
            f"the second free did not wake the remaining waiter: results {results} [BFC-12]")
        assert clock.now_us() == 0, "a waiter needed the clock to advance [BFC-12]"
        # And again: a later waiter is woken as the first ones were.
        t3, out3 = _run(lambda: bfc.allocate_raw(256, 512 * KiB), "antman-test-waiter-3")
        clock.wait_for_waiters(1, clause="BFC-12")
        bfc.deallocate_raw(p1)
        t3.join(5)
        assert out3 == [p1], f"a third waiter, after two were served, got {out3} [BFC-12]"
    finally:
        clock.advance(2 * T_10S)
        for t, _ in waiters:
            t.join(5)


# --- BFC-13 / BFC-14 / BFC-15 ------------------------------------------------------------

@pytest.mark.clause("BFC-13")
def test_stats_count_chunk_sizes(rt):
    bfc, _, a, c, e = _holes(rt)   # in use: 3 × 256; peak was 1024+256+2048+256+1024+256
    s = bfc.get_stats()
    assert (s.num_allocs, s.bytes_in_use, s.peak_bytes_in_use, s.largest_alloc_size) == (
        6, 768, 4864, 2048), f"get_stats() after the hole layout: {s} [BFC-13]"
    p = bfc.allocate_raw(256, 1025)    # served by the unsplit 2048 hole? no: best fit 2048
    s = bfc.get_stats()
    # rounded 1280: the 1024 holes are too small; the 2048 hole is not split → 2048 counted
    assert (s.num_allocs, s.bytes_in_use, s.peak_bytes_in_use, s.largest_alloc_size) == (
        7, 768 + 2048, 4864, 2048), f"get_stats() after allocate_raw(256, 1025): {s} [BFC-13]"
    bfc.deallocate_raw(p)
    assert bfc.get_stats().bytes_in_use == 768, "[BFC-13]"
    assert (s.bytes_limit, s.bytes_reserved, s.peak_bytes_reserved,
            s.bytes_reservable_limit) == (MiB, 0, 0, None), f"other fields {s} [BFC-13]"


@pytest.mark.clause("BFC-13")
def test_failed_allocations_change_no_stats(rt):
    bfc, _ = make(rt, MiB, growth=False)
    bfc.allocate_raw(256, 4096)
    before = bfc.get_stats()
    assert bfc.allocate_raw(256, MiB) is None, "[BFC-13]"
    assert bfc.get_stats() == before, f"a failed allocation changed stats [BFC-13]"
    assert bfc.get_stats() is not bfc.get_stats(), "get_stats() must return a new object [BFC-13]"


@pytest.mark.clause("BFC-14", "BFC-15")
def test_clear_stats(rt):
    bfc, _ = make(rt, 64 * MiB)
    ps = [bfc.allocate_raw(256, n) for n in (1000, 5000, 300)]
    bfc.deallocate_raw(ps[1])
    bfc.clear_stats()
    s = bfc.get_stats()
    assert (s.num_allocs, s.bytes_in_use, s.peak_bytes_in_use, s.largest_alloc_size,
            s.bytes_limit) == (0, 1024 + 512, 1024 + 512, 0, 64 * MiB), (
        f"get_stats() after clear_stats(): {s} [BFC-14]")
    q = bfc.allocate_raw(256, 256)
    assert bfc.allocation_id(q) == 4, (f"allocation id after clear_stats: "
                                       f"{bfc.allocation_id(q)}, expected 4 [BFC-15]")


@pytest.mark.clause("BFC-15")
def test_allocation_ids_and_sizes(rt):
    bfc, _ = make(rt, 64 * MiB)
    assert bfc.tracks_allocation_sizes() is True, "[BFC-15]"
    sizes = [1, 300, 256, 70000, 5]
    ptrs = [bfc.allocate_raw(256, n) for n in sizes]
    for i, (p, n) in enumerate(zip(ptrs, sizes), start=1):
        assert (bfc.allocation_id(p), bfc.requested_size(p), bfc.allocated_size(p)) == (
            i, n, rounded(n)), f"queries of allocation {i} ({n} bytes) [BFC-15]"
    assert bfc.allocate_raw(256, GiB) is None, "[BFC-15]"        # failures consume no id
    bfc.deallocate_raw(ptrs[1])
    q = bfc.allocate_raw(256, 300)
    assert q == ptrs[1] and bfc.allocation_id(q) == 6, (
        f"re-allocation of a freed chunk: id {bfc.allocation_id(q)}, expected 6 (never "
        f"reused) [BFC-15]")


@pytest.mark.clause("BFC-15")
def test_chunks_never_handed_out_ask_for_nothing(rt):
    """The free rest of a split was never asked for: requested size 0 and allocation id -1,
    in the queries as in the memory map, while a freed chunk keeps its stale size."""
    bfc, _ = make(rt, 64 * MiB)
    a = bfc.allocate_raw(256, 100)                 # region of 1 MiB split: rest at a + 256
    b = bfc.allocate_raw(256, 2 * MiB)             # region of 2 MiB, whole (no split)
    bfc.deallocate_raw(b)
    rest = a + 256
    assert (bfc.requested_size(rest), bfc.allocation_id(rest)) == (0, -1), (
        f"the free rest of a split: requested_size {bfc.requested_size(rest)}, allocation_id "
        f"{bfc.allocation_id(rest)}, expected 0 and -1 [BFC-15]")
    assert bfc.requested_size(b) == 2 * MiB, \
        f"a freed chunk's requested_size {bfc.requested_size(b)}, expected the stale 2 MiB [BFC-15]"
    rest_chunks = [c for r in bfc.memory_map().regions for c in r.chunks if c.ptr == rest]
    assert [(c.requested_size, c.allocation_id) for c in rest_chunks] == [(0, -1)], (
        f"memory_map of the free rest of a split: {rest_chunks}, expected requested_size 0 "
        f"and allocation_id -1 [BFC-15]")
    # A split after a merge: TF recycles the merged chunk's slot (which asked for 1000) for
    # the rest; the rest was still never handed out.
    x = bfc.allocate_raw(256, 100)                 # x at rest, 256
    y = bfc.allocate_raw(256, 1000)                # x + 256, 1024
    z = bfc.allocate_raw(256, 300)                 # x + 1280, 512
    bfc.deallocate_raw(x)
    bfc.deallocate_raw(y)                          # merges into x: one free chunk of 1280
    merged = [c.size for r in bfc.memory_map().regions for c in r.chunks if c.ptr == x]
    precondition_holds("BFC-5", merged == [1280],
                       f"freeing y beside the free x leaves one free chunk of 1280 bytes at x "
                       f"(chunks at x: {merged})")
    assert bfc.allocate_raw(256, 256) == x, "best fit of 256 bytes [BFC-3]"
    assert (bfc.requested_size(x + 256), bfc.allocation_id(x + 256)) == (0, -1), (
        f"the free rest of a split made after a merge: requested_size "
        f"{bfc.requested_size(x + 256)}, allocation_id {bfc.allocation_id(x + 256)}, expected "
        f"0 and -1 [BFC-15]")
    assert z is not None, "[BFC-15]"


# --- BFC-16 ------------------------------------------------------------------------------

@pytest.mark.clause("BFC-16")
def test_memory_map_and_bin_debug_info(rt):
    bfc, _ = make(rt, 64 * MiB)
    a = bfc.allocate_raw(256, 100)
    b = bfc.allocate_raw(256, 1000)
    c = bfc.allocate_raw(256, 4000)
    bfc.deallocate_raw(b)
    # expected layout of the first 1 MiB region
    layout = [(a, 256, 100, True, 1), (a + 256, 1024, None, False, -1),
              (a + 1280, 4096, 4000, True, 3), (a + 5376, MiB - 5376, None, False, -1)]
    mm = bfc.memory_map()
    assert (mm.memory_limit, mm.total_region_allocated_bytes, mm.next_region_size) == (
        64 * MiB, MiB, 2 * MiB), f"memory_map header {mm} [BFC-16]"
    assert len(mm.regions) == 1 and (mm.regions[0].ptr, mm.regions[0].size) == (a, MiB), "[BFC-16]"
    got = mm.regions[0].chunks
    assert len(got) == len(layout), f"chunks {got} [BFC-16]"
    for chunk, (ptr, size, req, in_use, aid) in zip(got, layout):
        expected_bin = -1 if in_use else bin_num(size)
        assert (chunk.ptr, chunk.size, chunk.in_use, chunk.allocation_id, chunk.bin_num) == (
            ptr, size, in_use, aid, expected_bin), f"chunk {chunk} [BFC-16]"
        if in_use:
            assert chunk.requested_size == req, "[BFC-16]"
    expected = [[0, 0, 0, 0, 0] for _ in range(21)]
    for ptr, size, req, in_use, _ in layout:
        e = expected[bin_num(size)]
        e[1] += size
        e[4] += 1
        if in_use:
            e[0] += size
            e[2] += req
            e[3] += 1
    got_bins = [[i.total_bytes_in_use, i.total_bytes_in_bin, i.total_requested_bytes_in_use,
                 i.total_chunks_in_use, i.total_chunks_in_bin] for i in bfc.get_bin_debug_info()]
    assert got_bins == expected, f"get_bin_debug_info() {got_bins}, expected {expected} [BFC-16]"
    assert c is not None, "[BFC-16]"


@pytest.mark.clause("BFC-16")
def test_regions_in_ascending_address_order(rt):
    class Descending(RecordingSub):
        def alloc(self, alignment, num_bytes):
            self.calls.append((alignment, num_bytes))
            self.next -= num_bytes + 4096
            return self.next

    sub = Descending(base=1 << 44)
    bfc = rt.BFCAllocator(sub, GiB, True, "GPU_0_bfc", retry_timeout_us=0)
    for n in (MiB, 2 * MiB, 4 * MiB):
        bfc.allocate_raw(256, n)
    ptrs = [r.ptr for r in bfc.memory_map().regions]
    assert ptrs == sorted(ptrs) and len(ptrs) == 3, f"region order {ptrs} [BFC-16]"


# --- BFC-17 ------------------------------------------------------------------------------

@pytest.mark.clause("BFC-17")
@pytest.mark.parametrize("path", ["free chunk", "growth"])
def test_best_fit_runs_under_the_allocators_lock(rt, monkeypatch, path):
    """The best-fit search takes a chunk out of its bin: it runs with the allocator's lock
    held, whether a free chunk is found at once or the pool grows first, so a concurrent
    allocation never picks the same chunk. The lock is watched (fixtures/interleave.py),
    and each call of the search records whether the allocating thread held it."""
    from fixtures.interleave import lock_held_at_call, watch_lock
    bfc, _ = make(rt, 64 * MiB)
    if path == "free chunk":
        bfc.deallocate_raw(bfc.allocate_raw(256, 4 * MiB))     # a free chunk to find
    watched = watch_lock(monkeypatch, bfc, "_lock", "the BFC allocator's lock")
    ptr, held = lock_held_at_call(lambda: bfc.allocate_raw(256, 1000), "_find_chunk_ptr",
                                  watched)
    assert ptr is not None, f"allocate_raw(256, 1000) on a 64 MiB allocator ({path}) [BFC-1]"
    if not held:
        pytest.skip("the race is forced through the best-fit search _find_chunk_ptr of the "
                    "reference's design; this runtime has none")
    assert all(held), (
        f"the best-fit search ran {held.count(False)} of {len(held)} time(s) without the "
        f"allocator's lock ({path}): a concurrent allocation can pick the same chunk [BFC-17]")


#: Every public method of the BFC allocator, as called on an allocator holding ``p``.
BFC_METHODS = {
    "allocate_raw": lambda bfc, p: bfc.allocate_raw(256, 1000),
    "deallocate_raw": lambda bfc, p: bfc.deallocate_raw(p),
    "requested_size": lambda bfc, p: bfc.requested_size(p),
    "allocated_size": lambda bfc, p: bfc.allocated_size(p),
    "allocation_id": lambda bfc, p: bfc.allocation_id(p),
    "get_stats": lambda bfc, p: bfc.get_stats(),
    "clear_stats": lambda bfc, p: bfc.clear_stats(),
    "memory_map": lambda bfc, p: bfc.memory_map(),
    "get_bin_debug_info": lambda bfc, p: bfc.get_bin_debug_info(),
}


@pytest.mark.clause("BFC-17")
@pytest.mark.parametrize("method", sorted(BFC_METHODS))
def test_every_method_takes_the_allocators_lock(rt, monkeypatch, method):
    """TF holds ``lock_`` in every public method: a query without it reads a chunk or the
    statistics while another thread splits, merges or counts (a torn answer), a change
    without it loses a concurrent one. Forced, not hoped for: the lock is watched
    (fixtures/interleave.py) and each line the method runs records whether the calling
    thread held it; some line must."""
    from fixtures.interleave import lock_held_in, watch_lock
    bfc, _ = make(rt, 64 * MiB)
    p = bfc.allocate_raw(256, 1000)
    watched = watch_lock(monkeypatch, bfc, "_lock", "the BFC allocator's lock")
    _, held = lock_held_in(lambda: BFC_METHODS[method](bfc, p), method, watched)
    if not held:
        pytest.skip(f"the check follows the reference's design ({method} a method of the "
                    f"allocator's class); this runtime's {method} ran no line of its own")
    assert any(held), (f"{method} ran {len(held)} line(s), none with the allocator's lock "
                       f"held: a concurrent call can interleave with it [BFC-17]")


@pytest.mark.clause("BFC-12", "BFC-17")
@pytest.mark.capability("virtual_clock")   # the retry waits on the clock for the free
def test_retried_attempts_run_under_the_allocators_lock(rt, monkeypatch):
    """An attempt after a wait (BFC-12) searches the bins as the first one does: with the
    lock held, so a concurrent allocation never picks the same chunk (BFC-17)."""
    from fixtures.interleave import lock_held_at_call, watch_lock
    clock = VirtualClock(clause="BFC-12")
    bfc, _ = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    p = bfc.allocate_raw(256, MiB)                       # the whole pool: the next one waits
    watched = watch_lock(monkeypatch, bfc, "_lock", "the BFC allocator's lock")

    def free_once_waiting() -> None:
        clock.wait_for_waiters(1, clause="BFC-12")
        bfc.deallocate_raw(p)

    freer = threading.Thread(target=free_once_waiting, name="antman-test-freer", daemon=True)
    freer.start()
    try:
        ptr, held = lock_held_at_call(lambda: bfc.allocate_raw(256, 1000), "_find_chunk_ptr",
                                      watched)
    finally:
        freer.join(10)
        clock.advance(T_10S + 1)
    assert ptr == p, f"the retried allocation returned {ptr}, expected {p:#x} [BFC-12]"
    if len(held) < 2:
        pytest.skip("the race is forced through the best-fit search _find_chunk_ptr of the "
                    "reference's design; this runtime has none")
    assert all(held), (
        f"the best-fit search ran {held.count(False)} of {len(held)} time(s) without the "
        f"allocator's lock, the retried attempts among them: a concurrent allocation can "
        f"pick the same chunk [BFC-17]")


@pytest.mark.clause("BFC-17")
def test_concurrent_allocations_do_not_overlap(rt):
    bfc, sim = make(rt, 16 * MiB, gc=True)
    errors: list[str] = []
    held: list[tuple[int, int]] = []
    lock = threading.Lock()

    def worker(seed: int) -> int:
        """Returns the number of successful allocations."""
        rng = random.Random(seed)
        mine = []
        served = 0
        for _ in range(400):
            if mine and rng.random() < 0.5:
                p = mine.pop(rng.randrange(len(mine)))
                with lock:
                    held.remove((p, bfc.allocated_size(p)))
                bfc.deallocate_raw(p)
            else:
                p = bfc.allocate_raw(256, rng.choice([256, 1000, 5000, 70000]), no_retry(rt))
                if p is None:
                    continue
                mine.append(p)
                served += 1
                size = bfc.allocated_size(p)
                with lock:
                    for q, qs in held:
                        if q < p + size and p < q + qs:
                            errors.append(f"{p:#x}+{size} overlaps {q:#x}+{qs}")
                    held.append((p, size))
        for p in mine:
            with lock:
                held.remove((p, bfc.allocated_size(p)))
            bfc.deallocate_raw(p)
        return served

    runs = [run_in_thread(lambda s=s: worker(s), f"antman-test-{s}") for s in range(2)]
    for t, out in runs:
        assert joined(t, 30), f"worker {t.name} did not finish in 30 s [BFC-17]"
        assert "error" not in out, f"worker {t.name} raised {out.get('error')!r} [BFC-17]"
    assert not errors, f"concurrent allocations overlap: {errors[:3]} [BFC-17]"
    assert sum(out["result"] for _, out in runs) > 0, \
        "no allocation succeeded in either worker: nothing was checked [BFC-17]"
    assert bfc.get_stats().bytes_in_use == 0, "[BFC-17]"
    assert_bfc_valid(bfc, sim)


# --- fault injection leaves a valid allocator ----------------------------------------------

@pytest.mark.clause("BFC-8", "BFC-10", "BFC-11")
@pytest.mark.parametrize("fault", ["nth", "above", "cap"])
def test_injected_faults_leave_a_valid_allocator(rt, fault):
    sim = rt.SimulatedDeviceMemory(GiB)
    sub = FaultInjectingSubAllocator(sim)
    bfc = rt.BFCAllocator(sub, 64 * MiB, True, "GPU_0_bfc", True, retry_timeout_us=0)
    rng = random.Random(fault)
    live = []
    for step in range(200):
        if step == 20:
            {"nth": lambda: sub.fail_nth_call(2), "above": lambda: sub.fail_above(2 * MiB),
             "cap": lambda: sub.cap_capacity(sim.bytes_in_use + 3 * MiB)}[fault]()
        if live and rng.random() < 0.4:
            bfc.deallocate_raw(live.pop(rng.randrange(len(live))))
        else:
            p = bfc.allocate_raw(256, rng.choice([300, 9000, 200 * KiB, 3 * MiB]), no_retry(rt))
            if p is not None:
                live.append(p)
        assert_bfc_valid(bfc, sim)
    assert sub.refused, f"the {fault} injection never refused a call [BFC-10]"
    sub.reset()
    for p in live:
        bfc.deallocate_raw(p)
    assert bfc.get_stats().bytes_in_use == 0, "[BFC-13]"
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_free_between_failed_attempt_and_wait_is_not_missed(rt):
    inner = VirtualClock(clause="BFC-12")
    state: dict = {}

    class FreeBeforeWait:
        """A clock that frees memory (from another thread) when the retry first reads the time.

        The retry reads the clock after a failed attempt to set its deadline, before it
        waits: a free made there must not be lost.
        """

        def now_us(self):
            if "p" in state and "freed" not in state:
                state["freed"] = True
                t = threading.Thread(target=lambda: state["bfc"].deallocate_raw(state["p"]),
                                     name="antman-test-freer")
                t.start()
                t.join(5)
            return inner.now_us()

        def time_s(self):
            return inner.time_s()

        def sleep_us(self, duration_us, cancel=None):
            return inner.sleep_us(duration_us, cancel)

        def wait(self, event, timeout_us):
            return inner.wait(event, timeout_us)

    bfc, _ = make(rt, MiB, growth=False, clock=FreeBeforeWait(), timeout_us=T_10S)
    state["bfc"], state["p"] = bfc, bfc.allocate_raw(256, MiB)
    t, out = _run(lambda: bfc.allocate_raw(256, 1000), "antman-test-late-free")
    try:
        t.join(5)
        assert not t.is_alive(), ("a free made between the failed attempt and the wait was "
                                  "missed: the allocation kept waiting [BFC-12]")
        assert out == [state["p"]] and inner.now_us() == 0, f"result {out} [BFC-12]"
    finally:
        inner.advance(2 * T_10S)
        t.join(5)


def _gc_scenario(bfc) -> bool:
    """True when the allocator released a free region to serve a request (GC on)."""
    a = bfc.allocate_raw(256, MiB)
    bfc.allocate_raw(256, 2 * MiB)
    bfc.deallocate_raw(a)
    return bfc.allocate_raw(256, 2 * MiB, None) is not None


@pytest.mark.clause("BFC-18", "ENV-3")
@pytest.mark.capability("env")
@pytest.mark.parametrize("growth_env,option,growth", [
    (None, False, False), (None, True, True), ("true", False, True), ("false", True, False),
    ("TRUE", True, True), ("yes", False, False),
])
def test_gpu_bfc_allow_growth_from_env(rt, tf_env, growth_env, option, growth):
    if growth_env is not None:
        tf_env.set("TF_FORCE_GPU_ALLOW_GROWTH", growth_env)
    bfc = rt.GPUBFCAllocator(rt.SimulatedDeviceMemory(GiB), 4 * MiB, "GPU_0_bfc",
                             allow_growth=option, retry_timeout_us=0)
    assert isinstance(bfc, rt.BFCAllocator) and bfc.name == "GPU_0_bfc", "[BFC-18]"
    expected = MiB if growth else 4 * MiB
    assert bfc.memory_map().next_region_size == expected, (
        f"GPUBFCAllocator(allow_growth={option}) with TF_FORCE_GPU_ALLOW_GROWTH="
        f"{growth_env!r}: next region {bfc.memory_map().next_region_size}, expected "
        f"{expected} [BFC-18]")


@pytest.mark.clause("BFC-18")
@pytest.mark.capability("env")
def test_gpu_bfc_allow_growth_defaults_to_off(rt, tf_env):
    """``allow_growth`` left out is False: with TF_FORCE_GPU_ALLOW_GROWTH unset the first
    region is the whole memory (BFC-7 without growth), as TF's ``GPUOptions`` default."""
    bfc = rt.GPUBFCAllocator(rt.SimulatedDeviceMemory(GiB), 4 * MiB, "GPU_0_bfc",
                             retry_timeout_us=0)
    got = bfc.memory_map().next_region_size
    assert got == 4 * MiB, (
        f"GPUBFCAllocator without allow_growth, TF_FORCE_GPU_ALLOW_GROWTH unset: next region "
        f"{got}, expected the whole 4 MiB (allow_growth=False) [BFC-18]")


@pytest.mark.clause("BFC-18", "ENV-4")
@pytest.mark.capability("env")
@pytest.mark.parametrize("gc_env,gc", [(None, True), ("true", True), ("false", False),
                                       ("False", True), ("", True)])
def test_gpu_bfc_garbage_collection_from_env(rt, tf_env, gc_env, gc):
    if gc_env is not None:
        tf_env.set("TF_ENABLE_GPU_GARBAGE_COLLECTION", gc_env)
    sim = rt.SimulatedDeviceMemory(GiB)
    bfc = rt.GPUBFCAllocator(sim, 4 * MiB, "GPU_0_bfc", allow_growth=True, retry_timeout_us=0)
    served = _gc_scenario(bfc)
    assert served == gc, (
        f"TF_ENABLE_GPU_GARBAGE_COLLECTION={gc_env!r}: the request that needs GC was "
        f"{'served' if served else 'refused'}, expected GC {'on' if gc else 'off'} [BFC-18]")
    assert (len(sim.free_calls) == 1) == gc, "[BFC-18]"
    assert bfc.garbage_collection is gc, (
        f"TF_ENABLE_GPU_GARBAGE_COLLECTION={gc_env!r}: garbage_collection is "
        f"{bfc.garbage_collection!r}, expected {gc} [BFC-18]")


# --- simulated memory (API-3) ----------------------------------------------------------------

@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_simulated_memory(rt, kind):
    mem = getattr(rt, kind)(10 * KiB)
    p = mem.alloc(256, 4096)
    q = mem.alloc(256, 4096)
    assert p % 256 == 0 and q % 256 == 0, (
        f"{kind}.alloc returned {p:#x}, {q:#x}: not 256-aligned [API-3]")
    assert q >= p + 4096 + 1 or p >= q + 4096 + 1, (
        f"{kind}: regions {p:#x} and {q:#x} of 4096 bytes are adjacent or overlap [API-3]")
    assert mem.alloc(256, 4096) is None, f"{kind}: alloc beyond capacity 10 KiB [API-3]"
    assert mem.alloc_calls == [4096, 4096, 4096] and mem.bytes_in_use == 8192, "[API-3]"
    assert mem.live_regions == {p: 4096, q: 4096}, "[API-3]"
    mem.free(p, 4096)
    assert mem.free_calls == [(p, 4096)] and mem.bytes_in_use == 4096, "[API-3]"
    mem.fail = True
    assert mem.alloc(256, 256) is None, f"{kind}.alloc with fail=True [API-3]"
    mem.fail = False
    mem.capacity = 4096
    assert mem.alloc(256, 256) is None, f"{kind}.alloc above a lowered capacity [API-3]"
    mem.capacity = 8192
    assert mem.alloc(256, 256) is not None, "[API-3]"


@pytest.mark.clause("API-3")
def test_memory_map_and_bin_debug_info_are_immutable(rt):
    bfc, _ = make(rt, MiB, growth=False)
    p = bfc.allocate_raw(256, 1024)
    mm = bfc.memory_map()
    region = mm.regions[0]
    chunk = region.chunks[0]
    info = bfc.get_bin_debug_info()[0]
    for value, field in ((mm, "memory_limit"), (mm, "regions"), (region, "ptr"),
                         (region, "size"), (region, "chunks"), (chunk, "size"),
                         (chunk, "in_use"), (info, "total_bytes_in_use")):
        before = getattr(value, field)
        name = f"{type(value).__name__}.{field}"
        with raises(AttributeError, "API-3", f"assigning {name}"):
            setattr(value, field, 7)
        assert getattr(value, field) == before, (
            f"{name} changed from {before!r} to {getattr(value, field)!r} [API-3]")
    assert bfc.memory_map() == mm, "the memory map changed with no call [API-3]"
    kinds = [type(mm.regions).__name__] + [type(r.chunks).__name__ for r in mm.regions]
    assert kinds == ["tuple"] * (1 + len(mm.regions)), (
        f"memory_map().regions and each region's chunks are {kinds}, expected tuples: a "
        f"snapshot a caller could change in place [API-3]")
    try:
        hash(mm)
    except TypeError as exc:
        pytest.fail(f"hash(memory_map()) raised {exc!r}: a snapshot is a hashable value [API-3]")
    bfc.deallocate_raw(p)


@pytest.mark.clause("API-3")
def test_allocator_stats_and_attributes_defaults(rt):
    s = rt.AllocatorStats()
    got = (s.num_allocs, s.bytes_in_use, s.peak_bytes_in_use, s.largest_alloc_size,
           s.bytes_limit, s.bytes_reserved, s.peak_bytes_reserved, s.bytes_reservable_limit)
    assert got == (0, 0, 0, 0, None, 0, 0, None), f"AllocatorStats() = {got} [API-3]"
    assert rt.AllocationAttributes().no_retry_on_failure is False, \
        "AllocationAttributes() must retry by default [API-3]"
    attrs = rt.AllocationAttributes(no_retry_on_failure=True)
    with raises(AttributeError, "API-3", "assigning AllocationAttributes.no_retry_on_failure"):
        attrs.no_retry_on_failure = False
    assert attrs.no_retry_on_failure is True, \
        f"AllocationAttributes(True) changed to {attrs.no_retry_on_failure!r} [API-3]"
    b = rt.BinDebugInfo()
    got = (b.total_bytes_in_use, b.total_bytes_in_bin, b.total_requested_bytes_in_use,
           b.total_chunks_in_use, b.total_chunks_in_bin)
    assert got == (0, 0, 0, 0, 0), f"BinDebugInfo() = {got}, expected every field 0 [API-3]"


_INTERFACE_METHODS = {
    "name": property(lambda self: "probe"),
    "allocate_raw": lambda self, alignment, num_bytes, attributes=None: None,
    "deallocate_raw": lambda self, ptr: None,
    "alloc": lambda self, alignment, num_bytes: None,
    "free": lambda self, ptr, num_bytes: None,
}


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("base,methods", [
    ("Allocator", ("name", "allocate_raw", "deallocate_raw")),
    ("SubAllocator", ("alloc", "free"))], ids=["Allocator", "SubAllocator"])
def test_allocator_interfaces_are_abstract(rt, base, methods):
    """TF's Allocator (Name, AllocateRaw, DeallocateRaw) and SubAllocator (Alloc, Free) have
    pure virtual methods: a subclass that forgets one cannot be made, instead of failing (or
    answering None) at its first use."""
    interface = getattr(rt, base)
    whole = type(f"Whole{base}", (interface,), {m: _INTERFACE_METHODS[m] for m in methods})
    whole()     # every method defined: it can be made
    for missing in methods:
        partial = type(f"{base}Without_{missing}", (interface,),
                       {m: _INTERFACE_METHODS[m] for m in methods if m != missing})
        with raises(TypeError, "API-3",
                    f"instantiating a subclass of {base} that does not define {missing}"):
            partial()


@pytest.mark.clause("API-3")
def test_a_minimal_allocator_has_tf_defaults(rt):
    """TF's ``Allocator`` answers for a subclass that overrides only the pure virtual
    methods: it tracks no sizes, every allocation id is 0 and it has no statistics."""
    minimal = type("MinimalAllocator", (rt.Allocator,),
                   {m: _INTERFACE_METHODS[m] for m in ("name", "allocate_raw",
                                                       "deallocate_raw")})()
    got = (minimal.tracks_allocation_sizes(), minimal.allocation_id(4096), minimal.get_stats())
    assert got == (False, 0, None), (
        f"an Allocator subclass defining only name, allocate_raw and deallocate_raw: "
        f"(tracks_allocation_sizes(), allocation_id(4096), get_stats()) = {got}, expected "
        f"TF's defaults (False, 0, None) [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("query", ["requested_size", "allocated_size"])
def test_a_minimal_allocator_refuses_size_queries(rt, query):
    """TF's ``Allocator::RequestedSize`` CHECK-fails ("allocator doesn't track sizes") and
    ``AllocatedSize`` defaults to it: an allocator that tracks no sizes has no answer, and
    one that gave a size (or None) would be taken for one that tracks them."""
    methods = {m: _INTERFACE_METHODS[m] for m in ("allocate_raw", "deallocate_raw")}
    minimal = type("MinimalAllocator", (rt.Allocator,),
                   {**methods, "name": property(lambda self: "untracked_probe")})()
    with raises(NotImplementedError, "API-3",
                f"{query}(4096) of an allocator that does not track sizes") as caught:
        getattr(minimal, query)(4096)
    assert names_identifier(caught.value, "untracked_probe"), (
        f"{query}'s NotImplementedError {str(caught.value)!r} does not name the allocator "
        f"'untracked_probe' [API-3]")


@pytest.mark.clause("API-3")
def test_simulated_memories_never_collide(rt):
    mems = [rt.SimulatedDeviceMemory(MiB), rt.SimulatedDeviceMemory(MiB),
            rt.SimulatedHostMemory(MiB), rt.SimulatedHostMemory(MiB)]
    spans = []
    for m in mems:
        for _ in range(3):
            p = m.alloc(256, 256 * KiB)
            spans.append((p, p + 256 * KiB))
    spans.sort()
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 < b0, f"regions [{a0:#x}, {a1:#x}) and [{b0:#x}, {b1:#x}) touch [API-3]"


@pytest.mark.clause("API-3")
def test_device_regions_never_overlap_host_regions_however_many_instances(rt):
    """A process may make very many simulated memories (a long stateful campaign makes a
    device and a host memory per example): up to 2^17 device memories, one region each, made
    while host memories hold theirs, never hand out an address inside a host region, so a
    host fallback pointer can never be taken for a device one (VMEM-7). The loop ends early
    once the regions, having wrapped around below the first one, reach it again: the next
    instances would repeat the addresses already checked."""
    hosts = [rt.SimulatedHostMemory(MiB) for _ in range(4)]
    host_regions = [(p, p + 4 * KiB) for p in (h.alloc(256, 4 * KiB) for h in hosts)]
    lowest, highest = min(r[0] for r in host_regions), max(r[1] for r in host_regions)
    device_kind = rt.SimulatedDeviceMemory
    first, wrapped = None, False
    for i in range(1 << 17):
        p = device_kind(MiB).alloc(256, 4 * KiB)
        if first is None:
            first = p
        elif p < first:
            wrapped = True
        elif wrapped:
            break
        if p < highest and p + 4 * KiB > lowest:
            for h0, h1 in host_regions:
                assert p + 4 * KiB <= h0 or h1 <= p, (
                    f"device memory number {i + 1} of this test handed out [{p:#x}, "
                    f"+{4 * KiB}) over the live host region [{h0:#x}, {h1:#x}) [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_region_in_a_freed_hole_keeps_apart_from_its_neighbour(rt, kind):
    """Terabyte regions (addresses cost nothing) until a request no longer fits after the
    last one and must go into the room a freed region left: requests a little larger than
    that room (by a page, by 256 bytes) are refused or placed elsewhere, never over or
    against the next region; one that fits leaves a gap."""
    tib = 1 << 40
    memory = getattr(rt, kind)(64 * tib)
    a = memory.alloc(256, 6 * tib)
    b = memory.alloc(256, 6 * tib)
    assert a is not None and b is not None, f"{kind}: two 6 TiB regions of 64 TiB [API-3]"
    memory.free(a, 6 * tib)
    live = {b: 6 * tib}
    _alloc_apart(memory, kind, live, (6 * tib + 4 * KiB, 6 * tib + 256, 6 * tib))
    assert memory.live_regions == live, f"{kind}.live_regions {memory.live_regions} [API-3]"


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_large_region_keeps_off_the_next_instance(rt, kind):
    """Addresses cost nothing, so an instance's capacity may exceed any address range it
    keeps for itself: a request that no longer fits after the last region goes into the room
    a freed one left, never past the instance's own addresses over a later instance's
    region."""
    tib = 1 << 40
    memory = getattr(rt, kind)(64 * tib)
    later = [getattr(rt, kind)(MiB) for _ in range(4)]
    theirs = [(q, q + 4 * KiB) for q in (m.alloc(256, 4 * KiB) for m in later)]
    x = memory.alloc(256, 8 * tib)
    assert x is not None, f"{kind}: 8 TiB of 64 TiB [API-3]"
    memory.free(x, 8 * tib)
    size = 8 * tib + 4 * KiB
    y = memory.alloc(256, size)
    if y is not None:
        hit = [(hex(a), hex(b)) for a, b in theirs if y < b + 1 and a < y + size + 1]
        assert not hit, (f"{kind}: a region [{y:#x}, +{size}) touches or overlaps the live "
                         f"region(s) {hit} of instances made after it [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_an_empty_instance_serves_up_to_16_tib_less_4096(rt, kind):
    """With a capacity of 32 TiB, an instance without live regions serves exactly
    2^44 - 4096 bytes, first and again after a free, and refuses a byte, 256 bytes, 4096
    bytes and 8192 bytes more."""
    most = (1 << 44) - 4096
    memory = getattr(rt, kind)(1 << 45)
    for attempt in ("first", "again after a free"):
        ptr = memory.alloc(256, most)
        assert ptr is not None, (
            f"{kind} without live regions refused alloc(256, 2^44 - 4096) ({attempt}) with a "
            f"capacity of 2^45 [API-3]")
        memory.free(ptr, most)
        for more in (1, 256, 4096, 8192):
            got = memory.alloc(256, most + more)
            assert got is None, (
                f"{kind}.alloc(256, 2^44 - 4096 + {more}) without live regions returned "
                f"{got:#x}, expected None (more than an instance's addresses hold) [API-3]")
    assert memory.live_regions == {} and memory.bytes_in_use == 0, (
        f"{kind}: live_regions {memory.live_regions}, bytes_in_use {memory.bytes_in_use} after "
        f"every region was freed [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_freed_address_is_not_handed_out_again_at_once(rt, kind):
    memory = getattr(rt, kind)(MiB)
    a = memory.alloc(256, 4096)
    b = memory.alloc(256, 4096)
    memory.free(a, 4096)
    c = memory.alloc(256, 4096)
    memory.free(b, 4096)
    d = memory.alloc(256, 4096)
    assert c > b and d > c, (
        f"{kind}: regions a={a:#x}, b={b:#x}; after a was freed the next region is {c:#x}, "
        f"and after b was freed {d:#x}: with room after the last region placed, a region "
        f"goes there (next fit), not into a freed one [API-3]")


def _assert_free_error_names(exc: BaseException, call: str, ptr: int, sizes: list[int]) -> None:
    message = str(exc)
    assert f"{ptr:#x}" in message and "None" not in message, (
        f"{call} raised {message!r}: it must name {ptr:#x}, and a size only where a live "
        f"region starts there [API-3]")
    named = sorted({int(n) for n in re.findall(r"(?<![0-9a-fA-Fx])[0-9]+(?![0-9a-fA-F])",
                                               message.replace(f"{ptr:#x}", ""))})
    assert named == sorted(set(sizes)), (
        f"{call} raised {message!r}, naming the sizes {named}, expected {sorted(set(sizes))} "
        f"(num_bytes, and the live region's size where one starts there) [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.parametrize("where", ["freed", "inside", "never"])
def test_a_free_of_no_live_region_names_the_call(rt, kind, where):
    memory = getattr(rt, kind)(MiB)
    p = memory.alloc(256, 4096)
    q = memory.alloc(256, 4096)
    if where == "freed":
        memory.free(q, 4096)
    target = {"freed": q, "inside": p + 256, "never": q + 64 * 1024}[where]
    call = f"{kind}.free({target:#x}, 4096)"
    with raises(rt.InvalidPointerError, "API-3", call):
        try:
            memory.free(target, 4096)
        except rt.InvalidPointerError as exc:
            _assert_free_error_names(exc, call, target, [4096])
            raise
    live = {p: 4096} if where == "freed" else {p: 4096, q: 4096}
    assert memory.live_regions == live, (
        f"{call} changed live_regions to {memory.live_regions}, expected {live} [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.parametrize("wrong", [4096 - 256, 4096 + 256, 0])
def test_a_free_of_the_wrong_size_is_refused(rt, kind, wrong):
    """A sub-allocator's caller frees a region with the size it asked for: a simulated
    memory catches a caller that gets it wrong instead of forgetting the region."""
    memory = getattr(rt, kind)(MiB)
    p = memory.alloc(256, 4096)
    with raises(rt.InvalidPointerError, "API-3", f"{kind}.free({p:#x}, {wrong})"):
        try:
            memory.free(p, wrong)
        except rt.InvalidPointerError as exc:
            _assert_free_error_names(exc, f"{kind}.free({p:#x}, {wrong})", p, [wrong, 4096])
            raise
    got = (memory.live_regions, memory.bytes_in_use)
    assert got == ({p: 4096}, 4096), (
        f"{kind}.free({p:#x}, {wrong}) of a 4096-byte region left (live_regions, "
        f"bytes_in_use) {got}, expected ({{{p}: 4096}}, 4096) [API-3]")
    memory.free(p, 4096)


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("first", [256, None], ids=["after-a-small-region", "first-region"])
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_region_after_one_placed_in_a_freed_tail_keeps_apart(rt, kind, first):
    """A terabyte region placed after the last one (or as the instance's first), freed; a
    request a page larger no longer fits after where that region ended, so it goes into the
    room the freed one left and ends exactly there; the next small requests never touch or
    overlap it."""
    tib = 1 << 40
    memory = getattr(rt, kind)(64 * tib)
    live = {}
    if first is not None:
        a = memory.alloc(256, first)
        assert a is not None, f"{kind}: {first} bytes of 64 TiB [API-3]"
        live[a] = first
    x = memory.alloc(256, 8 * tib)
    assert x is not None, f"{kind}: 8 TiB of 64 TiB [API-3]"
    memory.free(x, 8 * tib)
    _alloc_apart(memory, kind, live, (8 * tib + 4 * KiB, 256, 256))
    assert memory.live_regions == live, f"{kind}.live_regions {memory.live_regions} [API-3]"


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_region_in_the_room_before_a_live_one_keeps_apart(rt, kind):
    """An 8 TiB region freed; a request a page larger goes into its room (it no longer fits
    after it), a terabyte region after that one, and the first freed again: the room ahead
    of the terabyte region now begins where the regions started and ends just before it, so a
    megabyte request placed there (or anywhere else) never touches or overlaps it."""
    tib = 1 << 40
    memory = getattr(rt, kind)(64 * tib)
    x = memory.alloc(256, 8 * tib)
    assert x is not None, f"{kind}: 8 TiB of 64 TiB [API-3]"
    memory.free(x, 8 * tib)
    live: dict[int, int] = {}
    _alloc_apart(memory, kind, live, (8 * tib + 4 * KiB, tib))
    assert len(live) == 2, f"{kind}: 8 TiB + 4 KiB then 1 TiB of 64 TiB, empty [API-3]"
    y = min(live)
    memory.free(y, live.pop(y))
    _alloc_apart(memory, kind, live, (MiB,))
    assert memory.live_regions == live, f"{kind}.live_regions {memory.live_regions} [API-3]"


def _alloc_apart(memory, kind: str, live: dict[int, int], sizes) -> None:
    """Ask ``memory`` for each of ``sizes`` in turn: a region it returns never touches or
    overlaps one of ``live`` (API-3) and is then live too; a refused request is skipped."""
    for size in sizes:
        ptr = memory.alloc(256, size)
        if ptr is None:
            continue
        for other, other_size in live.items():
            assert ptr + size < other or other + other_size < ptr, (
                f"{kind}.alloc(256, {size}) returned [{ptr:#x}, +{size}), over or against "
                f"the live region [{other:#x}, +{other_size}) [API-3]")
        live[ptr] = size


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_one_byte_alloc_gets_a_region(rt, kind):
    """cudaMalloc of a single byte gives memory: only 0 bytes is the null pointer."""
    memory = getattr(rt, kind)(MiB)
    ptr = memory.alloc(256, 1)
    assert ptr is not None and ptr > 0 and ptr % 256 == 0, (
        f"{kind}.alloc(256, 1) returned {ptr!r}, expected a positive multiple of 256 [API-3]")
    assert (memory.bytes_in_use, memory.live_regions) == (1, {ptr: 1}), (
        f"{kind} after alloc(256, 1): bytes_in_use {memory.bytes_in_use}, live_regions "
        f"{memory.live_regions} [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_zero_byte_alloc_returns_none(rt, kind):
    """cudaMalloc of 0 bytes gives no memory: the null pointer, which TF reads as a failure."""
    memory = getattr(rt, kind)(MiB)
    assert memory.alloc(256, 0) is None, f"{kind}.alloc(256, 0) returned a region [API-3]"
    assert (memory.alloc_calls, memory.bytes_in_use, memory.live_regions) == ([0], 0, {}), (
        f"{kind} after alloc(256, 0): alloc_calls {memory.alloc_calls}, bytes_in_use "
        f"{memory.bytes_in_use}, live_regions {memory.live_regions} [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("bad", [-1, True, 1024.0, "1024", None])
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
def test_a_bad_capacity_names_itself(rt, kind, bad):
    memory_kind = getattr(rt, kind)
    errors: list[str] = []
    with raises(ValueError, "API-3", f"{kind}({bad!r})"):
        try:
            memory_kind(bad)
        except ValueError as exc:
            errors.append(str(exc))
            raise
    assert names_identifier(errors[0], "capacity_bytes"), (
        f"{kind}({bad!r}): the ValueError {errors[0]!r} does not name capacity_bytes [API-3]")
    memory = memory_kind(MiB)
    with raises(ValueError, "API-3", f"{kind}.capacity = {bad!r}"):
        try:
            memory.capacity = bad
        except ValueError as exc:
            errors.append(str(exc))
            raise
    assert names_identifier(errors[1], "capacity") and memory.capacity == MiB, (
        f"{kind}.capacity = {bad!r}: the ValueError {errors[1]!r} must name capacity, and the "
        f"capacity stay {MiB} (it is {memory.capacity}) [API-3]")


# --- argument edges and the retry deadline to the microsecond -----------------------------

@pytest.mark.clause("BFC-7")
@pytest.mark.parametrize("bad", [-1, -(1 << 63), True, False, 1024.0, float("nan"), float("inf"),
                                 "1024", None])
@pytest.mark.parametrize("argument", ["total_memory", "retry_timeout_us"])
def test_bad_size_arguments_name_themselves(rt, bad, argument):
    kw = {"retry_timeout_us": bad} if argument == "retry_timeout_us" else {}
    total = bad if argument == "total_memory" else MiB
    for kind in ("BFCAllocator", "GPUBFCAllocator"):
        with pytest.raises(ValueError) as info:
            if kind == "BFCAllocator":
                rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), total, True, "GPU_0_bfc", **kw)
            else:
                rt.GPUBFCAllocator(rt.SimulatedDeviceMemory(MiB), total, "GPU_0_bfc", **kw)
        assert names_identifier(info.value, argument), (
            f"{kind}({argument}={bad!r}): the ValueError {info.value!r} does not name the "
            f"argument [BFC-7]")


@pytest.mark.clause("BFC-7")
def test_zero_and_numpy_sizes_are_accepted(rt):
    import numpy as np
    sim = rt.SimulatedDeviceMemory(MiB)
    bfc = rt.BFCAllocator(sim, 0, True, "GPU_0_bfc", retry_timeout_us=0)
    assert bfc.allocate_raw(256, 1) is None and sim.alloc_calls == [], \
        f"a 0-byte limit allocated or called its sub-allocator {sim.alloc_calls} [BFC-7]"
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), np.int64(MiB), True, "GPU_0_bfc",
                          retry_timeout_us=np.int32(0))
    assert bfc.get_stats().bytes_limit == MiB, "a NumPy integer limit was not taken [BFC-7]"


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_one_microsecond_retry_waits_once(rt):
    """T = 1: four attempts and one wait of exactly 1 µs (the smallest deadline is no zero
    wait and no third-attempt give-up)."""
    clock = VirtualClock(auto_advance=True, clause="BFC-12")
    bfc, sim, n = _refusing(rt, clock, 1)
    assert bfc.allocate_raw(256, 2 * MiB) is None, "[BFC-12]"
    waits = [r.duration_us for r in clock.records]
    assert sim.alloc_calls[n:] == [2 * MiB] * 4 and waits == [1] and clock.now_us() == 1, (
        f"retry_timeout_us=1: calls {sim.alloc_calls[n:]}, waits {waits}, clock "
        f"{clock.now_us()}; expected 4 attempts and one wait of 1 µs [BFC-12]")


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # observes the retry's waits
def test_free_one_microsecond_before_the_deadline_wakes_the_waiter(rt):
    """T = 5 µs: a free 4 µs into the wait (now < D) still wakes the waiter, whose next
    attempt succeeds."""
    T = 5
    clock = VirtualClock(clause="BFC-12")
    bfc, sim = make(rt, MiB, growth=False, clock=clock, timeout_us=T)
    p = bfc.allocate_raw(256, MiB)
    t, out = _run(lambda: bfc.allocate_raw(256, 1000), "antman-test-boundary")
    try:
        clock.wait_for_waiters(1, clause="BFC-12")
        clock.tick(T - 1)
        assert "antman-test-boundary" in clock.waiting_threads(), (
            f"the retry gave up {T - 1} µs into a {T} µs deadline [BFC-12]")
        bfc.deallocate_raw(p)
        t.join(5)
        assert not t.is_alive() and out == [p], \
            f"a free {T - 1} µs into the wait gave {out}, expected {p:#x} [BFC-12]"
        assert clock.now_us() == T - 1, f"clock {clock.now_us()} [BFC-12]"
    finally:
        clock.advance(2 * T)
        t.join(5)


@pytest.mark.clause("BFC-12")
@pytest.mark.capability("virtual_clock")   # the retry waits on the clock for the free
def test_a_free_wakes_the_waiters_under_the_retrys_lock(rt, monkeypatch):
    """A free wakes the waiters by swapping the event they wait on for a fresh one: without
    the retry's lock, two frees at once can each take the same event, and the fresh event
    one of them stores replaces the other's, so a waiter that began waiting on the replaced
    one is never woken by a later free (it waits out the whole deadline). Forced, not hoped
    for: the retry's lock is watched (fixtures/interleave.py) and each line of the wake-up
    touching the event records whether the freeing thread held it."""
    from fixtures.interleave import lines_run_in, self_holds, watch_lock
    clock = VirtualClock(clause="BFC-12")
    bfc, _ = make(rt, MiB, growth=False, clock=clock, timeout_us=T_10S)
    p = bfc.allocate_raw(256, MiB)                       # the whole pool: the next one waits
    retry = getattr(bfc, "_retry", None)
    watch_lock(monkeypatch, retry, "_mu", "the allocator retry's lock")

    def free_once_waiting() -> None:
        clock.wait_for_waiters(1, clause="BFC-12")
        bfc.deallocate_raw(p)

    def allocate_after_a_free() -> int | None:
        freer = threading.Thread(target=free_once_waiting, name="antman-test-freer",
                                 daemon=True)
        freer.start()
        try:
            return bfc.allocate_raw(256, 1000)
        finally:
            freer.join(10)
            clock.advance(T_10S + 1)

    ptr, lines = lines_run_in(allocate_after_a_free, "AllocatorRetry.notify_dealloc",
                              self_holds("_mu"))
    assert ptr == p, f"the retried allocation returned {ptr}, expected {p:#x} [BFC-12]"
    touching = [held for text, held in lines if "_event" in text]
    if not touching:
        pytest.skip("the check follows the reference's design (AllocatorRetry.notify_dealloc "
                    "swapping the event _event); this runtime ran no such line")
    assert all(touching), (
        f"{touching.count(False)} of {len(touching)} line(s) of the wake-up touching the "
        f"waiters' event ran without the retry's lock: two frees at once can lose one's "
        f"wake-up, and a waiter waits out its whole deadline [BFC-12]")


@pytest.mark.clause("API-3")
def test_sub_allocator_is_the_one_given(rt):
    """``sub_allocator`` is the very object the allocator was made with, a simulated memory
    or any duck-typed one, also for a GPUBFCAllocator."""
    class Duck:
        def alloc(self, alignment, num_bytes):
            return None

        def free(self, ptr, num_bytes):
            pass

    for sub in (rt.SimulatedDeviceMemory(MiB), Duck()):
        for bfc in (rt.BFCAllocator(sub, MiB, True, "GPU_0_bfc"),
                    rt.GPUBFCAllocator(sub, MiB, "GPU_0_bfc")):
            got = bfc.sub_allocator
            assert got is sub, (
                f"{type(bfc).__name__}({type(sub).__name__}, ...).sub_allocator is {got!r}, "
                f"not the sub-allocator it was made with [API-3]")
