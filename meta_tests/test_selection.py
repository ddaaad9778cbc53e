"""Running part of the suite, and keeping the record straight (SPEC.md section 7, Report):
``--clause``, ``--rerun REPORT``, ``--lf`` from the latest complete report,
``python -m reports rerun``; a partial run is INCOMPLETE and names its selection; only a
complete run moves ``latest`` (partial runs: ``latest-partial``, benchmark runs:
``latest-bench``); old run folders are pruned to ``--keep-runs``; ``tox -e certify`` takes
a path after ``--``."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import spec
from meta_tests.test_reports import _plotting_imported_before_pytester  # noqa: F401
from meta_tests.test_reports import project, run  # noqa: F401
from reports import model, writer
from reports.__main__ import main as reports_main

ROOT = spec.ROOT
pytest_plugins = ["pytester"]
CLAUSE_MODULE = '''
import pytest

@pytest.mark.clause("API-1")
def test_one():
    pass

@pytest.mark.clause("API-2")
def test_two():
    assert 1 == 2

@pytest.mark.clause("API-3")
def test_three():
    pass

def test_no_clause():
    pass
'''


def ran(doc: dict) -> set[str]:
    return {t["nodeid"].split("::")[-1] for t in doc["tests"]}


def pointer(out: Path, name: str) -> str | None:
    link = out / name
    return os.readlink(link) if link.is_symlink() else None


def run_as_configured(project: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    """``run`` with the cache provider turned off the way pyproject.toml does (in addopts:
    loaded, then blocked), where ``--lf`` is an option pytest knows but cannot serve."""
    project.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    out = project.path / "out"
    result = project.runpytest("-p", "conformance.plugin", "-p", "reports.plugin", "--runtime",
                               "fake_runtime_for_reports", "--report-dir", str(out),
                               "--timeout=60", *args)
    latest = writer.newest_pointer(Path(args[args.index("--report-dir") + 1])
                                   if "--report-dir" in args else out)
    return result, json.loads((latest / "certification.json").read_text()) if latest else {}


def test_clause_selects_its_tests_and_the_run_is_partial(project: pytest.Pytester) -> None:
    project.makepyfile(test_clauses=CLAUSE_MODULE)
    out = project.path / "out"
    _, full = run(project)
    assert ran(full) == {"test_one", "test_two", "test_three", "test_no_clause"}
    assert pointer(out, "latest") == full["run_id"]
    result, doc = run(project, "--clause", "API-1")
    assert ran(doc) == {"test_one"}
    assert doc["verdict"]["status"] == model.INCOMPLETE, doc["verdict"]
    assert any(r.startswith("--clause API-1 (1 clause(s))")
               for r in doc["invocation"]["selection_reasons"]), doc["invocation"]
    assert pointer(out, "latest") == full["run_id"], "a partial run must not move latest"
    assert pointer(out, "latest-partial") == doc["run_id"]
    result.stdout.fnmatch_lines(["antman selection: --clause API-1*"])
    # An area selects every clause of it; tests naming no clause are left out.
    _, doc = run(project, "--clause", "API", "--clause", "API-1")
    assert ran(doc) == {"test_one", "test_two", "test_three"}
    # An unknown clause or area: a usage error before any test, nothing written.
    before = sorted(p.name for p in out.iterdir())
    result, _ = run(project, "--clause", "API-99")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--clause 'API-99': no such clause or area in SPEC.md*"])
    assert sorted(p.name for p in out.iterdir()) == before


def test_last_failed_and_rerun_take_the_tests_a_report_did_not_pass(
        project: pytest.Pytester) -> None:
    project.makepyfile(test_clauses=CLAUSE_MODULE)
    out = project.path / "out"
    _, full = run(project)
    assert {t["nodeid"].split("::")[-1]: t["outcome"] for t in full["tests"]}["test_two"] \
        == "FAIL"
    for args in (["--lf"], ["--last-failed"], ["--rerun", str(out / "latest")],
                 ["--rerun", str(out / full["run_id"] / "certification.json")]):
        result, doc = run_as_configured(project, *args)
        assert ran(doc) == {"test_two"}, args
        assert doc["verdict"]["status"] != model.CERTIFIED
        reasons = doc["invocation"]["selection_reasons"]
        assert any(f"the 1 test(s) that did not pass in {full['run_id']}" in r
                   for r in reasons), reasons
        assert pointer(out, "latest") == full["run_id"]
        assert pointer(out, "latest-partial") == doc["run_id"]
    # No complete run to rerun from: --lf runs every test, a complete run, and says so.
    empty = project.path / "elsewhere"
    result, _ = run_as_configured(project, "--lf", "--report-dir", str(empty))
    result.stdout.fnmatch_lines(["antman selection: --last-failed: no complete run in *"])
    doc = json.loads((empty / "latest" / "certification.json").read_text())
    assert len(doc["tests"]) == 4 and doc["invocation"]["selection_complete"]
    # A report that cannot be read is a usage error.
    (project.path / "not-a-report.json").write_text("[1, 2]")
    result, _ = run(project, "--rerun", str(project.path / "not-a-report.json"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_reports_rerun_prints_and_runs_the_command(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "out" / "20260101T000000Z-my_fork-1"
    run_dir.mkdir(parents=True)
    doc = {"run_id": run_dir.name,
           "tests": [{"nodeid": "conformance/test_bfc.py::test_a", "outcome": "FAIL"},
                     {"nodeid": "conformance/test_bfc.py::test_b", "outcome": "PASS"},
                     {"nodeid": "conformance/test_gpu.py::test_c", "outcome": "SKIPPED"}],
           "runtime": {"module": "my_fork", "worker_cmd": None},
           "expectations": {"path": None},
           "invocation": {"hypothesis_profile": "certify"}}
    (run_dir / "certification.json").write_text(json.dumps(doc))
    assert reports_main(["rerun", "--print", str(run_dir), "--", "-n", "2"]) == 0
    cmd = shlex.split(capsys.readouterr().out.strip())
    assert cmd[1:4] == ["-m", "pytest", "conformance"]
    assert cmd[cmd.index("--rerun") + 1] == str((run_dir / "certification.json").resolve())
    assert cmd[cmd.index("--report-dir") + 1] == str((tmp_path / "out").resolve())
    assert cmd[cmd.index("--runtime") + 1] == "my_fork"
    assert "--hypothesis-profile=certify" in cmd and cmd[-2:] == ["-n", "2"]
    doc["tests"][0]["outcome"] = "PASS"
    (run_dir / "certification.json").write_text(json.dumps(doc))
    assert reports_main(["rerun", str(run_dir)]) == 0
    assert capsys.readouterr().out.startswith("nothing to rerun")


def test_runs_are_pruned_to_keep_runs_never_a_pointed_one(project: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    out = project.path / "out"
    _, full = run(project)
    for _ in range(3):
        run(project, "--keep-runs", "2", "-k", "test_ok")
    folders = sorted(p.name for p in out.iterdir() if not p.name.startswith("latest"))
    assert len(folders) == 3 and full["run_id"] in folders, folders   # latest is kept
    assert pointer(out, "latest") == full["run_id"]
    monkeypatch.setenv("ANTMAN_KEEP_RUNS", "0")
    result, _ = run(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ANTMAN_KEEP_RUNS*integer >= 1*"])


def test_prune_and_the_pointers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [tmp_path / f"2026010{i}T000000Z-rt-{i}" for i in range(1, 6)]
    for run_dir in runs:
        run_dir.mkdir()
    writer.point_latest(tmp_path, runs[0])
    writer.point_latest(tmp_path, runs[4], writer.LATEST_PARTIAL)
    (tmp_path / writer.LATEST_BENCH).write_text(runs[1].name + "\n")   # a pointer file
    removed = writer.prune(tmp_path, keep=1)
    assert sorted(p.name for p in removed) == [runs[2].name, runs[3].name]
    assert writer.newest_pointer(tmp_path) == tmp_path / writer.LATEST_PARTIAL
    assert writer.pointer_for({"verdict": {"status": "NO VERDICT"}}) == writer.LATEST_BENCH
    assert writer.pointer_for({"verdict": {"status": "INCOMPLETE"},
                               "invocation": {"selection_complete": False}}) \
        == writer.LATEST_PARTIAL
    assert writer.pointer_for({"verdict": {"status": "INCOMPLETE"},
                               "invocation": {"selection_complete": True}}) == writer.LATEST
    monkeypatch.delenv(writer.KEEP_RUNS_ENV, raising=False)
    assert writer.keep_runs(None) == writer.DEFAULT_KEEP_RUNS == 20
    assert writer.keep_runs("3") == 3
    monkeypatch.setenv(writer.KEEP_RUNS_ENV, "7")
    assert writer.keep_runs(None) == 7
    for bad in ("0", "-1", "x", "1e3", "nan"):
        with pytest.raises(ValueError):
            writer.keep_runs(bad)


def certify_command() -> list[str]:
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini", encoding="utf-8")
    lines = [line for line in ini["testenv:certify"]["commands"].splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


@pytest.mark.timeout(600)             # collecting the whole suite on a loaded machine
@pytest.mark.parametrize("posargs, expected", [
    (["--runtime", "reference_runtime"], None),            # the whole conformance suite
    (["conformance/test_clock.py"], {"conformance/test_clock.py"}),
    (["--runtime", "reference_runtime", "conformance/test_clock.py"],
     {"conformance/test_clock.py"}),
])
def test_tox_certify_takes_a_path_after_the_double_dash(posargs: list[str],
                                                        expected: set[str] | None) -> None:
    """``tox -e certify -- ARGS``: the command of tox.ini with ``{posargs}`` replaced, run
    from the tox.ini folder as tox does (collection only)."""
    cmd = certify_command()
    assert cmd[0] == "pytest" and cmd[-1] == "{posargs}"
    args = [a for a in cmd[1:-1] if a not in ("-n", "auto")]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    done = subprocess.run([sys.executable, "-m", "pytest", *args, "-n", "0", "--co", "-q",
                           "-p", "no:randomly", *posargs], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    files = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    if expected is None:
        assert files and all(f.startswith("conformance/") for f in files), sorted(files)[:5]
        assert "conformance/test_bfc.py" in files
    else:
        assert files == expected
