"""The run's total time budget, and why a run stopped before its end (SPEC.md section 7).

No bug makes a certification run endless: ``--run-budget-s S`` (default
``DEFAULT_BUDGET_S``; 0 turns it off) bounds the whole run. Once the budget is spent, no
further test starts: the test running then ends within its own time limit, the session ends
as interrupted and the certification report is written for what ran, naming what did not
(``stopped``: ``run-budget``). A run stopped by Ctrl-C (``interrupted``), by SIGTERM (what a
CI system sends when its own limit is reached; ``terminated``) or by an internal error of
pytest or of the suite's plugins (``internal-error``) reports the same way.

Without xdist the budget stops the session between two tests (``session.shouldstop``); under
xdist the controller stops its workers the way ``--maxfail`` does (the xdist session's
``shouldstop``), and the workers themselves apply no budget.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

DEFAULT_BUDGET_S = 3600.0     # an hour: a clean certification takes 1 to 12 minutes (a 16-core GPU host;
                              # a loaded 2-core runner), well under CI job limits
_PLUGIN = "antman-run-budget"
#: the monotonic clock the budget is measured on (the suite's meta-tests replace it)
monotonic = time.monotonic

#: ``stopped["code"]`` values
RUN_BUDGET = "run-budget"
INTERRUPTED = "interrupted"
TERMINATED = "terminated"
INTERNAL_ERROR = "internal-error"


def add_option(group: Any) -> None:
    """``--run-budget-s`` in the report plugin's option group."""
    group.addoption("--run-budget-s", default=None, metavar="S",
                    help=f"stop starting tests once the run has taken S seconds and report "
                         f"what ran (default {DEFAULT_BUDGET_S:g}; 0: no budget)")


def budget_s(config: pytest.Config) -> float | None:
    """The run's budget in seconds, None for none; a usage error when not a number >= 0."""
    raw = config.getoption("--run-budget-s", default=None)
    if raw is None:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise pytest.UsageError(f"--run-budget-s {raw!r}: expected a number of seconds >= 0")
    return value or None


class RunBudget:
    """Stops a run whose budget is spent and remembers why the run stopped early."""

    def __init__(self, config: pytest.Config, budget: float | None) -> None:
        self.config = config
        self.budget = budget
        self.started = monotonic()
        self.stopped: dict[str, str] | None = None
        self._old_sigterm: Any = None

    # -- the budget
    def spent(self) -> bool:
        return self.budget is not None and monotonic() - self.started >= self.budget

    def _stop(self, session: pytest.Session) -> None:
        if self.stopped is None:
            self.stopped = {"code": RUN_BUDGET,
                            "message": f"the run budget of {self.budget:g} s (--run-budget-s) "
                                       f"was spent after "
                                       f"{monotonic() - self.started:.0f} s"}
        dsession = self.config.pluginmanager.getplugin("dsession")
        if dsession is not None:                       # xdist controller: stop the workers
            dsession.shouldstop = self.stopped["message"]
        else:
            session.shouldstop = self.stopped["message"]

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        session = getattr(self.config, "_antman_session", None)
        if session is not None and self.spent():
            self._stop(session)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.config._antman_session = session  # type: ignore[attr-defined]

    # -- SIGTERM ends the run as an interruption, so the report is written
    def install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_DFL and not getattr(current, "antman_run_budget", False):
            return                              # someone else's handler: left alone

        def terminated(signum: int, frame: Any) -> None:
            if self.stopped is None:
                self.stopped = {"code": TERMINATED,
                                "message": "the run was terminated (SIGTERM)"}
            raise KeyboardInterrupt("SIGTERM")

        terminated.antman_run_budget = True  # type: ignore[attr-defined]
        self._old_sigterm = signal.signal(signal.SIGTERM, terminated)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def why_stopped(self, exitstatus: int) -> dict[str, str] | None:
        """``{"code", "message"}`` when the session stopped before its end, else None."""
        if self.stopped is not None:
            return self.stopped
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return {"code": INTERRUPTED, "message": "the run was interrupted"}
        if exitstatus == pytest.ExitCode.INTERNAL_ERROR:
            return {"code": INTERNAL_ERROR,
                    "message": "pytest or a plugin of the suite hit an internal error"}
        return None


def configure(config: pytest.Config) -> None:
    """Start the budget of the run (the controller's; xdist workers apply none)."""
    if hasattr(config, "workerinput") or config.pluginmanager.has_plugin(_PLUGIN):
        return
    run_budget = RunBudget(config, budget_s(config))
    config.pluginmanager.register(run_budget, _PLUGIN)
    run_budget.install_sigterm()


def why_stopped(config: pytest.Config, exitstatus: int) -> dict[str, str] | None:
    """Why the run stopped before its end (see ``RunBudget.why_stopped``), else None."""
    run_budget = config.pluginmanager.get_plugin(_PLUGIN)
    if run_budget is None:
        return RunBudget(config, None).why_stopped(exitstatus)
    return run_budget.why_stopped(exitstatus)
