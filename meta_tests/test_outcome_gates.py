"""The gates of the verdict: the stability gate (``--repeat N``, FLAKY), waivers that cannot
pass for a clean pass (CERTIFIED WITH WAIVERS, explicit TIMEOUT/CRASH waivers, unknown IDs),
``reports diff`` that CI can trust, and expectations files as hostile input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from conformance import spec
from meta_tests.test_reports import (PASSED, _build, _data,  # noqa: F401 (fixtures)
                                     _plotting_imported_before_pytester, _record, assert_valid,
                                     by_id, project, run)
from meta_tests.test_startup_checks import assert_refused, certify, earlier_run  # noqa: F401
from reports import diff
from reports import expectations as exp
from reports import model, render_html, render_md, stability

pytest_plugins = ["pytester"]

FLAKY_MODULE = '''
import pathlib
import pytest

COUNTER = pathlib.Path(__file__).parent / "flaky-counter.txt"

@pytest.mark.clause("API-1")
def test_flaky():
    n = int(COUNTER.read_text()) if COUNTER.exists() else 0
    COUNTER.write_text(str(n + 1))
    assert n % 2 == 1, f"fails on every other run (run {n + 1}) [API-1]"

@pytest.mark.clause("API-2")
@pytest.mark.parametrize("size", [1, 2])
def test_steady(size):
    pass
'''


def junit_props(folder: Path) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    root = ET.parse(folder / "junit.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    suite_props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    cases = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in root.iter("testcase")}
    return suite_props, cases


# --------------------------------------------------------------------------- stability gate

def test_repeat_reports_a_test_that_passed_and_failed_as_flaky_everywhere(
        project: pytest.Pytester) -> None:
    project.makepyfile(test_flaky=FLAKY_MODULE)
    result, doc = run(project, "--repeat", "2")
    assert_valid(doc)
    tests = by_id(doc, "tests", "nodeid")
    assert set(tests) == {"test_flaky.py::test_flaky", "test_flaky.py::test_steady[1]",
                          "test_flaky.py::test_steady[2]"}, "runs fold back into their test"
    flaky = tests["test_flaky.py::test_flaky"]
    assert flaky["outcome"] == flaky["observed_outcome"] == "FLAKY"
    r = flaky["repeat"]
    assert (r["runs"], r["ran"], r["passed"], r["flaky"]) == (2, 2, 1, True)
    assert [(f["run"], f["outcome"]) for f in r["failures"]] == [(1, "FAIL")]
    assert "fails on every other run (run 1)" in r["failures"][0]["message"]
    assert "passed 1 of 2 runs" in flaky["message"]
    assert tests["test_flaky.py::test_steady[2]"]["repeat"]["passed"] == 2
    assert doc["invocation"]["repeat"] == 2
    clauses = by_id(doc)
    assert clauses["API-1"]["outcome"] == "FLAKY" and clauses["API-2"]["outcome"] == "PASS"
    assert doc["summary"]["tests"]["by_outcome"]["FLAKY"] == 1
    # A flaky must-pass clause is never certified, for any runtime.
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert [r["code"] for r in doc["verdict"]["reasons"]] == ["mustpass-flaky"]
    assert "flaky-tests" in {w["code"] for w in doc["verdict"]["warnings"]}
    folder = project.path / "out" / "latest"
    md = (folder / "certification.md").read_text()
    assert "## Flaky tests" in md and "FLAKY, passed 1 of 2 runs" in md
    assert ("run 1 FAIL: AssertionError: fails on every other run (run 1) \\[API-1\\]"
            in md)   # Markdown syntax in report text is escaped (reports/safe_text.py)
    html = (folder / "certification.html").read_text()
    assert "<h2>Flaky tests</h2>" in html and "passed 1 of 2 runs" in html
    suite_props, cases = junit_props(folder)
    assert "test_flaky.py::test_flaky (1/2 passed)" in suite_props["antman:flaky"]
    assert cases["test_flaky[repeat1of2]"]["antman:reported_outcome"] == "FLAKY"
    assert cases["test_flaky[repeat2of2]"]["antman:reported_outcome"] == "FLAKY"
    assert "antman:reported_outcome" not in cases["test_steady[1-repeat1of2]"]
    # The terminal: the flaky test with its failure, and pytest does not count it failed.
    result.stdout.fnmatch_lines(["FLAKY test_flaky.py::test_flaky: passed 1 of 2 runs",
                                 "    run 1 FAIL: AssertionError: fails on every other run "
                                 "(run 1)*"])
    stats = result.stdout.lines[-1]
    assert "1 flaky" in stats and "failed" not in stats, stats
    # Without --repeat the same test is an ordinary FAIL or PASS: the gate is what finds it.
    _, once = run(project)
    assert by_id(once, "tests", "nodeid")["test_flaky.py::test_flaky"]["outcome"] in ("PASS",
                                                                                      "FAIL")


def test_flaky_tests_block_the_reference_runtime_even_waived_or_advisory(tmp_path: Path
                                                                          ) -> None:
    def tests() -> list[model.TestRecord]:
        return [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED),
                _record("t::c[repeat1of2]", ["API-5"], ("TIMEOUT", "hung")),   # advisory
                _record("t::c[repeat2of2]", ["API-5"], PASSED)]

    waiver = textwrap.dedent('''
        [[waiver]]
        test = "t::c"
        reason = "known race"
        link = "https://example.org/7"
        outcomes = ["FLAKY"]
    ''')
    fork = _build(_data(tmp_path, tests(), repeat=2))
    assert {t["nodeid"]: t["outcome"] for t in fork["tests"]}["t::c"] == "FLAKY"
    assert fork["verdict"]["status"] == model.CERTIFIED, "an advisory flaky clause of a fork"
    assert "flaky-tests" in {w["code"] for w in fork["verdict"]["warnings"]}
    data = _data(tmp_path, tests(), repeat=2, waivers=waiver)
    data.runtime["module"] = model.REFERENCE_RUNTIME
    ref = _build(data)
    t = {t["nodeid"]: t for t in ref["tests"]}["t::c"]
    assert (t["outcome"], t["observed_outcome"]) == ("WAIVED", "FLAKY")
    assert ref["verdict"]["status"] == model.NOT_CERTIFIED
    assert [r["code"] for r in ref["verdict"]["reasons"]] == ["flaky-tests"]
    assert "t::c (1/2 passed)" in ref["verdict"]["reasons"][0]["message"]
    # A repetition that never ran leaves the test NOT_RUN: the run is INCOMPLETE.
    partial = [_record("t::a[repeat1of2]", ["API-1"], PASSED),
               _record("t::a[repeat2of2]", ["API-1"]), _record("t::b", ["API-2"], PASSED)]
    doc = _build(_data(tmp_path, partial, repeat=2))
    assert {t["nodeid"]: t["outcome"] for t in doc["tests"]}["t::a"] == "NOT_RUN"
    assert doc["verdict"]["status"] == model.INCOMPLETE


def test_run_ids_fold_back_into_node_ids() -> None:
    assert stability.split("m.py::t[repeat2of3]") == ("m.py::t", 2, 3)
    assert stability.split("m.py::t[a-b-repeat1of2]") == ("m.py::t[a-b]", 1, 2)
    assert stability.split("m.py::t[repeat1of2-x]") == ("m.py::t[x]", 1, 2)
    assert stability.split("m.py::t[repeat]") == ("m.py::t[repeat]", None, None)
    assert stability.split("m.py::t[a-repeat1of2]@gpu") == ("m.py::t[a]@gpu", 1, 2)


def test_the_gpu_group_repeats_as_whole_passes_under_loadgroup(project: pytest.Pytester
                                                               ) -> None:
    project.makepyfile(test_group='''
        import pathlib
        import pytest

        LOG = pathlib.Path(__file__).parent / "order.log"
        GPU = pytest.mark.xdist_group("gpu")

        @GPU
        @pytest.mark.clause("API-1")
        def test_first(request):
            with LOG.open("a") as f:
                f.write(request.node.name + "\\n")

        @GPU
        @pytest.mark.clause("API-2")
        def test_second(request):
            with LOG.open("a") as f:
                f.write(request.node.name + "\\n")
    ''')
    _, doc = run(project, "--repeat", "3", "-n", "2", "--dist", "loadgroup", "-p",
                 "no:benchmark")
    assert_valid(doc)
    order = (project.path / "order.log").read_text().split()
    assert order == [f"test_{n}[repeat{i}of3]" for i in (1, 2, 3) for n in ("first", "second")]
    assert {t["nodeid"]: t["outcome"] for t in doc["tests"]} == {   # xdist adds the group
        "test_group.py::test_first@gpu": "PASS", "test_group.py::test_second@gpu": "PASS"}
    assert len({t["worker"] for t in doc["tests"]}) == 1, "one group, one worker"


# --------------------------------------------------------------------------- waivers

WAIVE_API2 = '''
[[waiver]]
clause = "API-2"
reason = "known failure of this fork"
link = "https://example.org/issues/1"
'''


def test_a_run_that_needed_waivers_is_certified_with_waivers_not_certified(
        project: pytest.Pytester) -> None:
    project.makepyfile(test_fork='''
        import pytest

        @pytest.mark.clause("API-1")
        def test_one():
            pass

        @pytest.mark.clause("API-2")
        def test_two():
            assert False, "broken [API-2]"
    ''')
    waivers = project.path / "expectations.toml"
    waivers.write_text(WAIVE_API2)
    result, doc = run(project, "--expectations", str(waivers), "--require-certified")
    assert_valid(doc)
    v = doc["verdict"]
    assert v["status"] == model.CERTIFIED_WITH_WAIVERS
    assert [r["code"] for r in v["reasons"]] == ["waivers-applied"]
    assert v["reasons"][0]["clauses"] == ["API-2"]
    assert result.ret == 1, "--require-certified: a run that needed waivers is no clean pass"
    result.stdout.fnmatch_lines([
        "verdict: CERTIFIED WITH WAIVERS*",
        "  - certified only with 1 waiver(s) of *: W1 (API-2): known failure of this fork",
        "waived clause API-2 (FAIL) by W1: known failure of this fork "
        "(https://example.org/issues/1)"])
    stats = result.stdout.lines[-1]
    assert "1 waived" in stats and "failed" not in stats, stats
    assert "FAILED test_fork.py::test_two" not in result.stdout.str()
    folder = project.path / "out" / "latest"
    assert (folder / "certification.md").read_text().startswith(
        "# 🛡️ CERTIFIED WITH WAIVERS")
    assert "CERTIFIED WITH WAIVERS" in (folder / "certification.html").read_text()
    suite_props, _ = junit_props(folder)
    assert suite_props["antman:verdict"] == "CERTIFIED WITH WAIVERS"
    assert suite_props["antman:waived"] == "API-2 (W1); test_fork.py::test_two (W1)"
    result, doc = run(project, "--expectations", str(waivers), "--require-certified",
                      "--allow-waivers")
    assert doc["verdict"]["status"] == model.CERTIFIED_WITH_WAIVERS and result.ret == 0


def test_timeouts_and_crashes_are_waived_only_when_the_waiver_says_so(tmp_path: Path) -> None:
    def tests() -> list[model.TestRecord]:
        return [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], ("TIMEOUT", "hung")),
                _record("t::c[gpu]", ["API-5"], ("CRASH", "died")),
                _record("t::cg", ["API-5"], ("FAIL", "not this one"))]

    plain = textwrap.dedent('''
        [[waiver]]
        clause = "API-2"
        reason = "r"
        link = "https://example.org/1"

        [[waiver]]
        test = "t::c[gpu]"
        reason = "r"
        link = "https://example.org/2"
    ''')
    doc = _build(_data(tmp_path, tests(), waivers=plain))
    assert by_id(doc)["API-2"]["outcome"] == "TIMEOUT"
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    status = {w["id"]: (w["status"], w["note"]) for w in doc["expectations"]["waivers"]}
    assert status["W1"][0] == "not-covered" and 'outcomes = ["TIMEOUT"]' in status["W1"][1]
    assert status["W2"][0] == "not-covered"
    tests_by = by_id(doc, "tests", "nodeid")
    assert tests_by["t::cg"]["outcome"] == "FAIL", "[gpu] is literal, not a character class"
    explicit = plain.replace('link = "https://example.org/1"',
                             'link = "https://example.org/1"\noutcomes = ["TIMEOUT"]'
                             ).replace('link = "https://example.org/2"',
                                       'link = "https://example.org/2"\noutcomes = ["CRASH"]')
    doc = _build(_data(tmp_path, tests(), waivers=explicit))
    assert by_id(doc)["API-2"]["outcome"] == "WAIVED"
    assert by_id(doc, "tests", "nodeid")["t::c[gpu]"]["outcome"] == "WAIVED"
    assert by_id(doc, "tests", "nodeid")["t::cg"]["outcome"] == "FAIL"
    assert doc["verdict"]["status"] == model.CERTIFIED_WITH_WAIVERS
    assert doc["expectations"]["waivers"][0]["outcomes"] == ["TIMEOUT"]


def test_unknown_ids_in_an_expectations_file_are_one_usage_error(tmp_path: Path,
                                                                 earlier_run: Path) -> None:
    (tmp_path / "e.toml").write_text(textwrap.dedent('''
        [[waiver]]
        clause = "BFC-99"
        reason = "no such clause"
        link = "https://example.org/1"

        [[waiver]]
        clause = "BFC-7"
        reason = "a real clause"
        link = "https://example.org/2"

        [[waiver]]
        test = "conformance/test_bfc.py::test_no_such_test*"
        reason = "mistyped"
        link = "https://example.org/3"

        [[waiver]]
        test = "conformance/test_bfx.py::*"
        reason = "no such module"
        link = "https://example.org/4"
    '''))
    done = certify(tmp_path, "--expectations", str(tmp_path / "e.toml"))
    assert_refused(done, tmp_path, "3 unknown ID(s)",
                   "clause BFC-99 (W1)", "test_no_such_test*' (W3)", "test_bfx.py::*' (W4)")
    assert "BFC-7" not in done.stderr


# --------------------------------------------------------------------------- expectations
#                                                                              as hostile input

def test_hostile_expectations_files_are_clean_usage_errors(tmp_path: Path,
                                                           project: pytest.Pytester) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(exp.ExpectationsError, match="nested too deeply"):
        exp.load(deep)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(exp.ExpectationsError, match="not a regular file"):
        exp.load(fifo)
    assert time.monotonic() - started < 5, "a FIFO must not be waited on"
    with pytest.raises(exp.ExpectationsError, match="not a regular file"):
        exp.load(Path("/dev/zero"))
    big = tmp_path / "big.toml"
    with big.open("wb") as f:
        f.truncate(exp.MAX_BYTES + 1)
    with pytest.raises(exp.ExpectationsError, match="more than"):
        exp.load(big)
    newline = tmp_path / "newline.toml"
    newline.write_text('[[waiver]]\nclause = "API-1\\n"\nreason = "r"\nlink = "https://e.org"\n')
    with pytest.raises(exp.ExpectationsError, match="not a clause ID"):
        exp.load(newline)
    newline.write_text('[[waiver]]\ntest = "t::x\\n"\nreason = "r"\nlink = "https://e.org"\n')
    with pytest.raises(exp.ExpectationsError, match="control characters"):
        exp.load(newline)
    # Through pytest: a usage error (exit 4), not an INTERNALERROR (exit 3).
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    result, _ = run(project, "--expectations", str(deep))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_waivers_keep_a_bounded_sample_of_what_they_matched(tmp_path: Path) -> None:
    tests = [_record(f"t::x{i}", ["API-5"], PASSED) for i in range(14)]
    tests += [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED)]

    def waivers(n: int) -> str:
        return "".join(f'[[waiver]]\ntest = "t::*"\nreason = "r{i}"\nlink = "https://e.org/{i}"\n'
                       for i in range(n))

    (tmp_path / "many.toml").write_text(waivers(40_000))
    with pytest.raises(exp.ExpectationsError, match="40000 waivers, more than the 5000"):
        exp.load(tmp_path / "many.toml")
    doc = _build(_data(tmp_path, tests, waivers=waivers(exp.MAX_WAIVERS)))
    ws = doc["expectations"]["waivers"]
    assert len(ws) == exp.MAX_WAIVERS
    assert all(w["matched_count"] == 16 and len(w["matched"]) == exp.MATCHED_SAMPLE for w in ws)
    size = len(json.dumps(doc))
    assert size < exp.MAX_WAIVERS * 400, f"{size} bytes for {exp.MAX_WAIVERS} waivers"
    assert len(doc["verdict"]["warnings"]) < 10, "one warning per waiver status, not per waiver"


# --------------------------------------------------------------------------- reports diff

def _doc(tmp_path: Path, outcomes: dict[str, tuple[str, str | None]], waivers: str | None = None,
         **kw: Any) -> dict:
    tests = [_record(f"t::{cid}", [cid], outcome) for cid, outcome in outcomes.items()]
    return _build(_data(tmp_path, tests, waivers=waivers, **kw))


def _diff(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reports", "diff", *map(str, paths)],
                          cwd=spec.ROOT, capture_output=True, text=True, timeout=60)


def test_diff_waived_is_its_own_change_and_the_verdict_counts(tmp_path: Path) -> None:
    failing = _doc(tmp_path, {"API-1": PASSED, "API-2": ("FAIL", "x")})
    waived = _doc(tmp_path, {"API-1": PASSED, "API-2": ("FAIL", "x")}, waivers=WAIVE_API2)
    assert waived["verdict"]["status"] == model.CERTIFIED_WITH_WAIVERS
    (change,) = diff.changes(failing, waived)
    assert (change.old, change.new, change.kind) == ("FAIL", "WAIVED", "waived")
    lines, status = diff.report(failing, waived, "a", "b")
    assert status == 0 and "newly waived (still failing; excused by the expectations file) (1):" \
        in lines and "improvements" not in "\n".join(lines)
    clean = _doc(tmp_path, {"API-1": PASSED, "API-2": PASSED})
    lines, status = diff.report(clean, waived, "a", "b")
    assert status == 1, "CERTIFIED -> CERTIFIED WITH WAIVERS is worse"
    # Same clauses, worse verdict: a regression all the same.
    subset = _doc(tmp_path, {"API-1": PASSED, "API-2": PASSED},
                  selection_reasons=["-k 'x'"])
    lines, status = diff.report(clean, subset, "a", "b")
    assert status == 1 and "regression: the verdict went from CERTIFIED to INCOMPLETE" in lines
    # A must-pass clause missing from NEW, or an outcome nobody knows, is a regression.
    missing = json.loads(json.dumps(clean))
    missing["clauses"] = [c for c in missing["clauses"] if c["id"] != "API-1"]
    assert diff.report(clean, missing, "a", "b")[1] == 1
    odd = json.loads(json.dumps(clean))
    by_id(odd)["API-2"]["outcome"] = None
    assert diff.report(clean, odd, "a", "b")[1] == 1
    by_id(odd)["API-2"]["outcome"] = "MAYBE"
    assert diff.report(clean, odd, "a", "b")[1] == 1
    assert diff.report(clean, clean, "a", "b")[1] == 0
    flaky = _doc(tmp_path, {"API-1": PASSED, "API-2": PASSED})
    by_id(flaky)["API-2"]["outcome"] = "FLAKY"
    (change,) = diff.changes(clean, flaky)
    assert change.kind == "regression"


def test_diff_refuses_unusable_input_in_one_line(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    doc = _doc(tmp_path, {"API-1": PASSED, "API-2": PASSED})
    text = json.dumps(doc)
    good.write_text(text)
    cases: dict[str, Path] = {}
    for name, content in (("truncated", text[: len(text) // 2]), ("malformed", "{'a': 1}"),
                          ("deep", "[" * 100_000 + "]" * 100_000),
                          ("old-schema", text.replace('"schema_version": "1.4"',
                                                      '"schema_version": "1.3"')),
                          ("no-tests", json.dumps({k: v for k, v in doc.items() if k != "tests"})),
                          ("binary", "\udcff")):
        path = tmp_path / f"{name}.json"
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
        cases[name] = path
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    cases["fifo"] = fifo
    cases["dev-zero"] = Path("/dev/zero")
    cases["missing"] = tmp_path / "missing.json"
    needles = {"old-schema": "schema_version '1.3'", "no-tests": "breaks the certification schema",
               "fifo": "not a regular file", "dev-zero": "not a regular file",
               "truncated": "not JSON", "deep": "nested too deeply"}
    for name, path in cases.items():
        done = _diff(path, good)
        assert done.returncode == 2, (name, done.stdout, done.stderr[-2000:])
        assert len(done.stderr.strip().splitlines()) == 1 and not done.stdout, (name, done.stderr)
        assert needles.get(name, "diff: ") in done.stderr, (name, done.stderr)
    assert _diff(good, good).returncode == 0


def test_diff_prints_report_text_safely(tmp_path: Path) -> None:
    old = _doc(tmp_path, {"API-1": PASSED, "API-2": PASSED})
    new = _doc(tmp_path, {"API-1": PASSED, "API-2": ("FAIL", "x")})
    by_id(new)["API-2"]["title"] = "evil\x1b]0;pwned\x07\r\x1b[2Jtitle" + "x" * 5000
    new["runtime"]["name"] = "rt\x1b[31m"
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    done = _diff(tmp_path / "old.json", tmp_path / "new.json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout and "\x07" not in done.stdout
    assert "evil\\x1b]0;pwned\\x07\\x0d\\x1b[2Jtitle" in done.stdout   # CR shown as \\x0d
    assert max(len(line) for line in done.stdout.splitlines()) < 400


def test_renderers_show_waived_and_flaky(tmp_path: Path) -> None:
    tests = [_record("t::a[repeat1of2]", ["API-1"], ("FAIL", "boom [API-1]")),
             _record("t::a[repeat2of2]", ["API-1"], PASSED),
             _record("t::b", ["API-2"], ("FAIL", "x"))]
    doc = _build(_data(tmp_path, tests, waivers=WAIVE_API2, repeat=2))
    md, html = render_md.render(doc, []), render_html.render(doc, [])
    assert "## Waived" in md and "waived clause API-2 (FAIL) by W1" in md
    assert "🎲 FLAKY" in md and "<h2>Waived</h2>" in html and "#ad1457" in html


def test_conformance_verify_runs_the_suite_as_repeated_whole_passes() -> None:
    done = subprocess.run([sys.executable, "-m", "conformance", "verify", "--repeat", "2",
                           "conformance/test_api.py", "--collect-only", "-q", "-p",
                           "no:cacheprovider"], cwd=spec.ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    first = [i for i, line in enumerate(ids) if "repeat1of2" in line]
    second = [i for i, line in enumerate(ids) if "repeat2of2" in line]
    assert first and len(first) == len(second) and max(first) < min(second), \
        "run 1 of every test, then run 2"
    bad = subprocess.run([sys.executable, "-m", "conformance", "verify", "--repeat", "1"],
                         cwd=spec.ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "at least 2" in bad.stderr
