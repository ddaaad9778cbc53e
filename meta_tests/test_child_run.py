"""The watchdog of a certification run in a child process (reports/child_run.py): a child
that exits is read whole; one that lingers after its report, or runs too long, is killed and
reaped, and says why."""

from __future__ import annotations

import sys
import time
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


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_stop_all_kills_the_running_child_and_starts_no_other(tmp_path: Path) -> None:
    import threading
    from reports import child_run
    done: list = []
    log = (tmp_path / "log").open("w+", encoding="utf-8")

    def run() -> None:
        done.append(run_certification([sys.executable, "-c", "import time; time.sleep(60)"],
                                      cwd=tmp_path, env={}, report_dir=tmp_path, log=log,
                                      timeout_s=60, grace_s=0.5))

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not child_run._live and time.monotonic() < deadline:
            time.sleep(0.01)
        (proc,) = child_run._live
        child_run.stop_all()
        thread.join(30)
        assert not thread.is_alive() and done[0].returncode < 0 and not _alive(proc.pid)
        with pytest.raises(child_run.ChildRunStopped):
            run_certification([sys.executable, "-c", "pass"], cwd=tmp_path, env={},
                              report_dir=tmp_path, log=log, timeout_s=5, grace_s=0.5)
    finally:
        child_run._stopping.clear()       # this process goes on running children
        log.close()


def test_the_pinning_tool_stopped_by_sigterm_leaves_no_child(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    from conformance import spec
    from meta_tests.child_env import python_path
    env = {**os.environ, "PYTHONPATH": python_path(spec.ROOT)}
    tool = subprocess.Popen([sys.executable, "-m", "adapters.antman_1_15.pinning", "--only",
                             "D-REG-1", "--jobs", "1", "--keep", str(tmp_path / "keep")],
                            cwd=spec.ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _children(tool.pid) and time.monotonic() < deadline and tool.poll() is None:
            time.sleep(0.05)
        children = _children(tool.pid)
        assert children, "the pinning tool started no certification run within 60 s"
        tool.send_signal(signal.SIGTERM)
        out, err = tool.communicate(timeout=60)
        assert tool.returncode == 130 and "stopped" in err, (tool.returncode, err[-2000:])
        assert not [c for c in children if _alive(c)], "a pytest child outlived the tool"
        assert not (spec.ROOT / "reports" / "antman_deviations.json.tmp").exists()
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
