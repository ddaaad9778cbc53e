"""Writes a run folder (JSON, Markdown, HTML, SVG plots) and the ``latest`` pointer."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "certification.schema.json"
LATEST = "latest"


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
    return names


def write_run(doc: dict[str, Any], run_dir: Path, junit: str | None) -> list[str]:
    """Writes the run folder; returns where the document breaks its schema (a suite bug:
    the document is still written, with ``schema_errors``)."""
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
        ("antman:run_id", doc["run_id"]),
    ]


def annotate_junit(path: Path, doc: dict[str, Any]) -> None:
    """Names every ``<testsuite>`` of the JUnit XML at ``path`` after the suite and adds the
    run's properties (``junit_properties``) to it; rewritten atomically."""
    import xml.etree.ElementTree as ET
    tree = ET.parse(path)
    root = tree.getroot()
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
            ET.SubElement(props, "property", {"name": name, "value": value})
    atomic_write(path, ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")


def point_latest(base: Path, run_dir: Path) -> None:
    """``base/latest`` -> ``run_dir`` (a relative symlink, replaced atomically)."""
    link = base / LATEST
    tmp = base / f".{LATEST}.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:  # no symlinks here: a pointer file instead
        tmp.unlink(missing_ok=True)
        if link.is_symlink() or link.is_dir():
            return
        atomic_write(link, run_dir.name + "\n")


RUN_DIR_NAME = re.compile(r"^\d{8}T\d{6}Z-.+-\d+$")


def prune(base: Path, keep: int) -> None:
    """Removes all but the newest ``keep`` run folders (by name) under ``base``."""
    runs = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink()
                  and RUN_DIR_NAME.match(p.name))
    for old in runs[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
