"""Breaks OPM-8 (an idle slot is device idle time): the slot starts without draining the GPUs.

``GpuOpManager._idle_slot`` waits its slot right after the previous launch returned, as the
original AntMan code does (D-OPM-12): on a real GPU the kernels launched before the slot run
through it, so a co-tenant gets no GPU time and the throttle counts GPU work as idle.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_op_manager as _opm

from meta_tests import broken_forks as _forks

NAME = "broken-idle-slot-overlaps-gpu"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-8"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_opm.GpuOpManager, "_idle_slot", (
    "        if self._drain is not None:\n"
    "            self._drain()                        # the slot starts on idle GPUs (OPM-8)\n",
    "        pass                                     # the fork: no drain before the slot\n"))
