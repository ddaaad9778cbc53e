"""STAT clauses under attack: what is at the status path, and writers killed mid-write.

Special files come from ``fixtures/nemesis.py`` (a device node needs root and is
skipped otherwise). ``kill_mid_status_write`` runs a step of the runtime under test in a
child process that is SIGKILLed when it fsyncs its temporary file, leaving it behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import stat
from pathlib import Path

import pytest

from conformance.checks import names_identifier
from conformance.control_helpers import (control_env, expect_value_error,  # noqa: F401
                                         joined, run_in_thread,
                                         runtime_records, runtimes)
from fixtures import nemesis
from fixtures.status_reader import validate_status
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("statistics", "virtual_clock")

NAME = "pai2sche.json"


def dump_once(rt, ctx, path: Path | str, clock: VirtualClock | None = None) -> None:
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
#: the words naming each kind of special file (FL-9's, any case) one of which the error holds
KIND_WORDS = {"fifo": ("fifo", "pipe"), "directory": ("directory",), "socket": ("socket",),
              "character_device": ("character device",), "block_device": ("block device",),
              "symlink_loop": ("symlink", "symbolic link")}


def names_kind(text: str, word: str) -> bool:
    """``word`` (or its plural) stands in ``text`` as a word of its own, in any case: not
    inside a longer word."""
    lower = text.lower()
    return names_identifier(lower, word) or names_identifier(lower, word + "s")


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
    words = KIND_WORDS[kind.removeprefix("symlink_to_")]
    texts = [r.getMessage().replace(str(tmp_path), "<dir>") for r in errors]
    assert all(any(names_kind(t, w) for w in words) for t in texts), (
        f"the error of a dump refused by the {kind} at the status path does not name its "
        f"kind ({' or '.join(repr(w) for w in words)} as a word, in any case): {texts} "
        f"[STAT-9]")
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


@pytest.mark.clause("STAT-9")
@pytest.mark.parametrize("length", [30, 40])
def test_chain_of_symlinks_is_followed(rt, runtimes, tmp_path, length) -> None:
    """``length`` symlinks, each to the next, the last to the file: the kernel follows such a
    chain (up to 40 links, the 40th included), and so does the dump."""
    target = tmp_path / "status-target.json"
    links = [tmp_path / f"link-{i:02d}" for i in range(length)]
    for link, to in zip(links, links[1:] + [target]):
        os.symlink(to, link)
    path = links[0]
    target.write_text("previous content\n", encoding="utf-8")
    try:
        followed = open(path, encoding="utf-8").read() == "previous content\n"
    except OSError:
        followed = False
    if not followed:
        pytest.skip(f"this kernel does not follow a chain of {length} symlinks")
    dump_once(rt, runtimes(), path)
    assert all(os.path.islink(link) for link in links), \
        "a dump replaced a symlink of the chain at the status path [STAT-9]"
    text = target.read_text(encoding="utf-8")
    try:
        problems = validate_status(json.loads(text))
    except ValueError as exc:
        problems = [f"not JSON ({exc})"]
    assert problems == [], (
        f"the file at the end of a chain of {length} symlinks does not hold the statistics "
        f"({problems}): {text[:200]!r} [STAT-9]")


@pytest.mark.clause("STAT-9")
def test_chain_of_symlinks_longer_than_the_kernel_follows_is_not_followed(rt, runtimes,
                                                                          tmp_path) -> None:
    """41 symlinks, each to the next, the last to a file: one more than the kernel follows
    (40), so the path is a symlink that does not resolve; the file at the end is not
    written and no symlink of the chain is replaced."""
    target = tmp_path / "status-target.json"
    links = [tmp_path / f"link-{i:02d}" for i in range(41)]
    for link, to in zip(links, links[1:] + [target]):
        os.symlink(to, link)
    target.write_text("previous content\n", encoding="utf-8")
    try:
        open(links[0], encoding="utf-8").close()
        pytest.skip("this kernel follows a chain of 41 symlinks")
    except OSError:
        pass
    dump_once(rt, runtimes(), links[0])
    assert all(os.path.islink(link) for link in links), \
        "a dump replaced a symlink of a chain of 41 at the status path [STAT-9]"
    assert target.read_text(encoding="utf-8") == "previous content\n", (
        "a dump followed a chain of 41 symlinks, one more than the kernel follows, and "
        "replaced the file at its end [STAT-9]")


SWEEP_WAIT_S = 20.0        # bound on a first dump beside a FIFO (generous under load; a sweep
                           # that waits on the FIFO never ends by itself: no speed check)
SWEPT_AT_MOST = 50         # temporaries removed before their lock in a row (a bound on a
                           # runtime that, against STAT-10, tries more often than 3 times)
OTHER_UID = 54321          # a user that owns nothing here: the planter of a symlink


def planted_symlink(sticky: Path, name: str, target: Path, owner: int) -> Path:
    """A symlink ``sticky/name`` -> ``target`` owned by uid ``owner`` (``os.lchown``: root
    only; the test is skipped otherwise)."""
    link = sticky / name
    os.symlink(target, link)
    if os.lstat(link).st_uid != owner:
        try:
            os.lchown(link, owner, owner)
        except PermissionError:
            pytest.skip("a symlink owned by another user needs root (os.lchown)")
    return link


def sticky_world_writable(tmp_path: Path, owner: int | None = None) -> Path:
    """A directory of mode 1777, as /tmp (owned by ``owner`` when given: root only)."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    if owner is not None and os.stat(sticky).st_uid != owner:
        try:
            os.chown(sticky, owner, owner)
        except PermissionError:
            pytest.skip("a directory owned by another user needs root (os.chown)")
    return sticky


@pytest.mark.clause("STAT-9")
def test_symlink_planted_by_another_user_in_a_sticky_directory_is_not_followed(
        rt, runtimes, tmp_path, caplog) -> None:
    """A symlink in a sticky world-writable directory, owned by neither this process's user
    nor the directory's owner, is not followed: the private file it points to keeps its
    content and mode, and the refused write logs an error."""
    private = tmp_path / "private" / "secret"
    private.parent.mkdir()
    private.write_text("private content\n", encoding="utf-8")
    os.chmod(private, 0o600)
    before = identity(private), private.read_bytes()
    sticky = sticky_world_writable(tmp_path)
    path = planted_symlink(sticky, NAME, private, OTHER_UID)
    caplog.set_level(logging.WARNING)
    dump_once(rt, runtimes(), path)          # never raises (STAT-8)
    assert (identity(private), private.read_bytes()) == before \
        and stat.S_IMODE(os.stat(private).st_mode) == 0o600, (
        f"a dump followed a symlink planted in a sticky world-writable directory by uid "
        f"{OTHER_UID} and replaced the 0600 file it points to (mode now "
        f"{stat.S_IMODE(os.stat(private).st_mode):o}) [STAT-9]")
    assert os.path.islink(path) and os.readlink(path) == str(private), \
        "a dump replaced the planted symlink itself [STAT-9]"
    errors = runtime_records(caplog, rt, logging.ERROR, containing=NAME)
    assert errors, "a dump refused by a planted symlink logged no error [STAT-8]"
    assert temporaries(sticky) == [] and temporaries(private.parent, private.name) == [], \
        "the refused dump left a temporary file behind [STAT-8]"


@pytest.mark.clause("STAT-9")
@pytest.mark.parametrize("owner", ["process user", "directory owner"])
def test_symlink_of_the_user_or_the_directory_owner_in_a_sticky_directory_is_followed(
        rt, runtimes, tmp_path, owner) -> None:
    """The protected-symlinks rule lets a symlink owned by the process's user, or by the
    sticky directory's owner, be followed."""
    target = tmp_path / "elsewhere" / "status-target.json"
    target.parent.mkdir()
    if owner == "process user":
        sticky = sticky_world_writable(tmp_path)
        path = planted_symlink(sticky, NAME, target, os.geteuid())
    else:
        sticky = sticky_world_writable(tmp_path, OTHER_UID)
        path = planted_symlink(sticky, NAME, target, OTHER_UID)
    dump_once(rt, runtimes(), path)
    assert target.exists() and validate_status(
        json.loads(target.read_text(encoding="utf-8"))) == [], \
        f"a symlink owned by the {owner} in a sticky world-writable directory was not " \
        f"followed [STAT-9]"


@pytest.mark.clause("STAT-9")
@pytest.mark.parametrize("mode", [0o777, 0o1755], ids=["world-writable", "sticky"])
def test_symlink_of_another_user_outside_a_sticky_world_writable_directory_is_followed(
        rt, runtimes, tmp_path, mode) -> None:
    """The protected-symlinks rule holds only in a directory both sticky and world-writable:
    a symlink owned by another user in a directory that is only one of them is followed."""
    target = tmp_path / "elsewhere" / "status-target.json"
    target.parent.mkdir()
    directory = tmp_path / "links"
    directory.mkdir()
    os.chmod(directory, mode)
    path = planted_symlink(directory, NAME, target, OTHER_UID)
    dump_once(rt, runtimes(), path)
    assert target.exists() and validate_status(
        json.loads(target.read_text(encoding="utf-8"))) == [], (
        f"a symlink owned by uid {OTHER_UID} in a directory of mode {mode:o}, not both sticky "
        f"and world-writable, was not followed [STAT-9]")


@pytest.mark.clause("STAT-9")
def test_relative_symlink_with_dot_components_is_followed(rt, runtimes, tmp_path) -> None:
    """A symlink ``links/NAME -> ./../elsewhere/status-target.json`` resolves as the kernel
    resolves it: ``.`` stays in ``links``, ``..`` then leaves it."""
    target = tmp_path / "elsewhere" / "status-target.json"
    target.parent.mkdir()
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "elsewhere").mkdir()      # where a wrong resolution would lead
    path = tmp_path / "links" / NAME
    os.symlink(f".{os.sep}..{os.sep}elsewhere{os.sep}{target.name}", path)
    dump_once(rt, runtimes(), path)
    assert target.exists() and validate_status(
        json.loads(target.read_text(encoding="utf-8"))) == [], (
        f"the file the symlink {os.readlink(path)!r} resolves to, {target}, does not hold the "
        f"statistics; the directory holds {sorted(os.listdir(tmp_path / 'links'))} [STAT-9]")
    assert os.path.islink(path), "a dump replaced the symlink at the status path [STAT-9]"


@pytest.mark.clause("STAT-9")
def test_dot_dot_after_a_symlink_on_the_way_leaves_its_target(rt, runtimes, tmp_path) -> None:
    """The status path ``links/to-b/../NAME`` with ``links/to-b -> ../a/b``: as the kernel
    resolves it, ``..`` leaves the symlink's target ``a/b`` (to ``a``), not ``links``."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "links").mkdir()
    os.symlink(f"..{os.sep}a{os.sep}b", tmp_path / "links" / "to-b")
    path = f"{tmp_path}{os.sep}links{os.sep}to-b{os.sep}..{os.sep}{NAME}"
    target = tmp_path / "a" / NAME
    dump_once(rt, runtimes(), Path(path))
    assert target.exists() and validate_status(
        json.loads(target.read_text(encoding="utf-8"))) == [], (
        f"the status path {path} resolves to {target}, which does not hold the statistics; "
        f"{tmp_path / 'links'} holds {sorted(os.listdir(tmp_path / 'links'))} [STAT-9]")


@pytest.mark.clause("STAT-9")
@pytest.mark.parametrize("between", ["", ".", f".{os.sep}", f"{os.sep}."],
                         ids=["double_slash", "dot", "dot_slash", "slash_dot"])
def test_dot_dot_after_empty_and_dot_components(rt, runtimes, tmp_path, between) -> None:
    """The status path ``a/b/<between>/../NAME``: an empty component (``//``) and ``.`` name
    the directory they are in, so, as the kernel resolves it, ``..`` leaves ``b`` for ``a``."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    path = f"{tmp_path}{os.sep}a{os.sep}b{os.sep}{between}{os.sep}..{os.sep}{NAME}"
    target = tmp_path / "a" / NAME
    dump_once(rt, runtimes(), path)                 # a str: Path would drop // and .
    assert target.exists() and validate_status(
        json.loads(target.read_text(encoding="utf-8"))) == [], (
        f"the status path {path} resolves to {target}, which does not hold the statistics; "
        f"{tmp_path / 'a' / 'b'} holds {sorted(os.listdir(tmp_path / 'a' / 'b'))} [STAT-9]")


@pytest.mark.clause("STAT-9")
def test_dot_dot_after_a_regular_file_fails_the_write(rt, runtimes, tmp_path, caplog) -> None:
    """The status path ``file/../NAME`` with ``file`` a regular file: the kernel refuses it
    (``ENOTDIR``), so the dump writes nothing at ``NAME`` beside ``file`` and logs an
    error."""
    (tmp_path / "file").write_text("a regular file\n", encoding="utf-8")
    path = f"{tmp_path}{os.sep}file{os.sep}..{os.sep}{NAME}"
    caplog.set_level(logging.ERROR)
    dump_once(rt, runtimes(), Path(path))
    assert not os.path.lexists(tmp_path / NAME), (
        f"the status path {path}, which the kernel refuses (file is not a directory), was "
        f"written at {tmp_path / NAME}, its lexical resolution [STAT-9]")
    assert runtime_records(caplog, rt, logging.ERROR, containing=NAME), \
        f"the refused status path {path} logged no error [STAT-8]"


# -- STAT-10: temporary files of a writer that died ---------------------------------------------
@pytest.mark.clause("STAT-10")
def test_stale_temporaries_are_swept_beside_the_symlinks_target(rt, runtimes,
                                                                tmp_path) -> None:
    """Through a symlink the temporary files are made beside its target (STAT-8), so the
    first dump sweeps there: a dead writer's temporary beside the target is removed, a file
    of the temporary name form beside the symlink (no temporary of this path) is kept."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "status-target.json"
    path = tmp_path / NAME
    os.symlink(target, path)
    dead = elsewhere / f".{target.name}.left-by-a-dead-writer.tmp"
    beside_link = tmp_path / f".{NAME}.not-a-temporary-of-this-path.tmp"
    for p in (dead, beside_link):
        p.write_text("x", encoding="utf-8")
    dump_once(rt, runtimes(), path)
    assert not dead.exists(), (
        f"the first dump through a symlink did not remove {dead.name}, left beside the "
        f"symlink's target by a writer that died [STAT-10]")
    assert beside_link.exists(), (
        f"the first dump through a symlink removed {beside_link.name} beside the symlink, "
        f"where no temporary of the resolved path is made [STAT-10]")


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
def test_only_the_first_dump_sweeps(rt, runtimes, tmp_path) -> None:
    """A temporary of the name form left (unlocked) after an instance's first dump is no
    concern of its later dumps: the second dump replaces the file and leaves it."""
    path = tmp_path / NAME
    clock = VirtualClock()
    ctx = runtimes()
    stats = rt.GPUStatistics(str(path), clock=clock)
    options = rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                         sess_duration_us=1000)
    stats.run_action(options)
    assert path.exists(), "the first run wrote no statistics file [STAT-3]"
    later = tmp_path / f".{NAME}.left-after-the-first-dump.tmp"
    later.write_text("x", encoding="utf-8")
    path.unlink()
    clock.advance(10 * 1_000_000)
    stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                sess_duration_us=5000))
    assert path.exists(), ("10 s later a run whose window mean moved from 1000 to 3000 µs "
                           "wrote no statistics file [STAT-4]")
    assert later.exists(), (f"the second dump of the instance removed {later.name}, made "
                            f"after its first dump: only the first dump sweeps [STAT-10]")


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


@pytest.mark.clause("STAT-8")
@pytest.mark.parametrize("existing", [False, True], ids=["new", "replaced"])
def test_a_write_that_fails_leaves_no_temporary_file(rt, runtimes, tmp_path, monkeypatch,
                                                     caplog, existing) -> None:
    """The ``fsync`` of the temporary file fails (forced: EIO on a descriptor of a file named
    ``.<name>.<unique>.tmp``): the dump logs an error, the status file is as it was, and the
    temporary file is removed."""
    path = tmp_path / NAME
    if existing:
        path.write_text("previous content\n", encoding="utf-8")
    failed: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(f".{NAME}.") and name.endswith(".tmp"):
            failed.append(name)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    caplog.set_level(logging.ERROR)
    caplog.clear()
    monkeypatch.setattr(os, "fsync", fsync)
    dump_once(rt, runtimes(), path)
    monkeypatch.undo()
    if not failed:
        pytest.skip(f"the runtime fsynced no temporary file named .{NAME}.<unique>.tmp "
                    f"(checked by test_temporary_file_is_locked_while_written)")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert errors, f"the fsync of {failed} failed with EIO and no error was logged [STAT-8]"
    after = path.read_text(encoding="utf-8") if path.exists() else None
    assert after == ("previous content\n" if existing else None), (
        f"after a failed fsync the status file holds {after!r}, expected it as it was "
        f"[STAT-8]")
    assert temporaries(tmp_path) == [], \
        f"the failed write left {temporaries(tmp_path)} behind [STAT-8]"


def dump_with_temporaries_swept(rt, runtimes, tmp_path: Path, monkeypatch, caplog, *,
                                at_most: int, nonblocking_too: bool) -> tuple[list[str], bool,
                                                                              list]:
    """One first dump of ``tmp_path / NAME`` whose first ``at_most`` temporary files are
    removed between their creation and their lock, as another writer's sweep would (forced:
    such an exclusive ``flock`` of a temporary of the status file unlinks it first; with
    ``nonblocking_too`` a ``LOCK_NB`` one too). Returns the names removed, whether the
    status file then holds valid statistics, and the runtime's ERROR records. Skips where
    ``/proc/self/fd`` is missing or the runtime locks no temporary file."""
    swept: list[str] = []
    real_flock = fcntl.flock

    def flock(fd, operation) -> None:
        if len(swept) < at_most and os.path.isdir("/proc/self/fd"):
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            if name.startswith(f".{NAME}.") and name.endswith(".tmp") \
                    and operation & fcntl.LOCK_EX \
                    and (nonblocking_too or not operation & fcntl.LOCK_NB):
                os.unlink(tmp_path / name)
                swept.append(name)
        real_flock(fd, operation)

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    path, ctx = tmp_path / NAME, runtimes()
    caplog.set_level(logging.ERROR)
    monkeypatch.setattr(fcntl, "flock", flock)
    dump_once(rt, ctx, path)
    monkeypatch.undo()
    if not swept:
        pytest.skip("the runtime took no flock on a temporary file named "
                    f".{NAME}.<unique>.tmp (checked by test_temporary_file_is_locked_while_written)")
    try:
        written = validate_status(json.loads(path.read_text(encoding="utf-8"))) == []
    except (OSError, ValueError):
        written = False
    return swept, written, runtime_records(caplog, rt, logging.ERROR)


@pytest.mark.clause("STAT-10")
def test_dump_leaves_the_status_file_unlocked_and_nothing_open(rt, runtimes, tmp_path) -> None:
    """After each of three dumps (one instance's first, which sweeps a stale temporary
    beside a directory of the name form, a check, a new instance's first) the status file can
    be locked at once by another open file, and no file descriptor of this process refers to
    anything in the status file's directory (through ``/proc/self/fd`` where there is one: a
    runtime in another process is seen by the lock alone)."""
    path = tmp_path / NAME
    directory = os.path.realpath(tmp_path)
    ctx = runtimes()
    clock = VirtualClock()
    stats = rt.GPUStatistics(str(path), clock=clock)

    def step(graph: int, d: int) -> None:
        stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=graph,
                                                    sess_duration_us=d))

    dumps = [("the first dump", lambda: step(1, 1000)),
             ("a dump at a check", lambda: (clock.advance(10_000_000), step(2, 5000))),
             ("a new instance's first dump", lambda: dump_once(rt, ctx, path))]
    (tmp_path / f".{NAME}.dead.tmp").write_text("x", encoding="utf-8")
    (tmp_path / f".{NAME}.directory.tmp").mkdir()
    for what, dump in dumps:
        if path.exists():
            path.unlink()
        dump()
        assert path.exists(), f"{what} wrote no status file [STAT-3]"
        with open(path, "rb") as reader:
            try:
                fcntl.flock(reader.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pytest.fail(f"after {what} the status file is still locked: the lock on its "
                            f"temporary file outlived the rename [STAT-10]")
        if os.path.isdir("/proc/self/fd"):
            held = []
            for fd in os.listdir("/proc/self/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/self/fd/{fd}")
                    if target.startswith(directory + os.sep):
                        held.append(target.removeprefix(directory + os.sep))
            assert held == [], f"after {what} the process still holds {held} open [STAT-10]"


@pytest.mark.clause("STAT-10")
@pytest.mark.parametrize("removals", [1, 2])
def test_temporary_file_swept_before_it_is_locked_is_made_again(rt, runtimes, tmp_path,
                                                                monkeypatch, caplog,
                                                                removals) -> None:
    """Other writers' first dumps remove the temporary file of this one between its
    creation and its lock, ``removals`` times in a row (forced: the first ``removals``
    ``flock`` calls on a temporary of the status file unlink it first); below 3 in a row
    the dump still replaces the status file, with no error logged."""
    swept, written, errors = dump_with_temporaries_swept(
        rt, runtimes, tmp_path, monkeypatch, caplog, at_most=removals, nonblocking_too=True)
    path = tmp_path / NAME
    assert written and errors == [], (
        f"the temporary files {swept} were removed by other writers' sweeps before they were "
        f"locked ({len(swept)} in a row, fewer than 3), and the dump "
        f"{'wrote' if path.exists() else 'did not write'} the status file, logging "
        f"{[r.getMessage()[:200] for r in errors]}: it must make a new temporary file "
        f"[STAT-10]")
    assert len(swept) == removals, (
        f"only {len(swept)} of the {removals} temporary files the dump was to make were "
        f"removed before their lock: {swept} [STAT-10]")
    assert temporaries(tmp_path) == [], \
        f"the dump left {temporaries(tmp_path)} behind [STAT-8]"


@pytest.mark.clause("STAT-10")
@pytest.mark.parametrize("kind", sorted(nemesis.SPECIAL_FILES))
def test_special_file_of_the_temporary_name_form_is_not_swept(rt, runtimes, tmp_path,
                                                              kind) -> None:
    """A FIFO, a directory, a device or a symlink named as a temporary file is no temporary
    file: the first dump leaves it as it is and does not wait on it (a FIFO without a
    writer). A dump still running after SWEEP_WAIT_S is released by opening the FIFO for
    writing, so that the test ends either way."""
    special = tmp_path / f".{NAME}.special.tmp"
    if not nemesis.special_file(special, kind):
        pytest.skip(f"a {kind} cannot be made by this user (needs root)")
    before = identity(special)
    path, ctx = tmp_path / NAME, runtimes()
    thread, out = run_in_thread(lambda: dump_once(rt, ctx, path), "first-dump")
    finished = joined(thread, SWEEP_WAIT_S)
    if not finished:
        try:
            os.close(os.open(special, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        joined(thread)
    assert finished, (f"the first dump did not finish in {SWEEP_WAIT_S} s beside a {kind} "
                      f"named {special.name}: the sweep waits on it [STAT-10]")
    assert "error" not in out, f"the first dump raised {out['error']!r} [STAT-8]"
    assert os.path.lexists(special) and identity(special) == before, \
        f"the first dump removed or replaced the {kind} named {special.name} [STAT-10]"
    assert validate_status(json.loads(path.read_text(encoding="utf-8"))) == [], \
        f"the first dump beside a {kind} named {special.name} wrote no statistics [STAT-8]"


@pytest.mark.clause("STAT-10")
def test_terminal_of_the_temporary_name_form_does_not_become_the_controlling_terminal(
        rt, tmp_path) -> None:
    """A pseudo-terminal at a name of the temporary form, in the status directory of a
    process that leads its session without a controlling terminal (a job started with
    ``setsid``): the first dump's sweep leaves it as it is, and opening it, if the sweep
    does, does not make it the process's controlling terminal, whose hang-up would then
    kill the job (the terminal is bind-mounted there: root, or a system that lets any user
    make a user namespace; skipped otherwise)."""
    out = nemesis.terminal_of_the_temporary_name_form(rt.__name__, tmp_path, NAME)
    if "skipped" in out:
        pytest.skip(out["skipped"])
    assert out["written"], \
        f"the first dump beside a terminal named .{NAME}.terminal.tmp wrote nothing [STAT-8]"
    assert out["left"], \
        f"the first dump removed the terminal named .{NAME}.terminal.tmp [STAT-10]"
    assert not out["controlling_terminal"], (
        f"after the first dump, whose sweep met the terminal {out['terminal']} named "
        f".{NAME}.terminal.tmp, it is the controlling terminal of the process, which led its "
        f"session without one [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_stale_temporaries_among_directories_of_the_name_form_are_all_removed(
        rt, runtimes, tmp_path) -> None:
    """Ten directories of the temporary name form, made between ten temporaries of dead
    writers: whatever order the directory lists them in, the first dump keeps every
    directory and removes every temporary (a sweep that stops at the first file that is not
    a regular file leaves the temporaries listed after it)."""
    directories, stale = [], []
    for i in range(10):
        directories.append(tmp_path / f".{NAME}.directory-{i}.tmp")
        directories[-1].mkdir()
        stale.append(tmp_path / f".{NAME}.dead-{i}.tmp")
        stale[-1].write_text("x", encoding="utf-8")
    dump_once(rt, runtimes(), tmp_path / NAME)
    assert all(d.is_dir() for d in directories), \
        "the first dump removed a directory named as a temporary file [STAT-10]"
    left = [p.name for p in stale if p.exists()]
    assert left == [], (
        f"the first dump left {len(left)} of {len(stale)} temporaries of dead writers "
        f"({left[:3]}...) among directories of the same name form [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_stale_temporaries_among_symlinks_of_the_name_form_are_all_removed(
        rt, runtimes, tmp_path) -> None:
    """Ten symlinks of the temporary name form (to a regular file elsewhere, or to nothing),
    made between ten temporaries of dead writers: whatever order the directory lists them
    in, the first dump keeps every symlink and its target and removes every temporary (a
    sweep that stops at the first entry it does not open leaves the temporaries listed after
    it)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim.json"
    victim.write_text("{}", encoding="utf-8")
    links, stale = [], []
    for i in range(10):
        links.append(tmp_path / f".{NAME}.planted-{i}.tmp")
        os.symlink(victim if i % 2 else elsewhere / "nothing", links[-1])
        stale.append(tmp_path / f".{NAME}.dead-{i}.tmp")
        stale[-1].write_text("x", encoding="utf-8")
    dump_once(rt, runtimes(), tmp_path / NAME)
    assert all(os.path.islink(p) for p in links) \
        and victim.read_text(encoding="utf-8") == "{}", \
        "the first dump removed a symlink named as a temporary file, or its target [STAT-10]"
    left = [p.name for p in stale if p.exists()]
    assert left == [], (
        f"the first dump left {len(left)} of {len(stale)} temporaries of dead writers "
        f"({left[:3]}...) among symlinks of the same name form [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_stale_temporaries_among_locked_temporaries_are_all_removed(rt, runtimes,
                                                                    tmp_path) -> None:
    """Ten temporaries held under ``flock`` by live writers, made between ten temporaries of
    dead writers: whatever order the directory lists them in, the first dump keeps every
    locked one and removes every other (a sweep that stops at the first file a live writer
    holds leaves the temporaries listed after it)."""
    live, stale = [], []
    with contextlib.ExitStack() as held:
        for i in range(10):
            live.append(tmp_path / f".{NAME}.live-{i}.tmp")
            live[-1].write_text("x", encoding="utf-8")
            fcntl.flock(held.enter_context(open(live[-1], "rb")).fileno(), fcntl.LOCK_EX)
            stale.append(tmp_path / f".{NAME}.dead-{i}.tmp")
            stale[-1].write_text("x", encoding="utf-8")
        dump_once(rt, runtimes(), tmp_path / NAME)
        kept = [p.name for p in live if p.exists()]
    assert len(kept) == len(live), (
        f"the first dump removed {len(live) - len(kept)} of {len(live)} temporaries a live "
        f"writer holds locked [STAT-10]")
    left = [p.name for p in stale if p.exists()]
    assert left == [], (
        f"the first dump left {len(left)} of {len(stale)} temporaries of dead writers "
        f"({left[:3]}...) among temporaries live writers hold locked [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_symlink_of_the_temporary_name_form_is_not_followed(rt, runtimes, tmp_path,
                                                            monkeypatch) -> None:
    """A symlink named as a temporary file, to a regular file elsewhere: the first dump
    neither removes the symlink nor opens its target (every ``os.open`` of the dump is
    watched through ``/proc/self/fd``; a runtime that opens files otherwise is not seen)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim.json"
    victim.write_text("{}", encoding="utf-8")
    link = tmp_path / f".{NAME}.planted.tmp"
    os.symlink(victim, link)
    opened: list[str] = []
    real_open = os.open

    def watched_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        try:
            opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
        return fd

    ctx = runtimes()
    monkeypatch.setattr(os, "open", watched_open)
    dump_once(rt, ctx, tmp_path / NAME)
    monkeypatch.undo()
    assert os.path.islink(link) and victim.read_text(encoding="utf-8") == "{}", \
        f"the first dump removed or changed the symlink {link.name} or its target [STAT-10]"
    assert str(victim) not in opened, (
        f"the first dump followed the symlink {link.name}, named as a temporary file, and "
        f"opened its target {victim} [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_removal_of_stale_temporaries_is_logged_with_their_number(rt, runtimes, tmp_path,
                                                                  caplog) -> None:
    path = tmp_path / NAME
    stale = [tmp_path / f".{NAME}.dead-{i}.tmp" for i in range(3)]
    for p in stale:
        p.write_text("x", encoding="utf-8")
    caplog.set_level(logging.INFO)
    dump_once(rt, runtimes(), path)
    assert temporaries(tmp_path) == [], f"{temporaries(tmp_path)} were not removed [STAT-10]"
    logged = runtime_records(caplog, rt, logging.INFO, containing=NAME)
    numbers = [re.findall(r"-?\d+", r.getMessage().replace(str(tmp_path), "")) for r in logged]
    assert any(str(len(stale)) in n for n in numbers), (
        f"the first dump removed {len(stale)} stale temporary files and logged "
        f"{[r.getMessage()[:300] for r in logged]}: no record naming the status file and "
        f"the number {len(stale)} [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_no_removal_is_logged_where_the_directory_cannot_be_listed(rt, runtimes, tmp_path,
                                                                   caplog) -> None:
    """The status path in a directory that does not exist: the first dump's sweep cannot
    list it and removes nothing, so no record below ERROR (the write's failure, STAT-8, is
    an error) names the status file with a number of files other than 0."""
    path = tmp_path / "missing" / NAME
    caplog.set_level(logging.INFO)
    dump_once(rt, runtimes(), path)
    claims = [r.getMessage() for r in runtime_records(caplog, rt, logging.INFO, containing=NAME)
              if r.levelno < logging.ERROR
              and any(n.strip("0") for n in re.findall(r"\d+", r.getMessage().replace(
                  str(path), "").replace(NAME, "")))]
    assert claims == [], (
        f"the first dump in the missing directory {path.parent}, where it removed nothing, "
        f"logged {[m[:300] for m in claims]} [STAT-10]")


@pytest.mark.clause("STAT-10")
def test_temporary_file_swept_three_times_in_a_row_fails(rt, runtimes, tmp_path, monkeypatch,
                                                         caplog) -> None:
    """Every temporary file of the status file is removed between its creation and its lock
    (forced, up to SWEPT_AT_MOST times): the dump makes exactly 3, then gives up with an
    error logged, the status file not written and no temporary file left."""
    swept, written, errors = dump_with_temporaries_swept(
        rt, runtimes, tmp_path, monkeypatch, caplog, at_most=SWEPT_AT_MOST,
        nonblocking_too=True)
    assert len(swept) == 3, (
        f"the dump made {len(swept)} temporary files, each removed before its lock: "
        f"{swept[:8]}; it must give up after 3 in a row [STAT-10]")
    assert not written and errors, (
        f"after 3 temporary files removed in a row the dump "
        f"{'wrote' if written else 'did not write'} the status file and logged "
        f"{[r.getMessage()[:200] for r in errors]}: it must fail, logging an error [STAT-10]")
    assert temporaries(tmp_path) == [], \
        f"the dump left {temporaries(tmp_path)} behind [STAT-10]"


@pytest.mark.clause("STAT-8")
def test_temporary_file_swept_at_every_attempt_fails_or_writes(rt, runtimes, tmp_path,
                                                               monkeypatch, caplog) -> None:
    """Every temporary file of the status file is removed between its creation and its lock
    (forced, the first SWEPT_AT_MOST times): the dump either replaces the status file
    after all or fails with an error logged, never neither."""
    swept, written, errors = dump_with_temporaries_swept(
        rt, runtimes, tmp_path, monkeypatch, caplog, at_most=SWEPT_AT_MOST,
        nonblocking_too=False)
    assert written or errors, (
        f"{len(swept)} temporary files were removed before they were locked and the dump "
        f"neither wrote the status file nor logged an error: a failure to write is logged "
        f"[STAT-8]")
    assert temporaries(tmp_path) == [], \
        f"the dump left {temporaries(tmp_path)} behind [STAT-8]"


@pytest.mark.clause("STAT-8")
@pytest.mark.parametrize("existing", [False, True], ids=["new", "replaced"])
def test_status_file_is_readable_by_every_user(rt, runtimes, tmp_path, existing) -> None:
    """Under the usual umask 022 the status file has mode 0644, as the original's
    ``std::ofstream`` creates it: other users' monitors read it."""
    path = tmp_path / NAME
    if existing:
        path.write_text("previous content\n", encoding="utf-8")
        os.chmod(path, 0o644)
    old = os.umask(0o022)
    try:
        dump_once(rt, runtimes(), path)
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o644, (f"the status file {'replaced' if existing else 'written'} under "
                           f"umask 022 has mode {mode:o}, expected 644 [STAT-8]")


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
