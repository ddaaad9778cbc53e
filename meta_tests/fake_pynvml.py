"""A stand-in for nvidia-ml-py (``pynvml``), enough for fixtures/nvml.py, conformance/gpu_gate.py,
fixtures/gpu_isolation.py and reports/environment.py on a CPU.

Its GPUs are described by a JSON file named by ``$FAKE_NVML_STATE`` (read on every call, so a
test can change what NVML reports while a run goes on), else by ``DEFAULT_STATE``::

    {"gpus": 1, "total": <bytes>, "used": <bytes>, "processes": [[pid, bytes], ...]}

``used`` is the memory in use on every GPU; ``processes`` the compute processes NVML lists on
every GPU. ``"gpus": 0`` is a driver without a GPU; ``"init_error": "..."`` makes ``nvmlInit``
fail. ``install(path)`` writes a ``pynvml.py`` importing this module into ``path``.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

STATE_VARIABLE = "FAKE_NVML_STATE"
GiB = 1 << 30
DEFAULT_STATE: dict[str, Any] = {"gpus": 1, "total": 80 * GiB, "used": GiB, "processes": []}
NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1
nvmlMemory_v2 = 2


class NVMLError(Exception):
    pass


def state() -> dict[str, Any]:
    path = os.environ.get(STATE_VARIABLE)
    if not path:
        return dict(DEFAULT_STATE)
    return {**DEFAULT_STATE, **json.loads(Path(path).read_text())}


def write_state(path: Path, **values: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**DEFAULT_STATE, **values}))
    tmp.replace(path)


def nvmlInit() -> None:
    error = state().get("init_error")
    if error:
        raise NVMLError(error)


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return int(state()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(f"invalid index {index}")
    return index


def nvmlDeviceGetPciInfo(handle: int) -> Any:
    return types.SimpleNamespace(busId=f"00000000:{0x3B + handle:02X}:00.0".encode())


def nvmlDeviceGetName(handle: int) -> str:
    return "Fake GPU"


def nvmlDeviceGetUUID(handle: int) -> str:
    return f"GPU-fake-{handle}"


def nvmlDeviceGetMemoryInfo(handle: int, version: int | None = None) -> Any:
    s = state()
    total, used = int(s["total"]), int(s["used"])
    return types.SimpleNamespace(total=total, used=used, free=total - used, reserved=0)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[Any]:
    return [types.SimpleNamespace(pid=int(pid), usedGpuMemory=int(used))
            for pid, used in state()["processes"]]


def nvmlSystemGetDriverVersion() -> str:
    return "580.00"


def nvmlSystemGetCudaDriverVersion() -> int:
    return 13000


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


def nvmlDeviceGetClockInfo(handle: int, kind: int) -> int:
    return 1980 if kind == NVML_CLOCK_SM else 2619


def nvmlDeviceGetMaxClockInfo(handle: int, kind: int) -> int:
    return 1980


def install(path: Path) -> Path:
    """Write ``pynvml.py`` (this stand-in) into ``path``; put ``path`` on PYTHONPATH to use it."""
    (path / "pynvml.py").write_text("from meta_tests.fake_pynvml import *  # noqa: F401,F403\n"
                                    "from meta_tests.fake_pynvml import NVMLError  # noqa: F401\n")
    return path
