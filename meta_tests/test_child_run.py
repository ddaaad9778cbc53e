"""The watchdog of a certification run in a child process (reports/child_run.py): a child
that exits is read whole; one that lingers after its report, or runs too long, is killed and
reaped, and says why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reports.child_run import report_files, run_certification

WRITE_REPORT = ("import pathlib,sys; d=pathlib.Path(sys.argv[1])/'run-1'; d.mkdir(); "
                "(d/'certification.json').write_text('{}'); print('wrote', flush=True)")


@pytest.mark.parametrize("then, killed", [
    ("", None),
    ("; import time; time.sleep(60)", "did not exit after its report"),
])
def test_a_child_after_its_report(tmp_path: Path, then: str, killed: str | None) -> None:
    log = (tmp_path / "log").open("w+", encoding="utf-8")
    with log:
        child = run_certification([sys.executable, "-c", WRITE_REPORT + then, str(tmp_path)],
                                  cwd=tmp_path, env={}, report_dir=tmp_path, log=log,
                                  timeout_s=30, grace_s=0.5)
    assert child.killed == killed and "wrote" in child.output
    assert (child.returncode == 0) if killed is None else (child.returncode < 0)
    assert child.wall_s < 30 and len(report_files(tmp_path)) == 1


def test_a_child_that_never_reports_is_killed_at_its_bound(tmp_path: Path) -> None:
    (tmp_path / "latest").symlink_to(tmp_path)          # the link is no report folder
    log = (tmp_path / "log").open("w+", encoding="utf-8")
    with log:
        child = run_certification([sys.executable, "-c", "import time; time.sleep(60)"],
                                  cwd=tmp_path, env={}, report_dir=tmp_path, log=log,
                                  timeout_s=1, grace_s=0.5)
    assert (child.killed, child.returncode < 0, report_files(tmp_path)) == (
        "ran too long", True, [])
