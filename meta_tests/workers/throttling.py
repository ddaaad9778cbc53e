"""Fake worker that throttles as perfControl asks, on a machine that can be made noisy.

Each step computes for ``ANTMAN_WORKER_STEP_MS`` (a sleep) times the machine's slowness,
then sleeps so that the period is ``compute x 100 / perfControl`` (read from
GPU_CONFIG_FILE at each step boundary), as AntMan's DoSleepOrSuspend does. The machine:

- ``FAKE_WARMUP_STEPS`` / ``FAKE_WARMUP_FACTOR``: the first steps are that much slower
  (a worker warming up);
- ``FAKE_SLOWDOWN_AT_100``: the machine gets that much slower each time perfControl returns
  to 100 from a lower value (noise that moves the unthrottled period during the
  measurement);
- ``FAKE_IGNORES_PERF``: ``1`` makes the worker a wrong one that reads perfControl but never
  throttles (stock TensorFlow's behaviour).

Unless it ignores perfControl, the worker is correct: a suite that blames it is wrong.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

WARMUP_STEPS = int(os.environ.get("FAKE_WARMUP_STEPS", "0"))
WARMUP_FACTOR = float(os.environ.get("FAKE_WARMUP_FACTOR", "1"))
SLOWDOWN_AT_100 = float(os.environ.get("FAKE_SLOWDOWN_AT_100", "1"))
IGNORES_PERF = os.environ.get("FAKE_IGNORES_PERF") == "1"


def perf_control() -> int:
    try:
        with open(os.environ["GPU_CONFIG_FILE"], encoding="utf-8") as f:
            value = json.load(f).get("perfControl", 100)
    except (OSError, ValueError, AttributeError):
        return 100
    return value if isinstance(value, int) and 1 <= value <= 100 else 100


def main() -> None:
    stop = _fake.stop_event()
    _fake.hello()
    slowness, last_perf, k = 1.0, 100, 0
    while not stop.is_set():
        perf = perf_control()
        if perf == 100 and last_perf < 100:
            slowness *= SLOWDOWN_AT_100
        last_perf = perf
        start = time.monotonic()
        compute = _fake.STEP_S * slowness * (WARMUP_FACTOR if k < WARMUP_STEPS else 1.0)
        time.sleep(compute if IGNORES_PERF else compute * 100 / perf)
        _fake.emit(_fake.step_record(k, int((time.monotonic() - start) * 1e6)))
        k += 1
    sys.stdout.flush()
    os._exit(0)


main()
