"""Tensor buffers: device memory obtained from a device's allocator, SPEC.md EXEC clauses.

Every tensor a kernel produces is a ``Buffer``: an address from ``allocate_raw`` on its
device's allocator (sized by ``nbytes``) plus the array holding its values. On the
simulated device the simulated memory stores no bytes, so the values live in a NumPy
array beside the address; a buffer that landed in host fallback computes the same way.
On a CUDA device whose backend can wrap an address, the array is a view of that memory.

``StepAllocations`` counts the references of a step's buffers and frees each one when its
last reference is dropped, and frees whatever is left when the step ends.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

import numpy as np

from .allocator import AllocationAttributes, Allocator
from .errors import ResourceExhaustedError

__all__ = ["Buffer", "StepAllocations", "ALLOCATOR_ALIGNMENT", "device_allocator",
           "device_xp", "to_host", "allocate_buffer", "kernel_context"]

ALLOCATOR_ALIGNMENT = 64  # TF Allocator::kAllocatorAlignment
_KERNEL_ALLOCATION = AllocationAttributes()


def device_xp(device: Any) -> Any:
    """The array module of ``device`` (NumPy on the simulated device, CuPy on CUDA)."""
    return getattr(device, "xp", np)      # a CPU device has none: NumPy


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy of a buffer's array: a NumPy array (simulated device, CPU) or a CuPy
    array (the cuda backend), whose ``get`` copies it to the host."""
    if isinstance(array, np.ndarray):
        return array.copy()
    return array.get()


def copy_from_host(out: Any, value: np.ndarray) -> None:
    """Copy the host array ``value`` into ``out`` (same shape) without a device temporary."""
    if isinstance(out, np.ndarray):
        out[...] = value
        return
    # CuPy: a host-to-device copy straight into the allocated buffer.
    out.set(np.ascontiguousarray(value, dtype=out.dtype))


class Buffer:
    """One allocation holding a tensor's values."""

    __slots__ = ("allocator", "ptr", "array", "refs", "persistent")

    def __init__(self, allocator: Allocator, ptr: int | None, array: Any, *,
                 persistent: bool) -> None:
        self.allocator = allocator
        self.ptr = ptr
        self.array = array
        self.refs = 1  # its producer's reference (counted only when not persistent)
        self.persistent = persistent

    def release(self) -> None:
        """Give the memory back to its allocator. Its owner calls it once: the step at the
        last reference (``unref``) or at its end for what is left (``free_all``), each after
        taking the buffer out of its table under the lock; the session at ``close()``. A buffer
        of 0 bytes (no pointer) has nothing to give back."""
        if self.ptr is not None:
            self.allocator.deallocate_raw(self.ptr)
        self.array = None

    def __repr__(self) -> str:
        ptr = "None" if self.ptr is None else hex(self.ptr)
        return f"Buffer(ptr={ptr}, refs={self.refs}{', persistent' if self.persistent else ''})"


def _is_cuda(device: Any) -> bool:
    backend = getattr(device, "backend", None)
    return getattr(backend, "name", None) == "cuda"


def kernel_context(device: Any) -> contextlib.AbstractContextManager:
    """Make ``device`` current while a kernel runs (CuPy's current device); else a no-op."""
    if _is_cuda(device):
        return device_xp(device).cuda.Device(int(device.tf_gpu_id))
    return contextlib.nullcontext()


def _array_over(device: Any, ptr: int | None, nbytes: int, shape: tuple[int, ...],
                dtype: np.dtype) -> Any:
    """The array holding a buffer's values: a view of the allocation on CUDA, else beside it."""
    if ptr is not None and _is_cuda(device):
        from .cuda_backend import as_cupy_array
        return as_cupy_array(ptr, shape, dtype, device_id=int(device.tf_gpu_id), nbytes=nbytes)
    return device_xp(device).empty(shape, dtype=dtype)


def allocate_buffer(device: Any, shape: tuple[int, ...], dtype: np.dtype, *, node_name: str,
                    persistent: bool) -> Buffer:
    """Allocate a tensor of ``shape``/``dtype`` on ``device``; OOM -> ResourceExhaustedError."""
    shape = tuple(int(d) for d in shape)
    nbytes = math.prod(shape) * dtype.itemsize
    allocator = device.get_allocator()          # TF Device::GetAllocator
    ptr = None
    if nbytes > 0:
        ptr = allocator.allocate_raw(ALLOCATOR_ALIGNMENT, nbytes, _KERNEL_ALLOCATION)
        if ptr is None:
            raise ResourceExhaustedError(
                f"OOM when allocating tensor with shape {list(shape)} and type {dtype.name} "
                f"({nbytes} bytes) on {device.name} by allocator {allocator.name} for node "
                f"{node_name!r}", node_name=node_name, device=device.name, num_bytes=nbytes)
    try:
        array = _array_over(device, ptr, nbytes, shape, dtype)
    except BaseException:
        allocator.deallocate_raw(ptr)  # None (0 bytes): a no-op of every device allocator
        raise
    return Buffer(allocator, ptr, array, persistent=persistent)


class StepAllocations:
    """Reference counts of the buffers one step allocated; frees at zero and at step end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, Buffer] = {}

    def allocate(self, device: Any, shape: tuple[int, ...], dtype: np.dtype, *,
                 node_name: str) -> Buffer:
        buf = allocate_buffer(device, shape, dtype, node_name=node_name, persistent=False)
        with self._lock:
            self._live[id(buf)] = buf
        return buf

    def ref(self, buf: Buffer, count: int = 1) -> None:
        if buf.persistent:                      # the session owns it: nothing to count
            return
        with self._lock:
            buf.refs += count

    def unref(self, buf: Buffer) -> None:
        if buf.persistent:
            return
        with self._lock:
            buf.refs -= 1
            if buf.refs > 0:
                return
            del self._live[id(buf)]
        buf.release()

    def free_all(self) -> None:
        """Free every buffer still live."""
        with self._lock:
            left, self._live = self._live, {}
        for buf in left.values():
            buf.release()
