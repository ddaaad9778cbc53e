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
