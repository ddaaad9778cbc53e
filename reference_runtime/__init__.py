"""Reference build of an AntMan-style GPU-sharing runtime (TensorFlow 1.15 + AntMan), in Python.

The public API is the one SPEC.md defines (section 1); everything else is internal. Data flows
one way: session -> executor -> kernels -> allocators; the AntMan actions observe and adjust
through the session-run action registry.
"""

import sys as _sys

# Memory (SPEC.md ENV, BFC, VMEM, ADJ).
from .allocator import (AllocationAttributes, Allocator, AllocatorStats,
                                         InvalidPointerError, SubAllocator)
from .allocator_retry import AllocatorRetry
from .bfc_allocator import (BFCAllocator, BinDebugInfo, ChunkInfo, MemoryMap,
                                             RegionInfo, bin_num_for_size, rounded_bytes)
from .clock import REAL_CLOCK, Clock, RealClock
from .env import (get_allow_growth_value, get_garbage_collection_value,
                                   read_bool_from_env_var, read_int64_from_env_var)
from .gpu_adjustable_allocator import GPUAdjustableAllocator, MemPoolStats
from .gpu_bfc_allocator import GPUBFCAllocator
from .gpu_vmem_allocator import GPUVMemAllocator, maybe_create_gpu_vmem_allocator
from .sim_memory import SimulatedDeviceMemory, SimulatedHostMemory

# Control plane, devices and the runtime context (SPEC.md CLK, REG, FL, RM, STAT, DEVICE, API-7).
from .device import (Backend, CPUDevice, Device, DeviceAttributes, DeviceMgr,
                                      GPUDevice, GpuInfo, SimBackend, create_devices,
                                      get_pci_bus_id, select_backend)
from .file_listener import FileListener, global_file_listener
from .gpu_resource_management import GPUResourceManagement
from .gpu_statistics import GPUStatistics
from .gpu_usage_adjustment import GPUUsageAdjustment
from .process_state import RuntimeContext, create_runtime
from .session_run_action_registry import (Grouping, SessionRunAction,
                                                           SessionRunActionOptions,
                                                           SessionRunActionRegistry,
                                                           global_registry,
                                                           register_session_run_action)

# Execution (SPEC.md SESS, EXEC, OPM, E2E).
from .direct_session import DirectSession
from .errors import (CancelledError, FailedPreconditionError,
                                      InvalidArgumentError, OpError, ResourceExhaustedError,
                                      UnknownError)
from .gpu_op_manager import THREAD_NAME_PREFIX as GPU_OP_MANAGER_THREAD_PREFIX
from .graph import Graph, GraphError, Node
from .kernels import KernelDef, OpRegistry
from .workload import MLPWorkload

# Real NVIDIA GPU (SPEC.md GPU).
from .cuda_backend import cupy_installed as _cupy_installed

NAME = "antman-reference"
VERSION = "0.1.0"
SPEC_VERSION = "2026.11"

#: The worker of the black-box protocol (SPEC.md WORKER-1): ``python -m <package>.worker``,
#: with single-threaded BLAS: OpenBLAS worker threads spin while they wait, and on a small,
#: loaded machine they steal the CPU from the training step and make step periods swing by
#: an order of magnitude, which would drown the throttling WORKER-10 measures. NumPy reads
#: the variable when it loads, so it is set before the process starts.
WORKER_COMMAND: list[str] = ["env", "OPENBLAS_NUM_THREADS=1", _sys.executable, "-m",
                             f"{__name__}.worker"]

#: Capabilities (SPEC.md API-2); ``cuda`` when CuPy is installed (the cuda backend is then part
#: of the runtime; whether the host has a GPU is the GPU tests' business, and asking CUDA here
#: would create a CUDA context in every process that imports the runtime).
CAPABILITIES: frozenset[str] = frozenset({
    "virtual_clock", "bfc", "vmem", "adjustable", "env",
    "session_run_actions", "file_listener", "resource_management", "statistics",
    "executor", "gpu_op_manager", "workload", "worker",
}) | (frozenset({"cuda"}) if _cupy_installed() else frozenset())
