"""Writes a run folder (JSON, Markdown, HTML, SVG plots) and the ``latest`` pointer.

A run folder appears complete or not at all: it is written under a temporary name beside
its final one (``staged``) and renamed when every file is in it; ``latest`` then moves to it
(a temporary symlink renamed over the old one). Every text of the document passes through
``reports.safe_text`` first. What cannot be done is a ``ReportWriteError`` with one line
saying why; ``report_dir_problem`` finds the usual causes before any test runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from reports import outcome_summary, safe_text

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "certification.schema.json"
LATEST = "latest"
_STAGING_SUFFIX = ".partial"


class ReportWriteError(Exception):
    """The report cannot be written completely; the message is one line saying why."""


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def validation_errors(doc: dict[str, Any]) -> list[str]:
    """Messages of every place ``doc`` breaks the schema (empty when valid)."""
    import jsonschema
    validator = jsonschema.Draft202012Validator(schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; reports are for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_all(doc: dict[str, Any], run_dir: Path) -> dict[str, str]:
    """Writes plots, Markdown and HTML for ``doc``; returns the file names written."""
    from reports import plots, render_html, render_md
    safe_text.json_document(doc)
    figures = plots.figures(doc)
    names: dict[str, str] = {}
    for i, fig in enumerate(figures):
        if fig.get("svg"):
            fig["file"] = f"figure-{i + 1:02d}-{fig['name']}.svg"
            atomic_write(run_dir / fig["file"], fig["svg"])
    atomic_write(run_dir / "certification.md", render_md.render(doc, figures))
    atomic_write(run_dir / "certification.html", render_html.render(doc, figures))
    names.update(markdown="certification.md", html="certification.html")
    names["figures"] = [f["file"] for f in figures if f.get("file")]  # type: ignore[assignment]
    names["failed_figures"] = [f"{f.get('title') or f['name']}: {f['error']}"  # type: ignore[assignment]
                               for f in figures if f.get("error")]
    return names


def write_run(doc: dict[str, Any], run_dir: Path, junit: str | None) -> list[str]:
    """Writes the run folder; returns where the document breaks its schema (a suite bug:
    the document is still written, with ``schema_errors``). Every string of ``doc`` is
    made safe first (``safe_text.json_document``, in place)."""
    safe_text.json_document(doc)
    run_dir.mkdir(parents=True, exist_ok=True)
    from reports import recognition
    recognition.annotate(doc)          # AntMan 1.15's own failures, recognised (SPEC.md s. 8)
    doc["files"] = {"json": "certification.json", "markdown": "certification.md",
                    "html": "certification.html", "junit": junit, "figures": []}
    names = render_all(doc, run_dir)
    doc["files"]["figures"] = names["figures"]
    errors = validation_errors(doc)
    if errors:
        doc["schema_errors"] = errors[:50]
    atomic_write(run_dir / "certification.json", json.dumps(doc, indent=2) + "\n")
    return errors


#: ``<testsuite name>`` of the JUnit XML, and its properties (CI systems show them).
JUNIT_SUITE_NAME = "antman-conformance"


def junit_properties(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """What the JUnit XML says about the run: suite, verdict, runtime, spec, target."""
    rt, suite = doc["runtime"], doc["suite"]
    from reports.render_md import target_text
    return [
        ("antman:suite", f"{suite['name']} {suite['version']}"),
        ("antman:suite_commit", str((suite.get("git") or {}).get("commit") or "unknown")),
        ("antman:verdict", doc["verdict"]["status"]),
        ("antman:verdict_reasons", "; ".join(r["message"] for r in doc["verdict"]["reasons"])),
        ("antman:runtime", f"{rt['name']} {rt['version']}"),
        ("antman:runtime_module", str(rt["module"])),
        ("antman:spec_version", doc["spec"]["version"]),
        ("antman:execution_target", target_text(doc["execution_target"], short=True)),
        ("antman:mustpass_clauses", _mustpass_counts(doc)),
        ("antman:run_id", doc["run_id"]),
        *outcome_summary.suite_properties(doc),
    ]


def _mustpass_counts(doc: dict[str, Any]) -> str:
    """``"173 (PASS 161, NOT_RUN 12)"``: the must-pass clauses, as the summary line counts."""
    counts = doc["summary"]["must_pass"]
    parts = [f"{o} {n}" for o, n in counts["by_outcome"].items() if n]
    return f"{counts['total']} ({', '.join(parts) or 'none'})"


def annotate_junit(path: Path, doc: dict[str, Any]) -> None:
    """Names every ``<testsuite>`` of the JUnit XML at ``path`` after the suite and adds the
    run's properties (``junit_properties``) to it; rewritten atomically. What pytest wrote is
    read with every character XML 1.0 forbids made visible (``safe_text.xml``: a test ID or
    name pytest does not escape), so the file written always parses."""
    import xml.etree.ElementTree as ET
    text = path.read_bytes().decode("utf-8", errors="replace")
    try:
        root = ET.fromstring(safe_text.xml(text, limit=0))
    except ET.ParseError as exc:
        raise ReportWriteError(f"the JUnit XML {path} does not parse: {exc}") from None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if root.tag == "testsuites":
        root.set("name", JUNIT_SUITE_NAME)
    for ts in suites:
        ts.set("name", JUNIT_SUITE_NAME)
        props = ts.find("properties")
        if props is None:
            props = ET.Element("properties")
            ts.insert(0, props)
        for old in [p for p in props if p.get("name", "").startswith("antman:")]:
            props.remove(old)
        for name, value in junit_properties(doc):
            ET.SubElement(props, "property", {"name": name, "value": safe_text.xml(value)})
    outcome_summary.annotate_testcases(root, doc)
    atomic_write(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")


@contextlib.contextmanager
def staged(run_dir: Path) -> Iterator[Path]:
    """A new folder beside ``run_dir`` under a temporary name, for the block to fill; renamed
    to ``run_dir`` when the block completes, removed when it fails. ``ReportWriteError``
    when the folder cannot be made or renamed (something is already at ``run_dir``)."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=run_dir.parent, prefix=f".{run_dir.name}.",
                                    suffix=_STAGING_SUFFIX))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; reports are for everyone
    except OSError as exc:
        raise ReportWriteError(f"cannot create a folder in {run_dir.parent}: "
                               f"{exc.strerror or exc}") from None
    try:
        yield tmp
        if os.path.lexists(run_dir):
            raise ReportWriteError(f"{run_dir} already exists (a folder, file or link put "
                                   f"there during the run); the report is not written")
        try:
            os.rename(tmp, run_dir)
        except OSError as exc:
            raise ReportWriteError(f"cannot rename the finished report to {run_dir}: "
                                   f"{exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def free_run_dir(run_dir: Path) -> Path:
    """``run_dir``, or ``run_dir-2``, ``-3``... when something (an earlier run of the same
    process in the same second, a planted link) is already there."""
    candidate, k = run_dir, 1
    while os.path.lexists(candidate) and k < 1000:
        k += 1
        candidate = run_dir.with_name(f"{run_dir.name}-{k}")
    return candidate


def report_dir_problem(base: Path) -> str | None:
    """Why run folders cannot be written under ``base`` or ``latest`` cannot point at them
    (one line), or None. Creates ``base`` when missing; leaves nothing else behind."""
    if os.path.lexists(base) and not base.is_dir():
        return f"--report-dir {base} is not a folder"
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--report-dir {base}: cannot create it: {exc.strerror or exc}"
    link = base / LATEST
    if not link.is_symlink() and link.is_dir():
        return (f"--report-dir {base}: {link} is a real folder, not the link to the newest "
                f"report; move it away")
    try:
        os.rmdir(tempfile.mkdtemp(dir=base, prefix=".antman-write-check-"))
    except OSError as exc:
        return f"--report-dir {base} is not writable: {exc.strerror or exc}"
    return None


#: The pointers to the newest run of each kind: a complete certification run (``latest``),
#: a run of part of the suite (``--clause``, ``-k``, paths, ``--rerun`` ...) and a run
#: without a verdict (benchmarks). Only a complete run moves ``latest``, so ``latest`` is
#: always a whole certification.
LATEST_PARTIAL = "latest-partial"
LATEST_BENCH = "latest-bench"
POINTERS = (LATEST, LATEST_PARTIAL, LATEST_BENCH)
#: Run folders kept under a report folder (``--keep-runs``, ``ANTMAN_KEEP_RUNS``).
DEFAULT_KEEP_RUNS = 20
KEEP_RUNS_ENV = "ANTMAN_KEEP_RUNS"


def pointer_for(doc: dict[str, Any]) -> str:
    """Which pointer a run's document moves (``POINTERS``): a run stopped before its end
    (budget, Ctrl-C, an internal error) is not a whole certification either."""
    if doc.get("verdict", {}).get("status") == "NO VERDICT":
        return LATEST_BENCH
    invocation = doc.get("invocation", {})
    if not invocation.get("selection_complete", True) or invocation.get("stopped"):
        return LATEST_PARTIAL          # part of the suite, or a run stopped before its end
    return LATEST


def keep_runs(value: str | int | None) -> int:
    """The number of run folders to keep, from ``--keep-runs`` or ``ANTMAN_KEEP_RUNS``
    (``DEFAULT_KEEP_RUNS`` when neither is given): an integer >= 1, else ``ValueError``."""
    if value is None or value == "":
        value = os.environ.get(KEEP_RUNS_ENV) or DEFAULT_KEEP_RUNS
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"the number of run folders to keep must be an integer >= 1, "
                         f"got {value!r}")
    return int(text)


def point_latest(base: Path, run_dir: Path, name: str = LATEST) -> None:
    """``base/<name>`` -> ``run_dir`` (a relative symlink, replaced atomically; a file naming
    it where symlinks are unavailable). ``ReportWriteError`` when the pointer is a real folder
    or cannot be replaced."""
    if name not in POINTERS:
        raise ValueError(f"unknown pointer {name!r}")
    link = base / name
    tmp = base / f".{name}.{os.getpid()}"
    if not link.is_symlink() and link.is_dir():
        raise ReportWriteError(f"{link} is a real folder, not the link to the newest report, "
                               f"so it still names an older one; the report is in {run_dir}")
    try:
        tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise ReportWriteError(f"cannot remove {tmp} to move {link}: {exc.strerror or exc}; "
                               f"the report is in {run_dir}") from None
    try:
        tmp.symlink_to(run_dir.name, target_is_directory=True)
    except OSError:  # no symlinks here: a pointer file instead
        tmp.unlink(missing_ok=True)
        if link.is_symlink():
            raise ReportWriteError(f"cannot make a symlink in {base} to replace {link}; the "
                                   f"report is in {run_dir}") from None
        atomic_write(link, run_dir.name + "\n")
        return
    try:
        os.replace(tmp, link)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ReportWriteError(f"cannot point {link} at the new report: "
                               f"{exc.strerror or exc}; the report is in {run_dir}") from None


def pointed_at(base: Path) -> set[str]:
    """Names of the run folders a pointer of ``base`` names (symlink or pointer file)."""
    return {n for n in (_pointed(base / name) for name in POINTERS) if n}


def newest_pointer(base: Path) -> Path | None:
    """The pointer of ``base`` (``POINTERS``) naming the newest run folder, or None."""
    found = []
    for name in POINTERS:
        named = _pointed(base / name)
        if named is not None:
            found.append((named, base / name))
    return max(found)[1] if found else None


def _pointed(link: Path) -> str | None:
    """The run folder name a pointer (symlink or pointer file) names, or None."""
    try:
        if link.is_symlink():
            return Path(os.readlink(link)).name
        if link.is_file() and link.stat().st_size < 4096:
            return link.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        pass
    return None


RUN_DIR_NAME = re.compile(r"^\d{8}T\d{6}Z-.+-\d+$")


def prune(base: Path, keep: int) -> list[Path]:
    """Removes all but the newest ``keep`` run folders (by name) under ``base``, never one a
    pointer names; returns those removed."""
    runs = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink()
                  and RUN_DIR_NAME.match(p.name))
    kept = pointed_at(base)
    removed = []
    for old in runs[:-keep] if keep > 0 else []:
        if old.name in kept:
            continue
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    return removed
