"""Hostile text and a hostile report folder cannot erase or corrupt a certification report.

SPEC.md section 7 (Report): text from the implementation (a worker's records and standard
error, a fork's NAME and test IDs, messages quoting them) is made safe for each output in
one place (reports/safe_text.py); a run folder appears complete or not at all and ``latest``
moves only to a complete one; a report that cannot be written ends the run with exit status
4 and one line saying why. The hostile strings come from fixtures/hostile_text.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import threading
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from conformance import spec
from fixtures.hostile_text import (HOSTILE_TEXTS, hostile_mix, hostile_strings, hostile_text,
                                   megabyte_line)
from meta_tests.test_reports import (_plotting_imported_before_pytester,  # noqa: F401
                                     project, run)                        # fixtures
from fixtures.nemesis import release_fifo_readers
from reports import safe_text, untrusted, writer
from reports.plugin import REPORT_NOT_WRITTEN

pytest_plugins = ["pytester"]
ROOT = spec.ROOT
WORKERS = ROOT / "meta_tests" / "workers"
NOT_WRITTEN = int(REPORT_NOT_WRITTEN)
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _xml_char(c: str) -> bool:
    o = ord(c)
    return (o in (0x9, 0xA, 0xD) or 0x20 <= o <= 0xD7FF or 0xE000 <= o <= 0xFFFD
            or 0x10000 <= o <= 0x10FFFF)


def _terminal_safe(text: str, *, multiline: bool = False) -> bool:
    allowed = "\n\t" if multiline else ""
    return not any((unicodedata.category(c) == "Cc" and c not in allowed)
                   or c in BIDI or 0xD800 <= ord(c) <= 0xDFFF for c in text)


# ------------------------------------------------------------------- one function per output

@settings(max_examples=300, deadline=None)
@given(hostile_text())
def test_every_output_function_makes_any_text_safe(text: str) -> None:
    as_json = safe_text.json_text(text)
    as_json.encode("utf-8")                                     # no lone surrogate
    assert json.loads(json.dumps(as_json, ensure_ascii=False)) == as_json
    as_xml = safe_text.xml(text)
    assert all(_xml_char(c) for c in as_xml), ascii(as_xml)
    element = ET.Element("property", {"name": "n", "value": as_xml})
    element.text = as_xml
    parsed = ET.fromstring(ET.tostring(element, encoding="unicode"))
    assert parsed.get("value") == as_xml
    assert (parsed.text or "") == as_xml.replace("\r\n", "\n").replace("\r", "\n")
    as_html = safe_text.html(text)
    assert not set("<>\"'") & set(as_html) and _terminal_safe(as_html, multiline=True)
    as_md = safe_text.markdown(text)
    assert "\n" not in as_md and _terminal_safe(as_md)
    unescaped = as_md
    for pair in ("\\\\", "\\`", "\\*", "\\[", "\\]", "\\<", "\\|", "\\~", "\\&"):
        unescaped = unescaped.replace(pair, "")
    assert not set("`*[]<|~&") & set(unescaped), as_md
    code = safe_text.markdown_code(text, in_table=True)
    fence = code[:len(code) - len(code.lstrip("`"))]
    assert code.endswith(fence) and fence not in code[len(fence):-len(fence)]
    assert "\n" not in code and "|" not in code.replace("\\|", "")
    block = safe_text.markdown_block(text, indent="  ")
    assert block[0] == block[-1] and all(not line.strip().startswith(block[0].strip())
                                         for line in block[1:-1])
    assert _terminal_safe(safe_text.terminal(text))
    assert _terminal_safe(safe_text.terminal(text, multiline=True), multiline=True)


def test_control_characters_stay_readable_and_lengths_are_bounded() -> None:
    assert safe_text.terminal("a\x1b[2Jb\rc\ud800\u202e") == "a\\x1b[2Jb\\x0dc\\ud800\\u202e"
    assert safe_text.json_text("fake\ud800worker\x00") == "fake\\ud800worker\x00"
    assert safe_text.xml("a\x00\x1bb\tc") == "a\\x00\\x1bb\tc"
    assert [safe_text.markdown(t) for t in ("# CERTIFIED", "1. x", "> q", "2.21.0 x86_64")] \
        == ["\\# CERTIFIED", "1\\. x", "\\> q", "2.21.0 x86_64"]
    for name, text in hostile_strings(huge=True):
        assert len(safe_text.terminal(text)) <= safe_text.TERMINAL_LINE_CHARS, name
        assert _terminal_safe(safe_text.terminal(text)), name
        for fn, growth in ((safe_text.json_text, 1), (safe_text.xml, 1), (safe_text.html, 6),
                           (safe_text.markdown, 2)):     # escaping after the cut lengthens
            out = fn(text)
            if len(text) > safe_text.MAX_TEXT_CHARS:
                assert len(out) <= growth * safe_text.MAX_TEXT_CHARS, (fn, name)
                assert f"{len(text)} characters" in out[-40:], (fn, name)
    doc = {"a\ud800": ["x\udfff", {"k": "v\ud800" * 3, "n": 1}], "s": megabyte_line()}
    safe_text.json_document(doc)
    json.dumps(doc, ensure_ascii=False).encode("utf-8")
    assert doc["a\\ud800"][1]["k"] == "v\\ud800" * 3
    assert len(doc["s"]) <= safe_text.MAX_TEXT_CHARS


# --------------------------------------------------------------------------- the report set

def assert_complete_report(folder: Path) -> dict[str, Any]:
    """A complete, valid report set in ``folder``: the JSON (strict UTF-8) valid against the
    schema, junit.xml parses, Markdown and HTML present and UTF-8."""
    names = {p.name for p in folder.iterdir()}
    assert {"certification.json", "certification.md", "certification.html",
            "junit.xml"} <= names, names
    doc = json.loads((folder / "certification.json").read_bytes().decode("utf-8"))
    assert not writer.validation_errors(doc), writer.validation_errors(doc)[:5]
    ET.parse(folder / "junit.xml")
    for name in ("certification.md", "certification.html"):
        text = (folder / name).read_bytes().decode("utf-8")
        assert _terminal_safe(text, multiline=True), name
    return doc


HOSTILE_RUNTIME = f"""
from conformance.spec import CAPABILITY_NAMES
NAME = {("fork" + HOSTILE_TEXTS["nul"] + HOSTILE_TEXTS["escape_title"]
         + HOSTILE_TEXTS["xml_markup"])!r}
VERSION = {(HOSTILE_TEXTS["carriage_return"] + HOSTILE_TEXTS["bidi_override"])!r}
SPEC_VERSION = {spec.spec_version()!r}
CAPABILITIES = frozenset({{"bfc", "virtual_clock"}})
globals().update({{name: object() for cap in CAPABILITIES for name in CAPABILITY_NAMES[cap]}})
"""

#: A fork's own collector: a test ID with NUL, ESC and CR in a part pytest's JUnit writer
#: does not escape (the class name), and failures quoting hostile text.
HOSTILE_CONFTEST = f"""
import pytest

MIX = {hostile_mix()!r}


class HostileItem(pytest.Item):
    def runtest(self):
        raise AssertionError("worker said: " + MIX)

    def reportinfo(self):
        return self.path, 0, self.name


class HostileGroup(pytest.Collector):
    def collect(self):
        item = HostileItem.from_parent(self, name="case\\x1b[2J\\r")
        item.add_marker(pytest.mark.clause("API-1"))
        return [item]


class HostileFile(pytest.File):
    def collect(self):
        return [HostileGroup.from_parent(self, name="group\\x00\\x1b]0;owned\\x07")]


def pytest_collect_file(parent, file_path):
    if file_path.name.startswith("hostile") and file_path.suffix == ".txt":
        return HostileFile.from_parent(parent, path=file_path)
"""


def test_a_fork_with_hostile_names_and_test_ids_gets_a_complete_valid_report(
        project: pytest.Pytester) -> None:
    project.makepyfile(hostile_runtime=HOSTILE_RUNTIME)
    project.makeconftest(HOSTILE_CONFTEST)
    (project.path / "hostile_cases.txt").write_text("")
    project.makepyfile(test_plain=textwrap.dedent(f"""
        import pytest

        @pytest.mark.clause("API-2")
        @pytest.mark.parametrize("text", [{HOSTILE_TEXTS['nul']!r},
                                          {HOSTILE_TEXTS['escape_colour']!r}])
        def test_fails_with_hostile_text(text):
            assert False, text + {HOSTILE_TEXTS['lone_high_surrogate']!r}
    """))
    result, doc = run(project, "--runtime", "hostile_runtime")
    assert result.ret == 1, result.stdout.str()[-3000:]
    folder = (project.path / "out" / "latest").resolve()
    assert assert_complete_report(folder) == doc
    assert doc["runtime"]["name"].startswith("forkfake\x00worker\x1b]0;owned\x07]]></")
    assert len(doc["tests"]) == 3
    junit = ET.parse(folder / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["antman:runtime"].startswith("forkfake\\x00worker\\x1b]0;owned\\x07]]></")
    html = (folder / "certification.html").read_text(encoding="utf-8")
    assert "<script>alert" not in html and "&lt;testcase name=&quot;forged" in html
    out = "\n".join(result.outlines)
    assert "report not written" not in out
    summary = out[out.index("AntMan certification"):]
    assert _terminal_safe(summary, multiline=True), ascii(summary[:2000])
    header = next(line for line in result.outlines if line.startswith("antman runtime:"))
    assert _terminal_safe(header) and "forkfake\\x00worker\\x1b]0;" in header, ascii(header)


@pytest.mark.parametrize("mode", ["garbage", "conforming"])
def test_an_earlier_report_is_not_erased_by_a_hostile_worker(tmp_path: Path, mode: str) -> None:
    """The attack: a lone surrogate in the hello record's runtime.name (valid JSON) made the
    report unwritable, the run exited 0 and ``latest`` kept naming an earlier CERTIFIED
    report. A black-box run with a worker whose every text is hostile, over an earlier run:
    a complete, valid report set that ``latest`` names, and a terminal with no raw control
    character of the worker's. ``garbage``: the worker also writes a line that is not JSON
    (FAIL, quoting it and its standard error); ``conforming``: it does not (PASS)."""
    out = tmp_path / "out"
    earlier = out / "20260101T000000Z-earlier-1"
    earlier.mkdir(parents=True)
    (earlier / "certification.json").write_text('{"verdict": {"status": "CERTIFIED"}}')
    (out / "latest").symlink_to(earlier.name)
    (out / "latest-partial").symlink_to(earlier.name)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "ANTMAN_", "GPU_CONFIG", "GPU_STATUS"))}
    cmd = shlex.join([sys.executable, str(WORKERS / "hostile_text.py"), mode])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_worker_protocol.py", "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", "--report-dir", str(out),
         "--worker-cmd", cmd, "--worker-timeout", "2",
         "-k", "test_hello_then_one_record_per_step or test_stdin_eof_stops"],
        cwd=ROOT, env=env, capture_output=True, timeout=240)
    output = (done.stdout + done.stderr).decode("utf-8", errors="replace")
    # two tests of the suite: a partial run, which moves latest-partial (reports/writer.py)
    latest = (out / "latest-partial").resolve()
    assert latest != earlier.resolve(), f"latest-partial still names the earlier report:\n" \
                                        f"{output[-3000:]}"
    doc = assert_complete_report(latest)
    assert doc["runtime"]["name"].startswith("fake-worker <lone_high_surrogate:fake\\ud800")
    assert len(doc["runtime"]["name"]) <= safe_text.MAX_TEXT_CHARS
    outcomes = [t["outcome"] for t in doc["tests"]]
    if mode == "conforming":
        assert (done.returncode, outcomes) == (0, ["PASS", "PASS"]), output[-3000:]
    else:
        assert (done.returncode, outcomes) == (1, ["FAIL", "FAIL"]), output[-3000:]
        messages = [t["message"] or "" for t in doc["tests"]]
        assert all("not JSON" in m and "\\x1b[2J" in m for m in messages), messages
        assert "fake: the last line of standard error\\x1b[2K" in output  # the tail's end
    raw = done.stdout + done.stderr
    for bad in (b"\x1b", b"\r", b"\x00", b"\x07", "\u202e".encode(), b"\xed\xa0\x80"):
        assert bad not in raw, f"{bad!r} reached the terminal: {raw[-2000:]!r}"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [earlier.name, "latest", "latest-partial", latest.name])  # nothing half-written left


# --------------------------------------------------------------------------- the report folder

def _earlier(project: pytest.Pytester) -> Path:
    old = project.path / "out" / "20260101T000000Z-earlier-1"
    old.mkdir(parents=True)
    (old / "certification.json").write_text("{}")
    (project.path / "out" / "latest").symlink_to(old.name)
    return old


def _run_raw(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest("-p", "conformance.plugin", "-p", "reports.plugin",
                             "-p", "no:cacheprovider", "--runtime", "fake_runtime_for_reports",
                             "--report-dir", str(project.path / "out"), "--timeout=60", *args)


def _one_error_line(result: pytest.RunResult, needle: str) -> None:
    lines = [line for line in result.errlines + result.outlines if needle in line]
    assert len(lines) == 1, (needle, result.outlines[-30:], result.errlines[-10:])


@pytest.mark.parametrize("how", ["file", "below_a_file", "read_only"])
def test_an_unusable_report_folder_is_a_usage_error_before_any_test(
        project: pytest.Pytester, how: str) -> None:
    target = project.path / "out"
    if how == "file":
        target.write_text("not a folder")
        needle = "is not a folder"
    elif how == "below_a_file":
        (project.path / "blocker").write_text("x")
        target = project.path / "blocker" / "out"
        needle = "cannot create it"
    else:
        target.mkdir()
        target.chmod(0o555)
        if os.access(target, os.W_OK):
            target.chmod(0o755)
            pytest.skip("this user writes in read-only folders (root)")
        needle = "is not writable"
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    open("ran", "w").close()\n')
    try:
        result = project.runpytest("-p", "conformance.plugin", "-p", "reports.plugin",
                                   "-p", "no:cacheprovider", "--runtime",
                                   "fake_runtime_for_reports", "--report-dir", str(target),
                                   "--timeout=60")
    finally:
        if how == "read_only":
            target.chmod(0o755)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    _one_error_line(result, needle)
    assert not (project.path / "ran").exists(), "a test ran"
    if how == "file":
        assert target.read_text() == "not a folder"


def test_a_real_folder_named_latest_is_a_usage_error(project: pytest.Pytester) -> None:
    (project.path / "out" / "latest").mkdir(parents=True)
    (project.path / "out" / "latest" / "certification.json").write_text("{}")
    project.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = _run_raw(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    _one_error_line(result, "is a real folder")
    assert sorted(p.name for p in (project.path / "out").iterdir()) == ["latest"]
    assert os.listdir(project.path / "out" / "latest") == ["certification.json"]


def test_latest_turned_into_a_real_folder_during_the_run_fails_the_run(
        project: pytest.Pytester) -> None:
    old = _earlier(project)
    project.makepyfile(test_ok=textwrap.dedent(f"""
        import os, pytest

        @pytest.mark.clause("API-1")
        def test_ok():
            latest = {str(project.path / "out" / "latest")!r}
            os.unlink(latest)
            os.mkdir(latest)
    """))
    result = _run_raw(project, "--require-certified")
    assert result.ret == NOT_WRITTEN, result.outlines[-20:]
    _one_error_line(result, "report not written: ")
    _one_error_line(result, "is a real folder")
    runs = [p for p in (project.path / "out").iterdir() if p.name not in ("latest", old.name)]
    assert len(runs) == 1 and not runs[0].name.startswith(".")
    assert_complete_report(runs[0])          # the report itself is complete, latest is not moved


def test_a_report_that_fails_midway_leaves_no_folder_and_latest_alone(
        project: pytest.Pytester) -> None:
    old = _earlier(project)
    project.makeconftest("""
        import reports.render_html

        def pytest_configure(config):
            def broken(doc, figures):
                raise OSError(28, "No space left on device")
            reports.render_html.render = broken
    """)
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    try:
        result = _run_raw(project)
    finally:
        import importlib
        import reports.render_html
        importlib.reload(reports.render_html)
    assert result.ret == NOT_WRITTEN, result.outlines[-20:]
    _one_error_line(result, "report not written: No space left on device")
    assert sorted(p.name for p in (project.path / "out").iterdir()) == [old.name, "latest"]
    assert os.readlink(project.path / "out" / "latest") == old.name


def test_a_link_planted_at_the_run_folder_is_not_followed(project: pytest.Pytester,
                                                           tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project.makepyfile(test_ok=textwrap.dedent(f"""
        import os, pytest

        @pytest.mark.clause("API-1")
        def test_ok(request):
            recorder = request.config.pluginmanager.get_plugin("antman-certification-recorder")
            os.symlink({str(elsewhere)!r}, recorder.run_dir)
    """))
    result, doc = run(project)
    assert result.ret == 0, result.outlines[-20:]
    assert os.listdir(elsewhere) == []
    latest = project.path / "out" / "latest"
    assert not latest.resolve().is_symlink() and latest.resolve().parent == latest.parent
    assert assert_complete_report(latest.resolve()) == doc


def test_a_staged_folder_is_renamed_complete_or_removed(tmp_path: Path) -> None:
    run_dir = tmp_path / "20260101T000000Z-rt-1"
    with pytest.raises(RuntimeError):
        with writer.staged(run_dir) as folder:
            (folder / "certification.json").write_text("{}")
            raise RuntimeError("No space left on device")
    assert os.listdir(tmp_path) == []
    with writer.staged(run_dir) as folder:
        (folder / "certification.json").write_text("{}")
        assert not run_dir.exists() and folder.parent == tmp_path
    assert os.listdir(run_dir) == ["certification.json"] and len(os.listdir(tmp_path)) == 1
    planted = tmp_path / "20260101T000000Z-rt-2"
    with pytest.raises(writer.ReportWriteError, match="already exists"):
        with writer.staged(planted):
            planted.symlink_to(run_dir)              # put there while the folder is written
    assert sorted(os.listdir(tmp_path)) == [run_dir.name, planted.name]
    assert writer.free_run_dir(planted) == tmp_path / f"{planted.name}-2"
    (tmp_path / "latest").mkdir()
    with pytest.raises(writer.ReportWriteError, match="is a real folder"):
        writer.point_latest(tmp_path, run_dir)
    assert os.listdir(tmp_path / "latest") == []


def test_a_junit_file_named_by_junitxml_is_annotated_safely(project: pytest.Pytester) -> None:
    project.makepyfile(hostile_runtime=HOSTILE_RUNTIME)
    project.makepyfile(test_ok='import pytest\n\n@pytest.mark.clause("API-1")\n'
                               'def test_ok():\n    pass\n')
    external = project.path / "ci" / "results.xml"
    external.parent.mkdir()
    result, doc = run(project, "--runtime", "hostile_runtime", f"--junitxml={external}")
    assert result.ret == 0, result.outlines[-20:]
    assert doc["files"]["junit"] == str(external)
    props = {p.get("name"): p.get("value") for p in ET.parse(external).getroot().iter("property")}
    assert props["antman:runtime"].startswith("forkfake\\x00worker\\x1b]0;owned\\x07]]></")
    assert "junit.xml" not in os.listdir(project.path / "out" / "latest")


# --------------------------------------------------------------------------- the one reader
#                                                                     of files from elsewhere

def _refused(path: Path, limit: int = 1 << 20, **how: bool) -> str:
    """The one-line reason ``untrusted.read_regular`` refuses ``path``, read in a thread that
    a FIFO left open would hold (it is let go and the test fails, never hangs)."""
    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(untrusted.read_regular(path, limit, **how))
        except BaseException as exc:    # noqa: BLE001 (handed to the test)
            outcome.append(exc)

    reader = threading.Thread(target=read, name="read-regular", daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():
        release_fifo_readers(path)
        reader.join(10)
        pytest.fail(f"read_regular blocked on {path}")
    (got,) = outcome
    assert isinstance(got, untrusted.UnusableFile), (path, got)
    assert isinstance(got, untrusted.ReportError) and "\n" not in str(got)
    return str(got)


@pytest.mark.parametrize("follow_symlinks", [False, True])
def test_the_one_reader_takes_only_a_bounded_regular_file(tmp_path: Path,
                                                          follow_symlinks: bool) -> None:
    """Every tool reads a file named from outside through ``untrusted.read_regular``: a FIFO
    nobody writes is refused without waiting, /dev/zero without reading forever, a folder,
    a file over the limit, and a symbolic link unless the caller follows links."""
    how = {"follow_symlinks": follow_symlinks}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert "not a regular file" in _refused(fifo, **how)
    assert "not a regular file" in _refused(Path("/dev/zero"), **how)
    assert "not a regular file" in _refused(tmp_path, **how)
    big = tmp_path / "big.json"
    with big.open("wb") as f:                  # sparse: no disk used
        f.truncate(untrusted.MAX_REPORT_BYTES + 1)
    assert f"more than the {untrusted.MAX_REPORT_BYTES} allowed" in _refused(
        big, untrusted.MAX_REPORT_BYTES, **how)
    assert "cannot open" in _refused(tmp_path / "missing.json", **how)
    good = tmp_path / "good.json"
    good.write_bytes(b"{}")
    assert "more than the 1 allowed" in _refused(good, 1, **how)
    link = tmp_path / "link.json"
    os.symlink(good, link)
    link_to_fifo = tmp_path / "link-to-fifo.json"
    os.symlink(fifo, link_to_fifo)
    if follow_symlinks:
        assert untrusted.read_regular(link, 2, **how) == b"{}"
        assert "not a regular file" in _refused(link_to_fifo, **how)
    else:
        assert "is a symbolic link" in _refused(link, **how)
        assert "is a symbolic link" in _refused(link_to_fifo, **how)
    assert untrusted.read_regular(good, 2, **how) == b"{}"


def test_no_other_module_opens_a_file_from_elsewhere_on_its_own() -> None:
    """``read_regular`` is the only non-blocking open of the report and mutation tools: a
    second reader would be a second set of bounds to keep right."""
    openers = sorted(p.relative_to(ROOT).as_posix()
                     for folder in ("reports", "mutation") for p in (ROOT / folder).glob("*.py")
                     if "O_NONBLOCK" in p.read_text(encoding="utf-8"))
    assert openers == ["reports/untrusted.py"]
    assert not (ROOT / "reports" / "bounded_read.py").exists()
