"""Breaks BFC-11 (garbage collection of free regions): only as many free regions as needed.

``BFCAllocator._deallocate_free_regions`` releases the fully free regions in address order
only until the request fits under the limit, instead of every fully free region, as a fork
"optimising" TF's ``DeallocateFreeRegions`` would: the regions left behind stay reserved,
and the extension that follows gets a smaller region.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-gc-releases-only-enough"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-11"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "_deallocate_free_regions", (
    "        for region in free_regions:\n",
    "        for region in free_regions:\n"
    "            if rounded <= self._memory_limit - self._total_region_bytes:\n"
    "                break                               # the fork: stop once it fits\n"))
