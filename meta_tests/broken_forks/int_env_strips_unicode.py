"""Breaks ENV-2 (integer variables): every Unicode white space around the number is skipped.

``env.safe_strto64`` trims with ``str.strip()`` instead of C's white space only, as a Python
port of ``safe_strto64`` is tempted to: ``"\u00a05"`` (a no-break space) and ``"\x1c5"``
parse as 5 where TensorFlow logs an error and keeps the default.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import env as _env

from meta_tests import broken_forks as _forks

NAME = "broken-int-env-strips-unicode"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "ENV-2"
MODULES = ("conformance/test_env.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_env, "safe_strto64", (
    "    s = text.strip(_C_SPACES)\n",
    "    s = text.strip()                    # the fork: Unicode white space too\n"))
