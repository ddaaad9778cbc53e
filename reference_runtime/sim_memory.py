"""Simulated device and host memory: the embedded sub-allocators (SPEC.md API-3).

Addresses are integers; no bytes are stored. Every instance owns a private address span,
device spans and host spans are disjoint, so pointers of two simulated GPUs (or of a GPU
and its host fallback) never collide. Regions are 256-aligned, whatever ``alignment`` a
caller passes (TF's ``DeviceMemAllocator::Alloc`` ignores it too: ``cudaMalloc`` returns
256-aligned memory), and never adjacent: a gap of ``REGION_GAP`` bytes separates them.
"""

from __future__ import annotations

import bisect
import itertools
import threading

from .allocator import InvalidPointerError, SubAllocator, check_size

__all__ = ["SimulatedMemory", "SimulatedDeviceMemory", "SimulatedHostMemory", "REGION_GAP"]

REGION_GAP = 4096
_ALIGNMENT = 256         # cudaMalloc's alignment
_SPAN = 1 << 44          # 16 TiB of addresses per instance
_DEVICE_BASE = 1 << 56   # device spans: [2^56, 2^60)
_HOST_BASE = 1 << 60     # host spans:   [2^60, 2^63)
_DEVICE_SPANS = ((1 << 60) - _DEVICE_BASE) // _SPAN
_HOST_SPANS = ((1 << 63) - _HOST_BASE) // _SPAN
_device_ids = itertools.count()
_host_ids = itertools.count()


class SimulatedMemory(SubAllocator):
    """A fixed-capacity memory that hands out address ranges (a ``SubAllocator``)."""

    def __init__(self, capacity_bytes: int, base: int) -> None:
        capacity_bytes = check_size(capacity_bytes, "capacity_bytes")
        self._lock = threading.Lock()
        self._capacity = capacity_bytes
        self._base = base
        self._end = base + _SPAN
        self._cursor = base
        self._starts: list[int] = []        # sorted live region starts
        self.live_regions: dict[int, int] = {}
        self.bytes_in_use = 0
        self.alloc_calls: list[int] = []
        self.free_calls: list[tuple[int, int]] = []
        self.fail = False

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._capacity = check_size(value, "capacity")

    def alloc(self, alignment: int, num_bytes: int) -> int | None:
        with self._lock:
            self.alloc_calls.append(num_bytes)
            if self.fail or num_bytes <= 0 or self.bytes_in_use + num_bytes > self._capacity:
                return None
            ptr = self._place(num_bytes, _ALIGNMENT)
            if ptr is None:
                return None
            bisect.insort(self._starts, ptr)
            self.live_regions[ptr] = num_bytes
            self.bytes_in_use += num_bytes
            return ptr

    def _place(self, size: int, align: int) -> int | None:
        """Bump the cursor; when the request does not fit after it, first fit from the start
        (the cursor is not moved back)."""
        ptr = -(-self._cursor // align) * align
        if self._fits(ptr, size):
            self._cursor = ptr + size + REGION_GAP
            return ptr
        prev_end = self._base
        for start in self._starts + [self._end]:
            ptr = -(-prev_end // align) * align
            if ptr + size + REGION_GAP <= start:
                return ptr
            prev_end = start + self.live_regions.get(start, 0) + REGION_GAP
        return None

    def _fits(self, ptr: int, size: int) -> bool:
        if ptr + size + REGION_GAP > self._end:
            return False
        i = bisect.bisect_left(self._starts, ptr)
        if i < len(self._starts) and self._starts[i] < ptr + size + REGION_GAP:
            return False
        if i > 0:
            before = self._starts[i - 1]
            if before + self.live_regions[before] + REGION_GAP > ptr:
                return False
        return True

    def free(self, ptr: int, num_bytes: int) -> None:
        with self._lock:
            self.free_calls.append((ptr, num_bytes))
            size = self.live_regions.get(ptr)
            if size != num_bytes:   # None: no live region starts there
                there = "none starts there" if size is None else f"the one there has {size}"
                raise InvalidPointerError(f"{type(self).__name__}.free({ptr:#x}, {num_bytes}): "
                                          f"no live region of {num_bytes} bytes ({there})")
            del self.live_regions[ptr]
            del self._starts[bisect.bisect_left(self._starts, ptr)]
            self.bytes_in_use -= size

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(capacity={self._capacity}, "
                f"bytes_in_use={self.bytes_in_use}, regions={len(self.live_regions)})")


class SimulatedDeviceMemory(SimulatedMemory):
    """Simulated GPU memory (``cudaMalloc``)."""

    def __init__(self, capacity_bytes: int) -> None:
        super().__init__(capacity_bytes,
                         _DEVICE_BASE + (next(_device_ids) % _DEVICE_SPANS) * _SPAN)


class SimulatedHostMemory(SimulatedMemory):
    """Simulated pinned host memory (``cudaHostAlloc``)."""

    def __init__(self, capacity_bytes: int) -> None:
        super().__init__(capacity_bytes,
                         _HOST_BASE + (next(_host_ids) % _HOST_SPANS) * _SPAN)
