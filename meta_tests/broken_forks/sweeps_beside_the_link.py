"""Breaks STAT-10 (temporary files of a writer that died): the sweep looks beside the symlink.

``GPUStatistics.dump_gpu_statistics`` sweeps stale temporary files next to the status path
as configured instead of next to its resolved target: through a symlink, the temporary files
of STAT-8 are made beside the target, so those a dead writer left there are never removed,
and files of the temporary name form beside the symlink (temporaries of another path) are.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_statistics as _statistics

from meta_tests import broken_forks as _forks

NAME = "broken-sweeps-beside-the-link"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "STAT-10"
MODULES = ("conformance/test_statistics_faults.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_statistics.GPUStatistics, "dump_gpu_statistics", (
    "                removed = _remove_stale_temporaries(target)\n",
    "                removed = _remove_stale_temporaries(self.status_file)   # the fork\n"))
