"""Labels that tell the truth (SPEC.md section 7): the verdict says what it covered, the
header names the worker command, the environment header shows no secrets, plots show every
point and never draw a figure that was not reported as 0, the JUnit file says what ran."""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance import plugin as conformance_plugin
from conformance import spec
from meta_tests.test_reports import (PASSED, _build, _data,  # noqa: F401 - fixtures
                                     _plotting_imported_before_pytester, _record, project, run)
from reports import environment, model, plots
from reports import plugin as report_plugin
from reports import render_md

pytest_plugins = ["pytester"]
ROOT = spec.ROOT


def test_a_black_box_verdict_says_it_covered_the_worker_clauses_only(tmp_path: Path) -> None:
    ok = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED)]
    data = _data(tmp_path, ok)
    data.target = {"kind": "simulated", "source": "worker", "model": "/device:GPU:0",
                   "driver_version": None, "cuda_version": None, "devices": [],
                   "worker_devices": [{"name": "/device:GPU:0", "pci_bus_id": "3b:00.0",
                                       "memory_limit": 1 << 30}],
                   "note": "the worker's hello record says it ran on 1 simulated device(s)",
                   "extras": {}}
    doc = _build(data)
    assert doc["verdict"]["status"] == model.CERTIFIED
    assert doc["verdict"]["scope"].endswith("profile: WORKER clauses only (0 must-pass WORKER "
                                            "clauses)")
    line = report_plugin.summary_lines(doc, tmp_path)[0][0]
    assert "1 × simulated device; minimal profile: WORKER clauses only" in line, line
    assert "GPU" not in line
    doc = _build(_data(tmp_path, ok))                            # in-process: all it required
    assert doc["verdict"]["scope"] == "minimal profile: 2 must-pass clauses in 1 areas"


def test_the_header_names_the_worker_command_and_no_secret_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    env.update(TF_VAR_db_password="hunter2", TF_CPP_MIN_LOG_LEVEL="2", ANTMAN_WORKER_NAME="x")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p",
                           "no:cacheprovider", "conformance/test_worker_protocol.py",
                           "--worker-cmd", f"{sys.executable} -m reference_runtime.worker",
                           "--no-report"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    out = done.stdout
    assert (f"antman runtime: black box through the worker command `{sys.executable} -m "
            f"reference_runtime.worker`") in out, out[:3000]
    assert "TF_CPP_MIN_LOG_LEVEL='2'" in out and "ANTMAN_WORKER_NAME='x'" in out
    assert "hunter2" not in out and "TF_VAR" not in out
    shown = conformance_plugin.shown_variables({"TF_VAR_x": "s", "TF_GPU_VMEM": "true",
                                                "GPU_CONFIG_FILE": "c", "HOME": "/root",
                                                "AWS_SECRET_ACCESS_KEY": "k"})
    assert shown == {"GPU_CONFIG_FILE": "c", "TF_GPU_VMEM": "true"}


def test_plots_show_every_point_and_leave_unreported_figures_out() -> None:
    assert [str(v) for v in plots._nums([None, 1, 2.5])] == ["nan", "1.0", "2.5"]
    assert plots._span([150.0, math.nan], 0, 105)[1] > 150
    assert plots._span([50.0], 0, 105) == (0, 105 + 0.05 * 105)
    svg = plots.e2e_timeline({"steps": [0, 1, 2], "device_bytes": [1 << 20, None, 1 << 20],
                              "host_bytes": [0, 0, 0], "limit": [None, None, None],
                              "period_us": [1000, 1000, 1000], "events": []})
    assert "device in use (not reported at 1 step)" in svg
    assert "memory limit: not reported" in svg
    svg = plots.throttle_accuracy({"target_percent": [50, 25, 100],
                                   "measured_percent": [50.0, 10.0, 180.0]})
    assert svg and "180" in svg                       # the y axis reaches the point at 180 %


def test_the_junit_file_names_the_suite_and_carries_the_verdict(project) -> None:  # noqa: F811
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    _, doc = run(project)
    root = ET.parse(project.path / "out" / "latest" / "junit.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite.get("name") == "antman-conformance"
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["antman:verdict"] == doc["verdict"]["status"] == model.INCOMPLETE
    assert props["antman:runtime"] == "fake-runtime 9.9"
    assert props["antman:runtime_module"] == "fake_runtime_for_reports"
    assert props["antman:spec_version"] == spec.spec_version()
    assert "not exercised" in props["antman:verdict_reasons"]
    assert render_md.target_text(doc["execution_target"], short=True) == \
        props["antman:execution_target"]


def test_a_report_says_what_it_measured_even_outside_a_git_checkout(tmp_path: Path) -> None:
    outside = tmp_path / "copy"
    outside.mkdir()
    sha = "ab" * 20
    assert environment.suite_git(outside, {}, tmp_path / "none") == {
        "commit": None, "dirty": None, "source": None}
    assert environment.suite_git(outside, {"ANTMAN_SUITE_COMMIT": sha.upper()},
                                 tmp_path / "none")["commit"] == sha
    stamp = tmp_path / "COMMIT"
    stamp.write_text("$Format:%H$\n")                   # an unexpanded stamp is no commit
    assert environment.suite_git(outside, {}, stamp)["source"] is None
    stamp.write_text(sha + "\n")
    assert environment.suite_git(outside, {}, stamp) == {"commit": sha, "dirty": None,
                                                         "source": "archive"}
    assert environment.suite_git(ROOT, {}, stamp)["source"] == "git"
    # the variable wins over a checkout that does not describe the copy (a tree copied over
    # another checkout), and the checkout's finding is kept; one that agrees is the checkout's
    here = environment.git_info(ROOT)
    other = "cd" * 20
    named = environment.suite_git(ROOT, {"ANTMAN_SUITE_COMMIT": other}, stamp)
    assert named == {"commit": other, "dirty": None, "source": "env", "checkout": here}
    assert environment.suite_git(ROOT, {"ANTMAN_SUITE_COMMIT": here["commit"]}, stamp) == {
        **here, "source": "git"}
    assert (ROOT / ".gitattributes").read_text().count("reports/COMMIT export-subst") == 1
    info = environment.platform_info()
    assert info["cpu_count"] >= 1 and (info["cpu_model"] is None or info["cpu_model"].strip())
    assert environment.command_line() == shlex.join(sys.orig_argv)   # as the shell ran it
    environment.TARGET_EXTRAS.append(lambda target: {"clock_mhz": 1980})
    environment.TARGET_EXTRAS.append(lambda target: 1 / 0)
    try:
        extras = environment.execution_target()["extras"]
    finally:
        del environment.TARGET_EXTRAS[-2:]
    assert extras["clock_mhz"] == 1980 and "ZeroDivisionError" in extras["<lambda>_error"]


def test_the_report_shows_the_host_cpu_and_the_command(project) -> None:  # noqa: F811
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    _, doc = run(project)
    assert doc["invocation"]["command"] and doc["invocation"]["cwd"]
    # the suite's commit as this checkout tells it (git, ANTMAN_SUITE_COMMIT or the stamp)
    assert "cpu_model" in doc["platform"]
    assert doc["suite"]["git"] == environment.suite_info()["git"]
    md = (project.path / "out" / "latest" / "certification.md").read_text()
    assert "- Command: `" in md
    assert f"host {render_md.host_text(doc['platform'])}" in md
    html = (project.path / "out" / "latest" / "certification.html").read_text()
    assert "<b>Host</b>" in html and "<b>Command</b>" in html
