"""Breaks VMEM-8 (statistics): the merged stats are the device allocator's own object.

``GPUVMemAllocator.get_stats`` writes the merged peak into the object the device allocator
returned instead of a copy of it, as a fork saving an allocation would: over a device
allocator that hands out one shared stats object, every call adds the host peak to the
device's own figure again.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vmem

from meta_tests import broken_forks as _forks

NAME = "broken-stats-not-copied"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-8"
MODULES = ("conformance/test_vmem.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_vmem.GPUVMemAllocator, "get_stats", (
    "        merged = device.copy()\n",
    "        merged = device                 # the fork: no copy\n"))
