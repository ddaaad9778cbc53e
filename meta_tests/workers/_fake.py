"""Shared loop of the fake workers: a plausible protocol speaker with one defect each.

The fakes implement none of AntMan's behaviour (their steps are sleeps); they exist to
prove that the harness reports a hang, a crash or garbage as such and always completes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time



def knob(name: str, default, parse, valid):
    """An ANTMAN_WORKER_* knob; an invalid value falls back to ``default`` with one line on
    standard error (WORKER-3), so that a fake fails only by its own defect."""
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = parse(text)
        if valid(value):
            return value
    except ValueError:
        pass
    sys.stderr.write(f"fake worker: invalid {name}={text!r}, using {default}\n")
    sys.stderr.flush()
    return default


#: WORKER-3's defaults; the hello record states the knobs in effect.
STEP_MS = knob("ANTMAN_WORKER_STEP_MS", 50.0, float,
               lambda v: math.isfinite(v) and 0 < v <= 3_600_000)   # an hour at most
STEP_S = STEP_MS / 1000
SEED = knob("ANTMAN_WORKER_SEED", 0, int, lambda v: v >= 0)   # stated, unused: steps are sleeps
MAX_STEPS = knob("ANTMAN_WORKER_MAX_STEPS", 0, int, lambda v: v >= 0)
# stated in the hello record (the fakes that read a config read it once a step)
POLL_INTERVAL_S = knob("ANTMAN_WORKER_POLL_INTERVAL_S", 0.1, float,
                       lambda v: math.isfinite(v) and 0 < v <= 60)
BUS_ID = "3b:00.0"
LIMIT = 1 << 30


def now_us() -> int:
    return time.monotonic_ns() // 1000


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def hello() -> None:
    emit({"type": "hello", "protocol": 1,
          "runtime": {"name": "fake-worker", "version": "0"}, "spec_version": "2026.11",
          "pid": os.getpid(), "t_us": now_us(), "poll_interval_s": POLL_INTERVAL_S,
          "devices": [{"name": "/device:GPU:0", "pci_bus_id": BUS_ID, "memory_limit": LIMIT}],
          "workload": {"model": "sleep", "step_ms": STEP_MS, "max_steps": MAX_STEPS,
                       "seed": SEED}})


def step_record(k: int, duration_us: int) -> dict:
    return {"type": "step", "step": k, "t_us": now_us(), "duration_us": duration_us,
            "loss": 2.0 * math.exp(-k / 50), "device_bytes_in_use": 4096,
            "host_bytes_in_use": 0, "device_limit": LIMIT}


def stop_event() -> threading.Event:
    """Set on stdin EOF or SIGTERM (WORKER-4)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin() -> None:
        # os.read on the raw descriptor: a daemon thread blocked in a buffered read would
        # abort the interpreter at exit.
        while os.read(0, 4096):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True, name="fake-stdin").start()
    return stop


def config_mtime() -> int | None:
    try:
        return os.stat(os.environ["GPU_CONFIG_FILE"]).st_mtime_ns
    except (KeyError, OSError):
        return None


#: A file whose presence makes the fake stop for DESCHEDULED_S right after a config check
#: that saw no change, once (it removes the file first): a loaded machine's scheduler, made
#: deterministic for meta_tests/test_worker_read_lag.py.
DESCHEDULE_MARKER = os.environ.get("FAKE_DESCHEDULE_MARKER", "")
DESCHEDULED_S = 1.5


def descheduled_once() -> None:
    if DESCHEDULE_MARKER:
        try:
            os.unlink(DESCHEDULE_MARKER)
        except OSError:
            return
        time.sleep(DESCHEDULED_S)


def run(*, defect_at_step: int | None = None, defect=None, on_config_change=None,
        mangle=None) -> None:
    """Hello, then steps until stopped; ``defect`` runs before step ``defect_at_step``."""
    stop = stop_event()
    hello()
    max_steps = MAX_STEPS
    seen_config = config_mtime()
    k = 0
    while not stop.is_set() and (max_steps == 0 or k < max_steps):
        if defect is not None and k == defect_at_step:
            defect()
        # The step starts before its config check, as a runtime's step includes the
        # check: a step that starts after a write has seen it, however long the fake is
        # descheduled between the two (WORKER-5).
        start = time.monotonic()
        if on_config_change is not None and config_mtime() != seen_config:
            on_config_change()
        descheduled_once()
        time.sleep(STEP_S)
        rec = step_record(k, int((time.monotonic() - start) * 1e6))
        emit(mangle(rec) if mangle is not None else rec)
        k += 1
    sys.stdout.flush()
    os._exit(0)


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


#: Marks every process a fake starts besides itself, so that a test can look for survivors
#: in the process table (``FAKE_WORKER_TAG`` from the environment).
TAG = os.environ.get("FAKE_WORKER_TAG", "antman-fake-descendant")

_SLEEPER = "import sys, time; time.sleep(float(sys.argv[1]))"


def spawn_descendant(*, new_session: bool, hold_stdout: bool, double_fork: bool = False,
                     seconds: float = 600.0) -> None:
    """Start a process that sleeps ``seconds`` with ``TAG`` in its command line: in a new
    session or not, holding the worker's standard output or not, and, with ``double_fork``,
    as a daemon whose parent has exited (it is reparented away from the worker)."""
    import subprocess
    argv = [sys.executable, "-c", _SLEEPER, str(seconds), TAG]
    stdout = None if hold_stdout else subprocess.DEVNULL
    if not double_fork:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout,
                         stderr=subprocess.DEVNULL, start_new_session=new_session)
        return
    pid = os.fork()
    if pid == 0:                                   # the intermediate process
        try:
            os.setsid()
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout,
                             stderr=subprocess.DEVNULL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
