"""Checking a submission bundle (reports/bundle.py): ``python -m reports verify BUNDLE``.

The bundle is untrusted. It is read in memory, never extracted: a ``.tar.gz`` or ``.zip`` of at
most ``bundle.MAX_MEMBERS`` regular files with the member names a bundle may hold (no path
leaving the bundle, no symlink, hard link, device or folder entry), each at most
``bundle.MAX_MEMBER_BYTES`` and all together at most ``bundle.MAX_TOTAL_BYTES`` once
decompressed, however the archive declares them. Then, in order:

1. the manifest lists every other member exactly, with its size and sha256;
2. ``report/certification.json`` is valid against the report schema;
3. the must-pass list in the bundle is the one the report was judged by, and it is the
   official list of the report's spec version in this checkout (byte for byte);
4. the expectations file, if the run had one, is the one the report records;
5. the verdict is judged again from the report's own per-test results, by the code that
   judged it (``reports.model.build``), against the official must-pass list and this
   checkout's SPEC.md: every test's outcome, every clause's outcome, must-pass set and tests,
   and the verdict with its reasons must come out as the report states them, and every test
   a clause names must be among the results;
6. a run that claims the whole suite ran must hold every test of the suite at its commit
   (as many cases of each test function): the tests of ``--suite-tests`` (``python -m reports
   coverage --tests``), else this checkout's, collected when nothing that decides collection
   differs here from the bundle's suite commit.

The first failed check is the reason printed; the exit status is 1 (2 when BUNDLE cannot be
opened at all). What verification cannot show: that the tests really ran as reported. It
shows that the report is intact, judged by the official list, and that its verdict follows
from its results; the source identity and environment say what to rerun to reproduce it.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

from conformance import spec
from reports import bundle as bd
from reports import environment
from reports import expectations as exp
from reports import model
from reports import mustpass as mp
from reports import outcomes as oc
from reports.attribution import TAGGED
from reports.untrusted import ReportError, UnusableFile, one_line, parse_report, read_regular

REPORT_MEMBER = bd.REPORT_PREFIX + "certification.json"
#: The largest bundle file read (compressed).
MAX_ARCHIVE_BYTES = 64 * 1024 * 1024
#: What tar headers and padding may add to the members' bytes in the decompressed stream.
TAR_HEADER_SLACK = 64 * 1024 * 1024


class Rejected(ValueError):
    """The bundle fails a check; the message, one line, is the reason."""


# -- reading the archive

class _Bounded:
    """A read-only stream that refuses to give more than ``limit`` bytes in all."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self.raw, self.limit, self.count = raw, limit, 0

    def read(self, n: int = -1) -> bytes:
        want = self.limit + 1 - self.count if n is None or n < 0 else n
        data = self.raw.read(max(0, min(want, self.limit + 1 - self.count)))
        self.count += len(data)
        if self.count > self.limit:
            raise Rejected(f"the archive decompresses to more than {self.limit} bytes")
        return data


def _check_name(name: str, seen: set[str]) -> None:
    if not bd.MEMBER_NAME.match(name):
        raise Rejected(f"member {one_line(repr(name), 120)} is not a name a bundle may hold "
                       "(paths outside the bundle, folders and unknown files are refused)")
    if name in seen:
        raise Rejected(f"member {name} appears twice")
    seen.add(name)
    if len(seen) > bd.MAX_MEMBERS:
        raise Rejected(f"more than {bd.MAX_MEMBERS} members")


def _read_tar(archive: bytes) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    total = 0
    with gzip.GzipFile(fileobj=io.BytesIO(archive)) as gz:
        stream = _Bounded(gz, bd.MAX_TOTAL_BYTES + TAR_HEADER_SLACK)
        with tarfile.open(fileobj=stream, mode="r|") as tf:  # type: ignore[call-overload]
            for m in tf:
                _check_name(m.name, set(members))
                if not m.isreg():
                    kind = ("a symbolic link" if m.issym() else "a hard link" if m.islnk()
                            else "a folder" if m.isdir() else "not a regular file")
                    raise Rejected(f"member {m.name} is {kind}")
                if m.size > bd.MAX_MEMBER_BYTES:
                    raise Rejected(f"member {m.name} is {m.size} bytes, more than "
                                   f"{bd.MAX_MEMBER_BYTES}")
                total += m.size
                if total > bd.MAX_TOTAL_BYTES:
                    raise Rejected(f"the members add up to more than {bd.MAX_TOTAL_BYTES} bytes")
                data = tf.extractfile(m)
                members[m.name] = data.read(bd.MAX_MEMBER_BYTES + 1) if data else b""
    return members


def _read_zip(archive: bytes) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    total = 0
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        infos = zf.infolist()
        if len(infos) > bd.MAX_MEMBERS:
            raise Rejected(f"more than {bd.MAX_MEMBERS} members")
        for info in infos:
            _check_name(info.filename, set(members))
            mode = info.external_attr >> 16
            kind_bits = stat.S_IFMT(mode)   # 0: the archiver recorded no file type
            if info.is_dir() or (kind_bits and kind_bits != stat.S_IFREG):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise Rejected(f"member {info.filename} is {kind}")
            if info.file_size > bd.MAX_MEMBER_BYTES:
                raise Rejected(f"member {info.filename} declares {info.file_size} bytes, more "
                               f"than {bd.MAX_MEMBER_BYTES}")
            with zf.open(info) as f:
                data = f.read(bd.MAX_MEMBER_BYTES + 1)
            if len(data) > bd.MAX_MEMBER_BYTES:
                raise Rejected(f"member {info.filename} is more than {bd.MAX_MEMBER_BYTES} bytes")
            total += len(data)
            if total > bd.MAX_TOTAL_BYTES:
                raise Rejected(f"the members add up to more than {bd.MAX_TOTAL_BYTES} bytes")
            members[info.filename] = data
    return members


def read_bundle(path: Path) -> dict[str, bytes]:
    """Name -> bytes of every member, under the bounds of the module docstring."""
    try:
        path.lstat()
    except OSError as exc:
        raise FileNotFoundError(f"{path}: {exc.strerror or exc}") from exc
    try:
        archive = read_regular(path, MAX_ARCHIVE_BYTES)
    except UnusableFile as exc:
        raise Rejected(str(exc)) from exc
    magic = archive[:4]
    try:
        if magic[:2] == b"\x1f\x8b":
            members = _read_tar(archive)
        elif magic == b"PK\x03\x04":
            members = _read_zip(archive)
        else:
            raise Rejected(f"{path}: neither a .tar.gz nor a .zip")
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, gzip.BadGzipFile,
            NotImplementedError, RuntimeError, OSError) as exc:
        raise Rejected(f"{path}: unreadable archive ({one_line(exc, 150)})") from exc
    for name, data in members.items():
        if len(data) > bd.MAX_MEMBER_BYTES:
            raise Rejected(f"member {name} is more than {bd.MAX_MEMBER_BYTES} bytes")
    return members


# -- the checks

def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Rejected(f"{what} is not JSON ({one_line(exc, 120)})") from exc


def check_manifest(members: dict[str, bytes]) -> dict[str, Any]:
    if bd.MANIFEST not in members:
        raise Rejected(f"no {bd.MANIFEST}")
    man = _json(members[bd.MANIFEST], bd.MANIFEST)
    if not isinstance(man, dict) or man.get("format") != bd.FORMAT:
        raise Rejected(f"{bd.MANIFEST} is not the manifest of a {bd.FORMAT}")
    if man.get("format_version") != bd.FORMAT_VERSION:
        raise Rejected(f"bundle format version {man.get('format_version')!r}; this checkout "
                       f"reads version {bd.FORMAT_VERSION}")
    listed: dict[str, dict[str, Any]] = {}
    for entry in man.get("members") if isinstance(man.get("members"), list) else []:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)):
            raise Rejected(f"{bd.MANIFEST}: a member entry has no name")
        listed[entry["name"]] = entry
    present = set(members) - {bd.MANIFEST}
    for name in sorted(set(listed) - present):
        raise Rejected(f"member {one_line(name, 120)} is in the manifest but not in the bundle")
    for name in sorted(present - set(listed)):
        raise Rejected(f"member {name} is in the bundle but not in the manifest")
    for name in sorted(present):
        digest = hashlib.sha256(members[name]).hexdigest()
        if listed[name].get("sha256") != digest or listed[name].get("size") != len(members[name]):
            raise Rejected(f"member {name} does not match the manifest (sha256 {digest}, "
                           f"manifest {one_line(listed[name].get('sha256'), 80)}): it was edited")
    return man


def check_mustpass(members: dict[str, bytes], doc: dict[str, Any]) -> Path:
    """The official must-pass list's path, once the bundle's list is shown to be it."""
    version = doc["spec"]["version"]
    if not bd.VERSION.match(version):
        raise Rejected(f"spec version {one_line(repr(version), 80)} cannot name a must-pass list")
    name = f"mustpass/{version}.txt"
    lists = [n for n in members if n.startswith("mustpass/")]
    if lists != [name]:
        raise Rejected(f"the bundle must hold one must-pass list, {name}; it holds "
                       f"{', '.join(lists) or 'none'}")
    digest = hashlib.sha256(members[name]).hexdigest()
    if doc["mustpass"]["sha256"] != digest:
        raise Rejected(f"{name} (sha256 {digest}) is not the list the report was judged by "
                       f"(sha256 {doc['mustpass']['sha256']})")
    official = mp.official_path(version)
    try:
        official_digest = hashlib.sha256(official.read_bytes()).hexdigest()
    except OSError as exc:
        raise Rejected(f"this checkout has no official must-pass list for spec {version} "
                       f"({official.name}): verify with a checkout of that spec") from exc
    if digest != official_digest:
        raise Rejected(f"{name} is not the official must-pass list of spec {version} (sha256 "
                       f"{digest}, official {official_digest})")
    return official


def check_expectations(members: dict[str, bytes], doc: dict[str, Any],
                       scratch: Path) -> exp.Expectations:
    files = [n for n in members if n.startswith("expectations/")]
    want = doc["expectations"]["sha256"]
    if want is None:
        if files:
            raise Rejected(f"the report had no expectations file, the bundle holds {files[0]}")
        return exp.Expectations()
    if len(files) != 1:
        raise Rejected(f"the report was judged with an expectations file (sha256 {want}); the "
                       f"bundle holds {len(files)}")
    digest = hashlib.sha256(members[files[0]]).hexdigest()
    if digest != want:
        raise Rejected(f"{files[0]} (sha256 {digest}) is not the expectations file the report "
                       f"records (sha256 {want})")
    path = scratch / "expectations.toml"
    path.write_bytes(members[files[0]])
    try:
        return exp.load(path)
    except exp.ExpectationsError as exc:
        raise Rejected(f"{files[0]}: {one_line(exc, 200)}") from exc


def _phases(t: dict[str, Any]) -> tuple[list[tuple[str, str | None]], list[str],
                                        dict[int, list[dict[str, Any]]]]:
    """Phase outcomes that give back the test's recorded observation: one phase per recorded
    failure, each naming the clauses it was attributed to."""
    observed = t["observed_outcome"]
    if observed == oc.NOT_RUN:
        return [], [], {}
    if observed == oc.PASS:
        return [(oc.PASS, None)], ["call"], {}
    if observed in (oc.SKIPPED, oc.NOT_SUPPORTED):
        return [(observed, t["message"])], ["setup"], {}
    if observed not in oc.WAIVABLE or not t["failures"]:
        raise Rejected(f"test {one_line(t['nodeid'], 150)} is {observed} without a recorded "
                       f"failure")
    phases, whens, failures = [], [], {}
    for i, f in enumerate(t["failures"]):
        phases.append((f["outcome"], f["message"]))
        whens.append("call")
        tags = list(f["clauses"]) if f["outcome"] in TAGGED else []
        failures[i] = [{"tags": tags, "message": f["message"]}]
    return phases, whens, failures


def run_data(doc: dict[str, Any], official: Path, expectations: exp.Expectations
             ) -> model.RunData:
    """The run as ``model.build`` takes it, from the report's own results."""
    tests = {}
    for t in doc["tests"]:
        if t["nodeid"] in tests:
            raise Rejected(f"test {one_line(t['nodeid'], 150)} is reported twice")
        phases, whens, failures = _phases(t)
        tests[t["nodeid"]] = model.TestRecord(
            t["nodeid"], clauses=list(t["clauses"]), capabilities=list(t["capabilities"]),
            gpu=bool(t["gpu"]), phases=phases, whens=whens, failures=failures,
            duration_s=float(t["duration_s"]), worker=t["worker"], hypothesis=t["hypothesis"])
    inv = dict(doc["invocation"])
    for key in ("exitstatus", "selection_complete", "selection_reasons", "collection_errors"):
        inv.pop(key, None)
    hello = doc["runtime"].get("worker_hello")
    try:
        today = dt.date.fromisoformat(doc["generated_at"][:10])
    except ValueError as exc:
        raise Rejected(f"generated_at {doc['generated_at']!r} is not a date") from exc
    try:
        must = mp.load(official)
    except (OSError, mp.MustPassError) as exc:
        raise Rejected(f"the official must-pass list is unreadable: {one_line(exc)}") from exc
    return model.RunData(
        clauses=spec.load_clauses(), spec_version=doc["spec"]["version"], tests=tests,
        runtime=doc["runtime"], suite=doc["suite"], python=doc["python"],
        platform=doc["platform"], target=doc["execution_target"], invocation=inv,
        mustpass=must, mustpass_official=True, expectations=expectations,
        selection_reasons=list(doc["invocation"]["selection_reasons"]),
        collection_errors=list(doc["invocation"]["collection_errors"]),
        exitstatus=int(doc["invocation"]["exitstatus"]), artifacts=doc["artifacts"],
        benchmarks=doc["benchmarks"], worker_hellos=[hello] if isinstance(hello, dict) else [],
        require_gpu=bool(doc["invocation"].get("require_gpu")), run_id=doc["run_id"],
        generated_at=doc["generated_at"], today=today)


def rejudge(doc: dict[str, Any], official: Path, expectations: exp.Expectations
            ) -> dict[str, Any]:
    """The document ``model.build`` makes of the report's results; ``Rejected`` where it
    differs from the report."""
    version = spec.spec_version()
    if doc["spec"]["version"] != version:
        raise Rejected(f"the bundle certifies spec {doc['spec']['version']}; this checkout's "
                       f"SPEC.md is spec {version}: verify with a checkout of that spec")
    known = {t["nodeid"] for t in doc["tests"]}
    for c in doc["clauses"]:
        for nodeid in c["tests"]:
            if nodeid not in known:
                raise Rejected(f"clause {c['id']} names test {one_line(nodeid, 150)}, which is "
                               f"missing from the results")
    try:
        again = model.build(run_data(doc, official, expectations))
    except Rejected:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise Rejected(f"the report's results cannot be judged ({type(exc).__name__}: "
                       f"{one_line(exc, 150)})") from exc
    before = {t["nodeid"]: t for t in doc["tests"]}
    for t in again["tests"]:
        old = before[t["nodeid"]]
        for key in ("outcome", "observed_outcome", "clause_outcomes"):
            if old[key] != t[key]:
                raise Rejected(f"test {one_line(t['nodeid'], 150)}: the report says {key} "
                               f"{one_line(old[key], 100)}, its results give "
                               f"{one_line(t[key], 100)}")
    recorded = {c["id"]: c for c in doc["clauses"]}
    for c in again["clauses"]:
        old = recorded.pop(c["id"], None)
        if old is None:
            raise Rejected(f"clause {c['id']} of SPEC.md is missing from the report")
        for key in ("outcome", "must_pass", "tests", "withdrawn"):
            if old[key] != c[key]:
                raise Rejected(f"clause {c['id']}: the report says {key} "
                               f"{one_line(old[key], 100)}, its results give "
                               f"{one_line(c[key], 100)}")
    if recorded:
        raise Rejected(f"the report has clauses SPEC.md does not: {', '.join(sorted(recorded))}")
    if sorted(doc["mustpass"]["required"]) != again["mustpass"]["required"]:
        raise Rejected("the report's required must-pass clauses are not those the official "
                       "list requires of its runtime and target")
    if doc["invocation"]["selection_complete"] != again["invocation"]["selection_complete"]:
        raise Rejected("the report claims the whole suite ran, but records why it did not"
                       if doc["invocation"]["selection_complete"] else
                       "the report says part of the suite ran, but records no selection")
    if doc["summary"] != again["summary"]:
        raise Rejected("the report's summary counts are not those of its results")
    v_old, v_new = doc["verdict"], again["verdict"]
    if v_old["status"] != v_new["status"]:
        why = "; ".join(one_line(r["message"], 150) for r in v_new["reasons"][:3])
        raise Rejected(f"the report says {v_old['status']}, its results give "
                       f"{v_new['status']}" + (f" ({why})" if why else ""))
    codes_old = sorted(r["code"] for r in v_old["reasons"])
    codes_new = sorted(r["code"] for r in v_new["reasons"])
    if codes_old != codes_new or v_old["profiles"] != v_new["profiles"]:
        raise Rejected(f"the verdict's reasons or profiles differ: the report gives "
                       f"{codes_old} {v_old['profiles']}, its results {codes_new} "
                       f"{v_new['profiles']}")
    return again


#: What decides which tests the suite collects.
SUITE_PATHS = ("conformance", "fixtures", "conftest.py", "pyproject.toml", "reports/plugin.py")


def same_suite(commit: str) -> bool:
    """Whether this checkout's tests, as they are now, are those of ``commit``: the commit is
    known here and nothing that decides collection differs from it (committed or not)."""
    def git(*args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(["git", "-C", str(spec.ROOT), *args], capture_output=True,
                                  timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
    diff = git("diff", "--quiet", commit, "--", *SUITE_PATHS)
    status = git("status", "--porcelain", "--untracked-files=normal", "--", *SUITE_PATHS)
    return (diff is not None and diff.returncode == 0 and status is not None
            and status.returncode == 0 and not status.stdout.strip())


def missing_tests(suite: set[str], results: set[str]) -> list[tuple[str, int, int]]:
    """(test function, cases in the results, cases in the suite) for each test function with
    fewer cases in the results. Cases are counted, not named: pytest versions spell the IDs
    of long parameters differently (9.1 shortens them)."""
    def cases(ids: set[str]) -> Counter[str]:
        return Counter(n.split("[", 1)[0] for n in ids)
    have = cases(results)
    return [(f, have[f], n) for f, n in sorted(cases(suite).items()) if have[f] < n]


def suite_tests(doc: dict[str, Any], given: Path | None) -> tuple[set[str] | None, str]:
    """The suite's tests to hold the results against, or (None, why not)."""
    if given is not None:
        try:
            data = json.loads(given.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise Rejected(f"--suite-tests {given}: {one_line(exc, 150)}") from exc
        if not isinstance(data, dict):
            raise Rejected(f"--suite-tests {given}: not python -m reports coverage --tests")
        return set(data), f"the tests of {given}"
    commit = (doc["suite"].get("git") or {}).get("commit")
    here = environment.git_info(spec.ROOT)
    if not commit or not same_suite(commit):
        return None, (f"not checked against the suite's tests: the run's suite commit "
                      f"{commit or 'is unknown'}, this checkout is at {here['commit']}"
                      f"{' with changes' if here['dirty'] else ''}, and its tests differ or "
                      f"the commit is unknown here (give --suite-tests)")
    from reports.__main__ import collect_suite_subprocess
    try:
        return set(collect_suite_subprocess()), (f"this checkout's tests (the same as at "
                                                 f"commit {commit[:12]})")
    except (RuntimeError, OSError, ValueError) as exc:
        raise Rejected(f"collecting this checkout's tests failed: {one_line(exc, 150)}") from exc


def verify(members: dict[str, bytes], tests_file: Path | None = None) -> list[str]:
    """Every check of the module docstring; ``Rejected`` at the first that fails; else what
    was shown, as lines."""
    man = check_manifest(members)
    if REPORT_MEMBER not in members:
        raise Rejected(f"no {REPORT_MEMBER}")
    try:
        doc = parse_report(members[REPORT_MEMBER], REPORT_MEMBER)
    except ReportError as exc:
        raise Rejected(str(exc)) from exc
    official = check_mustpass(members, doc)
    with tempfile.TemporaryDirectory() as scratch:
        expectations = check_expectations(members, doc, Path(scratch))
    rejudge(doc, official, expectations)
    for key in (bd.SOURCE, bd.ENVIRONMENT):
        if key not in members:
            raise Rejected(f"no {key}")
        _json(members[key], key)
    source = _json(members[bd.SOURCE], bd.SOURCE)
    recorded = ((source.get("suite") or {}).get("recorded") if isinstance(source, dict)
                else None)
    if recorded != doc["suite"]:
        raise Rejected(f"{bd.SOURCE} names another suite than the report does")
    notes = []
    if doc["invocation"]["selection_complete"]:
        collected, what = suite_tests(doc, tests_file)
        if collected is None:
            notes.append(what)
        else:
            missing = missing_tests(collected, {t["nodeid"] for t in doc["tests"]})
            if missing:
                func, have, want = missing[0]
                raise Rejected(f"{sum(w - h for _, h, w in missing)} test(s) of {what} are "
                               f"missing from the results, e.g. {one_line(func, 150)} ({have} "
                               f"of its {want} case(s) reported)")
            notes.append(f"every one of {what} is in the results")
    rt = doc["runtime"]
    digest = hashlib.sha256(members[bd.MANIFEST]).hexdigest()
    return [f"verified: {rt['name']} {rt['version']}, spec {doc['spec']['version']}, "
            f"{doc['verdict']['status']} ({doc['verdict']['scope']})",
            f"  re-judged from its {len(doc['tests'])} test results against the official "
            f"must-pass list (sha256 {doc['mustpass']['sha256']})",
            f"  {len(members) - 1} members match the manifest (sha256 {digest}, "
            f"made {man.get('created_at')})", *(f"  {n}" for n in notes)]


def main(path: Path, tests_file: Path | None = None) -> int:
    try:
        lines = verify(read_bundle(path), tests_file)
    except FileNotFoundError as exc:
        print(f"verify: {one_line(exc)}", file=sys.stderr)
        return 2
    except Rejected as exc:
        print(f"verify: REJECTED: {one_line(exc, 500)}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
