"""Breaks ADJ-4 (next region size after a shrink): the gap is not taken as unsigned.

``GPUAdjustableAllocator._free_empty_memory_locked`` computes ``target - pool_after`` as a
signed number, as a port from C++ that drops the ``size_t`` wrap does: when a shrink falls
short (the pool stays above the target) the gap is negative, clamps to 1, and the next
region is 256 bytes instead of 1 MiB. The usual order of the operands (target above the pool)
behaves the same.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_adjustable_allocator as _adj

from meta_tests import broken_forks as _forks

NAME = "broken-shrink-gap-unguarded"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "ADJ-4"
MODULES = ("conformance/test_adjustable.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_adj.GPUAdjustableAllocator, "_free_empty_memory_locked", (
    "        if gap < 0:\n"
    "            gap = (1 << 64) + gap\n",
    "        # the fork: no size_t wrap of a negative gap\n"))
