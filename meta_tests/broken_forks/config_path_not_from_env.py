"""Breaks API-7 (runtime context): create_runtime never reads GPU_CONFIG_FILE.

``create_runtime`` takes the config file from its argument only: called without one, as a
job started by the scheduler is, it registers no resource management although
``GPU_CONFIG_FILE`` names the file the scheduler writes, so the job ignores every limit.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import process_state as _process_state

from meta_tests import broken_forks as _forks

NAME = "broken-config-path-not-from-env"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "API-7"
MODULES = ("conformance/test_session_run_actions.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_process_state, "create_runtime", (
    "    config_file = path_from_env(config_file, CONFIG_FILE_ENV_VAR)\n",
    "    config_file = (\"\" if config_file is ENV_DEFAULT     # the fork: argument only\n"
    "                   else path_from_env(config_file, CONFIG_FILE_ENV_VAR))\n"))
create_runtime = _process_state.create_runtime          # the package exports the function
