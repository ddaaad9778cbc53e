"""Breaks BFC-4 (split rule): a chunk is split only when it is at least twice the request.

``BFCAllocator._find_chunk_ptr`` drops the second half of TF's split condition
(``c.size - r >= kMaxInternalFragmentation``, 128 MiB): a request of more than half of a
large free chunk takes the whole chunk, wasting up to half of it, as in TF before the
128 MiB bound was added.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-split-without-128mib"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-4"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "_find_chunk_ptr", (
    "if size >= rounded * 2 or size - rounded >= K_MAX_INTERNAL_FRAGMENTATION:",
    "if size >= rounded * 2:"))                                    # the fork: no 128 MiB rule
