"""What changed between two certification runs: ``python -m reports diff OLD NEW``.

``OLD`` and ``NEW`` are ``certification.json`` files or run folders holding one (``latest``
too). Every clause whose outcome differs is listed, regressions first, then improvements,
then other changes (same rank, for instance FAIL to ERROR), then clauses only one run has.
Outcomes rank from best to worst: PASS; WAIVED; NOT_SUPPORTED and NOT_RUN (no evidence);
FAIL, ERROR, TIMEOUT and CRASH. A *regression* is a clause whose outcome ranks worse in NEW.
The exit status is 1 when there is a regression (for a fork's CI), 0 otherwise, 2 when a
file cannot be read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RANK = {"PASS": 0, "WAIVED": 1, "NOT_SUPPORTED": 2, "NOT_RUN": 2,
        "FAIL": 3, "ERROR": 3, "TIMEOUT": 3, "CRASH": 3}


class DiffError(ValueError):
    """A run cannot be read."""


@dataclass(frozen=True)
class Change:
    clause: str
    title: str
    old: str | None            # None: the clause is not in OLD
    new: str | None
    must_pass: bool            # in NEW (else OLD)

    @property
    def kind(self) -> str:
        if self.old is None or self.new is None:
            return "added" if self.old is None else "removed"
        delta = RANK[self.new] - RANK[self.old]
        return "regression" if delta > 0 else "improvement" if delta < 0 else "changed"

    def line(self) -> str:
        must = "must-pass" if self.must_pass else "         "
        return (f"  {self.clause:10} {self.old or '-':>13} -> {self.new or '-':13} {must}  "
                f"{self.title}")


def load(path: Path) -> dict[str, Any]:
    """The certification document at ``path`` (a file, or a run folder holding one)."""
    file = path / "certification.json" if path.is_dir() else path
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DiffError(f"cannot read {file}: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("clauses"), list):
        raise DiffError(f"{file} is not a certification.json (no clauses)")
    return doc


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Every clause whose outcome differs, regressions first (then improvements, other
    changes, added, removed), each group in SPEC.md order."""
    before = {c["id"]: c for c in old["clauses"]}
    after = {c["id"]: c for c in new["clauses"]}
    order = list(after) + [cid for cid in before if cid not in after]
    found = []
    for cid in order:
        a, b = before.get(cid), after.get(cid)
        if a is not None and b is not None and a["outcome"] == b["outcome"]:
            continue
        ref = b or a
        found.append(Change(cid, ref.get("title", ""), a and a["outcome"], b and b["outcome"],
                            bool(ref.get("must_pass"))))
    kinds = ("regression", "improvement", "changed", "added", "removed")
    return sorted(found, key=lambda c: kinds.index(c.kind))


def report(old: dict[str, Any], new: dict[str, Any], old_name: str, new_name: str
           ) -> tuple[list[str], int]:
    """(lines to print, exit status) for the difference of two documents."""
    lines = [f"old: {old_name} ({_who(old)})", f"new: {new_name} ({_who(new)})"]
    for what, get in (("runtime", lambda d: d.get("runtime", {}).get("module")),
                      ("spec version", lambda d: d.get("spec", {}).get("version"))):
        if get(old) != get(new):
            lines.append(f"note: the runs certify a different {what}: {get(old)} and "
                         f"{get(new)}")
    v_old, v_new = old["verdict"]["status"], new["verdict"]["status"]
    lines.append(f"verdict: {v_old} -> {v_new}" if v_old != v_new else f"verdict: {v_new} "
                                                                       f"(unchanged)")
    found = changes(old, new)
    titles = {"regression": "regressions", "improvement": "improvements",
              "changed": "other changes", "added": "only in new", "removed": "only in old"}
    for kind, title in titles.items():
        group = [c for c in found if c.kind == kind]
        if group:
            lines.append(f"{title} ({len(group)}):")
            lines += [c.line() for c in group]
    regressions = sum(c.kind == "regression" for c in found)
    lines.append(f"{len(found)} clause(s) changed; {regressions} regression(s)"
                 if found else "no clause outcome changed")
    return lines, 1 if regressions else 0


def _who(doc: dict[str, Any]) -> str:
    rt = doc.get("runtime", {})
    return f"{rt.get('name')} {rt.get('version')}, {doc.get('generated_at', '?')}"


def main(old_path: Path, new_path: Path) -> int:
    try:
        old, new = load(old_path), load(new_path)
    except DiffError as exc:
        print(f"diff: {exc}")
        return 2
    lines, status = report(old, new, str(old_path), str(new_path))
    print("\n".join(lines))
    return status
