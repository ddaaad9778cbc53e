"""Breaks REG-6 (action names and the registration helper): ``SessionRunAction.run_action``
is no longer abstract.

The base class's ``run_action`` (a no-op) becomes an ordinary method: ``SessionRunAction()``
builds, and a subclass that forgot to define ``run_action`` is built and registered as an
action that silently does nothing, where it must raise ``TypeError``.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import session_run_action_registry as _reg

from meta_tests import broken_forks as _forks

NAME = "broken-run-action-not-abstract"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "REG-6"
MODULES = ("conformance/test_session_run_actions.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_reg.SessionRunAction.__abstractmethods__ = frozenset()    # the fork: run_action not abstract
