"""Breaks REG-8 (concurrent use): run_grouping holds the registry lock while actions run.

``SessionRunActionRegistry.run_grouping`` iterates the grouping under the registry's lock,
as a fork adding locking to the original's unlocked registry naively would: an action that
calls ``register``, ``get_action`` or ``actions`` of the same registry deadlocks (the lock
is not reentrant), and registrations from other threads wait for every running step.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import session_run_action_registry as _registry

from meta_tests import broken_forks as _forks

NAME = "broken-registry-locked-during-run"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "REG-8"
MODULES = ("conformance/test_session_run_actions.py",)
OUTCOMES = ("FAIL", "TIMEOUT")   # an action that registers deadlocks on the lock

_forks.log_as(__name__)
_forks.patch_source(_registry.SessionRunActionRegistry, "run_grouping", (
    "        for _, action in snapshot:\n"
    "            action.run_action(options)\n",
    "        with self._lock:                            # the fork: held while actions run\n"
    "            for _, action in snapshot:\n"
    "                action.run_action(options)\n"))
