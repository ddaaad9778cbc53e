"""What a run has done so far, kept on disk, so that a run that never ends still reports.

A bug can hang a test where no time limit reaches it: a runtime thread that computes
``10 ** (10 ** 19)`` holds the interpreter lock in C, so neither pytest-timeout's signal nor
the run budget (reports/run_budget.py) ever runs again. The controller therefore keeps a
journal beside the report folder: the run's data without its tests (once), each test as it
starts, and each test report as it arrives (pickles appended to one file). A watchdog
process started with the run waits until the run budget, the per-test time limit and
``WATCHDOG_GRACE_S`` have passed; if the run has not ended by then, it sends SIGTERM, then
SIGKILL after the grace, and writes the certification report from the journal through the
ordinary writer (reports/writer.py): the test that was running is TIMEOUT ("did not end"),
the tests that never started are NOT_RUN, and the run is reported as stopped
(``invocation.stopped``, code ``run-budget``). A run that ends writes ``done`` into the
journal; the watchdog then exits, and the journal is removed.

``ANTMAN_WATCHDOG_GRACE_S`` overrides the grace (the suite's own tests use a short one).
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WATCHDOG_GRACE_S = 30.0
BASE = "base.pickle"
EVENTS = "events.pickle"
DONE = "done"


def grace_s() -> float:
    try:
        return max(0.0, float(os.environ.get("ANTMAN_WATCHDOG_GRACE_S", WATCHDOG_GRACE_S)))
    except ValueError:
        return WATCHDOG_GRACE_S


class Journal:
    """The controller's side: appends what happens; starts and stops the watchdog."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._events = open(folder / EVENTS, "ab")
        self._based = False
        self.watchdog: subprocess.Popen[bytes] | None = None

    @property
    def has_base(self) -> bool:
        return self._based

    def base(self, data: Any) -> None:
        """The run's data without its tests (written once, aside then renamed)."""
        if self._based:
            return
        tmp = self.folder / (BASE + ".tmp")
        tmp.write_bytes(pickle.dumps(data))
        os.replace(tmp, self.folder / BASE)
        self._based = True

    def _append(self, event: tuple[str, Any]) -> None:
        pickle.dump(event, self._events)
        self._events.flush()

    def started(self, nodeid: str) -> None:
        self._append(("start", nodeid))

    def record(self, rec: Any) -> None:
        self._append(("test", rec))

    def watch(self, deadline_s: float, run_dir: Path, base_dir: Path, budget: str) -> None:
        """Start the watchdog: acts when the run is alive ``deadline_s`` from now."""
        cmd = [sys.executable, "-m", "reports.journal", str(os.getpid()),
               str(time.time() + deadline_s), str(self.folder), str(run_dir), str(base_dir),
               budget]
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.watchdog = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def close(self) -> None:
        """The run ended: the watchdog stands down and the journal goes."""
        (self.folder / DONE).write_text("done\n")
        self._events.close()
        if self.watchdog is not None:
            self.watchdog.terminate()
            self.watchdog.wait()
            self.watchdog = None
        shutil.rmtree(self.folder, ignore_errors=True)


def load(folder: Path) -> tuple[Any, str | None]:
    """The run data of the journal, and the node ID of the test that had not finished."""
    data = pickle.loads((folder / BASE).read_bytes())
    running: str | None = None
    with open(folder / EVENTS, "rb") as f:
        while True:
            try:
                kind, value = pickle.load(f)
            except (EOFError, pickle.UnpicklingError):
                break
            if kind == "start":
                running = value
            elif kind == "test":
                data.tests[value.nodeid] = value
                if value.nodeid == running and len(value.phases) >= 3:
                    running = None
    return data, running


def report_from_journal(folder: Path, run_dir: Path, base_dir: Path, budget: str) -> Path:
    """Write the certification report of a run that never ended; returns its folder."""
    from reports import model, writer
    data, running = load(folder)
    hung = ""
    if running is not None:
        rec = data.tests.setdefault(running, model.TestRecord(running))
        rec.phases.append(("TIMEOUT", "the test did not end: no time limit could stop it, "
                                      "and the run was stopped from outside"))
        rec.whens.append("call")
        hung = f"; {running} did not end"
    data.stopped = {"code": "run-budget",
                    "message": f"the run did not end within its budget ({budget}){hung}: the "
                               f"process was stopped from outside"}
    data.exitstatus = 2
    finished = time.time()
    data.invocation = {**data.invocation,
                       "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                    time.gmtime(finished))}
    run_dir = writer.free_run_dir(run_dir)
    doc = model.build(data)
    with writer.staged(run_dir) as folder:      # complete or not at all
        writer.write_run(doc, folder, junit=None)
    writer.point_latest(base_dir, run_dir, writer.pointer_for(doc))
    return run_dir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                                  # a child of ours that ended but was not reaped
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def watch(pid: int, deadline: float, folder: Path, run_dir: Path, base_dir: Path,
          budget: str) -> int:
    """The watchdog's loop (see the module docstring)."""
    while time.time() < deadline:
        if (folder / DONE).exists() or not _alive(pid):
            return 0
        time.sleep(0.5)
    if (folder / DONE).exists() or not _alive(pid):
        return 0
    grace = grace_s()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        limit = time.time() + max(grace, 1.0)
        while time.time() < limit and _alive(pid) and not (folder / DONE).exists():
            time.sleep(0.2)
        if not _alive(pid) or (folder / DONE).exists():
            break
    if (folder / DONE).exists() or not (folder / BASE).exists():
        return 0
    report_from_journal(folder, run_dir, base_dir, budget)
    shutil.rmtree(folder, ignore_errors=True)
    print(f"antman watchdog: the run (pid {pid}) did not end; report written to {run_dir}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(watch(int(args[0]), float(args[1]), Path(args[2]), Path(args[3]), Path(args[4]),
                   args[5]))
