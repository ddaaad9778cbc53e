"""Breaks FL-6 (handlers): handlers run under the listener's lock.

``FileListener._deliver`` keeps ``self._lock`` held while it calls the handlers, as the
original does (D-FL-1): a handler that calls ``register_file_listener``,
``unregister_file_listener`` or ``close`` of the same listener deadlocks the monitor thread
(the lock is not reentrant), and every later call on the listener blocks.

The suite bounds such a hang: the handler test fails its settle wait and its teardown
(ERROR), or, on a loaded machine, reaches the per-test timeout first (TIMEOUT).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import file_listener as _fl

from meta_tests import broken_forks as _forks

NAME = "broken-callbacks-under-lock"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "FL-6"
MODULES = ("conformance/test_file_listener.py",)
OUTCOMES = ("ERROR", "TIMEOUT")
ALSO_BREAKS = {
    "FL-7": "FL-7 requires that unregistering from a handler, on the monitor thread, does not "
            "deadlock; a handler running under the listener's lock deadlocks exactly there",
    "FL-5": "FL-5 requires that a registration's start-up delivery holds up no other path; its "
            "handler runs under the listener's lock, so the monitor thread's check waits for it",
    "FL-11": "FL-11 requires that a close() from a handler, on the monitor thread, ends the "
             "round; the handler runs under the listener's lock, which close() takes: it "
             "deadlocks there",
}

_forks.log_as(__name__)
_forks.patch_source(_fl.FileListener, "_deliver", (
    "            try:\n"
    "                callback(content)\n",
    "            try:\n"
    "                with self._lock:                    # the fork: under self._lock\n"
    "                    callback(content)\n"))
