"""Breaks OPM-5 (queued-op bookkeeping): a refused queued-op count does not fail the step.

``ExecutorState._finish`` calls the RM action's ``set_executor_queued_op_num`` in a
``try`` that logs the exception and goes on, as a fork that took the end-of-step bookkeeping
for best effort does: the step succeeds (its fetches are returned and the POST actions run)
although the RM action refused the count.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import executor as _executor

from meta_tests import broken_forks as _forks

NAME = "broken-queued-op-count-failure-ignored"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-5"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_executor.ExecutorState, "_finish", (
    "                    self.rm.set_executor_queued_op_num(self.key, self.opm.num_queued)\n",
    "                    try:                            # the fork: best-effort bookkeeping\n"
    "                        self.rm.set_executor_queued_op_num(self.key, self.opm.num_queued)\n"
    "                    except Exception:\n"
    "                        log.warning(\"executor: queued-op bookkeeping failed\",\n"
    "                                    exc_info=True)\n"))
