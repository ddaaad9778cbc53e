"""The stability gate: ``--repeat N`` runs the selected tests N times and reports a test that
both passed and failed as FLAKY (reports/outcomes.py), never as PASS.

How the runs are made: every test function is parametrized once more with ``repeat<i>of<N>``
(the fixture ``antman_repeat``), so run *i* of ``test_x[a]`` is the node ID
``test_x[a-repeat<i>of<N>]`` and every run is a test of its own for pytest, xdist and the JUnit
XML. The collection is then reordered into N whole passes (all tests of run 1, in collection
order, then all of run 2, ...): under ``--dist loadgroup`` the tests of one xdist group (the
GPU tests) are one work unit in that order, so the GPU group runs as N whole passes on its
worker, and a test that depends on what an earlier test left behind shows it in every pass.
Items pytest does not parametrize (doctests, unittest-style cases) run once.

The report folds the runs of a test back into one test (``fold``): FLAKY when at least one run
passed and one failed (FAIL, ERROR, TIMEOUT or CRASH), with ``repeat``: the number of runs,
how many passed, and each failed run's outcome and message; otherwise the outcome the runs
agree on (the worst failure when every run failed; NOT_RUN when a run never ran, so an
interrupted repetition is INCOMPLETE).

The pytest side (the option, the parametrization, the order) is reports/stability_plugin.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from reports import outcomes as oc

#: The ID a run adds to its test's parameters.
_RUN_ID = re.compile(r"repeat(\d+)of(\d+)")
#: The parameters of a node ID; xdist's ``--dist loadgroup`` appends ``@<group>``.
_IN_PARAMS = re.compile(r"\[(?P<params>.*)\](?P<group>@[^\[\]@]*)?$", re.DOTALL)
MESSAGE_LIMIT = 1000


def run_id(index: int, count: int) -> str:
    return f"repeat{index}of{count}"


def split(nodeid: str) -> tuple[str, int | None, int | None]:
    """(the test's node ID without the run's ID, run index, run count) of a run's node ID;
    ``(nodeid, None, None)`` for a node ID without one."""
    m = _IN_PARAMS.search(nodeid)
    if not m:
        return nodeid, None, None
    params = m.group("params")
    parts = params.split("-")
    for i, part in enumerate(parts):
        found = _RUN_ID.fullmatch(part)
        if found:
            rest = "-".join(parts[:i] + parts[i + 1:])
            base = nodeid[: m.start()] + (f"[{rest}]" if rest else "") + (m.group("group") or "")
            return base, int(found.group(1)), int(found.group(2))
    return nodeid, None, None


def base_nodeid(nodeid: str) -> str:
    return split(nodeid)[0]


def _run_outcome(record: Any) -> tuple[str, str | None]:
    return oc.combine_phases(record.phases)


def _short(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 15] + " ... [truncated]"


def fold(tests: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The test records of a ``--repeat`` run with the runs of each test folded into one
    record (``model.TestRecord``; see the module docstring). Records are not changed."""
    if count <= 1:
        return dict(tests)
    groups: dict[str, list[tuple[int, Any]]] = {}
    result: dict[str, Any] = {}
    for nodeid, record in tests.items():
        base, index, _ = split(nodeid)
        if index is None:
            result[nodeid] = record
        else:
            groups.setdefault(base, []).append((index, record))
    for base, runs in groups.items():
        runs.sort(key=lambda r: r[0])
        outcomes = [(i, *_run_outcome(r)) for i, r in runs]
        failed = [(i, o, m) for i, o, m in outcomes if o in oc.FAILED_RUN]
        passed = sum(1 for _, o, _ in outcomes if o == oc.PASS)
        missing = len(outcomes) < count or any(o == oc.NOT_RUN for _, o, _ in outcomes)
        if failed:   # the record of the worst failed run stands for the test
            worst = min(failed, key=lambda f: (oc.severity(f[1]), f[0]))
            chosen = next(r for i, r in runs if i == worst[0])
        elif missing:
            chosen = next((r for (i, r), (_, o, _) in zip(runs, outcomes) if o == oc.NOT_RUN),
                          runs[0][1])
        else:
            chosen = next((r for (i, r), (_, o, _) in zip(runs, outcomes) if o != oc.PASS),
                          runs[0][1])
        flaky = bool(failed) and passed > 0
        record = dataclasses.replace(
            chosen, nodeid=base, phases=list(chosen.phases) if not (missing and not failed)
            else [], whens=list(chosen.whens), failures=dict(chosen.failures),
            duration_s=sum(r.duration_s for _, r in runs))
        record.repeat = {
            "runs": count, "ran": sum(1 for _, o, _ in outcomes if o != oc.NOT_RUN),
            "passed": passed, "flaky": flaky,
            "failures": [{"run": i, "outcome": o, "message": _short(m)} for i, o, m in failed],
        }
        result[base] = record
    return result


def flaky_message(repeat: Mapping[str, Any]) -> str:
    """"passed 1 of 2 runs; run 1 FAIL: ..." for a folded FLAKY test."""
    head = f"passed {repeat['passed']} of {repeat['runs']} runs"
    fails = "; ".join(f"run {f['run']} {f['outcome']}: {(f['message'] or '').partition(chr(10))[0]}"
                      for f in repeat["failures"][:5])
    return f"{head}; {fails}" if fails else head
