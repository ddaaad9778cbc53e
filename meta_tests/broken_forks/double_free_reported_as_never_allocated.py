"""Breaks BFC-6 (invalid pointers): a double free is reported as a pointer never allocated.

``BFCAllocator.deallocate_raw`` raises ``InvalidPointerError`` for a chunk that is not in
use with the message of a pointer that was never the start of a chunk ("not the start of a
chunk of this allocator"), as a fork that folded its two checks into one does: the message
never says the pointer was already freed, so a double free reads as a stray pointer.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import bfc_allocator as _bfc

from meta_tests import broken_forks as _forks

NAME = "broken-double-free-reported-as-never-allocated"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-6"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_bfc.BFCAllocator, "deallocate_raw", (
    "                raise InvalidPointerError(self._bad_pointer(\"deallocate_raw\", ptr, c))\n",
    "                raise InvalidPointerError(                # the fork: one message for both\n"
    "                    self._bad_pointer(\"deallocate_raw\", ptr, None))\n"))
