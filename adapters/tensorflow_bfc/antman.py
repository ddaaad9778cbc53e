"""AntMan's memory layer in C++ over TensorFlow 2.21's compiled BFC allocator (VMEM, ADJ).

``GPUVMemAllocator`` (shim/gpu_vmem_allocator.cc) and ``GPUAdjustableAllocator``
(shim/gpu_adjustable_allocator.cc) are written from SPEC.md sections 2.3 and 2.4 in C++,
over ``tsl::Allocator`` / ``tsl::BFCAllocator`` as AntMan's own code is over TensorFlow 1.15's,
reaching the BFC allocator's private state through the friend class its header names
(shim/bfc_private.h). This module is their Python face: argument checks, record types and
log forwarding. The inner allocators of a ``GPUVMemAllocator`` may be this adapter's BFC
allocators (driven in C++ directly) or any Python ``Allocator`` (called back).
"""

from __future__ import annotations

from typing import Any

from .api import AllocationAttributes, Allocator, AllocatorStats, MemPoolStats
from .bfc import (DEFAULT_RETRY_TIMEOUT_US, SIZE_T_LIMIT, BFCAllocator, check_pointer,
                  check_size, check_size_t)
from .loader import shim
from .tf_log import forward_tf_log

__all__ = ["GPUVMemAllocator", "maybe_create_gpu_vmem_allocator", "GPUAdjustableAllocator"]

INT64_MAX = 2**63 - 1
_NO_RETRY = AllocationAttributes(no_retry_on_failure=True)


def _c_side(allocator: Any) -> Any:
    """What the C++ layer holds: the shim allocator of one of ours, else the object itself."""
    return allocator._c if isinstance(allocator, BFCAllocator) else allocator


def _int64(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -2**63 <= value <= INT64_MAX:
        raise ValueError(f"{what} must be an int64, got {value!r}")
    return value


class GPUVMemAllocator(Allocator):
    """AntMan's ``GPUVMemAllocator``: device first without retry, pinned-host fallback."""

    def __init__(self, device_allocator: Allocator, host_allocator: Allocator, *,
                 tf_gpu_id: int = 0, physical_total_memory: int = 0) -> None:
        try:
            handle = shim.GPUVMem(_c_side(device_allocator), _c_side(host_allocator),
                                  _int64(tf_gpu_id, "tf_gpu_id"),
                                  _int64(physical_total_memory, "physical_total_memory"))
        finally:
            forward_tf_log()
        self._attach(handle, device_allocator, host_allocator)

    def _attach(self, handle: Any, device: Allocator, host: Allocator) -> None:
        self._c = handle
        self._device = device
        self._host = host
        self._name = handle.name

    @classmethod
    def _from_handle(cls, handle: Any, device: Allocator, host: Allocator) -> "GPUVMemAllocator":
        self = cls.__new__(cls)
        self._attach(handle, device, host)
        return self

    @property
    def name(self) -> str:
        return self._name

    @property
    def device_allocator(self) -> Allocator:
        return self._device

    @property
    def host_allocator(self) -> Allocator:
        return self._host

    @property
    def memory_planned(self) -> int:
        return self._c.memory_planned

    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None:
        num_bytes = check_size(num_bytes, f"{self._name}: allocate_raw num_bytes")
        alignment = check_size_t(alignment, f"{self._name}: allocate_raw alignment")
        if num_bytes >= SIZE_T_LIMIT:
            return self._allocate_beyond_size_t(alignment, num_bytes, attributes)
        mode = 0 if attributes is None else 2 if attributes.no_retry_on_failure else 1
        try:
            return self._c.allocate_raw(alignment, num_bytes, mode)
        finally:
            forward_tf_log()

    def _allocate_beyond_size_t(self, alignment: int, num_bytes: int,
                                attributes: AllocationAttributes | None) -> int | None:
        """A size the C++ layer cannot be given (2^64 or more), routed as it routes any other
        (VMEM-3..5): the device without retry, then the host, through the Python faces of the
        inner allocators. The adapter's BFC allocators return None for such a size; a pointer
        another allocator returned is not recorded as a device pointer."""
        ptr = self._device.allocate_raw(alignment, num_bytes, _NO_RETRY)
        if ptr is not None:
            return ptr
        if attributes is not None:
            stats = self._device.get_stats(), self._host.get_stats()
            peak = sum(s.peak_bytes_in_use for s in stats if s is not None)
            if peak > self.memory_planned:
                return None
        return self._host.allocate_raw(alignment, num_bytes, attributes)

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

    def __repr__(self) -> str:
        return (f"GPUVMemAllocator(name={self._name!r}, device={self._device!r}, "
                f"host={self._host!r})")


def maybe_create_gpu_vmem_allocator(gpu_allocator: Allocator, *, host_sub_allocator: Any,
                                    tf_gpu_id: int = 0, physical_total_memory: int = 0,
                                    clock: Any = None,
                                    retry_timeout_us: int = DEFAULT_RETRY_TIMEOUT_US
                                    ) -> Allocator:
    """AntMan's factory: ``gpu_allocator`` itself when ``TF_GPU_VMEM`` is false, else a
    ``GPUVMemAllocator`` over it and a new host ``BFCAllocator`` (``clock`` is not used)."""
    return create_vmem(BFCAllocator, GPUVMemAllocator, gpu_allocator, host_sub_allocator,
                       tf_gpu_id, physical_total_memory, retry_timeout_us)


def create_vmem(host_class: type[BFCAllocator], vmem_class: type[GPUVMemAllocator],
                gpu_allocator: Allocator, host_sub_allocator: Any, tf_gpu_id: int,
                physical_total_memory: int, retry_timeout_us: int) -> Allocator:
    timeout = min(check_size(retry_timeout_us, "retry_timeout_us"), INT64_MAX)
    try:
        created = shim.GPUVMem.maybe_create(_c_side(gpu_allocator), host_sub_allocator,
                                            _int64(tf_gpu_id, "tf_gpu_id"),
                                            _int64(physical_total_memory,
                                                   "physical_total_memory"), timeout,
                                            host_class.FIRST_GROWTH_REGION)
    finally:
        forward_tf_log()
    if created is None:
        return gpu_allocator
    handle, host_handle = created
    host = host_class._from_handle(host_handle, host_sub_allocator)
    return vmem_class._from_handle(handle, gpu_allocator, host)


class GPUAdjustableAllocator:
    """AntMan's ``GPUAdjustableAllocator``: the limit of a BFC allocator, changed at run time."""

    def __init__(self) -> None:
        self._c = shim.GPUAdjustable()

    @staticmethod
    def _bfc(bfc: object, method: str) -> Any:
        if not isinstance(bfc, BFCAllocator):
            raise TypeError(f"GPUAdjustableAllocator.{method}: bfc must be a BFCAllocator, "
                            f"got {bfc!r}")
        return bfc._c

    def adjust_memory_limit(self, new_limit: int, bfc: BFCAllocator) -> int:
        limit = check_size_t(new_limit, "adjust_memory_limit: new_limit")
        handle = self._bfc(bfc, "adjust_memory_limit")
        try:
            return self._c.adjust_memory_limit(limit, handle)
        finally:
            forward_tf_log()

    def free_empty_memory(self, target: int, bfc: BFCAllocator) -> int:
        target = check_size_t(target, "free_empty_memory: target")
        handle = self._bfc(bfc, "free_empty_memory")
        try:
            return self._c.free_empty_memory(target, handle)
        finally:
            forward_tf_log()

    def get_mem_pool_stats(self, bfc: BFCAllocator) -> MemPoolStats:
        handle = self._bfc(bfc, "get_mem_pool_stats")
        return MemPoolStats(*self._c.get_mem_pool_stats(handle))
