"""One bug, one clause: a failing test is blamed on the clauses its failures name
(reports/attribution.py, SPEC.md section 7), not on every clause marker it carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from meta_tests.test_reports import (PASSED, _build, _data,  # noqa: F401 - fixtures
                                     _plotting_imported_before_pytester, _record, by_id,
                                     project, run)
from reports import attribution as at
from reports import model

pytest_plugins = ["pytester"]
KNOWN = ("API-1", "API-2", "API-5", "API-6", "API-7")


def _attr(markers, phases, failures=None, whens=()):
    return at.attribute(markers, phases, failures or {}, KNOWN, whens)


def test_a_tagged_failure_blames_its_clause_and_leaves_the_others_not_established() -> None:
    a = _attr(["API-1", "API-2", "API-5"], [PASSED, ("FAIL", "m")],
              {1: [{"tags": ["API-2"], "message": "boom [API-2]"}]}, ["setup", "call"])
    assert a.observed == {"API-2": "FAIL", "API-1": "NOT_RUN", "API-5": "NOT_RUN"}
    assert a.how == at.BY_TAG
    assert "stopped at a failure of API-2 FAIL" in a.notes["API-1"]
    assert a.failures == [{"outcome": "FAIL", "clauses": ["API-2"], "message": "boom [API-2]",
                           "tagged": True}]


def test_a_tag_outside_the_markers_is_blamed_and_unknown_tags_are_ignored() -> None:
    a = _attr(["API-1"], [("FAIL", "m")], {0: [{"tags": ["API-7"], "message": "x"}]})
    assert a.observed == {"API-7": "FAIL", "API-1": "NOT_RUN"}
    a = _attr(["API-1", "API-2"], [("FAIL", "m")], {0: [{"tags": ["XYZ-9"], "message": "x"}]})
    assert a.observed == {"API-1": "FAIL", "API-2": "FAIL"} and a.how == at.UNTAGGED


@pytest.mark.parametrize("markers", [["API-1"], ["API-1", "API-2"]])
def test_an_untagged_failure_blames_every_clause_of_the_test(markers) -> None:
    a = _attr(markers, [("FAIL", "TypeError: x")], {0: [{"tags": [], "message": "x"}]})
    assert a.observed == {c: "FAIL" for c in markers} and a.how == at.UNTAGGED
    assert a.failures[0]["tagged"] is False
    a = _attr(markers, [("ERROR", "setup: boom")])          # no failure recorded at all
    assert a.observed == {c: "ERROR" for c in markers}


@pytest.mark.parametrize("outcome", ["TIMEOUT", "CRASH"])
def test_a_hang_or_crash_blames_the_whole_test(outcome) -> None:
    a = _attr(["API-1", "API-2"], [PASSED, (outcome, "stopped")],
              {1: [{"tags": ["API-2"], "message": "Timeout [API-2]"}]})
    assert a.observed == {"API-1": outcome, "API-2": outcome} and a.how == at.WHOLE_TEST


def test_a_teardown_failure_after_a_failed_body_is_its_consequence() -> None:
    a = _attr(["API-1", "API-2"], [PASSED, ("FAIL", "m"), ("ERROR", "teardown: leak")],
              {1: [{"tags": ["API-2"], "message": "x [API-2]"}],
               2: [{"tags": [], "message": "1 thread still alive"}]},
              ["setup", "call", "teardown"])
    assert a.observed == {"API-2": "ERROR", "API-1": "NOT_RUN"}
    # Without a failed body a teardown failure is judged on its own.
    a = _attr(["API-1", "API-2"], [PASSED, PASSED, ("ERROR", "teardown: leak")],
              {2: [{"tags": [], "message": "1 thread still alive"}]},
              ["setup", "call", "teardown"])
    assert a.observed == {"API-1": "ERROR", "API-2": "ERROR"}


def test_each_failure_of_an_exception_group_is_its_own() -> None:
    try:
        assert False, "first [API-1]"
    except AssertionError as exc:
        first = exc
    second = ValueError("second [API-2]")
    second.add_note("Falsifying example: f(x=1)")
    group = ExceptionGroup("Hypothesis found 2 distinct failures.", [first, second])
    found = at.failures(group)
    assert [f["tags"] for f in found] == [["API-1"], ["API-2"]]
    assert found[0]["message"].startswith("first [API-1]")
    assert found[1]["message"] == "ValueError: second [API-2]\nFalsifying example: f(x=1)"
    # The explanation pytest appends to an assertion is shown but never searched for tags.
    assert at.own_message(AssertionError("msg [API-1]\nassert '[API-2]' == 'x'")) == \
        "msg [API-1]"


def test_a_clause_waiver_excuses_only_the_blamed_clause(tmp_path: Path) -> None:
    waivers = '[[waiver]]\nclause = "API-2"\nreason = "r"\nlink = "https://example.org/1"\n'
    t = _record("t::a", ["API-1", "API-2"], PASSED, ("FAIL", "x [API-2]"), PASSED)
    t.whens = ["setup", "call", "teardown"]
    t.failures = {1: [{"tags": ["API-2"], "message": "x [API-2]"}]}
    doc = _build(_data(tmp_path, [t, _record("t::b", ["API-1"], PASSED)], waivers=waivers))
    clauses = by_id(doc)
    assert clauses["API-2"]["outcome"] == "WAIVED"
    assert clauses["API-1"]["outcome"] == "PASS" and clauses["API-1"]["partial"]
    assert doc["verdict"]["status"] == model.CERTIFIED_WITH_WAIVERS, doc["verdict"]
    assert clauses["API-2"]["failures"][0]["message"] == "x [API-2]"


SYNTHETIC = '''
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.clause("API-1", "API-2", "API-5")
def test_one_bug():
    assert 1 == 1, "fine [API-1]"
    assert 2 == 3, "two is not three [API-2]"

@pytest.mark.clause("API-1", "API-2", "API-5")
@settings(max_examples=50, database=None, derandomize=True)
@given(st.integers(0, 100))
def test_two_distinct_bugs(n):
    if n > 10:
        assert n < 5, "too big [API-5]"
    if n == 0:
        raise ValueError("zero [API-2]")
'''


def test_a_run_blames_the_named_clauses_and_shows_each_message(project) -> None:  # noqa: F811
    project.makepyfile(test_synthetic=SYNTHETIC)
    _, doc = run(project)
    clauses = by_id(doc)
    assert clauses["API-2"]["outcome"] == "FAIL" and clauses["API-5"]["outcome"] == "FAIL"
    assert clauses["API-1"]["outcome"] == "NOT_RUN"
    tests = by_id(doc, "tests", "nodeid")
    two = tests["test_synthetic.py::test_two_distinct_bugs"]
    assert two["attribution"] == "tag"
    assert sorted(tuple(f["clauses"]) for f in two["failures"]) == [("API-2",), ("API-5",)]
    messages = [f["message"] for f in clauses["API-5"]["failures"]]
    assert any("too big [API-5]" in m and "n=11" in m for m in messages)  # the example
    assert clauses["API-2"]["text"] and clauses["API-2"]["spec"]["line"] > 0
    md = (project.path / "out" / "latest" / "certification.md").read_text()
    assert "### ❌ API-2" in md and "two is not three [API-2]" in md and "zero [API-2]" in md
    html = (project.path / "out" / "latest" / "certification.html").read_text()
    assert "too big [API-5]" in html and "SPEC.md line" in html
