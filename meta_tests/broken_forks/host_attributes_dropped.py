"""Breaks VMEM-5 (host fallback, three-argument call): the host fallback drops the attributes.

``GPUVMemAllocator.allocate_raw`` calls the host allocator without the caller's attributes,
so a three-argument request that must not retry retries on the host for its whole timeout
(VMEM-5 asks for the caller's attributes; VMEM-10's refusal at once is how it shows).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vm

from meta_tests import broken_forks as _forks

NAME = "broken-host-attributes-dropped"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-5"
MODULES = ("conformance/test_vmem.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_vm.GPUVMemAllocator, "allocate_raw", (
    'return self._host.allocate_raw(alignment, num_bytes, attributes)',
    'return self._host.allocate_raw(alignment, num_bytes)'))                                   # the fork: attributes dropped
