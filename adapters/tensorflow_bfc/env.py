"""TensorFlow 2.21's readers of the memory environment variables (SPEC.md ENV-1..4).

``read_bool_from_env_var`` and ``read_int64_from_env_var`` call ``tsl::ReadBoolFromEnvVar`` and
``tsl::ReadInt64FromEnvVar``. TensorFlow 2 returns a bad value as an error Status instead of
logging it; the adapter, being the caller, logs that Status's message at ERROR on
``adapters.tensorflow_bfc.env`` and returns the value TensorFlow left in its output parameter,
which for integers is not always the default (absl::SimpleAtoi's partial parse).

``get_allow_growth_value`` and ``get_garbage_collection_value`` are the static helpers of
``gpu_bfc_allocator.cc``, which the wheel does not export: the adapter builds a
``tensorflow::GPUBFCAllocator`` (whose constructor calls them; it allocates nothing) and reads
the options it settled on through the friend class, forwarding the records TensorFlow logged
about the variable asked for.
"""

from __future__ import annotations

import logging

from .loader import shim
from .tf_log import Record, forward_tf_log

__all__ = ["read_bool_from_env_var", "read_int64_from_env_var", "get_allow_growth_value",
           "get_garbage_collection_value"]

_log = logging.getLogger(__name__)


def read_bool_from_env_var(name: str, default: bool) -> bool:
    value, error = shim.read_bool_from_env_var(name, bool(default))
    if error:
        _log.error("%s", error)
    return value


def read_int64_from_env_var(name: str, default: int) -> int:
    value, error = shim.read_int64_from_env_var(name, default)
    if error:
        _log.error("%s", error)
    return value


def _about(variable: str):
    def other_variable(record: Record) -> bool:
        path, message = record[2], record[4]
        return path.endswith("gpu_bfc_allocator.cc") and variable not in message
    return other_variable


def get_allow_growth_value(option: bool) -> bool:
    """TensorFlow's GetAllowGrowthValue: ``TF_FORCE_GPU_ALLOW_GROWTH`` over ``option``."""
    allow_growth, _ = shim.gpu_bfc_options(bool(option))
    forward_tf_log(drop=_about("TF_FORCE_GPU_ALLOW_GROWTH"))
    return allow_growth


def get_garbage_collection_value() -> bool:
    """TensorFlow's GetGarbageCollectionValue: ``TF_ENABLE_GPU_GARBAGE_COLLECTION``."""
    _, garbage_collection = shim.gpu_bfc_options(False)
    forward_tf_log(drop=_about("TF_ENABLE_GPU_GARBAGE_COLLECTION"))
    return garbage_collection
