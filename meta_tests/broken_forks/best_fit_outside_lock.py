"""Breaks BFC-17 (thread safety): the best-fit search of allocate_raw runs without the lock.

``BFCAllocator.allocate_raw`` calls ``_find_chunk_ptr`` before taking its lock, as a fork
"optimising" the fast path would: two threads allocating at once can both take a chunk out
of the same bin while the other is changing it, so concurrent allocations may get the same
chunk or corrupt the bins.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-best-fit-outside-lock"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-17"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "allocate_raw", (
    "        with self._lock:\n"
    "            ptr = self._find_chunk_ptr(num_bytes)\n"
    "            if ptr is None:\n"
    "                ptr = self._allocate_slow(alignment, num_bytes)\n"
    "        if ptr is not None:\n"
    "            return ptr\n",
    "        ptr = self._find_chunk_ptr(num_bytes)          # the fork: outside the lock\n"
    "        if ptr is None:\n"
    "            with self._lock:\n"
    "                ptr = self._allocate_slow(alignment, num_bytes)\n"
    "        if ptr is not None:\n"
    "            return ptr\n"))
