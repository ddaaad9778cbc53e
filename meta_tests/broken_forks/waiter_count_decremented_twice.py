"""Breaks BFC-12 (failure and retry): a served waiter is counted down twice.

``AllocatorRetry.allocate_raw`` also counts the waiter down on the success path, besides its
``finally``, as a refactor that "releases the slot early" would: once one waiter is served,
the count says nobody waits while another request still does, so the next free wakes no one
and that request sleeps until its deadline.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import allocator_retry as _retry

from meta_tests import broken_forks as _forks

NAME = "broken-waiter-count-decremented-twice"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-12"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_retry.AllocatorRetry, "allocate_raw", (
    "                if ptr is not None:\n"
    "                    return ptr\n",
    "                if ptr is not None:\n"
    "                    with self._mu:\n"
    "                        self._waiters -= 1      # the fork: the finally counts it again\n"
    "                    return ptr\n"))
