"""Breaks SESS-1 (construction): ``inter_op_threads`` of 2 or 3 is rejected.

``DirectSession.__init__`` checks the pool size against the default's floor (4) instead of
the pool's minimum (2): ``DirectSession(..., inter_op_threads=2)`` raises ``ValueError``.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import direct_session as _session

from meta_tests import broken_forks as _forks

NAME = "broken-inter-op-minimum-four"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "SESS-1"
MODULES = ("conformance/test_session.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_session.DirectSession, "__init__", (
    "if not isinstance(n, int) or n < 2:",
    "if not isinstance(n, int) or n < 4:"))          # the fork: the default's floor
