"""Breaks VMEM-7 (routing of frees and queries): every free goes to the device allocator.

``GPUVMemAllocator.deallocate_raw`` ignores whether the pointer is in the set of device
pointers (``discard`` instead of ``remove``, so no ``KeyError`` routes it) and hands every
pointer to the device allocator: a host fallback pointer is freed on the wrong allocator (which
rejects it) and the host memory is never returned.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vmem

from meta_tests import broken_forks as _forks

NAME = "broken-frees-to-wrong-allocator"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-7"
MODULES = ("conformance/test_vmem.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_vmem.GPUVMemAllocator, "deallocate_raw", (
    "            self._device_ptrs.remove(ptr)         # atomic: of two frees of ptr, one wins\n",
    "            self._device_ptrs.discard(ptr)        # the fork: no routing by membership\n"))
