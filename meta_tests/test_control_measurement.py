"""A measurement that rests on a control waits for a steady period, retries a control out of
its band, and reports ERROR "invalid measurement" when it stays out: never FAIL of a correct
implementation for the machine's noise (conformance/control_measurement.py, WORKER-10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import control_measurement as cm
from conformance import spec

ROOT = spec.ROOT
THROTTLING = ROOT / "meta_tests" / "workers" / "throttling.py"
TEST = "conformance/test_worker_protocol.py::test_perf_control_throttles_the_step_period"


def certify_worker(tmp_path: Path, **machine: str) -> dict:
    """WORKER-10 against the throttling fake on a machine described by ``machine``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    env.update(machine)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", TEST, "-p", "no:cacheprovider", "-q", "-n", "0",
         "--worker-cmd", f"{sys.executable} {THROTTLING}", "--report-dir",
         str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300)
    found = sorted((tmp_path / "out").glob("*/certification.json"))
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(found[-1].read_text(encoding="utf-8"))
    (test,) = [t for t in doc["tests"] if t["nodeid"] == TEST]
    return test


def test_steady_waits_for_two_agreeing_windows_and_gives_up_with_the_figures() -> None:
    values = iter([300.0, 290.0])
    assert cm.steady(lambda: next(values), "x", "API-1") == 290.0
    values = iter([900.0, 300.0, 100.0, 101.0])
    assert cm.steady(lambda: next(values), "x", "API-1") == 101.0
    values = iter([100.0, 200.0, 400.0])
    with pytest.raises(cm.InvalidMeasurement) as info:
        cm.steady(lambda: next(values), "the period", "API-1", windows=3)
    assert info.value.antman_outcome == "ERROR"
    assert str(info.value).startswith("invalid measurement: the period never settled")
    assert "100, 200, 400" in str(info.value) and str(info.value).endswith("[API-1]")
    assert cm.agree(100, 125) and not cm.agree(100, 126) and not cm.agree(0, 0)


def test_a_worker_warming_up_is_measured_once_steady_and_passes(tmp_path: Path) -> None:
    # 3 warm-up steps, as WORKER-10 always took, would measure B on 3x slow steps.
    test = certify_worker(tmp_path, FAKE_WARMUP_STEPS="14", FAKE_WARMUP_FACTOR="3")
    assert test["outcome"] == "PASS", test["message"]


def test_a_control_that_stays_out_of_its_band_is_an_invalid_measurement(tmp_path: Path) -> None:
    test = certify_worker(tmp_path, FAKE_SLOWDOWN_AT_100="1.6")
    assert test["outcome"] == "ERROR", (test["outcome"], test["message"])
    message = test["failures"][0]["message"]
    assert "invalid measurement: the control P_100/B stayed outside" in message
    assert "attempt 1: B=" in message and "attempt 2: B=" in message
    assert test["clause_outcomes"] == {"WORKER-10": "ERROR"}


def test_a_worker_that_never_throttles_fails_even_when_its_control_drifts(
        tmp_path: Path) -> None:
    # The period ignores perfControl and the machine slows down at each return to 100: the
    # control stays out of its band, yet perfControl 50 and 25 are far below their bands
    # whether B or P_100 is the control, so the verdict is FAIL, not "invalid measurement".
    test = certify_worker(tmp_path, FAKE_IGNORES_PERF="1", FAKE_SLOWDOWN_AT_100="1.6")
    assert test["outcome"] == "FAIL", (test["outcome"], test["message"])
    message = test["failures"][0]["message"]
    assert "the implementation does not throttle" in message
    assert "yet against P_100 as the control too: perfControl=50: " in message
    assert "attempt 1: B=" in message
    assert test["clause_outcomes"] == {"WORKER-10": "FAIL"}


@pytest.mark.parametrize(("ratios", "wrong"), [
    # Each level is judged against B and against P_100; only a level outside on the same side
    # of its band both ways is wrong whatever the control.
    ({50: 1.0, 25: 1.1, 100: 1.6}, [50, 25]),       # never throttles, control drifted up
    ({50: 1.0, 25: 1.1, 100: 0.7}, [50, 25]),       # never throttles, control drifted down
    ({50: 2.0, 25: 4.0, 100: 1.6}, []),             # in band against B: the control is at fault
    ({50: 1.4, 25: 4.0, 100: 0.7}, []),             # low against B, in band against P_100
    ({50: 3.2, 25: 4.0, 100: 0.7}, [50]),           # high both ways (3.2, 4.57 > 3)
    ({50: 1.49, 25: 4.0, 100: 1.26}, [50]),         # just below 1.5 both ways
    ({50: 1.5, 25: 4.0, 100: 1.26}, []),            # at the band's edge against B
])
def test_a_level_is_wrong_whatever_the_control_only_when_outside_both_ways(
        ratios: dict[int, float], wrong: list[int]) -> None:
    from conformance.test_worker_protocol import throttle_bands, wrong_against_both_controls
    assert wrong_against_both_controls(ratios, throttle_bands()) == wrong
