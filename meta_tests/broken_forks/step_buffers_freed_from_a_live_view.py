"""Breaks EXEC-6 (buffers are freed by reference counting): the buffers left at the end of a
failed step are never freed.

``StepAllocations.free_all`` keeps the table of live buffers itself (a live view of it)
instead of taking it and leaving an empty one, then clears it, so the loop that frees them
sees nothing, as a fork dropping "a copy" would: a buffer still held for a consumer that
never ran (its step failed) stays allocated.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import tensor as _tensor

from meta_tests import broken_forks as _forks

NAME = "broken-step-buffers-freed-from-a-live-view"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "EXEC-6"
MODULES = ("conformance/test_executor.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_tensor.StepAllocations, "free_all", (
    "            left, self._live = self._live, {}\n",
    "            left = self._live               # the fork: the same table, emptied below\n"
    "            self._live.clear()\n"))
