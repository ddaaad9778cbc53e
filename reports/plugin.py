"""pytest plugin: the certification report of every run.

Every run (with or without xdist; only the controller writes) gets a folder
``<report-dir>/<UTC time>-<runtime>-<pid>/`` holding ``certification.json`` (valid against
``reports/schema/certification.schema.json``), ``certification.md``, a self-contained
``certification.html``, ``junit.xml`` (unless ``--junitxml`` names another file; pytest
writes it aside first and it moves in with the report, named after the suite and carrying
the verdict as properties) and the plots as SVG; ``<report-dir>/latest`` points at the
newest complete run's folder (a symlink, or a file naming it where symlinks are
unavailable), ``latest-partial`` at the newest run of part of the suite and ``latest-bench``
at the newest run without a verdict (reports/writer.py). The newest 20 run folders are kept
(``--keep-runs N`` or ``ANTMAN_KEEP_RUNS``), and every folder a pointer names. The terminal
summary prints the verdict and what it covered, the counts per outcome and the folder. A run
that ends in a usage error (exit status 4: the checks before any test, conformance/plugin.py)
writes nothing, not even a temporary file, and leaves the pointers alone. The folder is
filled under a temporary name and renamed when complete (reports/writer.py); a report that
cannot be written completely, or that ``latest`` cannot name, makes the exit status 4 with
one line saying why. Every text goes through reports/safe_text.py (the terminal
summary included).

Options: ``--report-dir DIR`` (default ``reports/out`` under the rootdir), ``--no-report``,
``--expectations FILE`` (waivers, see ``reports.expectations``), ``--mustpass FILE``
(another must-pass list; such a run is never CERTIFIED), ``--require-certified`` (exit
status 0 exactly when the verdict is CERTIFIED: NO VERDICT, a run without conformance tests
such as a benchmark run, fails it, and so does CERTIFIED WITH WAIVERS, a run that needed
waivers, unless ``--allow-waivers`` is given, whose waived failures then do not fail it) and
``--repeat N`` (the stability gate, reports/stability.py: N whole passes, FLAKY tests). An
expectations file that names a clause or test the suite does not have is a usage error
(reports/expectations.py ``unknown_ids``). Waived and flaky tests are not counted as pytest
failures in the terminal (reports/outcome_summary.py).

How data crosses xdist workers: at collection each item gets ``user_properties``
``antman:clause`` / ``antman:capability`` / ``antman:gpu`` (they travel with every report and
land in the JUnit XML); ``pytest_runtest_makereport`` adds ``antman:outcome`` when the test's
exception (or one it wraps) carries ``antman_outcome`` ("TIMEOUT", "CRASH", "ERROR" or
"FAIL"; see ``reports.outcomes``) and ``antman:hypothesis_seed`` /
``antman:hypothesis_seed_source`` for Hypothesis tests, and, on a failing phase's report
only, ``antman:failures``: each distinct failure of the phase with its ``[CLAUSE-ID]`` tags
and message (reports/attribution.py), moved off the report before the JUnit XML sees it.
Each worker also puts its whole
collection (clauses, capabilities per node ID) into ``workeroutput``, so a test whose worker
crashed before reporting still has its clauses; the controller learns the collected IDs from
``pytest_xdist_node_collection_finished``, so tests that never ran are NOT_RUN.

Black-box runs: fixtures/worker.py adds the user property ``worker_hello`` (the hello record's
line) to each test that starts a worker. The controller keeps every distinct record; the first
is ``runtime.worker_hello`` of the report and, when the runtime is the black-box stand-in
(``conformance.blackbox``), names the runtime and the execution target
(``reports.environment.worker_target``); records naming another runtime or other devices
give the warning ``worker-hello-inconsistent``.

Hypothesis seeds: after the call phase the plugin reads what Hypothesis left on the test
function: the seed it generated (source ``generated``; reproduce with ``@seed(N)`` or
``--hypothesis-seed=N``), an explicit ``@seed`` (``explicit``), ``derandomize`` (``derandomize``;
the seed is a hash of the test, so rerunning with the same profile reproduces it) or a global
``--hypothesis-seed`` (``global``).

Artifacts for the plots: tests call the ``report_artifacts`` fixture,
``report_artifacts.add(name, data)`` with JSON-serialisable ``data``. Rendered names:

- ``e2e_timeline``: ``steps``, ``device_bytes``, ``host_bytes``, ``limit``, ``period_us``
  (lists of equal length, per training step) and ``events`` (``[{"step": n, "label": s}]``):
  the memory and step-period timeline of the mid-run config scenario;
- ``idle_slots``: ``slots_us`` (list), optional ``expected_us``: the idle-slot distribution;
- ``throttle_accuracy``: ``target_percent`` and ``measured_percent`` (lists), optional
  ``tolerance_percent``: measured against requested perfControl;
- any other name whose data has ``x`` (list) and ``series`` (``{label: list}``), optional
  ``xlabel``/``ylabel``/``title``: a line plot. Anything else is kept in the JSON only.

pytest-benchmark results (when benchmarks ran, i.e. without xdist) go into the report as a
table and a plot of the mean time per benchmark with its min-max range.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from conformance import plugin as conformance_plugin
from conformance import preconditions, spec
from reports import attribution, environment, journal, model, run_budget, safe_text
from reports import expectations as exp
from reports import mustpass as mp
from reports import outcome_summary
from reports import outcomes as oc
from reports.render_md import target_text
from reports.safe_text import terminal_safe

pytest_plugins = ["reports.stability_plugin"]

PROP_CLAUSE = "antman:clause"
PROP_CAPABILITY = "antman:capability"
PROP_GPU = "antman:gpu"
PROP_OUTCOME = "antman:outcome"
PROP_SEED = "antman:hypothesis_seed"
PROP_SEED_SOURCE = "antman:hypothesis_seed_source"
PROP_ARTIFACT = "antman:artifact"
PROP_FAILURES = "antman:failures"
PROP_DEPENDS = "antman:depends"
WORKEROUTPUT_TESTS = "antman_tests"
WORKEROUTPUT_DESELECTED = "antman_deselected"
_ARTIFACT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_RECORDER = "antman-certification-recorder"
#: Exit status of a run whose report could not be written completely (or whose ``latest``
#: could not be moved to it): as for a usage error, no new report is where ``latest`` says.
REPORT_NOT_WRITTEN = pytest.ExitCode.USAGE_ERROR


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("antman-report", "AntMan certification report")
    group.addoption("--report-dir", default=None, metavar="DIR",
                    help="where run folders are written (default: reports/out under rootdir)")
    group.addoption("--no-report", action="store_true", default=False,
                    help="do not write the certification report")
    group.addoption("--expectations", default=None, metavar="FILE",
                    help="TOML file of waivers for the implementation under test")
    group.addoption("--mustpass", default=None, metavar="FILE",
                    help="must-pass list to use instead of conformance/mustpass/<spec>.txt "
                         "(such a run is never CERTIFIED)")
    group.addoption("--require-certified", action="store_true", default=False,
                    help="exit status 0 exactly when the verdict is CERTIFIED")
    group.addoption("--allow-waivers", action="store_true", default=False,
                    help="with --require-certified: CERTIFIED WITH WAIVERS exits 0 too")
    group.addoption("--keep-runs", default=None, metavar="N",
                    help="run folders kept in the report folder, the newest first (default: "
                         "$ANTMAN_KEEP_RUNS or 20)")
    run_budget.add_option(group)


# --------------------------------------------------------------------------- every process

def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def item_meta(item: pytest.Item) -> dict[str, Any]:
    clauses = list(dict.fromkeys(c for m in item.iter_markers("clause") for c in m.args))
    caps = list(dict.fromkeys(c for m in item.iter_markers("capability") for c in m.args))
    return {"clauses": clauses, "capabilities": caps,
            "gpu": item.get_closest_marker("gpu") is not None}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        meta = item_meta(item)
        item.user_properties.extend((PROP_CLAUSE, c) for c in meta["clauses"])
        item.user_properties.extend((PROP_CAPABILITY, c) for c in meta["capabilities"])
        if meta["gpu"]:
            item.user_properties.append((PROP_GPU, "true"))


def pytest_deselected(items: list[pytest.Item]) -> None:
    if not items:
        return
    config = items[0].config
    if is_worker(config):
        out = config.workeroutput  # type: ignore[attr-defined]
        out[WORKEROUTPUT_DESELECTED] = out.get(WORKEROUTPUT_DESELECTED, 0) + len(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if is_worker(session.config):
        session.config.workeroutput[WORKEROUTPUT_TESTS] = {  # type: ignore[attr-defined]
            item.nodeid: item_meta(item) for item in session.items}


def hypothesis_seed(item: pytest.Item) -> tuple[str | None, str] | None:
    """(seed, source) of a Hypothesis test after it ran, else None."""
    fn = getattr(item, "obj", None)
    fn = getattr(fn, "__func__", fn)
    if fn is None or "hypothesis" not in sys.modules:
        return None
    from hypothesis import core, is_hypothesis_test
    if not is_hypothesis_test(fn):
        return None
    generated = getattr(fn, "_hypothesis_internal_use_generated_seed", None)
    explicit = getattr(fn, "_hypothesis_internal_use_seed", None)
    used = getattr(fn, "_hypothesis_internal_use_settings", None)
    if generated is not None:
        return str(generated), "generated"
    if explicit is not None:
        return str(explicit), "explicit"
    if used is not None and getattr(used, "derandomize", False):
        return None, "derandomize"
    if core.global_force_seed is not None:
        return str(core.global_force_seed), "global"
    return None, "unknown"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    extra: list[tuple[str, Any]] = []
    stamped = oc.exception_outcome(call.excinfo.value if call.excinfo else None)
    if stamped:
        extra.append((PROP_OUTCOME, stamped))
    depends = [(PROP_DEPENDS, c) for c in preconditions.declared()
               if (PROP_DEPENDS, c) not in item.user_properties]
    extra += depends
    if report.when == "call":
        seed = hypothesis_seed(item)
        if seed is not None:
            extra += [(PROP_SEED, seed[0] or ""), (PROP_SEED_SOURCE, seed[1])]
    if extra:  # on the item, so later reports (and the JUnit XML) carry them too
        shared = report.user_properties is item.user_properties
        item.user_properties.extend(extra)
        if not shared:
            report.user_properties = [*report.user_properties, *extra]
    if report.failed and call.excinfo is not None:
        # This phase's distinct failures with their clause tags (reports/attribution.py);
        # on this report only, moved off it before the JUnit XML sees it.
        found = attribution.failures(call.excinfo.value)
        report.user_properties = [*report.user_properties, (PROP_FAILURES, found)]
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test's declared preconditions are its own (``antman:depends``)."""
    preconditions.reset()


class ReportArtifacts:
    """Data a test hands to the report for plotting (see the module docstring)."""

    def __init__(self, node: pytest.Item) -> None:
        self._node = node

    def add(self, name: str, data: Any) -> None:
        if not _ARTIFACT_NAME.match(name):
            raise ValueError(f"artifact name {name!r} must match {_ARTIFACT_NAME.pattern}")
        try:
            data = json.loads(json.dumps(data, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"artifact {name!r} is not JSON-serialisable: {exc}") from exc
        self._node.user_properties.append((PROP_ARTIFACT, {"name": name, "data": data}))


@pytest.fixture
def report_artifacts(request: pytest.FixtureRequest) -> ReportArtifacts:
    """Hands plot data (timelines, idle slots, accuracy) to the certification report."""
    return ReportArtifacts(request.node)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Moves artifacts and failures off the report (out of the JUnit XML) onto
    ``report.antman_artifacts`` and ``report.antman_failures``."""
    props = getattr(report, "user_properties", None) or []
    arts = [v for k, v in props if k == PROP_ARTIFACT]
    found = [f for k, v in props if k == PROP_FAILURES for f in v]
    if arts:
        report.antman_artifacts = arts  # type: ignore[attr-defined]
    if found:
        report.antman_failures = found  # type: ignore[attr-defined]
    if arts or any(k == PROP_FAILURES for k, _ in props):
        report.user_properties = [(k, v) for k, v in props
                                  if k not in (PROP_ARTIFACT, PROP_FAILURES)]


# --------------------------------------------------------------------------- controller

@pytest.hookimpl(tryfirst=True)  # before junitxml reads ``xmlpath``
def pytest_configure(config: pytest.Config) -> None:
    run_budget.configure(config)
    if is_worker(config) or config.getoption("--no-report"):
        return
    opt = config.option
    if getattr(opt, "help", False) or getattr(opt, "version", False) \
            or getattr(opt, "collectonly", False):
        return
    path = config.getoption("--expectations")
    expectations = exp.Expectations()
    if path:
        try:
            expectations = exp.load(Path(path).resolve())
        except exp.ExpectationsError as exc:
            raise pytest.UsageError(str(exc)) from None
        unknown = exp.unknown_ids(expectations, spec.load_clauses(), config.rootpath)
        if unknown:
            raise pytest.UsageError(exp.unknown_ids_message(expectations.path, unknown))
    recorder = CertificationRecorder(config, expectations)
    from reports import writer
    problem = split_report_dir_problem(config, recorder.base) or writer.report_dir_problem(
        recorder.base)
    if problem:
        raise pytest.UsageError(safe_text.terminal(problem))
    config.pluginmanager.register(recorder, _RECORDER)
    if not getattr(opt, "xmlpath", None) and config.pluginmanager.has_plugin("junitxml"):
        # junitxml writes before the report exists: into a private folder, moved into the
        # run folder with the report (and removed when the run ends in a usage error). The
        # folder is made when the session starts, so a run stopped before leaves nothing.
        private = f"antman-junit-{secrets.token_hex(16)}"
        recorder.junit_tmp = Path(tempfile.gettempdir()) / private / "junit.xml"
        opt.xmlpath = str(recorder.junit_tmp)
        recorder.junit_is_ours = True


def split_report_dir_problem(config: pytest.Config, base: Path) -> str | None:
    """Under xdist, ``--report-dir DIR`` as two arguments with DIR outside the rootdir cannot
    work: each worker reads the command line again before it knows the option, takes DIR
    (which exists once the run has made it) for a test path, chooses DIR as its rootdir, never
    loads the suite's conftest and stops, so that no test runs. Said at start-up instead.
    A test path inside the rootdir among the arguments (``pytest conformance ...``) lets the
    workers find the suite's conftest, and the run works."""
    args = [str(a) for a in config.invocation_params.args]
    if "--report-dir" not in args or not getattr(config.option, "numprocesses", None):
        return None
    root = config.rootpath.resolve()
    if base.resolve().is_relative_to(root):
        return None
    at = args.index("--report-dir") + 1
    value = args[at] if at < len(args) else ""
    here = Path(config.invocation_params.dir)
    for arg in args:
        if arg.startswith("-") or arg == value:
            continue
        try:                    # any argument: a -k expression too long for a file name
            path = (here / arg).resolve()
            if path.exists() and path.is_relative_to(root):
                return None     # the workers find the suite's conftest through this path
        except (OSError, ValueError):
            continue
    return (f"give the report folder as --report-dir={base} (one argument): with xdist "
            f"(-n), a folder outside {config.rootpath} given as a separate argument is "
            f"taken for a test path by every worker, and no test runs")


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "runtime"


def certification_root() -> Path:
    """The directory a complete certification run must select (the conformance package)."""
    return Path(conformance_plugin.__file__).resolve().parent


def selection_reasons(config: pytest.Config, deselected: int) -> list[str]:
    opt = config.option
    reasons = []
    if getattr(opt, "keyword", ""):
        reasons.append(f"-k {opt.keyword!r}")
    if getattr(opt, "markexpr", ""):
        reasons.append(f"-m {opt.markexpr!r}")
    if getattr(opt, "deselect", None):
        reasons.append(f"--deselect {' '.join(opt.deselect)}")
    from conformance import selection       # --clause, --rerun, --lf
    reasons.extend(selection.reasons(config))
    if getattr(opt, "stepwise", False) or getattr(opt, "stepwise_skip", False):
        reasons.append("--stepwise")
    root = certification_root()
    invocation = Path(config.invocation_params.dir)
    for ignored in (getattr(opt, "ignore", None) or []):
        if (invocation / ignored).resolve().is_relative_to(root):
            reasons.append(f"--ignore {ignored}")
    if getattr(opt, "ignore_glob", None):
        reasons.append(f"--ignore-glob {' '.join(opt.ignore_glob)}")
    args = [str(a) for a in config.args] or [str(invocation)]
    nodeids = [a for a in args if "::" in a]
    if nodeids:
        reasons.append(f"node IDs given: {' '.join(nodeids[:3])}")
    paths = [(invocation / a).resolve() for a in args if "::" not in a]
    if not nodeids and not any(root.is_relative_to(p) for p in paths):
        shown = " ".join(str(a) for a in args[:3])
        reasons.append(f"paths {shown} do not include {root.name}/")
    if deselected:
        reasons.append(f"{deselected} test(s) deselected")
    return reasons


def benchmark_results(config: pytest.Config) -> list[dict[str, Any]]:
    session = getattr(config, "_benchmarksession", None)
    results = []
    for bench in getattr(session, "benchmarks", None) or []:
        if not bench:
            continue
        try:
            d = bench.as_dict(include_data=False)
        except Exception:  # a benchmark that errored has no stats
            continue
        stats = {k: d["stats"].get(k) for k in
                 ("min", "max", "mean", "stddev", "median", "iqr", "ops", "rounds",
                  "iterations")}
        entry = {"name": d.get("name"), "fullname": d.get("fullname"),
                 "group": d.get("group"), "stats": stats,
                 "extra_info": d.get("extra_info") or {}}
        results.append(json.loads(json.dumps(entry, default=str)))
    return results


class CertificationRecorder:
    """Controller-side collector of reports; writes the run folder at session end."""

    def __init__(self, config: pytest.Config, expectations: exp.Expectations) -> None:
        self.config = config
        self.expectations = expectations
        self.started = time.time()
        self.gpu_clocks_start = environment.gpu_clocks()
        self.tests: dict[str, model.TestRecord] = {}
        self.collected: set[str] = set()
        self.collection_errors: list[str] = []
        self.deselected = 0
        self.artifacts: dict[str, list[dict[str, Any]]] = {}
        self.worker_hellos: dict[str, dict[str, Any]] = {}   # raw line -> record, read order
        self.junit_is_ours = False
        self.junit_tmp: Path | None = None
        self.document: dict[str, Any] | None = None
        self.write_error: str | None = None
        self.not_written: str | None = None      # why the report is incomplete or missing
        self.skipped_for: str | None = None
        self.runtime_error: str | None = None
        self.runtime = None
        from reports import writer
        try:
            self.keep_runs = writer.keep_runs(config.getoption("--keep-runs"))
        except ValueError as exc:
            raise pytest.UsageError(f"--keep-runs or {writer.KEEP_RUNS_ENV}: {exc}") from None
        self.journal: journal.Journal | None = None      # a run that never ends still reports
        self.session: pytest.Session | None = None
        try:
            self.runtime = conformance_plugin.load_runtime(config)
            name = self.runtime.NAME
        except pytest.UsageError as exc:
            self.runtime_error = str(exc)
            name = conformance_plugin.runtime_module_name(config)
        base = config.getoption("--report-dir")
        base = Path(base) if base else config.rootpath / "reports" / "out"
        if not base.is_absolute():
            base = Path(config.invocation_params.dir) / base
        stamp = dt.datetime.fromtimestamp(self.started, dt.timezone.utc)
        self.base = base
        self.run_dir = base / f"{stamp:%Y%m%dT%H%M%SZ}-{safe_name(str(name))}-{os.getpid()}"

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.junit_tmp is not None:
            self.junit_tmp.parent.mkdir(mode=0o700, exist_ok=True)
        self.session = session
        budget = run_budget.budget_s(self.config)
        if budget is None:
            return
        self.journal = journal.Journal(self.base / f".journal-{self.run_dir.name}")
        limit = (_timeout(self.config) or 0) + journal.grace_s()
        self.journal.watch(budget + limit, self.run_dir, self.base,
                           f"--run-budget-s {budget:g}, then the test's own limit and "
                           f"{journal.grace_s():g} s")

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        if self.journal is not None and self.session is not None:
            if not self.journal.has_base:
                self.journal.base(self.run_data(self.session))
            self.journal.started(nodeid)

    # -- collection
    def record(self, nodeid: str) -> model.TestRecord:
        rec = self.tests.get(nodeid)
        if rec is None:
            rec = self.tests[nodeid] = model.TestRecord(nodeid)
        return rec

    def learn(self, nodeid: str, meta: dict[str, Any]) -> None:
        rec = self.record(nodeid)
        if not (rec.clauses or rec.capabilities or rec.gpu):
            rec.clauses, rec.capabilities = list(meta["clauses"]), list(meta["capabilities"])
            rec.gpu = bool(meta["gpu"])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self.collected.add(item.nodeid)
            self.learn(item.nodeid, item_meta(item))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collection_errors.append(report.nodeid or "<session>")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Iterable[str]) -> None:
        for nodeid in ids:
            self.collected.add(nodeid)
            self.record(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        out = getattr(node, "workeroutput", None) or {}
        for nodeid, meta in (out.get(WORKEROUTPUT_TESTS) or {}).items():
            self.learn(nodeid, meta)
        self.deselected = max(self.deselected, out.get(WORKEROUTPUT_DESELECTED, 0))

    # -- results
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rec = self.record(report.nodeid)
        props = list(getattr(report, "user_properties", None) or [])
        if not (rec.clauses or rec.capabilities or rec.gpu):
            rec.clauses = list(dict.fromkeys(v for k, v in props if k == PROP_CLAUSE))
            rec.capabilities = list(dict.fromkeys(v for k, v in props if k == PROP_CAPABILITY))
            rec.gpu = any(k == PROP_GPU for k, _ in props)
        stamped = next((v for k, v in props if k == PROP_OUTCOME), None)
        rec.depends += [v for k, v in props if k == PROP_DEPENDS and v not in rec.depends]
        found = getattr(report, "antman_failures", None)
        if found:
            rec.failures[len(rec.phases)] = list(found)
        rec.phases.append(oc.phase_outcome(report, stamped))
        rec.whens.append(str(getattr(report, "when", "")))
        rec.duration_s += float(getattr(report, "duration", 0.0) or 0.0)
        node = getattr(report, "node", None)
        if node is not None:
            rec.worker = str(getattr(getattr(node, "gateway", None), "id", "") or None)
        seed = next((v for k, v in props if k == PROP_SEED), None)
        source = next((v for k, v in props if k == PROP_SEED_SOURCE), None)
        if source is not None:
            rec.hypothesis = {"seed": seed or None, "source": source}
        # Imported here, not at module level: the conftest loads this plugin before
        # fixtures.worker, whose asserts pytest could not rewrite if it were imported first.
        from fixtures.worker import HELLO_PROPERTY
        for k, v in props:
            if k == HELLO_PROPERTY and v not in self.worker_hellos:
                try:
                    hello = json.loads(v)
                except (TypeError, ValueError):
                    continue
                if isinstance(hello, dict):
                    self.worker_hellos[v] = hello
        arts = getattr(report, "antman_artifacts", None)
        if arts:
            self.artifacts[report.nodeid] = [{"nodeid": report.nodeid, **a} for a in arts]
        if self.journal is not None:
            self.journal.record(rec)

    # -- the document
    def run_data(self, session: pytest.Session) -> model.RunData:
        config = self.config
        for nodeid in self.collected:
            self.record(nodeid)
        version = spec.spec_version()
        mp_path = config.getoption("--mustpass")
        official = mp.official_path(version)
        mp_file = Path(mp_path).resolve() if mp_path else official
        must, must_error = None, None
        try:
            must = mp.load(mp_file)
        except FileNotFoundError:
            must_error = f"no must-pass list {mp_file} for spec {version}"
        except (OSError, mp.MustPassError) as exc:
            must_error = f"must-pass list {mp_file} is invalid: {exc}"
        try:
            from hypothesis import settings as hyp_settings
            profile = hyp_settings.get_current_profile_name()
        except Exception:
            profile = config.getoption("--hypothesis-profile", default=None)
        finished = time.time()
        invocation = {
            "args": list(config.invocation_params.args),
            "command": environment.command_line(),
            "cwd": str(config.invocation_params.dir),
            "tox_env": os.environ.get("TOX_ENV_NAME") or None,
            "rootdir": str(config.rootpath),
            "xdist_workers": int(getattr(config.option, "numprocesses", 0) or 0),
            "hypothesis_profile": profile,
            "hypothesis_seed": config.getoption("--hypothesis-seed", default=None),
            "timeout_s": _timeout(config),
            "started_at": _iso(self.started), "finished_at": _iso(finished),
            "duration_s": round(finished - self.started, 3),
            "runtime_error": self.runtime_error,
            "require_gpu": bool(config.getoption("--require-gpu", default=False)),
        }
        invocation["hypothesis_seed"] = (None if invocation["hypothesis_seed"] is None
                                         else str(invocation["hypothesis_seed"]))
        artifacts = [a for arts in self.artifacts.values() for a in arts]
        hellos = list(self.worker_hellos.values())
        hello = hellos[0] if hellos else None
        black_box = environment.is_black_box(self.runtime)
        target = (environment.worker_target(hello) if black_box
                  else environment.execution_target(
                      getattr(self.runtime, "CAPABILITIES", ()) or ()))
        if self.gpu_clocks_start is not None:
            target["extras"]["gpu_clocks"] = {"start": self.gpu_clocks_start,
                                              "end": environment.gpu_clocks()}
        return model.RunData(
            clauses=spec.load_clauses(), spec_version=version, tests=self.tests,
            runtime=environment.runtime_info(
                self.runtime, conformance_plugin.runtime_module_name(config),
                config.getoption("--worker-cmd", default=None), hello),
            suite=environment.suite_info(), python=environment.python_info(),
            platform=environment.platform_info(),
            target=target,
            worker_hellos=hellos,
            invocation=invocation, mustpass=must, mustpass_error=must_error,
            mustpass_official=must is not None and mp_file.resolve() == official.resolve(),
            expectations=self.expectations,
            require_gpu=bool(config.getoption("--require-gpu", default=False)),
            selection_reasons=selection_reasons(config, self.deselected),
            collection_errors=self.collection_errors, exitstatus=int(session.exitstatus),
            repeat=int(config.getoption("--repeat", default=1) or 1),
            stopped=run_budget.why_stopped(config, int(session.exitstatus)),
            artifacts=artifacts, benchmarks=benchmark_results(config),
            run_id=self.run_dir.name, generated_at=_iso(finished))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if int(session.exitstatus) == pytest.ExitCode.USAGE_ERROR:
            self.skipped_for = "usage error: nothing was certified"  # no folder, no latest
            self._drop_junit_tmp()
            if self.journal is not None:
                self.journal.close()
            return
        try:
            from reports import writer
            self.run_dir = writer.free_run_dir(self.run_dir)
            self.document = model.build(self.run_data(session))
            external = None if self.junit_is_ours else getattr(self.config.option, "xmlpath",
                                                                 None)
            # The folder is filled under a temporary name and renamed when complete.
            with writer.staged(self.run_dir) as folder:
                errors = writer.write_run(self.document, folder,
                                          junit="junit.xml" if self.junit_is_ours else external)
                if self.junit_is_ours and self.junit_tmp is not None \
                        and self.junit_tmp.exists():
                    shutil.move(str(self.junit_tmp), folder / "junit.xml")
                    writer.annotate_junit(folder / "junit.xml", self.document)
            if self.junit_is_ours and (self.run_dir / "junit.xml").exists():
                _point_junit_summary_at(self.config, self.run_dir / "junit.xml")
            if external and Path(external).exists():
                writer.annotate_junit(Path(external), self.document)
            writer.point_latest(self.base, self.run_dir, writer.pointer_for(self.document))
            if errors:
                self.write_error = ("certification.json does not match its schema: "
                                    + "; ".join(errors[:5]))
            writer.prune(self.base, keep=self.keep_runs)
        except Exception as exc:  # the report must never hide the test results
            self.not_written = _one_line(exc)
            session.exitstatus = REPORT_NOT_WRITTEN
        finally:
            self._drop_junit_tmp()
            if self.journal is not None:
                self.journal.close()
        if self.document is not None:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                outcome_summary.recategorize(reporter.stats, self.document)
        if self.config.getoption("--require-certified") and self.not_written is None \
                and self.document is not None and int(session.exitstatus) in (0, 1):
            accepted = {model.CERTIFIED}
            if self.config.getoption("--allow-waivers"):
                accepted.add(model.CERTIFIED_WITH_WAIVERS)
            ok = self.document["verdict"]["status"] in accepted
            session.exitstatus = pytest.ExitCode.OK if ok else pytest.ExitCode.TESTS_FAILED

    def _drop_junit_tmp(self) -> None:
        if self.junit_tmp is not None:
            shutil.rmtree(self.junit_tmp.parent, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        if self.skipped_for:
            return
        tr.section("AntMan certification", bold=True)
        if self.document is not None:
            for line, markup in summary_lines(self.document, self.run_dir):
                tr.write_line(safe_text.terminal(line), **markup)
        if self.write_error:
            tr.write_line(safe_text.terminal(f"report incomplete: {self.write_error}"),
                          red=True)
        if self.not_written is not None:
            tr.write_line(safe_text.terminal(f"report not written: {self.not_written}"),
                          red=True, bold=True)


def _one_line(exc: BaseException) -> str:
    """Why the report was not written, in one line: the message of a ``ReportWriteError``;
    otherwise the exception and where it was raised."""
    from reports.writer import ReportWriteError
    if isinstance(exc, ReportWriteError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _point_junit_summary_at(config: pytest.Config, path: Path) -> None:
    """pytest's "generated xml file" line names where the file is now, not where it was
    written first (junitxml keeps its writer in the config's stash)."""
    try:
        from _pytest.junitxml import xml_key
        config.stash[xml_key].logfile = str(path)
    except (ImportError, KeyError, AttributeError):
        pass


def summary_lines(doc: dict[str, Any], run_dir: Path) -> list[tuple[str, dict[str, bool]]]:
    v = doc["verdict"]
    colour = {model.CERTIFIED: {"green": True, "bold": True},
              model.CERTIFIED_WITH_WAIVERS: {"yellow": True, "bold": True},
              model.NOT_CERTIFIED: {"red": True, "bold": True},
              model.INCOMPLETE: {"yellow": True, "bold": True},
              model.NO_VERDICT: {"cyan": True, "bold": True}}[v["status"]]
    rt = doc["runtime"]
    where = target_text(doc["execution_target"], short=True)
    covered = f"; {v['scope']}" if v.get("scope") else ""
    lines = [(f"verdict: {v['status']}  ({rt['name']} {rt['version']}, spec "
              f"{doc['spec']['version']}, {where}{covered})", colour)]
    for r in v["reasons"][:12]:
        lines.append((f"  - {terminal_safe(r['message'], 2000)}",
                      {"red": v["status"] == model.NOT_CERTIFIED}))

    def counts(key: str) -> str:
        s = doc["summary"][key]
        parts = [f"{o} {n}" for o, n in s["by_outcome"].items() if n]
        return f"{s['total']} ({', '.join(parts) or 'none'})"

    if v["status"] == model.NO_VERDICT:
        lines.append((f"benchmarks: {len(doc['benchmarks'])}", {}))
    else:
        lines.append((f"must-pass clauses: {counts('must_pass')}", {}))
        lines.append((f"clauses: {counts('clauses')}", {}))
    lines.append((f"tests: {counts('tests')}", {}))
    lines += [(line, {"yellow": True}) for line in outcome_summary.waived_lines(doc)]
    lines += [(line, {"yellow": True}) for line in outcome_summary.flaky_lines(doc)]
    for status, line in outcome_summary.waiver_status_lines(doc):
        lines.append((line, {"yellow": status in (exp.STALE, exp.UNNEEDED, exp.EXPIRED,
                                                  exp.NOT_COVERED)}))
    for warn in v["warnings"]:
        if not warn["code"].startswith("waiver-"):
            lines.append((f"note: {terminal_safe(warn['message'], 2000)}", {}))
    junit = (doc.get("files") or {}).get("junit")
    others = "certification.json, certification.md" + (", junit.xml" if junit == "junit.xml"
                                                        else "")
    lines.append((f"report: {run_dir / 'certification.html'}", {"bold": True}))
    lines.append((f"        (and {others} in that folder"
                  + (f"; JUnit XML: {junit}" if junit and junit != "junit.xml" else "") + ")",
                  {}))
    return lines


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _timeout(config: pytest.Config) -> float | None:
    value = getattr(config.option, "timeout", None)
    if value is None:
        try:
            value = config.getini("timeout")
        except (ValueError, KeyError):
            value = None
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
