"""Breaks BFC-4 (split rule): a chunk exactly twice the request is not split.

``BFCAllocator._find_chunk_ptr`` compares ``size > rounded * 2`` where TF compares ``>=``:
a request of exactly half a free chunk takes the whole chunk, and the allocator's later
layout (what fits after it, when the pool is full) changes with it.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-split-rule-strict"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-4"
MODULES = ("conformance/test_bfc.py", "conformance/test_vmem.py",
           "conformance/test_statistics.py")
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "_find_chunk_ptr", (
    "if size >= rounded * 2 or",
    "if size > rounded * 2 or"))                                   # the fork: > for >=
