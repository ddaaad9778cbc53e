"""Breaks VMEM-9 (no stall while the host side waits): the host retry runs under the VMem lock.

``GPUVMemAllocator`` gets a lock, as AntMan's has, and holds it across the host allocation,
including the host BFC's retry wait (D-VMEM-1), and across every free: while one thread
waits for host memory, every free through the same allocator blocks, so the frees that would
end the wait cannot happen until the retry times out.
"""

import threading

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vmem

from meta_tests import broken_forks as _forks

NAME = "broken-host-retry-under-lock"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-9"
MODULES = ("conformance/test_vmem.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
# The reference's VMem allocator has no lock of its own (D-VMEM-1); the fork adds AntMan's.
_vmem.GPUVMemAllocator._lock = property(
    lambda self: self.__dict__.setdefault("_fork_lock", threading.RLock()))
_forks.patch_source(_vmem.GPUVMemAllocator, "deallocate_raw", (
    "        try:\n"
    "            self._device_ptrs.remove(ptr)         # atomic: of two frees of ptr, one wins\n"
    "        except KeyError:\n"
    "            self._host_call(\"deallocate_raw\", ptr)\n"
    "            return\n"
    "        self._device.deallocate_raw(ptr)\n",
    "        with self._lock:                            # the fork: frees wait for the lock\n"
    "            if ptr not in self._device_ptrs:\n"
    "                self._host_call(\"deallocate_raw\", ptr)\n"
    "                return\n"
    "            self._device_ptrs.remove(ptr)\n"
    "            self._device.deallocate_raw(ptr)\n"))
_forks.patch_source(_vmem.GPUVMemAllocator, "allocate_raw", (
    "        return self._host.allocate_raw(alignment, num_bytes, attributes)\n",
    "        with self._lock:                            # the fork: waits under the lock\n"
    "            return self._host.allocate_raw(alignment, num_bytes, attributes)\n"))
