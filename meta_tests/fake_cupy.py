"""A minimal stand-in for CuPy, enough to unit-check the CUDA backend's book-keeping on a CPU.

It models: GPUs with a fixed memory size (``malloc`` raises ``CUDARuntimeError`` with
``errorMemoryAllocation`` when full), pinned host allocations, ``UnownedMemory`` /
``MemoryPointer`` ownership, the process-wide allocator hook, and ``empty(nbytes)`` which
allocates through that hook as CuPy's array constructors do. Nothing is computed.
"""

from __future__ import annotations

import itertools
import os
import threading
import types
from typing import Any

ERROR_MEMORY_ALLOCATION = 2


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"cudaError {status}")


class _PointerAttributes:
    def __init__(self, device: int, ptr: int, type_: int) -> None:
        self.device = device
        self.devicePointer = ptr
        self.hostPointer = ptr
        self.type = type_


ERROR_NO_DEVICE = 100


def make_fake_cupy(num_gpus: int = 1, gpu_bytes: int = 1 << 30) -> types.ModuleType:
    """A CuPy of ``num_gpus`` GPUs; ``CUDA_VISIBLE_DEVICES=""`` hides them all, as with CUDA
    (``getDeviceCount`` then raises ``cudaErrorNoDevice``)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        num_gpus = 0
    state = threading.local()
    lock = threading.Lock()
    addresses = itertools.count(1 << 32, 1 << 28)
    device_live: dict[int, tuple[int, int]] = {}      # ptr -> (device, size)
    host_live: dict[int, int] = {}
    events: list[tuple[str, int, int]] = []

    def get_device() -> int:
        return getattr(state, "device", 0)

    def set_device(i: int) -> None:
        state.device = i

    def malloc(size: int) -> int:
        dev = get_device()
        with lock:
            used = sum(s for d, s in device_live.values() if d == dev)
            if used + size > gpu_bytes:
                raise CUDARuntimeError(ERROR_MEMORY_ALLOCATION)
            ptr = next(addresses)
            device_live[ptr] = (dev, size)
            events.append(("malloc", dev, size))
        return ptr

    def free(ptr: int) -> None:
        if ptr == 0:   # cudaFree(0): a no-op that creates the context
            return
        with lock:
            dev, size = device_live.pop(ptr)
            events.append(("free", dev, size))

    def host_alloc(size: int, flags: int) -> int:
        with lock:
            ptr = next(addresses)
            host_live[ptr] = size
            events.append(("hostAlloc", flags, size))
        return ptr

    def free_host(ptr: int) -> None:
        with lock:
            size = host_live.pop(ptr)
            events.append(("freeHost", 0, size))

    def pointer_attributes(ptr: int) -> _PointerAttributes:
        if ptr in host_live:
            return _PointerAttributes(get_device(), ptr, 1)
        return _PointerAttributes(device_live[ptr][0], ptr, 2)

    def device_count() -> int:
        if num_gpus <= 0:
            raise CUDARuntimeError(ERROR_NO_DEVICE)
        return num_gpus

    runtime = types.SimpleNamespace(
        CUDARuntimeError=CUDARuntimeError, errorMemoryAllocation=ERROR_MEMORY_ALLOCATION,
        getDeviceCount=device_count, getDevice=get_device, setDevice=set_device,
        malloc=malloc, free=free, hostAlloc=host_alloc, freeHost=free_host,
        pointerGetAttributes=pointer_attributes,
        deviceGetPCIBusId=lambda i: f"0000:{0x3B + i:02X}:00.0",
        getDeviceProperties=lambda i: {"name": b"Fake GPU", "totalGlobalMem": gpu_bytes,
                                       "major": 9, "minor": 0},
        deviceSynchronize=lambda: None,
        memGetInfo=lambda: (gpu_bytes - sum(s for d, s in device_live.values()
                                            if d == get_device()), gpu_bytes),
        runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 13000,
    )

    class Device:
        def __init__(self, i: int = 0) -> None:
            self.id = i

        def __enter__(self) -> "Device":
            self._prev = get_device()
            set_device(self.id)
            return self

        def __exit__(self, *exc: object) -> None:
            set_device(self._prev)

    class OutOfMemoryError(MemoryError):
        def __init__(self, size: int, total: int, limit: int = 0) -> None:
            super().__init__(f"Out of memory allocating {size:,} bytes")

    class UnownedMemory:
        def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
            self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id

    class MemoryPointer:
        def __init__(self, mem: Any, offset: int) -> None:
            self.mem = mem
            self.ptr = mem.ptr + offset
            self.device_id = mem.device_id

    class _Pool:
        def free_all_blocks(self) -> None:
            events.append(("pool_free_all_blocks", 0, 0))

    pool = _Pool()

    def default_malloc(size: int) -> MemoryPointer:
        return MemoryPointer(UnownedMemory(malloc(size), size, None, get_device()), 0)

    current = {"allocator": default_malloc}

    class FakeArray:
        def __init__(self, nbytes: int) -> None:
            self.nbytes = nbytes
            self.data = current["allocator"](nbytes)

    memory = types.SimpleNamespace(UnownedMemory=UnownedMemory, OutOfMemoryError=OutOfMemoryError)
    cuda = types.SimpleNamespace(
        runtime=runtime, Device=Device, memory=memory, MemoryPointer=MemoryPointer,
        UnownedMemory=UnownedMemory,
        set_allocator=lambda fn=None: current.__setitem__("allocator", fn or default_malloc),
        get_allocator=lambda: current["allocator"],
    )
    module = types.ModuleType("cupy")
    module.cuda = cuda  # type: ignore[attr-defined]
    module.get_default_memory_pool = lambda: pool  # type: ignore[attr-defined]
    module.empty = FakeArray  # type: ignore[attr-defined]
    module.__version__ = "0.0-fake"  # type: ignore[attr-defined]
    module._device_live = device_live  # type: ignore[attr-defined]
    module._host_live = host_live  # type: ignore[attr-defined]
    module._events = events  # type: ignore[attr-defined]
    module.ndarray = None  # type: ignore[attr-defined]
    return module
