"""SESS-9: Ctrl-C in ``session.run`` stops the step, not only the wait for it.

``fixtures.nemesis.interrupt_mid_step`` runs, in a child process on the runtime under test,
a step whose op computes for 20 s (simulated compute time on the real clock, EXEC-12) on
the main thread, and sends SIGINT 0.2 s into it, as Ctrl-C does. Bounds are real time, with
``TOLERANCE_S`` added for a loaded machine: the op it must not wait for lasts 20 s.
"""

from __future__ import annotations

import pytest

from fixtures import nemesis

pytestmark = pytest.mark.capability("executor")

OP_US = 20_000_000
CLOSE_BOUND_S = 2.0          # SESS-9
TOLERANCE_S = 3.0


@pytest.mark.clause("SESS-9")
def test_ctrl_c_cancels_the_step(rt) -> None:
    got = nemesis.interrupt_mid_step(rt.__name__, OP_US)
    assert got["raised"] == "KeyboardInterrupt", (
        f"SIGINT during session.run: run {'returned' if got['raised'] is None else 'raised ' + got['raised']}"
        f" after {got['run_s']:.2f} s, expected KeyboardInterrupt [SESS-9]")
    assert got["raise_after_signal_s"] <= CLOSE_BOUND_S + TOLERANCE_S, (
        f"run raised KeyboardInterrupt {got['raise_after_signal_s']:.2f} s after SIGINT, "
        f"waiting for the step's op [SESS-9]")
    assert got["close_s"] <= CLOSE_BOUND_S + TOLERANCE_S, (
        f"after Ctrl-C, session.close() took {got['close_s']:.2f} s: it waited for the "
        f"interrupted step's {OP_US / 1e6:g} s op, which was not cancelled [SESS-9]")
    assert got["runtime_close_s"] <= CLOSE_BOUND_S + TOLERANCE_S, (
        f"after Ctrl-C, RuntimeContext.close() took {got['runtime_close_s']:.2f} s [SESS-9]")


OTHER_OP_US = 10_000_000     # what a fork that does not cancel waits for


@pytest.mark.clause("SESS-9")
def test_any_exception_in_the_waiting_thread_cancels_the_step(rt) -> None:
    """Not only KeyboardInterrupt: an Exception raised in the thread waiting in run (here by
    a SIGUSR1 handler) cancels the step too, so that close() does not wait for its op."""
    got = nemesis.interrupt_mid_step(rt.__name__, OTHER_OP_US, "DeliveredError")
    assert "DeliveredError" in str(got["raised"]), (
        f"an exception delivered to the waiting thread: run raised {got['raised']!r}, expected "
        f"that exception re-raised [SESS-9]")
    assert got["close_s"] <= CLOSE_BOUND_S + TOLERANCE_S, (
        f"after an exception delivered to the waiting thread, session.close() took "
        f"{got['close_s']:.2f} s: it waited for the step's {OTHER_OP_US / 1e6:g} s op, which "
        f"was cancelled only for KeyboardInterrupt [SESS-9]")
