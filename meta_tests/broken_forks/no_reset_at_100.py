"""Breaks RM-11 (perfControl 100 resets the throttle): no reset at perfControl 100.

``GPUResourceManagement._sleep_or_suspend`` returns at once when ``perf >= 100`` without
setting the estimated idle time ``E`` and the time slot ``S`` to 0, as the original does
(D-RM-2): after un-throttling, the idle time left from the last throttled step stays, so
the GpuOpManager keeps queueing.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-no-reset-at-100"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-11"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_sleep_or_suspend", (
    "        if perf >= 100:\n",
    "        if perf >= 100:\n"
    "            return 0                                # the fork: E and S are kept\n"))
