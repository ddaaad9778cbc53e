"""Breaks STAT-6 (swapReason): the "OOM" and "FRAGMENT" labels are swapped.

``AllocatorStatus.swap_reason`` labels ``deviceMemUsedMax + hostMemUsedMax >
deviceMemPoolSize`` as ``"FRAGMENT"`` and the opposite as ``"OOM"``, as the original code
does contrary to its own definitions (D-STAT-1).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_statistics as _stat

from meta_tests import broken_forks as _forks

NAME = "broken-swap-reason-swapped"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "STAT-6"
MODULES = ("conformance/test_statistics.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_stat.AllocatorStatus, "swap_reason", (
    '            return "OOM"\n        return "FRAGMENT"\n',
    '            return "FRAGMENT"\n        return "OOM"\n'))           # the fork: swapped
