"""Breaks FL-4 (missing files): a deleted file forgets the hash of its last delivery.

When the path is missing, ``FileListener`` clears the delivered hash with the signature, so
re-creating the file with the content delivered last delivers it again; FL-4 keeps the hash.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import file_listener as _fl

from meta_tests import broken_forks as _forks

NAME = "broken-deleted-file-forgets-its-hash"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "FL-4"
MODULES = ("conformance/test_file_listener.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_fl.FileListener, "_read_if_changed", (
    "            watch.signature = None\n            watch.problem = None        # a missing",
    "            watch.signature = watch.delivered = None\n"
    "            watch.problem = None        # a missing"))          # the fork: hash forgotten
