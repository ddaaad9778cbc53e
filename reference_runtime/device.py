"""Devices, the device manager and the device backends (SPEC.md, DEVICE clauses).

TensorFlow's ``Device`` / ``DeviceMgr`` reduced to what the runtime needs:

- ``CPUDevice`` (``/job:localhost/replica:0/task:0/device:CPU:0``): a thread pool and a
  tracking host allocator.
- ``GPUDevice`` (``.../device:GPU:<i>``): the allocator stack of ``GPUProcessState``, i.e.
  ``maybe_create_gpu_vmem_allocator(GPUBFCAllocator(device memory))``, and a TF-style
  ``physical_device_desc`` carrying the PCI bus id, through which GPUUsageAdjustment and
  GPUStatistics find the allocator of a GPU (``get_pci_bus_id``).
- A ``Backend`` provides the GPUs: ``SimBackend`` (embedded simulated memory, the default)
  or ``CudaBackend`` (``reference_runtime.cuda_backend``, CuPy on a real NVIDIA GPU).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import itertools
import os
import re
import threading
import types
from dataclasses import dataclass
from typing import Any, Protocol

from .allocator import (AllocationAttributes, Allocator, AllocatorStats,
                                         InvalidPointerError, SubAllocator)
from .clock import Clock

__all__ = [
    "DeviceAttributes", "Device", "CPUDevice", "GPUDevice", "DeviceMgr", "CPUAllocator",
    "get_pci_bus_id", "parse_device_name", "GpuInfo", "Backend", "SimBackend",
    "select_backend", "create_devices", "DEVICE_ENV_VAR", "LOCAL_PREFIX",
]

LOCAL_PREFIX = "/job:localhost/replica:0/task:0"
DEVICE_ENV_VAR = "ANTMAN_DEVICE"
CPU_MEMORY_LIMIT = 256 << 20          # TF's attribute value for the CPU device
SIM_GPU_MODEL = "AntMan Simulated GPU"
SIM_FIRST_BUS = 0x3B                  # bus ids 0000:3b:00.0, 0000:3c:00.0, ...
SIM_HOST_MEMORY_BYTES = 1 << 40       # address space of a simulated host memory


# --------------------------------------------------------------------------------------
# Names and descriptions
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceAttributes:
    """TF ``DeviceAttributes`` (the fields the runtime uses)."""

    name: str
    device_type: str
    memory_limit: int
    physical_device_desc: str


_NAME_RE = re.compile(
    r"^(?:/job:(?P<job>[^/]+)/replica:(?P<replica>[0-9]+)/task:(?P<task>[0-9]+))?"
    r"/?(?:device:)?(?P<type>[A-Za-z_][A-Za-z0-9_]*):(?P<index>[0-9]+)$")


def parse_device_name(name: str) -> tuple[str, int]:
    """``(TYPE, index)`` of a local device name in any form ``lookup_device`` accepts.

    Accepted: the full name, ``/device:GPU:0``, ``device:GPU:0``, ``GPU:0`` and TF's legacy
    lower-case ``/gpu:0`` (the type is compared upper-cased). A job/replica/task prefix
    must name ``/job:localhost/replica:0/task:0``. Raises ``ValueError`` otherwise.
    """
    if not isinstance(name, str):
        raise ValueError(f"device name must be a str, got {type(name).__name__}")
    m = _NAME_RE.fullmatch(name)        # not match(): "$" also accepts a last newline
    if m is None:
        raise ValueError(f"malformed device name {name!r}")
    if m["job"] is not None and (m["job"], m["replica"], m["task"]) != ("localhost", "0", "0"):
        raise ValueError(f"device name {name!r} is not local ({LOCAL_PREFIX})")
    return m["type"].upper(), int(m["index"])


_BUS_MARKER = "pci bus id:"
_PCI_RE = re.compile(r"^(?:[0-9a-f]{1,8}:)?([0-9a-f]{1,2}:[0-9a-f]{1,2}\.[0-7])$")


def get_pci_bus_id(physical_device_desc: str) -> str:
    """The PCI bus id of a GPU description, lower case, without the PCI domain.

    AntMan's ``GetPciBusId``: ``"device: 0, name: X, pci bus id: 0000:3B:00.0, ..."`` gives
    ``"3b:00.0"``. Unlike the original, the value must be a PCI address
    ``[domain:]bus:device.function`` (hex); a description without the marker or with
    another value gives ``""`` (matches no config key), and a value without a domain is
    kept whole instead of collapsing to ``device.function`` (DEVICE-5, D-DEVICE-1).
    """
    if not isinstance(physical_device_desc, str):
        return ""
    desc = physical_device_desc.lower()
    pos = desc.find(_BUS_MARKER)
    if pos < 0:
        return ""
    value = desc[pos + len(_BUS_MARKER):].split(",", 1)[0].strip()
    m = _PCI_RE.match(value)
    if m is None:
        return ""
    bus, rest = m[1].split(":")
    dev, fn = rest.split(".")
    return f"{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


# --------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuInfo:
    """What a backend reports of one GPU."""

    name: str
    pci_bus_id: str                     # full form with domain, e.g. "0000:3b:00.0"
    total_memory: int                   # bytes
    compute_capability: tuple[int, int]  # (major, minor)


class Backend(Protocol):
    """A source of GPUs and their memory."""

    name: str
    xp: types.ModuleType

    def gpu_count(self) -> int: ...

    def gpu_info(self, index: int) -> GpuInfo: ...

    def device_memory(self, index: int, capacity: int) -> SubAllocator: ...

    def host_memory(self, index: int) -> SubAllocator: ...

    def synchronize(self, index: int | None = None) -> None:
        """Wait until GPU ``index`` (every GPU when None) finished the work queued on it."""
        ...

    def attach(self, device_mgr: "DeviceMgr") -> None:
        """The runtime built ``device_mgr`` on this backend (CUDA: route CuPy's allocator)."""
        ...

    def detach(self, device_mgr: "DeviceMgr") -> None:
        """The runtime closed ``device_mgr``'s devices (CUDA: give their memory back)."""
        ...


class SimBackend:
    """Embedded simulated GPUs (``SimulatedDeviceMemory`` / ``SimulatedHostMemory``)."""

    name = "sim"

    def __init__(self, num_gpus: int = 1, gpu_memory_bytes: int = 1 << 30, *,
                 model: str = SIM_GPU_MODEL,
                 compute_capability: tuple[int, int] = (7, 0)) -> None:
        _check_count("num_gpus", num_gpus, upper=0xFF - SIM_FIRST_BUS + 1)
        _check_bytes("gpu_memory_bytes", gpu_memory_bytes)
        import numpy
        self.xp = numpy
        self.num_gpus = num_gpus
        self.gpu_memory_bytes = gpu_memory_bytes
        self.model = model
        self.compute_capability = compute_capability

    def gpu_count(self) -> int:
        return self.num_gpus

    def gpu_info(self, index: int) -> GpuInfo:
        self._check_index(index)
        return GpuInfo(self.model, f"0000:{SIM_FIRST_BUS + index:02x}:00.0",
                       self.gpu_memory_bytes, self.compute_capability)

    def device_memory(self, index: int, capacity: int) -> SubAllocator:
        self._check_index(index)
        from .sim_memory import SimulatedDeviceMemory
        return SimulatedDeviceMemory(capacity)

    def host_memory(self, index: int) -> SubAllocator:
        self._check_index(index)
        from .sim_memory import SimulatedHostMemory
        return SimulatedHostMemory(SIM_HOST_MEMORY_BYTES)

    def synchronize(self, index: int | None = None) -> None:
        """Simulated kernels run synchronously: nothing is ever left queued."""

    def attach(self, device_mgr: "DeviceMgr") -> None:
        """Nothing to route: simulated buffers are NumPy arrays."""

    def detach(self, device_mgr: "DeviceMgr") -> None:
        """Nothing to give back beyond what the allocators already freed."""

    def _check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) \
                or not 0 <= index < self.num_gpus:
            raise IndexError(f"GPU index {index!r} out of range [0, {self.num_gpus})")

    def __repr__(self) -> str:
        return f"SimBackend(num_gpus={self.num_gpus}, gpu_memory_bytes={self.gpu_memory_bytes})"


def _check_count(what: str, value: Any, *, upper: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= upper:
        raise ValueError(f"{what} must be an int from 0 to {upper}, got {value!r}")


def _check_bytes(what: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{what} must be a positive int (bytes), got {value!r}")


def select_backend(name: str | None = None, *, num_gpus: int = 1,
                   gpu_memory_bytes: int = 1 << 30) -> Backend:
    """The device backend: ``name``, else ``$ANTMAN_DEVICE``, else ``auto``.

    ``sim``: simulated GPUs (``num_gpus`` of ``gpu_memory_bytes`` each). ``cuda``: the real
    GPUs through CuPy (a clear ``RuntimeError`` when unavailable). ``auto``: ``cuda`` when
    ``import cupy`` works and a GPU is present, else ``sim``. Any other value: ``ValueError``.
    """
    source = "argument"
    if name is None:
        # unset means "auto", as an empty value does
        name, source = os.environ.get(DEVICE_ENV_VAR, "auto"), f"${DEVICE_ENV_VAR}"
    if not isinstance(name, str):
        raise ValueError(f"backend name must be a str, got {name!r}")
    key = name.strip().lower() or "auto"          # empty, from wherever, means "auto"
    if key not in ("sim", "cuda", "auto"):
        raise ValueError(f"unknown device backend {name!r} (from {source}); "
                         f"expected one of 'sim', 'cuda', 'auto'")
    if key == "auto":
        from .cuda_backend import cuda_available   # imports no CuPy
        if not cuda_available():
            key = "sim"
    if key == "sim":
        return SimBackend(num_gpus, gpu_memory_bytes)
    from .cuda_backend import CudaBackend           # imports no CuPy either
    try:
        return CudaBackend()
    except RuntimeError as exc:
        raise RuntimeError(f"device backend 'cuda' (from {source}) is unavailable: {exc}") \
            from exc


# --------------------------------------------------------------------------------------
# Allocators
# --------------------------------------------------------------------------------------

class CPUAllocator(Allocator):
    """TF's ``CPUAllocator`` with stats: host addresses, no limit, sizes tracked.

    Addresses are integers below the simulated device and host spans; every allocation
    (a 0-byte one included) gets a distinct address, aligned to ``max(alignment, 64)``.
    """

    _ids = itertools.count(1)

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._cursor = 1    # the first address is then the alignment (64 or more), never 0
        self._live: dict[int, tuple[int, int]] = {}     # ptr -> (size, allocation id)
        self._stats = AllocatorStats()

    @property
    def name(self) -> str:
        return self._name

    def allocate_raw(self, alignment: int, num_bytes: int,
                     attributes: AllocationAttributes | None = None) -> int | None:
        if not isinstance(num_bytes, int) or num_bytes < 0:
            raise ValueError(f"{self._name}: allocate_raw({alignment}, {num_bytes!r}): "
                             f"num_bytes must be a non-negative int")
        align = max(64, alignment)      # DEVICE-6's alignments: powers of two up to 4096
        with self._lock:
            ptr = -(-self._cursor // align) * align
            self._cursor = ptr + max(num_bytes, 1)
            self._live[ptr] = (num_bytes, next(self._ids))
            s = self._stats
            s.num_allocs += 1
            s.bytes_in_use += num_bytes
            s.peak_bytes_in_use = max(s.peak_bytes_in_use, s.bytes_in_use)
            s.largest_alloc_size = max(s.largest_alloc_size, num_bytes)
            return ptr

    def deallocate_raw(self, ptr: int | None) -> None:
        if ptr is None:
            return
        with self._lock:
            entry = self._live.pop(ptr, None)
            if entry is None:
                raise InvalidPointerError(f"{self._name}: deallocate_raw({ptr!r}): "
                                          f"not a live allocation")
            self._stats.bytes_in_use -= entry[0]

    def tracks_allocation_sizes(self) -> bool:
        return True

    def _entry(self, ptr: int, call: str) -> tuple[int, int]:
        with self._lock:
            entry = self._live.get(ptr)
        if entry is None:
            raise InvalidPointerError(f"{self._name}: {call}({ptr!r}): not a live allocation")
        return entry

    def requested_size(self, ptr: int) -> int:
        return self._entry(ptr, "requested_size")[0]

    def allocated_size(self, ptr: int) -> int:
        return self._entry(ptr, "allocated_size")[0]

    def allocation_id(self, ptr: int) -> int:
        return self._entry(ptr, "allocation_id")[1]

    def get_stats(self) -> AllocatorStats | None:
        with self._lock:
            return self._stats.copy()

    def clear_stats(self) -> None:
        with self._lock:
            s = self._stats
            s.num_allocs = 0
            s.peak_bytes_in_use = s.bytes_in_use
            s.largest_alloc_size = 0


# --------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------

class Device:
    """A device: a name, attributes, an allocator. ``close()`` releases its resources."""

    def __init__(self, attributes: DeviceAttributes, allocator: Allocator) -> None:
        self.attributes = attributes
        self.name = attributes.name
        self.device_type = attributes.device_type
        self.parsed_type, self.index = parse_device_name(attributes.name)
        self._allocator = allocator
        self._closed = False

    def get_allocator(self) -> Allocator:
        """The device allocator (TF ``GetAllocator``; one allocator per device, so TF's
        ``AllocatorAttributes`` argument has nothing to choose and is not taken)."""
        return self._allocator

    def sync(self) -> None:
        """TF ``Device::Sync``: wait until the work queued on the device has finished."""

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CPUDevice(Device):
    """``/job:localhost/replica:0/task:0/device:CPU:<i>`` with a thread pool."""

    def __init__(self, index: int) -> None:
        attrs = DeviceAttributes(f"{LOCAL_PREFIX}/device:CPU:{index}", "CPU",
                                 CPU_MEMORY_LIMIT, "")
        # the allocator is named after the device type, as TF's "cpu" allocator
        super().__init__(attrs, CPUAllocator(attrs.device_type.lower()))
        # the pool's size is ThreadPoolExecutor's default (from the number of cores)
        self.thread_pool = concurrent.futures.ThreadPoolExecutor(
            thread_name_prefix=f"antman-cpu-{index}")

    def schedule(self, fn: Any, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run ``fn`` on the device's thread pool."""
        return self.thread_pool.submit(fn, *args, **kwargs)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.thread_pool.shutdown(wait=True, cancel_futures=True)


class GPUDevice(Device):
    """``/job:localhost/replica:0/task:0/device:GPU:<i>`` over a backend GPU."""

    def __init__(self, tf_gpu_id: int, backend: Backend, allocator: Allocator,
                 info: GpuInfo, memory_limit: int) -> None:
        major, minor = info.compute_capability
        desc = (f"device: {tf_gpu_id}, name: {info.name}, pci bus id: {info.pci_bus_id}, "
                f"compute capability: {major}.{minor}")
        attrs = DeviceAttributes(f"{LOCAL_PREFIX}/device:GPU:{tf_gpu_id}", "GPU",
                                 memory_limit, desc)
        super().__init__(attrs, allocator)
        self.tf_gpu_id = tf_gpu_id
        self.backend = backend
        self.xp = backend.xp
        self.pci_bus_id = get_pci_bus_id(desc)

    def sync(self) -> None:
        self.backend.synchronize(self.tf_gpu_id)


class DeviceMgr:
    """TF ``DeviceMgr``: the process's local devices, looked up by name."""

    def __init__(self, devices: list[Device]) -> None:
        self._devices = list(devices)
        self._by_key: dict[tuple[str, int], Device] = {}
        for d in self._devices:
            key = (d.parsed_type, d.index)
            if key in self._by_key:
                raise ValueError(f"duplicate device {d.name}")
            self._by_key[key] = d

    def list_devices(self) -> list[Device]:
        return list(self._devices)

    def lookup_device(self, name: str) -> Device:
        """The device named by a full or short name; ``KeyError`` when there is none."""
        known = ", ".join(d.name for d in self._devices)
        try:
            key = parse_device_name(name)
        except ValueError as exc:
            raise KeyError(f"lookup_device({name!r}): {exc}; known: {known}") from None
        device = self._by_key.get(key)
        if device is None:
            raise KeyError(f"lookup_device({name!r}): no such device; known: {known}")
        return device

    def close(self) -> None:
        """Close every device (idempotent)."""
        for d in self._devices:
            d.close()

    def __repr__(self) -> str:
        return f"DeviceMgr({[d.name for d in self._devices]})"


def create_devices(*, backend: Backend, clock: Clock | None, num_gpus: int | None,
                   gpu_memory_bytes: int | None, allow_growth: bool) -> DeviceMgr:
    """CPU:0 then GPU:0..n-1, each GPU with TF's allocator stack (DEVICE-3).

    ``num_gpus`` None is every GPU of the backend; ``gpu_memory_bytes`` (the BFC limit) None
    each GPU's total memory; ``clock`` None the real clock. ``allow_growth`` is ``GPUOptions.allow_growth``;
    ``TF_FORCE_GPU_ALLOW_GROWTH`` may override it.
    """
    rt = importlib.import_module(__package__)  # the memory stack, through the package's exports
    available = backend.gpu_count()
    if num_gpus is None:
        num_gpus = available
    _check_count("num_gpus", num_gpus, upper=available)    # the backend's GPUs
    if gpu_memory_bytes is not None:
        _check_bytes("gpu_memory_bytes", gpu_memory_bytes)
    # Nothing to close when a GPU fails to build: the CPU pool starts its threads on the
    # first schedule(), and a GPU device holds no resource of its own.
    devices: list[Device] = [CPUDevice(0)]
    for i in range(num_gpus):
        info = backend.gpu_info(i)
        limit = gpu_memory_bytes if gpu_memory_bytes is not None else info.total_memory
        bfc = rt.GPUBFCAllocator(backend.device_memory(i, limit), limit, f"GPU_{i}_bfc",
                                 allow_growth=allow_growth, clock=clock)
        allocator = rt.maybe_create_gpu_vmem_allocator(
            bfc, host_sub_allocator=backend.host_memory(i), tf_gpu_id=i,
            physical_total_memory=info.total_memory, clock=clock)
        devices.append(GPUDevice(i, backend, allocator, info, limit))
    return DeviceMgr(devices)
