"""GPUUsageAdjustment: apply a memory limit to the GPU with a given PCI bus id (SPEC.md, RM).

AntMan's ``gpu_usage_adjustment.{h,cc}``: find the GPU's BFC allocator through the device
manager (the VMem allocator's device allocator, or a plain BFC when VMem is off), remember
its initial ``bytes_limit`` (the hard cap on every later limit, "VGPU_MEMORY_LIMIT"), clamp
the request to it and apply it with ``GPUAdjustableAllocator.adjust_memory_limit``.

``adjust_mem_limit`` returns the original's bool; ``adjust`` says which case happened.
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any

from .device import get_pci_bus_id
from .log_text import quote

__all__ = ["GPUUsageAdjustment", "AdjustOutcome", "UINT64_MAX", "find_gpu_bfc_allocator",
           "gpu_bfc_allocators"]

log = logging.getLogger(__name__)

UINT64_MAX = (1 << 64) - 1


class AdjustOutcome(enum.Enum):
    APPLIED = enum.auto()        # the (clamped) target was reached: True
    UNCHANGED = enum.auto()      # the (clamped) target equals the current limit: False
    FELL_SHORT = enum.auto()     # a shrink could not release enough: False
    NOT_FOUND = enum.auto()      # no device manager, or no GPU BFC with that bus id: False


@dataclass
class _UsageInfo:
    allocator: Any               # the GPU's BFCAllocator
    mem_limit: int               # the limit last set (UINT64_MAX before the first call)
    initial_mem_limit: int       # bytes_limit when first found


def gpu_bfc_allocators(device_mgr: Any) -> dict[str, Any]:
    """Bus id -> the BFC allocator of the first GPU of ``device_mgr`` with that bus id
    (the VMem allocator's device side, or the GPU's BFC itself)."""
    from .bfc_allocator import BFCAllocator
    from .gpu_vmem_allocator import GPUVMemAllocator
    found: dict[str, Any] = {}
    for device in device_mgr.list_devices():
        if str(device.device_type).upper() != "GPU":
            continue
        bus_id = get_pci_bus_id(device.attributes.physical_device_desc)
        if not bus_id or bus_id in found:
            continue
        allocator = device.get_allocator()
        if isinstance(allocator, GPUVMemAllocator):
            allocator = allocator.device_allocator
        found[bus_id] = allocator if isinstance(allocator, BFCAllocator) else None
    return {bus_id: bfc for bus_id, bfc in found.items() if bfc is not None}


def find_gpu_bfc_allocator(device_mgr: Any, pci_bus_id: str) -> Any:
    """The BFC allocator of the GPU whose description carries ``pci_bus_id``, or None (for
    an empty bus id too: ``gpu_bfc_allocators`` holds no GPU without one)."""
    return gpu_bfc_allocators(device_mgr).get(pci_bus_id)


class GPUUsageAdjustment:
    """Per-bus-id memory limits on the GPU BFC allocators."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[str, _UsageInfo] = {}

    def adjust_mem_limit(self, pci_bus_id: str, new_limit: int, device_mgr: Any) -> bool:
        """True when the (clamped) limit was applied and reached (AntMan ``AdjustMemLimit``)."""
        return self.adjust(pci_bus_id, new_limit, device_mgr) is AdjustOutcome.APPLIED

    def adjust(self, pci_bus_id: str, new_limit: int, device_mgr: Any) -> AdjustOutcome:
        """Apply ``new_limit`` bytes to the GPU ``pci_bus_id``; say what happened."""
        from .gpu_adjustable_allocator import GPUAdjustableAllocator
        if isinstance(new_limit, bool) or not isinstance(new_limit, int) \
                or not 0 <= new_limit <= UINT64_MAX:
            raise ValueError(f"adjust_mem_limit({pci_bus_id!r}, {new_limit!r}): the limit must "
                             f"be an int in [0, 2**64)")
        with self._lock:
            info = self._usage.get(pci_bus_id)
            if info is None:
                if device_mgr is None:
                    log.error("adjust_mem_limit(%s): no device manager to find the GPU in",
                              quote(pci_bus_id))
                    return AdjustOutcome.NOT_FOUND
                bfc = find_gpu_bfc_allocator(device_mgr, pci_bus_id)
                if bfc is None:
                    log.error("Failed to get the allocator of gpu_pci_bus_id: %s",
                              quote(pci_bus_id))
                    return AdjustOutcome.NOT_FOUND
                # a BFCAllocator's stats always carry its memory limit, an int (BFC-13)
                info = _UsageInfo(bfc, UINT64_MAX, bfc.get_stats().bytes_limit)
                self._usage[pci_bus_id] = info
            if new_limit > info.initial_mem_limit:
                log.warning("The new mem size limit %d of gpu_pci_bus_id %s exceeds "
                            "VGPU_MEMORY_LIMIT, therefore it is clamped to %d", new_limit,
                            quote(pci_bus_id), info.initial_mem_limit)
                new_limit = info.initial_mem_limit
            if info.mem_limit == new_limit:
                return AdjustOutcome.UNCHANGED
            log.info("Start to manage the mem size limit to %d of device gpu_pci_bus_id: %s",
                     new_limit, quote(pci_bus_id))
            reached = GPUAdjustableAllocator().adjust_memory_limit(new_limit, info.allocator)
            info.mem_limit = reached
            if reached > new_limit:
                log.error("Failed to manage the mem size limit to %d of device "
                          "gpu_pci_bus_id: %s (the limit is %d)", new_limit,
                          quote(pci_bus_id), reached)
                return AdjustOutcome.FELL_SHORT
            return AdjustOutcome.APPLIED
