"""Reports recognise AntMan 1.15's own failures (reports/recognition.py).

A failing test is "same as AntMan" when a section 8 deviation's pinned run failed the same
test on one of the clauses it fails now with a message matching the pinned pattern; any
other failure "differs from both". The note reaches the JSON (valid against the schema),
the Markdown and the HTML.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from adapters.antman_1_15.pinning import message_pattern
from reports import recognition, render_html, render_md

SCHEMA = Path(recognition.__file__).parent / "schema" / "certification.schema.json"
NODE = "conformance/test_devices.py::test_get_pci_bus_id[x]"
MESSAGE = "get_pci_bus_id('pci bus id: 3b:00.0') = '00.0', expected '3b:00.0' [DEVICE-5]"


def pins() -> dict:
    return {"deviations": {"D-DEVICE-1": {
        "clauses": ["DEVICE-5"], "status": "switch", "reason": "GPUs must not collide",
        "entry": "D-DEVICE-1 (DEVICE-5): GetPciBusId collapses ... → strict parsing",
        "antman": "collapses", "failures": {NODE: {"outcome": "FAIL", "clauses": ["DEVICE-5"],
                                                   "patterns": [message_pattern(MESSAGE)]}}}}}


def report(nodeid: str, message: str, clause: str = "DEVICE-5") -> dict:
    failure = {"outcome": "FAIL", "clauses": [clause], "message": message, "tagged": True}
    return {"tests": [{"nodeid": nodeid, "outcome": "FAIL", "clauses": [clause],
                       "clause_outcomes": {clause: "FAIL"}, "failures": [failure],
                       "message": message},
                      {"nodeid": "conformance/test_x.py::test_ok", "outcome": "PASS",
                       "clauses": [clause], "clause_outcomes": {clause: "PASS"},
                       "failures": [], "message": None}],
            "clauses": [{"id": clause, "failures": [{**failure, "nodeid": nodeid}]}]}


def test_the_same_failure_is_recognised_with_the_entry() -> None:
    # the same check with other numbers (another bus id) is the same failure
    other = MESSAGE.replace("3b", "5e")
    doc = recognition.annotate(report(NODE, other), pins())
    seen = doc["tests"][0]["antman"]
    assert seen["verdict"] == recognition.SAME and seen["deviations"] == ["D-DEVICE-1"]
    assert seen["note"].startswith("AntMan 1.15 behaves this way too (D-DEVICE-1): the "
                                   "specification differs because GPUs must not collide")
    assert "D-DEVICE-1 (DEVICE-5): GetPciBusId" in seen["note"]
    assert doc["clauses"][0]["failures"][0]["antman_note"] == seen["note"]
    assert "antman" not in doc["tests"][1], "a passing test gets no note"


def test_another_failure_differs_from_both() -> None:
    for doc in (recognition.annotate(report(NODE, "something else [DEVICE-5]"), pins()),
                recognition.annotate(report(NODE, MESSAGE, clause="DEVICE-6"), pins()),
                recognition.annotate(report(NODE.replace("[x]", "[y]"), MESSAGE), pins())):
        seen = doc["tests"][0]["antman"]
        assert seen == {"verdict": recognition.DIFFERS, "deviations": [],
                        "note": "differs from both the specification and AntMan 1.15"}


def test_a_load_bound_failure_is_recognised_by_its_clause_whatever_its_message() -> None:
    """A CPU-time test AntMan fails: the pin saw one check give out (the CPU-time bound),
    a slower machine another (the test's time limit); both are AntMan's failure. On
    another clause it still differs from both."""
    data = pins()
    data["deviations"]["D-DEVICE-1"]["failures"][NODE]["load_bound"] = True
    timeout = "Failed: Timeout (>300.0s) from pytest-timeout."
    seen = recognition.annotate(report(NODE, timeout), data)["tests"][0]["antman"]
    assert seen["verdict"] == recognition.SAME and seen["deviations"] == ["D-DEVICE-1"]
    other = recognition.annotate(report(NODE, timeout, clause="DEVICE-6"), data)
    assert other["tests"][0]["antman"]["verdict"] == recognition.DIFFERS
    plain = recognition.annotate(report(NODE, timeout), pins())["tests"][0]["antman"]
    assert plain["verdict"] == recognition.DIFFERS, "only a load-bound pin matches any message"


def test_a_failure_only_every_switch_together_makes_is_recognised_as_antman_as_shipped(
        ) -> None:
    # No switch alone fails the test; the run with every switch on (the whole suite) did.
    together = {**pins(), "all_on": {"failures": {NODE.replace("[x]", "[z]"): {
        "outcome": "FAIL", "clauses": ["DEVICE-5"], "patterns": [message_pattern(MESSAGE)]}}}}
    doc = recognition.annotate(report(NODE.replace("[x]", "[z]"), MESSAGE), together)
    seen = doc["tests"][0]["antman"]
    assert seen["verdict"] == recognition.SAME and seen["deviations"] == [recognition.ALL_ON]
    assert seen["note"].startswith("AntMan 1.15 behaves this way too (AntMan 1.15 as shipped, "
                                   "every section 8 switch on): no single entry")
    assert doc["clauses"][0]["failures"][0]["antman_note"] == seen["note"]
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    pattern = schema["properties"]["tests"]["items"]["properties"]["antman"]["properties"][
        "deviations"]["items"]["pattern"]
    assert all(re.fullmatch(pattern, d) for d in seen["deviations"] + ["D-RM-12"])
    # an untagged failure of that test, blamed on another of its clauses, shares the note;
    # a tagged one on a clause AntMan's run did not fail does not
    untagged = report(NODE.replace("[x]", "[z]"), MESSAGE)
    other_clause = {"outcome": "FAIL", "clauses": ["DEVICE-6"], "message": "boom",
                    "nodeid": NODE.replace("[x]", "[z]")}
    untagged["clauses"] += [{"id": "DEVICE-6", "failures": [{**other_clause, "tagged": False}]},
                            {"id": "DEVICE-7", "failures": [{**other_clause, "tagged": True}]}]
    notes = [c["failures"][0]["antman_note"]
             for c in recognition.annotate(untagged, together)["clauses"]]
    assert notes[1] == notes[0] != recognition._DIFFERS_NOTE and notes[2] == \
        recognition._DIFFERS_NOTE
    # a load-sensitive failure of that run (not pinned as a set) is recognised the same way
    unstable = {**pins(), "all_on": {"failures": {}, "unstable": together["all_on"]["failures"]}}
    again = recognition.annotate(report(NODE.replace("[x]", "[z]"), MESSAGE), unstable)
    assert again["tests"][0]["antman"]["deviations"] == [recognition.ALL_ON]
    # a switch's own pin comes first; the all-on pin does not widen what it recognises
    assert recognition.recognise(NODE, ["DEVICE-5"], [MESSAGE], together) == ["D-DEVICE-1"]
    for other in (recognition.annotate(report(NODE.replace("[x]", "[z]"), "other [DEVICE-5]"),
                                       together),
                  recognition.annotate(report(NODE.replace("[x]", "[z]"), MESSAGE, "DEVICE-6"),
                                       together)):
        assert other["tests"][0]["antman"]["verdict"] == recognition.DIFFERS


def test_the_note_is_rendered_beside_the_failure() -> None:
    doc = recognition.annotate(report(NODE, MESSAGE), pins())
    test, clause = doc["tests"][0], doc["clauses"][0]
    line = test["antman"]["note"].splitlines()[0]
    # the renderers' own pieces, as small as the edits that call them
    md = render_md._tests({"tests": [{**test, "observed_outcome": "FAIL"}]})
    assert any(line in row for row in md), md
    html = render_html._clause_detail({**clause, "tests": [], "text": None, "notes": []}, {})
    assert "AntMan 1.15 behaves this way too (D-DEVICE-1)" in html


def test_the_pinned_file_loads_and_its_patterns_compile() -> None:
    data = recognition.load_pins()
    assert data is not None, f"{recognition.DATA_PATH} is missing or unreadable"
    for ident, dev in data["deviations"].items():
        assert re.fullmatch(r"D-[A-Z]+-\d+", ident)
        for failure in dev["failures"].values():
            assert failure["patterns"] and all(re.compile(p) for p in failure["patterns"])
