"""``python -m reports``: every subcommand has ``--help``, works where the README puts you or
says in one line what is missing, takes run folders, prints only its output on stdout, and
meets hostile files (FIFOs, devices, folders, huge, deep or non-UTF-8 files) with one line
and exit status 2, never a traceback or a hang (fixtures/nemesis.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import spec
from fixtures.nemesis import nested_document, special_file
from reports import untrusted

ROOT = spec.ROOT
COMMANDS = ("render", "validate", "mustpass", "coverage", "rerun", "diff")


#: One xdist worker runs this module: its module-scoped run is made once.
pytestmark = pytest.mark.xdist_group("reports_cli")


def reports(*args: str, block: tuple[str, ...] = (), timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    """``python -m reports ARGS`` in a fresh interpreter where the modules ``block`` cannot
    be imported (an environment without them)."""
    code = ("import sys\n"
            f"for name in {list(block)!r}:\n"
            "    sys.modules[name] = None\n"
            "from reports.__main__ import main\n"
            f"sys.exit(main({list(args)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def assert_one_line(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run folder: the conformance module of the clock, certified (a partial run)."""
    out = tmp_path_factory.mktemp("reports-cli") / "out"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_clock.py", "-q",
                           "-n", "0", "-p", "no:randomly", "--report-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    folder = out / "latest-partial"
    assert (folder / "certification.json").is_file(), done.stdout[-3000:]
    return folder.resolve()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command: str) -> None:
    done = reports(command, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m reports"), \
        done.stderr
    assert len(done.stdout.splitlines()) > 3


def test_validate_and_render_take_a_run_folder(run_folder: Path, tmp_path: Path) -> None:
    done = reports("validate", str(run_folder))
    assert done.returncode == 0 and done.stdout.strip() == "valid", done.stderr
    done = reports("validate", str(run_folder / "certification.json"))
    assert done.returncode == 0, done.stderr
    doc = json.loads((run_folder / "certification.json").read_text())
    doc["verdict"]["status"] = "MAYBE"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    done = reports("validate", str(tmp_path / "bad.json"))
    assert done.returncode == 1 and "error(s)" in done.stdout


def test_without_a_dependency_each_command_says_what_is_missing(run_folder: Path,
                                                                tmp_path: Path) -> None:
    assert_one_line(reports("validate", str(run_folder), block=("jsonschema",)), 2,
                    "needs jsonschema")
    assert_one_line(reports("coverage", block=("pytest",)), 2, "needs pytest")
    assert_one_line(reports("mustpass", "--check", block=("pytest",)), 2, "needs pytest")
    doc = json.loads((run_folder / "certification.json").read_text())
    doc["tests"][0]["outcome"] = "FAIL"
    (tmp_path / "failed.json").write_text(json.dumps(doc))
    assert_one_line(reports("rerun", str(tmp_path / "failed.json"), block=("pytest",)), 2,
                    "needs pytest")
    done = reports("rerun", "--print", str(tmp_path / "failed.json"), block=("pytest",))
    assert done.returncode == 0 and "--rerun" in done.stdout, done.stderr


def test_render_never_drops_a_figure_silently(run_folder: Path, tmp_path: Path) -> None:
    """Without matplotlib the report is rewritten without its figures, each one named on
    stderr, and the exit status is 1."""
    folder = tmp_path / "run"
    folder.mkdir()
    doc = json.loads((run_folder / "certification.json").read_text())
    doc["artifacts"] = [{"name": "idle_slots", "nodeid": "t::a",
                         "data": {"slots_us": [100, 200, 300]}}]
    (folder / "certification.json").write_text(json.dumps(doc))
    done = reports("render", str(folder))
    assert done.returncode == 0, done.stderr
    assert any(p.name.startswith("figure-") for p in folder.iterdir())
    done = reports("render", str(folder), block=("matplotlib",))
    assert done.returncode == 1, done.stderr
    assert "matplotlib is not installed" in done.stderr
    assert "figure not drawn: Idle-slot distribution" in done.stderr
    assert "Traceback" not in done.stderr
    assert (folder / "certification.html").is_file()


def test_coverage_prints_only_its_json() -> None:
    done = reports("coverage")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)                  # nothing else on stdout
    assert "BFC-1" in out and all(isinstance(v, list) for v in out.values())


def hostile_files(tmp_path: Path) -> dict[str, Path]:
    """What a path on a command line may name instead of a report."""
    found: dict[str, Path] = {}
    for kind in ("fifo", "symlink_to_fifo", "character_device", "symlink_loop"):
        if special_file(tmp_path / kind, kind):
            found[kind] = tmp_path / kind
    found["dev_zero"] = Path("/dev/zero")
    (tmp_path / "empty_folder").mkdir()
    found["empty_folder"] = tmp_path / "empty_folder"
    found["missing"] = tmp_path / "missing.json"
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:                    # sparse: no disk used
        f.truncate(untrusted.MAX_REPORT_BYTES + 1)
    found["huge"] = huge
    (tmp_path / "deep.json").write_text(nested_document(200_000))
    found["deep"] = tmp_path / "deep.json"
    (tmp_path / "latin1.json").write_bytes(b'{"x": "\xe9"}')
    found["not_utf8"] = tmp_path / "latin1.json"
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    found["not_an_object"] = tmp_path / "list.json"
    (tmp_path / "truncated.json").write_text('{"tests": [')
    found["truncated"] = tmp_path / "truncated.json"
    return found


@pytest.mark.parametrize("command", ["validate", "render", "rerun"])
def test_hostile_files_are_one_line_errors(tmp_path: Path, command: str) -> None:
    for kind, path in hostile_files(tmp_path).items():
        if command == "validate" and kind == "not_an_object":
            continue                    # valid JSON: validate reports the schema errors
        done = reports(command, *(["--print"] if command == "rerun" else []), str(path),
                       timeout=60)
        assert_one_line(done, 2, f"python -m reports {command}: ")
