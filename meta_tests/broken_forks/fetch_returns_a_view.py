"""Breaks SESS-2 (fetches, feeds and targets): a fetched value is the runtime's own array.

``tensor.to_host`` returns a NumPy array as it is instead of a copy, as a fork avoiding "a
needless copy" on the simulated device would: a fetched variable or constant is the
session's own buffer, so changing the returned array changes the variable.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import executor as _executor
from reference_runtime import tensor as _tensor

from meta_tests import broken_forks as _forks

NAME = "broken-fetch-returns-a-view"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "SESS-2"
MODULES = ("conformance/test_session.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_tensor, "to_host", (
    "        return array.copy()\n",
    "        return array                    # the fork: no copy\n"))
_executor.to_host = _tensor.to_host       # the executor's own binding of the function
