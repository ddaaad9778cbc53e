"""Breaks STAT-3 (when figures are checked): the check time is updated only when writing.

``GPUStatistics.run_action`` sets ``last_check`` only when the check found a change and
wrote the file, so a check that found nothing does not restart the 10 s interval and the
next run checks (and may write) again at once.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_statistics as _stat

from meta_tests import broken_forks as _forks

NAME = "broken-check-time-only-on-write"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "STAT-3"
MODULES = ("conformance/test_statistics.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_stat.GPUStatistics, "run_action", (
    "                self.dump_gpu_statistics()\n"
    "            self._last_write = self._clock.time_s()\n",
    "                self.dump_gpu_statistics()\n"
    "                self._last_write = self._clock.time_s()  # the fork: only after a write\n"))
