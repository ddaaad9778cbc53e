"""Per-fork expectations file (``--expectations FILE``, TOML): waivers.

::

    fork = "acme-tf"                 # optional, informational

    [[waiver]]
    clause = "BFC-7"                 # a clause ID, or:
    # test = "conformance/test_bfc.py::test_shrink*"   (an fnmatch glob over node IDs)
    reason = "shrink does not coalesce regions yet"
    link = "https://github.com/acme/tf/issues/12"      # required, http(s)
    gpu = ["NVIDIA A100*"]           # optional: globs over the execution target's GPU model
    expires = 2027-03-31             # optional: not applied after this date

A waiver is *applied* when it covers a clause or test whose observed outcome is FAIL, ERROR,
TIMEOUT, CRASH or NOT_SUPPORTED (the clause or test is then WAIVED, never PASS); *unneeded*
when everything it matched passed; *stale* when it matched nothing in the run (unknown
clause, no test ran for it, glob matched no test); *inactive* when its ``gpu`` scope does not
match the execution target; *expired* after ``expires``. A malformed file is a usage error.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

APPLIED = "applied"
UNNEEDED = "unneeded"
STALE = "stale"
INACTIVE = "inactive"
EXPIRED = "expired"

_ID = re.compile(r"^[A-Z][A-Z0-9]*-\d+$")
_LINK = re.compile(r"^https?://\S+$")
_KEYS = {"clause", "test", "reason", "link", "gpu", "expires"}


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
    status: str = STALE
    matched: list[str] = field(default_factory=list)
    note: str = ""

    def in_scope(self, gpu_models: list[str]) -> bool:
        if not self.gpu:
            return True
        return any(fnmatch.fnmatchcase(m, g) for m in gpu_models for g in self.gpu)

    def matches_test(self, nodeid: str) -> bool:
        return self.test is not None and fnmatch.fnmatchcase(nodeid, self.test)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "clause": self.clause, "test": self.test, "reason": self.reason,
            "link": self.link, "gpu": list(self.gpu),
            "expires": self.expires.isoformat() if self.expires else None,
            "status": self.status, "matched": sorted(self.matched), "note": self.note,
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
        raise ExpectationsError(f"{where}: unknown key(s) {sorted(unknown)}")
    clause, test = entry.get("clause"), entry.get("test")
    if (clause is None) == (test is None):
        raise ExpectationsError(f"{where}: give exactly one of 'clause' or 'test'")
    if clause is not None and not (isinstance(clause, str) and _ID.match(clause)):
        raise ExpectationsError(f"{where}: clause {clause!r} is not a clause ID like 'BFC-4'")
    if test is not None and not (isinstance(test, str) and test.strip()):
        raise ExpectationsError(f"{where}: test must be a non-empty node ID glob")
    reason, link = entry.get("reason"), entry.get("link")
    if not (isinstance(reason, str) and reason.strip()):
        raise ExpectationsError(f"{where}: 'reason' is required")
    if not (isinstance(link, str) and _LINK.match(link)):
        raise ExpectationsError(f"{where}: 'link' is required and must be an http(s) URL")
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
                  clause=clause, test=test, gpu=tuple(gpu), expires=expires)


def load(path: Path) -> Expectations:
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ExpectationsError(f"cannot read expectations file {path}: {exc}") from exc
    unknown = set(data) - {"fork", "waiver"}
    if unknown:
        raise ExpectationsError(f"{path}: unknown top-level key(s) {sorted(unknown)}")
    entries = data.get("waiver", [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: 'waiver' must be an array of tables ([[waiver]])")
    fork = data.get("fork")
    if fork is not None and not isinstance(fork, str):
        raise ExpectationsError(f"{path}: 'fork' must be a string")
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
