"""What ``--rerun``, ``--lf`` and ``python -m reports rerun/render/validate`` take from a
certification report of this checkout: the JSON document, read leniently (a JSON object; no
schema check, so a report of an earlier run is still rerun), and the tests it did not pass.

The file is read by ``reports.untrusted.read_regular`` (symbolic links followed: ``latest``
and the paths a developer types); every problem is one ``ReportError`` naming the path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.untrusted import MAX_REPORT_BYTES, ReportError, read_regular, report_file


def read_text(path: Path, limit: int = MAX_REPORT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes)."""
    raw = read_regular(path, limit, follow_symlinks=True)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def read_json(path: Path, limit: int = MAX_REPORT_BYTES) -> Any:
    text = read_text(path, limit)
    try:
        return json.loads(text)
    except RecursionError:
        raise ReportError(f"{path} is nested too deeply to be a report") from None
    except ValueError as exc:
        raise ReportError(f"{path} is not JSON: {exc}") from None


def read_report(path: Path, limit: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """The certification document at ``path`` (a file or a run folder): a JSON object."""
    file = report_file(path)
    doc = read_json(file, limit)
    if not isinstance(doc, dict):
        raise ReportError(f"{file} is not a certification report (a JSON "
                          f"{type(doc).__name__}, not an object)")
    return doc


#: Test outcomes of a report that ``--rerun`` and ``--lf`` run again (conformance/selection.py):
#: everything that did not pass, except what the same setup skips again.
NOT_PASSED = frozenset({"FAIL", "ERROR", "TIMEOUT", "CRASH", "WAIVED", "NOT_RUN"})


def tests_not_passed(doc: dict[str, Any]) -> list[str]:
    """Node IDs of the tests of a certification document that did not pass (``NOT_PASSED``);
    ``ValueError`` when it has no list of tests."""
    tests = doc.get("tests")
    if not isinstance(tests, list):
        raise ValueError("it has no list of tests")
    return [t["nodeid"] for t in tests if isinstance(t, dict)
            and isinstance(t.get("nodeid"), str) and t.get("outcome") in NOT_PASSED]
