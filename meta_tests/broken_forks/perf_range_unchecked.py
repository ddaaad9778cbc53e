"""Breaks RM-6 (perfControl out of range): perfControl above 100 is accepted.

``GPUResourceManagement._parse_perf`` checks ``perfControl`` against the uint64 range only,
as the original's range check ``perf < 0 && perf > 100`` (which can never fire, D-RM-1)
does: 101, 2^31 or 2^32 replace the last good value instead of being rejected.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-perf-range-unchecked"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-6"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_parse_perf", (
    '_uint(value, "perfControl", 100)',
    '_uint(value, "perfControl", UINT64_MAX)'))                   # the fork: no upper bound
