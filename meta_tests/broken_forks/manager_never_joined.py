"""Breaks OPM-6 (shutdown at the end of the step): the manager thread is never joined.

``GpuOpManager.join`` does nothing, so neither ``shutdown`` at the end of a managed step
nor ``ExecutorState.run`` waits for the manager thread: ``run`` can return while the
step's manager thread is still alive (it exits on its own a little later).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_op_manager as _opm

from meta_tests import broken_forks as _forks

NAME = "broken-manager-never-joined"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-6"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_opm.GpuOpManager, "join", (
    "        if threading.current_thread() is not self._thread:\n",
    "        if False:                                   # the fork: never joined\n"))
