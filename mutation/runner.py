"""Running the conformance suite against one mutant of the runtime.

A mutant is certified the way a fork is (README, "Certifying a runtime"): the runtime package
is copied, under the module name ``mutant_runtime``, into a directory of its own that goes
first on ``PYTHONPATH``; the mutated file replaces its original in the copy; and pytest runs
the conformance modules with ``--runtime mutant_runtime``. The working tree is never
touched, so mutants can run while the repository is in use, and the tests that start a
subprocess (the worker, the workload command line) start the mutant too, because the
runtime's ``WORKER_COMMAND`` and the tests name the runtime's own package.

Mutants are measured on the simulated device whatever the host has: the tests marked
``gpu`` (SPEC.md section 10, real GPUs observed through NVML) are deselected, in the baseline
as in every mutant run, since one GPU cannot serve many runs at once without their
measurements disturbing each other; the GPU-only mutants are on the reviewed list.

Each pytest run uses one core (no xdist), stops at the first failure (``-x``), runs the
tests with the per-test limit ``test_timeout_s`` and Hypothesis seed 0 without example
database (``mutation.pytest_isolation``), and is killed, with its process group, after
``mutant_timeout_s`` of wall time. Outcome of a run:

- exit status 0: every selected test passed (the mutant survives this run);
- exit status 1: a test failed or errored: killed, by that test (``how`` is ``test``;
  ``timeout`` when the failure is the per-test limit; ``import`` when the mutant cannot
  even be imported, which the suite reports as a failed start);
- exit status 4 saying ``cannot import runtime module``: killed (``import``): the
  certification refuses a runtime that does not import before running any test;
- exit status 4 with a usage error naming the runtime under test (``mutant_runtime``: a
  capability API-2 does not know, a name API-1 asks for missing, a bad ``WORKER_COMMAND``):
  killed (``refused``): the certification refuses such a runtime before any test too;
- exit status 0 with a test skipped that the unmutated runtime runs (the baseline's skips
  are expected; without a baseline, a skip reported NOT_SUPPORTED): killed (``skipped``), as
  a required clause NOT_SUPPORTED makes a certification fail;
- killed after the wall limit: killed (``timeout``), unless its JUnit file shows every
  test passed (it hung on exit): then it survives, with a note; or unless its output had
  grown within the per-test limit before the end (tests were still ending: a host too slow
  for the wall limit, not a hang): then ``error``, no verdict;
- anything else: ``error`` (a problem of the harness, not a verdict on the mutant).

The wall time and the CPU time (user + system, from ``wait4``: the process and the children it
waited for) of every run are recorded: the report gives the cost per mutant.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from .marks import only_clause
from .operators import Mutant, compiles
from .targets import ROOT, RUNTIME_DIR

__all__ = ["COPY_NAME", "STOP", "Interrupted", "Options", "Run", "Workspace", "run_pytest",
           "classify", "first_failure"]

COPY_NAME = "mutant_runtime"
#: Set to stop every run in progress (their process groups are killed): a campaign's exit.
STOP = threading.Event()
_CLAUSE_TAG = re.compile(r"\[([A-Z][A-Z0-9]*-\d+)[^\]]*\]")
_POLL_S = 0.1


@dataclass(frozen=True)
class Options:
    mutant_timeout_s: float = 300.0     # wall limit of one pytest run
    test_timeout_s: int = 45            # pytest-timeout per test
    hypothesis_seed: int = 0


@dataclass
class Run:
    """One pytest run against a mutant (or the unmutated copy)."""

    modules: tuple[str, ...]
    exit_code: int | None               # None: killed after the wall limit
    wall_s: float
    cpu_s: float
    outcome: str = ""                   # "passed", "killed", "error"
    how: str = ""                       # for killed: "test", "timeout", "import"
    test: str | None = None             # the first failing test
    message: str | None = None          # its message, first line
    clause: str | None = None           # that message's [CLAUSE-ID] tag, else the test's only clause
    note: str = ""
    log: str = ""                       # the last lines of its output (kept for errors)
    skipped: list[str] = field(default_factory=list)   # skipped tests (kept for a baseline)
    quiet_s: float | None = None        # ended at the wall limit: seconds since its last output
    test_timeout_s: int | None = None   # the per-test limit it ran under

    def to_json(self) -> dict:
        return asdict(self)


class Workspace:
    """A copy of the runtime package named ``COPY_NAME`` in ``base`` (put on PYTHONPATH)."""

    def __init__(self, base: Path, runtime_dir: Path = RUNTIME_DIR) -> None:
        self.base = base
        self.package = base / COPY_NAME
        if self.package.exists():
            shutil.rmtree(self.package)
        base.mkdir(parents=True, exist_ok=True)
        shutil.copytree(runtime_dir, self.package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    @contextmanager
    def mutated(self, mutant: Mutant, source: str) -> Iterator[None]:
        """The copy with ``mutant`` applied to its module; restored afterwards."""
        path = self.package / mutant.module
        original = path.read_text(encoding="utf-8")
        if original != source:
            raise RuntimeError(f"{path} differs from the source the mutant was made from")
        if not compiles(mutant, source):
            raise ValueError(f"{mutant.key}: the mutant does not compile")
        path.write_text(mutant.apply(source), encoding="utf-8")
        try:
            yield
        finally:
            path.write_text(original, encoding="utf-8")


def _environment(workspace: Workspace) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "ANTMAN_RUNTIME" and not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(workspace.base)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"     # a rewritten module is never read from a stale .pyc
    env["PYTHONUNBUFFERED"] = "1"            # progress reaches the log as each test ends
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    # the simulated device whatever the host has, in the subprocesses too (the worker, the
    # workload command line): on a GPU host their default backend, auto, would take the GPU,
    # many runs at once, beside the GPU tests of anything else on it
    env["ANTMAN_DEVICE"] = "sim"
    return env


def run_pytest(workspace: Workspace, modules: tuple[str, ...], options: Options, *,
               tag: str = "run", expected_skips: frozenset[str] | None = None) -> Run:
    """Run ``modules`` against the workspace's copy; classify the result.

    ``expected_skips``: the tests the unmutated runtime skips (the baseline's); None when
    unknown."""
    junit = workspace.base / f"{tag}.junit.xml"
    log_path = workspace.base / f"{tag}.log"
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", *modules, "--runtime", COPY_NAME, "-x", "-q",
           "-m", "not gpu",
           "--no-report", "-p", "mutation.pytest_isolation", "-p", "no:cacheprovider",
           f"--timeout={options.test_timeout_s}", f"--hypothesis-seed={options.hypothesis_seed}",
           f"--junitxml={junit}", f"--basetemp={workspace.base / 'basetemp'}"]
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_environment(workspace), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        exit_code, usage = _wait(proc, options.mutant_timeout_s)
    wall = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
    output = log_path.read_text(encoding="utf-8", errors="replace")
    run = Run(tuple(modules), exit_code, round(wall, 2), round(cpu, 2))
    if exit_code is None:                    # how long the run had been silent when ended
        run.quiet_s = round(max(0.0, time.time() - log_path.stat().st_mtime), 1)
        run.test_timeout_s = options.test_timeout_s
    classify(run, junit if junit.exists() else None, output, expected_skips)
    if run.outcome == "error":
        run.log = output[-3000:]
    return run


class Interrupted(Exception):
    """``STOP`` was set while a run was in progress; its processes were killed."""


def _wait(proc: subprocess.Popen, limit_s: float):
    """Wait for ``proc`` at most ``limit_s``; kill its process group after that.

    Returns ``(exit code or None when killed, resource usage of the process)``. When the
    wait is interrupted (``STOP``, a signal) the process group is killed too."""
    deadline = time.monotonic() + limit_s
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                return proc.returncode, usage
            if STOP.is_set():
                raise Interrupted("the campaign was stopped")
            if time.monotonic() > deadline:
                _, usage = _kill(proc)
                return None, usage
            time.sleep(_POLL_S)
    except BaseException:
        if proc.returncode is None:
            _kill(proc)
        raise


def _kill(proc: subprocess.Popen):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def first_failure(junit: Path) -> tuple[str, str, str | None] | None:
    """``(test, message, clause)`` of the first failed or errored test of a JUnit file; the
    clause is the message's tag or, when it names none, the test's only clause (marks)."""
    try:
        tree = ET.parse(junit)
    except ET.ParseError:
        return None
    for case in tree.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                classname = case.get("classname", "")
                test = f"{classname}::{case.get('name', '')}" if classname else case.get("name", "")
                message = child.get("message") or (child.text or "")
                tag = _CLAUSE_TAG.search(message) or _CLAUSE_TAG.search(child.text or "")
                first = message.strip().splitlines()[0] if message.strip() else ""
                return test, first[:300], tag.group(1) if tag else only_clause(test)
    return None


def skipped_tests(junit: Path) -> dict[str, str]:
    """Skipped tests of a JUnit file: test -> skip message."""
    try:
        tree = ET.parse(junit)
    except ET.ParseError:
        return {}
    out = {}
    for case in tree.iter("testcase"):
        for child in case:
            if child.tag == "skipped":
                classname = case.get("classname", "")
                test = f"{classname}::{case.get('name', '')}" if classname else case.get("name", "")
                out[test] = child.get("message") or ""
    return out


def _all_passed(junit: Path) -> bool:
    try:
        root = ET.parse(junit).getroot()
    except ET.ParseError:
        return False
    cases = list(root.iter("testcase"))
    return bool(cases) and not any(c.tag in ("failure", "error") for case in cases for c in case)


def _refusal(output: str) -> str | None:
    """The usage error (``ERROR: ...`` line) of a run that names the runtime under test."""
    for line in output.splitlines():
        if line.startswith("ERROR:") and (f"'{COPY_NAME}'" in line or f"{COPY_NAME}." in line):
            return line.strip()[:300]
    return None


class EverySkip(frozenset):
    """The skips of a baseline run: it defines which tests the unmutated runtime skips on this
    host (a test that needs two real GPUs is NOT_SUPPORTED on a one-GPU runner), so none of
    them can be unexpected."""

    def __contains__(self, test: object) -> bool:
        return True


EVERY_SKIP = EverySkip()


def classify(run: Run, junit: Path | None, output: str,
             expected_skips: frozenset[str] | None = None) -> None:
    """Fill ``run.outcome``, ``how``, ``test``, ``message`` and ``clause`` (see the module)."""
    failure = first_failure(junit) if junit is not None else None
    if failure is not None:
        run.test, run.message, run.clause = failure
    skips = skipped_tests(junit) if junit is not None else {}
    run.skipped = sorted(skips)
    unexpected = {t: m for t, m in skips.items()
                  if (t not in expected_skips if expected_skips is not None
                      else "NOT_SUPPORTED" in m)}
    if run.exit_code == 0 and unexpected:
        run.outcome, run.how = "killed", "skipped"
        run.test = min(unexpected)
        run.message = unexpected[run.test].strip().splitlines()[0][:300] \
            if unexpected[run.test].strip() else "skipped"
    elif run.exit_code == 0:
        run.outcome = "passed"
    elif run.exit_code is None:
        if junit is not None and _all_passed(junit):
            run.outcome, run.note = "passed", "every test passed, then the process did not exit"
        elif (run.quiet_s is not None and run.test_timeout_s is not None
              and run.quiet_s < run.test_timeout_s):
            # tests were still ending one after another: a slow host, not a hung mutant
            run.outcome = "error"
            run.note = (f"the wall limit ended a run that was still progressing (last output "
                        f"{run.quiet_s} s before, under the per-test limit of "
                        f"{run.test_timeout_s} s): no verdict; raise --mutant-timeout-s")
        else:
            run.outcome, run.how = "killed", "timeout"
            run.note = "killed after the wall limit"
    elif run.exit_code == 4 and "cannot import runtime module" in output:
        # the certification refuses a runtime that does not import before any test runs
        # (a usage error, no verdict): such a fork is never certified
        run.outcome, run.how = "killed", "import"
        run.message = next((ln.strip() for ln in output.splitlines()
                            if "cannot import runtime module" in ln), "")[:300]
    elif run.exit_code == 4 and (refusal := _refusal(output)) is not None:
        # the runtime's own shape (API-1, API-2, WORKER-1) is refused before any test
        run.outcome, run.how, run.message = "killed", "refused", refusal
    elif run.exit_code == 1 and failure is not None:
        run.outcome = "killed"
        text = run.message or ""
        if "cannot import runtime module" in text or "cannot import runtime module" in output:
            run.how = "import"
        elif text.startswith("Failed: Timeout"):
            run.how = "timeout"
        else:
            run.how = "test"
    else:
        run.outcome = "error"
        run.note = f"pytest exit status {run.exit_code}"


@dataclass
class MutantResult:
    """What happened to one sampled mutant."""

    key: str
    module: str
    function: str
    operator: str
    line: int
    change: str
    line_text: str
    diff: str
    outcome: str                          # killed, survived, equivalent, gpu-only, error
    how: str = ""
    test: str | None = None
    clause: str | None = None
    message: str | None = None
    map_gap: str | None = None            # a conformance module outside the map killed it
    listed: str | None = None             # the equivalents.toml kind, when listed
    reason: str | None = None             # its reason
    list_mistake: bool = False            # listed, yet killed
    wall_s: float = 0.0
    cpu_s: float = 0.0
    runs: list[Run] = field(default_factory=list)

    def to_json(self) -> dict:
        out = asdict(self)
        out["runs"] = [r.to_json() for r in self.runs]
        return out
