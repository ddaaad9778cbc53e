"""No bug makes a run endless (reports/run_budget.py, SPEC.md section 7): the run has a total
budget, and a run stopped by it, by Ctrl-C, by SIGTERM or by an internal error still writes
the report of what ran, naming what did not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meta_tests.child_env import python_path
from meta_tests.test_reports import (_plotting_imported_before_pytester,  # noqa: F401
                                     assert_valid, project, run, short)
from reports import model
from reports import run_budget as rb
from reports import writer

pytest_plugins = ["pytester"]


class Monotonic:
    """The budget's clock, moved by the synthetic tests (no real time is measured)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def budget_clock(monkeypatch: pytest.MonkeyPatch) -> Monotonic:
    clock = Monotonic()
    monkeypatch.setattr(rb, "monotonic", clock)
    return clock


def run_to_the_end(project: pytest.Pytester, *args: str):
    """``run``, without re-raising the inner run's interruption in this test."""
    return run(project, *args, no_reraise_ctrlc=True)

SLOW = '''
import pytest
from reports import run_budget

@pytest.mark.clause("API-1")
def test_a():
    run_budget.monotonic.now += 600          # each test takes 10 minutes of the budget's clock

@pytest.mark.clause("API-2")
def test_b():
    run_budget.monotonic.now += 600

@pytest.mark.clause("API-2")
def test_c():
    pass
'''

STOPPING = '''
import os
import signal
import pytest

@pytest.mark.clause("API-1")
def test_a():
    pass

@pytest.mark.clause("API-2")
def test_b():
    {stop}

@pytest.mark.clause("API-2")
def test_c():
    pass
'''


def test_a_spent_budget_stops_the_run_and_the_report_names_what_did_not_run(
        project: pytest.Pytester, budget_clock: Monotonic) -> None:  # noqa: F811
    project.makepyfile(test_slow=SLOW)
    result, doc = run_to_the_end(project, "--run-budget-s=1000")
    assert_valid(doc)
    assert short(doc) == {"test_a": "PASS", "test_b": "PASS", "test_c": "NOT_RUN"}
    verdict = doc["verdict"]
    assert verdict["status"] == model.INCOMPLETE, verdict
    stopped = doc["invocation"]["stopped"]
    assert stopped["code"] == rb.RUN_BUDGET and stopped["message"] == (
        "the run budget of 1000 s (--run-budget-s) was spent after 1200 s")
    reason = next(r for r in verdict["reasons"] if r["code"] == "run-stopped")
    assert "1 collected test(s) did not run: test_slow.py::test_c" in reason["message"]
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*run budget of 1000 s*"])


def test_a_run_within_its_budget_is_not_stopped(project: pytest.Pytester,
                                                budget_clock: Monotonic) -> None:  # noqa: F811
    project.makepyfile(test_slow=SLOW)
    result, doc = run_to_the_end(project, "--run-budget-s=1201")
    assert doc["invocation"]["stopped"] is None and result.ret == 0
    assert set(short(doc).values()) == {"PASS"}


@pytest.mark.parametrize("stop,code", [
    ("raise KeyboardInterrupt", rb.INTERRUPTED),
    ("os.kill(os.getpid(), signal.SIGTERM)", rb.TERMINATED),
])
def test_an_interrupted_or_terminated_run_reports_what_ran(project: pytest.Pytester, stop: str,
                                                           code: str) -> None:  # noqa: F811
    project.makepyfile(test_stopping=STOPPING.format(stop=stop))
    _, doc = run_to_the_end(project)
    assert_valid(doc)
    assert short(doc)["test_a"] == "PASS" and short(doc)["test_c"] == "NOT_RUN"
    assert doc["invocation"]["stopped"]["code"] == code
    assert doc["verdict"]["status"] == model.INCOMPLETE
    reason = next(r for r in doc["verdict"]["reasons"] if r["code"] == "run-stopped")
    assert "test_stopping.py::test_c" in reason["message"]


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan"])
def test_a_bad_budget_is_a_usage_error(project: pytest.Pytester, value: str) -> None:  # noqa: F811
    project.makepyfile(test_slow=SLOW)
    result, doc = run(project, f"--run-budget-s={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and not doc
    result.stderr.fnmatch_lines(["*--run-budget-s*expected a number of seconds >= 0*"])


#: Bounds of the unstoppable run: its subprocess (budget 20 s, then the watchdog's kill), and
#: the watchdog's report after the kill; together under the per-test limit (120 s).
UNSTOPPABLE_RUN_S = 80
REPORT_AFTER_KILL_S = 20
UNSTOPPABLE = '''
import ctypes
import threading
import pytest

@pytest.mark.clause("API-2")
def test_hangs_where_no_signal_reaches():   # first: no budget stops the run before it
    # A thread in C with the interpreter lock held (as one computing 10 ** (10 ** 19)):
    # no signal handler, hence no time limit, can run until it returns.
    t = threading.Thread(target=lambda: ctypes.PyDLL(None).sleep(600), daemon=True)
    t.start()
    t.join()

@pytest.mark.clause("API-2")
def test_c():
    pass
'''


def test_a_run_that_never_ends_is_stopped_and_reported_from_its_journal(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    import json
    import time
    project.makepyfile(test_unstoppable=UNSTOPPABLE)
    monkeypatch.setenv("ANTMAN_WATCHDOG_GRACE_S", "1")
    root = Path(rb.__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", python_path(root, project.path))
    out = project.path / "out"
    start = time.monotonic()
    result = project.runpytest_subprocess(
        "-p", "conformance.plugin", "-p", "reports.plugin", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--runtime", "fake_runtime_for_reports", "--report-dir", str(out),
        "--timeout=5", "--run-budget-s=20", timeout=UNSTOPPABLE_RUN_S)
    report = out / "latest-partial" / "certification.json"   # a stopped run is not whole
    written_by = time.monotonic() + REPORT_AFTER_KILL_S       # the watchdog writes it
    while not report.exists() and time.monotonic() < written_by:
        time.sleep(0.2)
    assert report.exists(), (f"no report {REPORT_AFTER_KILL_S} s after the run ended "
                             f"({time.monotonic() - start:.0f} s in all)")
    assert result.ret != 0, result.ret
    doc = json.loads(report.read_text())
    assert_valid(doc)
    assert short(doc) == {"test_hangs_where_no_signal_reaches": "TIMEOUT", "test_c": "NOT_RUN"}
    stopped = doc["invocation"]["stopped"]
    assert stopped["code"] == rb.RUN_BUDGET and "stopped from outside" in stopped["message"]
    assert "test_hangs_where_no_signal_reaches did not end" in stopped["message"]
    reason = next(r for r in doc["verdict"]["reasons"] if r["code"] == "run-stopped")
    assert "test_unstoppable.py::test_c" in reason["message"]
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED        # API-2 TIMEOUT
    assert not list(out.glob(".journal-*")), "the journal was left behind"


HANGS_IN_TEARDOWN = '''
import threading
import pytest

@pytest.fixture
def closes_what_never_ends():
    yield
    threading.Event().wait()   # as close() waiting for a step that a broken fork never ends

@pytest.mark.clause("API-2")
def test_fails_then_its_teardown_hangs(closes_what_never_ends):
    assert False, "[API-2] the failure that comes first"

@pytest.mark.clause("API-2")
def test_c():
    pass
'''


def test_a_teardown_that_hangs_after_a_failure_is_bounded_by_the_per_test_limit(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """pytest-timeout 2.4 stops a test's timer once the test failed, so a teardown that
    never returns after a failure stalled the run (conformance/plugin.py keeps it armed)."""
    project.makepyfile(test_teardown_hangs=HANGS_IN_TEARDOWN)
    root = Path(rb.__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", python_path(root, project.path))
    out = project.path / "out"
    result = project.runpytest_subprocess(
        "-p", "conformance.plugin", "-p", "reports.plugin", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--runtime", "fake_runtime_for_reports", "--report-dir", str(out),
        "--timeout=3", timeout=UNSTOPPABLE_RUN_S)
    latest = writer.newest_pointer(out)
    assert latest is not None, f"no report: {result.outlines[-5:]}"
    doc = json.loads((latest / "certification.json").read_text())
    assert_valid(doc)
    assert result.ret != 0, result.ret
    outcomes = short(doc)
    assert outcomes["test_c"] == "PASS", outcomes            # the run went on after it
    assert outcomes["test_fails_then_its_teardown_hangs"] in ("FAIL", "TIMEOUT"), outcomes
    text = json.dumps(doc)
    assert "the failure that comes first" in text and "Timeout (>3.0s)" in text, \
        "the report keeps the failure and names the teardown's timeout"
