"""Breaks DEVICE-2 (device manager): DeviceMgr keeps the very list its caller gave.

``DeviceMgr.__init__`` stores ``devices`` itself instead of a copy, as a fork saving a copy
would: a caller that changes its list afterwards changes what the manager lists, while the
lookup table built at construction still holds the old devices.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import device as _device

from meta_tests import broken_forks as _forks

NAME = "broken-device-mgr-keeps-the-callers-list"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "DEVICE-2"
MODULES = ("conformance/test_devices.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_device.DeviceMgr, "__init__", (
    "self._devices = list(devices)",
    "self._devices = devices                  # the fork: no copy"))
