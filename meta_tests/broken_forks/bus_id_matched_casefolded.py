"""Breaks RM-17 (finding a GPU's allocator): bus ids are matched case-insensitively.

``find_gpu_bfc_allocator`` compares lower-cased bus ids, so a limit for ``00000000:3B:00.0``
finds the GPU whose bus id is ``00000000:3b:00.0``; RM-17 asks for an exact match.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_usage_adjustment as _ua

from meta_tests import broken_forks as _forks

NAME = "broken-bus-id-matched-casefolded"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-17"
MODULES = ("conformance/test_resource_management.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_ua, "find_gpu_bfc_allocator", (
    'return gpu_bfc_allocators(device_mgr).get(pci_bus_id)',
    'return {b.lower(): a for b, a in gpu_bfc_allocators(device_mgr).items()}.get(pci_bus_id.lower())'))                                   # the fork: casefolded
