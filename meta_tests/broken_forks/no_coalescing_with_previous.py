"""Breaks BFC-5 (free and coalescing): a freed chunk is not merged into a free predecessor.

``BFCAllocator.deallocate_raw`` merges the freed chunk with the next chunk of its region
when that one is free, but never into the previous chunk: two adjacent free chunks can
remain, and a region with nothing in use may be several free chunks.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-no-coalescing-with-previous"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-5"
MODULES = ("conformance/test_bfc.py",
           "conformance/test_memory_stateful.py::test_bfc_state_machine")
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "deallocate_raw", (
    "            if prev is not None and prev.allocation_id == -1:\n",
    "            if False:                               # the fork: no merge into prev\n"))
