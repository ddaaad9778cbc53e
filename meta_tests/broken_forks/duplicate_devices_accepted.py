"""Breaks DEVICE-2 (lookup_device): a DeviceMgr accepts two devices of one name.

``DeviceMgr`` keeps the last of two devices with the same type and index instead of
refusing them: ``lookup_device`` then answers one of them and ``list_devices`` lists both,
so a node placed on that name runs on a device the other half of the job never sees.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import device as _device

from meta_tests import broken_forks as _forks

NAME = "broken-duplicate-devices-accepted"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "DEVICE-2"
MODULES = ("conformance/test_devices.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_device.DeviceMgr, "__init__", (
    "                raise ValueError(f\"duplicate device {d.name}\")\n",
    "                pass                                # the fork: the last one wins\n"))
