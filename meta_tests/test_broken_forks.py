"""The suite catches broken forks: each fork of meta_tests/broken_forks/ is rejected on its clause.

Every fork (``meta_tests.broken_forks.<name>``, one broken clause each) is certified in its
own pytest subprocess over the conformance modules it declares, and the reference runtime
over the union of those modules. The subprocesses run concurrently (two at a time by
default; ``ANTMAN_META_FORK_WORKERS`` overrides): without xdist a module-scoped fixture
launches every selected run up front and each parametrized test waits for its own; under
xdist each worker runs the fork of the test it was given, so the xdist workers provide the
concurrency. Each run uses Hypothesis seed 0 (an outcome is reproducible), short
tracebacks and a per-test timeout of ``PER_TEST_TIMEOUT_S``.

A fork is caught when its ``certification.json`` is valid against
``reports/schema/certification.schema.json``, the verdict is not CERTIFIED, the verdict's
reasons name the broken clause (when it is on the must-pass list), a test of that clause has
the clause's outcome, and that outcome is one the fork declares (FAIL; ERROR or TIMEOUT
where the breakage is a hang that the suite's bounded waits or the timeout end). A fork
declaring ``KNOWN_GAP`` is reported XFAIL while the suite does not catch it, and fails
once it does (so that the declaration is removed). The reference
run must have no clause and no test that failed, errored, timed out or crashed.

One bug, one clause: the must-pass clauses a fork's run fails must be exactly its own
clause, apart from the clauses it declares in ``ALSO_BREAKS`` (a second clause the one bug
truly breaks, with the reason). Each fork test records whether it was exact, justified or
misattributed; ``meta_tests/conftest.py`` prints the precision (forks whose failing
must-pass clauses are exactly their clause, over all forks) and the justified pairs in the
terminal summary. No test of a fork ends TIMEOUT unless the fork declares TIMEOUT (a
failing property test ends FAIL, conformance/shrinking.py); the memory-stack forks run the
stateful machine of their area too, which pins that.

``python meta_tests/test_broken_forks.py [DIR]`` runs everything and prints, per fork, its
clause's outcome and every other clause that did not pass (``DIR`` keeps the reports).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:                      # run as a script
    sys.path.insert(0, str(ROOT))

from meta_tests.broken_forks import ForkDeclaration, declarations  # noqa: E402
from reports.child_run import report_files, run_certification  # noqa: E402
from reports.writer import validation_errors  # noqa: E402

REFERENCE = "reference_runtime"
BAD = ("FAIL", "ERROR", "TIMEOUT", "CRASH")
PER_TEST_TIMEOUT_S = 45          # a deadlocked fork's test ends as TIMEOUT, not after 120 s
RUN_TIMEOUT_S = 450              # a whole conformance subprocess (its watchdog reports by ~200 s)
RUN_BUDGET_S = 150               # its own budget: it reports before RUN_TIMEOUT_S, even when a
                                 # hang holds the interpreter (budget + test limit + 30 s grace)
#: The reference's run over every fork's modules is most of the suite in one process (about
#: 110 s alone on a 2-core machine, more beside the other meta-tests): its own bounds.
REFERENCE_RUN_BUDGET_S = 420
REFERENCE_RUN_TIMEOUT_S = 520    # budget + test limit + 30 s grace, and some
EXIT_GRACE_S = 5                 # from the report to the end of the process
WATCHDOG_REPORT_S = 60           # from a killed process to its watchdog's report: the journal's
                                 # watchdog (reports/journal.py) writes it after the kill
HYPOTHESIS_SEED = 0              # the same examples on every run: an outcome is reproducible
FORKS = declarations()


@dataclass
class RunResult:
    """One conformance subprocess and what its report says."""

    runtime: str
    modules: tuple[str, ...]
    returncode: int | None
    wall_s: float
    output: str
    report: dict[str, Any] | None = None
    report_path: Path | None = None
    hung_at_exit: bool = False                           # killed after its report
    problems: list[str] = field(default_factory=list)   # harness-level failures

    def clause_outcomes(self) -> dict[str, str]:
        return {c["id"]: c["outcome"] for c in (self.report or {}).get("clauses", [])}

    def bad_clauses(self) -> dict[str, str]:
        return {c: o for c, o in self.clause_outcomes().items() if o in BAD}

    def bad_tests(self) -> dict[str, str]:
        return {t["nodeid"]: t["outcome"] for t in (self.report or {}).get("tests", [])
                if t["outcome"] in BAD}

    def describe(self) -> str:
        bad = self.bad_clauses()
        return (f"{self.runtime} over {' '.join(self.modules)}: exit {self.returncode}, "
                f"{self.wall_s:.1f} s; clauses not passing: "
                f"{', '.join(f'{c} {o}' for c, o in sorted(bad.items())) or 'none'}"
                f"{'; killed: did not exit after its report' if self.hung_at_exit else ''}"
                f"{'; ' + '; '.join(self.problems) if self.problems else ''}"
                f"; report {self.report_path}")


def subprocess_env() -> dict[str, str]:
    """The caller's environment, minus what would select another runtime or pytest worker."""
    return {k: v for k, v in os.environ.items()
            if k != "ANTMAN_RUNTIME" and not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}


def certify(runtime: str, modules: tuple[str, ...], report_dir: Path) -> RunResult:
    """Run the conformance ``modules`` against ``runtime``; read and validate its report.

    A deadlocked fork can leave a non-daemon thread blocked, so that the process never exits
    after writing its report: it is killed ``EXIT_GRACE_S`` after the report appeared, and
    the run is marked ``hung_at_exit``. A process killed by a signal (a hang no signal inside
    it reaches, stopped by the run's watchdog) gets its report from the watchdog just after
    the kill: it is waited for up to ``WATCHDOG_REPORT_S``.
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    budget_s, timeout_s = ((REFERENCE_RUN_BUDGET_S, REFERENCE_RUN_TIMEOUT_S)
                           if runtime == REFERENCE else (RUN_BUDGET_S, RUN_TIMEOUT_S))
    # --tb=short: a long traceback shows repr() of the test's arguments, and the repr of a
    # deadlocked runtime object (one taking the lock a stuck thread holds) never returns.
    cmd = [sys.executable, "-m", "pytest", *modules, "--runtime", runtime,
           "-p", "no:cacheprovider", "-q", "--tb=short", "--report-dir", str(report_dir),
           f"--timeout={PER_TEST_TIMEOUT_S}", f"--hypothesis-seed={HYPOTHESIS_SEED}",
           f"--run-budget-s={budget_s}"]
    log_path = report_dir.with_name(report_dir.name + ".log")
    with open(log_path, "w+", encoding="utf-8") as log:
        child = run_certification(cmd, cwd=ROOT, env=subprocess_env(), report_dir=report_dir,
                                  log=log, timeout_s=timeout_s, grace_s=EXIT_GRACE_S,
                                  report_wait_s=WATCHDOG_REPORT_S)
    output = child.output
    result = RunResult(runtime, modules, child.returncode, child.wall_s, output,
                       hung_at_exit=child.killed is not None)
    found = report_files(report_dir)
    if len(found) != 1:
        result.problems.append(f"expected one certification.json under {report_dir}, found "
                               f"{len(found)}; output tail:\n{output[-3000:]}")
        return result
    result.report_path = found[0]
    result.report = json.loads(found[0].read_text(encoding="utf-8"))
    for error in validation_errors(result.report):
        result.problems.append(f"certification.json invalid against the schema at "
                               f"{error[:300]}")
    return result


def union_of_modules() -> tuple[str, ...]:
    return tuple(sorted({m for fork in FORKS for m in fork.modules}))


PRECISION_PROPERTY = "fork_attribution"


def failing_must_pass(run: RunResult) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in (run.report or {}).get("clauses", [])
            if c["must_pass"] and c["outcome"] in BAD}


def attribution(fork: ForkDeclaration, run: RunResult) -> dict[str, Any]:
    """Whether the fork's failing must-pass clauses are exactly its clause ("exact"), its
    clause and declared ``ALSO_BREAKS`` ("justified"), or more ("misattributed")."""
    failing = failing_must_pass(run)
    also = dict(fork.also_breaks)
    others = sorted(set(failing) - {fork.breaks})
    extras = [c for c in others if c not in also]
    status = "misattributed" if extras else "justified" if others else "exact"
    return {"fork": fork.name, "breaks": fork.breaks, "status": status,
            "justified": {c: also[c] for c in others if c in also},
            "extras": {c: failing[c] for c in extras},
            "unused": sorted(set(also) - set(failing))}


def default_workers() -> int:
    return max(1, int(os.environ.get("ANTMAN_META_FORK_WORKERS", "2")))


class ForkRuns:
    """Futures of the certification runs, launched up front or on first request."""

    def __init__(self, base: Path, *, workers: int,
                 eager: list[ForkDeclaration] | None = None, reference: bool = False) -> None:
        self.base = base
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers,
                                                          thread_name_prefix="meta-fork")
        self.futures: dict[str, concurrent.futures.Future[RunResult]] = {}
        eager = eager or []
        for fork in eager:         # expected hangs (bounded by timeouts) are the slowest
            if "TIMEOUT" in fork.outcomes:
                self.submit(fork.module, fork.modules)
        if reference:
            self.submit(REFERENCE, union_of_modules())
        for fork in eager:
            self.submit(fork.module, fork.modules)

    def submit(self, runtime: str, modules: tuple[str, ...]
               ) -> concurrent.futures.Future[RunResult]:
        if runtime not in self.futures:
            folder = self.base / runtime.rsplit(".", 1)[-1]
            self.futures[runtime] = self.pool.submit(certify, runtime, modules, folder)
        return self.futures[runtime]

    def result(self, runtime: str, modules: tuple[str, ...]) -> RunResult:
        return self.submit(runtime, modules).result()

    def close(self) -> None:
        for future in self.futures.values():
            future.cancel()
        self.pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def fork_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Without xdist, every selected run starts at once (``default_workers()`` at a time);
    under xdist each worker runs the fork of the test it is given, one at a time."""
    base = tmp_path_factory.mktemp("broken-forks")
    if hasattr(request.config, "workerinput"):
        runs = ForkRuns(base, workers=1)
    else:
        items = request.session.items
        chosen = {item.callspec.params["fork"].name for item in items
                  if getattr(item, "originalname", "") == "test_fork_is_rejected_on_its_clause"}
        runs = ForkRuns(base, workers=default_workers(),
                        eager=[f for f in FORKS if f.name in chosen],
                        reference=any(item.name == "test_reference_passes_the_selection"
                                      for item in items))
    yield runs
    runs.close()


def test_forks_are_declared() -> None:
    assert len(FORKS) >= 15, f"only {len(FORKS)} broken forks in meta_tests/broken_forks/"
    from conformance import spec
    known = spec.load_clauses()
    for fork in FORKS:
        assert fork.breaks in known, f"{fork.name}: BREAKS = {fork.breaks!r} is no clause"
        assert fork.outcomes and set(fork.outcomes) <= set(BAD), \
            f"{fork.name}: OUTCOMES = {fork.outcomes} must be drawn from {BAD}"
        assert fork.modules, f"{fork.name}: no conformance module to run"
        for module in fork.modules:
            path = module.split("::")[0]
            assert (ROOT / path).is_file(), f"{fork.name}: {path} does not exist"
        assert fork.summary.startswith(f"Breaks {fork.breaks} "), \
            f"{fork.name}: the docstring must start with 'Breaks {fork.breaks} (...)'"


def test_the_ci_sample_covers_every_area() -> None:
    areas = {f.breaks.split("-")[0] for f in FORKS}
    sampled = {f.breaks.split("-")[0] for f in FORKS if f.name in SAMPLE}
    assert sampled == areas, f"areas without a fork in CI's sample: {sorted(areas - sampled)}"
    assert len(SAMPLE) == len(areas)


@pytest.mark.timeout(REFERENCE_RUN_TIMEOUT_S + 80)   # waits for that run, bounded above
def test_reference_passes_the_selection(fork_runs: ForkRuns) -> None:
    run = fork_runs.result(REFERENCE, union_of_modules())
    assert not run.problems, run.describe()
    assert not run.bad_clauses() and not run.bad_tests(), (
        f"the reference runtime must pass every selected test: {run.describe()}; tests: "
        f"{run.bad_tests()}")
    assert run.returncode == 0, f"{run.describe()}\n{run.output[-3000:]}"
    outcomes = run.clause_outcomes()
    for fork in FORKS:
        assert outcomes.get(fork.breaks) == "PASS", (
            f"{fork.breaks} (broken by {fork.name}) is {outcomes.get(fork.breaks)} for the "
            f"reference runtime; it must PASS for the fork's FAIL to mean anything")


def ci_sample(forks: list[ForkDeclaration]) -> set[str]:
    """CI's sample of the catalogue: for each area (the clause prefix), the first fork by name
    that declares FAIL alone over one conformance module, so that every area's rejection is
    checked on each change in minutes; the others are marked ``fork_catalogue`` and run with
    ``tox -e forks`` (the whole catalogue, hangs included)."""
    chosen: dict[str, str] = {}
    for fork in sorted(forks, key=lambda f: f.name):
        area = fork.breaks.split("-")[0]
        if fork.outcomes == ("FAIL",) and len(fork.modules) == 1 and not fork.known_gap:
            chosen.setdefault(area, fork.name)
    return set(chosen.values())


SAMPLE = ci_sample(FORKS)


@pytest.mark.timeout(600)   # waits for its fork's run: a hang ends at that run's budget (150 s)
@pytest.mark.parametrize("fork", [
    pytest.param(f, id=f.name, marks=() if f.name in SAMPLE else pytest.mark.fork_catalogue)
    for f in FORKS])
def test_fork_is_rejected_on_its_clause(fork_runs: ForkRuns, fork: ForkDeclaration,
                                        record_property: Any) -> None:
    run = fork_runs.result(fork.module, fork.modules)
    assert not run.problems, run.describe()
    report = run.report
    assert report is not None
    assert report["runtime"]["module"] == fork.module, report["runtime"]
    outcome = run.clause_outcomes().get(fork.breaks)
    if fork.known_gap:
        if outcome in fork.outcomes:
            pytest.fail(f"{fork.name} is caught now ({fork.breaks} {outcome}): remove its "
                        f"KNOWN_GAP")
        pytest.xfail(f"known gap in the suite: {fork.known_gap} ({fork.breaks} {outcome})")
    assert outcome in fork.outcomes, (
        f"{fork.name} ({fork.summary}) was not caught: {fork.breaks} is {outcome}, expected "
        f"one of {fork.outcomes}. {run.describe()}")
    verdict = report["verdict"]
    assert verdict["status"] != "CERTIFIED", f"{fork.name} was CERTIFIED: {run.describe()}"
    clause = next(c for c in report["clauses"] if c["id"] == fork.breaks)
    if clause["must_pass"]:
        named = {c for r in verdict["reasons"] for c in r["clauses"]
                 if r["code"] != "mustpass-not-run"}
        assert fork.breaks in named, (
            f"{fork.name}: the verdict's reasons do not name {fork.breaks}: "
            f"{[r['message'] for r in verdict['reasons']]}")
    failing = [t["nodeid"] for t in report["tests"]
               if fork.breaks in t["clauses"] and t["outcome"] in fork.outcomes]
    assert failing, f"{fork.name}: no test of {fork.breaks} has an outcome in {fork.outcomes}"
    if "TIMEOUT" not in fork.outcomes:
        hung = [t["nodeid"] for t in report["tests"] if t["outcome"] == "TIMEOUT"]
        assert not hung, f"{fork.name}: FAIL reported as TIMEOUT: {hung}. {run.describe()}"
    found = attribution(fork, run)
    record_property(PRECISION_PROPERTY, json.dumps(found))
    assert not found["extras"], (
        f"{fork.name} breaks {fork.breaks}, but the report also blames "
        f"{found['extras']} (declare a clause the bug truly breaks in ALSO_BREAKS, with the "
        f"reason, or fix the check that blames it). {run.describe()}")
    assert not found["unused"], (
        f"{fork.name}: ALSO_BREAKS {found['unused']} did not fail: remove the declaration")


def precision_lines(found: list[dict[str, Any]]) -> list[str]:
    """The attribution precision of the forks and the justified pairs, in words."""
    exact = [f for f in found if f["status"] == "exact"]
    justified = [f for f in found if f["status"] == "justified"]
    wrong = [f for f in found if f["status"] == "misattributed"]
    lines = [f"attribution precision: {len(exact)} of {len(found)} forks fail exactly their own "
             f"must-pass clause; {len(justified)} more fail a second clause the bug truly "
             f"breaks; {len(wrong)} misattributed"]
    for f in justified:
        for clause, reason in f["justified"].items():
            lines.append(f"  justified: {f['fork']} ({f['breaks']}) also {clause}: {reason}")
    for f in wrong:
        lines.append(f"  MISATTRIBUTED: {f['fork']} ({f['breaks']}) also "
                     + ", ".join(f"{c} {o}" for c, o in f["extras"].items()))
    return lines


def main(argv: list[str]) -> int:
    """Certify every fork and the reference; print the clauses that did not pass.

    ``argv[0]``, when given, is a folder that keeps the reports and logs of the runs.
    """
    with tempfile.TemporaryDirectory(prefix="broken-forks-") as tmp:
        base = Path(argv[0]) if argv else Path(tmp)
        start = time.monotonic()
        runs = ForkRuns(base, workers=default_workers(), eager=FORKS, reference=True)
        try:
            results = {rt: f.result() for rt, f in runs.futures.items()}
        finally:
            runs.close()
        wall = time.monotonic() - start
        as_expected = True
        for fork in FORKS:
            run = results[fork.module]
            outcome = run.clause_outcomes().get(fork.breaks)
            caught = outcome in fork.outcomes and not run.problems
            as_expected &= caught != bool(fork.known_gap)
            label = ("caught" if caught else "MISSED") + (" (known gap)" if fork.known_gap
                                                          else "")
            others = {c: o for c, o in run.bad_clauses().items() if c != fork.breaks}
            print(f"{label:20} {fork.name:28} {fork.breaks:7} {outcome or '-':8} "
                  f"{run.wall_s:5.1f} s  also: "
                  f"{', '.join(f'{c} {o}' for c, o in sorted(others.items())) or '-'}"
                  f"{'  (killed after its report)' if run.hung_at_exit else ''}")
            for problem in run.problems:
                print(f"    {problem[:2000]}")
        ref = results[REFERENCE]
        print(f"reference: {ref.describe()}")
        found = [attribution(fork, results[fork.module]) for fork in FORKS]
        for line in precision_lines(found):
            print(line)
        print(f"{len(FORKS)} forks, wall time {wall:.1f} s, "
              f"{'as expected' if as_expected else 'NOT as expected'}")
        return 0 if as_expected and not ref.bad_clauses() and not ref.problems else 1

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
