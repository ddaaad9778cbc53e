"""Breaks OPM-4 (the idle slot before each launch): the slot is waited after the launch.

``GpuOpManager._run`` launches the queued op and then waits its idle slot, as the
original AntMan code does although its comments say "before launching" (D-OPM-1): every
op starts one slot early, and the first one at once.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_op_manager as _opm

from meta_tests import broken_forks as _forks

NAME = "broken-idle-slot-after-launch"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-4"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)
ALSO_BREAKS = {"OPM-8": "the slot runs after its op's launch, so an op whose slot raises was "
                        "launched already: OPM-8 says that op does not run",
               "OPM-7": "the slot runs after its op's launch, so the op whose launch fails "
                        "the step still takes one after the failure: OPM-7 says no slot then"}

_forks.log_as(__name__)
_forks.patch_source(_opm.GpuOpManager, "_run", (
    "                if not self._aborted:\n"
    "                    self._idle_slot()\n"
    "                if self._aborted:\n"
    "                    op.skip()\n"
    "                else:\n"
    "                    op.launch()\n",
    "                if self._aborted:\n"
    "                    op.skip()\n"
    "                else:\n"
    "                    op.launch()\n"
    "                    self._idle_slot()                   # the fork: after the launch\n"))
