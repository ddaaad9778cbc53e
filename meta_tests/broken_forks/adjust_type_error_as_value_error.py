"""Breaks ADJ-6 (bad input): an object that is not a BFC allocator raises ValueError.

``_check_bfc`` of the adjustable allocator raises ``ValueError`` where ADJ-6 asks for
``TypeError``: the wrong exception type for the wrong kind of argument.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_adjustable_allocator as _adj

from meta_tests import broken_forks as _forks

NAME = "broken-adjust-type-error-as-value-error"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "ADJ-6"
MODULES = ("conformance/test_adjustable.py",
           "conformance/test_memory_stateful.py::test_adjustable_state_machine")
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_adj, "_check_bfc", (
    'raise TypeError(f"GPUAdjustableAllocator.{what}',
    'raise ValueError(f"GPUAdjustableAllocator.{what}'))                                   # the fork: ValueError for TypeError
