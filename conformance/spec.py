"""SPEC.md as data: clause IDs, titles and areas, the spec version, the capability vocabulary."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC_PATH = ROOT / "SPEC.md"

CLAUSE_HEADING = re.compile(r"^### (?P<id>[A-Z][A-Z0-9]*-\d+) (?P<title>.+?)\s*$")
VERSION_LINE = re.compile(r"^Spec version: `(?P<version>[^`]+)`", re.MULTILINE)

CAPABILITIES = frozenset({
    "bfc", "vmem", "adjustable", "env", "session_run_actions", "file_listener",
    "resource_management", "statistics", "executor", "gpu_op_manager", "workload",
    "virtual_clock", "cuda", "worker",
})


#: The public names each capability requires (API-1: "the names listed in API-3 to API-7 for
#: every capability it declares"). Checked when a run starts (conformance/plugin.py) and by
#: conformance/test_api.py. ``cuda`` adds no name (GPU-1: the ``cuda`` backend).
CAPABILITY_NAMES: dict[str, tuple[str, ...]] = {
    # API-3
    "bfc": ("AllocationAttributes", "AllocatorStats", "Allocator", "SubAllocator",
            "InvalidPointerError", "SimulatedDeviceMemory", "SimulatedHostMemory",
            "BFCAllocator", "MemoryMap", "RegionInfo", "ChunkInfo", "BinDebugInfo",
            "GPUBFCAllocator", "rounded_bytes", "bin_num_for_size", "AllocatorRetry"),
    "env": ("read_bool_from_env_var", "read_int64_from_env_var", "get_allow_growth_value",
            "get_garbage_collection_value"),
    "vmem": ("GPUVMemAllocator", "maybe_create_gpu_vmem_allocator"),
    "adjustable": ("GPUAdjustableAllocator", "MemPoolStats"),
    # API-5
    "session_run_actions": ("Grouping", "SessionRunAction", "SessionRunActionOptions",
                            "SessionRunActionRegistry", "global_registry",
                            "register_session_run_action"),
    "file_listener": ("FileListener", "global_file_listener"),
    "resource_management": ("GPUResourceManagement", "GPUUsageAdjustment", "create_runtime"),
    "statistics": ("GPUStatistics",),
    # API-6 and API-7; DirectSession and the errors its run() raises are listed in API-5
    # but belong to the session, which the executor capability provides (SESS clauses);
    # SimBackend is named by DEVICE-7 beside API-6's select_backend.
    "executor": ("Graph", "GraphError", "OpRegistry", "KernelDef", "DirectSession",
                 "OpError", "InvalidArgumentError", "ResourceExhaustedError",
                 "FailedPreconditionError", "CancelledError", "UnknownError",
                 "DeviceAttributes", "Device", "CPUDevice", "GPUDevice", "DeviceMgr",
                 "get_pci_bus_id", "select_backend", "SimBackend", "create_runtime",
                 "RuntimeContext"),
    "gpu_op_manager": ("create_runtime",),
    "workload": ("MLPWorkload",),
    "virtual_clock": ("create_runtime",),
    "worker": ("WORKER_COMMAND",),
    "cuda": (),
}

#: The submodule a runtime package must have for a capability, run as ``python -m``
#: (API-1): E2E-1 runs ``python -m <runtime>.workload``.
CAPABILITY_SUBMODULES: dict[str, str] = {"workload": "workload"}


@dataclass(frozen=True)
class Clause:
    id: str
    title: str
    area: str
    withdrawn: bool = False
    text: str = ""      # the normative text, without the heading and the Source: line
    line: int = 0       # line of the heading in SPEC.md (1-based)

    @property
    def anchor(self) -> str:
        """The heading's anchor as Markdown renderers (GitHub) make it."""
        words = re.sub(r"[^\w\- ]", "", f"{self.id} {self.title}".lower())
        return words.replace(" ", "-")


@lru_cache(maxsize=None)
def load_clauses(path: Path = SPEC_PATH) -> dict[str, Clause]:
    clauses: dict[str, Clause] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        m = CLAUSE_HEADING.match(line)
        if not m:
            continue
        cid = m["id"]
        if cid in clauses:
            raise ValueError(f"{path.name}: clause {cid} is defined twice")
        body = []
        for following in lines[i + 1:]:
            if following.startswith("#") or following.startswith("Source:"):
                break
            body.append(following)
        text = "\n".join(body).strip()
        clauses[cid] = Clause(cid, m["title"], cid.split("-")[0],
                              withdrawn=text.startswith("Withdrawn"), text=text, line=i + 1)
    return clauses


@lru_cache(maxsize=None)
def spec_version(path: Path = SPEC_PATH) -> str:
    m = VERSION_LINE.search(path.read_text(encoding="utf-8"))
    if not m:
        raise ValueError(f"{path.name} has no 'Spec version:' line")
    return m["version"]
