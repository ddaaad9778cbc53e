"""Breaks RM-9 (a shrink that fell short is retried): a shrink that fell short is dropped.

``GPUResourceManagement._apply_limits`` stops treating a limit as pending once it has been
applied, whether or not the allocator reached it, as the original does until the config
content changes (D-RM-5): a shrink that needed the step's temporaries freed is never
completed.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-shrink-not-retried"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-9"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_apply_limits", (
    "                if outcome is AdjustOutcome.FELL_SHORT:\n",
    "                if False:                           # the fork: FELL_SHORT is not kept\n"))
