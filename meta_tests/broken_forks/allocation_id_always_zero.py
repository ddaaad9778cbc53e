"""Breaks DEVICE-6 (CPU device): the CPU allocator's allocation_id is 0 for every pointer.

``CPUAllocator.allocation_id`` answers 0, as TF's ``Allocator::AllocationId`` default does,
although the allocator tracks sizes: allocations cannot be told apart by their id (a memory
profile keyed by it merges them all).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import device as _device

from meta_tests import broken_forks as _forks

NAME = "broken-allocation-id-always-zero"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "DEVICE-6"
MODULES = ("conformance/test_devices.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_device.CPUAllocator, "allocation_id", (
    "        return self._entry(ptr, \"allocation_id\")[1]\n",
    "        self._entry(ptr, \"allocation_id\")\n"
    "        return 0                                    # the fork: TF's default\n"))
