"""The synchronisation sweep: every lock, notify and snapshot of the reference removed in
turn, each such mutant run ``repeat`` times against the conformance modules of its map, and
each run its map's modules pass against the rest of the suite (as a campaign confirms a
survivor), so a test outside the map still counts and the map's gap is reported.

A race that a test only hopes for kills its mutant now and then; a race the test forces kills
it every time. So the sweep's verdict on a mutant is the number of its runs that killed it,
and a mutant is *caught* only when every run killed it. The mutants are the suite
generator's (``operators``):

- ``lock``: every ``unlock`` mutant (``with <lock>:`` becomes ``if True:``);
- ``notify``: every deleted statement that wakes a waiter (``.notify()``,
  ``.notify_all()``, ``<event>.set()``);
- ``snapshot``: every copy of shared state removed (``list(self._x)`` becomes
  ``(self._x)``): an ``unwrap`` of ``list``, ``dict``, ``tuple``, ``set``, ``frozenset`` or
  ``sorted`` whose argument reads an attribute of ``self`` or of a watched object.

Mutants on the reviewed list are reported with their kind and reason, not run.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .campaign import Campaign, run_campaign
from .equivalents import Equivalent
from .journal import Journal
from .operators import Mutant
from .report import table_cell
from .runner import MutantResult, Options, Run
from .sampling import Population

__all__ = ["KINDS", "SweepEntry", "sweep_kind", "select", "run_keys", "run_sweep",
           "to_markdown"]

KINDS = ("lock", "notify", "snapshot")
_WAKE = re.compile(r"\.(notify|notify_all)\(|\.set\(\)")
_COPY = re.compile(r"(list|dict|tuple|set|frozenset|sorted)\((self|watch)\.")


def sweep_kind(m: Mutant) -> str | None:
    """The sweep kind of a suite-generator mutant, or None when the sweep leaves it out."""
    if m.operator == "unlock":
        return "lock"
    if m.operator == "delete" and "\n" not in m.original and _WAKE.search(m.original):
        return "notify"
    if m.operator == "unwrap" and _COPY.match(m.original):
        return "snapshot"
    return None


def select(population: Population, kinds: tuple[str, ...] = KINDS,
           module: str | None = None) -> list[tuple[str, Mutant]]:
    """The population's mutants of ``kinds`` (of one runtime module when given)."""
    chosen = []
    for m in population.mutants:
        kind = sweep_kind(m)
        if kind in kinds and (module is None or m.module == module):
            chosen.append((kind, m))
    return chosen


@dataclass
class SweepEntry:
    kind: str
    key: str
    where: str                          # module:line
    change: str
    runs: int = 0
    killed: int = 0
    errors: int = 0
    clauses: tuple[str, ...] = ()       # the clauses of the killing tests, as seen
    tests: tuple[str, ...] = ()
    map_gaps: tuple[str, ...] = ()      # conformance modules outside the map that killed it
    listed: str | None = None
    reason: str | None = None

    @property
    def verdict(self) -> str:
        if self.listed:
            return self.listed
        if self.errors:
            return "error"
        return "caught" if self.killed == self.runs else (
            "flaky" if self.killed else "missed")


def run_keys(chosen: list[tuple[str, Mutant]], equivalents: dict[str, Equivalent],
             repeat: int) -> tuple[str, ...]:
    """The keys the sweep runs, in order: each chosen mutant off the reviewed list,
    ``repeat`` times."""
    return tuple(k for k in dict.fromkeys(m.key for _, m in chosen)
                 if k not in equivalents for _ in range(repeat))


def run_sweep(population: Population, equivalents: dict[str, Equivalent],
              chosen: list[tuple[str, Mutant]], *, repeat: int, jobs: int, options: Options,
              work_dir: Path, baseline_run: Run | None,
              progress: Callable[[int, int, MutantResult], None] | None = None,
              journal: Journal | None = None) -> dict[str, Any]:
    """Run every chosen mutant not on the reviewed list ``repeat`` times (a run the map's
    modules pass goes on through the rest of the suite) and return the sweep's data
    (``sweep.json``)."""
    entries = {m.key: SweepEntry(kind, m.key, f"{m.module}:{m.line}", m.describe())
               for kind, m in chosen}
    for key, entry in entries.items():
        listed = equivalents.get(key)
        if listed is not None:
            entry.listed, entry.reason = listed.kind, listed.reason
    keys = run_keys(chosen, equivalents, repeat)
    start = time.time()
    result = run_campaign(population, {}, Campaign(seed="sweep", sample=len(keys),
                                                    options=options, jobs=jobs, confirm=True,
                                                    keys=keys),
                          work_dir=work_dir, baseline_run=baseline_run, progress=progress,
                          journal=journal)
    for r in result.results:
        e = entries[r.key]
        e.runs += 1
        if r.outcome == "killed":
            e.killed += 1
            if r.clause and r.clause not in e.clauses:
                e.clauses += (r.clause,)
            if r.test and r.test not in e.tests:
                e.tests += (r.test,)
            if r.map_gap and r.map_gap not in e.map_gaps:
                e.map_gaps += (r.map_gap,)
        elif r.outcome == "error":
            e.errors += 1
    rows = sorted(entries.values(), key=lambda e: (KINDS.index(e.kind), e.where, e.key))
    counts: dict[str, dict[str, int]] = {}
    for e in rows:
        c = counts.setdefault(e.kind, {})
        c[e.verdict] = c.get(e.verdict, 0) + 1
    return {
        "repeat": repeat, "jobs": jobs, "wall_s": round(time.time() - start, 1),
        "resumed": result.resumed,
        "load_before": list(result.load_before), "load_after": list(result.load_after),
        "baseline": baseline_run.to_json() if baseline_run is not None else None,
        "counts": counts, "runs": len(keys),
        "mutants": [{**vars(e), "clauses": list(e.clauses), "tests": list(e.tests),
                     "map_gaps": list(e.map_gaps), "verdict": e.verdict} for e in rows],
    }


def to_markdown(data: dict[str, Any], header: str) -> str:
    lines = ["# Synchronisation sweep: every lock, notify and snapshot removed in turn",
             "", header, "",
             f"Each mutant ran {data['repeat']} times against its map's conformance modules, "
             f"and a run those passed against the rest of the suite "
             f"({data['jobs']} at once, one core each; {data['wall_s']} s wall). *caught*: "
             f"every run killed it; *flaky*: some did; *missed*: none did. *map gap*: a "
             f"module outside the mutant's map killed it (mutation/targets.py should list "
             f"it)." + (f" Resumed: {data['resumed']} of the {data.get('runs', 'runs')} runs were "
                        f"recorded by an earlier run of this sweep on the same code (its journal) "
                        f"and not run again; the wall time is this run's."
                        if data.get("resumed") else ""), "",
             "| kind | caught | flaky | missed | error | reviewed |", "|---|---|---|---|---|---|"]
    for kind in KINDS:
        c = data["counts"].get(kind, {})
        reviewed = sum(v for k, v in c.items()
                       if k not in ("caught", "flaky", "missed", "error"))
        lines.append(f"| {kind} | {c.get('caught', 0)} | {c.get('flaky', 0)} | "
                     f"{c.get('missed', 0)} | {c.get('error', 0)} | {reviewed} |")
    lines += ["", "| kind | where | change | killed/runs | verdict | clauses | map gap |",
              "|---|---|---|---|---|---|---|"]
    for m in data["mutants"]:
        ratio = f"{m['killed']}/{m['runs']}" if not m["listed"] else "not run"
        verdict = m["verdict"] + (f": {m['reason']}" if m["listed"] else "")
        lines.append(f"| {m['kind']} | {m['where']} | `{table_cell(m['change'][:100])}` | {ratio} | "
                     f"{table_cell(verdict)} | {', '.join(m['clauses'])} | "
                     f"{table_cell(', '.join(m.get('map_gaps', ())))} |")
    return "\n".join(lines) + "\n"
