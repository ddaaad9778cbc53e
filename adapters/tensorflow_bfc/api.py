"""SPEC.md API-3's types as the adapter exposes them: errors, request and result records,
and the Allocator / SubAllocator interfaces."""

from __future__ import annotations

import abc
from dataclasses import dataclass, replace

# InvalidPointerError (SPEC.md API-3, BFC-6, VMEM-7) is the reference's class: the simulated
# memories the adapter exports (the suite's instruments, from reference_runtime.sim_memory)
# raise it, and a caller catches one class for both.
from reference_runtime.allocator import InvalidPointerError

__all__ = ["AllocationAttributes", "AllocatorStats", "Allocator", "SubAllocator",
           "InvalidPointerError", "TensorFlowGuardError", "ChunkInfo", "RegionInfo",
           "MemoryMap", "BinDebugInfo", "MemPoolStats"]


class TensorFlowGuardError(RuntimeError):
    """TensorFlow would abort the process, loop forever or corrupt its allocator here.

    Raised instead of passing the call on: the message says what TensorFlow 2.21 would do and
    names the clause its behaviour breaks. A test that meets one fails with that reason, not
    with a crash of the test process or a timeout.
    """


@dataclass(frozen=True)
class AllocationAttributes:
    """Per-request options. TensorFlow 2 names the flag ``retry_on_failure`` (the negation)."""

    no_retry_on_failure: bool = False


@dataclass
class AllocatorStats:
    """The fields of TensorFlow's ``AllocatorStats`` that SPEC.md names (sizes in bytes)."""

    num_allocs: int = 0
    bytes_in_use: int = 0
    peak_bytes_in_use: int = 0
    largest_alloc_size: int = 0
    bytes_limit: int | None = None
    bytes_reserved: int = 0
    peak_bytes_reserved: int = 0
    bytes_reservable_limit: int | None = None

    def copy(self) -> "AllocatorStats":
        return replace(self)


@dataclass(frozen=True)
class ChunkInfo:
    ptr: int
    size: int
    requested_size: int
    in_use: bool
    allocation_id: int
    bin_num: int


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
    """TensorFlow's ``BinDebugInfo``: every field 0 unless given (its member initialisers)."""

    total_bytes_in_use: int = 0
    total_bytes_in_bin: int = 0
    total_requested_bytes_in_use: int = 0
    total_chunks_in_use: int = 0
    total_chunks_in_bin: int = 0


@dataclass(frozen=True)
class MemPoolStats:
    pool_bytes: int
    stable_bytes: int


class Allocator(abc.ABC):
    """A memory allocator (TensorFlow's ``Allocator``); addresses are ints."""

    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @abc.abstractmethod
    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None: ...

    @abc.abstractmethod
    def deallocate_raw(self, ptr: int | None) -> None: ...

    def tracks_allocation_sizes(self) -> bool:
        return False

    def requested_size(self, ptr: int) -> int:
        raise NotImplementedError(f"{self.name} does not track allocation sizes")

    def allocated_size(self, ptr: int) -> int:
        raise NotImplementedError(f"{self.name} does not track allocation sizes")

    def allocation_id(self, ptr: int) -> int:
        return 0

    def get_stats(self) -> AllocatorStats | None:
        return None

    def clear_stats(self) -> None:
        return None


class SubAllocator(abc.ABC):
    """Where a BFC allocator gets its regions (TensorFlow's ``SubAllocator``)."""

    @abc.abstractmethod
    def alloc(self, alignment: int, num_bytes: int) -> int | None: ...

    @abc.abstractmethod
    def free(self, ptr: int, num_bytes: int) -> None: ...
