"""Breaks FL-9 (content that cannot be delivered): a negative ``max_file_bytes`` is accepted.

``FileListener.__init__`` bounds ``max_file_bytes`` on the wrong side (above 2^62 instead of
below 0): ``FileListener(max_file_bytes=-1)`` constructs a listener that delivers nothing,
not even an empty file, instead of raising ``ValueError``.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import file_listener as _fl

from meta_tests import broken_forks as _forks

NAME = "broken-max-file-bytes-negative-accepted"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "FL-9"
MODULES = ("conformance/test_file_listener.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_fl.FileListener, "__init__", (
    "or max_file_bytes < 0:",
    "or max_file_bytes > 1 << 62:"))                 # the fork: the wrong bound
