"""Breaks REG-1 (groupings): a grouping is accepted by value, so ``1.0`` is POST_SESSION_RUN.

``session_run_action_registry._grouping`` rejects booleans but converts any other value with
``Grouping(value)``, as the reference itself once did: ``Grouping(1.0)`` compares equal to 1,
so ``register(1.0, ...)`` registers a POST action and ``run_grouping(1.0, ...)`` runs them.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import session_run_action_registry as _registry

from meta_tests import broken_forks as _forks

NAME = "broken-grouping-compared-by-value"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "REG-1"
MODULES = ("conformance/test_session_run_actions.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_registry, "_grouping", (
    "    if isinstance(grouping, bool) or not isinstance(grouping, int):   # 1.0 == 1, True == 1\n",
    "    if isinstance(grouping, bool):      # the fork: any value equal to 0 or 1 is accepted\n"))
