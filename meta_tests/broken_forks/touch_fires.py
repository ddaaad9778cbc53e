"""Breaks FL-3 (change detection): a rewrite with identical content (a touch) is delivered.

``FileListener._read_if_changed`` delivers whenever the stat signature changed and compares
the content hash only on the periodic content check, as the original's modification-time
test does (D-FL-2): ``touch`` on the config file re-delivers content that was already
delivered.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import file_listener as _fl

from meta_tests import broken_forks as _forks

NAME = "broken-touch-fires"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "FL-3"
MODULES = ("conformance/test_file_listener.py",)
OUTCOMES = ("FAIL",)
ALSO_BREAKS = {"FL-4": "a file deleted and re-created with the same content is, to the "
               "listener, a new modification time over content it already delivered: the "
               "same spurious delivery, seen by FL-4's re-creation check"}

_forks.log_as(__name__)
_forks.patch_source(_fl.FileListener, "_read_if_changed", (
    "            if st.st_size > self.max_file_bytes:\n",
    "            touched = sig != watch.signature        # the fork\n"
    "            if st.st_size > self.max_file_bytes:\n"), (
    "        if digest == watch.delivered:\n",
    "        if digest == watch.delivered and not touched:  # the fork: a new mtime fires\n"))
