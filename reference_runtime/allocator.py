"""Allocator and SubAllocator interfaces (TensorFlow's ``allocator.h``), in Python style.

Addresses are plain integers. ``allocate_raw`` returns an address or ``None`` when the
allocation failed; operations on an address the allocator does not own raise
``InvalidPointerError``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, replace
from numbers import Integral

__all__ = [
    "check_size",
    "AllocationAttributes",
    "AllocatorStats",
    "Allocator",
    "SubAllocator",
    "InvalidPointerError",
]


class InvalidPointerError(ValueError):
    """An address that is not the start of a live (or known) allocation of this allocator."""


@dataclass(frozen=True)
class AllocationAttributes:
    """Per-request options (TF 1.15 ``AllocationAttributes``).

    ``no_retry_on_failure``: make one attempt and return None at once on failure,
    instead of waiting for frees (``AllocatorRetry``).
    """

    no_retry_on_failure: bool = False


@dataclass
class AllocatorStats:
    """TF 1.15 ``AllocatorStats``. Sizes in bytes."""

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


class Allocator(abc.ABC):
    """A memory allocator (TF ``Allocator``)."""

    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @abc.abstractmethod
    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None:
        """Allocate ``num_bytes``; None on failure. ``attributes=None`` is TF's 2-argument call."""

    @abc.abstractmethod
    def deallocate_raw(self, ptr: int | None) -> None:
        """Free an address returned by ``allocate_raw``. None is a no-op."""

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
        """Nothing to clear: an allocator without statistics (TF's default ``ClearStats``)."""


class SubAllocator(abc.ABC):
    """Where an allocator obtains its regions (TF ``SubAllocator``): device or host memory."""

    @abc.abstractmethod
    def alloc(self, alignment: int, num_bytes: int) -> int | None:
        """Obtain a region of ``num_bytes``; None when the memory is exhausted."""

    @abc.abstractmethod
    def free(self, ptr: int, num_bytes: int) -> None:
        """Give a region back."""


def check_size(value: object, what: str) -> int:
    """``value`` as a non-negative int (NumPy integers accepted), else ``ValueError`` naming
    ``what``; booleans are not sizes."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{what} must be a non-negative int, got {value!r}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{what} must be a non-negative int, got {value}")
    return value
