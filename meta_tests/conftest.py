"""The meta-tests' summary: the attribution precision of the broken forks
(meta_tests/test_broken_forks.py), gathered from every fork test, also across xdist workers."""

from __future__ import annotations

import json
from typing import Any

import pytest

_FOUND: list[dict[str, Any]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    from meta_tests.test_broken_forks import PRECISION_PROPERTY
    for key, value in getattr(report, "user_properties", None) or []:
        if key == PRECISION_PROPERTY:
            _FOUND.append(json.loads(value))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workerinput") or not _FOUND:
        return
    from meta_tests.test_broken_forks import precision_lines
    terminalreporter.section("broken forks: one bug, one clause", bold=True)
    for line in precision_lines(sorted(_FOUND, key=lambda f: f["fork"])):
        terminalreporter.write_line(line)
