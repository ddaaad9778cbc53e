"""Breaks FL-3 (change detection): the content re-check interval is one part per million long.

``FileListener.__init__`` converts ``content_check_interval_s`` with a factor of
1 000 001 µs a second: the default 5 s becomes 5 000 005 µs, so a path whose stat
signature does not show a rewrite (coarse file-system timestamps) is read again 5 µs late.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import file_listener as _fl

from meta_tests import broken_forks as _forks

NAME = "broken-content-check-one-ppm-long"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "FL-3"
MODULES = ("conformance/test_file_listener.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_fl.FileListener, "__init__", (
    "round(content_check_interval_s * 1_000_000)",
    "round(content_check_interval_s * 1_000_001)"))                # the fork: 1 ppm long
