"""The reviewed list of mutants the suite cannot kill by construction (``equivalents.toml``).

Each entry names one mutant by its key and repeats, for the reader, the line it edits, the
change and the line after it (``mutated``, which tells apart two mutants making the same change
on one line, such as ``f(0, 0)`` becoming ``f(-1, 0)`` or ``f(0, -1)``); all three are checked
against the generated mutant, so an entry goes stale (and the meta-tests say so) when its line
changes. ``kind`` is

- ``equivalent``: the mutant changes nothing the specification defines: the same results,
  the same state, the same calls, in every case (for instance a clamp at a bound the value
  can never reach, or a bin index clamped with ``>=`` instead of ``>`` at the bound);
- ``unspecified``: the mutant changes behaviour that no clause defines, so no conformance
  test may require it (the size of the CPU device's thread pool, the wording of a log line
  or an error message, the model the reference worker trains, an option of the reference's
  own command line, an attribute that is no part of the API);
- ``gpu-only``: the mutant changes only a path taken on a real GPU (the ``cuda`` backend),
  whose clauses are skipped where no GPU is present.

All three kinds are left out of the kill rate and listed in the report with their reasons.
An ``unspecified`` entry is a decision that the specification should stay silent there;
where it should not, the clause is extended and the mutant gets a test instead. Its reason
says which of two cases it is (``unspecified_reason_problems`` checks the form):

- ``within CLAUSE[, CLAUSE] (conformance/test_x.py[::test_name], ...): ...``: the clause
  defines the behaviour and the named tests check it; the mutant changes only what the
  clause leaves free (the rest of a message's wording, an estimate inside its bound);
- ``open: ...``: no clause defines it, and the reason says why none should (an internal
  name outside the API, a reference-only tool or model, a tuning choice of each fork). A
listed mutant that a run kills (``--check-equivalents``) is reported as a mistake in the list.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .operators import Mutant

__all__ = ["Equivalent", "EQUIVALENTS_PATH", "KINDS", "ReviewedListError", "load", "problems",
           "unspecified_reason_problems"]

EQUIVALENTS_PATH = Path(__file__).resolve().parent / "equivalents.toml"
KINDS = ("equivalent", "unspecified", "gpu-only")
_FIELDS = ("key", "line", "change", "mutated", "kind", "reason")


@dataclass(frozen=True)
class Equivalent:
    key: str
    line: str
    change: str
    mutated: str
    kind: str
    reason: str


class ReviewedListError(ValueError):
    """A reviewed list that cannot be used; one line naming the file and why."""


def load(path: Path = EQUIVALENTS_PATH) -> dict[str, Equivalent]:
    """The entries by key; ``ReviewedListError`` (a ``ValueError``) for a file that is no
    TOML, a malformed entry or a duplicate key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ReviewedListError(f"{path}: {exc}") from None
    unknown = set(data) - {"mutant"}
    if unknown:
        raise ReviewedListError(f"{path}: unknown tables {sorted(unknown)}")
    entries = data.get("mutant", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ReviewedListError(f"{path}: 'mutant' must be an array of tables "
                                f"([[mutant]] entries)")
    out: dict[str, Equivalent] = {}
    for i, entry in enumerate(entries):
        missing = [f for f in _FIELDS if not isinstance(entry.get(f), str)
                   or not entry[f].strip() and f != "mutated"]   # a deleted decorator: ''
        extra = set(entry) - set(_FIELDS)
        if missing or extra:
            raise ReviewedListError(f"{path}: entry {i + 1} ({entry.get('key')!r}): missing or "
                             f"empty {missing}, unknown {sorted(extra)}")
        if entry["kind"] not in KINDS:
            raise ReviewedListError(f"{path}: entry {i + 1} ({entry['key']}): kind "
                             f"{entry['kind']!r} is not one of {KINDS}")
        if entry["key"] in out:
            raise ReviewedListError(f"{path}: {entry['key']} is listed twice")
        out[entry["key"]] = Equivalent(**{f: entry[f] for f in _FIELDS})
    return out


def problems(entries: dict[str, Equivalent], mutants: list[Mutant]) -> list[str]:
    """Entries that name no generated mutant, or whose line or change no longer match it."""
    by_key = {m.key: m for m in mutants}
    out = []
    for key, entry in entries.items():
        mutant = by_key.get(key)
        if mutant is None:
            out.append(f"{key}: no such mutant (the line changed or moved to another "
                       f"function): review the entry ({entry.line!r}, {entry.change})")
        elif ((mutant.line_text, mutant.describe(), mutant.mutated_text)
              != (entry.line, entry.change, entry.mutated)):
            out.append(f"{key}: the entry says {entry.line!r} {entry.change} giving "
                       f"{entry.mutated!r}, the mutant is {mutant.line_text!r} "
                       f"{mutant.describe()} giving {mutant.mutated_text!r}")
    return out


def entry_text(mutant: Mutant, kind: str, reason: str) -> str:
    """A TOML entry for ``mutant`` (what a reviewer appends to the list)."""
    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return (f"[[mutant]]\nkey = {q(mutant.key)}\nline = {q(mutant.line_text)}\n"
            f"change = {q(mutant.describe())}\nmutated = {q(mutant.mutated_text)}\n"
            f"kind = {q(kind)}\nreason = {q(reason)}\n")


_WITHIN = re.compile(r"within ((?:[A-Z][A-Z0-9]*-\d+)(?:(?:, | and )[A-Z][A-Z0-9]*-\d+)*) "
                     r"\(([^)]*)\): ")
_CLAUSE_ID = re.compile(r"[A-Z][A-Z0-9]*-\d+")


def unspecified_reason_problems(entries: dict[str, Equivalent], spec_text: str,
                                root: Path) -> list[str]:
    """``unspecified`` entries whose reason is neither ``open: ...`` nor ``within CLAUSE
    (tests): ...`` naming clauses of ``spec_text`` and conformance files (and test
    functions) under ``root`` that exist and tag one of those clauses."""
    out = []
    for key, entry in entries.items():
        if entry.kind != "unspecified" or entry.reason.startswith("open: "):
            continue
        m = _WITHIN.match(entry.reason)
        if m is None:
            out.append(f"{key}: an unspecified reason starts 'open: ' or 'within CLAUSE "
                       f"(tests): ', not {entry.reason[:40]!r}")
            continue
        clauses = _CLAUSE_ID.findall(m.group(1))
        for clause in clauses:
            if f"### {clause} " not in spec_text:
                out.append(f"{key}: {clause} is no clause of SPEC.md")
        for ref in m.group(2).split(", "):
            path, _, test = ref.partition("::")
            file = root / path
            if not (path.startswith("conformance/") and file.is_file()):
                out.append(f"{key}: {path} is no conformance module")
                continue
            text = file.read_text(encoding="utf-8")
            if not any(f'"{c}"' in text for c in clauses):
                out.append(f"{key}: {path} tags none of {clauses}")
            if test and f"def {test}(" not in text:
                out.append(f"{key}: {path} has no test {test}")
    return out
