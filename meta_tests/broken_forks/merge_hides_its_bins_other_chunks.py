"""Breaks BFC-3 (best fit): a merge clears its bin's bit while the bin still holds chunks.

``BFCAllocator.deallocate_raw`` takes the free next chunk out of its bin to merge it and
clears that bin's bit in the bitmask of non-empty bins whether or not the bin is empty now:
the chunks left in that bin are no longer searched, so a request they fit grows a new
region (or fails at the limit) although TF's ``FindChunkPtr`` would have taken one of them.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-merge-hides-its-bins-other-chunks"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-3"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "deallocate_raw", (
    "                if not lst:\n"
    "                    self._nonempty &= ~(1 << nxt.bin_num)\n",
    "                if True:                 # the fork: whether or not the bin is empty\n"
    "                    self._nonempty &= ~(1 << nxt.bin_num)\n"))
