"""Breaks REG-2 (phase order): a grouping runs its phases in descending order.

``SessionRunActionRegistry._rebuild`` sorts the registrations by phase with
``reverse=True`` (a stable sort): within a phase registration order is kept, but phase 2 (resource
management) runs before phase 1 (statistics), as a fork iterating its ``std::map`` with
``rbegin()`` would.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import session_run_action_registry as _registry

from meta_tests import broken_forks as _forks

NAME = "broken-phases-reversed"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "REG-2"
MODULES = ("conformance/test_session_run_actions.py",)
OUTCOMES = ("FAIL",)
ALSO_BREAKS = {"REG-8": "REG-8's registration made during a run at a phase still to run is "
               "defined by the phase order: reversed, the phase has already run, so the "
               "new action cannot run in that run, which is what REG-8's check observes"}

_forks.log_as(__name__)
_forks.patch_source(_registry.SessionRunActionRegistry, "_rebuild", (
    "key=lambda entry: entry[0])",
    "key=lambda entry: entry[0], reverse=True)"))                      # the fork
