"""Breaks RM-8 (limits at the next step boundary): limits paired with the sorted bus ids.

``_apply_limits`` zips the sorted bus ids with the pending limits in insertion order, so with
two GPUs whose limits arrived out of bus-id order each GPU gets the other's limit.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-limits-zipped-with-sorted-keys"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-8"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_apply_limits", (
    'pending = sorted(self._pending.items())',
    'pending = list(zip(sorted(self._pending), self._pending.values()))'))                                   # the fork: keys sorted, values not
