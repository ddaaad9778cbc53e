"""Breaks BFC-12 (failure and retry): the retry deadline is compared with ``<=``.

``AllocatorRetry.allocate_raw`` waits again while ``now <= deadline``: at the deadline it
waits 0 µs and tries again, forever when time does not pass between the two.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import allocator_retry as _retry

from meta_tests import broken_forks as _forks

NAME = "broken-retry-deadline-inclusive"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "BFC-12"
MODULES = ("conformance/test_bfc.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_retry.AllocatorRetry, "allocate_raw", (
    'if now < deadline:',
    'if now <= deadline:'))                                   # the fork: <= for <
