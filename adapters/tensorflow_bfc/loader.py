"""The shim module, built on first import if the cache has no build for this TensorFlow."""

from __future__ import annotations

from . import api, build

__all__ = ["shim"]

shim = build.load()
shim._bind_python_types(api.AllocationAttributes, api.AllocatorStats, api.InvalidPointerError,
                        api.TensorFlowGuardError)
