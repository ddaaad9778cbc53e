"""Breaks STAT-2 (duration window): the window keeps 10 entries instead of at most 9.

``GPUStatistics.record_session_run_duration`` drops the oldest entry only when the window
holds more than 10 entries (``>`` for ``>=``): the window holds up to 10 durations, so the
huge-change reference (the oldest entry) and the averaged duration lag one step.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_statistics as _stat

from meta_tests import broken_forks as _forks

NAME = "broken-window-holds-ten"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "STAT-2"
MODULES = ("conformance/test_statistics.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_stat.GPUStatistics, "record_session_run_duration", (
    "if len(history) >= DURATION_STATISTICS_NUM_SESS:",
    "if len(history) > DURATION_STATISTICS_NUM_SESS:"))            # the fork: > for >=
