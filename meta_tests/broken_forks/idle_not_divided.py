"""Breaks OPM-4 (the idle slot before each launch): the idle time is not divided by N.

``GpuOpManager._idle_slot`` takes the whole estimated idle time ``E`` as the slot of a
queued op instead of ``E_i // N_i``, so the first GPU op of a throttled step waits all of
``E`` and the others (nothing left) none.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_op_manager as _opm

from meta_tests import broken_forks as _forks

NAME = "broken-idle-not-divided"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-4"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_opm.GpuOpManager, "_idle_slot", (
    "slot = int(self._rm.get_estimated_idle_time()) // n",
    "slot = int(self._rm.get_estimated_idle_time())"))              # the fork: not // N
