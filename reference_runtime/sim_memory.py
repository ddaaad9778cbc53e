"""Simulated device and host memory: the embedded sub-allocators (SPEC.md API-3).

Addresses are integers; no bytes are stored. Every live instance owns a private address
span (at most 61,440 instances of each kind are live at once), device spans and host spans
are disjoint, so pointers of two simulated GPUs (or of a GPU and its host fallback) never
collide. Regions are 256-aligned, whatever ``alignment`` a
caller passes (TF's ``DeviceMemAllocator::Alloc`` ignores it too: ``cudaMalloc`` returns
256-aligned memory), and never adjacent: a gap of ``REGION_GAP`` bytes separates them.
"""

from __future__ import annotations

import bisect
import collections
import threading
import weakref

from .allocator import InvalidPointerError, SubAllocator, check_size

__all__ = ["SimulatedMemory", "SimulatedDeviceMemory", "SimulatedHostMemory", "REGION_GAP"]

REGION_GAP = 4096
_ALIGNMENT = 256         # cudaMalloc's alignment
_SPAN = 1 << 44          # 16 TiB of addresses per instance
_DEVICE_BASE = 1 << 56   # device spans: [2^56, 2^60)
_HOST_BASE = 1 << 60     # host spans from 2^60, as many as the device ones
_SPANS = ((1 << 60) - _DEVICE_BASE) // _SPAN   # 61,440 live instances of each kind at most


class _Spans:
    """The address spans of one kind of memory. An instance takes one no instance took
    before while any is left, then the one gone longest; a span is free again once the
    instance that held it is garbage collected, so two live instances never share one."""

    def __init__(self, base: int) -> None:
        self._base = base
        self._lock = threading.Lock()
        self._unused = 0                    # spans [0, _unused) were taken once
        self._given_back: collections.deque[int] = collections.deque()

    def take(self, owner: SimulatedMemory) -> int:
        with self._lock:
            if self._unused < _SPANS:
                index = self._unused
                self._unused += 1
            elif self._given_back:
                index = self._given_back.popleft()
            else:
                raise MemoryError(f"{type(owner).__name__}: all {_SPANS} address spans are "
                                  f"held by live instances (at most {_SPANS} at once)")
        # Given back without the lock: a finalizer may run in any thread, this one included
        # while it holds the lock; deque.append is atomic.
        weakref.finalize(owner, self._given_back.append, index)
        return self._base + index * _SPAN


class SimulatedMemory(SubAllocator):
    """A fixed-capacity memory that hands out address ranges (a ``SubAllocator``)."""

    def __init__(self, capacity_bytes: int, spans: _Spans) -> None:
        capacity_bytes = check_size(capacity_bytes, "capacity_bytes")
        base = spans.take(self)
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
        for start in self._starts:
            ptr = -(-prev_end // align) * align
            if ptr + size + REGION_GAP <= start:
                return ptr
            prev_end = start + self.live_regions[start] + REGION_GAP
        ptr = -(-prev_end // align) * align
        if self._fits(ptr, size):
            return ptr
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
                message = (f"{type(self).__name__}.free({ptr:#x}, {num_bytes}): "
                           f"no live region of {num_bytes} bytes starts there")
                if size:            # a live region has 1 byte or more
                    message = f"{message}; the live region there has {size} bytes"
                raise InvalidPointerError(message)
            del self.live_regions[ptr]
            del self._starts[bisect.bisect_left(self._starts, ptr)]
            self.bytes_in_use -= size

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(capacity={self._capacity}, "
                f"bytes_in_use={self.bytes_in_use}, regions={len(self.live_regions)})")


class SimulatedDeviceMemory(SimulatedMemory):
    """Simulated GPU memory (``cudaMalloc``)."""

    def __init__(self, capacity_bytes: int) -> None:
        super().__init__(capacity_bytes, _device_spans)


class SimulatedHostMemory(SimulatedMemory):
    """Simulated pinned host memory (``cudaHostAlloc``)."""

    def __init__(self, capacity_bytes: int) -> None:
        super().__init__(capacity_bytes, _host_spans)


_device_spans = _Spans(_DEVICE_BASE)
_host_spans = _Spans(_HOST_BASE)
