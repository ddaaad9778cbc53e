"""Breaks SESS-5 (errors): POST_SESSION_RUN actions run after a failed step.

``DirectSession._run`` also runs the POST grouping when the step raised, before re-raising
the step's error (statistics record a failed step's duration and resource management
throttles it), as a fork that moved the POST hook into an error path would.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import direct_session as _ds

from meta_tests import broken_forks as _forks

NAME = "broken-post-after-failed-step"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "SESS-5"
MODULES = ("conformance/test_session.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_ds.DirectSession, "_run", (
    "        except BaseException as exc:\n",
    "        except BaseException as exc:\n"
    "            self._registry.run_grouping(           # the fork: POST on failure too\n"
    "                Grouping.POST_SESSION_RUN, SessionRunActionOptions(\n"
    "                    device_mgr=self._device_mgr, session=self, graph_id=eak.graph_id,\n"
    "                    sess_duration_us=self._clock.now_us() - start_us))\n"))
