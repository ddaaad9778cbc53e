"""Breaks RM-17 (finding a GPU's allocator): bus ids are matched case-insensitively.

``GPUResourceManagement._apply_limits`` looks the pending limits' bus ids up lower-cased,
so a limit under ``3B:00.0`` finds the GPU whose bus id is ``3b:00.0``; RM-17 asks for an
exact match.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-bus-id-matched-casefolded"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-17"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_rm.GPUResourceManagement, "_apply_limits", (
    "pending = sorted(self._pending.items())",
    "pending = sorted((b.lower(), v) for b, v in self._pending.items())"))  # the fork
