"""Breaks OPM-4 (the idle slot before each launch): the idle time a slot took is at least 1 µs.

``GpuOpManager._idle_slot`` floors the measured ``spent`` at 1, a guard against a clock that
goes backwards (API-4 says it never does) written one digit off: a slot that a failed step or
``close()`` ends before any clock time passed deducts 1 µs from ``E`` and counts 1 µs of
in-step idle.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_op_manager as _opm

from meta_tests import broken_forks as _forks

NAME = "broken-slot-spent-floored-at-one"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "OPM-4"
MODULES = ("conformance/test_gpu_op_manager.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_opm.GpuOpManager, "_idle_slot", (
    "spent = int(self._clock.now_us()) - start",
    "spent = max(1, int(self._clock.now_us()) - start)"))         # the fork: floored at 1 µs
