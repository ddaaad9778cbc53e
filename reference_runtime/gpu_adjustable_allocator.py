"""AntMan ``GPUAdjustableAllocator``: change a BFC allocator's memory limit at run time (ADJ).

A stateless helper and a "friend" of ``BFCAllocator``: it works under the BFC's lock through
the ``_adj_*`` methods only. Growing, or shrinking to no less than the current pool, just
sets the limit; shrinking below the pool first releases whole, fully free regions in
ascending address order until the target is met (``free_empty_memory``), and the limit
becomes the target when the pool then fits, else the remaining pool.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .allocator import check_size
from .bfc_allocator import MAX_SIZE_T, BFCAllocator, rounded_bytes

__all__ = ["GPUAdjustableAllocator", "MemPoolStats"]

_log = logging.getLogger(__name__)

_MAX_NEXT_REGION = 1 << 20  # 1 MiB


@dataclass(frozen=True)
class MemPoolStats:
    """``GetMemPoolStats``: bytes held from the sub-allocator, and those in regions in use."""

    pool_bytes: int
    stable_bytes: int


def _check_bfc(bfc: object, what: str) -> BFCAllocator:
    if not isinstance(bfc, BFCAllocator):
        raise TypeError(f"GPUAdjustableAllocator.{what}: bfc must be a BFCAllocator, "
                        f"got {type(bfc).__name__}")
    return bfc


def _check_limit(value: object, what: str) -> int:
    """A limit as AntMan's ``size_t``: an int in [0, 2^64-1], else ``ValueError`` (ADJ-6)."""
    value = check_size(value, what)
    if value > MAX_SIZE_T:
        raise ValueError(f"{what} must be at most 2^64-1, got {value}")
    return value


class GPUAdjustableAllocator:
    """``AdjustMemoryLimit``, ``FreeEmptyMemory`` and ``GetMemPoolStats`` on a BFC allocator."""

    def adjust_memory_limit(self, new_limit: int, bfc: BFCAllocator) -> int:
        """Set the limit to ``new_limit`` (releasing free regions if needed); return the limit."""
        new_limit = _check_limit(new_limit, "GPUAdjustableAllocator.adjust_memory_limit: new_limit")
        bfc = _check_bfc(bfc, "adjust_memory_limit")
        with bfc._lock:
            # A limit at or above the pool (ADJ-1) frees nothing and leaves next as it is:
            # _free_empty_memory_locked returns the pool untouched, which is <= new_limit.
            remaining = self._free_empty_memory_locked(new_limit, bfc)
            if remaining <= new_limit:
                bfc._adj_set_memory_limit(new_limit)
                return new_limit
            _log.warning("%s: cannot shrink the memory limit to %d bytes: %d bytes of regions "
                         "are still in use; the limit is now %d", bfc.name, new_limit,
                         remaining, remaining)
            bfc._adj_set_memory_limit(remaining)
            return remaining

    def free_empty_memory(self, target: int, bfc: BFCAllocator) -> int:
        """Release fully free regions until the pool is at most ``target``; return the pool."""
        target = _check_limit(target, "GPUAdjustableAllocator.free_empty_memory: target")
        bfc = _check_bfc(bfc, "free_empty_memory")
        with bfc._lock:
            return self._free_empty_memory_locked(target, bfc)

    @staticmethod
    def _free_empty_memory_locked(target: int, bfc: BFCAllocator) -> int:
        pool = bfc._adj_pool_bytes()
        to_free = pool - target
        if to_free <= 0:
            return pool
        for ptr, size, fully_free in bfc._adj_regions():
            if not fully_free:
                continue
            bfc._adj_release_region(ptr)
            to_free -= size
            if to_free <= 0:
                break
        pool = bfc._adj_pool_bytes()
        # RoundedBytes(min(max(target - pool, 1), 1 MiB)) in size_t: a negative gap wraps to
        # a huge value, so a shrink that fell short resets the next region to 1 MiB.
        gap = target - pool
        if gap < 0:
            gap = (1 << 64) + gap
        bfc._adj_set_next_region_size(rounded_bytes(min(max(gap, 1), _MAX_NEXT_REGION)))
        return pool

    def get_mem_pool_stats(self, bfc: BFCAllocator) -> MemPoolStats:
        """Pool = Σ region sizes; stable = Σ sizes of regions holding a chunk in use."""
        bfc = _check_bfc(bfc, "get_mem_pool_stats")
        with bfc._lock:
            pool = stable = 0
            # Free neighbours always coalesce, so a region holds a chunk in use exactly when
            # it is not one free chunk (no walk over its chunks under the lock).
            for _, size, fully_free in bfc._adj_regions():
                pool += size
                if not fully_free:
                    stable += size
            return MemPoolStats(pool, stable)
