"""Breaks EXEC-12 (an aborting step): a kernel's compute time ignores the step's abort.

The executor sleeps a kernel's compute time without the step's abort event, so a step
whose other node failed waits for every running kernel to finish its compute time.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import executor as _ex

from meta_tests import broken_forks as _forks

NAME = "broken-compute-wait-ignores-abort"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "EXEC-12"
MODULES = ("conformance/test_executor.py", "conformance/test_session_interrupt.py")
OUTCOMES = ("FAIL",)
ALSO_BREAKS = {"SESS-9": "an interrupted run cancels its step, a node's compute time included "
                         "(SESS-9 names EXEC-12): the same missing cancellation"}

_forks.log_as(__name__)
_forks.patch_source(_ex.ExecutorState, "_run_node", (
    "if not self.clock.sleep_us(item.cost_us, self._abort):",
    "if not self.clock.sleep_us(item.cost_us):"))              # the fork: no abort event
