"""Breaks E2E-1 (the training workload): sized_for never builds a hidden layer of 2**20 units.

``MLPWorkload.sized_for`` searches the widest fitting ``hidden`` from 2**19 down, one bit at
a time, instead of from the bit length of ``device_bytes``: the width is capped just below
2**20 (1,048,576) units, a round bound a fork might think no GPU reaches, so a large budget
gets a layer narrower than the widest that fits.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import workload as _workload

from meta_tests import broken_forks as _forks

NAME = "broken-sized-for-width-capped"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "E2E-1"
MODULES = ("conformance/test_end_to_end.py::test_sized_for_has_no_width_bound_of_its_own",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_workload.MLPWorkload, "sized_for", (
    "            width, step = 1, 1 << device_bytes.bit_length()\n",
    "            width, step = 1, 1 << min(device_bytes.bit_length(), 19)   # the fork: a cap\n"))
