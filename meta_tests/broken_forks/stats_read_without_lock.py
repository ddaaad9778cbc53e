"""Breaks BFC-17 (thread safety): get_stats reads the counters without the allocator's lock.

``BFCAllocator.get_stats`` builds its ``AllocatorStats`` from five counters without taking
``lock_``, as a fork that thinks integer reads need no lock would: a concurrent allocation
can land between two of the reads, so ``bytes_in_use`` and ``num_allocs`` (or the peak)
describe different moments. Under the GIL the race is rare; the suite forces it by watching
the lock (fixtures/interleave.py).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-stats-read-without-lock"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-17"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "get_stats", (
    "        with self._lock:\n",
    "        if True:                                    # the fork: no lock for reads\n"))
