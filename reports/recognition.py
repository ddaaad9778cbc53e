"""Recognise AntMan 1.15's own behaviour in a certification's failures (SPEC.md section 8).

Where a runtime fails a clause the way AntMan 1.15 does (TensorFlow 1.15.4 with AntMan's
changes), the report says so beside the failure, with the section 8 entry that explains why
the specification differs: "AntMan 1.15 behaves this way too (D-x): the specification
differs because ...". Where it fails in a way AntMan does not, the report says that it
"differs from both the specification and AntMan 1.15".

Nothing here is kept by hand: ``reports/antman_deviations.json`` is generated from the
pinned certification of ``adapters.antman_1_15`` (``python -m adapters.antman_1_15.pinning
--write``): for each section 8 entry, the tests that fail when only its switch is on, the
clauses each fails and patterns of the failure messages. A failing test is recognised as a
deviation's when that deviation's pinned run failed the same test on one of the clauses
the test fails now, with a failure message matching one of the pinned patterns; where the
pinned failure is marked ``load_bound`` (a TIMEOUT, or a test whose bound is CPU or real
time), on one of those clauses whatever its message, since the machine decides which of the
test's checks gives out first.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Iterable

__all__ = ["DATA_PATH", "BAD", "load_pins", "recognise", "annotate", "note_of",
           "pinned_clauses", "SAME", "DIFFERS", "ALL_ON"]

DATA_PATH = Path(__file__).resolve().parent / "antman_deviations.json"
BAD = ("FAIL", "ERROR", "TIMEOUT", "CRASH")
SAME = "same-as-antman"
DIFFERS = "differs-from-both"
ALL_ON = "all-on"          # AntMan as shipped: recognised by the run with every switch on
_PREFIX = "AntMan 1.15 behaves this way too"
_DIFFERS_NOTE = "differs from both the specification and AntMan 1.15"


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime_ns: int) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("deviations"), dict):
        return None
    all_on = data.get("all_on") or {}
    for failures in [*(d.get("failures") for d in data["deviations"].values()),
                     all_on.get("failures"), all_on.get("unstable")]:
        for failure in (failures or {}).values():
            failure["_compiled"] = [re.compile(p) for p in failure.get("patterns", [])]
    return data


def load_pins(path: Path = DATA_PATH) -> dict[str, Any] | None:
    """The pinned deviations, or None when the file is missing or unreadable."""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    return _load(str(path), mtime)


def _first_line(message: str) -> str:
    text = (message or "").strip()
    return text.splitlines()[0] if text else ""


def _same_failure(pinned: dict[str, Any] | None, clauses: set[str], lines: list[str]) -> bool:
    if not pinned or not clauses & set(pinned.get("clauses", ())):
        return False
    if pinned.get("load_bound") is True:    # its message is the machine's: the clause decides
        return True
    compiled = pinned.get("_compiled") or [re.compile(p) for p in pinned.get("patterns", [])]
    return any(p.match(line) for p in compiled for line in lines)


def recognise(nodeid: str, clauses: Iterable[str], messages: Iterable[str],
              pins: dict[str, Any] | None = None) -> list[str]:
    """The section 8 entries whose pinned AntMan run failed ``nodeid`` on one of
    ``clauses`` with a message like one of ``messages``; else ``[ALL_ON]`` when AntMan as
    shipped (every switch on, the whole suite) failed it so, though no switch alone does."""
    pins = load_pins() if pins is None else pins
    if not pins:
        return []
    clauses = set(clauses)
    lines = [_first_line(m) for m in messages]
    found = [ident for ident, dev in pins["deviations"].items()
             if _same_failure((dev.get("failures") or {}).get(nodeid), clauses, lines)]
    all_on = pins.get("all_on") or {}
    if not found and any(_same_failure((all_on.get(kind) or {}).get(nodeid), clauses, lines)
                         for kind in ("failures", "unstable")):
        found = [ALL_ON]
    return found


def pinned_clauses(ident: str, nodeid: str, pins: dict[str, Any]) -> list[str]:
    """The clauses the pinned run of ``ident`` (a switch, or ``ALL_ON``) failed ``nodeid`` on."""
    if ident != ALL_ON:
        return list(pins["deviations"][ident]["failures"][nodeid]["clauses"])
    all_on = pins.get("all_on") or {}
    pinned = ((all_on.get("failures") or {}).get(nodeid)
              or (all_on.get("unstable") or {}).get(nodeid) or {})
    return list(pinned.get("clauses", []))


def note_of(deviations: list[str], pins: dict[str, Any] | None) -> str:
    """The sentence shown beside a failure."""
    if not deviations or not pins:
        return _DIFFERS_NOTE
    parts = []
    for ident in deviations:
        if ident == ALL_ON:
            parts.append(f"{_PREFIX} (AntMan 1.15 as shipped, every section 8 switch on): no "
                         f"single entry produces this failure alone; it comes of several "
                         f"of AntMan's behaviours together")
            continue
        dev = pins["deviations"][ident]
        reason = (dev.get("reason") or dev.get("antman") or "").rstrip(".")
        parts.append(f"{_PREFIX} ({ident}): the specification differs because {reason}."
                     + (f"\n  SPEC.md section 8, {dev['entry']}" if dev.get("entry") else ""))
    return "\n".join(parts)


def annotate(doc: dict[str, Any], pins: dict[str, Any] | None = None) -> dict[str, Any]:
    """Add ``antman`` to every failing test of a certification document and
    ``antman_note`` to every clause failure; returns ``doc``. A document without pins
    (no data file) is left as it is."""
    pins = load_pins() if pins is None else pins
    if not pins:
        return doc
    by_test: dict[str, dict[str, Any]] = {}
    for t in doc.get("tests", []):
        if t.get("outcome") not in BAD:
            continue
        failing = [c for c, o in (t.get("clause_outcomes") or {}).items() if o in BAD] \
            or list(t.get("clauses") or [])
        messages = [f.get("message") or "" for f in t.get("failures") or []] \
            or [t.get("message") or ""]
        found = recognise(t["nodeid"], failing, messages, pins)
        t["antman"] = {"verdict": SAME if found else DIFFERS, "deviations": found,
                       "note": note_of(found, pins)}
        by_test[t["nodeid"]] = t["antman"]
    for c in doc.get("clauses", []):
        for f in c.get("failures") or []:
            seen = by_test.get(f.get("nodeid"))
            if seen is None:
                continue
            # a tagged failure is recognised on the clauses AntMan's run failed; an untagged
            # one is blamed on every clause of its test, and so is its recognition
            own = [d for d in seen["deviations"]
                   if c["id"] in pinned_clauses(d, f["nodeid"], pins)
                   or f.get("tagged") is False]
            f["antman_note"] = note_of(own, pins)
    return doc
