"""AntMan ``GPUVMemAllocator``: GPU memory first, pinned host memory as the fallback (VMEM).

An allocation tries the device allocator once without retry; on failure it goes to the
host BFC allocator (``GPUHost_<id>_bfc``). Frees and per-pointer queries are routed by
membership in the set of device pointers. ``get_stats`` is the device's, except that
``peak_bytes_in_use`` is device peak + host peak.

Deviation from AntMan (D-VMEM-1): AntMan holds a lock for the whole allocation, host retry
included; this allocator has no lock of its own (its inner allocators have theirs, and the
set of device pointers is changed atomically), so frees through it proceed while the host
side waits, and wake it.
"""

from __future__ import annotations

import logging
from numbers import Integral

from .allocator import (AllocationAttributes, Allocator, AllocatorStats,
                                         InvalidPointerError, SubAllocator)
from .allocator_retry import DEFAULT_MAX_WAIT_US
from .bfc_allocator import BFCAllocator
from .clock import Clock
from .env import INT64_MAX, read_bool_from_env_var, read_int64_from_env_var

__all__ = [
    "GPUVMemAllocator",
    "maybe_create_gpu_vmem_allocator",
    "host_mem_limit_bytes",
    "planned_gpu_percent",
    "DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB",
    "DEFAULT_RO_PLANNED_GPU",
]

_log = logging.getLogger(__name__)

DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB = 1 << 16   # 64 GiB
DEFAULT_RO_PLANNED_GPU = 100
_NO_RETRY = AllocationAttributes(no_retry_on_failure=True)


def host_mem_limit_bytes() -> int:
    """``TF_CUDA_HOST_MEM_LIMIT_IN_MB`` × 2^20 (VMEM-2); bad or negative → default 64 GiB."""
    mb = read_int64_from_env_var("TF_CUDA_HOST_MEM_LIMIT_IN_MB",
                                 DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB)
    if mb < 0 or mb * (1 << 20) > INT64_MAX:
        _log.error("TF_CUDA_HOST_MEM_LIMIT_IN_MB=%d is out of range [0, %d]; using the default "
                   "%d", mb, INT64_MAX >> 20, DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB)
        mb = DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB
    return mb * (1 << 20)


def planned_gpu_percent() -> int:
    """``TF_RO_PLANNED_GPU`` (VMEM-6), default 100."""
    return read_int64_from_env_var("TF_RO_PLANNED_GPU", DEFAULT_RO_PLANNED_GPU)


class GPUVMemAllocator(Allocator):
    """Device allocator with a host-memory fallback; owns both inner allocators."""

    def __init__(self, device_allocator: Allocator, host_allocator: Allocator, *,
                 tf_gpu_id: int = 0, physical_total_memory: int = 0) -> None:
        tf_gpu_id, total = _check_ids(tf_gpu_id, physical_total_memory)
        self._device = device_allocator
        self._host = host_allocator
        self._name = f"GPUVMem_{tf_gpu_id}_bfc"
        self._device_ptrs: set[int] = set()
        if total < 0:
            _log.error("%s: physical_total_memory %d < 0; using 0", self._name, total)
            total = 0
        self._memory_planned = int(total * planned_gpu_percent() / 100.0)

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
        return self._memory_planned

    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None:
        # No lock of ours: the inner allocators have their own, and adding to or removing
        # from the set of device pointers is atomic. A pointer is in the set from before its
        # caller sees it until before the device allocator may hand it out again.
        ptr = self._device.allocate_raw(alignment, num_bytes, _NO_RETRY)
        if ptr is not None:
            self._device_ptrs.add(ptr)
            return ptr
        if attributes is not None:
            peak = self._merged_peak()            # the planned-memory check (VMEM-6)
            if peak > self._memory_planned:
                _log.warning("%s: host memory allocation of %d bytes refused: device peak + "
                             "host peak %d is beyond the upper limit %d", self._name,
                             num_bytes, peak, self._memory_planned)
                return None
        # Without a lock held (D-VMEM-1), the host retry may wait for frees made through us.
        return self._host.allocate_raw(alignment, num_bytes, attributes)

    def deallocate_raw(self, ptr: int | None) -> None:
        if ptr is None:
            return
        try:
            self._device_ptrs.remove(ptr)         # atomic: of two frees of ptr, one wins
        except KeyError:
            self._host_call("deallocate_raw", ptr)
            return
        self._device.deallocate_raw(ptr)

    def _host_call(self, what: str, ptr: int):
        try:
            return getattr(self._host, what)(ptr)
        except InvalidPointerError as exc:
            shown = f"{ptr:#x}" if isinstance(ptr, int) else repr(ptr)
            raise InvalidPointerError(
                f"{self._name}.{what}({shown}): pointer is neither a live device allocation "
                f"nor known to the host allocator ({exc})") from None

    def _route(self, what: str, ptr: int):
        if ptr in self._device_ptrs:
            return getattr(self._device, what)(ptr)
        return self._host_call(what, ptr)

    def tracks_allocation_sizes(self) -> bool:
        return self._device.tracks_allocation_sizes()

    def requested_size(self, ptr: int) -> int:
        return self._route("requested_size", ptr)

    def allocated_size(self, ptr: int) -> int:
        return self._route("allocated_size", ptr)

    def allocation_id(self, ptr: int) -> int:
        return self._route("allocation_id", ptr)

    def _merged_peak(self) -> int:
        device = self._device.get_stats()
        host = self._host.get_stats()
        return ((device.peak_bytes_in_use if device is not None else 0)
                + (host.peak_bytes_in_use if host is not None else 0))

    def get_stats(self) -> AllocatorStats | None:
        device = self._device.get_stats()
        if device is None:
            return None
        host = self._host.get_stats()
        merged = device.copy()
        merged.peak_bytes_in_use = device.peak_bytes_in_use + (
            host.peak_bytes_in_use if host is not None else 0)
        return merged

    def clear_stats(self) -> None:
        self._device.clear_stats()
        self._host.clear_stats()

    def __repr__(self) -> str:
        return f"GPUVMemAllocator(name={self._name!r}, device={self._device!r}, host={self._host!r})"


def maybe_create_gpu_vmem_allocator(gpu_allocator: Allocator, *, host_sub_allocator: SubAllocator,
                                    tf_gpu_id: int = 0, physical_total_memory: int = 0,
                                    clock: Clock | None = None,
                                    retry_timeout_us: int = DEFAULT_MAX_WAIT_US) -> Allocator:
    """Wrap ``gpu_allocator`` in a ``GPUVMemAllocator`` unless ``TF_GPU_VMEM`` is false."""
    _check_ids(tf_gpu_id, physical_total_memory)
    if not read_bool_from_env_var("TF_GPU_VMEM", True):
        return gpu_allocator
    host = BFCAllocator(host_sub_allocator, host_mem_limit_bytes(), True,
                        f"GPUHost_{tf_gpu_id}_bfc", False, clock=clock,
                        retry_timeout_us=retry_timeout_us)
    return GPUVMemAllocator(gpu_allocator, host, tf_gpu_id=tf_gpu_id,
                            physical_total_memory=physical_total_memory)


def _check_ids(tf_gpu_id: object, physical_total_memory: object) -> tuple[int, int]:
    """``tf_gpu_id`` and ``physical_total_memory`` as ints (a negative memory is VMEM-6's to
    log), else ``ValueError`` naming the argument (VMEM-1)."""
    for what, value in (("tf_gpu_id", tf_gpu_id), ("physical_total_memory", physical_total_memory)):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ValueError(f"{what} must be an int, got {value!r}")
    return int(tf_gpu_id), int(physical_total_memory)  # type: ignore[call-overload]
