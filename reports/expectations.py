"""Per-fork expectations file (``--expectations FILE``, TOML): waivers.

::

    fork = "acme-tf"                 # optional, informational

    [[waiver]]
    clause = "BFC-7"                 # a clause ID, or:
    # test = "conformance/test_bfc.py::test_shrink*"   (a glob over node IDs)
    reason = "shrink does not coalesce regions yet"
    link = "https://github.com/acme/tf/issues/12"      # required, http(s)
    gpu = ["NVIDIA A100*"]           # optional: globs over the execution target's GPU model
    expires = 2027-03-31             # optional: not applied after this date
    outcomes = ["TIMEOUT"]           # optional: the outcomes it covers (see below)

A waiver covers FAIL, ERROR and NOT_SUPPORTED unless it names its outcomes: a TIMEOUT, a
CRASH or a FLAKY test (``--repeat``) is waived only by a waiver whose ``outcomes`` names it,
and ``outcomes`` replaces the default. In a test glob only ``*`` and ``?`` are wildcards;
``[`` and ``]`` are the brackets of a parametrized test's ID, matched literally.

A waiver is *applied* when it covers a clause or test whose observed outcome is one it covers
(the clause or test is then WAIVED, never PASS, and the run is at best CERTIFIED WITH
WAIVERS); *not-covered* when what it matched failed only with outcomes it does not name;
*unneeded* when everything it matched passed; *stale* when it matched nothing in the run (no
test ran for its clause, its glob matched no test of the run); *inactive* when its ``gpu``
scope does not match the execution target; *expired* after ``expires``.

The file is untrusted input, checked before any test runs (a usage error, exit status 4, one
line): it must be a regular file of at most ``MAX_BYTES``, UTF-8 TOML without deeper nesting
than the parser allows, with at most ``MAX_WAIVERS`` waivers; every clause it names must be a
live clause of SPEC.md and every test glob must match a test of the suite (``unknown_ids``),
all unknown IDs named in one line. A
waiver keeps how many tests it matched and at most ``MATCHED_SAMPLE`` of their IDs.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import re
import ast
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports import outcomes as oc
from reports.untrusted import UnusableFile, read_regular

APPLIED = "applied"
NOT_COVERED = "not-covered"
UNNEEDED = "unneeded"
STALE = "stale"
INACTIVE = "inactive"
EXPIRED = "expired"

_ID = re.compile(r"[A-Z][A-Z0-9]*-[0-9]+")
_LINK = re.compile(r"https?://[^\s\x00-\x1f\x7f]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KEYS = {"clause", "test", "reason", "link", "gpu", "expires", "outcomes"}
#: Largest expectations file read (bytes).
MAX_BYTES = 8 << 20
#: Most waivers a file may hold: the report lists and checks each one (a fork with more known
#: failures is not near certification; its file is refused, not processed for minutes).
MAX_WAIVERS = 5000
#: Test IDs a waiver keeps of those it matched (``matched``; ``matched_count`` counts all).
MATCHED_SAMPLE = 5


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A node ID glob as a regex: ``*`` any text, ``?`` one character, the rest literal."""
    parts = ("." if ch == "?" else ".*" if ch == "*" else re.escape(ch) for ch in pattern)
    return re.compile("".join(parts), re.DOTALL)


class ExpectationsError(ValueError):
    """The expectations file is malformed."""


@dataclass
class Waiver:
    id: str
    reason: str
    link: str
    clause: str | None = None
    test: str | None = None
    gpu: tuple[str, ...] = ()
    expires: dt.date | None = None
    outcomes: frozenset[str] = oc.WAIVED_BY_DEFAULT
    explicit_outcomes: bool = False
    status: str = STALE
    matched: list[str] = field(default_factory=list)     # the first MATCHED_SAMPLE
    matched_count: int = 0
    note: str = ""
    _regex: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def covers(self, outcome: str) -> bool:
        return outcome in self.outcomes

    def match(self, what: str) -> None:
        """Counts a matched test or clause; keeps the first ``MATCHED_SAMPLE``."""
        self.matched_count += 1
        if len(self.matched) < MATCHED_SAMPLE:
            self.matched.append(what)

    def in_scope(self, gpu_models: list[str]) -> bool:
        if not self.gpu:
            return True
        return any(fnmatch.fnmatchcase(m, g) for m in gpu_models for g in self.gpu)

    def matches_test(self, nodeid: str) -> bool:
        if self.test is None:
            return False
        if self._regex is None:
            self._regex = glob_regex(self.test)
        return self._regex.fullmatch(nodeid) is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "clause": self.clause, "test": self.test, "reason": self.reason,
            "link": self.link, "gpu": list(self.gpu),
            "expires": self.expires.isoformat() if self.expires else None,
            "outcomes": sorted(self.outcomes, key=oc.severity),
            "status": self.status, "matched": sorted(self.matched),
            "matched_count": self.matched_count, "note": self.note,
        }


@dataclass
class Expectations:
    path: Path | None = None
    sha256: str | None = None
    fork: str | None = None
    waivers: list[Waiver] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path) if self.path else None, "sha256": self.sha256,
                "fork": self.fork, "waivers": [w.to_json() for w in self.waivers]}


def _waiver(i: int, entry: Any, path: Path) -> Waiver:
    where = f"{path}: waiver #{i + 1}"
    if not isinstance(entry, dict):
        raise ExpectationsError(f"{where}: must be a table")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ExpectationsError(f"{where}: unknown key(s) {_short(sorted(unknown), 200)}")
    clause, test = entry.get("clause"), entry.get("test")
    if (clause is None) == (test is None):
        raise ExpectationsError(f"{where}: give exactly one of 'clause' or 'test'")
    if clause is not None and not (isinstance(clause, str) and _ID.fullmatch(clause)):
        raise ExpectationsError(f"{where}: clause {_short(clause)} is not a clause ID like "
                                f"'BFC-4'")
    if test is not None and not (isinstance(test, str) and test.strip() == test and test
                                 and not _CONTROL.search(test) and len(test) <= 1000):
        raise ExpectationsError(f"{where}: test {_short(test)} must be a node ID glob without "
                                f"surrounding whitespace or control characters")
    reason, link = entry.get("reason"), entry.get("link")
    if not (isinstance(reason, str) and reason.strip()):
        raise ExpectationsError(f"{where}: 'reason' is required")
    if not (isinstance(link, str) and _LINK.fullmatch(link)):
        raise ExpectationsError(f"{where}: 'link' is required and must be an http(s) URL")
    outcomes = entry.get("outcomes")
    if outcomes is not None:
        if not (isinstance(outcomes, list) and outcomes
                and all(isinstance(o, str) and o in oc.WAIVABLE for o in outcomes)
                and len(set(outcomes)) == len(outcomes)):
            raise ExpectationsError(
                f"{where}: 'outcomes' must be a non-empty list of distinct outcomes among "
                f"{', '.join(sorted(oc.WAIVABLE, key=oc.severity))}")
    gpu = entry.get("gpu", ())
    if isinstance(gpu, str):
        gpu = (gpu,)
    if not (isinstance(gpu, (list, tuple)) and all(isinstance(g, str) and g for g in gpu)):
        raise ExpectationsError(f"{where}: 'gpu' must be a glob or a list of globs")
    expires = entry.get("expires")
    if expires is not None and not (isinstance(expires, dt.date)
                                    and not isinstance(expires, dt.datetime)):
        raise ExpectationsError(f"{where}: 'expires' must be a TOML date (2027-03-31)")
    return Waiver(id=f"W{i + 1}", reason=reason.strip(), link=link,
                  clause=clause, test=test, gpu=tuple(gpu), expires=expires,
                  outcomes=frozenset(outcomes) if outcomes else oc.WAIVED_BY_DEFAULT,
                  explicit_outcomes=outcomes is not None)


def load(path: Path) -> Expectations:
    try:
        raw = read_regular(path, MAX_BYTES, follow_symlinks=True)
    except UnusableFile as exc:
        raise ExpectationsError(f"cannot read expectations file: {exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ExpectationsError(f"cannot read expectations file {path}: "
                                f"{str(exc).splitlines()[0][:200]}") from None
    except (RecursionError, MemoryError):
        raise ExpectationsError(f"cannot read expectations file {path}: nested too deeply "
                                f"for a TOML file of waivers") from None
    unknown = set(data) - {"fork", "waiver"}
    if unknown:
        raise ExpectationsError(f"{path}: unknown top-level key(s) "
                                f"{_short(sorted(unknown), 200)}")
    entries = data.get("waiver", [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: 'waiver' must be an array of tables ([[waiver]])")
    if len(entries) > MAX_WAIVERS:
        raise ExpectationsError(f"{path}: {len(entries)} waivers, more than the {MAX_WAIVERS} "
                                f"allowed")
    fork = data.get("fork")
    if fork is not None and not (isinstance(fork, str) and len(fork) <= 200
                                 and not _CONTROL.search(fork)):
        raise ExpectationsError(f"{path}: 'fork' must be a one-line string")
    return Expectations(path=path, sha256=hashlib.sha256(raw).hexdigest(), fork=fork,
                        waivers=[_waiver(i, e, path) for i, e in enumerate(entries)])


def activate(expectations: Expectations, gpu_models: list[str],
             today: dt.date | None = None) -> list[Waiver]:
    """Mark out-of-scope and expired waivers; return the ones that may apply."""
    today = today or dt.datetime.now(dt.timezone.utc).date()
    active = []
    for w in expectations.waivers:
        if w.expires is not None and w.expires < today:
            w.status, w.note = EXPIRED, f"expired on {w.expires.isoformat()}"
        elif not w.in_scope(gpu_models):
            w.status = INACTIVE
            w.note = (f"scoped to GPU {', '.join(w.gpu)}; target is "
                      f"{', '.join(gpu_models) or 'simulated'}")
        else:
            w.status = STALE
            active.append(w)
    return active


# --------------------------------------------------------------------------- unknown IDs

_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def _test_modules(root: Path) -> list[str]:
    """Paths (relative, with ``/``) of the test modules under ``root``, as node IDs name them."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
                found.append(Path(dirpath, name).relative_to(root).as_posix())
    return found


def _names(path: Path) -> tuple[set[str], set[str]]:
    """(closed, open) test names a module defines: functions, classes and their methods
    (``Cls::meth``) are closed; classes with bases and names bound otherwise (assignments,
    imports: a Hypothesis state machine's ``TestCase``, an imported test) are open, their
    members unknown."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return set(), {""}          # cannot tell: anything in it may exist
    closed: set[str] = set()
    opened: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            closed.add(node.name)
        elif isinstance(node, ast.ClassDef):
            closed.add(node.name)
            (opened if node.bases else closed).add(node.name)
            closed.update(f"{node.name}::{m.name}" for m in node.body
                          if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            opened.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            opened.update((a.asname or a.name).split(".")[0] for a in node.names)
    return closed, opened


def _known_test(pattern: str, root: Path, modules: list[str]) -> bool:
    """Whether ``pattern`` may match a test defined in ``modules`` (parameters, which are not
    known without collecting, are not checked)."""
    module_glob, sep, name_glob = pattern.partition("::")
    if not sep:   # one glob over whole node IDs: try every module's names
        whole = glob_regex(pattern.split("[", 1)[0])
        for m in modules:
            closed, opened = _names(root / m)
            probes = [f"{m}::{n}" for n in closed]
            probes += [f"{m}::{n}{tail}" for n in opened for tail in ("", "::runTest")]
            if "" in opened or any(whole.fullmatch(p) for p in probes):
                return True
        return False
    name_glob = name_glob.split("[", 1)[0]
    module_re, name_re = glob_regex(module_glob), glob_regex(name_glob)
    for m in modules:
        if not module_re.fullmatch(m):
            continue
        closed, opened = _names(root / m)
        if "" in opened or any(name_re.fullmatch(n) for n in closed | opened):
            return True
        if any(name_glob.startswith(n + "::") for n in opened):
            return True
    return False


def unknown_ids(expectations: Expectations, clauses: Mapping[str, Any], root: Path
                ) -> list[str]:
    """The clause IDs and test globs of ``expectations`` that name nothing of the suite: a
    clause not in SPEC.md (or withdrawn), a test glob that matches no test defined in the
    test modules under ``root`` (``rootdir``: node IDs are relative to it)."""
    unknown: list[str] = []
    modules: list[str] | None = None
    for w in expectations.waivers:
        if w.clause is not None:
            clause = clauses.get(w.clause)
            if clause is None or getattr(clause, "withdrawn", False):
                unknown.append(f"clause {w.clause} ({w.id})")
        elif w.test is not None:
            if modules is None:
                modules = _test_modules(root)
            if not _known_test(w.test, root, modules):
                unknown.append(f"test {_short(w.test, 120)} ({w.id})")
    return unknown


def unknown_ids_message(path: Path | None, unknown: Iterable[str], limit: int = 20) -> str:
    unknown = list(unknown)
    more = f" and {len(unknown) - limit} more" if len(unknown) > limit else ""
    return (f"expectations file {path} names {len(unknown)} unknown ID(s): "
            f"{'; '.join(unknown[:limit])}{more} (clauses must be live clauses of SPEC.md, "
            f"tests must match a test of the suite)")
