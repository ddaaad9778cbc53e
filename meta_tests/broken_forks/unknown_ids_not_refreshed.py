"""Breaks RM-20 (unknown bus ids): a remembered unknown bus id found again is not refreshed.

``GPUResourceManagement._forget_unknown`` re-inserts every bus id found unknown without
removing it first, so one already remembered keeps its old place: the remembered set is the
first found, not the most recently found, and a bus id found at every boundary is evicted by
newer ones and logged again.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-unknown-ids-not-refreshed"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-20"
MODULES = ("conformance/test_resource_management_faults.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_forget_unknown", (
    "                self._unknown.pop(bus_id, None)\n",
    "                pass                                  # the fork: kept at its old place\n"))
