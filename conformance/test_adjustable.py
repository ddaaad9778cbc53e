"""ADJ clauses: AntMan's GPUAdjustableAllocator (grow and shrink the BFC limit at run time)."""

from __future__ import annotations

import logging
import threading

import pytest

from conformance.checks import names_identifier, raises
from conformance.control_helpers import joined, run_in_thread, runtime_records
from conformance.preconditions import precondition
from fixtures.oom import assert_bfc_valid
from fixtures.virtual_clock import VirtualClock

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

pytestmark = pytest.mark.capability("bfc", "adjustable")


def rounded(n: int) -> int:
    return -(-n // 256) * 256


def next_after_shrink(target: int, pool_after: int) -> int:
    """RoundedBytes(min(max(target - pool_after, 1), 1 MiB)) in size_t (64-bit) arithmetic."""
    gap = (target - pool_after) % 2**64
    return rounded(min(max(gap, 1), MiB))


def make(rt, limit: int = 64 * MiB, growth: bool = True):
    sim = rt.SimulatedDeviceMemory(4 * GiB)
    bfc = rt.BFCAllocator(sim, limit, growth, "GPU_0_bfc",
                          clock=VirtualClock(auto_advance=True, clause="BFC-12"),
                          retry_timeout_us=0)
    return bfc, sim


def pool_and_stable(bfc) -> tuple[int, int]:
    """(pool, stable) as ADJ-5 defines them, from memory_map(): the sum of the region sizes,
    and that of the regions holding at least one chunk in use."""
    regions = bfc.memory_map().regions
    return (sum(r.size for r in regions),
            sum(r.size for r in regions if any(c.in_use for c in r.chunks)))


def three_regions(rt, limit: int = 64 * MiB):
    """R1 = 1 MiB (free), R2 = 2 MiB (in use), R3 = 4 MiB (free); pool 7 MiB, next 8 MiB."""
    bfc, sim = make(rt, limit)
    a = bfc.allocate_raw(256, MiB)
    b = bfc.allocate_raw(256, 2 * MiB)
    c = bfc.allocate_raw(256, 4 * MiB)
    assert sim.alloc_calls == [MiB, 2 * MiB, 4 * MiB] and a < b < c, "[BFC-8]"
    bfc.deallocate_raw(a)
    bfc.deallocate_raw(c)
    return bfc, sim, a, b, c


def state(bfc) -> tuple[int, int, int, int]:
    mm = bfc.memory_map()
    return (mm.memory_limit, bfc.get_stats().bytes_limit, mm.total_region_allocated_bytes,
            mm.next_region_size)


# --- ADJ-1 -------------------------------------------------------------------------------

@pytest.mark.clause("ADJ-1")
@pytest.mark.parametrize("new_limit", [64 * MiB, 128 * MiB, 7 * MiB + 1, 7 * MiB, 2**63])
def test_grow_or_shrink_without_freeing(rt, new_limit):
    bfc, sim, a, b, c = three_regions(rt)
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(new_limit, bfc)
    assert got == new_limit, f"adjust_memory_limit({new_limit}) returned {got} [ADJ-1]"
    assert state(bfc) == (new_limit, new_limit, 7 * MiB, 8 * MiB), (
        f"after adjust_memory_limit({new_limit}): (limit, bytes_limit, pool, next) = "
        f"{state(bfc)} [ADJ-1]")
    assert sim.free_calls == [] and sim.alloc_calls == [MiB, 2 * MiB, 4 * MiB], (
        f"adjust_memory_limit({new_limit}) released {sim.free_calls} / allocated "
        f"{sim.alloc_calls[3:]} [ADJ-1]")


@pytest.mark.clause("ADJ-1", "BFC-9")
def test_new_limit_governs_growth(rt):
    adj = rt.GPUAdjustableAllocator()
    bfc, sim = make(rt, 2 * MiB)
    bfc.allocate_raw(256, MiB)                       # region 1 MiB, next 2 MiB
    assert bfc.allocate_raw(256, 2 * MiB) is None, "[BFC-9]"    # available 1 MiB
    assert adj.adjust_memory_limit(3 * MiB, bfc) == 3 * MiB, "[ADJ-1]"
    assert bfc.allocate_raw(256, 2 * MiB) is not None, (
        "allocate_raw(256, 2 MiB) after growing the limit to 3 MiB [ADJ-1]")
    assert adj.adjust_memory_limit(3 * MiB + 300, bfc) == 3 * MiB + 300, "[ADJ-1]"
    calls = len(sim.alloc_calls)
    # available = floor256(300) = 256: one 256-byte region fits, nothing more
    assert bfc.allocate_raw(256, 256) is not None and sim.alloc_calls[calls:] == [256], (
        f"allocate_raw(256, 256) under limit pool + 300: regions {sim.alloc_calls[calls:]}, "
        f"expected [256] [ADJ-1]")
    assert bfc.allocate_raw(256, 256) is None, "allocation beyond the adjusted limit [ADJ-1]"


# --- ADJ-2 / ADJ-3 / ADJ-4 -----------------------------------------------------------------

@pytest.mark.clause("ADJ-2", "ADJ-3", "ADJ-4")
def test_shrink_frees_free_regions_in_address_order(rt):
    bfc, sim, a, b, c = three_regions(rt)
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(4 * MiB, bfc)
    # to free 3 MiB: R1 (1 MiB) then, R2 being in use, R3 (4 MiB) → pool 2 MiB <= 4 MiB
    assert sim.free_calls == [(a, MiB), (c, 4 * MiB)], (
        f"released {sim.free_calls}, expected R1 then R3 in address order [ADJ-3]")
    assert got == 4 * MiB, f"adjust_memory_limit(4 MiB) returned {got} [ADJ-2]"
    assert state(bfc)[:3] == (4 * MiB, 4 * MiB, 2 * MiB), (
        f"(limit, bytes_limit, pool) = {state(bfc)[:3]} [ADJ-2]")
    assert state(bfc)[3] == next_after_shrink(4 * MiB, 2 * MiB), (
        f"next = {state(bfc)[3]} [ADJ-4]")
    assert [r.ptr for r in bfc.memory_map().regions] == [b], "[ADJ-3]"
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("ADJ-3", "ADJ-4")
def test_shrink_stops_once_the_target_is_met(rt):
    bfc, sim, a, b, c = three_regions(rt)
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(6 * MiB, bfc)
    assert got == 6 * MiB and sim.free_calls == [(a, MiB)], (
        f"adjust_memory_limit(6 MiB): returned {got}, released {sim.free_calls}, expected "
        f"only R1 [ADJ-3]")
    assert state(bfc) == (6 * MiB, 6 * MiB, 6 * MiB, 256), (
        f"pool exactly at the target: next must be RoundedBytes(1) = 256, got {state(bfc)} "
        f"[ADJ-4]")


@pytest.mark.clause("ADJ-2")
@pytest.mark.parametrize("new_limit", [6 * MiB, 4 * MiB], ids=["pool-equals-target",
                                                             "pool-below-target"])
def test_a_shrink_that_reaches_its_target_logs_nothing(rt, caplog, new_limit):
    """AntMan logs only a shrink that falls short; one whose remaining pool equals the
    target exactly (R1 released: 7 - 1 = 6 MiB) has reached it."""
    bfc, sim, a, b, c = three_regions(rt)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(new_limit, bfc)
    with precondition("ADJ-3", f"the shrink to {new_limit} releases free regions until the "
                               f"pool is at most the target"):
        pool = bfc.memory_map().total_region_allocated_bytes
        assert pool <= new_limit, (
            f"pool {pool} after adjust_memory_limit({new_limit}) of R1 1 MiB (free), R2 "
            f"2 MiB (in use), R3 4 MiB (free) [ADJ-3]")
    assert got == new_limit, f"adjust_memory_limit({new_limit}) returned {got} [ADJ-2]"
    logged = runtime_records(caplog, rt, logging.WARNING)
    assert not logged, (
        f"adjust_memory_limit({new_limit}) reached its target (pool "
        f"{bfc.memory_map().total_region_allocated_bytes}) and logged {logged} [ADJ-2]")


@pytest.mark.clause("ADJ-3")
def test_shrink_overshoots_with_whole_regions(rt):
    bfc, sim, a, b, c = three_regions(rt)
    bfc.deallocate_raw(b)
    b2 = bfc.allocate_raw(256, 256)       # R1 (1 MiB) is the best fit; R2 becomes free
    assert b2 == a, "[ADJ-3]"
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(6 * MiB + 512 * KiB, bfc)
    # to free 512 KiB: R1 in use, R2 (2 MiB) free → released; pool 5 MiB (overshoot)
    assert got == 6 * MiB + 512 * KiB and sim.free_calls == [(b, 2 * MiB)], (
        f"returned {got}, released {sim.free_calls} [ADJ-3]")
    assert state(bfc)[2:] == (5 * MiB, next_after_shrink(6 * MiB + 512 * KiB, 5 * MiB)), "[ADJ-3]"
    assert state(bfc)[3] == MiB, "[ADJ-3]"


@pytest.mark.clause("ADJ-2", "ADJ-4")
def test_shrink_that_falls_short(rt):
    bfc, sim, a, b, c = three_regions(rt)
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(MiB, bfc)
    assert sim.free_calls == [(a, MiB), (c, 4 * MiB)], (
        f"released {sim.free_calls}, expected every free region [ADJ-3]")
    assert got == 2 * MiB, (f"adjust_memory_limit(1 MiB) with 2 MiB in use returned {got}, "
                            f"expected the remaining pool 2 MiB [ADJ-2]")
    assert state(bfc)[:3] == (2 * MiB, 2 * MiB, 2 * MiB), (
        f"(limit, bytes_limit, pool) = {state(bfc)[:3]} [ADJ-2]")
    assert state(bfc)[3] == MiB, f"next = {state(bfc)[3]}; a shortfall wraps it to 1 MiB [ADJ-4]"
    assert bfc.allocate_raw(256, 256) is None, (
        "allocate_raw(256, 256) with limit == pool and no free chunk must fail [ADJ-2]")


@pytest.mark.clause("ADJ-2")
def test_a_shrink_that_falls_short_logs_one_warning(rt, caplog):
    """AntMan logs the shrink that cannot reach its target: the operator reads which
    allocator kept how much, and what was asked."""
    bfc, sim, a, b, c = three_regions(rt)
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(MiB + 256, bfc)
    assert got == 2 * MiB, f"adjust_memory_limit(1 MiB + 256) returned {got} [ADJ-2]"
    warned = [r for r in runtime_records(caplog, rt, logging.WARNING)
              if r.levelno == logging.WARNING]
    worse = runtime_records(caplog, rt, logging.ERROR)
    assert len(warned) == 1 and not worse, (
        f"a shrink to {MiB + 256} left {2 * MiB} bytes and logged warnings {warned}, errors "
        f"{worse}: expected exactly one warning [ADJ-2]")
    message = warned[0].getMessage()
    missing = [w for w in ("GPU_0_bfc", str(MiB + 256), str(2 * MiB))
               if not names_identifier(message, w)]
    assert not missing, (
        f"the shortfall warning {message!r} does not name {missing} (the allocator, "
        f"new_limit and the remaining pool) [ADJ-2]")


@pytest.mark.clause("ADJ-2", "ADJ-3")
def test_shrink_to_zero_releases_everything_free(rt):
    bfc, sim = make(rt)
    p = bfc.allocate_raw(256, MiB)
    bfc.deallocate_raw(p)
    assert rt.GPUAdjustableAllocator().adjust_memory_limit(0, bfc) == 0, "[ADJ-2]"
    assert state(bfc) == (0, 0, 0, 256) and sim.free_calls == [(p, MiB)], f"{state(bfc)} [ADJ-3]"
    assert bfc.allocate_raw(256, 256) is None, "allocation with limit 0 [ADJ-2]"


@pytest.mark.clause("BFC-8", "ADJ-2")
@pytest.mark.parametrize("request_bytes,region,after", [(1000, 1024, 1024), (256, 256, 512)])
def test_a_pool_built_with_limit_zero_grows_once_the_limit_is_raised(rt, request_bytes,
                                                                     region, after):
    """1000 bytes: 256 doubled twice to 1024 for the request; 256 bytes: 256 is enough, so
    the region is 256 bytes and the next region size doubles after it."""
    bfc, sim = make(rt, limit=0)
    assert bfc.memory_map().next_region_size == 0, "[BFC-8]"
    assert rt.GPUAdjustableAllocator().adjust_memory_limit(MiB, bfc) == MiB, "[ADJ-2]"
    assert bfc.allocate_raw(256, request_bytes) is not None, (
        f"allocate_raw(256, {request_bytes}) after raising a limit of 0 to 1 MiB [BFC-8]")
    assert sim.alloc_calls == [region] and bfc.memory_map().next_region_size == after, (
        f"allocate_raw(256, {request_bytes}): regions {sim.alloc_calls}, next "
        f"{bfc.memory_map().next_region_size}: a next region size of 0 counts as 256, so "
        f"expected a region of {region} and next {after} [BFC-8]")


@pytest.mark.clause("ADJ-4", "BFC-8")
@pytest.mark.parametrize("gap", [-256, -1, 0, 1, 255, 256, 1000, 100 * KiB, MiB - 1, MiB,
                                 3 * MiB, 4 * MiB - 1, 4 * MiB, 4 * MiB + 1])
def test_next_region_size_after_shrink(rt, gap):
    """A negative gap is a target below the 2 MiB in use: the shrink falls short by -gap
    bytes (1 byte at -1), which wraps to 1 MiB; at 0 it ends on the target exactly (256)."""
    bfc, sim, a, b, c = three_regions(rt)
    target = 2 * MiB + gap                 # below the pool of 7 MiB
    # FreeEmptyMemory: free regions R1 (1 MiB), R3 (4 MiB) in address order until to_free <= 0
    pool, to_free = 7 * MiB, 7 * MiB - target
    for size in (MiB, 4 * MiB):
        pool -= size
        to_free -= size
        if to_free <= 0:
            break
    got = rt.GPUAdjustableAllocator().free_empty_memory(target, bfc)
    assert got == pool, f"free_empty_memory({target}) returned {got}, expected {pool} [ADJ-3]"
    expected_next = next_after_shrink(target, pool)
    assert bfc.memory_map().next_region_size == expected_next, (
        f"next after free_empty_memory({target}) leaving {pool}: "
        f"{bfc.memory_map().next_region_size}, expected {expected_next} [ADJ-4]")
    if pool == 2 * MiB:                    # no free chunk left: the next growth uses it
        calls = len(sim.alloc_calls)
        assert bfc.allocate_raw(256, 2 * MiB) is not None, "[BFC-8]"
        size = expected_next
        while size < 2 * MiB:
            size *= 2
        assert sim.alloc_calls[calls:] == [size], (
            f"region after the reset: {sim.alloc_calls[calls:]}, expected {size} [BFC-8]")


class HugeSub:
    """A sub-allocator that hands out regions of any size (addresses cost nothing)."""

    def __init__(self) -> None:
        self.next = 1 << 12
        self.frees: list[tuple[int, int]] = []

    def alloc(self, alignment: int, num_bytes: int) -> int:
        ptr = self.next
        self.next += num_bytes + 4096
        return ptr

    def free(self, ptr: int, num_bytes: int) -> None:
        self.frees.append((ptr, num_bytes))


@pytest.mark.clause("ADJ-4")
@pytest.mark.parametrize("target", [0, 1000, MiB - 256, MiB])
def test_next_region_size_wraps_in_64_bits(rt, target):
    """A pool of 2^64 - 256 bytes in use (limit 2^64 - 1) and a shrink to a small target:
    it falls short, and ``target - pool_after`` in size_t is ``target + 256``, so the next
    region size is that, rounded up and capped at 1 MiB, not 1 MiB whatever the target."""
    pool = 2**64 - 256
    bfc = rt.BFCAllocator(HugeSub(), 2**64 - 1, False, "GPU_0_bfc", retry_timeout_us=0)
    assert bfc.allocate_raw(256, pool, rt.AllocationAttributes(no_retry_on_failure=True)) \
        is not None and bfc.memory_map().total_region_allocated_bytes == pool, (
        f"a request of 2^64 - 256 bytes under a limit of 2^64 - 1: pool "
        f"{bfc.memory_map().total_region_allocated_bytes} [BFC-8]")
    got = rt.GPUAdjustableAllocator().free_empty_memory(target, bfc)
    assert got == pool, f"free_empty_memory({target}) returned {got}, expected {pool} [ADJ-3]"
    expected = next_after_shrink(target, pool)
    assert expected == min(rounded(target + 256), MiB), "[ADJ-4]"
    assert bfc.memory_map().next_region_size == expected, (
        f"next after free_empty_memory({target}) with 2^64 - 256 bytes in use: "
        f"{bfc.memory_map().next_region_size}, expected {expected} ({target} - (2^64 - 256) "
        f"in 64-bit unsigned arithmetic, rounded up, capped at 1 MiB) [ADJ-4]")


@pytest.mark.clause("ADJ-3")
def test_free_empty_memory_at_or_above_the_pool(rt):
    bfc, sim, a, b, c = three_regions(rt)
    adj = rt.GPUAdjustableAllocator()
    for target in (7 * MiB, 100 * MiB):
        got = adj.free_empty_memory(target, bfc)
        assert got == 7 * MiB, (
            f"free_empty_memory({target}) returned {got}, expected the pool [ADJ-3]")
    assert sim.free_calls == [] and state(bfc) == (64 * MiB, 64 * MiB, 7 * MiB, 8 * MiB), (
        f"free_empty_memory(target >= pool) changed state: {state(bfc)} [ADJ-3]")


@pytest.mark.clause("ADJ-3")
def test_free_empty_memory_keeps_partly_used_regions_and_the_limit(rt):
    bfc, sim = make(rt)
    p = bfc.allocate_raw(256, 256)            # R1 1 MiB: 256 in use, the rest free
    q = bfc.allocate_raw(256, 2 * MiB)        # R2 2 MiB
    bfc.deallocate_raw(q)
    got = rt.GPUAdjustableAllocator().free_empty_memory(0, bfc)
    assert got == MiB and sim.free_calls == [(q, 2 * MiB)], (
        f"free_empty_memory(0): returned {got}, released {sim.free_calls}; the partly used "
        f"region must stay [ADJ-3]")
    assert bfc.memory_map().memory_limit == 64 * MiB, "free_empty_memory changed the limit [ADJ-3]"
    assert bfc.allocated_size(p) == 256, "[ADJ-3]"
    assert_bfc_valid(bfc, sim)


# --- ADJ-5 -------------------------------------------------------------------------------


@pytest.mark.clause("ADJ-3", "ADJ-2")
def test_region_with_a_free_first_chunk_and_a_live_chunk_is_kept(rt):
    bfc, sim = make(rt)
    a = bfc.allocate_raw(256, 256)            # R1 (1 MiB): [a 256][free]
    b = bfc.allocate_raw(256, 256)            # R1: [a 256][b 256][free]
    bfc.deallocate_raw(a)                     # R1: [free 256][b in use][free]: no merge
    (region,) = bfc.memory_map().regions
    assert [c.in_use for c in region.chunks] == [False, True, False], f"{region} [BFC-5]"
    adj = rt.GPUAdjustableAllocator()
    got = adj.free_empty_memory(0, bfc)
    assert got == MiB and sim.free_calls == [], (
        f"free_empty_memory(0) with a region whose first chunk is free but whose second "
        f"chunk is in use: returned {got}, released {sim.free_calls}; the region must stay "
        f"[ADJ-3]")
    got = adj.adjust_memory_limit(0, bfc)
    assert got == MiB and sim.free_calls == [], (
        f"adjust_memory_limit(0): returned {got}, released {sim.free_calls}; expected the "
        f"remaining pool 1 MiB and nothing released [ADJ-3]")
    assert bfc.allocated_size(b) == 256 and bfc.allocation_id(b) > 0, \
        "the live chunk must survive the shrink [ADJ-3]"
    bfc.deallocate_raw(b)
    assert_bfc_valid(bfc, sim)


@pytest.mark.clause("ADJ-5")
def test_mem_pool_stats(rt):
    adj = rt.GPUAdjustableAllocator()
    bfc, sim = make(rt)
    assert (adj.get_mem_pool_stats(bfc).pool_bytes,
            adj.get_mem_pool_stats(bfc).stable_bytes) == (0, 0), "[ADJ-5]"
    a = bfc.allocate_raw(256, MiB)            # R1 1 MiB, fully used
    b = bfc.allocate_raw(256, 256)            # R2 2 MiB, 256 used
    c = bfc.allocate_raw(256, 4 * MiB)        # R3 4 MiB
    bfc.deallocate_raw(c)
    s = adj.get_mem_pool_stats(bfc)
    assert (s.pool_bytes, s.stable_bytes) == (7 * MiB, 3 * MiB), (
        f"get_mem_pool_stats: ({s.pool_bytes}, {s.stable_bytes}), expected (7 MiB, 3 MiB) "
        f"[ADJ-5]")
    released = 7 * MiB - adj.free_empty_memory(0, bfc)
    assert released == s.pool_bytes - s.stable_bytes, (
        "pool - stable is what can be released [ADJ-5]")
    assert a is not None and b is not None, "[ADJ-5]"



@pytest.mark.clause("ADJ-5")
def test_mem_pool_stats_is_immutable(rt):
    """A snapshot: neither field can be assigned, and the value stays what was read."""
    bfc, _ = make(rt)
    p = bfc.allocate_raw(256, MiB)
    s = rt.GPUAdjustableAllocator().get_mem_pool_stats(bfc)
    for field in ("pool_bytes", "stable_bytes"):
        with raises(AttributeError, "ADJ-5", f"assigning MemPoolStats.{field}"):
            setattr(s, field, 7)
    assert (s.pool_bytes, s.stable_bytes) == (MiB, MiB), (
        f"MemPoolStats changed to ({s.pool_bytes}, {s.stable_bytes}) after assignments, "
        f"expected (1 MiB, 1 MiB) [ADJ-5]")
    bfc.deallocate_raw(p)

SNAPSHOT_THREAD = "antman-test-stats"
COMPETING_THREAD = "antman-test-competing"
FORCED_WAIT_S = 10.0        # bound of each wait of the forced interleaving (never reached)


class _PausingRegions(list):
    """The BFC's region list (``BFCAllocator._regions``) that stops the snapshot thread once,
    after it read the first region and before it reads the second, until released."""

    def __init__(self, regions: list) -> None:
        super().__init__(regions)
        self.paused, self.resume = threading.Event(), threading.Event()
        self.armed = False

    def __iter__(self):
        items = super().__iter__()        # a list's own iterator: it sees every change
        first = True
        while True:
            if not first and self.armed and threading.current_thread().name == SNAPSHOT_THREAD:
                self.armed = False
                self.paused.set()
                self.resume.wait(FORCED_WAIT_S)
            first = False
            try:
                item = next(items)
            except StopIteration:
                return
            yield item


def _land(op, watched, snapshot: threading.Thread) -> tuple[threading.Thread, bool]:
    """Start ``op`` on a thread and wait until it completed, or until it is about to wait for
    the BFC's lock while the snapshot thread holds it: ``(thread, completed)``."""
    settled = threading.Event()
    watched.before_next_acquire(settled.set)

    def run() -> None:
        try:
            op()
        finally:
            settled.set()

    t, out = run_in_thread(run, COMPETING_THREAD)
    assert settled.wait(FORCED_WAIT_S), "the competing operation neither ended nor locked [ADJ-5]"
    if not t.is_alive() or not watched.held_by(snapshot):
        assert joined(t, FORCED_WAIT_S), "the competing operation did not end [BFC-17]"
        assert "error" not in out, f"the competing operation raised {out['error']!r} [ADJ-5]"
        return t, True
    return t, False


#: Each round: (what, operations), an operation ("alloc", name, bytes) or ("free", name).
SNAPSHOT_ROUNDS = (("two allocations filling A then B", (("alloc", "a", MiB),
                                                         ("alloc", "b", 2 * MiB))),
                   ("two frees emptying A then B", (("free", "a"), ("free", "b"))))


def _two_free_regions(rt):
    """A free 1 MiB region A below a free 2 MiB region B."""
    bfc, sim = make(rt, GiB)
    with precondition("BFC-8", "regions of 1 and 2 MiB, in that address order, both free"):
        a, b = bfc.allocate_raw(256, MiB), bfc.allocate_raw(256, 2 * MiB)
        assert sim.alloc_calls == [MiB, 2 * MiB] and a < b, f"{sim.alloc_calls} [BFC-8]"
        bfc.deallocate_raw(a)
        bfc.deallocate_raw(b)
    return bfc


def _apply(bfc, held: dict, op: tuple) -> None:
    if op[0] == "alloc":
        held[op[1]] = bfc.allocate_raw(256, op[2])
    else:
        bfc.deallocate_raw(held.pop(op[1]))


@pytest.mark.clause("ADJ-5", "BFC-17")
def test_mem_pool_stats_is_a_consistent_snapshot(rt, monkeypatch):
    """get_mem_pool_stats reads every region under the BFC's lock, so that a concurrent
    allocation or free lands wholly before or after it. Forced: with a free 1 MiB region A
    below a free 2 MiB region B, the snapshot thread is stopped after it read A and before it
    read B; two allocations then fill A and B, each allowed to end unless it is about to wait
    for the lock while the snapshot holds it (then the snapshot goes on first). A snapshot
    without the lock (or allocations without it) reads A free and B in use, (3 MiB, 2 MiB):
    a pair the allocator never held during that snapshot ((3, 0), (3, 1), (3, 3) MiB, from
    the same operations run alone on a twin allocator). Then the same with two frees, whose
    torn reading is (3 MiB, 1 MiB). White-box: the pause is in the BFC's region list and the
    lock watched is the BFC's (the reference's design); a runtime without them is skipped."""
    from fixtures.interleave import watch_lock
    twin, held = _two_free_regions(rt), {}
    expected: dict[str, set[tuple[int, int]]] = {}
    for what, ops in SNAPSHOT_ROUNDS:           # the states each round passes through
        expected[what] = {pool_and_stable(twin)}
        for op in ops:
            _apply(twin, held, op)
            expected[what].add(pool_and_stable(twin))
    bfc, held = _two_free_regions(rt), {}
    adj = rt.GPUAdjustableAllocator()
    regions = getattr(bfc, "_regions", None)
    if type(regions) is not list:
        pytest.skip("the snapshot is paused between two regions through the BFC's region "
                    "list (BFCAllocator._regions, the reference's design); this runtime has "
                    "none")
    pausing = _PausingRegions(regions)
    monkeypatch.setattr(bfc, "_regions", pausing)
    watched = watch_lock(monkeypatch, bfc, "_lock", "the BFC allocator's lock")
    for what, ops in SNAPSHOT_ROUNDS:
        pausing.paused.clear()
        pausing.resume.clear()
        pausing.armed = True
        snapshot, got = run_in_thread(lambda: adj.get_mem_pool_stats(bfc), SNAPSHOT_THREAD)
        waiting: list[threading.Thread] = []
        rest: list[tuple] = []
        try:
            if not pausing.paused.wait(FORCED_WAIT_S):
                assert joined(snapshot, FORCED_WAIT_S), "get_mem_pool_stats did not end [ADJ-5]"
                pytest.skip("get_mem_pool_stats read no second region from the BFC's region "
                            "list on its thread (the reference's design): the snapshot "
                            "cannot be paused between two regions")
            for i, op in enumerate(ops):
                t, completed = _land(lambda op=op: _apply(bfc, held, op), watched, snapshot)
                if not completed:             # it waits for the snapshot's lock: after it
                    waiting.append(t)
                    rest = list(ops[i + 1:])
                    break
        finally:
            pausing.armed = False
            pausing.resume.set()
            assert joined(snapshot, FORCED_WAIT_S), "get_mem_pool_stats did not end [ADJ-5]"
            for t in waiting:
                assert joined(t, FORCED_WAIT_S), "the competing operation did not end [BFC-17]"
        for op in rest:
            _apply(bfc, held, op)
        assert "error" not in got, f"get_mem_pool_stats raised {got['error']!r} [ADJ-5]"
        s = got["result"]
        assert (s.pool_bytes, s.stable_bytes) in expected[what], (
            f"with {what} while get_mem_pool_stats ran, it returned (pool, stable) = "
            f"({s.pool_bytes}, {s.stable_bytes}), a pair the allocator never held meanwhile "
            f"(it held {sorted(expected[what])}): the regions were not read as one snapshot "
            f"under the allocator's lock [ADJ-5]")


@pytest.mark.clause("ADJ-5")
def test_mem_pool_stats_waits_for_an_extend_in_progress(rt):
    """The snapshot is taken under the BFC's lock: while an allocation holds it, extending
    the pool (its sub-allocator call blocks here), get_mem_pool_stats waits, and then sees
    the new region. Without the lock it returns at once, from the middle of the Extend.
    Tolerance: the stats call is given 1 s to show that it waits."""
    entered, release = threading.Event(), threading.Event()

    class Blocking(rt.SimulatedDeviceMemory):
        def alloc(self, alignment: int, num_bytes: int):
            entered.set()
            release.wait(10)
            return super().alloc(alignment, num_bytes)

    sub = Blocking(4 * GiB)
    bfc = rt.BFCAllocator(sub, GiB, True, "GPU_0_bfc", clock=VirtualClock(auto_advance=True),
                          retry_timeout_us=0)
    adj = rt.GPUAdjustableAllocator()
    grow, grown = run_in_thread(lambda: bfc.allocate_raw(256, MiB), "antman-test-extend")
    stats = None
    try:
        assert entered.wait(10), "the allocation never called its sub-allocator [ADJ-5]"
        stats, got = run_in_thread(lambda: adj.get_mem_pool_stats(bfc), "antman-test-stats")
        stats.join(1.0)
        assert stats.is_alive(), (
            f"get_mem_pool_stats returned {got.get('result')} while an Extend held the BFC "
            f"lock: the snapshot is not taken under the allocator's lock [ADJ-5]")
    finally:
        release.set()
        assert joined(grow, 10), "the allocation did not end [ADJ-5]"
        if stats is not None:
            assert joined(stats, 10), "get_mem_pool_stats did not end [ADJ-5]"
    s = got.get("result")
    assert s is not None and (s.pool_bytes, s.stable_bytes) == (MiB, MiB), (
        f"get_mem_pool_stats after the Extend: {s}, expected (1 MiB, 1 MiB) [ADJ-5]")


#: The three methods, as called on an allocator with a free region above what it holds in
#: use (so a shrink releases it): method -> (call, the clause its lock keeps)
ADJ_METHODS = {
    "adjust_memory_limit": (lambda adj, bfc: adj.adjust_memory_limit(MiB, bfc), "ADJ-2"),
    "free_empty_memory": (lambda adj, bfc: adj.free_empty_memory(0, bfc), "ADJ-3"),
    "get_mem_pool_stats": (lambda adj, bfc: adj.get_mem_pool_stats(bfc), "ADJ-5"),
}


@pytest.mark.parametrize("method", [
    pytest.param(m, id=m, marks=pytest.mark.clause(ADJ_METHODS[m][1], "BFC-17"))
    for m in sorted(ADJ_METHODS)])
def test_every_method_runs_under_the_allocators_lock(rt, monkeypatch, method):
    """Each method reads the regions and changes the limit or releases regions as one step
    under the BFC allocator's lock: without it a concurrent allocation can take a chunk of a
    region being released, or grow the pool between the check and the new limit. Forced:
    the lock is watched (fixtures/interleave.py) and each line the method runs records
    whether the calling thread held it; some line must."""
    from fixtures.interleave import lock_held_in, watch_lock
    call, clause = ADJ_METHODS[method]
    bfc, _ = make(rt, 64 * MiB)
    bfc.allocate_raw(256, 1000)
    bfc.deallocate_raw(bfc.allocate_raw(256, 4 * MiB))      # a whole free region
    adj = rt.GPUAdjustableAllocator()
    watched = watch_lock(monkeypatch, bfc, "_lock", "the BFC allocator's lock")
    _, held = lock_held_in(lambda: call(adj, bfc), method, watched)
    if not held:
        pytest.skip(f"the check follows the reference's design ({method} a method of the "
                    f"class); this runtime's {method} ran no line of its own")
    assert any(held), (f"{method} ran {len(held)} line(s), none with the BFC allocator's "
                       f"lock held: a concurrent allocation or free can interleave with it "
                       f"[{clause}]")


# --- ADJ-6 -------------------------------------------------------------------------------

@pytest.mark.clause("ADJ-6")
@pytest.mark.parametrize("bad", [-1, -MiB, 1.5, "1024", None, True])
def test_bad_limits_raise_value_error(rt, bad):
    bfc, sim, a, b, c = three_regions(rt)
    adj = rt.GPUAdjustableAllocator()
    before = (bfc.memory_map(), bfc.get_stats())
    for call in (adj.adjust_memory_limit, adj.free_empty_memory):
        with pytest.raises(ValueError):
            call(bad, bfc)
    assert (bfc.memory_map(), bfc.get_stats()) == before and sim.free_calls == [], (
        f"a bad limit {bad!r} changed the allocator [ADJ-6]")


@pytest.mark.clause("ADJ-6")
def test_non_bfc_allocators_raise_type_error(rt, tf_env):
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    vmem = rt.maybe_create_gpu_vmem_allocator(gpu, host_sub_allocator=rt.SimulatedHostMemory(MiB))
    adj = rt.GPUAdjustableAllocator()
    for obj in (vmem, None, object()):
        with pytest.raises(TypeError):
            adj.adjust_memory_limit(MiB, obj)
        with pytest.raises(TypeError):
            adj.free_empty_memory(MiB, obj)
        with pytest.raises(TypeError):
            adj.get_mem_pool_stats(obj)


# --- ADJ-6: every argument's edges ----------------------------------------------------------

MAX_SIZE_T = 2**64 - 1
_LIMIT_ARGUMENTS = (("adjust_memory_limit", "new_limit"), ("free_empty_memory", "target"))


def _whole_state(bfc, sim) -> tuple:
    return (state(bfc), bfc.memory_map(), bfc.get_stats(), list(sim.alloc_calls),
            list(sim.free_calls))


@pytest.mark.clause("ADJ-6")
@pytest.mark.parametrize("bad", [-1, -(2**64), MAX_SIZE_T + 1, 2**80, True, False, 1024.0,
                                 0.0, float(7 * MiB), float("nan"), float("inf"), "1024",
                                 b"1024", None])
@pytest.mark.parametrize("method,argument", _LIMIT_ARGUMENTS)
def test_a_bad_limit_names_its_argument_and_changes_nothing(rt, caplog, method, argument, bad):
    bfc, sim, a, b, c = three_regions(rt)
    adj = rt.GPUAdjustableAllocator()
    before = _whole_state(bfc, sim)
    caplog.clear()
    with pytest.raises(ValueError) as info:
        getattr(adj, method)(bad, bfc)
        pytest.fail(f"{method}({bad!r}, bfc) did not raise ValueError [ADJ-6]")
    assert names_identifier(info.value, argument), (
        f"{method}({bad!r}, bfc): the ValueError {str(info.value)!r} does not name "
        f"{argument!r} [ADJ-6]")
    assert _whole_state(bfc, sim) == before, f"a refused {method}({bad!r}) changed the allocator [ADJ-6]"
    assert [r for r in caplog.records if r.levelno >= 20] == [], (
        f"a refused {method}({bad!r}) logged {[r.getMessage() for r in caplog.records]} "
        f"[ADJ-6]")


@pytest.mark.clause("ADJ-6", "ADJ-1")
@pytest.mark.parametrize("new_limit", [MAX_SIZE_T, MAX_SIZE_T - 1, 7 * MiB, 7 * MiB + 1])
def test_limits_up_to_the_size_t_maximum_are_accepted(rt, new_limit):
    bfc, sim, a, b, c = three_regions(rt)
    before = state(bfc)
    got = rt.GPUAdjustableAllocator().adjust_memory_limit(new_limit, bfc)
    assert got == new_limit and state(bfc) == (new_limit, new_limit, before[2], before[3]), (
        f"adjust_memory_limit({new_limit}) with a 7 MiB pool: returned {got}, state "
        f"{state(bfc)}; expected limit and bytes_limit {new_limit}, pool and next kept "
        f"[ADJ-6]")
    assert sim.free_calls == [], f"growing the limit released {sim.free_calls} [ADJ-6]"
    assert rt.GPUAdjustableAllocator().free_empty_memory(MAX_SIZE_T, bfc) == 7 * MiB, (
        "free_empty_memory(2^64-1) did not return the 7 MiB pool [ADJ-6]")
    assert sim.free_calls == [] and state(bfc)[2:] == before[2:], (
        "free_empty_memory(2^64-1) released a region or changed next [ADJ-6]")


@pytest.mark.clause("ADJ-6", "ADJ-2")
def test_zero_and_numpy_limits_are_accepted(rt):
    import numpy as np
    bfc, sim, a, b, c = three_regions(rt)
    adj = rt.GPUAdjustableAllocator()
    got = adj.adjust_memory_limit(np.uint64(8 * MiB), bfc)
    assert got == 8 * MiB and state(bfc)[:2] == (8 * MiB, 8 * MiB), (
        f"adjust_memory_limit(np.uint64(8 MiB)): returned {got}, state {state(bfc)} [ADJ-6]")
    assert adj.free_empty_memory(np.int32(0), bfc) == 2 * MiB, (
        "free_empty_memory(np.int32(0)) did not release both free regions [ADJ-6]")
    got = adj.adjust_memory_limit(0, bfc)
    assert got == 2 * MiB and state(bfc)[:3] == (2 * MiB, 2 * MiB, 2 * MiB), (
        f"adjust_memory_limit(0) with 2 MiB in use: returned {got}, state {state(bfc)}; "
        f"expected the limit to stop at the pool in use [ADJ-6]")


@pytest.mark.clause("ADJ-6")
def test_a_bfc_allocator_subclass_is_accepted(rt):
    sim = rt.SimulatedDeviceMemory(GiB)
    gpu = rt.GPUBFCAllocator(sim, 64 * MiB, "GPU_0_bfc", allow_growth=True, retry_timeout_us=0)
    p = gpu.allocate_raw(256, MiB)
    gpu.deallocate_raw(p)
    adj = rt.GPUAdjustableAllocator()
    stats = adj.get_mem_pool_stats(gpu)
    assert (stats.pool_bytes, stats.stable_bytes) == (MiB, 0), f"{stats} [ADJ-6]"
    assert adj.adjust_memory_limit(0, gpu) == 0 and sim.free_calls == [(p, MiB)], (
        f"adjust_memory_limit(0) on a GPUBFCAllocator: frees {sim.free_calls} [ADJ-6]")
    adj.free_empty_memory(0, gpu)     # accepted: its return value is ADJ-3's, checked there


@pytest.mark.clause("ADJ-6")
@pytest.mark.parametrize("bad", ["GPU_0_bfc", 0, None, object()])
def test_a_bad_bfc_names_its_argument_and_a_bad_limit_comes_first(rt, bad):
    bfc, sim, a, b, c = three_regions(rt)
    adj = rt.GPUAdjustableAllocator()
    for method, _ in _LIMIT_ARGUMENTS:
        with pytest.raises(TypeError) as info:
            getattr(adj, method)(MiB, bad)
            pytest.fail(f"{method}(1 MiB, {bad!r}) did not raise TypeError [ADJ-6]")
        assert names_identifier(info.value, "bfc"), (
            f"{method}(1 MiB, {bad!r}): the TypeError {str(info.value)!r} does not name "
            f"'bfc' [ADJ-6]")
        assert names_identifier(info.value, method), (
            f"{method}(1 MiB, {bad!r}): the TypeError {str(info.value)!r} does not name the "
            f"method called (as a whole word) [ADJ-6]")
        with pytest.raises(ValueError):
            getattr(adj, method)(-1, bad)
            pytest.fail(f"{method}(-1, {bad!r}) did not raise the limit's ValueError [ADJ-6]")
    with pytest.raises(TypeError) as info:
        adj.get_mem_pool_stats(bad)
    assert names_identifier(info.value, "bfc"), (
        f"get_mem_pool_stats({bad!r}): the TypeError {str(info.value)!r} does not name 'bfc' "
        f"[ADJ-6]")
    assert names_identifier(info.value, "get_mem_pool_stats"), (
        f"get_mem_pool_stats({bad!r}): the TypeError {str(info.value)!r} does not name the "
        f"method called (as a whole word) [ADJ-6]")
    assert sim.free_calls == [], "[ADJ-6]"


@pytest.mark.clause("ADJ-6")
@pytest.mark.parametrize("args", [(0,), (None,), (MiB,)])
def test_the_constructor_takes_no_argument(rt, args):
    with pytest.raises(TypeError):
        rt.GPUAdjustableAllocator(*args)
        pytest.fail(f"GPUAdjustableAllocator{args!r} did not raise TypeError [ADJ-6]")
