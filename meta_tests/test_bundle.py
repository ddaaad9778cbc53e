"""Submission bundles (reports/bundle.py) and their verification (reports/verify.py): a fresh
bundle of a real certification run verifies; every kind of tampering is rejected with its
reason; hostile archives are refused without being extracted."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conformance import spec
from reports import bundle as bd
from reports import model
from reports import verify

MUSTPASS = f"mustpass/{spec.spec_version()}.txt"
REPORT = verify.REPORT_MEMBER


#: One xdist worker runs this module: its module-scoped run is made once.
pytestmark = pytest.mark.xdist_group("bundle")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real certification run of one conformance file (a subset: INCOMPLETE)."""
    base = tmp_path_factory.mktemp("certification")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-n", "0", "-q",
                           "conformance/test_clock.py", "--report-dir", str(base)],
                          cwd=spec.ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    (folder,) = [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]
    return folder


@pytest.fixture(scope="module")
def fresh(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out, _ = bd.make(run_dir, tmp_path_factory.mktemp("bundle") / "fresh.tar.gz")
    return verify.read_bundle(out)


def reseal(members: dict[str, bytes], doc: dict[str, Any] | None = None) -> dict[str, bytes]:
    """The members with ``doc`` as the report (if given) and a manifest that matches them:
    what a forger who edits the report and rehashes it hands in."""
    members = dict(members)
    if doc is not None:
        members[REPORT] = json.dumps(doc).encode()
    members.pop(bd.MANIFEST)
    members[bd.MANIFEST] = bd.manifest(members, json.loads(members[REPORT]))
    return members


def consistent(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the verdict, outcomes and summary its (edited) results give."""
    again = model.build(verify.run_data(doc, spec.ROOT / "conformance" / MUSTPASS,
                                        verify.exp.Expectations()))
    for key in ("verdict", "clauses", "tests", "summary"):
        doc[key] = again[key]
    doc["mustpass"]["required"] = again["mustpass"]["required"]
    return doc


def rejected(members: dict[str, bytes], **kw: Any) -> str:
    with pytest.raises(verify.Rejected) as info:
        verify.verify(members, **kw)
    return str(info.value)


def report(members: dict[str, bytes]) -> dict[str, Any]:
    return json.loads(members[REPORT])


def fail_one_test(doc: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``doc`` where the first test failed a tagged check of its first clause."""
    t = doc["tests"][0]
    cid = t["clauses"][0]
    t["observed_outcome"] = t["outcome"] = "FAIL"
    t["message"] = f"[{cid}] the clock moved backwards"
    t["failures"] = [{"outcome": "FAIL", "clauses": [cid], "message": t["message"],
                      "tagged": True}]
    return doc, cid


def test_a_fresh_bundle_verifies(run_dir: Path, fresh: dict[str, bytes], tmp_path: Path) -> None:
    assert {REPORT, "report/certification.md", "report/certification.html", "report/junit.xml",
            MUSTPASS, bd.ENVIRONMENT, bd.SOURCE, bd.MANIFEST} <= set(fresh)
    assert fresh[MUSTPASS] == (spec.ROOT / "conformance" / MUSTPASS).read_bytes()
    source = json.loads(fresh[bd.SOURCE])
    init = (spec.ROOT / "reference_runtime" / "__init__.py").read_bytes()
    assert source["runtime"]["files"]["__init__.py"] == hashlib.sha256(init).hexdigest()
    assert source["runtime"]["git"]["commit"] and source["suite"]["recorded"] == \
        report(fresh)["suite"]
    env = json.loads(fresh[bd.ENVIRONMENT])
    assert env["run"]["platform"] == report(fresh)["platform"]
    assert {"nvml", "mps"} <= set(env["bundling_host"])
    lines = verify.verify(fresh)
    assert lines[0].startswith("verified: antman-reference") and "INCOMPLETE" in lines[0]
    # Both archive kinds, through the command line.
    for name in ("b.tar.gz", "b.zip"):
        done = subprocess.run([sys.executable, "-m", "reports", "bundle", str(run_dir), "-o",
                               str(tmp_path / name)], cwd=spec.ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        done = subprocess.run([sys.executable, "-m", "reports", "verify", str(tmp_path / name)],
                              cwd=spec.ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "verified:" in done.stdout, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz", "b.zip"]  # no temp files
    # A failing run, judged consistently, verifies too (NOT CERTIFIED is a verdict).
    doc, _ = fail_one_test(report(fresh))
    lines = verify.verify(reseal(fresh, consistent(doc)))
    assert "NOT CERTIFIED" in lines[0]


def test_an_edited_report_is_rejected(fresh: dict[str, bytes]) -> None:
    members = dict(fresh)
    members["report/certification.md"] += b"\nCERTIFIED\n"
    assert "report/certification.md does not match the manifest" in rejected(members)
    members = dict(fresh)
    members[REPORT] = members[REPORT].replace(b'"INCOMPLETE"', b'"CERTIFIED"', 1)
    assert f"{REPORT} does not match the manifest" in rejected(members)


def test_a_verdict_that_does_not_follow_from_the_results_is_rejected(
        fresh: dict[str, bytes]) -> None:
    doc = report(fresh)
    doc["verdict"].update(status="CERTIFIED", reasons=[])
    assert "the report says CERTIFIED, its results give INCOMPLETE" in rejected(
        reseal(fresh, doc))
    # A failed test whose clause the report still calls PASS.
    doc, cid = fail_one_test(report(fresh))
    doc = consistent(doc)
    forged = copy.deepcopy(doc)
    forged_clause = next(c for c in forged["clauses"] if c["id"] == cid)
    forged_clause.update(outcome="PASS", failures=[])
    assert f"clause {cid}: the report says outcome PASS, its results give FAIL" in rejected(
        reseal(fresh, forged))
    # Counts or a claim of a complete run that the results do not bear out.
    doc2 = report(fresh)
    doc2["summary"]["tests"]["by_outcome"]["PASS"] += 1
    assert "summary counts are not those of its results" in rejected(reseal(fresh, doc2))
    doc2 = report(fresh)
    doc2["invocation"]["selection_complete"] = True
    assert "claims the whole suite ran, but records why it did not" in rejected(
        reseal(fresh, doc2))
    # A test outcome the report lightened.
    t = doc["tests"][0]
    t["outcome"] = "PASS"
    assert "outcome PASS, its results give FAIL" in rejected(reseal(fresh, doc))


def test_a_mustpass_list_that_is_not_the_official_one_is_rejected(
        fresh: dict[str, bytes]) -> None:
    lines = fresh[MUSTPASS].decode().splitlines(keepends=True)
    dropped = next(i for i, line in enumerate(lines) if line.startswith("CLK-"))
    edited = "".join(lines[:dropped] + lines[dropped + 1:]).encode()
    members = dict(fresh)
    members[MUSTPASS] = edited
    doc = report(fresh)
    doc["mustpass"]["sha256"] = hashlib.sha256(edited).hexdigest()
    why = rejected(reseal(members, doc))
    assert f"{MUSTPASS} is not the official must-pass list of spec" in why
    # Left as it was, the report no longer names the list in the bundle.
    assert "is not the list the report was judged by" in rejected(reseal(members))
    # A list for another spec version than the report's.
    members = dict(fresh)
    members["mustpass/2020.01.txt"] = members.pop(MUSTPASS)
    assert "must hold one must-pass list" in rejected(reseal(members))


def test_a_test_missing_from_the_results_is_rejected(fresh: dict[str, bytes],
                                                     tmp_path: Path) -> None:
    doc = report(fresh)
    gone = doc["tests"].pop(0)["nodeid"]
    why = rejected(reseal(fresh, doc))
    assert f"names test {gone}, which is missing from the results" in why
    # Removed everywhere, and the run claimed complete: the suite's tests show it.
    doc = report(fresh)
    doc["tests"].pop(0)
    for c in doc["clauses"]:
        c["tests"] = [n for n in c["tests"] if n != gone]
    doc["invocation"].update(selection_complete=True, selection_reasons=[], args=[])
    members = reseal(fresh, consistent(doc))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({t["nodeid"]: {} for t in report(fresh)["tests"]}))
    why = rejected(members, tests_file=suite)
    assert (f"1 test(s) of the tests of {suite} are missing from the results, e.g. "
            f"{gone.split('[')[0]} (") in why
    suite.write_text(json.dumps({t["nodeid"]: {} for t in doc["tests"]}))
    assert "every one of the tests of" in verify.verify(members, tests_file=suite)[-1]


def test_members_must_match_the_manifest_exactly(fresh: dict[str, bytes]) -> None:
    members = dict(fresh)
    members["report/extra.svg"] = b"<svg/>"
    assert "report/extra.svg is in the bundle but not in the manifest" in rejected(members)
    members = dict(fresh)
    del members["report/junit.xml"]
    assert "report/junit.xml is in the manifest but not in the bundle" in rejected(members)
    members = dict(fresh)
    del members[bd.MANIFEST]
    assert "no manifest.json" in rejected(members)


def _tar(path: Path, entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for e in entries:
            if isinstance(e, tarfile.TarInfo):
                tf.addfile(e)
            else:
                info = tarfile.TarInfo(e[0])
                info.size = len(e[1])
                tf.addfile(info, io.BytesIO(e[1]))
    return path


def _refused(path: Path) -> str:
    with pytest.raises(verify.Rejected) as info:
        verify.read_bundle(path)
    return str(info.value)


def test_hostile_archives_are_refused(fresh: dict[str, bytes], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    good = list(fresh.items())
    for name in ("../evil.txt", "/etc/passwd", "report/../../x", "report/sub/x.svg", "other"):
        why = _refused(_tar(tmp_path / "t.tar.gz", [*good, (name, b"x")]))
        assert "is not a name a bundle may hold" in why, name
    link = tarfile.TarInfo("report/figure-01-x.svg")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    assert "is a symbolic link" in _refused(_tar(tmp_path / "l.tar.gz", [*good, link]))
    hard = tarfile.TarInfo("report/figure-02-x.svg")
    hard.type, hard.linkname = tarfile.LNKTYPE, REPORT
    assert "is a hard link" in _refused(_tar(tmp_path / "h.tar.gz", [*good, hard]))
    assert "appears twice" in _refused(_tar(tmp_path / "d.tar.gz", [*good, good[0]]))
    zpath = tmp_path / "l.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        info = zipfile.ZipInfo("report/figure-01-x.svg")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    assert "is a symbolic link" in _refused(zpath)
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b" + b"\0" * 100)
    assert "unreadable archive" in _refused(tmp_path / "junk.tar.gz")
    (tmp_path / "text.txt").write_text("hello")
    assert "neither a .tar.gz nor a .zip" in _refused(tmp_path / "text.txt")
    # Size bombs: the bounds hold whatever the archive declares (lowered here to stay quick).
    monkeypatch.setattr(bd, "MAX_MEMBER_BYTES", 1 << 20)
    monkeypatch.setattr(bd, "MAX_TOTAL_BYTES", 2 << 20)
    monkeypatch.setattr(verify, "TAR_HEADER_SLACK", 1 << 20)
    zeros = b"\0" * (4 << 20)
    assert "more than 1048576" in _refused(_tar(tmp_path / "big.tar.gz", [("report/a.svg",
                                                                           zeros)]))
    many = [(f"report/f{i}.svg", b"\0" * (900 << 10)) for i in range(4)]
    assert "more than 2097152 bytes" in _refused(_tar(tmp_path / "many.tar.gz", many))
    # A header that inflates past every bound before any member is seen (tarfile reads a
    # pax header whole): the decompressed stream itself is bounded.
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("report/a.svg")
        info.pax_headers = {"comment": "x" * (8 << 20)}
        tf.addfile(info, io.BytesIO(b""))
    assert len(bomb.read_bytes()) < 100_000
    assert "the archive decompresses to more than" in _refused(bomb)
    zbig = tmp_path / "big.zip"
    with zipfile.ZipFile(zbig, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("report/a.svg", zeros)
    assert "more than 1048576" in _refused(zbig)


def test_the_command_line_says_why_in_one_line(fresh: dict[str, bytes], tmp_path: Path) -> None:
    members = dict(fresh)
    members["report/certification.md"] += b"x"
    bad = tmp_path / "bad.tar.gz"
    bd.write_archive(members, bad)
    done = subprocess.run([sys.executable, "-m", "reports", "verify", str(bad)], cwd=spec.ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("verify: REJECTED: member report/certification.md does not "
                                  "match the manifest") and done.stderr.count("\n") == 1
    done = subprocess.run([sys.executable, "-m", "reports", "verify", str(tmp_path / "none")],
                          cwd=spec.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    done = subprocess.run([sys.executable, "-m", "reports", "bundle", str(tmp_path)],
                          cwd=spec.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("bundle: ") \
        and done.stderr.count("\n") == 1


def test_the_environment_names_sm_count_and_mig_mode_where_nvml_tells(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    class NotSupported(Exception):
        pass

    def unsupported(*_: Any) -> Any:
        raise NotSupported("Not Supported")

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlSystemGetCudaDriverVersion_v2=lambda: 13000,
        nvmlSystemGetDriverVersion=lambda: b"580.159.04",
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:0{h}:00.0"),
        nvmlDeviceGetAttributes_v2=unsupported,       # a full GPU: no NVML SM count
        nvmlDeviceGetMigMode=lambda h: [h, h],
        nvmlDeviceGetComputeMode=lambda h: 0,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=150 << 30))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(bd, "cuda_sm_counts", lambda: {"00:00.0": 132})  # GPU 1 hidden
    facts = bd.nvml_facts()
    assert facts["available"] and facts["cuda_version"] == "13.0"
    first, second = facts["devices"]
    assert (first["sm_count"], first["sm_count_source"], first["pci_bus_id"]) == (
        132, "cuda-driver", "00:00.0")
    assert first["mig_mode"] == {"current": 0, "pending": 0}
    assert second["mig_mode"] == {"current": 1, "pending": 1}
    assert second["sm_count"] is None and second["sm_count_source"] is None
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert bd.nvml_facts()["available"] is False


def test_missing_tests_are_counted_per_test_function_not_by_parameter_ids() -> None:
    # pytest 9.1 and later shorten long parameter IDs: the same case is named differently.
    suite = {"t.py::f[" + "9" * 120 + "]", "t.py::f[1]", "t.py::g"}
    assert verify.missing_tests(suite, {"t.py::f[value0]", "t.py::f[1]", "t.py::g"}) == []
    assert verify.missing_tests(suite, {"t.py::f[1]", "t.py::g"}) == [("t.py::f", 1, 2)]
    assert verify.missing_tests(suite, {"t.py::f[1]", "t.py::f[2]"}) == [("t.py::g", 0, 1)]
