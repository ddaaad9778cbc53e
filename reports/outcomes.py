"""Outcomes of tests and clauses, and how pytest reports map onto them.

Test outcomes (one per test, from its setup, call and teardown reports):

- ``PASS``: every phase passed.
- ``FAIL``: the test body failed (an assertion or an exception in the call phase), or a test
  marked ``xfail`` failed as expected (expected failures belong in an expectations file, not
  in the suite, so they are reported as what they are).
- ``ERROR``: setup or teardown failed (a fixture, a thread-leak check, ...).
- ``TIMEOUT``: pytest-timeout stopped the test, or the test raised an exception carrying
  ``antman_outcome = "TIMEOUT"`` (the black-box worker harness does so when the worker hangs).
- ``CRASH``: the xdist worker running the test died, or the test raised an exception
  carrying ``antman_outcome = "CRASH"`` (the implementation's worker process died).
  An exception may also carry ``"ERROR"`` or ``"FAIL"``; the carried outcome wins over the
  phase it was raised in.
- ``NOT_SUPPORTED``: skipped with a reason starting ``NOT_SUPPORTED`` (API-2).
- ``SKIPPED``: any other skip (for instance a ``gpu`` test on a machine without a GPU). The
  test did not exercise its clauses: it is "not applicable", not evidence.
- ``NOT_RUN``: collected but never reported (the run stopped early: ``-x``, ``--maxfail``,
  interruption, too many crashed workers).
- ``FLAKY``: with ``--repeat N`` (reports/stability.py), a test that passed in some runs and
  failed (FAIL, ERROR, TIMEOUT or CRASH) in others; the report keeps its pass ratio and each
  failure's message. Never folded into PASS.
- ``WAIVED``: a non-passing test covered by a valid test waiver (its observed outcome is kept).

Clause outcomes: the worst outcome among the tests that exercised the clause, by
``CRASH > TIMEOUT > ERROR > FAIL > FLAKY > WAIVED > PASS``. A NOT_SUPPORTED test is a part of the
clause the runtime does not claim (API-2: it lacks a capability the test needs), so it counts
only when no part of the clause was supported: the clause is then ``NOT_SUPPORTED``. The clause
is ``NOT_RUN`` when no test exercised it (no test names it, or every test naming it was
skipped or not run). A clause with skipped, unsupported or unrun tests besides the ones that
ran is marked *partial*. ``WAIVED`` when a valid clause waiver covers a clause whose outcome is
FAIL, ERROR or NOT_SUPPORTED, or TIMEOUT, CRASH or FLAKY when the waiver names that outcome
(``outcomes = [...]``; never NOT_RUN: a waiver excuses a known failure, not missing evidence).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

PASS = "PASS"
FAIL = "FAIL"
ERROR = "ERROR"
TIMEOUT = "TIMEOUT"
CRASH = "CRASH"
NOT_SUPPORTED = "NOT_SUPPORTED"
WAIVED = "WAIVED"
FLAKY = "FLAKY"
SKIPPED = "SKIPPED"
NOT_RUN = "NOT_RUN"

#: Worst first. WAIVED ranks just above PASS: a waived problem never hides an unwaived one.
SEVERITY: tuple[str, ...] = (CRASH, TIMEOUT, ERROR, FAIL, FLAKY, NOT_SUPPORTED, WAIVED, PASS)
#: Outcomes in which the test exercised the implementation (evidence for its clauses).
RAN = frozenset(SEVERITY)
#: Outcomes a waiver may cover.
WAIVABLE = frozenset({CRASH, TIMEOUT, ERROR, FAIL, FLAKY, NOT_SUPPORTED})
#: What a waiver covers unless it names its outcomes: a hang, a crash or an unstable test is
#: waived only by a waiver that says so (``outcomes = ["TIMEOUT"]``).
WAIVED_BY_DEFAULT = frozenset({FAIL, ERROR, NOT_SUPPORTED})
#: Outcomes of one run of a test that are a failure (FLAKY when another run passed).
FAILED_RUN = frozenset({CRASH, TIMEOUT, ERROR, FAIL})
TEST_OUTCOMES: tuple[str, ...] = (*SEVERITY, SKIPPED, NOT_RUN)
CLAUSE_OUTCOMES: tuple[str, ...] = (*SEVERITY, NOT_RUN)

#: Outcomes an exception may carry in ``antman_outcome``.
STAMPABLE = frozenset({TIMEOUT, CRASH, ERROR, FAIL})
#: The attribute an exception carries to say the implementation hung or crashed.
OUTCOME_ATTRIBUTE = "antman_outcome"
NOT_SUPPORTED_PREFIX = "NOT_SUPPORTED"

_TIMEOUT_TEXT = re.compile(r"Timeout \(>[0-9.]+s\) from pytest-timeout|\+{3,} Timeout \+{3,}")
_CRASH_TEXT = re.compile(r"worker '?[\w-]+'? crashed while running")


def severity(outcome: str) -> int:
    """Rank of an outcome that ran: 0 is the worst."""
    return SEVERITY.index(outcome)


def worst(outcomes: Iterable[str]) -> str | None:
    ran = [o for o in outcomes if o in RAN]
    return min(ran, key=severity) if ran else None


def aggregate(outcomes: Iterable[str]) -> str:
    """Clause outcome from the outcomes of its tests (see the module docstring)."""
    outcomes = list(outcomes)
    supported = worst(o for o in outcomes if o != NOT_SUPPORTED)
    if supported is not None:
        return supported
    return NOT_SUPPORTED if NOT_SUPPORTED in outcomes else NOT_RUN


def exception_outcome(exc: BaseException | None) -> str | None:
    """The ``antman_outcome`` an exception (or one it wraps or groups) carries, if any."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        value = getattr(e, OUTCOME_ATTRIBUTE, None)
        if value in STAMPABLE:
            return value
        stack.extend(getattr(e, "exceptions", ()) or ())
        stack.extend((e.__cause__, e.__context__))
    return None


def skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(longrepr or "")
    return text.removeprefix("Skipped: ").strip()


def failure_message(report: Any, limit: int = 4000) -> str:
    """A short, readable message for a non-passing phase report."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = getattr(crash, "message", None) or getattr(report, "longreprtext", "") or ""
    text = str(text).strip()
    return text if len(text) <= limit else text[: limit - 15] + " ... [truncated]"


def phase_outcome(report: Any, stamped: str | None = None) -> tuple[str, str | None]:
    """(outcome, message) of one phase report. ``stamped`` is an ``antman_outcome`` property."""
    when = getattr(report, "when", "call")
    text = getattr(report, "longreprtext", "") or str(getattr(report, "longrepr", "") or "")
    if stamped in STAMPABLE and report.failed:
        return stamped, failure_message(report)
    if report.passed:
        return PASS, None
    if report.skipped:
        if hasattr(report, "wasxfail"):
            return FAIL, f"expected failure (xfail) in the suite: {report.wasxfail}".strip()
        reason = skip_reason(report)
        if reason.startswith(NOT_SUPPORTED_PREFIX):
            return NOT_SUPPORTED, reason
        return SKIPPED, reason
    if when not in ("setup", "call", "teardown"):  # xdist reports a dead worker as "???"
        return (CRASH if _CRASH_TEXT.search(text) else ERROR), text.strip()
    if _TIMEOUT_TEXT.search(text):
        return TIMEOUT, failure_message(report)
    if when == "call":
        return FAIL, failure_message(report)
    return ERROR, f"{when}: {failure_message(report)}"


def combine_phases(phases: Sequence[tuple[str, str | None]]) -> tuple[str, str | None]:
    """Test outcome from its phase outcomes: the worst problem, else a skip, else PASS."""
    if not phases:
        return NOT_RUN, None
    problems = [p for p in phases if p[0] not in (PASS, SKIPPED)]
    if problems:
        outcome = min((o for o, _ in problems), key=severity)
        return outcome, next((m for o, m in problems if o == outcome and m), None)
    skipped = [p for p in phases if p[0] == SKIPPED]
    return skipped[0] if skipped else (PASS, None)
