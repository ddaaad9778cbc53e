"""Breaks RM-21 (log lines): a text of exactly the quoting limit is said to be cut.

The quoting of resource management's log lines compares the text's length with ``<``
instead of ``<=``: a text of exactly ``limit`` characters (60 for a value of the config
document) is quoted whole and then followed by its length, as if an excerpt had been cut
from it.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm
from reference_runtime import log_text as _log_text

from meta_tests import broken_forks as _forks

NAME = "broken-quote-says-cut-at-the-limit"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-21"
MODULES = ("conformance/test_resource_management_faults.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_log_text, "quote", (
    "if len(text) <= limit:",
    "if len(text) < limit:                    # the fork: < for <="))
_rm.quote = _log_text.quote                   # resource management's log lines only
