"""``--require-gpu``: is a GPU usable for the GPU tests? Checked before any test runs.

A run that requires a GPU and has none stops at start-up with one usage error (exit status 4,
no report written, ``latest`` untouched; conformance/plugin.py ``check_setup``) instead of
running the whole suite to say so at the end. Usable means: NVML (nvidia-ml-py) initialises
and reports a GPU, and CuPy, through which the GPU tests read addresses and the co-tenant
takes memory, imports and sees a GPU. Neither check creates a CUDA context: NVML does not,
and ``cudaGetDeviceCount`` only initialises the driver.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

CUPY_HINT = "install the GPU extra: pip install 'antman-conformance[cuda12]' (or [cuda13])"


def nvml_problem() -> str | None:
    """Why NVML cannot observe a GPU, or None."""
    from fixtures.nvml import gpu_unavailable_reason
    return gpu_unavailable_reason()


def cupy_problem() -> str | None:
    """Why CuPy cannot reach a GPU, or None."""
    try:
        if "cupy" not in sys.modules and importlib.util.find_spec("cupy") is None:
            return f"CuPy is not installed; {CUPY_HINT}"
        cupy = importlib.import_module("cupy")
    except Exception as exc:  # ImportError, or whatever a broken install raises
        return f"import cupy failed ({type(exc).__name__}: {exc}); {CUPY_HINT}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        return f"CuPy sees no GPU ({type(exc).__name__}: {exc})"
    return None if count > 0 else "CuPy sees no GPU (0 devices)"


def gpu_problem() -> str | None:
    """Why no GPU is usable for the GPU tests, or None."""
    return nvml_problem() or cupy_problem()


def require_gpu_error(problem: str) -> str:
    """The one-line usage error of a run with ``--require-gpu`` and no usable GPU."""
    return (f"--require-gpu: no usable NVIDIA GPU on this runner ({problem}); run without "
            f"--require-gpu to certify on the simulated device")
