"""Breaks ADJ-3 (releasing free regions): a shrink releases a region holding a live chunk.

``BFCAllocator._adj_regions`` calls a region fully free when its *first* chunk is not in
use, forgetting that this chunk must also span the whole region. A region whose first
chunk is free but whose later chunk is allocated is then given back to the sub-allocator
by ``free_empty_memory`` while the caller still holds a pointer into it.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-shrink-releases-live-region"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "ADJ-3"
MODULES = ("conformance/test_adjustable.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "_adj_regions", (
    "chunks[r.ptr].size == r.size\n                 and chunks[r.ptr].allocation_id == -1",
    "chunks[r.ptr].allocation_id == -1"))                          # the fork: no span check
