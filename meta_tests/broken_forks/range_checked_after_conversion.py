"""Breaks RM-19 (bounds of the config reader): a number's range is checked after converting it.

``_uint`` converts the literal before comparing it with the maximum, so a literal such as
``1e99999999999999999999`` makes the reader compute ``10 ** 10 ** 19`` in C, with the
interpreter lock held: no time limit inside the process can stop it, so the run's watchdog
does (reports/journal.py) and the test is reported TIMEOUT.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_resource_management as _rm

from meta_tests import broken_forks as _forks

NAME = "broken-range-checked-after-conversion"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "RM-19"
MODULES = ("conformance/test_resource_management_faults.py",)
OUTCOMES = ("TIMEOUT",)

_forks.log_as(__name__)
_forks.patch_source(_rm, "_uint", (
    '    if len(significant) + shift > len(str(upper)):\n        raise _Reject(f"{what} is {value}, above the maximum {upper}")\n    number = int(significant) * 10 ** shift',
    '    number = int(significant) * 10 ** shift'))                                   # the fork: converted first
