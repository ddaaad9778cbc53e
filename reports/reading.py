"""Reading the files the report tools are handed: regular files of bounded size only.

A path on a command line may name anything: a FIFO nobody writes (an ``open`` that never
returns), ``/dev/zero`` (a read that never ends), a directory, a file of gigabytes, JSON
nested deeper than the parser's recursion. ``read_bytes`` opens without blocking, takes a
regular file only and reads at most ``limit`` bytes; ``read_json`` adds the decoding; every
problem is one ``ReportInputError`` whose message is a single line naming the path.
Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

#: The largest report read: a certification.json of the whole suite is well under 10 MiB.
MAX_REPORT_BYTES = 64 << 20
REPORT_FILE = "certification.json"


class ReportInputError(ValueError):
    """A file handed to a report tool cannot be read as what it should be (one line)."""


def report_file(path: Path) -> Path:
    """The ``certification.json`` of ``path``: the file itself, or the one in a run folder
    (``latest`` and its siblings too)."""
    return path / REPORT_FILE if path.is_dir() else path


def read_bytes(path: Path, limit: int = MAX_REPORT_BYTES) -> bytes:
    """The content of the regular file ``path`` (symbolic links followed), at most ``limit``
    bytes; anything else is a ``ReportInputError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ReportInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise ReportInputError(f"{path} is a folder without {REPORT_FILE}")
        if not stat.S_ISREG(st.st_mode):
            raise ReportInputError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise ReportInputError(f"{path} is {st.st_size} bytes, more than the {limit} "
                                   f"a report may have")
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise ReportInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:                 # it grew while it was read
        raise ReportInputError(f"{path} is more than the {limit} bytes a report may have")
    return data


def read_text(path: Path, limit: int = MAX_REPORT_BYTES) -> str:
    try:
        return read_bytes(path, limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportInputError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def read_json(path: Path, limit: int = MAX_REPORT_BYTES) -> Any:
    text = read_text(path, limit)
    try:
        return json.loads(text)
    except RecursionError:
        raise ReportInputError(f"{path} is nested too deeply to be a report") from None
    except ValueError as exc:
        raise ReportInputError(f"{path} is not JSON: {exc}") from None


def read_report(path: Path, limit: int = MAX_REPORT_BYTES) -> dict[str, Any]:
    """The certification document at ``path`` (a file or a run folder): a JSON object."""
    file = report_file(path)
    doc = read_json(file, limit)
    if not isinstance(doc, dict):
        raise ReportInputError(f"{file} is not a certification report (a JSON "
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
