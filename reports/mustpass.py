"""The must-pass list: which clauses a certification run must pass, per spec version.

``conformance/mustpass/<spec-version>.txt``, in the manner of Vulkan CTS ``vk-default.txt``::

    # comment
    profile in-process: adjustable bfc env ...    # capabilities a runtime must all declare
    profile black-box: worker

    [all]                       # must pass in every run
    API-1
    [requires bfc virtual_clock]  # must pass when the runtime declares bfc and virtual_clock
    BFC-9
    [requires gpu-target cuda]  # ... and the execution target is a real GPU
    GPU-1
    [advisory]                  # reported, never required
    STAT-9

Clause IDs before the first section belong to ``[all]``. A runtime is certifiable only when it
declares every capability of at least one profile (none listed: no such condition), so that a
runtime cannot be certified by declaring less. Every non-withdrawn clause of SPEC.md appears
exactly once; the requirements of a ``[requires ...]`` section are exactly the capabilities
(and ``gpu-target`` for ``gpu``-marked tests) that the clause's tests need; ``python -m reports
mustpass --write`` regenerates the file from SPEC.md and the collected conformance tests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conformance import spec

MUSTPASS_DIR = spec.ROOT / "conformance" / "mustpass"
GPU_TARGET = "gpu-target"
ALL = "all"
ADVISORY = "advisory"
_ID = re.compile(r"^[A-Z][A-Z0-9]*-\d+$")
_PROFILE = re.compile(r"^profile\s+(?P<name>[\w.-]+)\s*:\s*(?P<caps>.*)$")

#: Profiles of a new must-pass file: an importable runtime declares every capability but
#: ``cuda`` (GPU clauses have their own section) and ``worker``; a fork certified from outside
#: (a TensorFlow build) declares ``worker`` and is tested through the worker protocol.
DEFAULT_PROFILES: dict[str, tuple[str, ...]] = {
    "in-process": tuple(sorted(spec.CAPABILITIES - {"cuda", "worker"})),
    "black-box": ("worker",),
}

#: Requirements of a clause that no collected test names yet (generation only).
AREA_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "API": (), "CLK": ("virtual_clock",), "ENV": ("env",), "BFC": ("bfc",),
    "VMEM": ("vmem",), "ADJ": ("adjustable",), "REG": ("session_run_actions",),
    "SESS": ("session_run_actions",), "FL": ("file_listener",),
    "RM": ("resource_management",), "STAT": ("statistics",), "DEVICE": ("executor",),
    "EXEC": ("executor",), "OPM": ("gpu_op_manager",), "E2E": ("workload",),
    "WORKER": ("worker",), "GPU": (GPU_TARGET, "cuda"),
}


class MustPassError(ValueError):
    """The must-pass file is malformed."""


@dataclass(frozen=True)
class Section:
    """``[all]``, ``[advisory]`` or ``[requires ...]`` with its sorted requirements."""
    kind: str
    requires: tuple[str, ...] = ()

    @property
    def header(self) -> str:
        return f"[requires {' '.join(self.requires)}]" if self.kind == "requires" else \
            f"[{self.kind}]"

    def applies(self, capabilities: Iterable[str], gpu_target: bool) -> bool:
        if self.kind == ADVISORY:
            return False
        have = set(capabilities) | ({GPU_TARGET} if gpu_target else set())
        return set(self.requires) <= have


@dataclass
class MustPassList:
    path: Path
    sha256: str
    profiles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sections: dict[str, Section] = field(default_factory=dict)  # clause id -> section

    def required(self, capabilities: Iterable[str], gpu_target: bool) -> list[str]:
        caps = set(capabilities)
        return [cid for cid, sec in self.sections.items() if sec.applies(caps, gpu_target)]

    def satisfied_profiles(self, capabilities: Iterable[str]) -> list[str]:
        caps = set(capabilities)
        return [name for name, need in self.profiles.items() if set(need) <= caps]


def official_path(version: str | None = None) -> Path:
    return MUSTPASS_DIR / f"{version or spec.spec_version()}.txt"


def _parse_section(header: str, lineno: int, path: Path) -> Section:
    words = header.split()
    if words == [ALL]:
        return Section(ALL)
    if words == [ADVISORY]:
        return Section(ADVISORY)
    if len(words) >= 2 and words[0] == "requires":
        reqs = words[1:]
        unknown = [r for r in reqs if r != GPU_TARGET and r not in spec.CAPABILITIES]
        if unknown:
            raise MustPassError(f"{path}:{lineno}: unknown requirement(s) {unknown}")
        return Section("requires", tuple(sorted(set(reqs))))
    raise MustPassError(f"{path}:{lineno}: unknown section [{header}]")


def load(path: Path) -> MustPassList:
    raw = path.read_bytes()
    result = MustPassList(path=path, sha256=hashlib.sha256(raw).hexdigest())
    section = Section(ALL)
    for lineno, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = _parse_section(line[1:-1].strip(), lineno, path)
            continue
        m = _PROFILE.match(line)
        if m:
            caps = tuple(sorted(m["caps"].split()))
            unknown = [c for c in caps if c not in spec.CAPABILITIES]
            if unknown:
                raise MustPassError(f"{path}:{lineno}: profile {m['name']} names unknown "
                                    f"capabilities {unknown}")
            if m["name"] in result.profiles:
                raise MustPassError(f"{path}:{lineno}: profile {m['name']} defined twice")
            result.profiles[m["name"]] = caps
            continue
        if not _ID.match(line):
            raise MustPassError(f"{path}:{lineno}: not a clause ID: {line!r}")
        if line in result.sections:
            raise MustPassError(f"{path}:{lineno}: {line} listed twice")
        result.sections[line] = section
    return result


def section_for(requirements: Iterable[str]) -> Section:
    reqs = tuple(sorted(set(requirements)))
    return Section("requires", reqs) if reqs else Section(ALL)


def clause_requirements(tests: Mapping[str, Mapping]) -> dict[str, set[str]]:
    """Clause id -> capabilities (and ``gpu-target``) its tests need, from test metadata
    ``{nodeid: {"clauses": [...], "capabilities": [...], "gpu": bool}}``."""
    needs: dict[str, set[str]] = {}
    for meta in tests.values():
        reqs = set(meta.get("capabilities", ())) | ({GPU_TARGET} if meta.get("gpu") else set())
        for cid in meta.get("clauses", ()):
            needs.setdefault(cid, set()).update(reqs)
    return needs


def generate(clauses: Mapping[str, spec.Clause], tests: Mapping[str, Mapping],
             profiles: Mapping[str, Iterable[str]], advisory: Iterable[str] = (),
             version: str = "") -> str:
    """The text of a must-pass file for ``clauses`` (SPEC.md order)."""
    needs = clause_requirements(tests)
    advisory = set(advisory)
    by_section: dict[Section, list[str]] = {}
    for cid, clause in clauses.items():
        if clause.withdrawn:
            continue
        if cid in advisory:
            sec = Section(ADVISORY)
        else:
            reqs = needs.get(cid)
            sec = section_for(reqs if reqs is not None else AREA_REQUIREMENTS.get(clause.area, ()))
        by_section.setdefault(sec, []).append(cid)
    order = sorted(by_section, key=lambda s: (s.kind == ADVISORY, s.kind != ALL, s.requires))
    lines = [
        f"# Must-pass list for SPEC.md version {version or spec.spec_version()}.",
        "# A run is CERTIFIED only if every clause of every section whose requirements hold",
        "# (capabilities the runtime declares; gpu-target: the execution target is a GPU)",
        "# passed or is covered by a valid waiver. Sections: [all], [requires ...], [advisory].",
        "# Regenerate with: python -m reports mustpass --write",
        "",
    ]
    lines += [f"profile {name}: {' '.join(sorted(caps))}" for name, caps in profiles.items()]
    for sec in order:
        lines += ["", sec.header, *by_section[sec]]
    return "\n".join(lines) + "\n"
