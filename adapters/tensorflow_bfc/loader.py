"""The shim module, built on first import if the cache has no build for this TensorFlow.

Loading it also copies TensorFlow's absl log records of WARNING and above to Python logging
(tf_log.py; absl still writes them to stderr, as it does for every record before
``absl::InitializeLog``, which nothing here calls), and, unless ``TF_CPP_MIN_LOG_LEVEL``
chooses otherwise, sets absl's minimum level to WARNING: TensorFlow's INFO records are the
chunk-by-chunk memory dump it writes on every failed retried allocation, which costs
milliseconds per call.
"""

from __future__ import annotations

import os

from . import api, build

__all__ = ["shim"]

ABSL_WARNING = 1

shim = build.load()
shim._bind_python_types(api.AllocationAttributes, api.AllocatorStats, api.InvalidPointerError,
                        api.TensorFlowGuardError)
shim.set_forwarded_min_severity(ABSL_WARNING)
if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
    shim.set_min_log_level(ABSL_WARNING)
