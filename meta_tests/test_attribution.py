"""One bug, one clause: a failing test is blamed on the clauses its failures name
(reports/attribution.py, SPEC.md section 7), not on every clause marker it carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from meta_tests.test_reports import (PASSED, _build, _data,  # noqa: F401 - fixtures
                                     _plotting_imported_before_pytester, _record, by_id,
                                     project, run)
from conformance.preconditions import PreconditionFailed, precondition, precondition_holds
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
                           "tagged": True, "precondition": False}]


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


def test_a_test_that_raised_an_exception_group_reads_its_first_failure_first(
        tmp_path: Path) -> None:
    """Hypothesis' "found 2 distinct failures" is a count, not a cause: the test's message
    starts with its first failure's, and names the group after it."""
    group = "ExceptionGroup: Hypothesis found 2 distinct failures. (2 sub-exceptions)"
    t = _record("t::a", ["API-1", "API-2"], PASSED, ("FAIL", group), PASSED)
    t.whens = ["setup", "call", "teardown"]
    t.failures = {1: [{"tags": ["API-1"], "message": "always false [API-1]\nFalsifying x=1"},
                      {"tags": ["API-2"], "message": "ValueError: second [API-2]"}]}
    one = _record("t::b", ["API-1"], PASSED, ("FAIL", "BaseExceptionGroup: g (1 sub-exception)"),
                  PASSED)
    one.whens = ["setup", "call", "teardown"]
    one.failures = {1: [{"tags": ["API-1"], "message": "KeyboardInterrupt"}]}
    plain = _record("t::c", ["API-1"], PASSED, ("FAIL", "ExceptionGroupish [API-1]"), PASSED)
    plain.failures = {1: [{"tags": ["API-1"], "message": "other"}]}
    torn = _record("t::d", ["API-1"], PASSED, PASSED, ("ERROR", "teardown: BaseExceptionGroup: "
                   "errors while tearing down <Function d> (2 sub-exceptions)"))
    torn.whens = ["setup", "call", "teardown"]
    torn.failures = {2: [{"tags": ["API-1"], "message": "Failed: close() hung [API-1]"},
                         {"tags": [], "message": "RuntimeError: leak"}]}
    tests = by_id(_build(_data(tmp_path, [t, one, plain, torn])), "tests", "nodeid")
    assert tests["t::d"]["message"].startswith("teardown: Failed: close() hung [API-1]\n(and 1 "
                                               "more distinct failure: teardown: "), tests["t::d"]
    assert tests["t::a"]["message"] == ("always false [API-1]\nFalsifying x=1\n(and 1 more "
                                        f"distinct failure: {group})"), tests["t::a"]
    assert tests["t::b"]["message"] == "KeyboardInterrupt", tests["t::b"]
    assert tests["t::c"]["message"] == "ExceptionGroupish [API-1]", tests["t::c"]


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


# --------------------------------------------------------------------------- preconditions

def test_a_failed_precondition_blames_the_clause_depended_on_not_the_clause_under_test() -> None:
    with pytest.raises(PreconditionFailed) as caught:
        with precondition("API-5", "two chunks fill the pool"):
            assert 1 == 2, "setup: the pool is not full [API-2]"
    exc = caught.value
    assert str(exc) == ("precondition failed, two chunks fill the pool [API-5]: setup: the "
                        "pool is not full (API-2)")
    found = at.failures(exc)
    assert found == [{"tags": ["API-5"], "message": str(exc), "precondition": True}]
    a = _attr(["API-1", "API-2"], [PASSED, ("FAIL", "m")], {1: found}, ["setup", "call"])
    assert a.observed == {"API-5": "FAIL", "API-1": "NOT_RUN", "API-2": "NOT_RUN"}
    assert a.failures[0]["precondition"] is True and a.failures[0]["clauses"] == ["API-5"]
    # Any exception of the arrangement counts, and a condition can be checked directly.
    with pytest.raises(PreconditionFailed, match=r"^precondition failed, x \[API-6\]: "
                                                 r"ValueError: no \(API-1\)$"):
        with precondition("API-6", "x"):
            raise ValueError("no [API-1]")
    with pytest.raises(PreconditionFailed, match=r"^precondition failed, held \[API-7\]$"):
        precondition_holds("API-7", False, "held")
    with pytest.raises(ValueError):
        precondition("not a clause", "x").__enter__()


class _T:
    """A test as ``explain`` reads it."""

    def __init__(self, nodeid: str, clauses: list[str], failing: list[str],
                 depends: tuple[str, ...] = ()) -> None:
        self.nodeid, self.clauses, self.depends = nodeid, clauses, list(depends)
        self.verdicts = at.Attribution(
            {}, failures=[{"outcome": "FAIL", "clauses": [c], "message": f"{c} broke [{c}]",
                           "tagged": True, "precondition": False} for c in failing])


def _clauses(*failing: str) -> list[dict]:
    return [{"id": c, "observed_outcome": "FAIL" if c in failing else "PASS"} for c in KNOWN]


def test_the_root_cause_comes_first_and_the_others_say_what_they_follow_from() -> None:
    clauses = _clauses("API-1", "API-2", "API-5")
    tests = [_T("t::split", ["API-1"], ["API-1"]),
             _T("t::layout", ["API-2"], ["API-2"], depends=("API-1",)),
             _T("t::also", ["API-2"], ["API-2"], depends=("API-1", "API-6")),
             _T("t::stats", ["API-5"], ["API-5"], depends=("API-2",))]
    order = at.explain(clauses, tests)
    assert order == ["API-1", "API-2", "API-5"]
    by = {c["id"]: c for c in clauses}
    assert by["API-1"]["rank"] == 1 and by["API-1"]["follows_from"] is None
    assert by["API-2"]["follows_from"] == {
        "clause": "API-1", "nodeid": "t::split", "message": "API-1 broke [API-1]",
        "because": "2 of its 2 failure(s) come from tests that depend on API-1, which failed"}
    assert by["API-5"]["follows_from"]["clause"] == "API-2" and by["API-5"]["rank"] == 3
    assert by["API-6"]["rank"] is None and by["API-6"]["follows_from"] is None


def test_a_clause_failing_where_it_depends_on_nothing_failing_is_a_root_too() -> None:
    clauses = _clauses("API-1", "API-2")
    tests = [_T("t::a", ["API-1"], ["API-1"]),
             _T("t::b", ["API-2"], ["API-2"], depends=("API-1",)),
             _T("t::c", ["API-2"], ["API-2"])]                 # fails on its own
    assert at.explain(clauses, tests) == ["API-1", "API-2"]
    assert all(c["follows_from"] is None for c in clauses)
    # Dependencies on clauses that did not fail explain nothing; a cycle still ranks all.
    clauses = _clauses("API-1", "API-2")
    tests = [_T("t::a", ["API-1"], ["API-1"], depends=("API-2",)),
             _T("t::b", ["API-2"], ["API-2"], depends=("API-1",)),
             _T("t::c", ["API-2"], ["API-2"], depends=("API-1",))]
    assert at.explain(clauses, tests) == ["API-2", "API-1"]


PRECONDITIONS = '''
import pytest
from conformance.preconditions import precondition

@pytest.mark.clause("API-1")
def test_the_root():
    assert False, "the split rule is broken [API-1]"

@pytest.mark.clause("API-2")
def test_arranged_on_the_root():
    with precondition("API-1", "two chunks fill the pool"):
        assert False, "the pool is not full [API-2]"

@pytest.mark.clause("API-2")
def test_checked_after_the_arrangement():
    with precondition("API-1", "two chunks fill the pool"):
        pass
    assert False, "the layout differs [API-2]"
'''


def test_a_run_attributes_preconditions_and_ranks_the_root_cause_first(project) -> None:  # noqa: F811
    project.makepyfile(test_synthetic=PRECONDITIONS)
    _, doc = run(project)
    tests = by_id(doc, "tests", "nodeid")
    arranged = tests["test_synthetic.py::test_arranged_on_the_root"]
    assert arranged["clause_outcomes"] == {"API-1": "FAIL", "API-2": "NOT_RUN"}
    assert arranged["failures"][0]["precondition"] is True and arranged["depends"] == ["API-1"]
    assert doc["failure_ranking"] == ["API-1", "API-2"]
    clauses = by_id(doc)
    assert clauses["API-2"]["follows_from"]["clause"] == "API-1"
    assert clauses["API-2"]["follows_from"]["nodeid"] == "test_synthetic.py::test_the_root"
    md = (project.path / "out" / "latest" / "certification.md").read_text()
    assert md.index("### ❌ API-1") < md.index("### ❌ API-2")
    assert "likely follows from the failure of API-1 in test_synthetic.py::test_the_root" in md
    html = (project.path / "out" / "latest" / "certification.html").read_text()
    assert "likely follows from the failure of API-1" in html


def test_an_expected_exception_check_names_its_clause() -> None:
    from conformance.checks import raises
    with pytest.raises(AssertionError, match=r"^f\(x\) raised ValueError: no, expected TypeError "
                                             r"\[ADJ-6\]$"):
        with raises(TypeError, "ADJ-6", "f(x)"):
            raise ValueError("no")
    with pytest.raises(AssertionError, match=r"^f\(x\) did not raise TypeError \[ADJ-6\]$"):
        with raises(TypeError, "ADJ-6", "f(x)"):
            pass
    with raises((TypeError, KeyError), "ADJ-6", "f(x)"):
        raise KeyError("fine")
