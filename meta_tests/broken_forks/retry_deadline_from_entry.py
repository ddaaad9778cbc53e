"""Breaks BFC-12 (failure and retry): the retry deadline counts from the call, not from the
second failed attempt.

``AllocatorRetry.allocate_raw`` sets its deadline ``now + T`` when it is entered, before its
first attempt, as a fork timing "the whole call" would: when attempts take clock time (a
slow sub-allocator), the one wait is shorter than ``T`` by that time.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import allocator_retry as _retry

from meta_tests import broken_forks as _forks

NAME = "broken-retry-deadline-from-entry"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-12"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_retry.AllocatorRetry, "allocate_raw", (
    "        deadline: int | None = None\n",
    "        deadline: int | None = clock.now_us() + max_wait_us   # the fork: from entry\n"))
