"""Adapter: TensorFlow's compiled BFC allocator, and AntMan's memory layer in C++ over it.

Wraps ``tsl::BFCAllocator`` and ``tensorflow::GPUBFCAllocator`` from the installed
``tensorflow-cpu`` (or ``tensorflow``) wheel, version 2.21 (the shim builds against whichever
version is installed and reports it as ``VERSION``), in-process, through a C++ shim compiled
against the wheel's own headers on first use (``build.py``). On top of it, AntMan's
``GPUVMemAllocator`` and ``GPUAdjustableAllocator`` are written in C++ from SPEC.md
(``shim/gpu_*.cc``), reaching the BFC allocator's private state through the friend class its
header names. Use it as ``pytest conformance --runtime adapters.tensorflow_bfc``
(``tox -e certify-tf-bfc``).

Capabilities declared: ``bfc``, ``env``, ``vmem``, ``adjustable`` (SPEC.md API-3). What it
cannot offer, and therefore does not declare (those tests are NOT_SUPPORTED):

- ``virtual_clock``: TensorFlow's ``AllocatorRetry`` waits on its own real clock
  (``Env::NowMicros``, a condition variable, whole milliseconds); the ``clock`` arguments are
  accepted and not used, and the retry wait is ``retry_timeout_us`` of real time.
- the control plane, execution and workload (``session_run_actions``, ``file_listener``,
  ``resource_management``, ``statistics``, ``executor``, ``gpu_op_manager``, ``workload``):
  the adapter certifies allocators only; ``cuda`` and ``worker`` likewise.

Where TensorFlow 2.21 would abort the process (an unknown pointer, a double free), loop
forever (the backpedal of a refused small region, a next region size of 0) or corrupt its
chunks (a size that rounds to 0), the call raises ``TensorFlowGuardError`` saying so, and the
clause fails with that reason. ``SimulatedDeviceMemory`` and ``SimulatedHostMemory`` are the
suite's test instruments (API-3), taken from ``reference_runtime.sim_memory``; they are not
part of what is certified.
"""

from reference_runtime.sim_memory import SimulatedDeviceMemory, SimulatedHostMemory

from .api import (AllocationAttributes, Allocator, AllocatorStats, BinDebugInfo, ChunkInfo,
                  InvalidPointerError, MemoryMap, MemPoolStats, RegionInfo, SubAllocator,
                  TensorFlowGuardError)
from .bfc import (AllocatorRetry, BFCAllocator, GPUBFCAllocator, bin_num_for_size,
                  rounded_bytes)
from .env import (get_allow_growth_value, get_garbage_collection_value, read_bool_from_env_var,
                  read_int64_from_env_var)
from .antman import GPUAdjustableAllocator, GPUVMemAllocator, maybe_create_gpu_vmem_allocator
from .loader import shim as _shim

NAME = "tensorflow-bfc"
#: The TensorFlow release the shim was compiled against (its headers' TF_VERSION_STRING).
VERSION: str = _shim.TENSORFLOW_VERSION
SPEC_VERSION = "2026.11"
CAPABILITIES: frozenset[str] = frozenset({"bfc", "env", "vmem", "adjustable"})

__all__ = [
    "NAME", "VERSION", "SPEC_VERSION", "CAPABILITIES",
    "AllocationAttributes", "Allocator", "AllocatorStats", "SubAllocator",
    "InvalidPointerError", "TensorFlowGuardError", "MemoryMap", "RegionInfo", "ChunkInfo",
    "BinDebugInfo", "MemPoolStats", "SimulatedDeviceMemory", "SimulatedHostMemory",
    "BFCAllocator", "GPUBFCAllocator", "AllocatorRetry", "rounded_bytes", "bin_num_for_size",
    "read_bool_from_env_var", "read_int64_from_env_var", "get_allow_growth_value",
    "get_garbage_collection_value", "GPUVMemAllocator", "maybe_create_gpu_vmem_allocator",
    "GPUAdjustableAllocator",
]
