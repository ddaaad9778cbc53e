"""Breaks VMEM-7 (routing of frees and queries): a device pointer is freed before it is forgotten.

``GPUVMemAllocator.deallocate_raw`` frees a device pointer on the device allocator first and
removes it from the set of device pointers afterwards: an allocation by another thread that
gets the same address in between adds it to the set, then the first thread removes it, so
the new allocation is routed to the host allocator (its queries and its free fail there).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vmem

from meta_tests import broken_forks as _forks

NAME = "broken-device-pointer-forgotten-late"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-7"
MODULES = ("conformance/test_vmem.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_vmem.GPUVMemAllocator, "deallocate_raw", (
    "        try:\n"
    "            self._device_ptrs.remove(ptr)         # atomic: of two frees of ptr, one wins\n"
    "        except KeyError:\n"
    "            self._host_call(\"deallocate_raw\", ptr)\n"
    "            return\n"
    "        self._device.deallocate_raw(ptr)\n",
    "        if ptr not in self._device_ptrs:\n"
    "            self._host_call(\"deallocate_raw\", ptr)\n"
    "            return\n"
    "        self._device.deallocate_raw(ptr)\n"
    "        self._device_ptrs.discard(ptr)            # the fork: forgotten after the free\n"))
