"""What the meta-tests of stock TensorFlow's verdicts share: TensorFlow importable (a skip
here, a failure in the tox environment that certifies it), and the run folder a report
folder's ``latest`` names."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def require_tensorflow(tox_env: str, report_dir_env: str) -> None:
    """Skip without TensorFlow; fail instead where ``report_dir_env`` says the tox
    environment ``tox_env`` (which installs it) runs the test."""
    if importlib.util.find_spec("tensorflow") is not None:
        return
    message = (f"tensorflow is not importable by {sys.executable}; "
               f"`tox -e {tox_env}` installs it (extra 'tensorflow')")
    if os.environ.get(report_dir_env):
        pytest.fail(message)
    pytest.skip(message)


def latest_run_folder(report_dir: Path) -> Path:
    """The run folder ``report_dir/latest`` names (a link, or a file holding its name), else
    the newest holding a certification.json."""
    latest = report_dir / "latest"
    if latest.is_symlink() or latest.is_dir():
        return latest.resolve()
    if latest.is_file():
        return (report_dir / latest.read_text(encoding="utf-8").strip()).resolve()
    found = sorted(report_dir.glob("*/certification.json"), key=lambda p: p.stat().st_mtime)
    assert found, f"no certification.json under {report_dir}"
    return found[-1].parent
