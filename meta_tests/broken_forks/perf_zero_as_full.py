"""Breaks RM-4 (integer values): perfControl 0 is read as 100.

``GPUResourceManagement._parse_perf`` turns a 0 into the default 100 (``value or 100``),
so a config that suspends training resets the throttle instead. Every test that needs
perfControl 0 in force (RM-12, CLK-3, SESS-8, E2E-5) has that as its precondition on RM-4.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-perf-zero-as-full"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-4"
MODULES = ("conformance/test_resource_management.py", "conformance/test_clock.py",
           "conformance/test_session.py", "conformance/test_end_to_end.py",
           "conformance/test_worker_protocol.py::"
           "test_perf_control_zero_suspends_and_nonzero_resumes")
OUTCOMES = ("FAIL",)
ALSO_BREAKS = {"WORKER-11": "a black-box worker shows the misread value only as its clause's "
                            "own check: training goes on after perfControl 0 is written",
               "RM-12": "the workload command line, a process of its own, shows the misread "
                        "value only as RM-12's behaviour: perfControl 0 never holds its steps"}

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_parse_perf", (
    'return _uint(value, "perfControl", 100)',
    'return _uint(value, "perfControl", 100) or 100'))           # the fork: 0 means 100
