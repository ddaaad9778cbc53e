"""Provenance of a run: runtime, suite, Python, platform and execution target."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tomllib
import types
from importlib import metadata
from pathlib import Path
from typing import Any

from conformance import spec

SUITE_DISTRIBUTION = "antman-conformance"


def git_info(directory: Path) -> dict[str, Any]:
    """``{"commit": sha | None, "dirty": bool | None}`` of the git tree holding ``directory``."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "-q", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=normal")
    return {"commit": commit.strip() if commit else None,
            "dirty": bool(status.strip()) if status is not None else None}


def suite_version() -> str:
    pyproject = spec.ROOT / "pyproject.toml"
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass
    try:
        return metadata.version(SUITE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def suite_info() -> dict[str, Any]:
    return {"name": SUITE_DISTRIBUTION, "version": suite_version(),
            "git": git_info(spec.ROOT)}


def runtime_info(module: types.ModuleType | None, module_name: str,
                 worker_cmd: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {"module": module_name, "name": None, "version": None,
                            "spec_version": None, "capabilities": [], "path": None,
                            "git": None, "worker_cmd": worker_cmd}
    if module is None:
        return info
    path = getattr(module, "__file__", None)
    info.update(name=str(module.NAME), version=str(module.VERSION),
                spec_version=str(module.SPEC_VERSION),
                capabilities=sorted(str(c) for c in module.CAPABILITIES), path=path)
    if path:
        info["git"] = git_info(Path(path).resolve().parent)
    return info


def python_info() -> dict[str, Any]:
    return {"version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable}


def platform_info() -> dict[str, Any]:
    return {"system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "platform": platform.platform(),
            "cpu_count": os.cpu_count() or 0}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible(index: int, uuid: str, visible: str | None) -> bool:
    if visible is None:
        return True
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return any(w == str(index) or (w.startswith("GPU-") and uuid.startswith(w))
               for w in wanted)


def execution_target() -> dict[str, Any]:
    """``kind`` "gpu" with the devices NVML reports (model, driver, CUDA), else "simulated".

    Devices hidden by ``CUDA_VISIBLE_DEVICES`` are left out (NVML itself ignores it).
    """
    simulated: dict[str, Any] = {"kind": "simulated", "model": None, "driver_version": None,
                                 "cuda_version": None, "devices": [], "note": None}
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        simulated["note"] = "pynvml (nvidia-ml-py) not installed"
        return simulated
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        simulated["note"] = f"NVML unavailable: {exc}"
        return simulated
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            if not _visible(i, uuid, visible):
                continue
            devices.append({"index": i, "model": _text(pynvml.nvmlDeviceGetName(handle)),
                            "uuid": uuid,
                            "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)})
    except Exception as exc:
        simulated["note"] = f"NVML query failed: {exc}"
        return simulated
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if not devices:
        simulated["note"] = "no visible NVIDIA GPU"
        return simulated
    return {"kind": "gpu", "model": devices[0]["model"], "driver_version": driver,
            "cuda_version": cuda_version, "devices": devices, "note": None}
