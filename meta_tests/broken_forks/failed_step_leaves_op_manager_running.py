"""Breaks OPM-7 (a failed step ends its idle slot): the op manager is not aborted.

``ExecutorState._record_error`` keeps the step's first error and sets the step's abort flag,
but its test of the op manager is inverted, so a managed step that fails never aborts its
``GpuOpManager``: the op waiting in an idle slot waits the slot out (forever on a stopped
clock), the ops queued after it still run, and ``run`` and ``close()`` wait for them. A
one-line inversion that once held a test's teardown, and with it the run, until a wall limit.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import executor as _ex

from meta_tests import broken_forks as _forks

NAME = "broken-failed-step-leaves-op-manager-running"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-7"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_ex.ExecutorState, "_record_error", (
    "        if self.opm is not None:\n",
    "        if self.opm is None:                  # the fork: inverted\n"))
