"""Breaks VMEM-4 (host fallback, two-argument call): no host fallback without attributes.

``GPUVMemAllocator.allocate_raw`` falls back to the host allocator only in the
three-argument overload; a two-argument call (``attributes=None``) that the device cannot
serve returns None instead of ``host_allocator.allocate_raw(alignment, num_bytes)``, as a
fork that ported only one of AntMan's two ``AllocateRaw`` overloads would.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vmem

from meta_tests import broken_forks as _forks

NAME = "broken-no-host-fallback"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-4"
MODULES = ("conformance/test_vmem.py",
           "conformance/test_memory_stateful.py::test_vmem_state_machine")
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_vmem.GPUVMemAllocator, "allocate_raw", (
    "        return self._host.allocate_raw(alignment, num_bytes, attributes)\n",
    "        if attributes is None:\n"
    "            return None                             # the fork: no two-argument fallback\n"
    "        return self._host.allocate_raw(alignment, num_bytes, attributes)\n"))
