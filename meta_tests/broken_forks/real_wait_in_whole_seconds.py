"""Breaks CLK-1 (clock protocol): the real clock waits whole seconds, so a sub-second wait
returns at once.

``RealClock.wait`` converts microseconds with ``//`` instead of ``/``, as a port from an API
taking integer seconds would: every wait shorter than a second times out immediately, so a
1 s poll becomes a busy loop and a 30 ms suspension recheck does not wait at all.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import clock as _clock

from meta_tests import broken_forks as _forks

NAME = "broken-real-wait-in-whole-seconds"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "CLK-1"
MODULES = ("conformance/test_clock.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_clock.RealClock, "wait", (
    "            left_s = (deadline_ns - time.monotonic_ns()) / 1e9\n",
    "            left_s = (deadline_ns - time.monotonic_ns()) // 1_000_000_000"
    "   # the fork: whole seconds\n"))
