"""Starting a fork: ``python -m conformance new-fork NAME DIR`` copies the reference runtime as
a package of its own, which certifies CERTIFIED unchanged; the same fork with one line broken
is NOT CERTIFIED on that clause, with a report that points at the bug (SPEC.md API-1)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from conformance import forking, spec
from conformance.control_helpers import runtime_records
from meta_tests.child_env import python_path

ROOT = spec.ROOT
#: the one line of the copy the broken variant changes: no merge into a free predecessor
MERGE_WITH_PREV = "            if prev is not None and prev.allocation_id == -1:\n"


def scaffold(tmp_path: Path, name: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "conformance", "new-fork", name,
                           str(tmp_path / "forks")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"PYTHONPATH={tmp_path / 'forks'} tox -e certify -- --runtime {name}" in done.stdout
    return tmp_path / "forks" / name


def certify(fork: Path, report_dir: Path, *modules: str, workers: int = 0
            ) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    env["PYTHONPATH"] = python_path(fork.parent, ROOT)
    done = subprocess.run([sys.executable, "-m", "pytest", *(modules or ("conformance",)),
                           "--runtime", fork.name, "-n", str(workers), "-q",
                           "-p", "no:cacheprovider", "--report-dir", str(report_dir)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    latest = report_dir / ("latest-partial" if modules else "latest")
    report = latest / "certification.json"
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(report.read_text(encoding="utf-8"))


def failing(doc: dict) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in doc["clauses"]
            if c["must_pass"] and c["outcome"] in ("FAIL", "ERROR", "TIMEOUT", "CRASH")}


@pytest.mark.timeout(1300)   # a whole certification, then one module; each run bounded at 600 s
def test_a_scaffolded_fork_certifies_and_one_broken_line_fails_on_its_clause(
        tmp_path: Path) -> None:
    fork = scaffold(tmp_path, "fork_under_test")
    assert not forking.reference_imports(fork)
    done, doc = certify(fork, tmp_path / "unchanged", workers=2)
    assert doc["runtime"]["module"] == "fork_under_test"
    assert doc["runtime"]["path"].startswith(str(fork)), doc["runtime"]["path"]
    assert doc["verdict"]["status"] == "CERTIFIED", (
        [r["message"] for r in doc["verdict"]["reasons"]], done.stdout[-3000:])

    source = fork / "bfc_allocator.py"
    text = source.read_text(encoding="utf-8")
    assert text.count(MERGE_WITH_PREV) == 1
    source.write_text(text.replace(MERGE_WITH_PREV, "            if False:\n"))
    done, doc = certify(fork, tmp_path / "broken", "conformance/test_bfc.py")
    assert doc["verdict"]["status"] == "NOT CERTIFIED"
    assert failing(doc) == {"BFC-5": "FAIL"}, failing(doc)
    bfc5 = next(c for c in doc["clauses"] if c["id"] == "BFC-5")
    assert bfc5["failures"] and all("[BFC-5]" in f["message"] for f in bfc5["failures"])
    assert "merge the result into the previous chunk" in bfc5["text"]
    md = (tmp_path / "broken" / "latest-partial" / "certification.md").read_text(encoding="utf-8")
    assert f"SPEC.md line {spec.load_clauses()['BFC-5'].line}" in md
    assert "adjacent free chunks" in md or "after freeing everything" in md


def test_new_fork_refuses_what_it_cannot_make(tmp_path: Path) -> None:
    with pytest.raises(forking.ForkError, match="not a lower-case Python package name"):
        forking.new_fork("My-Fork", tmp_path)
    with pytest.raises(forking.ForkError, match="already importable"):
        forking.new_fork("hypothesis", tmp_path)
    with pytest.raises(forking.ForkError, match="would shadow a module"):
        forking.new_fork("json", tmp_path)
    with pytest.raises(forking.ForkError, match="reference runtime's own name"):
        forking.new_fork("reference_runtime", tmp_path)
    (tmp_path / "taken_fork").mkdir()
    with pytest.raises(forking.ForkError, match="exists"):
        forking.new_fork("taken_fork", tmp_path)
    fork = forking.new_fork("fresh_fork", tmp_path)
    init = (fork.path / "__init__.py").read_text()
    assert 'NAME = "fresh_fork"' in init and 'VERSION = "0.1.0"' in init
    assert not (fork.path / "__pycache__").exists()


def test_an_absolute_import_of_the_reference_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "leaky"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("import os\nfrom reference_runtime.clock import RealClock\n")
    assert forking.reference_imports(pkg) == ["leaky/a.py:2"]


def test_a_runtime_logging_under_another_name_is_told_which_namespace_was_searched(
        caplog: pytest.LogCaptureFixture) -> None:
    rt = types.ModuleType("my_fork.runtime")         # a runtime module inside its package
    with caplog.at_level(logging.WARNING):
        logging.getLogger("reference_runtime.env").error("bad value")
        logging.getLogger("my_fork_other.x").error("not ours either")
    found = runtime_records(caplog, rt, logging.ERROR)
    assert found == []
    text = repr(found)
    assert "from loggers 'my_fork' and 'my_fork.*'" in text
    assert "reference_runtime.env (ERROR)" in text and "my_fork_other.x (ERROR)" in text
    with caplog.at_level(logging.WARNING):
        logging.getLogger("my_fork.env").error("ours")
    assert [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)] == ["ours"]


# --- hostile command lines ----------------------------------------------------------------

def new_fork_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance", "new-fork", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("new-fork: "), done.stderr
    assert "Traceback" not in done.stderr and not done.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("name", ["fork_ok\n", "fork\nimport os", "a" * 65, "numpy",
                                  "sitecustomize", "usercustomize", "os", "winreg",
                                  "__main__", "reports", "fixtures", ""])
def test_new_fork_refuses_names_that_are_not_a_package_of_its_own(tmp_path: Path,
                                                                 name: str) -> None:
    assert_one_line_error(new_fork_cli(name, str(tmp_path / "forks")))
    assert not (tmp_path / "forks").exists()


@pytest.mark.parametrize("where", ["reference_runtime", "reference_runtime/sub", ".",
                                   "conformance"])
def test_new_fork_refuses_a_folder_inside_the_suite(where: str) -> None:
    before = sorted(p.name for p in (ROOT / "reference_runtime").iterdir())
    assert_one_line_error(new_fork_cli("fork_inside", str(ROOT / where)), "inside")
    assert sorted(p.name for p in (ROOT / "reference_runtime").iterdir()) == before
    assert not (ROOT / where / "fork_inside").exists()


def test_new_fork_refuses_a_file_a_dangling_link_and_a_locked_folder(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("x")
    assert_one_line_error(new_fork_cli("fork_x", str(tmp_path / "a_file")), "not a folder")
    assert_one_line_error(new_fork_cli("fork_x", str(tmp_path / "a_file" / "below")),
                          "not a folder")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert_one_line_error(new_fork_cli("fork_x", str(tmp_path / "dangling")),
                          "symbolic link", "does not exist")
    assert not (tmp_path / "nowhere").exists()
    if os.geteuid() != 0:                       # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert_one_line_error(new_fork_cli("fork_x", str(locked)), "not writable")


def test_a_failed_copy_leaves_no_partial_fork(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk in the middle of the copy: no fork, no staging folder, no folder the
    call created; the command line says so in one line."""
    import errno
    import shutil
    real_copy = shutil.copy2
    copied = []

    def copy_until_full(src, dst, *args, **kwargs):
        if len(copied) == 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        copied.append(src)
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copy2", copy_until_full)
    with pytest.raises(OSError):
        forking.new_fork("fork_full", tmp_path / "new" / "forks")
    assert len(copied) == 5
    assert sorted(tmp_path.iterdir()) == []
    (tmp_path / "there").mkdir()
    copied.clear()
    assert forking.main(["new-fork", "fork_full", str(tmp_path / "there")]) == 2
    assert list((tmp_path / "there").iterdir()) == []
    monkeypatch.setattr(forking, "_rename_copy",
                        lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    monkeypatch.setattr(shutil, "copy2", real_copy)
    with pytest.raises(KeyboardInterrupt):
        forking.new_fork("fork_full", tmp_path / "there")
    assert list((tmp_path / "there").iterdir()) == []


def test_a_fork_is_made_beside_an_odd_path_and_said_how_to_certify(tmp_path: Path) -> None:
    root = tmp_path / "with space"
    done = new_fork_cli("fork_spaced", str(root))
    assert done.returncode == 0, done.stderr
    assert f"PYTHONPATH='{root}' tox -e certify -- --runtime fork_spaced" in done.stdout
    assert sorted(p.name for p in root.iterdir()) == ["fork_spaced"]
