"""Breaks SESS-9 (an interrupted run cancels its step): only KeyboardInterrupt cancels.

``DirectSession._run`` cancels the step when the wait for it is left by a
``KeyboardInterrupt`` only: any other exception raised in the waiting thread (a signal
handler's, an asynchronous exception) leaves the step running, and ``close()`` then waits for
its ops.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import direct_session as _session

from meta_tests import broken_forks as _forks

NAME = "broken-cancel-only-on-ctrl-c"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "SESS-9"
MODULES = ("conformance/test_session_interrupt.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_session.DirectSession, "_run", (
    "        except BaseException as exc:\n",
    "        except KeyboardInterrupt as exc:            # the fork: Ctrl-C only\n"))
