"""Breaks ADJ-3 (releasing free regions): a shrink stops before reaching its target.

``GPUAdjustableAllocator.free_empty_memory`` refuses to release a free region larger than
what is still to be freed ("never release more than asked") and stops there, so the pool
stays above the target although whole free regions could have met it; the spec releases
whole regions until ``pool <= target``, overshooting if need be.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_adjustable_allocator as _adj

from meta_tests import broken_forks as _forks

NAME = "broken-shrink-stops-early"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "ADJ-3"
MODULES = ("conformance/test_adjustable.py",
           "conformance/test_memory_stateful.py::test_adjustable_state_machine")
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_adj.GPUAdjustableAllocator, "_free_empty_memory_locked", (
    "            bfc._adj_release_region(ptr)\n",
    "            if size > to_free:                      # the fork: stop rather than overshoot\n"
    "                break\n"
    "            bfc._adj_release_region(ptr)\n"))
