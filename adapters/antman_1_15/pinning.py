"""Pin what AntMan 1.15's behaviour fails: ``python -m adapters.antman_1_15.pinning [--write]``.

Certifies the adapter once per deviation switch, that switch alone on (every other off,
``ANTMAN_1_15_OFF``), over the conformance modules that observe it, and once with every
switch on over the union of those modules. Each run is a pytest subprocess with Hypothesis
seed 0 and a per-test timeout, as the broken-fork meta-test runs forks. The result,
``reports/antman_deviations.json``, says for every SPEC.md section 8 entry which tests fail
under its switch, on which clauses, with a pattern of the failure message, and the entry's
text; ``reports/recognition.py`` reads it to recognise AntMan's behaviour in a report, and
``meta_tests/test_antman_1_15_verdict.py`` pins the adapter's verdict to it.

``--write`` replaces the file (written aside, then renamed); without it the command prints
what it found and whether the file is up to date. ``--only D-X,...`` runs those switches
(and no all-on run) and merges them into the file. Exit status 0, 1 when the file differs,
2 on a usage error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.antman_1_15.deviations import (BY_ID, DEVIATIONS, OFF_ENV_VAR,  # noqa: E402
                                             Deviation)
from reports.child_run import (interrupted_by_signals, report_files,  # noqa: E402
                               run_certification)

__all__ = ["RUNTIME", "DATA_PATH", "Run", "certify", "failures_of", "message_pattern",
           "spec_entries", "generate", "load"]

RUNTIME = "adapters.antman_1_15"
DATA_PATH = ROOT / "reports" / "antman_deviations.json"
SPEC_PATH = ROOT / "SPEC.md"
BAD = ("FAIL", "ERROR", "TIMEOUT", "CRASH")
PER_TEST_TIMEOUT_S = 120        # the suite's own limit: a slow machine's test is no failure
RUN_TIMEOUT_S = 1500            # the run with every switch on covers the whole suite
EXIT_GRACE_S = 10
HYPOTHESIS_SEED = 0
COMMAND = "python -m adapters.antman_1_15.pinning --write"


@dataclass
class Run:
    """One conformance subprocess of the adapter and what its report says."""

    off: tuple[str, ...]
    modules: tuple[str, ...]
    returncode: int | None = None
    wall_s: float = 0.0
    output: str = ""
    report: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    def failures(self) -> dict[str, dict[str, Any]]:
        return failures_of(self.report or {})


def _env(off: Iterable[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTMAN_RUNTIME", OFF_ENV_VAR)
           and not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env[OFF_ENV_VAR] = ",".join(sorted(off))
    env["ANTMAN_DEVICE"] = "sim"      # the pin is the same on every host (workers included)
    return env


def certify(modules: Iterable[str], off: Iterable[str], report_dir: Path,
            *, workers: int = 0) -> Run:
    """Run the conformance ``modules`` against the adapter with the switches ``off`` off."""
    off, modules = tuple(sorted(off)), tuple(modules)
    run = Run(off, modules)
    report_dir.mkdir(parents=True, exist_ok=True)
    # the GPU clauses (marked gpu) are deselected: they run only where a GPU is, and AntMan's
    # behaviour is pinned on the simulated device, the same on every host
    cmd = [sys.executable, "-m", "pytest", *modules, "--runtime", RUNTIME, "-m", "not gpu",
           "-p", "no:randomly", "-p", "no:cacheprovider", "-q", "--tb=short",
           "--report-dir", str(report_dir),
           f"--timeout={PER_TEST_TIMEOUT_S}", f"--hypothesis-seed={HYPOTHESIS_SEED}"]
    if workers:
        cmd += ["-n", str(workers)]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        child = run_certification(cmd, cwd=ROOT, env=_env(off), report_dir=report_dir,
                                  log=log, timeout_s=RUN_TIMEOUT_S, grace_s=EXIT_GRACE_S)
    if child.killed:
        run.problems.append(f"killed: {child.killed}")
    run.output, run.returncode, run.wall_s = child.output, child.returncode, child.wall_s
    found = report_files(report_dir)
    if len(found) != 1:
        run.problems.append(f"expected one certification.json, found {len(found)}; output "
                            f"tail:\n{run.output[-3000:]}")
    else:
        run.report = json.loads(found[0].read_text(encoding="utf-8"))
    return run


def failures_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{nodeid: {"outcome", "clauses", "messages"}}`` of the tests that did not pass:
    the clauses each failing test is evidence against and its failures' messages."""
    out = {}
    for t in report.get("tests", []):
        if t["outcome"] not in BAD:
            continue
        clauses = sorted(c for c, o in t.get("clause_outcomes", {}).items() if o in BAD)
        messages = [f.get("message") or "" for f in t.get("failures") or []] \
            or [t.get("message") or t["outcome"]]
        out[t["nodeid"]] = {"outcome": t["outcome"], "clauses": clauses, "messages": messages}
    return out


_VARIABLE = re.compile(r"0x[0-9a-fA-F]+|\d[0-9a-fA-F]*(?:\.[0-9a-fA-F]+)?|/[^\s'\",)\]]+"
                       r"|<[^<>\s]+ at 0x[0-9a-f]+>")


def message_pattern(message: str, limit: int = 160) -> str:
    """A regular expression matching ``message``'s first line with its numbers, addresses
    and paths left open: the same failure in another run (other sizes, temporary paths,
    timings) matches it."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    first = first[:limit]
    parts, last = [], 0
    for m in _VARIABLE.finditer(first):
        parts.append(re.escape(first[last:m.start()]))
        parts.append(r"\S+?" if m.group().startswith(("/", "<")) else r"[0-9a-fA-Fx.]+")
        last = m.end()
    parts.append(re.escape(first[last:]))
    return "".join(parts)


_ENTRY = re.compile(r"^- \*\*(D-[A-Z]+-\d+)\*\* ")


def spec_entries(path: Path = SPEC_PATH) -> dict[str, dict[str, str]]:
    """``{id: {"text", "reason"}}`` of SPEC.md section 8's entries (text without markup)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## 8."))
    entries: dict[str, list[str]] = {}
    current = None
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        m = _ENTRY.match(line)
        if m:
            current = m.group(1)
            entries[current] = [line[2:]]
        elif current and line.startswith("  ") and line.strip():
            entries[current].append(line.strip())
        elif not line.strip() or line.startswith("#"):
            current = None
    result = {}
    for ident, parts in entries.items():
        text = re.sub(r"\*\*|`", "", " ".join(parts)).strip()
        after = text.split("→", 1)[1] if "→" in text else text
        spec_side, _, why = after.partition("reason:")
        spec_side, why = spec_side.strip().rstrip(";").strip(), why.strip()
        # "reason: §11.3" names a section of the behaviour notes: say what the spec does
        reason = why if why and not re.fullmatch(r"§[\d.]+\.?", why) \
            else f"{spec_side} ({why.rstrip('.')})" if why else spec_side
        result[ident] = {"text": text, "reason": reason}
    return result


def _switch_modules(d: Deviation) -> tuple[str, ...]:
    return d.modules


def all_modules() -> tuple[str, ...]:
    """The run with every switch on covers the whole conformance suite, not only the modules
    the switches are observed in: AntMan as shipped also fails tests no switch alone was
    run against (a combination, or a module outside every switch's list), and a report must
    recognise those too."""
    return tuple(sorted(f"conformance/{p.name}"
                        for p in (ROOT / "conformance").glob("test_*.py")))


#: Tests whose bounds are real time or CPU time: on a loaded machine they fail whatever the
#: runtime; such a failure is set apart unless it is on a clause of the switch.
LOAD_SENSITIVE = ("conformance/test_resource_management_faults.py::test_large_document_costs",
                  "conformance/test_resource_management_faults.py::test_deep_value_costs",
                  "conformance/test_resource_management_faults.py::test_deep_ignored_member",
                  # a 100 000-level document, its settle wait bounded in real time
                  "conformance/test_resource_management.py::test_malformed_document_changes_"
                  "nothing[deep_nesting]")


def load_bound(nodeid: str, failure: dict[str, Any]) -> bool:
    """A failure the machine may decide: a TIMEOUT, or a test of LOAD_SENSITIVE."""
    return failure["outcome"] == "TIMEOUT" or nodeid.startswith(LOAD_SENSITIVE)


def set_apart(nodeid: str, failure: dict[str, Any], pinned: Collection[str]) -> bool:
    """Whether a failure of the run with every switch on is set apart from its verdict: a
    load-bound failure of a test no switch is pinned to fail. One rule for the pin and for
    the runs compared with it, so that a test a switch fails for certain (its failure a
    TIMEOUT or not) is in the pinned verdict whenever it fails in a later run."""
    return load_bound(nodeid, failure) and nodeid not in pinned


def _record(run: Run, clauses: Iterable[str] | None = None,
            pinned: Collection[str] = frozenset()) -> tuple[dict[str, Any], list[str]]:
    """The run's failures, and apart the load-bound ones (a test that ran out of time on a
    loaded machine, not the deviation's doing: a suite whose own per-test limit is reached
    is not evidence of AntMan's behaviour): for a switch's run, those on none of its
    ``clauses``; for the run with every switch on (``clauses`` None), those of tests no
    switch is ``pinned`` to fail."""
    keep = set(clauses) if clauses is not None else None
    out, slow = {}, []
    for nodeid, f in sorted(run.failures().items()):
        if (set_apart(nodeid, f, pinned) if keep is None
                else load_bound(nodeid, f) and not keep & set(f["clauses"])):
            slow.append(nodeid)
            continue
        out[nodeid] = _described(f, load_bound(nodeid, f))
    return out, slow


def _described(failure: dict[str, Any], bound: bool = False) -> dict[str, Any]:
    """A failure as the pin keeps it: outcome, clauses and patterns of its messages; a
    load-bound one (``bound``) is marked so, for its message depends on the machine (a
    document read past the CPU-time bound here runs out of the test's time there)."""
    described = {"outcome": failure["outcome"], "clauses": failure["clauses"],
                 "patterns": sorted({message_pattern(m) for m in failure["messages"]})}
    if bound:
        described["load_bound"] = True
    return described


def generate(ids: Iterable[str], *, all_on: bool, jobs: int, base: Path,
             all_on_workers: int | None = None, progress=print) -> dict[str, Any]:
    """Run the switches ``ids`` alone (and every switch on, with ``all_on``, on
    ``all_on_workers`` xdist workers: by default two when it runs alone, none beside the
    switches' runs)."""
    runs: dict[str, concurrent.futures.Future[Run]] = {}
    everyone = [d.id for d in DEVIATIONS]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for ident in ids:
            d = BY_ID[ident]
            if d.patches and d.modules:
                runs[ident] = pool.submit(certify, d.modules,
                                          [i for i in everyone if i != ident], base / ident)
        if all_on:      # the whole suite: two xdist workers when it runs alone
            runs["*"] = pool.submit(certify, all_modules(), (), base / "all-on",
                                    workers=all_on_workers if all_on_workers is not None
                                    else 2 if not runs and jobs > 1 else 0)
        results = {}
        for key, future in runs.items():
            run = future.result()
            results[key] = run
            progress(f"{key:11} {run.wall_s:6.1f} s  {len(run.failures()):3} failing"
                     f"{'  ' + '; '.join(run.problems) if run.problems else ''}")
    return results


def document(results: dict[str, Run], previous: dict[str, Any] | None) -> dict[str, Any]:
    entries = spec_entries()
    old = (previous or {}).get("deviations", {})
    deviations = {}
    for d in DEVIATIONS:
        status = ("not_implemented" if d.not_implemented else
                  "unobservable" if d.unobservable else "switch")
        record = {"clauses": list(d.clauses), "status": status,
                  "antman": d.antman, "entry": entries.get(d.id, {}).get("text", ""),
                  "reason": entries.get(d.id, {}).get("reason", ""),
                  "why_not": d.not_implemented or d.unobservable,
                  "bounded": d.bounded, "modules": list(d.modules)}
        if status != "switch":
            record["failures"], record["timed_out"] = {}, []
        elif d.id in results:
            record["failures"], record["timed_out"] = _record(
                results[d.id], set(d.clauses) | set(d.also))
        else:
            record["failures"] = old.get(d.id, {}).get("failures", {})
            record["timed_out"] = old.get(d.id, {}).get("timed_out", [])
        deviations[d.id] = record
    if "*" in results:
        pinned = {n for dev in deviations.values() for n in dev["failures"]}
        kept, slow = _record(results["*"], pinned=pinned)
        every = results["*"].failures()
        all_on = {"modules": list(all_modules()), "timed_out": slow, "failures": kept,
                  # failing only with several switches on: no switch alone fails them
                  "only_together": sorted(set(kept) - pinned),
                  # how the timed-out and load-sensitive ones failed: not pinned as a set
                  # (the machine decides whether they fail), but recognised when they do
                  "unstable": {n: _described(every[n], True) for n in slow}}
    else:
        all_on = dict((previous or {}).get("all_on", {"modules": [], "failures": {},
                                                      "timed_out": []}))
        # the switches just run change which of the kept all-on failures no switch explains
        pinned = {n for dev in deviations.values() for n in dev["failures"]}
        all_on["only_together"] = sorted(set(all_on.get("failures", {})) - pinned)
    return {"generated_by": COMMAND, "runtime": RUNTIME, "hypothesis_seed": HYPOTHESIS_SEED,
            "per_test_timeout_s": PER_TEST_TIMEOUT_S, "all_on": all_on,
            "deviations": deviations}


def load(path: Path = DATA_PATH) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def write(doc: dict[str, Any], path: Path = DATA_PATH) -> None:
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adapters.antman_1_15.pinning",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace {DATA_PATH.name}")
    parser.add_argument("--only", default="", help="comma-separated switches to run again "
                                                   "(\"all-on\": the run with every switch on)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    parser.add_argument("--all-on-workers", type=int, default=None,
                        help="xdist workers of the run with every switch on (default: 2 when "
                             "it runs alone, none beside the switches' runs)")
    parser.add_argument("--keep", type=Path, help="folder that keeps the runs' reports")
    parser.add_argument("--from", dest="source", type=Path,
                        help="build the file from the reports a --keep folder holds (no runs)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in BY_ID and s != "all-on"]
    workers = args.all_on_workers
    if unknown or args.jobs < 1 or (workers is not None and not 0 <= workers <= 64):
        print(f"pinning: unknown deviation(s) {', '.join(unknown)}" if unknown
              else "pinning: --jobs must be at least 1" if args.jobs < 1
              else "pinning: --all-on-workers must be from 0 to 64", file=sys.stderr)
        return 2
    previous = load() if DATA_PATH.exists() else None
    if args.source is not None:
        results = {}
        for ident in [d.id for d in DEVIATIONS] + ["*"]:
            found = report_files(args.source / ("all-on" if ident == "*" else ident))
            if found and (not only or ident in only or (ident == "*" and "all-on" in only)):
                results[ident] = Run((), (), report=json.loads(found[-1].read_text("utf-8")))
        doc = document(results, previous)
        if args.write:
            write(doc)
            print(f"wrote {DATA_PATH.relative_to(ROOT)} from {args.source}")
        return 0
    try:                   # stopped by a signal, it kills its pytest children (child_run)
        with interrupted_by_signals(), \
                tempfile.TemporaryDirectory(prefix="antman-pin-") as tmp:
            base = args.keep or Path(tmp)
            results = generate([s for s in only if s != "all-on"] if only
                               else [d.id for d in DEVIATIONS],
                               all_on=not only or "all-on" in only, jobs=args.jobs, base=base,
                               all_on_workers=args.all_on_workers)
    except KeyboardInterrupt:
        print("pinning: stopped; nothing written", file=sys.stderr)
        return 130
    for key, run in results.items():
        if run.problems and run.report is not None:     # e.g. AntMan's threads kept it alive
            print(f"{key}: {'; '.join(run.problems)[:300]}", file=sys.stderr)
    broken = {k: r.problems for k, r in results.items() if r.report is None}
    if broken:
        for key, problems in broken.items():
            print(f"{key}: {'; '.join(problems)[:2000]}", file=sys.stderr)
        return 1
    doc = document(results, previous)
    if args.write:
        write(doc)
        print(f"wrote {DATA_PATH.relative_to(ROOT)}")
        return 0
    same = previous == doc
    print(f"{DATA_PATH.relative_to(ROOT)} is {'up to date' if same else 'OUT OF DATE'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
