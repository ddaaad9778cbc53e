"""Model-based stateful tests of the memory stack: BFC, VMem host fallback, adjustable limit.

Each state machine drives real allocators built from the runtime under test through random
sequences of allocate / free / adjust / fault injection / clear_stats, and keeps a small
model beside them: the live allocations, the stats counters and the memory limit. Before a
call it predicts the outcome where the specification determines it (best fit from a free
chunk, region growth, the memory limit, garbage collection, the shrink of an adjustment);
after every step it checks the invariants against the public introspection
(``memory_map``, ``get_stats``, ``get_bin_debug_info``, the per-pointer queries and the
sub-allocators' call logs).

How a machine reaches the runtime: Hypothesis builds a state machine by calling a factory
with no arguments, and pytest fixtures cannot be requested inside it. Each machine
therefore takes the runtime module as a constructor argument, and a plain pytest test
receives that module from the ``rt`` fixture and runs
``run_state_machine_as_test(lambda: Machine(rt), settings=stateful_settings())``. The test
function carries the clause and capability markers, so NOT_SUPPORTED reporting and the
clause-coverage check treat it like any other test.

Settings: the active Hypothesis profile (``ci`` unless ``--hypothesis-profile`` names
another, e.g. the derandomized ``certify``) supplies the step count, derandomization and
health checks; ``stateful_settings`` raises its example count to at least
``MIN_STATEFUL_EXAMPLES`` per machine. Retry waits are 0 µs on an auto-advancing virtual
clock, so no step sleeps.
"""

from __future__ import annotations

import contextlib
import logging
import types
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from conformance.checks import raises
from fixtures.oom import FaultInjectingSubAllocator, assert_bfc_valid, bin_num_for_size
from fixtures.virtual_clock import VirtualClock

KIB = 1 << 10
MIB = 1 << 20
GRANULE = 256
NUM_BINS = 21
MAX_INTERNAL_FRAGMENTATION = 128 * MIB

MIN_STATEFUL_EXAMPLES = 200
"""The issue's floor: every machine runs at least this many examples under any profile."""

EXAMPLES_PER_PROFILE_EXAMPLE = 2
"""Stateful machines run this multiple of the profile's ``max_examples``, at least
``MIN_STATEFUL_EXAMPLES``: ``ci`` (50 × 30 steps) → 200 examples, ``certify`` (300 × 60 steps,
derandomized) → 600 examples."""


STATEFUL_TIMEOUT_S = 300
"""The per-test limit of a state machine, above the suite's 120 s: under ``certify`` a machine
runs 600 examples of up to 60 steps, 15 to 25 s on one core of a 16-core host with the rest of
the suite beside it, and past 120 s on a 2-core runner under a load of about 16; a limit the
clean run crosses on a loaded runner would make the verdict depend on the load. The shrinking
budget follows the limit (conformance/shrinking.py: a quarter of it)."""
STATEFUL_LIMIT = pytest.mark.timeout(STATEFUL_TIMEOUT_S)


def stateful_settings() -> settings:
    """The active profile, with the example count of a stateful machine."""
    base = settings.default
    return settings(base, max_examples=max(MIN_STATEFUL_EXAMPLES,
                                           EXAMPLES_PER_PROFILE_EXAMPLE * base.max_examples))


# --------------------------------------------------------------------------------------------
# TF 1.15 arithmetic (bfc-algorithm.md §1.1, §1.2, §1.5)


def rounded_bytes(n: int) -> int:
    return GRANULE * -(-n // GRANULE)


def floor256(n: int) -> int:
    return GRANULE * (n // GRANULE) if n > 0 else 0


def splits(chunk_size: int, rounded: int) -> bool:
    return chunk_size >= 2 * rounded or chunk_size - rounded >= MAX_INTERNAL_FRAGMENTATION


# --------------------------------------------------------------------------------------------
# The model of one BFC allocator


@dataclass(frozen=True)
class Live:
    requested: int
    size: int
    allocation_id: int


@dataclass
class Prediction:
    """What an allocation of ``num_bytes`` must do, from the state just before the call.

    ``kind``: ``"none"`` (returns None, touches nothing), ``"hit"`` (served from the free
    chunk ``ptr``, no sub-allocator call), ``"grow"`` (one new region of ``region_bytes``
    after releasing ``released``, served from its start), ``"unknown"`` (depends on a
    sub-allocator that may refuse; only the invariants are checked).
    """

    kind: str
    rounded: int = 0
    ptr: int | None = None
    size: int = 0
    region_bytes: int = 0
    next_region_size: int = 0
    released: list[tuple[int, int]] = field(default_factory=list)


class BFCObserver:
    """One BFC allocator under test, its sub-allocator log and the model of its state."""

    def __init__(self, rt: types.ModuleType, bfc, sim, faults, label: str, limit: int,
                 garbage_collection: bool) -> None:
        self.rt = rt
        self.bfc = bfc
        self.sim = sim
        self.faults = faults
        self.label = label
        self.garbage_collection = garbage_collection
        self.limit = limit
        self.live: dict[int, Live] = {}
        self.num_allocs = 0
        self.bytes_in_use = 0
        self.peak = 0
        self.largest = 0
        self.last_id = 0

    # -- predictions -------------------------------------------------------------------

    def grants(self, num_bytes: int) -> bool:
        """The sub-allocator will certainly grant a region of ``num_bytes``."""
        return (not self.sim.fail and not self.faults.active
                and self.sim.bytes_in_use + num_bytes <= self.sim.capacity)

    def predict(self, num_bytes: int) -> Prediction:
        if num_bytes <= 0:
            return Prediction("none")
        rounded = rounded_bytes(num_bytes)
        mm = self.bfc.memory_map()
        free = [(c.size, c.ptr) for r in mm.regions for c in r.chunks if not c.in_use]
        fit = min(((s, p) for s, p in free if s >= rounded), default=None)
        if fit is not None:
            size, ptr = fit
            return Prediction("hit", rounded, ptr, rounded if splits(size, rounded) else size)
        held = mm.total_region_allocated_bytes
        released: list[tuple[int, int]] = []
        if rounded > floor256(mm.memory_limit - held):
            empty = [(r.ptr, r.size) for r in mm.regions
                     if len(r.chunks) == 1 and not r.chunks[0].in_use]
            freeable = sum(s for _, s in empty)
            if (not self.garbage_collection or freeable == 0
                    or rounded > mm.memory_limit - held + freeable):
                return Prediction("none", rounded)
            released, held = empty, held - freeable
        curr, increased = mm.next_region_size, False
        while rounded > curr:
            curr, increased = curr * 2, True
        region = min(curr, floor256(mm.memory_limit - held))
        released_bytes = sum(s for _, s in released)
        if not self.grants(region - released_bytes):
            return Prediction("unknown", rounded)
        return Prediction("grow", rounded, None, rounded if splits(region, rounded) else region,
                          region, curr if increased else 2 * curr, released)

    def free_chunks(self) -> list[int]:
        """Sizes of the free chunks, ascending."""
        return sorted(c.size for r in self.bfc.memory_map().regions for c in r.chunks
                      if not c.in_use)

    def free_region_bytes(self) -> int:
        """Bytes in fully free regions: what garbage collection or a shrink can release."""
        return sum(r.size for r in self.bfc.memory_map().regions
                   if len(r.chunks) == 1 and not r.chunks[0].in_use)

    def gc_only_size(self, frac: float) -> int:
        """A request no free chunk and no growth within the limit can serve, but one that
        releasing the fully free regions makes room for (``frac`` <= 1; above 1 it is too big)."""
        mm = self.bfc.memory_map()
        largest = max((c.size for r in mm.regions for c in r.chunks if not c.in_use), default=0)
        low = max(largest, self.budget()) + 1
        high = self.budget() + self.free_region_bytes()
        return max(1, low + int(frac * max(high - low, 0)))

    def budget(self) -> int:
        """Bytes the limit still lets the pool grow by: ``floor256(limit - pool)``."""
        mm = self.bfc.memory_map()
        return floor256(mm.memory_limit - mm.total_region_allocated_bytes)

    # -- bookkeeping after calls -------------------------------------------------------

    def alloc_log(self) -> list[int]:
        """Every region size the allocator asked for, refused by an injection or not."""
        return self.faults.calls if isinstance(self.faults, FaultInjectingSubAllocator) \
            else self.sim.alloc_calls

    def snapshot(self) -> tuple[int, int]:
        return len(self.alloc_log()), len(self.sim.free_calls)

    def record_allocation(self, call: str, num_bytes: int, ptr: int | None,
                          pred: Prediction, before: tuple[int, int]) -> None:
        """Check an allocation's outcome against ``pred`` and update the model."""
        alloc_calls = self.alloc_log()[before[0]:]
        free_calls = [tuple(c) for c in self.sim.free_calls[before[1]:]]
        if pred.kind == "none":
            assert ptr is None, (
                f"{call} returned {ptr:#x}, expected None: nothing can hold {pred.rounded} "
                f"bytes under the limit {self.limit} [BFC-9]")
            assert not alloc_calls and not free_calls, (
                f"{call} failed but called the sub-allocator: alloc {alloc_calls}, free "
                f"{free_calls} [BFC-9]")
            return
        if pred.kind == "hit":
            assert ptr == pred.ptr, (
                f"{call} returned {ptr!r}, expected the best-fit free chunk {pred.ptr:#x} "
                f"[BFC-3]")
            assert not alloc_calls and not free_calls, (
                f"{call} was served from a free chunk but called the sub-allocator: alloc "
                f"{alloc_calls}, free {free_calls} [BFC-3]")
        if pred.kind == "grow":
            # what garbage collection released first: the region grown after it depends on it
            assert free_calls == pred.released, (
                f"{call}: sub-allocator free calls {free_calls}, expected {pred.released} "
                f"(garbage collection releases every free region) [BFC-11]")
            assert ptr is not None, (
                f"{call} returned None, expected a new region of {pred.region_bytes} bytes "
                f"(the sub-allocator had room) [BFC-8]")
            assert alloc_calls == [pred.region_bytes], (
                f"{call}: sub-allocator alloc calls {alloc_calls}, expected "
                f"[{pred.region_bytes}] [BFC-8]")
            mm = self.bfc.memory_map()
            region = next((r for r in mm.regions if r.ptr == ptr), None)
            assert region is not None and region.size == pred.region_bytes, (
                f"{call} returned {ptr:#x}, expected the start of a new region of "
                f"{pred.region_bytes} bytes; regions "
                f"{[(hex(r.ptr), r.size) for r in mm.regions]} [BFC-8]")
            assert mm.next_region_size == pred.next_region_size, (
                f"after {call} next_region_size is {mm.next_region_size}, expected "
                f"{pred.next_region_size} [BFC-8]")
        if ptr is None:
            return
        assert ptr not in self.live, f"{call} returned {ptr:#x}, which is already live [BFC-3]"
        size = self.bfc.allocated_size(ptr)
        aid = self.bfc.allocation_id(ptr)
        rounded = rounded_bytes(num_bytes)
        if pred.kind in ("hit", "grow"):
            assert size == pred.size, (
                f"{call}: allocated_size({ptr:#x}) = {size}, expected {pred.size} [BFC-4]")
        assert size == rounded or (size < 2 * rounded
                                   and size - rounded < MAX_INTERNAL_FRAGMENTATION), (
            f"{call}: allocated_size({ptr:#x}) = {size} for {rounded} rounded bytes breaks the "
            f"split rule [BFC-4]")
        assert aid == self.last_id + 1, (
            f"{call}: allocation_id({ptr:#x}) = {aid}, expected {self.last_id + 1} (ids start "
            f"at 1, one per successful allocation, never reused) [BFC-15]")
        self.last_id = aid
        self.live[ptr] = Live(num_bytes, size, aid)
        self.num_allocs += 1
        self.bytes_in_use += size
        self.peak = max(self.peak, self.bytes_in_use)
        self.largest = max(self.largest, size)

    def record_free(self, ptr: int, before: tuple[int, int]) -> None:
        live = self.live.pop(ptr)
        self.bytes_in_use -= live.size
        assert self.snapshot() == before, (
            f"{self.label}.deallocate_raw({ptr:#x}) called the sub-allocator: alloc "
            f"{self.alloc_log()[before[0]:]}, free {self.sim.free_calls[before[1]:]} [BFC-5]")
        region = next((r for r in self.bfc.memory_map().regions
                       if r.ptr <= ptr < r.ptr + r.size), None)
        chunk = next((c for c in (region.chunks if region else ())
                      if c.ptr <= ptr < c.ptr + c.size), None)
        assert chunk is not None and not chunk.in_use, (
            f"after {self.label}.deallocate_raw({ptr:#x}) the memory at {ptr:#x} is "
            f"{chunk!r}, expected a free chunk [BFC-5]")
        # Checked here, not only by the invariant: a rule that frees and then allocates must
        # fail on the missing merge, not on the allocation it misplaces.
        at = region.chunks.index(chunk)
        free_neighbours = [c for c in region.chunks[max(at - 1, 0):at + 2]
                           if c is not chunk and not c.in_use]
        assert not free_neighbours, (
            f"after {self.label}.deallocate_raw({ptr:#x}) the free chunk {chunk!r} has free "
            f"neighbours {free_neighbours!r}: it was not merged with them [BFC-5]")
        if chunk.ptr == ptr:  # not merged into its predecessor: stale values remain
            got = (self.bfc.allocation_id(ptr), self.bfc.requested_size(ptr),
                   self.bfc.allocated_size(ptr))
            assert got == (-1, live.requested, chunk.size), (
                f"after {self.label}.deallocate_raw({ptr:#x}) (allocation_id, requested_size, "
                f"allocated_size) = {got}, expected {(-1, live.requested, chunk.size)} "
                f"[BFC-15]")
        else:
            with raises(self.rt.InvalidPointerError, "BFC-15",
                        f"{self.label}.allocation_id({ptr:#x}) of a freed pointer"):
                self.bfc.allocation_id(ptr)

    def clear_stats(self) -> None:
        self.num_allocs = 0
        self.peak = self.bytes_in_use
        self.largest = 0

    # -- invariants --------------------------------------------------------------------

    def check(self) -> None:
        name = self.label
        # Chunks tile their regions, free neighbours coalesced, bins, pool <= limit,
        # bytes_in_use, non-overlapping regions (the fixture's structural checks).
        assert_bfc_valid(self.bfc, self.sim)
        mm = self.bfc.memory_map()
        assert mm.memory_limit == self.limit, (
            f"{name}.memory_map().memory_limit = {mm.memory_limit}, expected {self.limit} [BFC-9]")
        held = 0
        in_use: dict[int, object] = {}
        expected_bins = [[0, 0, 0, 0, 0] for _ in range(NUM_BINS)]
        for region in mm.regions:
            assert region.ptr % GRANULE == 0, (
                f"{name}: region {region.ptr:#x}+{region.size} is not 256-aligned [BFC-8]")
            held += region.size
            for c in region.chunks:
                b = expected_bins[bin_num_for_size(c.size)]
                b[1] += c.size
                b[4] += 1
                if c.in_use:
                    in_use[c.ptr] = c
                    b[0] += c.size
                    b[2] += c.requested_size
                    b[3] += 1
        assert set(in_use) == set(self.live), (
            f"{name}: in-use chunks {sorted(map(hex, in_use))}, live allocations "
            f"{sorted(map(hex, self.live))} [BFC-16]")
        for ptr, live in self.live.items():
            c = in_use[ptr]
            assert (c.size, c.requested_size, c.allocation_id) == (
                live.size, live.requested, live.allocation_id), (
                f"{name}: chunk {ptr:#x} is {c!r}, expected {live!r} [BFC-16]")
            got = (self.bfc.requested_size(ptr), self.bfc.allocated_size(ptr),
                   self.bfc.allocation_id(ptr))
            assert got == (live.requested, live.size, live.allocation_id), (
                f"{name}: (requested_size, allocated_size, allocation_id)({ptr:#x}) = {got}, "
                f"expected {(live.requested, live.size, live.allocation_id)} [BFC-15]")
        stats = self.bfc.get_stats()
        got = (stats.num_allocs, stats.bytes_in_use, stats.peak_bytes_in_use,
               stats.largest_alloc_size, stats.bytes_limit)
        want = (self.num_allocs, self.bytes_in_use, self.peak, self.largest, self.limit)
        assert got == want, (
            f"{name}.get_stats() (num_allocs, bytes_in_use, peak_bytes_in_use, "
            f"largest_alloc_size, bytes_limit) = {got}, expected {want} [BFC-13]")
        reserved = (stats.bytes_reserved, stats.peak_bytes_reserved,
                    stats.bytes_reservable_limit)
        assert reserved == (0, 0, None), (
            f"{name}.get_stats() (bytes_reserved, peak_bytes_reserved, bytes_reservable_limit)"
            f" = {reserved}, expected (0, 0, None) [BFC-13]")
        infos = self.bfc.get_bin_debug_info()
        assert len(infos) == NUM_BINS, (
            f"{name}.get_bin_debug_info() has {len(infos)} entries [BFC-16]")
        got_bins = [[i.total_bytes_in_use, i.total_bytes_in_bin, i.total_requested_bytes_in_use,
                     i.total_chunks_in_use, i.total_chunks_in_bin] for i in infos]
        assert got_bins == expected_bins, (
            f"{name}.get_bin_debug_info() = {got_bins}, the memory map gives {expected_bins} "
            f"[BFC-16]")
        # Every region is live in the sub-allocator, and nothing else (no leak, no double free).
        regions = {r.ptr: r.size for r in mm.regions}
        assert dict(self.sim.live_regions) == regions, (
            f"{name}: the sub-allocator holds {self.sim.live_regions}, the regions are "
            f"{regions} [BFC-8]")
        if isinstance(self.faults, FaultInjectingSubAllocator):
            assert dict(self.faults.live_regions) == regions, (
                f"{name}: the fault injector saw live regions {self.faults.live_regions}, "
                f"the regions are {regions} [BFC-8]")
        assert self.sim.bytes_in_use == held, (
            f"{name}: the sub-allocator has {self.sim.bytes_in_use} bytes live, the "
            f"regions sum to {held} [BFC-8]")


# --------------------------------------------------------------------------------------------
# Strategies and shared rules

def fractions(low: float, high: float) -> st.SearchStrategy[float]:
    """Evenly spread fractions in per mille (``st.floats`` favours the ends of its range)."""
    return st.integers(round(low * 1000), round(high * 1000)).map(lambda m: m / 1000)


SIZES = st.one_of(
    st.integers(1, 2 * KIB),
    st.integers(1, 64 * KIB),
    st.integers(64 * KIB, 2 * MIB),
    st.sampled_from([0, 1, 255, 256, 257, 511, 512, MIB - 1, MIB, MIB + 1,
                     # no pool holds these; the last two do not fit a 64-bit size_t
                     1 << 40, 1 << 62, (1 << 64) - 1, 1 << 64, 1 << 70]),
)
"""Request sizes independent of the limit; ``allocate_fraction`` covers limit-relative ones."""

SMALL_SIZES = st.one_of(st.integers(1, 4 * KIB), st.integers(1, 256 * KIB),
                        st.sampled_from([0, 256, MIB]))
"""Sizes for many small allocations spread over many regions (the adjustable machine)."""

INVALID_SIZES = st.sampled_from([-1, -256, -(1 << 70), 1.5, 256.0, True, "256", None])
"""Sizes that MUST raise ValueError: negative, or not an int."""

SPLIT_EDGES = ["half", "half+1", "fragmentation", "fragmentation+1", "whole", "whole-255",
               "whole+1"]
"""Request sizes at the edges of the split rule for a free chunk of ``c`` bytes."""


def split_edge_size(c: int, edge: str) -> int:
    """``c // 2`` splits (c == 2r), ``c // 2 + 1`` does not unless 128 MiB remain;
    ``c - 128 MiB`` splits by the 128 MiB rule, one byte more does not; ``c`` fits exactly;
    ``c + 1`` does not fit this chunk."""
    size = {"half": c // 2, "half+1": c // 2 + 1,
            "fragmentation": c - MAX_INTERNAL_FRAGMENTATION,
            "fragmentation+1": c - MAX_INTERNAL_FRAGMENTATION + 1,
            "whole": c, "whole-255": c - 255, "whole+1": c + 1}[edge]
    return max(1, size)


LIKELY = st.sampled_from([True, True, False])
"""Growth and garbage collection: on in AntMan's configuration, so on two times in three."""

ATTRIBUTES = st.sampled_from(["none", "retry", "no_retry"])
"""How a request is made: TF's 2-argument call, or explicit AllocationAttributes."""

FAULTS = st.one_of(
    st.tuples(st.just("fail_nth_call"), st.integers(1, 3)),
    st.tuples(st.just("fail_above"), st.sampled_from([256, 64 * KIB, MIB, 2 * MIB])),
    st.tuples(st.just("cap_capacity"), fractions(0.0, 1.0)),
    st.tuples(st.just("fail_all"), st.none()),
    st.tuples(st.just("fail"), st.none()),
)
"""Ways to make the device sub-allocator refuse (fixtures/oom.py, or ``fail`` on the memory)."""


def attributes_for(rt: types.ModuleType, mode: str):
    if mode == "none":
        return None
    return rt.AllocationAttributes(no_retry_on_failure=(mode == "no_retry"))


def call_text(label: str, num_bytes: int, mode: str) -> str:
    attr = "" if mode == "none" else (
        f", AllocationAttributes(no_retry_on_failure={mode == 'no_retry'})")
    return f"{label}.allocate_raw(256, {num_bytes}{attr})"


def region_of(bfc, ptr: int) -> list[int]:
    """Start addresses of the in-use chunks in the region that holds ``ptr``."""
    for r in bfc.memory_map().regions:
        if r.ptr <= ptr < r.ptr + r.size:
            return [c.ptr for c in r.chunks if c.in_use]
    raise AssertionError(f"{ptr:#x} lies in no region of {bfc.name} [BFC-16]")


class MemoryMachine(RuleBasedStateMachine):
    """Rules shared by the machines: fault injection on the device sub-allocator."""

    dev_sim: object
    faults: FaultInjectingSubAllocator

    def __init__(self, rt: types.ModuleType) -> None:
        super().__init__()
        self.rt = rt
        self.clock = VirtualClock(auto_advance=True, clause="BFC-12")

    @rule(fault=FAULTS)
    def inject_fault(self, fault: tuple[str, object]) -> None:
        kind, arg = fault
        if kind == "fail_nth_call":
            self.faults.fail_nth_call(arg)
        elif kind == "fail_above":
            self.faults.fail_above(arg)
        elif kind == "cap_capacity":
            room = max(self.dev_sim.capacity - self.dev_sim.bytes_in_use, 0)
            self.faults.cap_capacity(self.dev_sim.bytes_in_use + int(arg * room))
        elif kind == "fail_all":
            self.faults.fail_all()
        else:
            self.dev_sim.fail = True

    @rule()
    def lift_faults(self) -> None:
        self.faults.reset()
        self.dev_sim.fail = False


class _NoFaults:
    active = False


_RECORDING_CLASSES: dict[type, type] = {}


def recording_allocator(rt: types.ModuleType, inner, log: list[tuple]):
    """An ``rt.Allocator`` that forwards to ``inner`` and logs each allocate and free:
    ``("allocate_raw", num_bytes, attributes, result)`` and ``("deallocate_raw", ptr)``."""
    cls = _RECORDING_CLASSES.get(rt.Allocator)
    if cls is None:
        class RecordingAllocator(rt.Allocator):
            def __init__(self, inner, log: list[tuple]) -> None:
                self.inner, self.log = inner, log

            @property
            def name(self) -> str:
                return self.inner.name

            def allocate_raw(self, alignment, num_bytes, attributes=None):
                ptr = self.inner.allocate_raw(alignment, num_bytes, attributes)
                self.log.append(("allocate_raw", num_bytes, attributes, ptr))
                return ptr

            def deallocate_raw(self, ptr) -> None:
                self.log.append(("deallocate_raw", ptr))
                self.inner.deallocate_raw(ptr)

            def tracks_allocation_sizes(self) -> bool:
                return self.inner.tracks_allocation_sizes()

            def requested_size(self, ptr):
                return self.inner.requested_size(ptr)

            def allocated_size(self, ptr):
                return self.inner.allocated_size(ptr)

            def allocation_id(self, ptr):
                return self.inner.allocation_id(ptr)

            def get_stats(self):
                return self.inner.get_stats()

            def clear_stats(self) -> None:
                self.inner.clear_stats()

        cls = _RECORDING_CLASSES[rt.Allocator] = RecordingAllocator
    return cls(inner, log)


# --------------------------------------------------------------------------------------------
# (a) BFCAllocator


class ObservedBFCMachine(MemoryMachine):
    """The allocation and free rules of a machine whose ``self.bfc`` a ``BFCObserver``
    (``self.obs``) predicts; subclasses build them and add their own rules."""

    bfc: object
    obs: BFCObserver
    freed: set[int]

    def _allocate(self, num_bytes: int, mode: str) -> None:
        pred, before = self.obs.predict(num_bytes), self.obs.snapshot()
        ptr = self.bfc.allocate_raw(256, num_bytes, attributes_for(self.rt, mode))
        self.obs.record_allocation(call_text("bfc", num_bytes, mode), num_bytes, ptr, pred,
                                   before)

    @rule(frac=fractions(0.5, 1.0), mode=ATTRIBUTES)
    def allocate_next_region(self, frac: float, mode: str) -> None:
        """Most of ``next_region_size``: usually a new region that one chunk fills."""
        self._allocate(max(1, int(frac * self.bfc.memory_map().next_region_size)), mode)

    @rule(extra=st.integers(-512, 2 * MIB), mode=ATTRIBUTES)
    def allocate_past_budget(self, extra: int, mode: str) -> None:
        """Just over (or under) what the limit leaves unheld: the limit, GC and growth edges."""
        self._allocate(max(1, self.obs.budget() + extra), mode)

    @precondition(lambda self: self.obs.free_region_bytes())
    @rule(frac=fractions(0.0, 1.2), mode=ATTRIBUTES)
    def allocate_into_free_regions(self, frac: float, mode: str) -> None:
        """Over every free chunk and the budget, within budget + free regions: only GC serves."""
        self._allocate(self.obs.gc_only_size(frac), mode)

    def _free(self, ptr: int) -> None:
        before = self.obs.snapshot()
        self.bfc.deallocate_raw(ptr)
        self.obs.record_free(ptr, before)
        self.freed.add(ptr)

    @precondition(lambda self: self.obs.live)
    @rule(pick=st.integers(0, 1 << 16))
    def free(self, pick: int) -> None:
        self._free(sorted(self.obs.live)[pick % len(self.obs.live)])

    @precondition(lambda self: self.obs.live)
    @rule(pick=st.integers(0, 1 << 16), data=st.data())
    def free_region(self, pick: int, data: st.DataObject) -> None:
        """Free every allocation of one region, in random order (leaves it fully free)."""
        ptrs = region_of(self.bfc, sorted(self.obs.live)[pick % len(self.obs.live)])
        for ptr in data.draw(st.permutations(ptrs), label="order"):
            self._free(ptr)

    @precondition(lambda self: len(self.obs.live) > 1)
    @rule(data=st.data())
    def free_all(self, data: st.DataObject) -> None:
        """Free everything, in random order (the end of a mini-batch): every region empties."""
        for ptr in data.draw(st.permutations(sorted(self.obs.live)), label="order"):
            self._free(ptr)

    @precondition(lambda self: self.obs.live)
    @rule(data=st.data(), frac=fractions(0.0, 1.2), mode=ATTRIBUTES)
    def next_phase(self, data: st.DataObject, frac: float, mode: str) -> None:
        """Free everything, then ask for more than any free chunk and the budget hold, which
        only garbage collection of the emptied regions can serve (a larger next graph)."""
        self.free_all(data)
        self._allocate(self.obs.gc_only_size(frac), mode)

    @rule()
    def clear_stats(self) -> None:
        self.bfc.clear_stats()
        self.obs.clear_stats()


class BFCMachine(ObservedBFCMachine):
    """One BFCAllocator over the runtime's simulated device memory, behind a fault injector."""

    @initialize(limit=st.sampled_from([2 * MIB, 4 * MIB, 8 * MIB + 1000, 600 * MIB]),
                allow_growth=LIKELY, gc=LIKELY, room=st.sampled_from([2.0, 2.0, 1.0, 0.5]))
    def build(self, limit: int, allow_growth: bool, gc: bool, room: float) -> None:
        rt = self.rt
        self.dev_sim = rt.SimulatedDeviceMemory(int(limit * room) // GRANULE * GRANULE)
        self.faults = FaultInjectingSubAllocator(self.dev_sim)
        self.bfc = rt.BFCAllocator(self.faults, limit, allow_growth, "GPU_0_bfc",
                                   garbage_collection=gc, clock=self.clock, retry_timeout_us=0)
        self.obs = BFCObserver(rt, self.bfc, self.dev_sim, self.faults, "bfc", limit, gc)
        self.freed: set[int] = set()

    @rule(num_bytes=SIZES, mode=ATTRIBUTES)
    def allocate(self, num_bytes: int, mode: str) -> None:
        self._allocate(num_bytes, mode)

    @rule(frac=fractions(0.01, 1.1), mode=ATTRIBUTES)
    def allocate_fraction(self, frac: float, mode: str) -> None:
        self._allocate(max(1, int(frac * self.obs.limit)), mode)

    @precondition(lambda self: self.obs.free_chunks())
    @rule(pick=st.integers(0, 1 << 16), edge=st.sampled_from(SPLIT_EDGES), mode=ATTRIBUTES)
    def allocate_near_free_chunk(self, pick: int, edge: str, mode: str) -> None:
        """A size at an edge of the split rule for one of the free chunks (largest first)."""
        chunks = self.obs.free_chunks()
        self._allocate(split_edge_size(chunks[-1 - pick % len(chunks)], edge), mode)

    @rule(data=st.data())
    def free_invalid(self, data: st.DataObject) -> None:
        """None is a no-op; an address that is not a live allocation raises, changing nothing."""
        before = self.bfc.memory_map()
        self.bfc.deallocate_raw(None)
        assert self.bfc.memory_map() == before, "bfc.deallocate_raw(None) changed the pool [BFC-5]"
        inside = [p + off for p in self.obs.live for off in (1, 128)]
        stale = sorted(self.freed - set(self.obs.live))
        ptr = data.draw(st.sampled_from(inside + stale + [(1 << 62) + 256]), label="ptr")
        with raises(self.rt.InvalidPointerError, "BFC-6", f"bfc.deallocate_raw({ptr:#x})"):
            self.bfc.deallocate_raw(ptr)
        assert self.bfc.memory_map() == before, (
            f"bfc.deallocate_raw({ptr:#x}) raised but changed the pool [BFC-6]")
        if ptr not in stale:
            for query in ("requested_size", "allocated_size", "allocation_id"):
                with raises(self.rt.InvalidPointerError, "BFC-6", f"bfc.{query}({ptr:#x})"):
                    getattr(self.bfc, query)(ptr)

    @rule(num_bytes=INVALID_SIZES, mode=ATTRIBUTES)
    def allocate_invalid_size(self, num_bytes: object, mode: str) -> None:
        before, log = self.bfc.memory_map(), self.obs.snapshot()
        with raises(ValueError, "BFC-1", call_text("bfc", num_bytes, mode)):
            self.bfc.allocate_raw(256, num_bytes, attributes_for(self.rt, mode))
        assert self.bfc.memory_map() == before and self.obs.snapshot() == log, (
            f"{call_text('bfc', num_bytes, mode)} raised but changed the allocator [BFC-1]")

    @invariant()
    def consistent(self) -> None:
        self.obs.check()


# --------------------------------------------------------------------------------------------
# (b) GPUVMemAllocator: device BFC first, host BFC as fallback


class VMemMachine(MemoryMachine):
    """GPUVMemAllocator over a device BFC (behind a fault injector) and a host BFC."""

    @initialize(dev_limit=st.sampled_from([1 * MIB, 4 * MIB]),
                host_limit=st.sampled_from([2 * MIB, 16 * MIB]),
                allow_growth=st.booleans(), gc=st.booleans(),
                physical=st.sampled_from([0, 2 * MIB, 64 * MIB]))
    def build(self, dev_limit: int, host_limit: int, allow_growth: bool, gc: bool,
              physical: int) -> None:
        rt = self.rt
        self.dev_sim = rt.SimulatedDeviceMemory(dev_limit)
        self.faults = FaultInjectingSubAllocator(self.dev_sim)
        self.host_sim = rt.SimulatedHostMemory(host_limit)
        device = rt.BFCAllocator(self.faults, dev_limit, allow_growth, "GPU_0_bfc",
                                 garbage_collection=gc, clock=self.clock, retry_timeout_us=0)
        host = rt.BFCAllocator(self.host_sim, host_limit, True, "GPUHost_0_bfc",
                               clock=self.clock, retry_timeout_us=0)
        # The VMem allocator sees recording proxies, so the calls it makes are checked.
        self.dev_calls: list[tuple] = []
        self.host_calls: list[tuple] = []
        dev_proxy = recording_allocator(rt, device, self.dev_calls)
        host_proxy = recording_allocator(rt, host, self.host_calls)
        self.vm = rt.GPUVMemAllocator(dev_proxy, host_proxy, tf_gpu_id=0,
                                      physical_total_memory=physical)
        assert (self.vm.device_allocator is dev_proxy
                and self.vm.host_allocator is host_proxy), (
            "GPUVMemAllocator.device_allocator / host_allocator are not the allocators given "
            "[VMEM-1]")
        self.dev = BFCObserver(rt, device, self.dev_sim, self.faults, "device", dev_limit, gc)
        self.host = BFCObserver(rt, host, self.host_sim, _NoFaults(), "host", host_limit,
                                False)
        self.owner: dict[int, BFCObserver] = {}
        self.freed: set[int] = set()

    def _allocate(self, num_bytes: int, mode: str) -> None:
        call = call_text("vmem", num_bytes, mode)
        attributes = attributes_for(self.rt, mode)
        # The device attempt does not touch the host, so both are predicted up front.
        dev_pred, dev_before = self.dev.predict(num_bytes), self.dev.snapshot()
        host_pred, host_before = self.host.predict(num_bytes), self.host.snapshot()
        merged_peak = self.dev.peak + self.host.peak
        planned = self.vm.memory_planned
        n_dev, n_host = len(self.dev_calls), len(self.host_calls)
        ptr = self.vm.allocate_raw(256, num_bytes, attributes)
        dev_calls, host_calls = self.dev_calls[n_dev:], self.host_calls[n_host:]
        assert len(dev_calls) == 1 and dev_calls[0][:2] == ("allocate_raw", num_bytes), (
            f"{call} made the device calls {dev_calls}, expected one allocate_raw of "
            f"{num_bytes} bytes [VMEM-3]")
        dev_attr, dev_ptr = dev_calls[0][2:]
        assert dev_attr is not None and dev_attr.no_retry_on_failure, (
            f"{call} called the device with attributes {dev_attr!r}, expected "
            f"no_retry_on_failure=True [VMEM-3]")
        if dev_ptr is not None:
            assert ptr == dev_ptr and not host_calls, (
                f"{call} returned {ptr!r}; the device gave {dev_ptr:#x}; host calls "
                f"{host_calls} [VMEM-3]")
            self.dev.record_allocation(call, num_bytes, ptr, dev_pred, dev_before)
            self.owner[ptr] = self.dev
            return
        assert dev_pred.kind not in ("hit", "grow"), (
            f"{call}: the device refused although it could serve it ({dev_pred.kind}) "
            f"[VMEM-3]")
        self.dev.record_allocation(call + " (device attempt)", num_bytes, None, dev_pred,
                                   dev_before)
        if mode != "none" and merged_peak > planned:
            assert ptr is None and not host_calls, (
                f"{call} = {ptr!r} with host calls {host_calls}, although device peak + host "
                f"peak = {merged_peak} > memory_planned {planned} [VMEM-5]")
            return
        assert [c[:3] for c in host_calls] == [("allocate_raw", num_bytes, attributes)], (
            f"{call} made the host calls {host_calls}, expected one allocate_raw of "
            f"{num_bytes} bytes with attributes {attributes!r} "
            f"[{'VMEM-4' if mode == 'none' else 'VMEM-5'}]")
        assert ptr == host_calls[0][3], (
            f"{call} returned {ptr!r}, the host allocator gave {host_calls[0][3]!r} [VMEM-4]")
        self.host.record_allocation(call + " (host fallback)", num_bytes, ptr, host_pred,
                                    host_before)
        if ptr is not None:
            self.owner[ptr] = self.host

    @rule(num_bytes=SIZES, mode=ATTRIBUTES)
    def allocate(self, num_bytes: int, mode: str) -> None:
        self._allocate(num_bytes, mode)

    @rule(frac=fractions(0.05, 1.5), mode=ATTRIBUTES)
    def allocate_fraction(self, frac: float, mode: str) -> None:
        self._allocate(max(1, int(frac * self.dev.limit)), mode)

    @rule(frac=fractions(0.5, 1.0), mode=ATTRIBUTES)
    def allocate_next_region(self, frac: float, mode: str) -> None:
        """Most of ``next_region_size``: usually a new region that one chunk fills."""
        self._allocate(max(1, int(frac * self.dev.bfc.memory_map().next_region_size)), mode)

    @rule(extra=st.integers(-512, 2 * MIB), mode=ATTRIBUTES)
    def allocate_past_budget(self, extra: int, mode: str) -> None:
        self._allocate(max(1, self.dev.budget() + extra), mode)

    @precondition(lambda self: self.dev.free_region_bytes())
    @rule(frac=fractions(0.0, 1.2), mode=ATTRIBUTES)
    def allocate_into_free_regions(self, frac: float, mode: str) -> None:
        """Over every free chunk and the budget, within budget + free regions: only GC serves."""
        self._allocate(self.dev.gc_only_size(frac), mode)

    @rule(num_bytes=INVALID_SIZES, mode=ATTRIBUTES)
    def allocate_invalid_size(self, num_bytes: object, mode: str) -> None:
        before = (self.dev.bfc.memory_map(), self.host.bfc.memory_map(),
                  self.dev.snapshot(), self.host.snapshot())
        n_host = len(self.host_calls)
        with raises(ValueError, "VMEM-3", call_text("vmem", num_bytes, mode)):
            self.vm.allocate_raw(256, num_bytes, attributes_for(self.rt, mode))
        assert len(self.host_calls) == n_host, (
            f"{call_text('vmem', num_bytes, mode)} called the host: "
            f"{self.host_calls[n_host:]} [VMEM-3]")
        after = (self.dev.bfc.memory_map(), self.host.bfc.memory_map(),
                 self.dev.snapshot(), self.host.snapshot())
        assert after == before, (
            f"{call_text('vmem', num_bytes, mode)} raised but changed an allocator [VMEM-3]")

    @rule(fail=st.booleans())
    def set_host_fail(self, fail: bool) -> None:
        self.host_sim.fail = fail

    def _free(self, ptr: int) -> None:
        owner = self.owner.pop(ptr)
        other = self.host if owner is self.dev else self.dev
        before, other_before = owner.snapshot(), other.bfc.get_stats()
        n_dev, n_host = len(self.dev_calls), len(self.host_calls)
        try:
            self.vm.deallocate_raw(ptr)
        except self.rt.InvalidPointerError as exc:
            routed = (self.dev_calls[n_dev:], self.host_calls[n_host:])
            raise AssertionError(
                f"vmem.deallocate_raw({ptr:#x}) of a live {owner.label} pointer raised {exc!r} "
                f"after the (device, host) calls {routed} [VMEM-7]") from exc
        routed = (self.dev_calls[n_dev:], self.host_calls[n_host:])
        want = (([("deallocate_raw", ptr)], []) if owner is self.dev
                else ([], [("deallocate_raw", ptr)]))
        assert routed == want, (
            f"vmem.deallocate_raw({ptr:#x}) of a {owner.label} pointer made the (device, host) "
            f"calls {routed}, expected {want} [VMEM-7]")
        owner.record_free(ptr, before)
        other_after = other.bfc.get_stats()
        assert other_after.bytes_in_use == other_before.bytes_in_use, (
            f"vmem.deallocate_raw({ptr:#x}) of a {owner.label} pointer changed the "
            f"{other.label} allocator's bytes_in_use from {other_before.bytes_in_use} to "
            f"{other_after.bytes_in_use} [VMEM-7]")
        self.freed.add(ptr)

    @precondition(lambda self: self.owner)
    @rule(pick=st.integers(0, 1 << 16))
    def free(self, pick: int) -> None:
        self._free(sorted(self.owner)[pick % len(self.owner)])

    @precondition(lambda self: self.owner)
    @rule(pick=st.integers(0, 1 << 16), data=st.data())
    def free_region(self, pick: int, data: st.DataObject) -> None:
        ptr = sorted(self.owner)[pick % len(self.owner)]
        ptrs = region_of(self.owner[ptr].bfc, ptr)
        for p in data.draw(st.permutations(ptrs), label="order"):
            self._free(p)

    @rule(data=st.data())
    def free_invalid(self, data: st.DataObject) -> None:
        before = (self.dev.bfc.memory_map(), self.host.bfc.memory_map())
        self.vm.deallocate_raw(None)
        inside = [p + 1 for p in self.owner]
        stale = sorted(self.freed - set(self.owner))
        ptr = data.draw(st.sampled_from(inside + stale + [(1 << 62) + 256]), label="ptr")
        with raises(self.rt.InvalidPointerError, "VMEM-7", f"vmem.deallocate_raw({ptr:#x})"):
            self.vm.deallocate_raw(ptr)
        after = (self.dev.bfc.memory_map(), self.host.bfc.memory_map())
        assert after == before, (
            f"vmem.deallocate_raw({ptr:#x}) raised but changed a pool [VMEM-7]")

    @rule()
    def clear_stats(self) -> None:
        self.vm.clear_stats()
        self.dev.clear_stats()
        self.host.clear_stats()

    @invariant()
    def consistent(self) -> None:
        self.dev.check()
        self.host.check()
        stats = self.vm.get_stats()
        got = (stats.num_allocs, stats.bytes_in_use, stats.largest_alloc_size,
               stats.bytes_limit, stats.peak_bytes_in_use)
        want = (self.dev.num_allocs, self.dev.bytes_in_use, self.dev.largest, self.dev.limit,
                self.dev.peak + self.host.peak)
        assert got == want, (
            f"vmem.get_stats() (num_allocs, bytes_in_use, largest_alloc_size, bytes_limit, "
            f"peak_bytes_in_use) = {got}, expected the device's, with peak device + host: "
            f"{want} [VMEM-8]")
        for ptr, owner in self.owner.items():
            live = owner.live[ptr]
            got_q = (self.vm.requested_size(ptr), self.vm.allocated_size(ptr),
                     self.vm.allocation_id(ptr))
            assert got_q == (live.requested, live.size, live.allocation_id), (
                f"vmem (requested_size, allocated_size, allocation_id)({ptr:#x}) = {got_q}, "
                f"expected the {owner.label} allocator's {live!r} [VMEM-7]")


# --------------------------------------------------------------------------------------------
# (c) BFCAllocator + GPUAdjustableAllocator


class AdjustMachine(ObservedBFCMachine):
    """A BFC whose limit is adjusted up and down while allocations come and go."""

    @initialize(limit=st.sampled_from([4 * MIB, 16 * MIB + 512]),
                allow_growth=LIKELY, gc=LIKELY)
    def build(self, limit: int, allow_growth: bool, gc: bool) -> None:
        rt = self.rt
        self.dev_sim = rt.SimulatedDeviceMemory(64 * MIB)
        self.faults = FaultInjectingSubAllocator(self.dev_sim)
        self.bfc = rt.BFCAllocator(self.faults, limit, allow_growth, "GPU_0_bfc",
                                   garbage_collection=gc, clock=self.clock, retry_timeout_us=0)
        self.adj = rt.GPUAdjustableAllocator()
        self.obs = BFCObserver(rt, self.bfc, self.dev_sim, self.faults, "bfc", limit, gc)
        self.freed: set[int] = set()

    @rule(num_bytes=SMALL_SIZES, mode=ATTRIBUTES)
    def allocate(self, num_bytes: int, mode: str) -> None:
        self._allocate(num_bytes, mode)

    @rule(frac=fractions(0.01, 0.6), mode=ATTRIBUTES)
    def allocate_fraction(self, frac: float, mode: str) -> None:
        self._allocate(max(1, int(frac * self.obs.limit)), mode)

    def _expected_shrink(self, target: int) -> tuple[list[tuple[int, int]], int, int]:
        """What FreeEmptyMemory(target) must do: released regions, pool left, next region."""
        mm = self.bfc.memory_map()
        pool = mm.total_region_allocated_bytes
        to_free = pool - target
        released = []
        for r in mm.regions:
            if to_free <= 0:
                break
            if len(r.chunks) == 1 and not r.chunks[0].in_use:
                released.append((r.ptr, r.size))
                pool -= r.size
                to_free -= r.size
        # RoundedBytes(min(max(target - pool, 1), 1 MiB)) in size_t: a shortfall wraps to 1 MiB.
        next_region = rounded_bytes(min(max(target - pool, 1), MIB)) if target >= pool else MIB
        return released, pool, next_region

    def _released(self, before: tuple[int, int]) -> list[tuple[int, int]]:
        return [tuple(c) for c in self.dev_sim.free_calls[before[1]:]]

    @rule(how=st.sampled_from(["above", "pool", "zero", "fraction"]),
          amount=st.integers(0, 8 * MIB), frac=fractions(0.0, 1.0))
    def adjust_memory_limit(self, how: str, amount: int, frac: float) -> None:
        """Grow, keep, or shrink to zero or to a fraction of the pool."""
        pool = self.bfc.memory_map().total_region_allocated_bytes
        self._adjust({"above": pool + amount, "pool": pool, "zero": 0,
                      "fraction": int(frac * pool)}[how])

    @precondition(lambda self: self.obs.free_region_bytes())
    @rule(how=st.sampled_from(["one-byte", "first", "free-part", "stable", "below-stable"]),
          frac=fractions(0.0, 1.0))
    def shrink_over_free_regions(self, how: str, frac: float) -> None:
        """Shrink by one byte or by the lowest free region (either releases just that one),
        by part of the fully free regions, to exactly the regions in use, or below them (the
        target cannot be met)."""
        mm = self.bfc.memory_map()
        pool = mm.total_region_allocated_bytes
        stable = pool - self.obs.free_region_bytes()
        first = next(r.size for r in mm.regions if len(r.chunks) == 1 and not r.chunks[0].in_use)
        self._adjust({"one-byte": pool - 1, "first": pool - first,
                      "free-part": pool - max(1, int(frac * (pool - stable))), "stable": stable,
                      "below-stable": max(0, stable - 1 - int(frac * stable))}[how])

    def _adjust(self, target: int) -> None:
        mm = self.bfc.memory_map()
        pool = mm.total_region_allocated_bytes
        call = f"adjust_memory_limit({target}, bfc) with a pool of {pool}"
        if target >= pool:
            released, left, next_region = [], pool, mm.next_region_size
        else:
            released, left, next_region = self._expected_shrink(target)
        want = target if left <= target else left
        before = self.obs.snapshot()
        got = self.adj.adjust_memory_limit(target, self.bfc)
        self.obs.limit = want
        # what was released first: a wrong return value follows from a wrong release
        assert self._released(before) == released, (
            f"{call} released {self._released(before)}, expected the fully free regions "
            f"{released} (ascending address, until the target is met) [ADJ-3]")
        assert got == want, (
            f"{call} returned {got}, expected {want} (the target when the pool fits, else the "
            f"remaining pool) [{'ADJ-1' if target >= pool else 'ADJ-2'}]")
        assert len(self.obs.alloc_log()) == before[0], f"{call} allocated a region [ADJ-1]"
        after = self.bfc.memory_map()
        assert after.total_region_allocated_bytes == left, (
            f"{call} left a pool of {after.total_region_allocated_bytes}, expected {left} "
            f"[ADJ-3]")
        if got == target:
            assert after.memory_limit == target, (
                f"{call} reported the target reached, but the limit is {after.memory_limit} "
                f"[ADJ-2]")
        else:
            assert got > target and after.memory_limit == after.total_region_allocated_bytes, (
                f"{call} missed its target: limit {after.memory_limit}, expected the remaining "
                f"pool {after.total_region_allocated_bytes} (> {target}) [ADJ-2]")
        assert after.next_region_size == next_region, (
            f"after {call} next_region_size is {after.next_region_size}, expected {next_region} "
            f"[{'ADJ-1' if target >= pool else 'ADJ-4'}]")

    @precondition(lambda self: self.obs.free_region_bytes())
    @rule(frac=fractions(0.0, 1.1))
    def free_empty_memory(self, frac: float) -> None:
        mm = self.bfc.memory_map()
        pool = mm.total_region_allocated_bytes
        target = int(frac * pool)
        if target >= pool:
            released, left, next_region = [], pool, mm.next_region_size
        else:
            released, left, next_region = self._expected_shrink(target)
        before = self.obs.snapshot()
        got = self.adj.free_empty_memory(target, self.bfc)
        call = f"free_empty_memory({target}, bfc) with a pool of {pool}"
        assert got == left, f"{call} returned {got}, expected the remaining pool {left} [ADJ-3]"
        assert self._released(before) == released, (
            f"{call} released {self._released(before)}, expected {released} [ADJ-3]")
        after = self.bfc.memory_map()
        assert after.memory_limit == self.obs.limit, f"{call} changed the limit [ADJ-3]"
        assert after.next_region_size == next_region, (
            f"after {call} next_region_size is {after.next_region_size}, expected {next_region} "
            f"[{'ADJ-3' if target >= pool else 'ADJ-4'}]")

    @rule(value=st.sampled_from([-1, -(1 << 64), 1.5, "1048576", None]),
          which=st.sampled_from(["adjust_memory_limit", "free_empty_memory"]))
    def bad_input(self, value: object, which: str) -> None:
        before, log = self.bfc.memory_map(), self.obs.snapshot()
        with raises(ValueError, "ADJ-6", f"{which}({value!r}, bfc)"):
            getattr(self.adj, which)(value, self.bfc)
        with raises(TypeError, "ADJ-6", "get_mem_pool_stats(a sub-allocator)"):
            self.adj.get_mem_pool_stats(self.dev_sim)
        assert self.bfc.memory_map() == before and self.obs.snapshot() == log, (
            f"{which}({value!r}, bfc) raised but changed the allocator [ADJ-6]")

    @invariant()
    def consistent(self) -> None:
        self.obs.check()
        stats = self.adj.get_mem_pool_stats(self.bfc)
        mm = self.bfc.memory_map()
        pool = sum(r.size for r in mm.regions)
        stable = sum(r.size for r in mm.regions if any(c.in_use for c in r.chunks))
        assert (stats.pool_bytes, stats.stable_bytes) == (pool, stable), (
            f"get_mem_pool_stats(bfc) = ({stats.pool_bytes}, {stats.stable_bytes}), expected "
            f"(pool {pool}, stable {stable}) [ADJ-5]")


# --------------------------------------------------------------------------------------------
# The tests


@contextlib.contextmanager
def quiet_runtime_logs(rt: types.ModuleType):
    """Drop the runtime's expected WARNING records (out of memory, garbage collection) while a
    machine runs thousands of steps; errors still show."""
    logger = logging.getLogger(rt.__name__)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@pytest.mark.clause("BFC-1", "BFC-2", "BFC-3", "BFC-4", "BFC-5", "BFC-6", "BFC-8", "BFC-9",
                     "BFC-11", "BFC-13", "BFC-14", "BFC-15", "BFC-16")
@pytest.mark.capability("bfc")
@STATEFUL_LIMIT
def test_bfc_state_machine(rt: types.ModuleType) -> None:
    """Random allocate / free / fault / clear_stats sequences on one BFCAllocator."""
    with quiet_runtime_logs(rt):
        run_state_machine_as_test(lambda: BFCMachine(rt), settings=stateful_settings())


@pytest.mark.clause("VMEM-3", "VMEM-4", "VMEM-5", "VMEM-7", "VMEM-8", "VMEM-10",
                     "BFC-9", "BFC-13", "BFC-16")
@pytest.mark.capability("bfc", "vmem")
@STATEFUL_LIMIT
def test_vmem_state_machine(rt: types.ModuleType) -> None:
    """Random sequences on a GPUVMemAllocator: device first, host fallback, routed frees."""
    with quiet_runtime_logs(rt):
        run_state_machine_as_test(lambda: VMemMachine(rt), settings=stateful_settings())


@pytest.mark.clause("ADJ-1", "ADJ-2", "ADJ-3", "ADJ-4", "ADJ-5", "ADJ-6", "BFC-8", "BFC-9",
                     "BFC-11")
@pytest.mark.capability("bfc", "adjustable")
@STATEFUL_LIMIT
def test_adjustable_state_machine(rt: types.ModuleType) -> None:
    """Random allocate / free / adjust / free_empty_memory sequences on a BFC allocator."""
    with quiet_runtime_logs(rt):
        run_state_machine_as_test(lambda: AdjustMachine(rt), settings=stateful_settings())
