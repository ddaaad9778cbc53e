"""Breaks RM-14 (idle-time bookkeeping): spend_idle_time reads E before taking its lock.

``GPUResourceManagement.spend_idle_time`` reads the estimated idle time outside the
idle-time lock and writes ``max(E - us, 0)`` under it: a ``set_estimated_idle_time`` that
lands between the read and the write is lost (the spend overwrites it with a value computed
from the old E).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-idle-read-outside-lock"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-14"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "spend_idle_time", (
    "        with self._idle_lock:\n"
    "            self._estimated_idle_us = max(self._estimated_idle_us - us, 0)\n",
    "        estimated = self._estimated_idle_us       # the fork: read outside the lock\n"
    "        with self._idle_lock:\n"
    "            self._estimated_idle_us = max(estimated - us, 0)\n"))
