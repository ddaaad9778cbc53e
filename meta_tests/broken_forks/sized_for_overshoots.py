"""Breaks E2E-1 (the training workload): sized_for builds hidden=1 when nothing fits.

``MLPWorkload.sized_for`` searches the widest ``hidden`` that fits ``device_bytes`` and,
when not even ``hidden=1`` fits, returns a ``hidden=1`` workload anyway, as the search
starting at 1 does without a check: the job asks for more memory than it was sized for.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import workload as _workload

from meta_tests import broken_forks as _forks

NAME = "broken-sized-for-overshoots"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "E2E-1"
MODULES = ("conformance/test_end_to_end.py"
           "::test_sized_for_at_the_smallest_size_and_one_byte_below",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_workload.MLPWorkload, "sized_for", (
    "        if need(1) > device_bytes:\n",
    "        if False:                                   # the fork: no check\n"))
