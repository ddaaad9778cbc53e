"""Breaks EXEC-5 (every buffer through the device allocator): kernels use the two-argument call.

``allocate_buffer`` calls ``allocate_raw(64, nbytes)`` without ``AllocationAttributes``: on a
VMem GPU the host fallback then takes the two-argument path (VMEM-4), which skips the
planned-memory check of the three-argument one (VMEM-5, VMEM-6), so a job may spill beyond
``TF_RO_PLANNED_GPU`` into host memory.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import tensor as _tensor

from meta_tests import broken_forks as _forks

NAME = "broken-kernels-allocate-two-argument"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "EXEC-5"
MODULES = ("conformance/test_executor.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_tensor, "allocate_buffer", (
    "        ptr = allocator.allocate_raw(ALLOCATOR_ALIGNMENT, nbytes, _KERNEL_ALLOCATION)\n",
    "        ptr = allocator.allocate_raw(ALLOCATOR_ALIGNMENT, nbytes)   # the fork\n"))
