"""STAT clauses under attack: what is at the status path, and writers killed mid-write.

Special files come from ``fixtures/nemesis.py`` (a character device needs root and is
skipped otherwise). ``kill_mid_status_write`` runs a step of the runtime under test in a
child process that is SIGKILLed when it fsyncs its temporary file, leaving it behind.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from conformance.control_helpers import (control_env, expect_value_error,  # noqa: F401
                                         runtime_records, runtimes)
from fixtures import nemesis
from fixtures.status_reader import validate_status
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("statistics", "virtual_clock")

NAME = "pai2sche.json"


def dump_once(rt, ctx, path: Path, clock: VirtualClock | None = None) -> None:
    """One step boundary of a new GPUStatistics on ``path`` (its first run always dumps)."""
    stats = rt.GPUStatistics(str(path), clock=clock or VirtualClock())
    stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                sess_duration_us=1000))


def identity(path: Path) -> tuple:
    st = os.lstat(path)
    link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev, link


def temporaries(directory: Path, name: str = NAME) -> list[str]:
    return sorted(p.name for p in directory.iterdir()
                  if p.name.startswith(f".{name}.") and p.name.endswith(".tmp"))


# -- STAT-9: what is at the status path ------------------------------------------------------
@pytest.mark.clause("STAT-9")
@pytest.mark.parametrize("kind", sorted(nemesis.SPECIAL_FILES))
def test_special_file_at_the_status_path_is_left_alone(rt, runtimes, tmp_path, caplog,
                                                       kind) -> None:
    path = tmp_path / NAME
    if not nemesis.special_file(path, kind):
        pytest.skip(f"a {kind} cannot be made by this user (needs root)")
    before = identity(path)
    resolved = Path(os.path.realpath(path))
    resolved_before = identity(resolved) if os.path.lexists(resolved) else None
    caplog.set_level(logging.WARNING)
    ctx = runtimes()
    for _ in range(2):
        dump_once(rt, ctx, path)          # never raises (STAT-8)
    assert identity(path) == before, \
        f"a dump replaced the {kind} at the status path {path} [STAT-9]"
    if resolved_before is not None:
        assert identity(resolved) == resolved_before, \
            f"a dump replaced {resolved}, what the {kind} at the status path resolves to [STAT-9]"
    errors = runtime_records(caplog, rt, logging.ERROR, containing=str(path.name))
    assert errors, f"a dump refused by the {kind} at the status path logged no error [STAT-8]"
    assert temporaries(tmp_path) == [], \
        f"the refused dump left {temporaries(tmp_path)} behind [STAT-8]"


@pytest.mark.clause("STAT-9")
@pytest.mark.parametrize("target_exists", [True, False])
def test_symlink_at_the_status_path_is_followed(rt, runtimes, tmp_path, target_exists) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "status-target.json"
    if target_exists:
        target.write_text("previous content\n", encoding="utf-8")
    path = tmp_path / NAME
    os.symlink(target, path)
    dump_once(rt, runtimes(), path)
    assert os.path.islink(path) and os.readlink(path) == str(target), \
        "a dump replaced the symlink at the status path instead of its target [STAT-9]"
    document = json.loads(target.read_text(encoding="utf-8"))
    assert validate_status(document) == [], \
        f"the symlink's target does not hold the statistics: {document} [STAT-9]"
    assert temporaries(tmp_path) == [] and temporaries(elsewhere, target.name) == [], \
        "the dump through a symlink left a temporary file behind [STAT-8]"


# -- STAT-10: temporary files of a writer that died ---------------------------------------------
@pytest.mark.clause("STAT-10")
def test_temporary_file_of_a_killed_writer_is_removed(rt, runtimes, tmp_path) -> None:
    path = tmp_path / NAME
    child = nemesis.kill_mid_status_write(rt.__name__, path)
    assert child.returncode == -9, (
        f"the writer was not killed mid-write (exit {child.returncode}): it never fsynced a "
        f"temporary file in {tmp_path} before the rename:\n{child.stdout[-500:]}"
        f"{child.stderr[-2000:]} [STAT-8]")
    left = temporaries(tmp_path)
    assert left, (f"the writer killed while writing left {sorted(os.listdir(tmp_path))}, no "
                  f"temporary file named .{NAME}.<unique>.tmp [STAT-10]")
    live = tmp_path / f".{NAME}.held-by-a-live-writer.tmp"
    bystanders = [tmp_path / f".{NAME}.keep", tmp_path / "other.tmp",
                  tmp_path / f".other.json.x.tmp"]
    for p in [live, *bystanders]:
        p.write_text("x", encoding="utf-8")
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        dump_once(rt, runtimes(), path)
        remaining = temporaries(tmp_path)
    assert remaining == [live.name], (
        f"after the first dump of a new instance the temporary files are {remaining}: "
        f"expected the killed writer's {left} removed and the locked {live.name} kept "
        f"[STAT-10]")
    for p in bystanders:
        assert p.exists(), f"the first dump removed {p.name}, not a temporary file [STAT-10]"
    assert validate_status(json.loads(path.read_text(encoding="utf-8"))) == [], \
        "the new instance did not write the statistics [STAT-8]"


@pytest.mark.clause("STAT-10")
def test_temporary_file_is_locked_while_written(rt, runtimes, tmp_path, monkeypatch) -> None:
    """While the temporary file is fsynced, another open file can take no flock on it."""
    path = tmp_path / NAME
    seen: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(f".{NAME}.") and name.endswith(".tmp"):
            with open(tmp_path / name, "rb") as other:
                try:
                    fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    seen.append((name, False))
                except BlockingIOError:
                    seen.append((name, True))
        real_fsync(fd)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    monkeypatch.setattr(os, "fsync", fsync)
    dump_once(rt, runtimes(), path)
    monkeypatch.undo()
    assert seen, f"no temporary file named .{NAME}.<unique>.tmp was fsynced [STAT-10]"
    assert all(locked for _, locked in seen), \
        f"the temporary file was not under an exclusive flock while written: {seen} [STAT-10]"


# -- API-8 ---------------------------------------------------------------------------------------
@pytest.mark.clause("API-8")
@pytest.mark.parametrize("bad", ["pai\x00sche.json", "pai\ud800sche.json"])
def test_status_path_that_cannot_name_a_file(rt, control_env, tmp_path, bad) -> None:
    path = f"{tmp_path}/{bad}"
    expect_value_error(lambda: rt.GPUStatistics(path, clock=VirtualClock()),
                       f"GPUStatistics({bad!r})", "API-8")
    expect_value_error(lambda: rt.create_runtime(config_file=None, status_file=path,
                                                 clock=VirtualClock()),
                       f"create_runtime(status_file={bad!r})", "API-8")
