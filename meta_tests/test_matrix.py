"""``python -m reports matrix``: a clause-by-run matrix of certification reports
(reports/matrix.py), with hostile report text escaped and unusable reports refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance import spec
from reports import matrix, untrusted

PUBLISHED = spec.ROOT / "reports" / "published"
H100 = PUBLISHED / "h100-2026-11-24" / "certification"
HOSTILE = '<script>alert(1)</script> | "quoted" ](javascript:alert(2)) `tick` *bold*'


def _h100() -> dict[str, Any]:
    return json.loads((H100 / "certification.json").read_text(encoding="utf-8"))


def hostile_run(folder: Path) -> Path:
    """A copy of the published run whose texts are hostile and one of whose clauses failed."""
    doc = _h100()
    doc["runtime"]["name"] = HOSTILE
    doc["runtime"]["version"] = "9</th><td>"
    clause = next(c for c in doc["clauses"] if c["id"] == "CLK-3")
    clause["title"] = HOSTILE
    clause["outcome"] = "FAIL"
    clause["failures"] = [{"nodeid": "conformance/test_clock.py::test_x", "outcome": "FAIL",
                           "message": "[CLK-3] " + HOSTILE + "\nsecond line", "tagged": True}]
    doc["verdict"].update(status="NOT CERTIFIED", reasons=[
        {"code": "mustpass-fail", "message": HOSTILE, "clauses": ["CLK-3"]}])
    folder.mkdir(parents=True)
    (folder / "certification.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "certification.html").write_text("<html></html>", encoding="utf-8")
    return folder


def _pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_a_column_per_run_a_row_per_clause_and_links_to_failures(tmp_path: Path) -> None:
    run = hostile_run(tmp_path / "fork" / "run")
    out = tmp_path / "site" / "matrix"
    assert matrix.main([H100, run], out) == 0
    page = (out / "matrix.html").read_text(encoding="utf-8")
    md = (out / "matrix.md").read_text(encoding="utf-8")
    # Headers: verdict, implementation, profile, device, date, suite commit.
    for text in ("CERTIFIED", "NOT CERTIFIED", "antman-reference 0.1.0", "in-process + black-box",
                 "NVIDIA H100 80GB HBM3", "2026-11-24", "36f16aea4333", "173/173"):
        assert text in page and text in md, text
    # Rows grouped by area, in SPEC.md order, must-pass marked.
    areas = re.findall(r'<tr class="area"><th colspan="3">([A-Z0-9]+)</th>', page)
    assert areas == list(dict.fromkeys(c["area"] for c in _h100()["clauses"]))
    assert areas[0] == "API" and "## CLK" in md and "| API-1 (must-pass) |" in md and "**PASS**" in md
    # The failed cell links to the clause in that run's report and says why.
    assert 'href="../../fork/run/certification.html#CLK-3"' in page
    assert "(../../fork/run/certification.html#CLK-3 " in md
    # Hostile text is inert: no markup from the report, no broken table row.
    assert "<script>" not in page and "9</th><td>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "9&lt;/th&gt;&lt;td&gt;" in page
    assert not re.search(r"(?<!\\)\]\(javascript:", md)
    assert not re.search(r"(?<!\\)<script", md)
    table_lines = [line for line in md.splitlines() if line.startswith("| ")]
    header = next(line for line in table_lines if line.startswith("| clause |"))
    for line in table_lines:
        if line.startswith("| run |") or line.startswith("| 1 |") or line.startswith("| 2 |"):
            continue
        assert _pipes(line) == _pipes(header), line
    assert "\nsecond line" not in md
    # Written aside then renamed: only the two pages.
    assert sorted(p.name for p in out.iterdir()) == ["matrix.html", "matrix.md"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reports", "matrix", *args], cwd=spec.ROOT,
                          capture_output=True, text=True, timeout=120)


def test_unusable_reports_are_one_line_errors(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    bad = tmp_path / "bad"
    bad.mkdir()
    cases = {
        "not JSON": b"{",
        "breaks the report schema": json.dumps({"schema_version": "1.3"}).encode(),
        "not a certification report": b"[1, 2]",
    }
    for why, raw in cases.items():
        (bad / "certification.json").write_bytes(raw)
        done = _cli(str(bad), "-o", str(out))
        assert done.returncode == 2 and why in done.stderr, done.stderr
        assert done.stderr.startswith("matrix: ") and done.stderr.count("\n") == 1
    (bad / "certification.json").unlink()
    os.symlink(H100 / "certification.json", bad / "certification.json")
    done = _cli(str(bad / "certification.json"), "-o", str(out))
    assert done.returncode == 2 and "a symbolic link" in done.stderr
    done = _cli(str(tmp_path / "missing"), "-o", str(out))
    assert done.returncode == 2 and "no such file" in done.stderr
    assert not (out / "matrix.html").exists()
    # Size-bounded whatever the file is.
    monkeypatch.setattr(untrusted, "MAX_REPORT_BYTES", 1000)
    assert matrix.main([H100], out) == 2
    assert not (out / "matrix.html").exists()


def test_a_folder_is_searched_and_runs_without_a_verdict_are_left_out(tmp_path: Path) -> None:
    shutil.copytree(PUBLISHED / "h100-2026-11-24", tmp_path / "h100")
    columns, notes = matrix.load_columns([tmp_path], tmp_path / "out")
    assert [c.file.parent.name for c in columns] == ["certification"]
    assert notes == [f"left out ../h100/{name}/certification.json: NO VERDICT (it ran no "
                     "conformance test)" for name in ("benchmarks", "throttle")]


def test_the_published_matrix_is_up_to_date(tmp_path: Path) -> None:
    """``tox -e matrix`` rebuilds reports/published/matrix/ from the published runs."""
    out = PUBLISHED / "matrix"
    columns, notes = matrix.load_columns([PUBLISHED], out)
    assert (out / "matrix.md").read_text(encoding="utf-8") == matrix.render_md(columns, notes)
    assert (out / "matrix.html").read_text(encoding="utf-8") == matrix.render_html(columns, notes)
