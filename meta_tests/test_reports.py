"""The certification report: outcome mapping, clause aggregation, must-pass list, waivers,
verdict, the files of a run folder, and xdist. Synthetic sessions run in-process (pytester)."""

from __future__ import annotations

import datetime as dt
import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from conformance import spec
from reports import expectations as exp
from reports import model, writer
from reports import mustpass as mp
from reports import outcomes as oc
from reports import environment
from reports import plugin as report_plugin
from reports import render_html, render_md

pytest_plugins = ["pytester"]

SPEC_VERSION = spec.spec_version()
FAKE_RUNTIME = f"""
from conformance.spec import CAPABILITY_NAMES
NAME = "fake-runtime"
VERSION = "9.9"
SPEC_VERSION = {SPEC_VERSION!r}
CAPABILITIES = frozenset({{"bfc", "virtual_clock"}})
globals().update({{name: object() for cap in CAPABILITIES for name in CAPABILITY_NAMES[cap]}})
"""
MUSTPASS = """
# synthetic must-pass list
profile minimal: bfc
[all]
API-1
API-2
[requires worker]
API-6
[requires gpu-target]
API-7
[advisory]
API-5
"""

OUTCOMES_MODULE = '''
import time
import pytest

class HarnessTimeout(Exception):
    antman_outcome = "TIMEOUT"

class HarnessCrash(Exception):
    antman_outcome = "CRASH"

@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")

@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown exploded")

@pytest.mark.clause("API-1")
def test_pass():
    pass

@pytest.mark.clause("API-2")
def test_fail():
    assert 1 == 2, "one is not two [API-2]"

@pytest.mark.clause("API-2")
def test_pass_too():
    pass

@pytest.mark.clause("API-3")
def test_setup_error(broken):
    pass

@pytest.mark.clause("API-3")
def test_teardown_error(bad_teardown):
    pass

@pytest.mark.clause("API-4")
@pytest.mark.timeout(0.2)
def test_hangs():
    time.sleep(5)

@pytest.mark.clause("API-4")
def test_worker_hangs():
    raise HarnessTimeout("worker silent for 30 s")

@pytest.mark.clause("API-5")
def test_worker_crashes():
    raise HarnessCrash("worker exited with -9")

@pytest.mark.clause("API-5")
def test_fails_too():
    assert False

@pytest.mark.clause("API-6")
@pytest.mark.capability("worker")
def test_unsupported():
    pass

@pytest.mark.clause("API-7")
@pytest.mark.capability("bfc")
def test_supported():
    pass

@pytest.mark.clause("API-7")
@pytest.mark.capability("worker")
def test_unsupported_part():
    pass

@pytest.mark.clause("API-7")
def test_skipped():
    pytest.skip("no GPU")

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False
'''


# --------------------------------------------------------------------------- helpers

@pytest.fixture(scope="module", autouse=True)
def _plotting_imported_before_pytester() -> None:
    """pytester drops the modules imported while it lives; numpy cannot be imported twice."""
    import matplotlib.pyplot  # noqa: F401


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    """A synthetic suite: a fake runtime, a must-pass list made official, the suite root.
    Inner runs share this process: Hypothesis' global seed and profile are restored."""
    from hypothesis import core, settings
    monkeypatch.setattr(core, "global_force_seed", core.global_force_seed)
    profile = settings.get_current_profile_name()
    pytester.makepyfile(fake_runtime_for_reports=FAKE_RUNTIME)
    pytester.syspathinsert()
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # inner runs are not workers
    listing = pytester.path / "mustpass.txt"
    listing.write_text(MUSTPASS)
    monkeypatch.setattr(mp, "official_path", lambda version=None: listing)
    monkeypatch.setattr(report_plugin, "certification_root", lambda: pytester.path)
    yield pytester
    settings.load_profile(profile)


def run(pytester: pytest.Pytester, *args: str, **kwargs: Any
        ) -> tuple[pytest.RunResult, dict[str, Any]]:
    out = pytester.path / "out"
    result = pytester.runpytest("-p", "conformance.plugin", "-p", "reports.plugin",
                                "-p", "no:cacheprovider", "--runtime",
                                "fake_runtime_for_reports", "--report-dir", str(out),
                                "--timeout=60", *args, **kwargs)
    latest = writer.newest_pointer(out)       # latest, latest-partial or latest-bench
    doc = json.loads((latest / "certification.json").read_text()) if latest else {}
    return result, doc


def by_id(doc: dict[str, Any], key: str = "clauses", field: str = "id") -> dict[str, dict]:
    return {row[field]: row for row in doc[key]}


def short(doc: dict[str, Any]) -> dict[str, str]:
    return {t["nodeid"].split("::")[-1]: t["outcome"] for t in doc["tests"]}


def assert_valid(doc: dict[str, Any]) -> None:
    errors = writer.validation_errors(doc)
    assert not errors, f"certification.json breaks its schema: {errors[:5]}"


# --------------------------------------------------------------------------- sessions

def test_every_outcome_is_mapped_and_the_run_folder_is_complete(project: pytest.Pytester) -> None:
    project.makepyfile(test_outcomes=OUTCOMES_MODULE)
    result, doc = run(project)
    assert_valid(doc)
    assert short(doc) == {
        "test_pass": "PASS", "test_fail": "FAIL", "test_pass_too": "PASS",
        "test_setup_error": "ERROR", "test_teardown_error": "ERROR", "test_hangs": "TIMEOUT",
        "test_worker_hangs": "TIMEOUT", "test_worker_crashes": "CRASH",
        "test_fails_too": "FAIL", "test_unsupported": "NOT_SUPPORTED",
        "test_supported": "PASS", "test_unsupported_part": "NOT_SUPPORTED",
        "test_skipped": "SKIPPED", "test_xfail": "FAIL"}
    clauses = by_id(doc)
    assert {c: clauses[c]["outcome"] for c in ("API-1", "API-2", "API-3", "API-4", "API-5",
                                               "API-6", "API-7")} == {
        "API-1": "PASS", "API-2": "FAIL", "API-3": "ERROR", "API-4": "TIMEOUT",
        "API-5": "CRASH", "API-6": "NOT_SUPPORTED", "API-7": "PASS"}
    assert clauses["API-7"]["partial"] and not clauses["API-1"]["partial"]
    assert clauses["API-1"]["tests"] == ["test_outcomes.py::test_pass"]
    tests = by_id(doc, "tests", "nodeid")
    assert "one is not two" in tests["test_outcomes.py::test_fail"]["message"]
    assert tests["test_outcomes.py::test_unsupported"]["message"].startswith("NOT_SUPPORTED")
    assert tests["test_outcomes.py::test_supported"]["capabilities"] == ["bfc"]
    # Verdict: required are [all] (API-1, API-2); worker and gpu-target are not met.
    assert doc["mustpass"]["required"] == ["API-1", "API-2"]
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert [r["code"] for r in doc["verdict"]["reasons"]] == ["mustpass-fail"]
    assert doc["verdict"]["reasons"][0]["clauses"] == ["API-2"]
    assert doc["summary"]["tests"]["by_outcome"]["FAIL"] == 3
    assert doc["runtime"]["name"] == "fake-runtime"
    assert doc["execution_target"]["kind"] in ("simulated", "gpu")
    # The run folder: JSON, Markdown, HTML, JUnit XML; and the latest pointer.
    folder = project.path / "out" / "latest"
    md = (folder / "certification.md").read_text()
    html = (folder / "certification.html").read_text()
    assert md.startswith("# ❌ NOT CERTIFIED")
    assert html.index("NOT CERTIFIED") < html.index("Clauses by area")
    assert "http://" not in html.replace("http://www.w3.org", "") and "<script" not in html
    junit = ET.parse(folder / "junit.xml").getroot()
    cases = junit.iter("testcase")
    props = {(p.get("name"), p.get("value")) for c in cases for p in c.iter("property")}
    assert ("antman:clause", "API-1") in props and ("antman:outcome", "CRASH") in props
    result.stdout.fnmatch_lines(["*AntMan certification*", "verdict: NOT CERTIFIED*",
                                 "  - 1 must-pass clause(s) FAIL: API-2", "must-pass clauses: 2 (FAIL 1, PASS 1)",
                                 "tests: 14 (*",
                                 f"report: {project.path / 'out'}*certification.html"])


def test_certified_run_and_require_certified_exit_status(project: pytest.Pytester) -> None:
    project.makepyfile(test_ok='''
        import pytest

        @pytest.mark.clause("API-1")
        def test_one():
            pass

        @pytest.mark.clause("API-2")
        @pytest.mark.parametrize("n", [1, 2])
        def test_two(n):
            pass
    ''')
    result, doc = run(project, "--require-certified")
    assert_valid(doc)
    assert doc["verdict"]["status"] == model.CERTIFIED, doc["verdict"]
    assert doc["verdict"]["profiles"] == ["minimal"]
    assert result.ret == 0
    result.stdout.fnmatch_lines(["verdict: CERTIFIED*"])
    # A subset of the suite is never certified.
    result, doc = run(project, "-k", "test_one", "--require-certified")
    assert doc["verdict"]["status"] == model.INCOMPLETE
    assert result.ret == 1, "--require-certified: INCOMPLETE must fail the run"
    codes = {r["code"] for r in doc["verdict"]["reasons"]}
    assert codes == {"mustpass-not-run", "subset-selection"}, doc["verdict"]
    assert "-k 'test_one'" in doc["invocation"]["selection_reasons"][0]
    # Only the complete run is ``latest``; the subset has its own pointer.
    out = project.path / "out"
    assert (out / "latest-partial").resolve().name == doc["run_id"]
    full = json.loads((out / "latest" / "certification.json").read_text())
    assert full["verdict"]["status"] == model.CERTIFIED and full["run_id"] != doc["run_id"]


def test_waivers_applied_stale_unneeded_gpu_scoped(project: pytest.Pytester) -> None:
    project.makepyfile(test_outcomes=OUTCOMES_MODULE)
    # A test of the suite this run does not collect: its waiver is stale, not unknown.
    project.makepyfile(test_elsewhere="def test_elsewhere():\n    pass\n")
    project.makeconftest('collect_ignore = ["test_elsewhere.py"]\n')
    waivers = project.path / "expectations.toml"
    waivers.write_text(textwrap.dedent('''
        fork = "synthetic"

        [[waiver]]
        clause = "API-2"
        reason = "known failure"
        link = "https://example.org/issues/1"

        [[waiver]]
        test = "test_outcomes.py::test_worker_crash*"
        reason = "worker crash on this fork"
        link = "https://example.org/issues/2"
        outcomes = ["CRASH"]

        [[waiver]]
        clause = "API-1"
        reason = "passes anyway"
        link = "https://example.org/issues/3"

        [[waiver]]
        test = "test_elsewhere.py::test_else*"
        reason = "not collected here"
        link = "https://example.org/issues/4"

        [[waiver]]
        clause = "API-3"
        reason = "only on the big GPU"
        link = "https://example.org/issues/5"
        gpu = "Imaginary GPU 9000*"

        [[waiver]]
        clause = "API-4"
        reason = "expired"
        link = "https://example.org/issues/6"
        expires = 2000-01-01
    '''))
    result, doc = run(project, "--expectations", str(waivers), "--require-certified",
                      "--allow-waivers")
    assert_valid(doc)
    clauses = by_id(doc)
    assert clauses["API-2"]["outcome"] == "WAIVED"
    assert clauses["API-2"]["observed_outcome"] == "FAIL"
    assert clauses["API-1"]["outcome"] == "PASS"
    assert clauses["API-3"]["outcome"] == "ERROR", "a GPU-scoped waiver must not apply here"
    assert clauses["API-4"]["outcome"] == "TIMEOUT", "an expired waiver must not apply"
    # The crash test is waived, but API-5 still has an unwaived FAIL: no hiding behind it.
    tests = by_id(doc, "tests", "nodeid")
    crash = tests["test_outcomes.py::test_worker_crashes"]
    assert (crash["outcome"], crash["observed_outcome"], crash["waiver"]) == ("WAIVED", "CRASH", "W2")
    assert clauses["API-5"]["outcome"] == "FAIL"
    status = {w["id"]: w["status"] for w in doc["expectations"]["waivers"]}
    assert status == {"W1": "applied", "W2": "applied", "W3": "unneeded", "W4": "stale",
                      "W5": "inactive", "W6": "expired"}
    # Must-pass API-1 and API-2 are PASS/WAIVED: certified only with waivers, never plainly.
    assert doc["verdict"]["status"] == model.CERTIFIED_WITH_WAIVERS, doc["verdict"]
    assert result.ret == 0, "--allow-waivers accepts CERTIFIED WITH WAIVERS"
    result.stdout.fnmatch_lines(["*waiver W3: unneeded*", "*waiver W4: stale*",
                                 "*waiver W5: inactive*"])


def test_bad_expectations_file_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    bad = project.path / "bad.toml"
    bad.write_text('[[waiver]]\nclause = "API-1"\nreason = "no link"\n')
    result, _ = run(project, "--expectations", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'link' is required*"])


def test_collection_errors_are_not_certified(project: pytest.Pytester) -> None:
    project.makepyfile(test_broken="import module_that_does_not_exist\n")
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    _, doc = run(project)
    assert_valid(doc)
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert doc["invocation"]["collection_errors"] == ["test_broken.py"]
    assert "collection-errors" in {r["code"] for r in doc["verdict"]["reasons"]}


def test_no_report_writes_nothing(project: pytest.Pytester) -> None:
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    result, doc = run(project, "--no-report")
    assert result.ret == 0 and doc == {}
    assert not (project.path / "out").exists()
    assert "AntMan certification" not in result.stdout.str()


def test_artifacts_become_figures_not_junit_properties(project: pytest.Pytester) -> None:
    project.makepyfile(test_art='''
        import pytest

        @pytest.mark.clause("API-1")
        def test_timeline(report_artifacts):
            report_artifacts.add("e2e_timeline", {
                "steps": [0, 1, 2, 3], "device_bytes": [1 << 20, 2 << 20, 1 << 20, 1 << 20],
                "host_bytes": [0, 0, 1 << 20, 1 << 20], "limit": [4 << 20, 4 << 20, 1 << 20, 1 << 20],
                "period_us": [1000, 1000, 2000, 2000],
                "events": [{"step": 2, "label": "limit 1 MiB"}]})
            report_artifacts.add("idle_slots", {"slots_us": [100, 120, 90, 110], "expected_us": 105})
            with pytest.raises(ValueError):
                report_artifacts.add("bad", {"x": float("nan")})
    ''')
    _, doc = run(project)
    assert_valid(doc)
    assert [a["name"] for a in doc["artifacts"]] == ["e2e_timeline", "idle_slots"]
    folder = project.path / "out" / "latest"
    assert len(doc["files"]["figures"]) == 2
    html = (folder / "certification.html").read_text()
    assert html.count("<svg") >= 2 and "Idle-slot distribution" in html
    assert all((folder / f).read_text().startswith("<svg") for f in doc["files"]["figures"])
    junit = (folder / "junit.xml").read_text()
    assert "antman:artifact" not in junit and "antman:clause" in junit


def test_benchmarks_are_tabulated_and_plotted(project: pytest.Pytester) -> None:
    project.makepyfile(test_bench='''
        import pytest

        @pytest.mark.clause("API-1")
        def test_sum(benchmark):
            benchmark.pedantic(sum, args=(range(100),), rounds=3, iterations=2)
    ''')
    _, doc = run(project)
    assert_valid(doc)
    [bench] = doc["benchmarks"]
    assert bench["name"] == "test_sum" and bench["stats"]["rounds"] == 3
    assert 0 < bench["stats"]["min"] <= bench["stats"]["mean"] <= bench["stats"]["max"]
    html = (project.path / "out" / "latest" / "certification.html").read_text()
    assert "Benchmark statistics" in html and "<svg" in html


def test_run_without_conformance_tests_has_no_verdict(project: pytest.Pytester) -> None:
    project.makepyfile(test_bench='''
        def test_share(benchmark):
            benchmark.extra_info["figures"] = [
                {"name": "allocator share", "value": 0.4, "unit": "%", "target": "< 1 %",
                 "met": True, "how": "synthetic"}]
            benchmark.pedantic(sum, args=(range(10),), rounds=2, iterations=1)

        def test_plain():
            pass
    ''')
    result, doc = run(project, "-k", "test_", "--require-certified")
    assert_valid(doc)
    assert doc["schema_version"] == model.SCHEMA_VERSION == "1.4"
    v = doc["verdict"]
    assert v["status"] == model.NO_VERDICT, v
    assert [r["code"] for r in v["reasons"]] == ["no-conformance-tests"]
    assert "no conformance test ran: this is a benchmark run" in v["reasons"][0]["message"]
    codes = {r["code"] for r in v["reasons"] + v["warnings"]}
    assert not codes & {"mustpass-not-run", "subset-selection", "hypothesis-profile"}, v
    assert result.ret == 1, "--require-certified: NO VERDICT must fail the run"
    assert short(doc) == {"test_share": "PASS", "test_plain": "PASS"}
    result.stdout.fnmatch_lines(["verdict: NO VERDICT*", "  - no conformance test ran: *",
                                 "benchmarks: 1", "tests: 2 (PASS 2)"])
    assert "must-pass clauses:" not in result.stdout.str()
    assert not (project.path / "out" / "latest").exists(), "a benchmark run is not latest"
    folder = project.path / "out" / "latest-bench"
    html = (folder / "certification.html").read_text()
    md = (folder / "certification.md").read_text()
    for text in (html, md):  # no clause listing, no must-pass clause as a failure
        assert "did not pass" not in text and "not exercised" not in text
        assert "Clauses by area" not in text and "Clause grid" not in text
        assert "API-1 " not in text and 'id="API-1"' not in text
    header_end = html.index("</header>")
    assert html.index("NO VERDICT") < header_end
    assert header_end < html.index("Benchmark figures against their targets") \
        < html.index("<svg") < html.index("Benchmark statistics") < html.index("<h2>Summary")
    assert md.startswith(f"# {render_md.VERDICT_SYMBOL[model.NO_VERDICT]} NO VERDICT")
    assert md.index("## Why") < md.index("## Benchmarks") < md.index("| allocator share |") \
        < md.index("## Summary")
    # Once a test names a clause, the run is judged as before.
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    result, doc = run(project, "--require-certified")
    assert doc["verdict"]["status"] == model.INCOMPLETE and result.ret == 1
    assert doc["verdict"]["reasons"][0]["code"] == "mustpass-not-run"


def test_hypothesis_seed_is_recorded(project: pytest.Pytester) -> None:
    project.makepyfile(test_hyp='''
        import pytest
        from hypothesis import given, seed, strategies as st

        @pytest.mark.clause("API-1")
        @given(st.integers())
        def test_generated(x):
            pass

        @pytest.mark.clause("API-1")
        @seed(1234)
        @given(st.integers())
        def test_explicit(x):
            pass
    ''')
    _, doc = run(project)
    assert_valid(doc)
    tests = by_id(doc, "tests", "nodeid")
    generated = tests["test_hyp.py::test_generated"]["hypothesis"]
    # The 'ci' profile of conformance/plugin.py does not derandomize.
    assert generated["source"] == "generated" and generated["seed"].isdigit()
    assert tests["test_hyp.py::test_explicit"]["hypothesis"] == {"seed": "1234",
                                                               "source": "explicit"}
    _, doc = run(project, "--hypothesis-profile", "certify")
    assert by_id(doc, "tests", "nodeid")["test_hyp.py::test_generated"]["hypothesis"] == {
        "seed": None, "source": "derandomize"}
    assert doc["invocation"]["hypothesis_profile"] == "certify"
    _, doc = run(project, "--hypothesis-seed", "77")
    assert by_id(doc, "tests", "nodeid")["test_hyp.py::test_generated"]["hypothesis"] == {
        "seed": "77", "source": "global"}
    assert doc["invocation"]["hypothesis_seed"] == "77"


def test_xdist_worker_crash_is_crash_and_the_run_completes(project: pytest.Pytester) -> None:
    project.makepyfile(test_x='''
        import os
        import pytest

        @pytest.mark.clause("API-1")
        def test_ok():
            pass

        @pytest.mark.clause("API-2")
        def test_dies():
            os._exit(3)

        @pytest.mark.clause("API-2")
        @pytest.mark.parametrize("n", range(4))
        def test_more(n):
            pass
    ''')
    result, doc = run(project, "-n", "2", "-p", "no:benchmark")
    assert_valid(doc)
    tests = by_id(doc, "tests", "nodeid")
    dead = tests["test_x.py::test_dies"]
    assert dead["outcome"] == "CRASH" and "crashed" in dead["message"]
    assert dead["clauses"] == ["API-2"], "clauses of a test whose worker died must be known"
    assert by_id(doc)["API-2"]["outcome"] == "CRASH"
    assert sum(1 for t in doc["tests"] if t["outcome"] == "PASS") == 5
    assert {t["worker"] for t in doc["tests"] if t["outcome"] == "PASS"} <= {"gw0", "gw1", "gw2", "gw3"}
    assert doc["invocation"]["xdist_workers"] == 2
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert (project.path / "out" / "latest" / "junit.xml").exists()
    result.stdout.fnmatch_lines(["verdict: NOT CERTIFIED*"])


def test_xdist_and_plain_runs_agree(project: pytest.Pytester) -> None:
    project.makepyfile(test_outcomes=OUTCOMES_MODULE.replace("@pytest.mark.timeout(0.2)\n", "")
                       .replace("time.sleep(5)", "pass"))
    _, plain = run(project)
    _, dist = run(project, "-n", "2", "-p", "no:benchmark")
    assert_valid(dist)
    assert short(plain) == short(dist)
    assert [(c["id"], c["outcome"], c["tests"]) for c in plain["clauses"]] == \
        [(c["id"], c["outcome"], c["tests"]) for c in dist["clauses"]]


# --------------------------------------------------------------------------- the model

def _record(nodeid: str, clauses: list[str], *phases: tuple[str, str | None]) -> model.TestRecord:
    return model.TestRecord(nodeid, clauses=clauses, phases=list(phases))


PASSED = ("PASS", None)


def _data(tmp_path: Path, tests: list[model.TestRecord], *, gpu: str | None = None,
          caps: tuple[str, ...] = ("bfc",), listing: str = MUSTPASS, official: bool = True,
          waivers: str | None = None, **kw: Any) -> model.RunData:
    clauses = {c: spec.Clause(c, f"title of {c}", c.split("-")[0])
               for c in ("API-1", "API-2", "API-5", "API-6", "API-7")}
    clauses["API-9"] = spec.Clause("API-9", "gone", "API", withdrawn=True)
    (tmp_path / "mp.txt").write_text(listing)
    target = {"kind": "simulated", "source": "in-process", "model": None,
              "driver_version": None, "cuda_version": None, "devices": [],
              "worker_devices": None, "note": None, "extras": {}}
    if gpu:
        target = {"kind": "gpu", "source": "in-process", "model": gpu,
                  "driver_version": "550.54", "cuda_version": "12.4",
                  "devices": [{"index": 0, "model": gpu, "uuid": "GPU-1",
                               "memory_total_bytes": 1 << 34, "pci_bus_id": "3b:00.0"}],
                  "worker_devices": None, "note": None, "extras": {}}
    expectations = exp.Expectations()
    if waivers:
        (tmp_path / "w.toml").write_text(waivers)
        expectations = exp.load(tmp_path / "w.toml")
    return model.RunData(
        clauses=clauses, spec_version=SPEC_VERSION, tests={t.nodeid: t for t in tests},
        runtime={"module": "m", "name": "n", "version": "1", "spec_version": SPEC_VERSION,
                 "capabilities": list(caps), "path": None, "git": None, "worker_cmd": None,
                 "worker_hello": None},
        suite={"name": "s", "version": "1", "git": {"commit": "a" * 40, "dirty": False}},
        python={"version": "3", "implementation": "CPython", "executable": "python"},
        platform={"system": "Linux", "release": "6", "machine": "x86_64", "platform": "Linux",
                  "cpu_count": 2, "cpu_model": "Example CPU"},
        target=target,
        invocation={"args": [], "command": "pytest", "cwd": "/", "tox_env": None,
                    "rootdir": "/", "xdist_workers": 0,
                    "hypothesis_profile": "certify", "hypothesis_seed": None, "timeout_s": None,
                    "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:01Z",
                    "duration_s": 1.0, "runtime_error": None, "require_gpu": False},
        mustpass=mp.load(tmp_path / "mp.txt"), mustpass_official=official,
        expectations=expectations, run_id="r", generated_at="2026-01-01T00:00:01Z",
        today=dt.date(2026, 6, 1), **kw)


def _build(data: model.RunData) -> dict[str, Any]:
    doc = model.build(data)
    doc["files"] = {"json": "c.json", "markdown": "c.md", "html": "c.html", "junit": None,
                    "figures": []}
    assert_valid(doc)
    return doc


def test_verdict_certified_only_with_every_required_clause(tmp_path: Path) -> None:
    ok = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED, PASSED)]
    doc = _build(_data(tmp_path, ok))
    assert doc["verdict"]["status"] == model.CERTIFIED and not doc["verdict"]["reasons"]
    assert {c["id"]: c["must_pass"] for c in doc["clauses"]}["API-5"] is False  # advisory
    # A GPU clause becomes required on a GPU target: not run there -> INCOMPLETE.
    doc = _build(_data(tmp_path, ok, gpu="NVIDIA H100 80GB HBM3"))
    assert doc["verdict"]["status"] == model.INCOMPLETE
    assert doc["verdict"]["reasons"][0]["clauses"] == ["API-7"]
    # Declaring "worker" makes API-6 required.
    doc = _build(_data(tmp_path, ok, caps=("bfc", "worker")))
    assert doc["verdict"]["reasons"][0]["clauses"] == ["API-6"]


@pytest.mark.parametrize("outcome", ["FAIL", "ERROR", "TIMEOUT", "CRASH", "NOT_SUPPORTED"])
def test_any_failing_required_clause_is_not_certified(tmp_path: Path, outcome: str) -> None:
    tests = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], (outcome, "boom"))]
    doc = _build(_data(tmp_path, tests))
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert doc["verdict"]["reasons"][0]["clauses"] == ["API-2"]
    assert outcome in doc["verdict"]["reasons"][0]["message"]


@pytest.mark.parametrize("change, code", [
    ({"caps": ("virtual_clock",)}, "no-profile"),
    ({"official": False}, "mustpass-unofficial"),
    ({"collection_errors": ["test_broken.py"]}, "collection-errors"),
    ({"exitstatus": 3}, "internal-error"),
    ({"listing": MUSTPASS + "[all]\nAPI-99\n"}, "mustpass-unknown-clause"),
])
def test_not_certified_for_the_setup_of_the_run(tmp_path: Path, change: dict, code: str) -> None:
    ok = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED)]
    doc = _build(_data(tmp_path, ok, **change))
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert code in {r["code"] for r in doc["verdict"]["reasons"]}


def test_spec_version_mismatch_and_missing_mustpass(tmp_path: Path) -> None:
    ok = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED)]
    data = _data(tmp_path, ok)
    data.runtime["spec_version"] = "2020.01"
    assert "spec-version-mismatch" in {r["code"] for r in _build(data)["verdict"]["reasons"]}
    data = _data(tmp_path, ok)
    data.mustpass, data.mustpass_error = None, "no must-pass list x.txt for spec 2026.11"
    doc = _build(data)
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    assert doc["verdict"]["reasons"][0]["message"] == "no must-pass list x.txt for spec 2026.11"


def test_incomplete_when_tests_did_not_run_or_were_skipped(tmp_path: Path) -> None:
    tests = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"]),  # never reported
             _record("t::c", ["API-2"], PASSED)]
    doc = _build(_data(tmp_path, tests))
    assert doc["verdict"]["status"] == model.INCOMPLETE
    assert [r["code"] for r in doc["verdict"]["reasons"]] == ["tests-not-run"]
    assert {c["id"]: c["partial"] for c in doc["clauses"]}["API-2"]
    skipped = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], ("SKIPPED", "no GPU"))]
    doc = _build(_data(tmp_path, skipped))
    clause = {c["id"]: c for c in doc["clauses"]}["API-2"]
    assert clause["outcome"] == "NOT_RUN" and "no GPU" in clause["notes"][0]
    assert doc["verdict"]["reasons"][0]["code"] == "mustpass-not-run"


def test_no_verdict_without_a_clause_test_unless_collection_broke(tmp_path: Path) -> None:
    plain = [_record("b::t", [], PASSED), _record("b::u", [], ("SKIPPED", "benchmark only"))]
    data = _data(tmp_path, plain, official=False, selection_reasons=["paths benchmarks"])
    data.runtime["spec_version"] = "2020.01"
    doc = _build(data)
    v = doc["verdict"]
    assert v["status"] == model.NO_VERDICT
    assert [r["code"] for r in v["reasons"]] == ["no-conformance-tests"]
    assert "no collected test names a clause" in v["reasons"][0]["message"]
    # Setup findings that would refuse certification stay visible, as notes.
    assert {"spec-version-mismatch", "mustpass-unofficial"} <= {w["code"] for w in v["warnings"]}
    assert not {"mustpass-not-run", "subset-selection"} & {w["code"] for w in v["warnings"]}
    html = render_html.render(doc, [])
    assert "Must-pass clauses that did not pass" not in html and 'id="API-1"' not in html
    # The tests that failed to collect may be the conformance tests: judged as before.
    doc = _build(_data(tmp_path, plain, collection_errors=["conformance/test_x.py"]))
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED
    codes = {r["code"] for r in doc["verdict"]["reasons"]}
    assert {"collection-errors", "mustpass-not-run"} <= codes
    doc = _build(_data(tmp_path, plain, exitstatus=3))
    assert doc["verdict"]["status"] == model.NOT_CERTIFIED


def test_waived_is_never_pass_and_not_run_is_never_waived(tmp_path: Path) -> None:
    waivers = textwrap.dedent('''
        [[waiver]]
        clause = "API-2"
        reason = "r"
        link = "https://example.org/1"
        gpu = ["NVIDIA H100*"]
    ''')
    tests = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], ("FAIL", "x"))]
    # Scoped to H100: applies there, not on an A100.
    doc = _build(_data(tmp_path, tests, gpu="NVIDIA H100 80GB HBM3", waivers=waivers))
    api2 = {c["id"]: c for c in doc["clauses"]}["API-2"]
    assert (api2["outcome"], api2["observed_outcome"], api2["waiver"]) == ("WAIVED", "FAIL", "W1")
    assert doc["summary"]["must_pass"]["by_outcome"]["WAIVED"] == 1
    tests = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], ("FAIL", "x"))]
    doc = _build(_data(tmp_path, tests, gpu="NVIDIA A100-SXM4-40GB", waivers=waivers))
    assert {c["id"]: c["outcome"] for c in doc["clauses"]}["API-2"] == "FAIL"
    assert doc["expectations"]["waivers"][0]["status"] == "inactive"
    # A clause no test ran stays NOT_RUN; the waiver is stale.
    doc = _build(_data(tmp_path, [_record("t::a", ["API-1"], PASSED)], gpu="NVIDIA H100",
                       waivers=waivers))
    assert {c["id"]: c["outcome"] for c in doc["clauses"]}["API-2"] == "NOT_RUN"
    assert doc["expectations"]["waivers"][0]["status"] == "stale"
    assert doc["verdict"]["status"] == model.INCOMPLETE


def test_clause_aggregation_order() -> None:
    assert oc.aggregate(["PASS", "FAIL", "ERROR", "TIMEOUT", "CRASH"]) == "CRASH"
    assert oc.aggregate(["PASS", "FAIL", "ERROR", "TIMEOUT"]) == "TIMEOUT"
    assert oc.aggregate(["PASS", "FAIL", "ERROR"]) == "ERROR"
    assert oc.aggregate(["PASS", "WAIVED", "FAIL"]) == "FAIL"
    assert oc.aggregate(["PASS", "WAIVED"]) == "WAIVED"
    assert oc.aggregate(["PASS", "NOT_SUPPORTED", "SKIPPED"]) == "PASS"
    assert oc.aggregate(["NOT_SUPPORTED", "SKIPPED"]) == "NOT_SUPPORTED"
    assert oc.aggregate(["SKIPPED", "NOT_RUN"]) == "NOT_RUN"
    assert oc.aggregate([]) == "NOT_RUN"
    assert oc.combine_phases([("PASS", None), ("SKIPPED", "x"), ("PASS", None)]) == ("SKIPPED", "x")
    assert oc.combine_phases([("PASS", None), ("FAIL", "f"), ("ERROR", "e")]) == ("ERROR", "e")


def test_exception_outcome_looks_through_causes_and_groups() -> None:
    class Hung(Exception):
        antman_outcome = "TIMEOUT"

    try:
        try:
            raise Hung("silent")
        except Hung as inner:
            raise AssertionError("step 3 missing") from inner
    except AssertionError as outer:
        assert oc.exception_outcome(outer) == "TIMEOUT"
    assert oc.exception_outcome(ExceptionGroup("g", [ValueError(), Hung()])) == "TIMEOUT"
    assert oc.exception_outcome(ValueError("plain")) is None


# --------------------------------------------------------------------------- files and schema

@pytest.mark.parametrize("text, message", [
    ("[[waiver]]\nclause='API-1'\ntest='x'\nreason='r'\nlink='https://e.org'\n", "exactly one"),
    ("[[waiver]]\nclause='api1'\nreason='r'\nlink='https://e.org'\n", "not a clause ID"),
    ("[[waiver]]\nclause='API-1'\nreason=''\nlink='https://e.org'\n", "'reason' is required"),
    ("[[waiver]]\nclause='API-1'\nreason='r'\nlink='e.org'\n", "http(s) URL"),
    ("[[waiver]]\nclause='API-1'\nreason='r'\nlink='https://e.org'\nbug=1\n", "unknown key"),
    ("[[waiver]]\nclause='API-1'\nreason='r'\nlink='https://e.org'\nexpires='soon'\n", "TOML date"),
    ("waivers = []\n", "unknown top-level"),
    ("[[waiver]\n", "cannot read"),
])
def test_malformed_expectations_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "e.toml"
    path.write_text(text)
    with pytest.raises(exp.ExpectationsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        exp.load(path)


def test_example_expectations_file_loads_and_matches_real_tests() -> None:
    """The shipped example names clauses and tests that exist: copied into a fork's file,
    none of its waivers is stale."""
    from reports.__main__ import collect_suite_subprocess
    example = spec.ROOT / "reports" / "examples" / "expectations.example.toml"
    loaded = exp.load(example)
    assert loaded.waivers and all(w.link.startswith("https://") for w in loaded.waivers)
    tests = collect_suite_subprocess()
    covered = {c for meta in tests.values() for c in meta["clauses"]}
    for w in loaded.waivers:
        if w.clause is not None:
            assert w.clause in covered, f"example waiver {w.id}: no test names {w.clause}"
        else:
            assert any(w.matches_test(nodeid) for nodeid in tests), \
                f"example waiver {w.id}: {w.test!r} matches no conformance test"


@pytest.mark.parametrize("text, message", [
    ("[requires warp_drive]\nAPI-1\n", "unknown requirement"),
    ("[sometimes]\nAPI-1\n", "unknown section"),
    ("API-1\nAPI-1\n", "listed twice"),
    ("api-1\n", "not a clause ID"),
    ("profile p: bfc\nprofile p: vmem\n", "defined twice"),
    ("profile p: teleport\n", "unknown capabilities"),
])
def test_malformed_mustpass_is_rejected(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m.txt"
    path.write_text(text)
    with pytest.raises(mp.MustPassError, match=message):
        mp.load(path)


def test_schema_is_valid_and_rejects_a_waived_pass(tmp_path: Path) -> None:
    import jsonschema
    jsonschema.Draft202012Validator.check_schema(writer.schema())
    assert set(writer.schema()["$defs"]["clause_outcome"]["enum"]) == set(oc.CLAUSE_OUTCOMES)
    doc = _build(_data(tmp_path, [_record("t::a", ["API-1"], PASSED)]))
    clause = doc["clauses"][0]
    clause["waiver"] = "W1"  # a waiver on a PASS clause
    assert writer.validation_errors(doc)
    clause["waiver"], doc["verdict"]["reasons"] = None, []
    doc["verdict"]["status"] = "CERTIFIED"
    assert not writer.validation_errors(doc)
    doc["verdict"]["status"] = "NOT CERTIFIED"  # without a reason
    assert writer.validation_errors(doc)


# --------------------------------------------------------------------------- black-box runs

HELLO: dict[str, Any] = {
    "type": "hello", "protocol": 1, "runtime": {"name": "tensorflow", "version": "2.21.0"},
    "spec_version": SPEC_VERSION, "pid": 7, "t_us": 1, "poll_interval_s": 1.0, "devices": [],
    "workload": {"api": "tf.compat.v1.Session"}}
TF_GPU = {"name": "/job:localhost/replica:0/task:0/device:GPU:0", "pci_bus_id": "3b:00.0",
          "memory_limit": 1 << 30}
NVML = {"driver_version": "550.54", "cuda_version": "12.4", "devices": [
    {"index": 0, "model": "NVIDIA H100", "uuid": "GPU-0", "memory_total_bytes": 1 << 36,
     "pci_bus_id": "1a:00.0", "visible": True},
    {"index": 1, "model": "NVIDIA A100", "uuid": "GPU-1", "memory_total_bytes": 1 << 35,
     "pci_bus_id": "3b:00.0", "visible": False}]}
WORKER_VARS = ("ANTMAN_WORKER_NAME", "ANTMAN_WORKER_VERSION", "ANTMAN_WORKER_SPEC_VERSION")


def _black_box(tmp_path: Path, hellos: list[dict[str, Any]]) -> dict[str, Any]:
    from conformance import blackbox
    data = _data(tmp_path, [_record("t::a", ["API-1"], PASSED)], caps=("worker",))
    hello = hellos[0] if hellos else None
    data.runtime = environment.runtime_info(blackbox, "conformance.blackbox", "w", hello)
    data.target, data.worker_hellos = environment.worker_target(hello), hellos
    return _build(data)


def test_black_box_target_is_what_the_worker_reports(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert environment.bus_key("00000000:3B:00.0") == environment.bus_key("3b:00.0") == "3b:00.0"
    monkeypatch.setattr(environment, "nvml_gpus", lambda: (None, "pynvml not installed"))
    unknown = environment.worker_target(None)
    cpu = environment.worker_target(HELLO)
    named = environment.worker_target({**HELLO, "devices": [TF_GPU]})
    assert (unknown["kind"], unknown["source"], unknown["worker_devices"]) == (
        "unknown", "worker", None)
    assert (cpu["kind"], cpu["model"], cpu["worker_devices"]) == ("cpu", None, [])
    assert "lists no GPU device: tensorflow 2.21.0" in cpu["note"]
    # A device nothing identified is not called a GPU; one the worker calls simulated is.
    assert (named["kind"], named["model"], named["driver_version"], named["devices"]) == (
        "unknown", TF_GPU["name"], None, [])
    assert named["worker_devices"] == [TF_GPU] and "pynvml not installed" in named["note"]
    simulated = environment.worker_target({**HELLO, "devices": [{**TF_GPU, "simulated": True}]})
    assert (simulated["kind"], simulated["worker_devices"]) == ("simulated", [TF_GPU])
    assert render_md.target_text(simulated, short=True) == "1 × simulated device"
    monkeypatch.setattr(environment, "nvml_gpus", lambda: (NVML, ""))
    found = environment.worker_target({**HELLO, "devices": [TF_GPU]})
    # matched by bus id; CUDA_VISIBLE_DEVICES of the suite says nothing about the worker's GPU
    assert (found["model"], found["driver_version"], found["cuda_version"], found["note"]) == (
        "NVIDIA A100", "550.54", "12.4", None)
    assert [d["uuid"] for d in found["devices"]] == ["GPU-1"]
    assert "visible" not in found["devices"][0]
    elsewhere = environment.worker_target({**HELLO, "devices": [{**TF_GPU,
                                                                 "pci_bus_id": "5e:00.0"}]})
    assert (elsewhere["kind"], elsewhere["devices"]) == ("unknown", [])
    assert "NVML lists no GPU at PCI bus 5e:00.0" in elsewhere["note"]
    texts = [render_md.target_text(t) for t in (unknown, cpu, named, found, elsewhere)]
    assert texts[0].startswith("unknown target") and texts[1].startswith("host CPU (the worker's")
    assert texts[2].startswith(f"1 unidentified device (1 device(s) the worker names "
                               f"({TF_GPU['name']}), not identified as a GPU")
    assert texts[3] == "1 × NVIDIA A100, driver 550.54, CUDA 12.4"
    for target in (unknown, cpu, named, found, elsewhere, simulated):
        data = _data(tmp_path, [_record("t::a", ["API-1"], PASSED)])
        data.target = target
        assert _build(data)["execution_target"] == target
    doc = _build(data)
    for broken in ({**cpu, "source": "in-process"}, {**cpu, "worker_devices": [TF_GPU]},
                   {**found, "worker_devices": []}, {**found, "driver_version": None},
                   {**found, "devices": []}):
        assert writer.validation_errors({**doc, "execution_target": broken}), broken


def test_in_process_target_is_the_gpu_only_for_a_runtime_that_declares_cuda(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A runtime without the cuda capability ran nothing on the host's GPU: its target (and so
    # the must-pass sections requiring gpu-target) must not depend on the runner's GPUs.
    monkeypatch.setattr(environment, "nvml_gpus", lambda: (NVML, ""))
    gpu = environment.execution_target(["bfc", "cuda"])
    assert (gpu["kind"], gpu["model"], len(gpu["devices"])) == ("gpu", "NVIDIA H100", 1)
    for caps in (["bfc", "virtual_clock"], [], ["CUDA"]):
        sim = environment.execution_target(caps)
        assert (sim["kind"], sim["devices"], sim["model"]) == ("simulated", [], None), caps
        assert sim["note"] == ("the runtime does not declare the cuda capability, so no test "
                               "ran on the host's GPU (1 x NVIDIA H100)")
    monkeypatch.setattr(environment, "nvml_gpus", lambda: (None, "pynvml not installed"))
    assert environment.execution_target(["cuda"])["kind"] == "simulated"
    assert environment.execution_target(["cuda"])["note"] == "pynvml not installed"


def test_black_box_runtime_is_named_by_its_hello_record(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance import blackbox
    for var in WORKER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(environment, "nvml_gpus", lambda: (None, "pynvml not installed"))
    doc = _black_box(tmp_path, [HELLO])
    rt = doc["runtime"]
    assert (rt["name"], rt["version"], rt["spec_version"], rt["git"]) == (
        "tensorflow", "2.21.0", SPEC_VERSION, None)
    assert rt["worker_hello"] == HELLO and doc["execution_target"]["kind"] == "cpu"
    assert not [w for w in doc["verdict"]["warnings"] if w["code"].startswith("worker-")]
    md = render_md.render(doc, [])
    assert md.count("**tensorflow 2.21.0**") == 1 and "on host CPU (" in md
    assert "Worker's hello record: tensorflow 2.21.0, spec " in md
    # Nothing read: the defaults; an unknown target.
    rt = _black_box(tmp_path, [])["runtime"]
    assert (rt["name"], rt["version"], rt["spec_version"], rt["worker_hello"]) == (
        blackbox.DEFAULT_NAME, blackbox.DEFAULT_VERSION, SPEC_VERSION, None)
    # The variables win over the hello record, each on its own.
    monkeypatch.setenv("ANTMAN_WORKER_NAME", "my-fork")
    rt = _black_box(tmp_path, [HELLO])["runtime"]
    assert (rt["name"], rt["version"]) == ("my-fork", "2.21.0")
    monkeypatch.delenv("ANTMAN_WORKER_NAME")
    # A worker targeting another spec version is rejected for it; differing hellos are noted.
    other = {**HELLO, "spec_version": "1999.1"}
    doc = _black_box(tmp_path, [other, {**HELLO, "devices": [TF_GPU]}])
    assert "spec-version-mismatch" in {r["code"] for r in doc["verdict"]["reasons"]}
    warning = next(w for w in doc["verdict"]["warnings"]
                   if w["code"] == "worker-hello-inconsistent")
    assert "2 variants" in warning["message"] and "3b:00.0" in warning["message"]
    html = render_html.render(
        _black_box(tmp_path, [{**HELLO, "runtime": {"name": "<b>x</b>", "version": "1"}}]), [])
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


# --------------------------------------------------------------------------- the real must-pass list

@pytest.fixture(scope="module")
def official() -> mp.MustPassList:
    path = mp.official_path()
    assert path.exists(), f"no must-pass list for spec {SPEC_VERSION}: {path}"
    return mp.load(path)


def test_mustpass_lists_every_live_clause_exactly_once(official: mp.MustPassList) -> None:
    """Rule: every non-withdrawn clause of SPEC.md is on the list (in a section or
    [advisory]) and every listed ID is a live clause, so nothing escapes certification."""
    clauses = spec.load_clauses()
    listed = set(official.sections)
    unknown = sorted(listed - set(clauses))
    withdrawn = sorted(c for c in listed & set(clauses) if clauses[c].withdrawn)
    missing = [c for c, cl in clauses.items() if not cl.withdrawn and c not in listed]
    assert not unknown, f"must-pass IDs missing from SPEC.md: {unknown}"
    assert not withdrawn, f"withdrawn clauses on the must-pass list: {withdrawn}"
    assert not missing, (f"clauses missing from {official.path.name}: {missing} "
                         "(python -m reports mustpass --write)")


def test_mustpass_profiles_and_gpu_section(official: mp.MustPassList) -> None:
    assert set(official.profiles) == {"in-process", "black-box"}
    assert official.profiles["black-box"] == ("worker",)
    for cid, section in official.sections.items():
        if cid.startswith("GPU-"):
            assert mp.GPU_TARGET in section.requires, f"{cid} must need a GPU target"
    advisory = [c for c, s in official.sections.items() if s.kind == mp.ADVISORY]
    assert len(advisory) <= len(official.sections) // 10, "advisory is for a few SHOULDs"


def test_mustpass_requirements_match_the_tests(official: mp.MustPassList) -> None:
    """Rule: a clause's section requires exactly the capabilities (and gpu-target) its tests
    need, so a runtime meeting them runs every test of it and one missing them is not held
    to it; a clause no test names keeps its area's requirements."""
    from reports.__main__ import collect_suite_subprocess
    needs = mp.clause_requirements(collect_suite_subprocess())
    wrong = {}
    for cid, section in official.sections.items():
        if section.kind == mp.ADVISORY:
            continue
        area = cid.split("-")[0]
        expected = tuple(sorted(needs.get(cid, mp.AREA_REQUIREMENTS.get(area, ()))))
        if section.requires != expected:
            wrong[cid] = f"{section.header} but tests need {list(expected)}"
    assert not wrong, f"must-pass sections out of date (python -m reports mustpass --write): {wrong}"


def test_latest_pointer_and_pruning(tmp_path: Path) -> None:
    runs = [tmp_path / f"2026010{i}T000000Z-rt-{i}" for i in range(1, 5)]
    for run_dir in runs:
        run_dir.mkdir()
    (tmp_path / "keep-me").mkdir()
    writer.point_latest(tmp_path, runs[-1])
    writer.point_latest(tmp_path, runs[-2])
    assert (tmp_path / "latest").resolve() == runs[-2].resolve()
    writer.prune(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["keep-me", "latest", runs[-2].name, runs[-1].name])


def test_a_suite_commit_named_against_its_checkout_is_recorded_and_warned(
        tmp_path: Path) -> None:
    """A tree copied over another checkout (a runner's cache): ANTMAN_SUITE_COMMIT names the
    commit, the report records it, keeps the checkout's finding and says they disagree."""
    data = _data(tmp_path, [_record("t::a", ["API-1"], PASSED)])
    data.suite = {"name": "s", "version": "1",
                  "git": {"commit": "b" * 40, "dirty": None, "source": "env",
                          "checkout": {"commit": "c" * 40, "dirty": True}}}
    doc = _build(data)
    codes = {w["code"]: w["message"] for w in doc["verdict"]["warnings"]}
    assert "suite-dirty" not in codes          # the named commit's cleanliness is unknown
    assert "b" * 40 in codes["suite-commit-disagrees"]
    assert "c" * 40 + " with uncommitted changes" in codes["suite-commit-disagrees"]
    data.suite["git"] = {"commit": "b" * 40, "dirty": False, "source": "git"}
    assert "suite-commit-disagrees" not in {w["code"] for w in _build(data)["verdict"]["warnings"]}
