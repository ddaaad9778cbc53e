"""TensorFlow 2.21's compiled BFC allocators behind SPEC.md's ``BFCAllocator`` API (BFC, ENV).

``BFCAllocator`` is ``tsl::BFCAllocator`` and ``GPUBFCAllocator`` is
``tensorflow::GPUBFCAllocator``, over a C++ sub-allocator that calls the Python one the suite
passes. What this module adds is the Python face: argument checks that C++ cannot express
(a size that is not an int, a negative pointer), the record types, and the log forwarding.
Every allocation, free, statistic and memory map is TensorFlow's.

Mapping notes (the README's table has the verdict of each clause):

- ``attributes=None`` and ``AllocationAttributes()`` retry (TensorFlow's default attributes);
  ``no_retry_on_failure=True`` is ``retry_on_failure=false``.
- ``retry_timeout_us`` is the wait of TensorFlow's ``AllocatorRetry``, in whole milliseconds on
  the real clock; 10 s (the default) is TensorFlow's own ``AllocateRaw`` path unchanged.
- ``clock`` is accepted and not used: TensorFlow's retry reads ``Env::NowMicros`` and waits on a
  condition variable, so the ``virtual_clock`` capability is not declared.
- A size of 2^64 or more returns None at once (it cannot be a ``size_t``); a call TensorFlow
  would answer by aborting, hanging or corrupting its chunks raises ``TensorFlowGuardError``.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Callable

from .api import (AllocationAttributes, Allocator, AllocatorStats, BinDebugInfo, ChunkInfo,
                  InvalidPointerError, MemoryMap, RegionInfo)
from .loader import shim
from .tf_log import forward_tf_log

__all__ = ["BFCAllocator", "GPUBFCAllocator", "AllocatorRetry", "rounded_bytes",
           "bin_num_for_size", "DEFAULT_RETRY_TIMEOUT_US", "check_size"]

DEFAULT_RETRY_TIMEOUT_US = 10_000_000  # TensorFlow's kMaxMillisToWait = 10000
SIZE_T_LIMIT = 1 << 64


def check_size(value: object, what: str) -> int:
    """``value`` as a non-negative int, else ``ValueError`` naming ``what`` and the value."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise ValueError(f"{what} must be a non-negative int, got {value!r}")
        value = value.__index__()
    if value < 0:
        raise ValueError(f"{what} must be a non-negative int, got {value}")
    return value


def check_size_t(value: object, what: str) -> int:
    value = check_size(value, what)
    if value >= SIZE_T_LIMIT:
        raise ValueError(f"{what} must be below 2^64 (a size_t), got {value}")
    return value


def check_pointer(owner: str, what: str, ptr: object) -> int:
    """``ptr`` as an address TensorFlow can be given, else ``InvalidPointerError``."""
    if isinstance(ptr, Integral) and not isinstance(ptr, bool):
        ptr = int(ptr)                      # a NumPy integer is the equal int (BFC-6)
        if 0 <= ptr < SIZE_T_LIMIT:
            return ptr
    shown = f"{ptr:#x}" if isinstance(ptr, int) and not isinstance(ptr, bool) else repr(ptr)
    raise InvalidPointerError(f"{owner}.{what}({shown}): not an address (an int in [0, 2^64))")


def rounded_bytes(n: int) -> int:
    """TensorFlow's ``BFCAllocator::RoundedBytes`` (it wraps to 0 above 2^64-256)."""
    return shim.rounded_bytes(check_size_t(n, "rounded_bytes: n"))


def bin_num_for_size(n: int) -> int:
    """TensorFlow's ``BFCAllocator::BinNumForSize``."""
    return shim.bin_num_for_size(check_size_t(n, "bin_num_for_size: n"))


class BFCAllocator(Allocator):
    """``tsl::BFCAllocator`` (xla/tsl/framework/bfc_allocator.h of the TensorFlow wheel)."""

    __slots__ = ("_c", "_sub_allocator", "_name")

    #: The first region under growth: 0 keeps TensorFlow's (2 MiB). Only the diagnostic
    #: runtime ``first_region_1mib`` changes it.
    FIRST_GROWTH_REGION = 0

    def __init__(self, sub_allocator: Any, total_memory: int, allow_growth: bool, name: str,
                 garbage_collection: bool = False, *, clock: Any = None,
                 retry_timeout_us: int = DEFAULT_RETRY_TIMEOUT_US) -> None:
        name = str(name)
        total = check_size_t(total_memory, f"{name}: total_memory")
        timeout = check_size(retry_timeout_us, f"{name}: retry_timeout_us")
        try:
            handle = shim.BFC.create(sub_allocator, total, bool(allow_growth), name,
                                     bool(garbage_collection), min(timeout, 2**63 - 1),
                                     self.FIRST_GROWTH_REGION)
        finally:
            forward_tf_log()
        self._attach(handle, sub_allocator)

    def _attach(self, handle: Any, sub_allocator: Any) -> None:
        self._c = handle
        self._sub_allocator = sub_allocator
        self._name = handle.name

    @classmethod
    def _from_handle(cls, handle: Any, sub_allocator: Any) -> "BFCAllocator":
        """Wrap an allocator the shim built (the host allocator of a VMem allocator)."""
        self = cls.__new__(cls)
        self._attach(handle, sub_allocator)
        return self

    @property
    def name(self) -> str:
        return self._name

    @property
    def sub_allocator(self) -> Any:
        return self._sub_allocator

    @property
    def allow_growth(self) -> bool:
        """The option TensorFlow's constructor settled on (``BFCAllocator::Options``)."""
        return self._c.allow_growth

    @property
    def garbage_collection(self) -> bool:
        return self._c.garbage_collection

    @property
    def retry_timeout_us(self) -> int:
        return self._c.retry_timeout_us

    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None:
        if type(num_bytes) is not int or not 0 <= num_bytes < SIZE_T_LIMIT:
            num_bytes = check_size(num_bytes, f"{self._name}: allocate_raw num_bytes")
            if num_bytes >= SIZE_T_LIMIT:
                return None           # not a size_t: TensorFlow cannot be asked (D-BFC-2)
        if type(alignment) is not int or not 0 <= alignment < SIZE_T_LIMIT:
            alignment = check_size_t(alignment, f"{self._name}: allocate_raw alignment")
        retry = attributes is None or not attributes.no_retry_on_failure
        try:
            return self._c.allocate_raw(alignment, num_bytes, retry)
        finally:
            forward_tf_log()

    def deallocate_raw(self, ptr: int | None) -> None:
        if ptr is None:
            return
        self._c.deallocate_raw(check_pointer(self._name, "deallocate_raw", ptr))

    def tracks_allocation_sizes(self) -> bool:
        return self._c.tracks_allocation_sizes()

    def requested_size(self, ptr: int) -> int:
        return self._c.requested_size(check_pointer(self._name, "requested_size", ptr))

    def allocated_size(self, ptr: int) -> int:
        return self._c.allocated_size(check_pointer(self._name, "allocated_size", ptr))

    def allocation_id(self, ptr: int) -> int:
        return self._c.allocation_id(check_pointer(self._name, "allocation_id", ptr))

    def get_stats(self) -> AllocatorStats | None:
        return self._c.get_stats()

    def clear_stats(self) -> None:
        self._c.clear_stats()

    def memory_map(self) -> MemoryMap:
        """The regions and chunks, read under TensorFlow's mutex through the friend class."""
        limit, pool, next_size, regions = self._c.memory_map()
        return MemoryMap(limit, pool, next_size, tuple(
            RegionInfo(ptr, size, tuple(ChunkInfo(*c) for c in chunks))
            for ptr, size, chunks in regions))

    def get_bin_debug_info(self) -> list[BinDebugInfo]:
        """TensorFlow's own ``get_bin_debug_info``, under its mutex."""
        return [BinDebugInfo(*info) for info in self._c.bin_debug_info()]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, tensorflow={shim.TENSORFLOW_VERSION})"


class GPUBFCAllocator(BFCAllocator):
    """``tensorflow::GPUBFCAllocator``: its constructor reads ``TF_FORCE_GPU_ALLOW_GROWTH`` and
    ``TF_ENABLE_GPU_GARBAGE_COLLECTION`` (TensorFlow's code, logging through absl)."""

    __slots__ = ()

    def __init__(self, sub_allocator: Any, total_memory: int, name: str, *,
                 allow_growth: bool = False, clock: Any = None,
                 retry_timeout_us: int = DEFAULT_RETRY_TIMEOUT_US) -> None:
        name = str(name)
        total = check_size_t(total_memory, f"{name}: total_memory")
        timeout = check_size(retry_timeout_us, f"{name}: retry_timeout_us")
        try:
            handle = shim.BFC.create_gpu(sub_allocator, total, name, bool(allow_growth),
                                         min(timeout, 2**63 - 1), self.FIRST_GROWTH_REGION)
        finally:
            forward_tf_log()
        self._attach(handle, sub_allocator)


class AllocatorRetry:
    """TensorFlow's compiled ``tsl::AllocatorRetry`` (real clock, whole milliseconds)."""

    def __init__(self, clock: Any = None) -> None:
        self._c = shim.AllocatorRetry()

    def allocate_raw(self, alloc_func: Callable[[bool], int | None], max_wait_us: int,
                     num_bytes: int) -> int | None:
        return self._c.allocate_raw(alloc_func, check_size(max_wait_us, "max_wait_us"),
                                    check_size_t(num_bytes, "num_bytes"))

    def notify_dealloc(self) -> None:
        self._c.notify_dealloc()
