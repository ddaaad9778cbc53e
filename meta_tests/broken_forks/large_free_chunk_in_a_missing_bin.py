"""Breaks BFC-2 (bins): a freed chunk of 512 MiB up to 1 GiB is filed in a bin that does not exist.

``BFCAllocator.deallocate_raw`` caps the bin index of a freed chunk one doubling late
(``b > 21`` for ``b > 20``): a chunk of 512 MiB to 1 GiB gets index 21 of 21 bins, and
freeing it fails; TF's ``BinNumForSize`` files every chunk of 256 MiB or more in bin 20.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-large-free-chunk-in-a-missing-bin"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-2"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "deallocate_raw", (
    "            if b > 20:\n",
    "            if b > 21:                   # the fork: one doubling late\n"))
