"""What changed between two certification runs: ``python -m reports diff OLD NEW``.

``OLD`` and ``NEW`` are ``certification.json`` files or run folders holding one (``latest``
too). Every clause whose outcome differs is listed, regressions first, then improvements,
then newly waived clauses, then other changes (same rank, for instance FAIL to ERROR), then
clauses only one run has. Outcomes rank from best to worst: PASS; WAIVED; NOT_SUPPORTED and
NOT_RUN (no evidence); FLAKY, FAIL, ERROR, TIMEOUT and CRASH; an outcome this tool does not
know (or none) ranks worst. A failing clause that becomes WAIVED is *waived*, a change of its
own: not an improvement (it still fails) and not a regression (the expectations file says so).

Exit status, for CI:

- 0: NEW is the same as OLD or better;
- 1: a regression: the verdict is worse (by ``model.STATUS_ORDER``: CERTIFIED, CERTIFIED WITH
  WAIVERS, INCOMPLETE, NO VERDICT, NOT CERTIFIED), a clause's outcome ranks worse, a must-pass
  clause of OLD is missing from NEW, or an outcome is unknown or null;
- 2: an input is unusable, said in one line: not a regular file (a FIFO or a device is refused
  without reading it), larger than ``MAX_BYTES``, not UTF-8 JSON (truncated, malformed, nested
  too deeply), another ``schema_version`` than this suite writes, or not valid against the
  schema.

Text taken from the reports (titles, names, messages) is printed through
``reports.safe_text.terminal_safe``: control characters escaped, long fields truncated.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports.untrusted import UnusableFile, read_regular
from reports.safe_text import terminal_safe

RANK = {"PASS": 0, "WAIVED": 1, "NOT_SUPPORTED": 2, "NOT_RUN": 2,
        "FLAKY": 3, "FAIL": 3, "ERROR": 3, "TIMEOUT": 3, "CRASH": 3}
UNKNOWN_RANK = 9
#: Outcomes a waiver excuses (reports/outcomes.py): X -> WAIVED is "waived", not better.
WAIVABLE = frozenset({"CRASH", "TIMEOUT", "ERROR", "FAIL", "FLAKY", "NOT_SUPPORTED"})
#: Largest certification.json read (bytes).
MAX_BYTES = 256 << 20
#: Verdict statuses, best first (reports/model.py ``STATUS_ORDER``).
STATUS_ORDER = ("CERTIFIED", "CERTIFIED WITH WAIVERS", "INCOMPLETE", "NO VERDICT",
                "NOT CERTIFIED")


class DiffError(ValueError):
    """A run cannot be read."""


def rank(outcome: Any) -> int:
    return RANK.get(outcome, UNKNOWN_RANK) if isinstance(outcome, str) else UNKNOWN_RANK


def status_rank(status: Any) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


@dataclass(frozen=True)
class Change:
    clause: str
    title: str
    old: str | None            # None: the clause is not in OLD
    new: str | None
    must_pass: bool            # in NEW (else OLD)
    present: tuple[bool, bool] = (True, True)   # in OLD, in NEW

    @property
    def kind(self) -> str:
        if not self.present[0] or not self.present[1]:
            return "added" if not self.present[0] else "removed"
        if self.new == "WAIVED" and self.old in WAIVABLE:
            return "waived"
        delta = rank(self.new) - rank(self.old)
        if rank(self.new) == UNKNOWN_RANK:
            return "regression"
        return "regression" if delta > 0 else "improvement" if delta < 0 else "changed"

    @property
    def regression(self) -> bool:
        return self.kind == "regression" or (self.kind == "removed" and self.must_pass)

    def line(self) -> str:
        must = "must-pass" if self.must_pass else "         "
        old = terminal_safe(self.old if self.present[0] else "-", 20)
        new = terminal_safe(self.new if self.present[1] else "-", 20)
        return (f"  {terminal_safe(self.clause, 20):10} {old:>13} -> {new:13} {must}  "
                f"{terminal_safe(self.title, 120)}")


def _resolve(path: Path) -> Path:
    if path.is_dir():
        return path / "certification.json"
    if path.name == "latest" and path.is_file():   # a pointer file naming the run folder
        try:
            name = read_regular(path, 4096, follow_symlinks=True).decode("utf-8").strip()
        except (UnusableFile, UnicodeDecodeError) as exc:
            raise DiffError(f"cannot read {path}: {exc}") from None
        if name and "/" not in name and name not in (".", ".."):
            return path.parent / name / "certification.json"
    return path


def load(path: Path) -> dict[str, Any]:
    """The certification document at ``path`` (a file, or a run folder holding one), checked
    against the schema of this suite; ``DiffError`` (one line) when it is unusable."""
    file = _resolve(path)
    shown = terminal_safe(file, 200)
    try:
        raw = read_regular(file, MAX_BYTES, follow_symlinks=True)
    except UnusableFile as exc:
        raise DiffError(terminal_safe(exc, 300)) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DiffError(f"{shown} is not a certification.json: not JSON "
                        f"({terminal_safe(exc, 120)}; truncated or corrupt?)") from None
    except RecursionError:
        raise DiffError(f"{shown} is not a certification.json: nested too deeply") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("clauses"), list):
        raise DiffError(f"{shown} is not a certification.json (no clauses)")
    from reports import model, writer
    version = doc.get("schema_version")
    if version != model.SCHEMA_VERSION:
        raise DiffError(f"{shown} has schema_version {terminal_safe(repr(version), 40)}; this "
                        f"suite reads {model.SCHEMA_VERSION} (compare runs of one suite version)")
    try:
        errors = writer.validation_errors(doc)
    except RecursionError:
        errors = ["<root>: nested too deeply"]
    if errors:
        raise DiffError(f"{shown} breaks the certification schema ({len(errors)} error(s)), "
                        f"first: {terminal_safe(errors[0], 200)}")
    return doc


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Every clause whose outcome differs, regressions first (then improvements, newly waived,
    other changes, added, removed), each group in SPEC.md order."""
    before = {c.get("id"): c for c in old["clauses"] if isinstance(c, dict)}
    after = {c.get("id"): c for c in new["clauses"] if isinstance(c, dict)}
    order = list(after) + [cid for cid in before if cid not in after]
    found = []
    for cid in order:
        a, b = before.get(cid), after.get(cid)
        if a is not None and b is not None and a.get("outcome") == b.get("outcome") \
                and rank(b.get("outcome")) != UNKNOWN_RANK:
            continue
        ref = b or a
        found.append(Change(str(cid), str(ref.get("title", "")),
                            a.get("outcome") if a else None, b.get("outcome") if b else None,
                            bool(ref.get("must_pass") if b else a.get("must_pass")),
                            (a is not None, b is not None)))
    kinds = ("regression", "improvement", "waived", "changed", "added", "removed")
    return sorted(found, key=lambda c: kinds.index(c.kind))


def report(old: dict[str, Any], new: dict[str, Any], old_name: str, new_name: str
           ) -> tuple[list[str], int]:
    """(lines to print, exit status) for the difference of two documents."""
    lines = [f"old: {terminal_safe(old_name, 200)} ({_who(old)})",
             f"new: {terminal_safe(new_name, 200)} ({_who(new)})"]
    for what, get in (("runtime", lambda d: (d.get("runtime") or {}).get("module")),
                      ("spec version", lambda d: (d.get("spec") or {}).get("version"))):
        if get(old) != get(new):
            lines.append(f"note: the runs certify a different {what}: "
                         f"{terminal_safe(get(old), 80)} and {terminal_safe(get(new), 80)}")
    v_old = (old.get("verdict") or {}).get("status")
    v_new = (new.get("verdict") or {}).get("status")
    worse = status_rank(v_new) > status_rank(v_old)
    shown_old, shown_new = terminal_safe(v_old, 40), terminal_safe(v_new, 40)
    if v_old != v_new:
        lines.append(f"verdict: {shown_old} -> {shown_new}"
                     + (" (worse)" if worse else " (better)"
                        if status_rank(v_new) < status_rank(v_old) else ""))
    else:
        lines.append(f"verdict: {shown_new} (unchanged)")
    found = changes(old, new)
    titles = {"regression": "regressions", "improvement": "improvements",
              "waived": "newly waived (still failing; excused by the expectations file)",
              "changed": "other changes", "added": "only in new", "removed": "only in old"}
    for kind, title in titles.items():
        group = [c for c in found if c.kind == kind]
        if group:
            lines.append(f"{title} ({len(group)}):")
            lines += [c.line() + ("  (must-pass clause missing from new)"
                                  if kind == "removed" and c.must_pass else "")
                      for c in group]
    regressions = sum(c.regression for c in found)
    lines.append(f"{len(found)} clause(s) changed; {regressions} regression(s)"
                 if found else "no clause outcome changed")
    if worse:
        lines.append(f"regression: the verdict went from {shown_old} to {shown_new}")
    return lines, 1 if regressions or worse else 0


def _who(doc: dict[str, Any]) -> str:
    rt = doc.get("runtime") or {}
    return terminal_safe(f"{rt.get('name')} {rt.get('version')}, {doc.get('generated_at', '?')}",
                         160)


def main(old_path: Path, new_path: Path) -> int:
    try:
        old, new = load(old_path), load(new_path)
    except DiffError as exc:
        print(f"diff: {exc}", file=sys.stderr)
        return 2
    lines, status = report(old, new, str(old_path), str(new_path))
    print("\n".join(lines))
    return status
