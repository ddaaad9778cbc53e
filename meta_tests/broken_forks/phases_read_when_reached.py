"""Breaks REG-8 (concurrent use): each phase's actions are read when the run reaches it.

``SessionRunActionRegistry.run_grouping`` takes the phases present when the run starts, but
reads the actions of each phase only when it gets to it: an action registered during the run
at a phase that has not run yet (and already had actions) runs in that very run.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import session_run_action_registry as _registry

from meta_tests import broken_forks as _forks

NAME = "broken-phases-read-when-reached"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "REG-8"
MODULES = ("conformance/test_session_run_actions.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_registry.SessionRunActionRegistry, "run_grouping", (
    "        for _, action in snapshot:\n"
    "            action.run_action(options)\n",
    "        g = _grouping(grouping)\n"
    "        for phase in sorted({p for p, _ in snapshot}):\n"
    "            with self._lock:                          # the fork: read when reached\n"
    "                actions = [a for q, a in self._groups[g] if q == phase]\n"
    "            for action in actions:\n"
    "                action.run_action(options)\n"))
