"""Breaks VMEM-9 (no stall while the host side waits): the host retry runs under the VMem lock.

``GPUVMemAllocator.allocate_raw`` holds its lock across the host allocation, including the
host BFC's retry wait, as AntMan does (D-VMEM-1): while one thread waits for host memory,
every free, allocation and query through the same allocator blocks, so the frees that would
end the wait cannot happen until the retry times out.
"""

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
_forks.patch_source(_vmem.GPUVMemAllocator, "allocate_raw", (
    "        return self._host.allocate_raw(alignment, num_bytes, attributes)\n",
    "        with self._lock:                            # the fork: waits under the lock\n"
    "            return self._host.allocate_raw(alignment, num_bytes, attributes)\n"))
