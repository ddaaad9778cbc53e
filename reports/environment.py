"""Provenance of a run: runtime, suite, Python, platform (with the host CPU), the command and
the execution target.

The suite's git commit is recorded also when the suite does not run from a git checkout:
the first of its git checkout, the ``ANTMAN_SUITE_COMMIT`` variable (for a copy made
otherwise; tox passes it through), and the stamp ``reports/COMMIT`` that ``git archive``
fills in (``export-subst``, .gitattributes), so a release tarball knows its commit. The
report says which one it came from (``suite.git.source``).

Extras of the execution target: ``TARGET_EXTRAS`` holds functions ``f(target) -> dict``
whose results are merged into ``execution_target.extras`` (free-form, JSON), the place for
figures read from the target at the start of a run, such as GPU clock readings.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
import tomllib
import types
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from conformance import spec

SUITE_DISTRIBUTION = "antman-conformance"
COMMIT_VARIABLE = "ANTMAN_SUITE_COMMIT"
COMMIT_STAMP = Path(__file__).resolve().parent / "COMMIT"
_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")  # SHA-1 or SHA-256 object names


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


def commit_variable_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why ``ANTMAN_SUITE_COMMIT`` as set cannot name a commit (None when it is unset, empty
    or a full hash): an abbreviated or misspelt hash would otherwise be ignored without a
    word, and a copied tree's stale git metadata named in every report of a long run."""
    env = os.environ if environ is None else environ
    given = env.get(COMMIT_VARIABLE, "").strip()
    if not given or _SHA.match(given.lower()):
        return None
    return (f"{COMMIT_VARIABLE} must be a full commit hash (40 or 64 hexadecimal digits, "
            f"`git rev-parse HEAD`), got {given[:80]!r}")


def suite_git(directory: Path = spec.ROOT, environ: dict[str, str] | None = None,
              stamp: Path = COMMIT_STAMP) -> dict[str, Any]:
    """``{"commit", "dirty", "source"}`` of the suite: ``ANTMAN_SUITE_COMMIT`` when it is set
    ("env": the operator's statement about a copy, which the git checkout holding the copy,
    if any, may not describe), else the git checkout ("git"), else the ``git archive`` stamp
    ("archive"); a commit known from none is None (source None). When the variable and the
    checkout disagree, the checkout's finding is kept under ``"checkout"`` so that the report
    can say so."""
    found = git_info(directory)
    env = os.environ if environ is None else environ
    given = env.get(COMMIT_VARIABLE, "").strip().lower()
    if _SHA.match(given):
        if found["commit"] == given:
            return {**found, "source": "git"}
        named = {"commit": given, "dirty": None, "source": "env"}
        return {**named, "checkout": found} if found["commit"] else named
    if found["commit"]:
        return {**found, "source": "git"}
    try:
        stamped = stamp.read_text(encoding="utf-8").strip().lower()
    except OSError:
        stamped = ""
    if _SHA.match(stamped):
        return {"commit": stamped, "dirty": None, "source": "archive"}
    return {"commit": None, "dirty": None, "source": None}


def suite_info() -> dict[str, Any]:
    return {"name": SUITE_DISTRIBUTION, "version": suite_version(), "git": suite_git()}


def runtime_info(module: types.ModuleType | None, module_name: str,
                 worker_cmd: str | None,
                 worker_hello: dict[str, Any] | None = None) -> dict[str, Any]:
    """The runtime under test. A black-box stand-in (``BLACK_BOX``) is named by its
    ``identity(worker_hello)``: the ``ANTMAN_WORKER_*`` variables, else the hello record."""
    info: dict[str, Any] = {"module": module_name, "name": None, "version": None,
                            "spec_version": None, "capabilities": [], "path": None,
                            "git": None, "worker_cmd": worker_cmd,
                            "worker_hello": worker_hello}
    if module is None:
        return info
    path = getattr(module, "__file__", None)
    info.update(name=str(module.NAME), version=str(module.VERSION),
                spec_version=str(module.SPEC_VERSION),
                capabilities=sorted(str(c) for c in module.CAPABILITIES), path=path)
    if is_black_box(module):
        info.update(module.identity(worker_hello))
    elif path:
        info["git"] = git_info(Path(path).resolve().parent)
    return info


def is_black_box(module: types.ModuleType | None) -> bool:
    """Whether ``module`` is a stand-in for an implementation seen only through its worker."""
    return bool(getattr(module, "BLACK_BOX", False)) and callable(getattr(module, "identity",
                                                                          None))


def python_info() -> dict[str, Any]:
    return {"version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable}


def cpu_model() -> str | None:
    """The host CPU's model name (``/proc/cpuinfo``, ``sysctl`` on macOS), or None."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+?)\s*$", text, re.MULTILINE)
        if m and m[1]:
            return m[1]
    if sys.platform == "darwin":
        try:
            done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5, check=False)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or None


def platform_info() -> dict[str, Any]:
    return {"system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "platform": platform.platform(),
            "cpu_count": os.cpu_count() or 0, "cpu_model": cpu_model()}


def command_line() -> str:
    """The command that started this run, as a shell would read it back."""
    return shlex.join(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible(index: int, uuid: str, visible: str | None) -> bool:
    if visible is None:
        return True
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return any(w == str(index) or (w.startswith("GPU-") and uuid.startswith(w))
               for w in wanted)


def bus_key(bus_id: str) -> str:
    """``"00000000:3B:00.0"`` / ``"3b:00.0"`` -> ``"3b:00.0"`` (the config-key form, RM clauses).

    fixtures/nvml.py's ``normalize_bus_id``, imported here rather than at module level: the
    conftest loads this module (through reports.plugin) before the fixtures plugins, and an
    earlier import would keep pytest from rewriting their asserts.
    """
    from fixtures.nvml import normalize_bus_id
    return normalize_bus_id(bus_id)


def nvml_gpus() -> tuple[dict[str, Any] | None, str]:
    """``({"driver_version", "cuda_version", "devices"}, "")`` from NVML, or ``(None, why not)``.

    Each device: ``index``, ``model``, ``uuid``, ``memory_total_bytes``, ``pci_bus_id``
    (config-key form) and ``visible`` (not hidden by ``CUDA_VISIBLE_DEVICES``, which NVML
    itself ignores).
    """
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return None, "pynvml (nvidia-ml-py) not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {exc}"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            try:
                bus = bus_key(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))
            except Exception:  # a driver without PCI info: the device cannot be matched
                bus = None
            devices.append({"index": i, "model": _text(pynvml.nvmlDeviceGetName(handle)),
                            "uuid": uuid,
                            "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                            "pci_bus_id": bus, "visible": _visible(i, uuid, visible)})
    except Exception as exc:
        return None, f"NVML query failed: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return {"driver_version": driver, "cuda_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "devices": devices}, ""


def gpu_clocks() -> list[dict[str, Any]] | None:
    """Each NVIDIA GPU's clocks now (MHz: ``sm``, ``memory``, ``sm_max``), through NVML; None
    without NVML or a GPU. Read when a run starts and when it ends, so that a report shows
    whether the clocks the figures were taken at moved."""
    try:
        import pynvml  # optional: nvidia-ml-py
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append({"index": i,
                        "sm_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                        "memory_mhz": int(pynvml.nvmlDeviceGetClockInfo(
                            h, pynvml.NVML_CLOCK_MEM)),
                        "sm_max_mhz": int(pynvml.nvmlDeviceGetMaxClockInfo(
                            h, pynvml.NVML_CLOCK_SM))})
        return out or None
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


#: Functions ``f(target) -> dict`` whose results make ``execution_target.extras``: figures
#: read from the target when the run starts (GPU clocks, say). Each takes the target as
#: built so far; one that raises is recorded as ``{"<name>_error": "..."}``.
TARGET_EXTRAS: list[Callable[[dict[str, Any]], dict[str, Any]]] = []


def target_extras(target: dict[str, Any]) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    for read in TARGET_EXTRAS:
        try:
            extras.update(read(target))
        except Exception as exc:  # a reading must never cost the report
            extras[f"{getattr(read, '__name__', 'extra')}_error"] = repr(exc)
    return extras


def _target(kind: str, source: str, **facts: Any) -> dict[str, Any]:
    target = {"kind": kind, "source": source, "model": None, "driver_version": None,
              "cuda_version": None, "devices": [], "worker_devices": None, "note": None,
              "extras": {}}
    target.update(facts)
    target["extras"] = target_extras(target)
    return target


def _strip(device: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in device.items() if k != "visible"}


def execution_target(capabilities: Iterable[str] = ("cuda",)) -> dict[str, Any]:
    """Where an in-process runtime ran: ``kind`` "gpu" with the visible devices NVML reports
    (model, driver, CUDA), else "simulated" (the runtime's simulated device). A runtime that
    does not declare ``cuda`` ran nothing on a GPU, whatever the host has: "simulated", so
    that its verdict does not depend on the runner's GPUs."""
    gpus, why = nvml_gpus()
    devices = [_strip(d) for d in (gpus or {}).get("devices", []) if d["visible"]]
    if gpus is None or not devices:
        return _target("simulated", "in-process", note=why or "no visible NVIDIA GPU")
    if "cuda" not in capabilities:
        return _target("simulated", "in-process",
                       note=f"the runtime does not declare the cuda capability, so no test "
                            f"ran on the host's GPU ({len(devices)} x {devices[0]['model']})")
    return _target("gpu", "in-process", model=devices[0]["model"],
                   driver_version=gpus["driver_version"], cuda_version=gpus["cuda_version"],
                   devices=devices)


def worker_target(hello: dict[str, Any] | None) -> dict[str, Any]:
    """Where a black-box implementation ran, as its worker's hello record says (WORKER-2).

    No hello record read: ``kind`` "unknown". ``devices`` empty: "cpu" (the implementation
    built no GPU and trained on the host's CPU). Devices the worker marks ``"simulated":
    true`` (an extra member WORKER-2 allows; the reference worker sets it): "simulated".
    Otherwise "gpu" when NVML identifies the first device by its PCI bus id (model, driver,
    CUDA), else "unknown": devices named as the worker names them, which the report does not
    call GPUs since nothing confirmed one.
    """
    if not isinstance(hello, dict):
        return _target("unknown", "worker", note="no worker hello record was read, so the "
                                                 "devices the implementation used are unknown")
    reported = [dict(d) for d in hello.get("devices") or [] if isinstance(d, dict)]
    worker_devices = [{"name": str(d.get("name")), "pci_bus_id": str(d.get("pci_bus_id")),
                       "memory_limit": d.get("memory_limit")} for d in reported]
    runtime = hello.get("runtime") or {}
    who = f"{runtime.get('name')} {runtime.get('version')}"
    if not worker_devices:
        return _target("cpu", "worker", worker_devices=[],
                       note=f"the worker's hello record lists no GPU device: {who} built "
                            f"none")
    if all(d.get("simulated") is True for d in reported):
        return _target("simulated", "worker", model=worker_devices[0]["name"],
                       worker_devices=worker_devices,
                       note=f"the worker's hello record says {who} ran on "
                            f"{len(worker_devices)} simulated device(s)")
    gpus, why = nvml_gpus()
    by_bus = {d["pci_bus_id"]: d for d in (gpus or {}).get("devices", []) if d["pci_bus_id"]}
    matched = [_strip(by_bus[bus_key(d["pci_bus_id"])]) for d in worker_devices
               if bus_key(d["pci_bus_id"]) in by_bus]
    if gpus is not None and matched and bus_key(worker_devices[0]["pci_bus_id"]) in by_bus:
        return _target("gpu", "worker", model=matched[0]["model"],
                       driver_version=gpus["driver_version"], cuda_version=gpus["cuda_version"],
                       devices=matched, worker_devices=worker_devices)
    why = why or ("NVML lists no GPU at PCI bus "
                  f"{', '.join(d['pci_bus_id'] for d in worker_devices)}")
    return _target("unknown", "worker", model=worker_devices[0]["name"],
                   worker_devices=worker_devices,
                   note=f"{len(worker_devices)} device(s) the worker names "
                        f"({worker_devices[0]['name']}), not identified as a GPU ({why})")
