"""``python -m reports diff OLD NEW``: changed clause outcomes, regressions first, exit 1 on a
regression (reports/diff.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conformance import spec
from meta_tests.test_reports import PASSED, _build, _data, _record
from reports import diff


def _doc(tmp_path: Path, outcomes: dict[str, tuple[str, str | None]]) -> dict:
    tests = [_record(f"t::{cid}", [cid], PASSED, outcome) for cid, outcome in outcomes.items()]
    return _build(_data(tmp_path, tests))


def _write(path: Path, doc: dict) -> Path:
    path.mkdir(parents=True)
    (path / "certification.json").write_text(json.dumps(doc))
    return path


def test_changes_are_listed_regressions_first_and_a_regression_fails(tmp_path: Path) -> None:
    old = _doc(tmp_path, {"API-1": PASSED, "API-2": ("FAIL", "x"), "API-5": ("FAIL", "y"),
                          "API-6": PASSED})
    new = _doc(tmp_path, {"API-1": ("FAIL", "z"), "API-2": PASSED, "API-5": ("ERROR", "e"),
                          "API-6": PASSED})
    found = diff.changes(old, new)
    assert [(c.clause, c.old, c.new, c.kind) for c in found] == [
        ("API-1", "PASS", "FAIL", "regression"), ("API-2", "FAIL", "PASS", "improvement"),
        ("API-5", "FAIL", "ERROR", "changed")]
    lines, status = diff.report(old, new, "old", "new")
    assert status == 1
    text = "\n".join(lines)
    assert text.index("regressions (1):") < text.index("improvements (1):") \
        < text.index("other changes (1):")
    assert "verdict: NOT CERTIFIED (unchanged)" in text
    assert "3 clause(s) changed; 1 regression(s)" in text
    # Run folders and files both work; the command's exit status is the verdict for CI.
    a, b = _write(tmp_path / "a", old), _write(tmp_path / "b", new)
    for args, code in (([a, b], 1), ([b, a], 1), ([a, a], 0), ([a / "certification.json", b], 1),
                       ([tmp_path / "missing", b], 2)):
        done = subprocess.run([sys.executable, "-m", "reports", "diff", *map(str, args)],
                              cwd=spec.ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == code, (args, done.stdout, done.stderr)
    assert "no clause outcome changed" in subprocess.run(
        [sys.executable, "-m", "reports", "diff", str(a), str(a)], cwd=spec.ROOT,
        capture_output=True, text=True, timeout=60).stdout


def test_lost_evidence_and_waived_failures_are_regressions(tmp_path: Path) -> None:
    old = _doc(tmp_path, {"API-1": PASSED, "API-2": PASSED})
    new = _doc(tmp_path, {"API-1": ("SKIPPED", "no GPU"), "API-2": PASSED})
    (change,) = diff.changes(old, new)
    assert (change.clause, change.old, change.new, change.kind) == (
        "API-1", "PASS", "NOT_RUN", "regression")
    assert diff.RANK["WAIVED"] > diff.RANK["PASS"]
