"""SESS-9: Ctrl-C in ``session.run`` stops the step, not only the wait for it.

``fixtures.nemesis.interrupt_mid_step`` runs, in a child process on the runtime under test,
a step whose op computes for 20 s (simulated compute time on the real clock, EXEC-12) on
the main thread, and sends SIGINT 0.2 s into it, as Ctrl-C does. Bounds are real time, with
``TOLERANCE_S`` added for a loaded machine: the op it must not wait for lasts 20 s.

An interrupt that comes while the step is set up, before it starts, is raised in-process
instead, at a point of the set-up the test can name: the RM action's read of ``E`` (OPM-1).
"""

from __future__ import annotations

import threading

import pytest

from conformance.control_helpers import perf_in_force
from conformance.execution_helpers import GPU, Log, py_func, sim_runtime
from conformance.preconditions import relies_on
from fixtures import nemesis

pytestmark = pytest.mark.capability("executor")

OP_US = 20_000_000
CLOSE_BOUND_S = 2.0          # SESS-9
TOLERANCE_S = 3.0


@pytest.mark.clause("SESS-9")
def test_ctrl_c_cancels_the_step(rt) -> None:
    relies_on("EXEC-12")        # the step's op computes on the clock, cancelled on abort
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


def interrupting_resource_management(rt, clock, registry):
    """A GPUResourceManagement whose ``get_estimated_idle_time()`` raises ``armed`` once, in
    the thread ``caller``: a Ctrl-C that comes while that thread sets a step up (OPM-1)."""

    class InterruptedRead(rt.GPUResourceManagement):
        armed: BaseException | None = None
        caller: int | None = None

        def get_estimated_idle_time(self) -> int:
            if self.armed is not None and threading.get_ident() == self.caller:
                exc, self.armed = self.armed, None
                raise exc
            return super().get_estimated_idle_time()

    return InterruptedRead(None, clock=clock, registry=registry)


@pytest.mark.clause("SESS-9")
@pytest.mark.capability("resource_management", "gpu_op_manager", "virtual_clock")
def test_ctrl_c_before_the_step_starts_is_raised_unchanged(rt, auto_clock) -> None:
    relies_on("OPM-1")          # each step reads E of the RM action while it is set up
    with sim_runtime(rt, clock=auto_clock) as c:
        rm = interrupting_resource_management(rt, auto_clock, c.registry)
        try:
            log = Log()
            g = rt.Graph()
            g.add_node("g", "PyFunc", device=GPU, func=py_func(log, "kernel"))
            rm.parse_manage_info_from_json('{"perfControl": 50}')
            perf_in_force(rm, 50)
            rm.set_estimated_idle_time(1000)
            s = c.new_session(g)
            ctrl_c = KeyboardInterrupt("Ctrl-C while the step is set up")
            rm.caller, rm.armed = threading.get_ident(), ctrl_c
            raised: BaseException | None = None
            try:
                s.run(["g"])
            except BaseException as exc:  # noqa: BLE001 - the KeyboardInterrupt is the subject
                raised = exc
            if rm.armed is not None:
                pytest.skip("the runtime reads E off the thread that calls run: no exception "
                            "of that thread comes while the step is set up")
            assert raised is ctrl_c, (
                f"a KeyboardInterrupt raised in the calling thread while the step was set up "
                f"(in the RM action's read of E): run "
                f"{'returned' if raised is None else 'raised ' + repr(raised)}, expected that "
                f"KeyboardInterrupt unchanged [SESS-9]")
            assert log.snapshot() == [], (
                f"after an interrupt before the step started, its node ran: {log.snapshot()} "
                f"[SESS-9]")
            s.close()
        finally:
            rm.close()
