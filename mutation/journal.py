"""A campaign's journal: every finished mutant, written as it ends, so a stopped campaign
resumes where it stopped (``python -m mutation run --resume``, ``sweep --resume``).

A campaign of 150 mutants against the whole suite takes core-hours; a host with a wall limit
(a CI job, a lent machine) stops it before its report is written. The journal,
``<out>/journal-<label>.jsonl``, is JSON lines: a header naming what the results are valid
for, then one line per finished mutant. A result holds only for the same code: the header's
``fingerprint`` is a SHA-256 over the runtime's sources, the conformance suite, its fixtures
and the harness, and over everything that chooses or runs the mutants (generator, seed,
sample, keys, modules, options). A resumed campaign whose fingerprint differs is refused
(the results would certify other code); so is a journal that is not one.

The header carries the baseline run too (its skips are the host's expected skips), so a
resumed campaign does not run it again. Lines are appended whole and flushed; a process
killed while writing leaves at most its last line incomplete (no newline), which a resume
drops, as the mutant is simply run again; so is a mutant recorded with a harness error (no
verdict). Any other bad line refuses the journal, naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from reports.untrusted import ReportError, read_regular

from .runner import MutantResult, Run
from .targets import ROOT

__all__ = ["JournalError", "Journal", "fingerprint", "result_from_json", "run_from_json"]

VERSION = 1
MAX_JOURNAL_BYTES = 64 << 20     # a sweep of 1,040 runs writes about 3 MiB
_FINGERPRINTED = ("reference_runtime", "conformance", "fixtures", "mutation")


class JournalError(Exception):
    """A journal that cannot be resumed; one line naming the file and why."""


def fingerprint(settings: dict[str, Any], root: Path = ROOT) -> str:
    """SHA-256 over the code a result depends on (every ``.py`` and ``.toml`` under
    ``_FINGERPRINTED``, by relative path) and the campaign's ``settings`` (JSON)."""
    digest = hashlib.sha256()
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for folder in _FINGERPRINTED:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".toml") and path.is_file() \
                    and "__pycache__" not in path.parts:
                digest.update(b"\0" + str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise JournalError(f"{where}: not an object")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise JournalError(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise JournalError(f"{where}: {exc}") from None


def run_from_json(data: Any, where: str = "run") -> Run:
    run = _build(Run, data, where)
    run.modules = tuple(run.modules) if isinstance(run.modules, list) else run.modules
    return run


def result_from_json(data: Any, where: str = "result") -> MutantResult:
    result = _build(MutantResult, data, where)
    if not isinstance(result.runs, list):
        raise JournalError(f"{where}: runs is not a list")
    result.runs = [run_from_json(r, f"{where}, run {i + 1}") for i, r in enumerate(result.runs)]
    if not isinstance(result.key, str) or not isinstance(result.outcome, str):
        raise JournalError(f"{where}: key and outcome must be strings")
    return result


class Journal:
    """The journal at ``path`` for a campaign of ``keys`` (its sample, in order) under
    ``print_``: ``done`` maps an index of the sample to its result already recorded."""

    def __init__(self, path: Path, print_: str, keys: Iterable[str]) -> None:
        self.path = path
        self.fingerprint = print_
        self.keys = tuple(keys)
        self.done: dict[int, MutantResult] = {}
        self.baseline: Run | None = None
        self._lock = threading.Lock()
        self._file = None

    # -- reading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read an existing journal (``done`` and ``baseline``); a missing one is empty."""
        if not self.path.exists() and not self.path.is_symlink():
            return
        try:
            raw = read_regular(self.path, MAX_JOURNAL_BYTES)
        except ReportError as exc:
            raise JournalError(str(exc)) from None
        lines = raw.split(b"\n")
        if lines and lines[-1]:
            lines.pop()                      # written in part when its writer was stopped
        lines = [ln for ln in lines if ln]
        if not lines:
            return
        header = self._line(lines[0], 1)
        if not isinstance(header, dict) or header.get("journal") != VERSION:
            raise JournalError(f"{self.path}: line 1 is no mutation journal header")
        if header.get("fingerprint") != self.fingerprint:
            raise JournalError(f"{self.path} was written for other code or another campaign "
                               f"(its fingerprint differs): remove it, or run without --resume")
        if header.get("baseline") is not None:
            self.baseline = run_from_json(header["baseline"], f"{self.path}: baseline")
        for number, line in enumerate(lines[1:], start=2):
            entry = self._line(line, number)
            index = entry.get("index") if isinstance(entry, dict) else None
            where = f"{self.path}: line {number}"
            if type(index) is not int or not 0 <= index < len(self.keys):
                raise JournalError(f"{where}: no index of this campaign's sample")
            result = result_from_json(entry.get("result"), where)
            if result.key != self.keys[index]:
                raise JournalError(f"{where}: mutant {result.key!r} is not the sample's "
                                   f"mutant {index + 1}")
            if result.outcome != "error":    # no verdict: run it again
                self.done[index] = result

    def _line(self, line: bytes, number: int) -> Any:
        try:
            return json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise JournalError(f"{self.path}: line {number} is not JSON "
                               f"({type(exc).__name__})") from None

    # -- writing ---------------------------------------------------------------------------
    def start(self, baseline: Run | None) -> None:
        """Write the header and the results already done to a new file beside the journal,
        rename it over the journal, and keep it open for ``record``."""
        aside = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        header = {"journal": VERSION, "fingerprint": self.fingerprint,
                  "baseline": baseline.to_json() if baseline is not None else None}
        with open(aside, "w", encoding="utf-8") as out:
            out.write(json.dumps(header) + "\n")
            for index in sorted(self.done):
                out.write(json.dumps({"index": index,
                                      "result": self.done[index].to_json()}) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(aside, self.path)
        self._file = open(self.path, "a", encoding="utf-8")

    def record(self, index: int, result: MutantResult) -> None:
        """Append one finished mutant (a whole line, flushed)."""
        line = json.dumps({"index": index, "result": result.to_json()}) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
