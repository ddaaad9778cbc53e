"""A certification run in a child process, under a watchdog.

A deadlocked runtime can leave a non-daemon thread blocked, so that pytest never exits after
writing its report; a hang no signal inside the process reaches never writes one. So the
child is killed when it outlives ``timeout_s``, or ``grace_s`` after its report appeared;
one killed by a signal it did not get from here (its own watchdog's) may still be writing its
report: that is waited for up to ``report_wait_s``. The child's output goes to ``log`` (an
open text file), read back whole. Used by the tools that certify many runtimes in turn (the
AntMan pinning tool, the broken-fork meta-tests). A tool stopped by a signal calls
``stop_all()`` from its handler: every child still running is killed (and reaped by its
call), and no other is started, so none outlives the tool. ``interrupted_by_signals(stop)``
is that handler for a tool's main: SIGTERM and Ctrl-C call ``stop`` and raise
KeyboardInterrupt.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = ["ChildRun", "ChildRunStopped", "interrupted_by_signals", "report_files",
           "run_certification", "stop_all"]

_live: set[subprocess.Popen[str]] = set()
_live_lock = threading.Lock()
_stopping = threading.Event()


class ChildRunStopped(RuntimeError):
    """``run_certification`` was called after ``stop_all()``."""


def stop_all() -> None:
    """Kill every child a ``run_certification`` of this process has running, and start no
    other (for a tool's SIGTERM or Ctrl-C handler; each call still reaps its own child)."""
    _stopping.set()
    with _live_lock:
        for proc in _live:
            proc.kill()


@contextmanager
def interrupted_by_signals(stop: Callable[[], None] = stop_all) -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM and SIGINT call ``stop`` (which
    ends the tool's children) and raise KeyboardInterrupt, so that the tool's ``finally``
    clauses run and it exits as stopped; the previous handlers come back afterwards."""
    def handler(signum: int, frame: object) -> None:
        stop()
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@dataclass
class ChildRun:
    returncode: int | None
    wall_s: float
    output: str
    killed: str | None = None          # why the watchdog killed it, or None


def report_files(report_dir: Path) -> list[Path]:
    """The run folders' certification.json (not through the ``latest`` link)."""
    return sorted(p for p in report_dir.glob("*/certification.json")
                  if not p.parent.is_symlink())


def run_certification(cmd: list[str], *, cwd: Path, env: dict[str, str], report_dir: Path,
                      log: IO[str], timeout_s: float, grace_s: float,
                      report_wait_s: float = 0.0) -> ChildRun:
    """Run ``cmd`` (a pytest run writing its report under ``report_dir``) to its end or its
    kill; the child is always reaped."""
    start = time.monotonic()
    reported_at: float | None = None
    killed = None
    if _stopping.is_set():
        raise ChildRunStopped("the tool is stopping: no certification run is started")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            text=True)
    with _live_lock:
        _live.add(proc)
        if _stopping.is_set():          # stop_all() came between the check and the add
            proc.kill()
    try:
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if reported_at is None and report_files(report_dir):
                reported_at = now
            if now - start > timeout_s or (reported_at is not None
                                           and now - reported_at > grace_s):
                killed = ("did not exit after its report" if reported_at is not None
                          else "ran too long")
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        with _live_lock:
            _live.discard(proc)
    if proc.returncode < 0 and killed is None:
        waited_until = time.monotonic() + report_wait_s
        while not report_files(report_dir) and time.monotonic() < waited_until:
            time.sleep(0.5)
    log.seek(0)
    return ChildRun(proc.returncode, time.monotonic() - start, log.read(), killed)
