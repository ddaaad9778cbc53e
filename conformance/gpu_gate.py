"""``--require-gpu``: is a GPU usable for the GPU tests? Checked before any test runs.

A run that requires a GPU and has none stops at start-up with one usage error (exit status 4,
no report written, ``latest`` untouched; conformance/plugin.py ``check_setup``) instead of
running the whole suite to say so at the end. Usable means: NVML (nvidia-ml-py) initialises
and reports a GPU, and CuPy, through which the GPU tests read addresses and the co-tenant
takes memory, imports and sees a GPU. No process of the run is left with CUDA state: NVML
creates no CUDA context, and CuPy is asked in a child process that exits before any test.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

CUPY_HINT = "install the GPU extra: pip install 'antman-conformance[cuda12]' (or [cuda13])"


def nvml_problem() -> str | None:
    """Why NVML cannot observe a GPU, or None."""
    from fixtures.nvml import gpu_unavailable_reason
    return gpu_unavailable_reason()


#: Run in a child process: whatever CUDA state a device query leaves (a context, on some
#: drivers) goes away with it, before any test, so the run's processes stay off the GPU.
CUPY_PROBE = "import cupy; print(int(cupy.cuda.runtime.getDeviceCount()))"
PROBE_TIMEOUT_S = 60.0


def cupy_problem() -> str | None:
    """Why CuPy cannot reach a GPU, or None (asked in a child process)."""
    try:
        if "cupy" not in sys.modules and importlib.util.find_spec("cupy") is None:
            return f"CuPy is not installed; {CUPY_HINT}"
    except (ImportError, ValueError) as exc:
        return f"CuPy cannot be found ({type(exc).__name__}: {exc}); {CUPY_HINT}"
    try:
        done = subprocess.run([sys.executable, "-c", CUPY_PROBE], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"CuPy did not count the GPUs within {PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"cannot start {sys.executable} to ask CuPy ({exc})"
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        last = lines[-1].strip() if lines else f"exit status {done.returncode}"
        if "import cupy" in done.stderr or "ImportError" in last or "ModuleNotFound" in last:
            return f"import cupy failed ({last}); {CUPY_HINT}"
        return f"CuPy sees no GPU ({last})"
    count = done.stdout.strip()
    return None if count.isdigit() and int(count) > 0 else f"CuPy sees no GPU ({count or 0} devices)"


def gpu_problem() -> str | None:
    """Why no GPU is usable for the GPU tests, or None."""
    return nvml_problem() or cupy_problem()


def require_gpu_error(problem: str) -> str:
    """The one-line usage error of a run with ``--require-gpu`` and no usable GPU."""
    return (f"--require-gpu: no usable NVIDIA GPU on this runner ({problem}); run without "
            f"--require-gpu to certify on the simulated device")
