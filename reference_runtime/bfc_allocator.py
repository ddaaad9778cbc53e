"""TensorFlow 1.15 ``BFCAllocator`` (best-fit with coalescing), byte for byte (SPEC.md, BFC).

Memory comes from a ``SubAllocator`` in regions; each region is tiled by chunks. Free
chunks live in 21 bins ordered by (size, address). An allocation rounds up to 256 bytes,
takes the smallest fitting free chunk (lowest address on ties), splits it when worthwhile,
and otherwise grows the pool (``Extend``), then garbage-collects fully free regions, then
(unless ``no_retry_on_failure``) waits for frees through ``AllocatorRetry``.

One lock guards the state; the retry wait runs outside it. ``GPUAdjustableAllocator`` edits
the limit and releases regions through the small set of ``_adj_*`` methods below (it is a
"friend" of this class, as in AntMan).
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, insort
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from .allocator import (AllocationAttributes, Allocator, AllocatorStats,
                                         InvalidPointerError, SubAllocator, check_size)
from .allocator_retry import DEFAULT_MAX_WAIT_US, AllocatorRetry
from .clock import Clock

__all__ = [
    "BFCAllocator",
    "MemoryMap",
    "RegionInfo",
    "ChunkInfo",
    "BinDebugInfo",
    "rounded_bytes",
    "bin_num_for_size",
    "backpedal_size",
    "K_MIN_ALLOCATION_BITS",
    "K_MIN_ALLOCATION_SIZE",
    "K_NUM_BINS",
    "K_MAX_INTERNAL_FRAGMENTATION",
    "K_INVALID_BIN_NUM",
    "K_BACKPEDAL_FACTOR",
    "MAX_SIZE_T",
]

_log = logging.getLogger(__name__)

K_MIN_ALLOCATION_BITS = 8
K_MIN_ALLOCATION_SIZE = 1 << K_MIN_ALLOCATION_BITS   # 256
K_NUM_BINS = 21
K_MAX_INTERNAL_FRAGMENTATION = 128 << 20              # 128 MiB
K_INVALID_BIN_NUM = -1
K_BACKPEDAL_FACTOR = np.float32(0.9)                  # C++ `static constexpr float`
MAX_SIZE_T = (1 << 64) - 1
_GROWTH_FIRST_REGION = 1 << 20                        # 1 MiB in TF 1.15
_SHIFT = 64                                   # bin key = size << 64 | ptr (ptr <= MAX_SIZE_T)
_NO_RETRY_WARNINGS_MAX = 10
_no_retry_warnings = 0


def rounded_bytes(n: int) -> int:
    """``RoundedBytes``: ``256 * ceil(n / 256)``."""
    return (n + 255) & ~255


def bin_num_for_size(n: int) -> int:
    """``BinNumForSize``: ``min(20, floor(log2(max(n, 256) >> 8)))``."""
    return min((max(n, 256) >> 8).bit_length() - 1, 20)


def backpedal_size(n: int) -> int:
    """One backpedal step: ``RoundedBytes(size_t(float(n) * 0.9f))`` in float32."""
    return rounded_bytes(int(np.float32(n) * K_BACKPEDAL_FACTOR))


@dataclass(frozen=True)
class ChunkInfo:
    ptr: int
    size: int
    requested_size: int
    in_use: bool
    allocation_id: int
    bin_num: int          # -1 (kInvalidBinNum) for a chunk in use


@dataclass(frozen=True)
class RegionInfo:
    ptr: int
    size: int
    chunks: tuple[ChunkInfo, ...]


@dataclass(frozen=True)
class MemoryMap:
    memory_limit: int
    total_region_allocated_bytes: int
    next_region_size: int
    regions: tuple[RegionInfo, ...]


@dataclass(frozen=True)
class BinDebugInfo:
    total_bytes_in_use: int = 0
    total_bytes_in_bin: int = 0
    total_requested_bytes_in_use: int = 0
    total_chunks_in_use: int = 0
    total_chunks_in_bin: int = 0


class _Chunk:
    """A piece of a region. ``allocation_id == -1`` means free."""

    __slots__ = ("ptr", "size", "requested_size", "allocation_id", "prev", "next", "bin_num")

    def __init__(self, ptr: int, size: int, prev: "_Chunk | None",
                 nxt: "_Chunk | None") -> None:
        self.ptr = ptr
        self.size = size
        self.requested_size = 0
        self.allocation_id = -1
        self.prev = prev
        self.next = nxt
        self.bin_num = K_INVALID_BIN_NUM


class _Region:
    __slots__ = ("ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size


class BFCAllocator(Allocator):
    """TF 1.15 ``BFCAllocator(sub_allocator, total_memory, allow_growth, name, garbage_collection)``."""

    def __init__(self, sub_allocator: SubAllocator, total_memory: int, allow_growth: bool,
                 name: str, garbage_collection: bool = False, *, clock: Clock | None = None,
                 retry_timeout_us: int = DEFAULT_MAX_WAIT_US) -> None:
        total_memory = check_size(total_memory, "total_memory")
        self._retry_timeout_us = check_size(retry_timeout_us, "retry_timeout_us")
        self._sub = sub_allocator
        self._name = str(name)
        self._garbage_collection = bool(garbage_collection)
        self._lock = threading.Lock()
        self._retry = AllocatorRetry(clock)
        self._memory_limit = total_memory
        if allow_growth:
            self._curr_region_bytes = rounded_bytes(min(total_memory, _GROWTH_FIRST_REGION))
        else:
            self._curr_region_bytes = rounded_bytes(total_memory)
        self._total_region_bytes = 0
        self._started_backpedal = False
        self._next_allocation_id = 1
        self._regions: list[_Region] = []      # ascending address
        self._region_starts: list[int] = []
        self._chunks: dict[int, _Chunk] = {}   # chunk start → chunk (the handle table)
        self._spare: list[_Chunk] = []         # deleted chunks, reused (TF free_chunks_list_;
                                               # prev and next are set again on reuse)
        self._bins: list[list[int]] = [[] for _ in range(K_NUM_BINS)]
        self._nonempty = 0                     # bit b set ⇔ bin b has a free chunk
        # stats (TF AllocatorStats; bytes_reserved fields stay 0)
        self._num_allocs = 0
        self._bytes_in_use = 0
        self._peak_bytes_in_use = 0
        self._largest_alloc_size = 0

    # -- Allocator ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def sub_allocator(self) -> SubAllocator:
        return self._sub

    @property
    def garbage_collection(self) -> bool:
        return self._garbage_collection

    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None:
        if type(num_bytes) is not int or num_bytes <= 0 or num_bytes > MAX_SIZE_T:
            num_bytes = check_size(num_bytes, f"{self._name}.allocate_raw num_bytes")
            if num_bytes == 0 or num_bytes > MAX_SIZE_T:
                return None  # TF: 0 bytes → nullptr; no size_t holds more than 2^64-1
        with self._lock:
            ptr = self._find_chunk_ptr(num_bytes)
            if ptr is None:
                ptr = self._allocate_slow(alignment, num_bytes)
        if ptr is not None:
            return ptr
        if attributes is not None and attributes.no_retry_on_failure:
            global _no_retry_warnings
            if _no_retry_warnings < _NO_RETRY_WARNINGS_MAX:
                _no_retry_warnings += 1
                _log.warning("Allocator (%s) ran out of memory trying to allocate %d bytes. "
                             "The caller indicates that this is not a failure, but may mean "
                             "that there could be performance gains if more memory were "
                             "available.", self._name, num_bytes)
            return None
        return self._retry.allocate_raw(
            lambda verbose: self._allocate_raw_internal(alignment, num_bytes, verbose),
            self._retry_timeout_us)

    def _allocate_raw_internal(self, alignment: int, num_bytes: int,
                               verbose: bool) -> int | None:
        with self._lock:
            ptr = self._find_chunk_ptr(num_bytes)
            if ptr is None:
                ptr = self._allocate_slow(alignment, num_bytes)
            if ptr is None and verbose:
                _log.warning("Allocator (%s) ran out of memory trying to allocate %d bytes "
                             "(limit %d, in use %d, pool %d).", self._name, num_bytes,
                             self._memory_limit, self._bytes_in_use, self._total_region_bytes)
        return ptr

    def _allocate_slow(self, alignment: int, num_bytes: int) -> int | None:
        """``AllocateRawInternal`` after the first ``FindChunkPtr`` failed (lock held)."""
        rounded = (num_bytes + 255) & ~255
        chunk = self._extend(alignment, rounded)
        if chunk is None and self._deallocate_free_regions(rounded):
            chunk = self._extend(alignment, rounded)
        if chunk is None:
            return None
        # TF files the new region's one free chunk in its bin and searches again: no other
        # free chunk fits (the search before failed under this lock, and a release only
        # took free chunks away) and this one has at least ``rounded`` bytes, so the search
        # would take it; it is handed to _find_chunk_ptr directly instead.
        return self._find_chunk_ptr(num_bytes, chunk)

    def _find_chunk_ptr(self, num_bytes: int, chunk: _Chunk | None = None) -> int | None:
        """``FindChunkPtr``: best fit by (size, address), split, mark used (lock held).

        ``chunk``: a new region's free chunk (in no bin), the best fit already known."""
        rounded = (num_bytes + 255) & ~255
        bins = self._bins
        if chunk is None:
            b = (rounded >> 8).bit_length() - 1
            if b > 20:
                b = 20
            mask = self._nonempty >> b          # no set bit: the loop's else returns None
            key = rounded << _SHIFT
            while mask:
                step = (mask & -mask).bit_length() - 1     # to the next non-empty bin
                b += step
                mask >>= step
                lst = bins[b]
                i = bisect_left(lst, key)
                if i < len(lst):
                    break
                b += 1
                mask >>= 1
            else:
                return None
            found = lst.pop(i)
            if not lst:
                self._nonempty &= ~(1 << b)
            chunk = self._chunks[found & MAX_SIZE_T]
            chunk.bin_num = K_INVALID_BIN_NUM
        size = chunk.size
        if size >= rounded * 2 or size - rounded >= K_MAX_INTERNAL_FRAGMENTATION:
            # SplitChunk: the caller keeps the low part; the rest becomes a free chunk.
            rest_ptr = chunk.ptr + rounded
            rest_size = size - rounded
            nxt = chunk.next
            spare = self._spare
            if spare:
                rest = spare.pop()
                rest.ptr = rest_ptr
                rest.size = rest_size
                rest.requested_size = 0
                rest.prev = chunk
                rest.next = nxt
            else:
                rest = _Chunk(rest_ptr, rest_size, chunk, nxt)
            if nxt is not None:
                nxt.prev = rest
            chunk.next = rest
            chunk.size = size = rounded
            self._chunks[rest_ptr] = rest
            rb = min((rest_size >> 8).bit_length() - 1, 20)    # BinNumForSize
            rest.bin_num = rb
            insort(bins[rb], (rest_size << _SHIFT) | rest_ptr)
            self._nonempty |= 1 << rb
        chunk.requested_size = num_bytes
        chunk.allocation_id = self._next_allocation_id
        self._next_allocation_id += 1
        self._num_allocs += 1
        in_use = self._bytes_in_use + size
        self._bytes_in_use = in_use
        if in_use > self._peak_bytes_in_use:
            self._peak_bytes_in_use = in_use
        if size > self._largest_alloc_size:
            self._largest_alloc_size = size
        return chunk.ptr

    def _remove_free(self, chunk: _Chunk) -> None:
        b = chunk.bin_num
        lst = self._bins[b]
        del lst[bisect_left(lst, (chunk.size << _SHIFT) | chunk.ptr)]
        if not lst:
            self._nonempty &= ~(1 << b)
        # bin_num is left as it is: the one caller, _release_region, drops the chunk

    def _extend(self, alignment: int, rounded: int) -> _Chunk | None:
        """``Extend``: obtain a new region from the sub-allocator (lock held); its one free
        chunk, in no bin yet, or None."""
        available = ((self._memory_limit - self._total_region_bytes) // 256) * 256
        if rounded > available:
            return None
        increased = False
        if self._curr_region_bytes == 0:
            self._curr_region_bytes = K_MIN_ALLOCATION_SIZE  # D-BFC-5: 0 never doubles
        while rounded > self._curr_region_bytes:
            self._curr_region_bytes *= 2
            increased = True
        size = min(self._curr_region_bytes, available)
        ptr = self._sub.alloc(alignment, size)
        if ptr is None and not self._started_backpedal:
            self._started_backpedal = True   # only once per allocator lifetime
            while ptr is None:
                smaller = backpedal_size(size)
                if smaller < rounded or smaller >= size:  # D-BFC-1: stop when not shrinking
                    break
                size = smaller
                ptr = self._sub.alloc(alignment, size)
        if ptr is None:
            return None
        if not increased:
            self._curr_region_bytes *= 2
        self._total_region_bytes += size
        region = _Region(ptr, size)
        i = bisect_left(self._region_starts, ptr)
        self._region_starts.insert(i, ptr)
        self._regions.insert(i, region)
        chunk = _Chunk(ptr, size, None, None)
        self._chunks[ptr] = chunk
        return chunk

    def _region_in_use(self, region: _Region) -> bool:
        c = self._chunks[region.ptr]
        while c is not None:
            if c.allocation_id != -1:
                return True
            c = c.next
        return False

    def _deallocate_free_regions(self, rounded: int) -> bool:
        """``DeallocateFreeRegions``: release every fully free region if that can help."""
        if not self._garbage_collection:
            return False
        free_regions = [r for r in self._regions if not self._region_in_use(r)]
        free_bytes = sum(r.size for r in free_regions)
        if free_bytes == 0:
            return False
        if rounded > self._memory_limit - self._total_region_bytes + free_bytes:
            return False
        _log.warning("Garbage collection: deallocate free memory regions (i.e., allocations) "
                     "so that we can re-allocate a larger region to avoid OOM due to memory "
                     "fragmentation. Set TF_ENABLE_GPU_GARBAGE_COLLECTION=false if you'd "
                     "like to disable this feature.")
        for region in free_regions:
            self._release_region(region)
        return True

    def _release_region(self, region: _Region) -> None:
        """Give a region with no chunk in use back to the sub-allocator (lock held): it is one
        free chunk, in its bin (free neighbours always merge, BFC-5)."""
        self._remove_free(self._chunks.pop(region.ptr))
        i = bisect_left(self._region_starts, region.ptr)
        del self._region_starts[i]
        del self._regions[i]
        self._total_region_bytes -= region.size
        self._sub.free(region.ptr, region.size)

    def deallocate_raw(self, ptr: int | None) -> None:
        if type(ptr) is not int:
            if ptr is None:
                return
            if not isinstance(ptr, Integral) or isinstance(ptr, bool):
                raise InvalidPointerError(self._bad_pointer("deallocate_raw", ptr, None))
            ptr = int(ptr)  # NumPy / CuPy integer addresses
        # The hot path: _remove_free and the merges are inlined below on purpose (a helper
        # call per merge costs about 15 % of a free), and so is the insertion into a bin
        # (as _find_chunk_ptr's split does it); they must stay in step with those.
        with self._lock:
            c = self._chunks.get(ptr)
            if c is None or c.allocation_id == -1:
                raise InvalidPointerError(self._bad_pointer("deallocate_raw", ptr, c))
            c.allocation_id = -1
            size = c.size
            self._bytes_in_use -= size
            bins = self._bins
            nxt = c.next
            if nxt is not None and nxt.allocation_id == -1:
                # RemoveFreeChunkFromBin(next); Merge(c, next)
                nsize = nxt.size
                lst = bins[nxt.bin_num]
                del lst[bisect_left(lst, (nsize << _SHIFT) | nxt.ptr)]
                if not lst:
                    self._nonempty &= ~(1 << nxt.bin_num)
                c.size = size = size + nsize
                c.next = nn = nxt.next
                if nn is not None:
                    nn.prev = c
                del self._chunks[nxt.ptr]
                self._spare.append(nxt)
            prev = c.prev
            if prev is not None and prev.allocation_id == -1:
                # RemoveFreeChunkFromBin(prev); Merge(prev, c)
                psize = prev.size
                lst = bins[prev.bin_num]
                del lst[bisect_left(lst, (psize << _SHIFT) | prev.ptr)]
                if not lst:
                    self._nonempty &= ~(1 << prev.bin_num)
                prev.size = size = psize + size
                prev.next = nn = c.next
                if nn is not None:
                    nn.prev = prev
                del self._chunks[ptr]
                self._spare.append(c)
                c = prev
            # InsertFreeChunkIntoBin(c)
            b = (size >> 8).bit_length() - 1
            if b > 20:
                b = 20
            c.bin_num = b
            insort(bins[b], (size << _SHIFT) | c.ptr)
            self._nonempty |= 1 << b
        if self._retry._waiters:
            self._retry.notify_dealloc()

    def _bad_pointer(self, what: str, ptr: object, c: _Chunk | None) -> str:
        shown = f"{ptr:#x}" if isinstance(ptr, int) else repr(ptr)
        if c is not None:
            return f"{self._name}.{what}({shown}): the chunk is not in use (double free?)"
        return (f"{self._name}.{what}({shown}): not the start of a chunk of this allocator "
                f"(pointer never allocated here)")

    # -- per-pointer queries ------------------------------------------------------------
    def tracks_allocation_sizes(self) -> bool:
        return True

    def _chunk_for(self, what: str, ptr: int) -> _Chunk:
        c = (self._chunks.get(int(ptr))
             if isinstance(ptr, Integral) and not isinstance(ptr, bool) else None)
        if c is None:
            raise InvalidPointerError(self._bad_pointer(what, ptr, None))
        return c

    def requested_size(self, ptr: int) -> int:
        with self._lock:
            return self._chunk_for("requested_size", ptr).requested_size

    def allocated_size(self, ptr: int) -> int:
        with self._lock:
            return self._chunk_for("allocated_size", ptr).size

    def allocation_id(self, ptr: int) -> int:
        with self._lock:
            return self._chunk_for("allocation_id", ptr).allocation_id

    # -- stats --------------------------------------------------------------------------
    def get_stats(self) -> AllocatorStats:
        with self._lock:
            return AllocatorStats(
                num_allocs=self._num_allocs, bytes_in_use=self._bytes_in_use,
                peak_bytes_in_use=self._peak_bytes_in_use,
                largest_alloc_size=self._largest_alloc_size, bytes_limit=self._memory_limit)

    def clear_stats(self) -> None:
        with self._lock:
            self._num_allocs = 0
            self._peak_bytes_in_use = self._bytes_in_use
            self._largest_alloc_size = 0

    # -- introspection ------------------------------------------------------------------
    def memory_map(self) -> MemoryMap:
        """A consistent snapshot of limit, pool, next region size, regions and chunks."""
        with self._lock:
            regions = []
            for r in self._regions:
                chunks = []
                c = self._chunks[r.ptr]
                while c is not None:
                    chunks.append(ChunkInfo(c.ptr, c.size, c.requested_size,
                                            c.allocation_id != -1, c.allocation_id,
                                            c.bin_num))
                    c = c.next
                regions.append(RegionInfo(r.ptr, r.size, tuple(chunks)))
            return MemoryMap(self._memory_limit, self._total_region_bytes,
                             self._curr_region_bytes, tuple(regions))

    def get_bin_debug_info(self) -> list[BinDebugInfo]:
        """TF ``get_bin_debug_info``: every chunk, in use or free, by ``BinNumForSize(size)``."""
        acc = [[0, 0, 0, 0, 0] for _ in range(K_NUM_BINS)]
        with self._lock:
            for r in self._regions:
                c = self._chunks[r.ptr]
                while c is not None:
                    a = acc[bin_num_for_size(c.size)]
                    a[1] += c.size
                    a[4] += 1
                    if c.allocation_id != -1:
                        a[0] += c.size
                        a[2] += c.requested_size
                        a[3] += 1
                    c = c.next
        return [BinDebugInfo(*a) for a in acc]

    def __repr__(self) -> str:
        return (f"BFCAllocator(name={self._name!r}, limit={self._memory_limit}, "
                f"pool={self._total_region_bytes}, in_use={self._bytes_in_use})")

    # -- "friend" interface for GPUAdjustableAllocator (ADJ clauses) ----------------------
    # The caller holds ``_lock`` (``with bfc._lock:``) around every use of these.
    def _adj_pool_bytes(self) -> int:
        return self._total_region_bytes

    def _adj_set_memory_limit(self, limit: int) -> None:
        self._memory_limit = limit

    def _adj_set_next_region_size(self, size: int) -> None:
        self._curr_region_bytes = size

    def _adj_regions(self) -> list[tuple[int, int, bool]]:
        """``(ptr, size, fully_free)`` per region, in ascending address order.

        ``fully_free``: the first chunk spans the whole region and is not in use.
        """
        chunks = self._chunks
        return [(r.ptr, r.size, chunks[r.ptr].size == r.size
                 and chunks[r.ptr].allocation_id == -1) for r in self._regions]

    def _adj_release_region(self, ptr: int) -> None:
        self._release_region(self._regions[bisect_left(self._region_starts, ptr)])
