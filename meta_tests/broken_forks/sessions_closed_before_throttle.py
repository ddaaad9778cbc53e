"""Breaks API-10 (what a context's close waits for): sessions are closed before the throttle.

``RuntimeContext.close`` closes its sessions first and resource management afterwards:
closing a session waits for its runs, and a run in its throttle sleep (RM-10) is only woken
by ``GPUResourceManagement.close``, so the context's close waits out the whole sleep (on a
virtual clock nobody advances, forever).
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import process_state as _process_state

from meta_tests import broken_forks as _forks

NAME = "broken-sessions-closed-before-throttle"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "API-10"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_process_state.RuntimeContext, "close", (
    "        if rm is not None:\n"
    "            rm.close()                       # wakes suspended steps and throttle sleeps\n"
    "        for session in sessions:\n"
    "            try:\n"
    "                session.close()\n"
    "            except Exception as exc:         # keep tearing down; report the first error\n"
    "                log.exception(\"closing session %r failed\", session)\n"
    "                errors.append(exc)\n",
    "        for session in sessions:             # the fork: sessions first\n"
    "            try:\n"
    "                session.close()\n"
    "            except Exception as exc:\n"
    "                log.exception(\"closing session %r failed\", session)\n"
    "                errors.append(exc)\n"
    "        if rm is not None:\n"
    "            rm.close()\n"))
