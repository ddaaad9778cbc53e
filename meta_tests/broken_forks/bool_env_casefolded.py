"""Breaks ENV-1 (boolean variables): the value is case-folded, not ASCII-lowered.

``env.read_bool_from_env_var`` compares ``raw.casefold()`` instead of lowering the ASCII
letters only, as a Python port of ``absl::AsciiStrToLower`` might: ``"falſe"`` (with a long
s) folds to ``"false"`` and is accepted where TensorFlow logs an error and keeps the default.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import env as _env

from meta_tests import broken_forks as _forks

NAME = "broken-bool-env-casefolded"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "ENV-1"
MODULES = ("conformance/test_env.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_env, "read_bool_from_env_var", (
    "    value = raw.translate(_ASCII_LOWER)  # absl::AsciiStrToLower: ASCII letters only\n",
    "    value = raw.casefold()               # the fork: Unicode case folding\n"))
read_bool_from_env_var = _env.read_bool_from_env_var     # the package exports the function
