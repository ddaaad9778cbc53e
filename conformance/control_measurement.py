"""Real-time measurements that rest on a control (SPEC.md section 7).

A black-box check that compares real-time figures with a control measurement (WORKER-10
compares throttled step periods with the unthrottled period ``B`` at perfControl 100, and
checks that perfControl 100 at the end gives ``B`` again) can only blame the implementation
when the control itself is sound. So such a check

- waits for a steady period before it takes the control (``steady``): windows are measured
  until two consecutive ones agree within ``STEADY_RATIO``, at most ``STEADY_WINDOWS``;
- retries the whole measurement when the control falls out of its band afterwards, at most
  ``CONTROL_ATTEMPTS`` times in all;
- and, when the control never settles or stays out of its band, raises
  ``InvalidMeasurement``: the test is ERROR "invalid measurement" with every figure taken,
  never FAIL of the implementation for the harness's or the machine's noise. ERROR on a
  must-pass clause still keeps the verdict from CERTIFIED.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

STEADY_RATIO = 1.25        # two windows agree when the larger is at most 1.25 x the smaller
STEADY_WINDOWS = 6         # windows tried before the control is declared unsteady
CONTROL_ATTEMPTS = 2       # measurements taken before a control out of band is invalid


class InvalidMeasurement(Exception):
    """The harness could not take a sound measurement; reported ERROR, not FAIL."""

    antman_outcome = "ERROR"


def agree(a: float, b: float, ratio: float = STEADY_RATIO) -> bool:
    return a > 0 and b > 0 and max(a, b) <= ratio * min(a, b)


def steady(measure: Callable[[], float], what: str, clause: str, *,
           windows: int = STEADY_WINDOWS, ratio: float = STEADY_RATIO) -> float:
    """The first window of ``measure()`` that agrees with the one before it.

    Raises ``InvalidMeasurement`` (naming ``what`` and tagged ``clause``) with every window's
    figure when ``windows`` windows pass without two consecutive ones agreeing.
    """
    seen = [measure()]
    while len(seen) < windows:
        seen.append(measure())
        if agree(seen[-2], seen[-1], ratio):
            return seen[-1]
    raise InvalidMeasurement(
        f"invalid measurement: {what} never settled: {len(seen)} windows gave "
        f"{', '.join(f'{v:.0f}' for v in seen)}, and no two consecutive ones agree within "
        f"x{ratio:g}; the machine is too noisy for this check [{clause}]")


def describe_attempts(attempts: Sequence[str]) -> str:
    return "; ".join(f"attempt {i + 1}: {a}" for i, a in enumerate(attempts))
