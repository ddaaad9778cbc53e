"""The CUDA device backend (CuPy): real GPU memory under the BFC, pinned host memory under VMem.

- ``CudaDeviceMemory``: the GPU BFC's sub-allocator. Each region is one ``cudaMalloc`` on its
  GPU, released with ``cudaFree`` when the BFC frees the region (garbage collection, or a
  shrink through ``GPUAdjustableAllocator``), so NVML sees the release.
- ``CudaHostMemory``: the VMem host BFC's sub-allocator: pinned, mapped, portable host memory
  (``cudaHostAlloc``). Its addresses are device pointers (unified virtual addressing), so GPU
  kernels read and write a host-fallback buffer in place, across PCIe.
- ``CupyAllocatorRouting`` / ``install_cupy_allocator``: CuPy's allocator routed through each
  GPU device's allocator (the VMem allocator when ``TF_GPU_VMEM`` is on), so every CuPy array a
  kernel creates is placed by our BFC: on the device first, on the host when the device is
  full or its limit is reached.
- ``CudaBackend``: the device backend that ``reference_runtime.device`` selects with
  ``ANTMAN_DEVICE=cuda`` (or automatically when a GPU is present).

``create_runtime`` calls ``CudaBackend.attach(device_mgr)`` once the devices exist and
``detach(device_mgr)`` after they are closed: CuPy allocates through the runtime while it
lives, and every region goes back to the driver when it closes.

CuPy is optional: importing this module never imports it; using the backend without it raises
``CudaUnavailableError`` with the install hint. The first import of CuPy through this module
sets ``CUBLAS_WORKSPACE_CONFIG`` when unset (small per-handle cuBLAS workspaces, GPU-7).
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import queue
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Mapping

from .allocator import (AllocationAttributes, Allocator, InvalidPointerError,
                                         SubAllocator)

__all__ = [
    "CudaUnavailableError",
    "import_cupy",
    "cuda_available",
    "cupy_installed",
    "CudaDeviceMemory",
    "CudaHostMemory",
    "CudaBackend",
    "CupyAllocatorRouting",
    "install_cupy_allocator",
    "as_cupy_array",
    "normalize_pci_bus_id",
]

log = logging.getLogger(__name__)

INSTALL_HINT = ("the cuda backend needs CuPy and an NVIDIA driver: pip install "
                "'antman-conformance[cuda12]' (CUDA 12) or '[cuda13]' (CUDA 13), or run on "
                "the simulated device with ANTMAN_DEVICE=sim")

_HOST_ALLOC_PORTABLE = 1  # cudaHostAllocPortable
_HOST_ALLOC_MAPPED = 2  # cudaHostAllocMapped


class CudaUnavailableError(RuntimeError):
    """CuPy or a CUDA GPU is missing, so the cuda backend cannot be used."""


#: cuBLAS's default workspace pool for every handle it creates: 8 buffers of 16 KiB.
CUBLAS_WORKSPACE = ":16:8"


def _limit_library_workspaces() -> None:
    """Keep cuBLAS's own device memory small (GPU-7).

    CuPy makes one cuBLAS handle per thread and device, and each handle takes a workspace pool
    with ``cudaMalloc`` (64 MiB per handle seen on an H200 with CUDA 13), outside every
    allocator of the runtime. The executor launches GPU kernels from any of the session's
    threads, so those pools would add up to a large amount of memory the memory limit does not
    bound, and a new handle fails (``CUBLAS_STATUS_ALLOC_FAILED``) once another process holds
    the GPU. ``CUBLAS_WORKSPACE_CONFIG`` (read when a handle is created) shrinks each pool to
    128 KiB, and also makes cuBLAS results reproducible. A value set by the user is kept.
    """
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") is None:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
        log.info("CUBLAS_WORKSPACE_CONFIG=%s (small cuBLAS workspaces per handle)",
                 CUBLAS_WORKSPACE)


def import_cupy() -> ModuleType:
    """CuPy, or ``CudaUnavailableError`` naming how to install it.

    The first import sets ``CUBLAS_WORKSPACE_CONFIG`` when it is unset (see
    ``_limit_library_workspaces``), before CuPy loads cuBLAS.
    """
    if "cupy" not in sys.modules:
        _limit_library_workspaces()
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError as exc:
        raise CudaUnavailableError(f"{INSTALL_HINT} (import cupy failed: {exc})") from exc
    return cupy


def cupy_installed() -> bool:
    """True when CuPy can be imported: the cuda backend is part of this installation.

    Costs one ``find_spec``; imports nothing and touches no GPU.
    """
    import importlib.util
    try:
        if "cupy" in sys.modules:                 # imported, or blocked with None
            return sys.modules["cupy"] is not None
        return importlib.util.find_spec("cupy") is not None
    except (ImportError, ValueError):
        return False


def _cuda_devices_hidden() -> bool:
    """``CUDA_VISIBLE_DEVICES`` set to nothing, or to a list starting with an invalid index
    (``-1``), hides every GPU from CUDA."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return False
    first = value.strip().split(",")[0].strip()
    return first == "" or first.startswith("-")


def _nvml_device_count() -> int | None:
    """The number of GPUs NVML sees, or None when NVML is unavailable. NVML creates no CUDA
    context, so asking it leaves the GPU's memory alone."""
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def cuda_available() -> bool:
    """True when CuPy imports and a GPU is visible to CUDA, without creating a CUDA context.

    A CUDA context costs hundreds of MiB of the GPU's memory in every process that makes one,
    so this asks NVML (``CUDA_VISIBLE_DEVICES`` respected) and falls back to the CUDA runtime
    only where NVML is unavailable. Without CuPy installed this costs one ``find_spec``.
    """
    if not cupy_installed() or _cuda_devices_hidden():
        return False
    count = _nvml_device_count()
    try:
        cupy = import_cupy()              # DEVICE-7: CuPy must import, not merely be found
        if count is not None:
            return count > 0
        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:
        return False


def normalize_pci_bus_id(bus_id: str) -> str:
    """CUDA's ``"0000:3B:00.0"`` -> ``"0000:3b:00.0"`` (lower case, domain kept)."""
    return bus_id.strip().lower()


def _is_oom(cupy: ModuleType, exc: BaseException) -> bool:
    status = getattr(exc, "status", None)
    return status == getattr(cupy.cuda.runtime, "errorMemoryAllocation", 2)


class _RegionSubAllocator(SubAllocator):
    """Book-keeping shared by the device and host sub-allocators.

    Attributes mirror ``SimulatedDeviceMemory``: ``capacity`` (settable), ``bytes_in_use``,
    ``alloc_calls`` (every requested size), ``free_calls`` ((ptr, size) pairs),
    ``live_regions`` (ptr -> size) and ``fail`` (while True every ``alloc`` returns None).
    ``driver_failures`` counts allocations the CUDA driver refused for lack of memory.
    """

    kind = "region"

    def __init__(self, device_index: int, capacity: int | None, cupy: ModuleType) -> None:
        self.device_index = int(device_index)
        self.capacity = capacity
        self.fail = False
        self.alloc_calls: list[int] = []
        self.free_calls: list[tuple[int, int]] = []
        self.live_regions: dict[int, int] = {}
        self.driver_failures = 0
        self._cupy = cupy
        self._lock = threading.Lock()

    @property
    def bytes_in_use(self) -> int:
        with self._lock:
            return sum(self.live_regions.values())

    def alloc(self, alignment: int, num_bytes: int) -> int | None:
        num_bytes = int(num_bytes)
        with self._lock:
            self.alloc_calls.append(num_bytes)
            if self.fail or num_bytes <= 0:
                return None
            in_use = sum(self.live_regions.values())
            if self.capacity is not None and in_use + num_bytes > self.capacity:
                return None
        try:
            with self._cupy.cuda.Device(self.device_index):
                ptr = self._raw_alloc(num_bytes)
        except Exception as exc:
            if not _is_oom(self._cupy, exc):
                raise
            with self._lock:
                self.driver_failures += 1
            log.info("%s memory of GPU %d: driver refused %d bytes (%s)", self.kind,
                     self.device_index, num_bytes, exc)
            return None
        if alignment > 0 and ptr % min(int(alignment), 256):
            self._release_raw(ptr)
            raise RuntimeError(f"{self.kind} allocation of {num_bytes} bytes at {ptr:#x} is not "
                               f"{alignment}-aligned")
        with self._lock:
            self.live_regions[ptr] = num_bytes
        return ptr

    def free(self, ptr: int, num_bytes: int) -> None:
        with self._lock:
            size = self.live_regions.get(ptr)
            if size is None:
                raise InvalidPointerError(f"free({ptr:#x}, {num_bytes}): not a live {self.kind} "
                                          f"region of GPU {self.device_index}")
            if size != num_bytes:          # as the simulated memory checks (a BFC size bug)
                raise InvalidPointerError(f"free({ptr:#x}, {num_bytes}): the {self.kind} region "
                                          f"of GPU {self.device_index} has {size} bytes")
            del self.live_regions[ptr]
            self.free_calls.append((ptr, int(num_bytes)))
        with self._cupy.cuda.Device(self.device_index):
            self._release_raw(ptr)

    def close(self) -> None:
        """Release every region still live (the process is shutting the device down)."""
        with self._lock:
            regions = list(self.live_regions)
            self.live_regions.clear()
        for ptr in regions:
            try:
                with self._cupy.cuda.Device(self.device_index):
                    self._release_raw(ptr)
            except Exception as exc:  # pragma: no cover - driver already torn down
                log.warning("releasing %s region %#x of GPU %d failed: %s", self.kind, ptr,
                            self.device_index, exc)

    def _raw_alloc(self, num_bytes: int) -> int:
        raise NotImplementedError

    def _release_raw(self, ptr: int) -> None:
        raise NotImplementedError


class CudaDeviceMemory(_RegionSubAllocator):
    """Device memory of one GPU: each region is a ``cudaMalloc``, freed with ``cudaFree``.

    ``capacity`` (None: no cap of our own) bounds the bytes this sub-allocator holds; the
    driver's own out-of-memory also makes ``alloc`` return None.
    """

    kind = "device"

    def _raw_alloc(self, num_bytes: int) -> int:
        return int(self._cupy.cuda.runtime.malloc(num_bytes))

    def _release_raw(self, ptr: int) -> None:
        self._cupy.cuda.runtime.free(ptr)


class CudaHostMemory(_RegionSubAllocator):
    """Pinned host memory, mapped into the GPU's address space and portable across GPUs.

    ``alloc`` returns the device pointer of the mapping (equal to the host pointer under unified
    virtual addressing), so kernels use the buffer directly.
    """

    kind = "host"

    def __init__(self, device_index: int, capacity: int | None, cupy: ModuleType) -> None:
        super().__init__(device_index, capacity, cupy)
        self._host_ptr: dict[int, int] = {}

    def _raw_alloc(self, num_bytes: int) -> int:
        rt = self._cupy.cuda.runtime
        host = int(rt.hostAlloc(num_bytes, _HOST_ALLOC_PORTABLE | _HOST_ALLOC_MAPPED))
        try:
            dev = int(rt.pointerGetAttributes(host).devicePointer) or host
        except Exception:
            rt.freeHost(host)
            raise
        self._host_ptr[dev] = host
        return dev

    def _release_raw(self, ptr: int) -> None:
        host = self._host_ptr.pop(ptr, ptr)
        self._cupy.cuda.runtime.freeHost(host)


class CudaBackend:
    """Device backend over CuPy. GPU indexes are CUDA device ordinals."""

    name = "cuda"

    def __init__(self) -> None:
        self._cupy = import_cupy()
        try:
            self._count = int(self._cupy.cuda.runtime.getDeviceCount())
        except Exception as exc:
            raise CudaUnavailableError(f"{INSTALL_HINT} (no usable CUDA driver: {exc})") from exc
        if self._count <= 0:
            raise CudaUnavailableError(f"{INSTALL_HINT} (the CUDA runtime sees no GPU)")
        self._attach_lock = threading.Lock()
        self._routings: dict[int, CupyAllocatorRouting] = {}
        _limit_library_workspaces()

    @property
    def xp(self) -> ModuleType:
        return self._cupy

    def gpu_count(self) -> int:
        return self._count

    def _check(self, index: int) -> int:
        index = int(index)
        if not 0 <= index < self._count:
            raise ValueError(f"GPU index {index} out of range: {self._count} GPU(s) visible")
        return index

    def pci_bus_id(self, index: int) -> str:
        """The real PCI bus id, ``"0000:3b:00.0"`` (lower case)."""
        return normalize_pci_bus_id(self._cupy.cuda.runtime.deviceGetPCIBusId(self._check(index)))

    def gpu_info(self, index: int) -> Any:
        from .device import GpuInfo  # the protocol's record type
        index = self._check(index)
        props = self._cupy.cuda.runtime.getDeviceProperties(index)
        name = props["name"]
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        return GpuInfo(name=str(name), pci_bus_id=self.pci_bus_id(index),
                       total_memory=int(props["totalGlobalMem"]),
                       compute_capability=(int(props["major"]), int(props["minor"])))

    def device_memory(self, index: int, capacity: int | None) -> CudaDeviceMemory:
        return CudaDeviceMemory(self._check(index), capacity, self._cupy)

    def host_memory(self, index: int) -> CudaHostMemory:
        return CudaHostMemory(self._check(index), None, self._cupy)

    # --- integration with the runtime ------------------------------------------------------

    def attach(self, device_mgr: Any) -> CupyAllocatorRouting:
        """Put ``device_mgr``'s GPU allocators under CuPy (see ``CupyAllocatorRouting``).

        Called once the devices exist (``create_runtime``); ``detach`` undoes it.
        """
        with self._attach_lock:
            routing = self._routings.get(id(device_mgr))
            if routing is not None:
                return routing
            routing = install_cupy_allocator(device_mgr, attributes=AllocationAttributes())
            self._routings[id(device_mgr)] = routing
            return routing

    def detach(self, device_mgr: Any) -> None:
        """Restore CuPy's allocator and release the GPU memory ``device_mgr``'s allocators hold.

        Call after the devices are closed: every region of their BFCs goes back to the driver.
        """
        with self._attach_lock:
            routing = self._routings.pop(id(device_mgr), None)
        if routing is not None:
            gc.collect()
            routing.uninstall()
        self.synchronize()
        for device in device_mgr.list_devices():
            if str(getattr(device, "device_type", "")).upper() != "GPU":
                continue
            for sub in _sub_allocators(device.get_allocator()):
                close = getattr(sub, "close", None)
                if callable(close):
                    close()

    def close(self) -> None:
        """Detach every device manager still attached (their memory stays with their BFCs)."""
        with self._attach_lock:
            routings, self._routings = list(self._routings.values()), {}
        for routing in routings:
            routing.uninstall()

    def synchronize(self, index: int | None = None) -> None:
        """Wait for the GPU (all GPUs when None) to finish queued work."""
        indexes = range(self._count) if index is None else [self._check(index)]
        for i in indexes:
            with self._cupy.cuda.Device(i):
                self._cupy.cuda.runtime.deviceSynchronize()


# --- CuPy's allocator routed through the runtime's allocators -----------------------------------

_tls = threading.local()
_gc_hook_lock = threading.Lock()
_gc_hook_users = 0


def _in_gc() -> bool:
    return getattr(_tls, "gc_depth", 0) > 0


def _gc_callback(phase: str, info: dict) -> None:
    _tls.gc_depth = getattr(_tls, "gc_depth", 0) + (1 if phase == "start" else -1)


def _gc_hook(add: bool) -> None:
    global _gc_hook_users
    with _gc_hook_lock:
        if add:
            _gc_hook_users += 1
            if _gc_hook_users == 1:
                gc.callbacks.append(_gc_callback)
        else:
            _gc_hook_users -= 1
            if _gc_hook_users == 0 and _gc_callback in gc.callbacks:
                gc.callbacks.remove(_gc_callback)


_oom_classes: dict[type, type] = {}


def _out_of_memory_error(cupy: ModuleType, size: int, in_use: int, limit: int, name: str,
                         device_id: int) -> BaseException:
    """The error of a refused CuPy allocation: the runtime's ``ResourceExhaustedError`` (so a
    step fails with TF's RESOURCE_EXHAUSTED, EXEC clauses) that is also CuPy's
    ``OutOfMemoryError`` (so CuPy code handling out-of-memory still recognises it)."""
    from .errors import ResourceExhaustedError
    base = cupy.cuda.memory.OutOfMemoryError
    cls = _oom_classes.get(base)
    if cls is None:
        cls = type("CupyResourceExhaustedError", (ResourceExhaustedError, base),
                   {"__module__": __name__,
                    "__reduce__": lambda self: (RuntimeError, (str(self),))})
        _oom_classes[base] = cls
    error = cls(f"OOM when allocating a {size}-byte CuPy buffer on GPU {device_id} by "
                f"allocator {name} (in use {in_use}, limit {limit})", num_bytes=size)
    error._size, error._total, error._limit = size, in_use, limit
    return error


_active_lock = threading.Lock()
_active: list["CupyAllocatorRouting"] = []      # installed routings, the last one serving
_original_allocator: list[Any] = []             # CuPy's allocator before the first install


class _Allocation:
    """Owner of one routed CuPy buffer: frees it into its allocator exactly once."""

    __slots__ = ("router", "allocator", "ptr", "size")

    def __init__(self, router: "CupyAllocatorRouting", allocator: Allocator, ptr: int,
                 size: int) -> None:
        self.router: CupyAllocatorRouting | None = router
        self.allocator = allocator
        self.ptr = ptr
        self.size = size

    def __del__(self) -> None:
        try:
            router, self.router = self.router, None
            if router is not None:
                router._release(self)
        except BaseException:  # pragma: no cover - interpreter shutdown; never raise here
            pass


class CupyAllocatorRouting:
    """CuPy's allocator, placing every buffer through the runtime allocator of its GPU.

    ``allocators`` maps a CUDA device ordinal to its allocator (the VMem allocator, or the
    GPU BFC when ``TF_GPU_VMEM`` is off). A request the allocator refuses raises CuPy's
    ``OutOfMemoryError``. A buffer goes back to its allocator when CuPy drops the last
    reference to it, from whatever thread that happens on.

    A free that happens inside the cyclic garbage collector (which may run while the same
    thread holds an allocator's lock), or on a thread already inside this router, is never
    done in place: it is queued (``queue.SimpleQueue.put`` is safe there) and done by the
    ``antman-cupy-free-<n>`` thread, which simply waits for the lock. ``flush()`` does the
    queued frees in the caller's thread.

    Buffers are reused in stream order, as CuPy's own pool does: use one stream per device
    (CuPy's default, the legacy default stream).
    """

    _ids = itertools.count(1)
    _STOP = object()

    def __init__(self, allocators: Mapping[int, Allocator], *,
                 attributes: AllocationAttributes | None = None, alignment: int = 256) -> None:
        self._allocators = dict(allocators)
        self._attributes = attributes
        self._alignment = alignment
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = 0
        self._live_bytes = 0
        self._deferred = 0
        self._installed = False
        self._thread: threading.Thread | None = None
        self._cupy: ModuleType | None = None
        self._id = next(self._ids)

    # --- statistics ------------------------------------------------------------------------

    @property
    def live_buffers(self) -> int:
        """Routed buffers not yet given back (queued frees included)."""
        with self._lock:
            return self._live

    @property
    def live_bytes(self) -> int:
        with self._lock:
            return self._live_bytes

    @property
    def deferred_frees(self) -> int:
        """How many frees were queued instead of done in place, since construction."""
        with self._lock:
            return self._deferred

    @property
    def pending_frees(self) -> int:
        """Queued frees not done yet (approximate while the free thread runs)."""
        return self._queue.qsize()

    def allocator_for(self, device_id: int) -> Allocator:
        try:
            return self._allocators[device_id]
        except KeyError:
            raise RuntimeError(f"CuPy allocated on CUDA device {device_id}, which has no runtime "
                               f"GPU device (known: {sorted(self._allocators)})") from None

    # --- the CuPy allocator ----------------------------------------------------------------

    def malloc(self, size: int) -> Any:
        """``cupy.cuda.set_allocator`` entry point: a ``MemoryPointer`` of ``size`` bytes."""
        cupy = self._cupy or import_cupy()
        device_id = int(cupy.cuda.runtime.getDevice())
        if size <= 0:
            return cupy.cuda.MemoryPointer(
                cupy.cuda.memory.UnownedMemory(0, 0, None, device_id), 0)
        allocator = self.allocator_for(device_id)
        ptr = self._allocate(allocator, size)
        if ptr is None:
            gc.collect()  # buffers in reference cycles give their memory back, then retry once
            self.flush()
            ptr = self._allocate(allocator, size)
        if ptr is None:
            stats = allocator.get_stats()
            in_use = stats.bytes_in_use if stats is not None else -1
            limit = (stats.bytes_limit or 0) if stats is not None else 0
            raise _out_of_memory_error(cupy, size, in_use, limit, allocator.name, device_id)
        owner = _Allocation(self, allocator, ptr, size)
        with self._lock:
            self._live += 1
            self._live_bytes += size
        return cupy.cuda.MemoryPointer(
            cupy.cuda.memory.UnownedMemory(ptr, size, owner, device_id), 0)

    __call__ = malloc

    def _allocate(self, allocator: Allocator, size: int) -> int | None:
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            return allocator.allocate_raw(self._alignment, size, self._attributes)
        finally:
            _tls.depth -= 1

    def _release(self, allocation: _Allocation) -> None:
        if getattr(_tls, "depth", 0) > 0 or _in_gc():
            self._queue.put(allocation)   # reentrant-safe; no lock taken here
            return
        self._free(allocation)

    def _free(self, allocation: _Allocation) -> None:
        _tls.depth = getattr(_tls, "depth", 0) + 1
        try:
            allocation.allocator.deallocate_raw(allocation.ptr)
        except Exception as exc:  # never raise out of a finalizer
            log.error("returning CuPy buffer %#x (%d bytes) to %s failed: %s", allocation.ptr,
                      allocation.size, getattr(allocation.allocator, "name", "?"), exc)
        finally:
            _tls.depth -= 1
            with self._lock:
                self._live -= 1
                self._live_bytes -= allocation.size

    def _run_free_thread(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            with self._lock:
                self._deferred += 1
            self._free(item)

    def flush(self) -> int:
        """Do the queued frees now, in this thread; returns how many were done."""
        if getattr(_tls, "depth", 0) > 0 or _in_gc():
            return 0
        done = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return done
            if item is self._STOP:
                self._queue.put(item)
                return done
            with self._lock:
                self._deferred += 1
            self._free(item)
            done += 1

    # --- installation ----------------------------------------------------------------------

    def install(self) -> "CupyAllocatorRouting":
        """Make this CuPy's allocator (process wide); CuPy's own pool gives back its free blocks.

        CuPy has one allocator per process: the routing installed last serves every CuPy
        allocation until it is uninstalled, then the one installed before it serves again.
        Starts the ``antman-cupy-free-<n>`` thread; ``uninstall`` joins it.
        """
        if self._installed:
            return self
        cupy = self._cupy = import_cupy()
        with _active_lock:
            if not _active:
                _original_allocator[:] = [cupy.cuda.get_allocator()]
                cupy.get_default_memory_pool().free_all_blocks()
            _active.append(self)
            cupy.cuda.set_allocator(self.malloc)
        self._thread = threading.Thread(target=self._run_free_thread,
                                        name=f"antman-cupy-free-{self._id}", daemon=True)
        self._thread.start()
        _gc_hook(True)
        self._installed = True
        return self

    def uninstall(self) -> None:
        """Stop serving CuPy (the previous routing, or CuPy's own allocator, serves again) and
        join the free thread. Buffers still alive go back to their allocator when CuPy drops
        them."""
        if not self._installed:
            return
        assert self._cupy is not None
        self._installed = False
        with _active_lock:
            if self in _active:
                _active.remove(self)
            self._cupy.cuda.set_allocator(_active[-1].malloc if _active
                                          else _original_allocator[0])
        _gc_hook(False)
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(self._STOP)
            thread.join()
        self.flush()

    def __enter__(self) -> "CupyAllocatorRouting":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


def _gpu_ordinal(device: Any) -> int:
    """The CUDA ordinal of a GPU device (``tf_gpu_id``; GPU:i is CUDA device i)."""
    for attr in ("tf_gpu_id", "index"):
        value = getattr(device, attr, None)
        if isinstance(value, int):
            return value
    return int(str(device.name).rsplit(":", 1)[-1])


def _gpu_allocators(device_mgr: Any) -> dict[int, Allocator]:
    """CUDA ordinal -> allocator, for every GPU device of ``device_mgr``."""
    return {_gpu_ordinal(d): d.get_allocator() for d in device_mgr.list_devices()
            if str(getattr(d, "device_type", "")).upper() == "GPU"}


def _sub_allocators(allocator: Any) -> list[Any]:
    """The sub-allocators under an allocator stack (VMem -> device/host BFC -> sub-allocator)."""
    out = []
    for inner in (getattr(allocator, "device_allocator", None),
                  getattr(allocator, "host_allocator", None), allocator):
        sub = getattr(inner, "sub_allocator", None)
        if sub is not None and sub not in out:
            out.append(sub)
    return out


def install_cupy_allocator(device_mgr: Any, *,
                           attributes: AllocationAttributes | None = None
                           ) -> CupyAllocatorRouting:
    """Route CuPy through the GPU allocators of ``device_mgr``; use as a context manager or
    call ``uninstall()`` on the result."""
    return CupyAllocatorRouting(_gpu_allocators(device_mgr), attributes=attributes).install()


def as_cupy_array(ptr: int, shape: tuple[int, ...] | int, dtype: Any, *, device_id: int,
                  nbytes: int | None = None, owner: object = None) -> Any:
    """A CuPy array viewing ``ptr`` (a device or mapped host address) without owning it.

    ``owner`` is kept alive as long as the array (and its views) live; the caller frees the
    address otherwise.
    """
    cupy = import_cupy()
    import numpy as np
    dt = np.dtype(dtype)
    shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
    size = int(np.prod(shape_t, dtype=np.int64)) * dt.itemsize
    nbytes = size if nbytes is None else nbytes
    if nbytes < size:
        raise ValueError(f"as_cupy_array: {nbytes} bytes at {ptr:#x} cannot hold {shape_t} {dt}")
    mem = cupy.cuda.memory.UnownedMemory(int(ptr), int(nbytes), owner, int(device_id))
    return cupy.ndarray(shape_t, dtype=dt, memptr=cupy.cuda.MemoryPointer(mem, 0))

