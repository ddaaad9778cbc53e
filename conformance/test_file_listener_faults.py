"""FL clauses under attack: the listener never blocks on a file and always shuts down.

The nemeses of ``fixtures/nemesis.py`` swap a FIFO in between the check of the config path
and its read, point it at a file whose read waits, block a handler, and ask for an absurd
poll interval. Checks run on the manual virtual clock where they can; the bounds of FL-12
are real time, checked with ``TOLERANCE_S`` added for a loaded machine (a join with a
timeout overshoots by scheduling delays only). A runtime that does block is released by the
nemesis on exit, so that the run goes on.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from conformance.checks import names_identifier
from conformance.control_helpers import (MiB, control_env, expect_value_error,  # noqa: F401
                                         joined, listener, run_in_thread, runtime_records,
                                         vclock, wait_for_poller, write_text)
from conformance.execution_helpers import wait_until
from conformance.preconditions import precondition_holds
from fixtures import nemesis
from fixtures.threads import antman_threads, no_thread_leak  # noqa: F401
from fixtures.virtual_clock import SettleTimeout

pytestmark = pytest.mark.capability("file_listener", "virtual_clock")

THREAD = "antman-file-listener"
CLOSE_BOUND_S = 2.0          # FL-12
TOLERANCE_S = 1.0            # scheduling delay of a timed join on a loaded 2-core machine
BLOCKED_S = 5.0              # a call still running after this long is blocked
LATE_S = 3.0                 # how long past its bound a late call is still timed: a call not
                             # back by CLOSE_BOUND_S + TOLERANCE_S + LATE_S (6 s) did not return


class Calls:
    def __init__(self) -> None:
        self.contents: list[str] = []

    def __call__(self, content: str) -> None:
        self.contents.append(content)


def check_once(clock, clause: str, what: str) -> None:
    """One poll of the listener; a monitor thread that does not come back to its wait is
    blocked (on the virtual clock a check takes no time)."""
    try:
        clock.tick(1_000_000)
    except SettleTimeout:
        raise AssertionError(f"the monitor thread did not come back to its poll wait after "
                             f"{what}: it is blocked [{clause}]") from None


def monitor_alive() -> bool:
    return any(t.name == THREAD for t in antman_threads())


# -- FL-13: reading never blocks -------------------------------------------------------------
@pytest.mark.clause("FL-13")
def test_fifo_swapped_in_after_the_check_does_not_block(rt, listener, vclock, tmp_path,
                                                        caplog) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    caplog.set_level(logging.WARNING)
    path = tmp_path / "gpu_config.json"
    write_text(path, '{"perfControl": 10}')
    cb = Calls()
    listener.register_file_listener(str(path), "h", cb)
    wait_for_poller(vclock)
    write_text(path, '{"perfControl": 20}')          # changed: the next check reads it
    with nemesis.swap_after_stat(path) as swap:
        check_once(vclock, "FL-13", "a FIFO replaced the config path right after its stat")
        if not swap.fired.is_set():                   # no stat at all: a FIFO at the check
            nemesis.make_fifo(path)
            check_once(vclock, "FL-13", "a FIFO replaced the config path")
    assert cb.contents == ['{"perfControl": 10}'], \
        f"a FIFO at the config path was delivered: {cb.contents[1:]} [FL-13]"
    warned = runtime_records(caplog, rt, containing=str(path))
    assert len(warned) == 1, (f"a FIFO at the config path logged {len(warned)} warnings naming "
                              f"it, expected 1 [FL-9]")
    path.unlink()
    write_text(path, '{"perfControl": 30}')
    check_once(vclock, "FL-13", "the FIFO was replaced by a file")
    assert cb.contents[-1] == '{"perfControl": 30}', \
        f"after the FIFO the listener delivered {cb.contents[1:]} [FL-13]"


@pytest.mark.clause("FL-13")
def test_fifo_swapped_in_at_start_up_does_not_block_create_runtime(rt, control_env,
                                                                   tmp_path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "gpu_config.json"
    write_text(path, '{"perfControl": 10}')
    with nemesis.swap_after_stat(path):
        t, out = run_in_thread(lambda: rt.create_runtime(config_file=str(path),
                                                         status_file=None), "create-runtime")
        returned = joined(t, BLOCKED_S)
    t.join(BLOCKED_S)
    ctx = out.get("result")
    try:
        assert returned, ("create_runtime blocked reading a FIFO swapped in at the config path "
                          "after its stat [FL-13]")
        assert "error" not in out, f"create_runtime raised {out['error']!r} [FL-13]"
    finally:
        if ctx is not None:
            ctx.close()


@pytest.mark.clause("FL-13")
def test_file_whose_read_waits_does_not_block(rt, listener, vclock, tmp_path) -> None:
    target = nemesis.blocking_read_target()
    if target is None:
        pytest.skip("no file whose read waits is readable here (/proc/kmsg needs root)")
    path = tmp_path / "gpu_config.json"
    os.symlink(target, path)
    cb = Calls()
    try:
        t, out = run_in_thread(lambda: listener.register_file_listener(str(path), "h", cb),
                               "register")
        assert joined(t, BLOCKED_S), (f"register_file_listener blocked reading {target} "
                                      f"through a symlink [FL-13]")
        assert "error" not in out, f"register_file_listener raised {out['error']!r} [FL-13]"
        wait_for_poller(vclock)
        for _ in range(6):                    # past the 5 s content re-check (FL-3)
            check_once(vclock, "FL-13", f"a check of the symlink to {target}")
    finally:
        nemesis.heal_blocking_read()
    path.unlink()
    write_text(path, '{"perfControl": 30}')
    check_once(vclock, "FL-13", "the symlink was replaced by a file")
    assert cb.contents and cb.contents[-1] == '{"perfControl": 30}', \
        f"after the symlink to {target} the listener delivered {cb.contents} [FL-13]"


@pytest.mark.clause("FL-13")
def test_terminal_swapped_in_after_the_check_does_not_become_the_controlling_one(
        rt, tmp_path) -> None:
    """A job started in a session of its own has no controlling terminal: opening a terminal
    that replaced the config path after its check must not make it that job's (whose
    hang-up would then kill the job). Run in a child process, which leads its session."""
    if not hasattr(os, "setsid") or not hasattr(os, "openpty"):
        pytest.skip("no sessions or pseudo-terminals on this platform")
    out = nemesis.terminal_swapped_in_after_stat(rt.__name__, tmp_path)
    if "skipped" in out:
        pytest.skip(out["skipped"])
    # The swap happens right after the registration's stat, on the registering thread: a
    # runtime that delivers later, on its monitor thread, races it (FL-5 first).
    precondition_holds("FL-5", out["delivers_at_registration"],
                       f"a small regular file's content is delivered by the registration, on "
                       f"the registering thread, before it returns (seen then, as [on that "
                       f"thread, content]: {out.get('seen_at_registration')})")
    assert out["delivered"] == [], \
        f"the terminal {out['terminal']} at the config path was delivered [FL-9]"
    assert not out["controlling_terminal"], (
        f"opening the terminal {out['terminal']} swapped in at the config path made it the "
        f"controlling terminal of a process that had none [FL-13]")


# -- FL-12: close returns within 2 s -----------------------------------------------------------
def blocked_handler(listener, clock, path):
    """Register a handler on ``path`` that blocks in its first call until released, then a
    second handler recording its calls; deliver a change. Returns (release, second)."""
    entered, release = threading.Event(), threading.Event()

    def blocking(content: str) -> None:
        if content == "block":
            entered.set()
            release.wait(60)

    second = Calls()
    listener.register_file_listener(str(path), "blocking-handler", blocking)
    listener.register_file_listener(str(path), "second-handler", second)
    wait_for_poller(clock)
    write_text(path, "block")
    clock.advance(1_000_000)
    assert entered.wait(BLOCKED_S), "the change was not delivered [FL-6]"
    return release, second


def timed_call(fn, name: str) -> tuple[bool, float]:
    start = time.monotonic()
    t, out = run_in_thread(fn, name)
    done = joined(t, CLOSE_BOUND_S + TOLERANCE_S + LATE_S)
    assert "error" not in out, f"{name} raised {out.get('error')!r} [FL-12]"
    return done, time.monotonic() - start


@pytest.mark.clause("FL-12")
@pytest.mark.parametrize("how", ["close", "unregister_last"])
def test_close_returns_while_a_handler_does_not(rt, no_thread_leak, vclock, tmp_path, caplog,
                                                how) -> None:
    caplog.set_level(logging.ERROR)
    path = tmp_path / "gpu_config.json"
    write_text(path, "start")
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    release, second = blocked_handler(fl, vclock, path)
    try:
        if how == "close":
            call = fl.close
        else:
            def call() -> None:
                fl.unregister_file_listener(str(path), "second-handler")
                fl.unregister_file_listener(str(path), "blocking-handler")
        done, took = timed_call(call, how)
        assert done and took <= CLOSE_BOUND_S + TOLERANCE_S, (
            f"{how} while a handler did not return took "
            f"{'more than ' if not done else ''}{took:.2f} s, expected at most "
            f"{CLOSE_BOUND_S:g} s (+{TOLERANCE_S:g} s tolerance) [FL-12]")
        errors = runtime_records(caplog, rt, logging.ERROR)
        assert len(errors) == 1 and str(path) in errors[0].getMessage() \
            and names_identifier(errors[0].getMessage(), "blocking-handler"), (
                f"{how} gave up on a busy monitor thread and logged "
                f"{[r.getMessage()[:200] for r in errors]}, expected one error naming the path "
                f"and the handler [FL-12]")
        assert not fl.is_running(), f"is_running() is True after {how} [FL-12]"
    finally:
        release.set()
    wait_until(lambda: not monitor_alive(), "the released monitor thread to end [FL-12]")
    assert "block" not in second.contents, (
        f"after {how} gave up on it, the monitor thread called the next handler of the path "
        f"[FL-12]")
    fl.close()


class _WaitOutlivingItsStop:
    """The virtual clock, except that a wait of the monitor thread that its stop event ended
    returns only once ``release`` is set (bounded): a clock that breaks CLK-3, holding the
    thread in its wait while close() waits for it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.release = threading.Event()

    def wait(self, event: threading.Event, timeout_us: int) -> bool:
        interrupted = self.inner.wait(event, timeout_us)
        if interrupted and threading.current_thread().name == THREAD:
            self.release.wait(BLOCKED_S + CLOSE_BOUND_S + TOLERANCE_S + LATE_S)
        return interrupted

    def __getattr__(self, name: str):       # now_us, time_s, sleep_us: the inner clock's
        return getattr(self.inner, name)


@pytest.mark.clause("FL-12")
@pytest.mark.parametrize("checked", [False, True], ids=["before-its-first-check",
                                                        "after-a-delivery"])
def test_close_names_a_thread_held_in_its_wait_as_waiting(rt, no_thread_leak, vclock, tmp_path,
                                                          caplog, checked) -> None:
    """A monitor thread held in its clock's wait past the 2 s of close() is reported as
    waiting, whether it has not checked a path yet or has just run a handler: what it did
    last is not what it does."""
    caplog.set_level(logging.ERROR)
    path = tmp_path / "gpu_config.json"
    write_text(path, "start")
    clock = _WaitOutlivingItsStop(vclock)
    fl = rt.FileListener(clock=clock, poll_interval_s=1.0)
    seen = Calls()
    try:
        fl.register_file_listener(str(path), "seen-handler", seen)
        wait_for_poller(vclock)
        if checked:
            write_text(path, "changed")
            check_once(vclock, "FL-12", "a delivery")
            precondition_holds("FL-12", seen.contents == ["start", "changed"],
                               "the monitor thread delivers a change to its handler")
        done, took = timed_call(fl.close, "close")
        assert done and took <= CLOSE_BOUND_S + TOLERANCE_S, (
            f"close while the monitor thread was held in its clock wait took "
            f"{'more than ' if not done else ''}{took:.2f} s, expected at most "
            f"{CLOSE_BOUND_S:g} s (+{TOLERANCE_S:g} s tolerance) [FL-12]")
        messages = [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)]
        assert len(messages) == 1 and names_identifier(messages[0].lower(), "waiting") \
            and not names_identifier(messages[0], "seen-handler"), (
                f"close gave up on a monitor thread held in its clock wait"
                f"{' after it ran seen-handler' if checked else ''} and logged "
                f"{[m[:200] for m in messages]}, expected one error saying that it is "
                f"waiting (not naming the handler) [FL-12]")
    finally:
        clock.release.set()
    wait_until(lambda: not monitor_alive(), "the released monitor thread to end [FL-12]")
    fl.close()


@pytest.mark.clause("FL-12")
def test_close_names_a_thread_held_in_a_read_by_its_path(rt, no_thread_leak, vclock, tmp_path,
                                                         caplog, monkeypatch) -> None:
    """A monitor thread that delivered a change and, at its next check, is held in the read
    of the path (a read the system does not end: simulated) past the 2 s of close() is
    reported as reading that path: not as waiting, and not as running the handler it ran
    last."""
    caplog.set_level(logging.ERROR)
    path = tmp_path / "gpu_config.json"
    write_text(path, "start")
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    seen = Calls()
    entered, release = threading.Event(), threading.Event()
    real_read, real_fstat = os.read, os.fstat
    try:
        fl.register_file_listener(str(path), "seen-handler", seen)
        wait_for_poller(vclock)
        write_text(path, "changed")
        check_once(vclock, "FL-12", "a delivery")
        precondition_holds("FL-12", seen.contents == ["start", "changed"],
                           "the monitor thread delivers a change to its handler")

        def read(fd, *args, **kwargs):
            if threading.current_thread().name == THREAD \
                    and os.path.samestat(real_fstat(fd), os.stat(path)):
                entered.set()
                release.wait(BLOCKED_S + CLOSE_BOUND_S + TOLERANCE_S + LATE_S)
            return real_read(fd, *args, **kwargs)

        monkeypatch.setattr(os, "read", read)
        write_text(path, "changed again")
        vclock.advance(1_000_000)
        if not entered.wait(BLOCKED_S):
            pytest.skip("the monitor thread read the changed file without os.read: its read "
                        "cannot be held here")
        done, took = timed_call(fl.close, "close")
        assert done and took <= CLOSE_BOUND_S + TOLERANCE_S, (
            f"close while the monitor thread was held in a read took "
            f"{'more than ' if not done else ''}{took:.2f} s, expected at most "
            f"{CLOSE_BOUND_S:g} s (+{TOLERANCE_S:g} s tolerance) [FL-12]")
        messages = [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)]
        assert len(messages) == 1 and str(path) in messages[0] \
            and not names_identifier(messages[0].lower(), "waiting") \
            and not names_identifier(messages[0], "seen-handler"), (
                f"close gave up on a monitor thread held in the read of the path and logged "
                f"{[m[:200] for m in messages]}, expected one error naming the path (not "
                f"saying that it is waiting, nor naming the handler it ran before) [FL-12]")
    finally:
        release.set()
    wait_until(lambda: not monitor_alive(), "the released monitor thread to end [FL-12]")
    monkeypatch.undo()
    assert seen.contents == ["start", "changed"], (
        f"after close gave up on it, the monitor thread delivered {seen.contents[2:]} [FL-12]")
    fl.close()


@pytest.mark.clause("FL-12")
def test_a_reported_thread_is_not_waited_for_again(rt, no_thread_leak, vclock, tmp_path,
                                                   caplog) -> None:
    """After unregistering the last path gave up on a monitor thread stuck in a handler, a
    close() returns at once and logs nothing more: the 2 s are spent once in all."""
    caplog.set_level(logging.ERROR)
    path = tmp_path / "gpu_config.json"
    write_text(path, "start")
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    release, _ = blocked_handler(fl, vclock, path)
    try:
        def unregister_last() -> None:
            fl.unregister_file_listener(str(path), "second-handler")
            fl.unregister_file_listener(str(path), "blocking-handler")
        done, _ = timed_call(unregister_last, "unregister_last")
        assert done, "unregistering the last path did not return [FL-12]"
        caplog.clear()
        done, took = timed_call(fl.close, "close")
        assert done and took <= TOLERANCE_S, (
            f"close() after the monitor thread was reported took "
            f"{'more than ' if not done else ''}{took:.2f} s, expected to return at once "
            f"(at most {TOLERANCE_S:g} s of scheduling delay): a thread already reported is "
            f"not waited for again [FL-12]")
        again = runtime_records(caplog, rt, logging.ERROR)
        assert again == [], (f"close() reported the same monitor thread again: "
                             f"{[r.getMessage()[:200] for r in again]} [FL-12]")
    finally:
        release.set()
    wait_until(lambda: not monitor_alive(), "the released monitor thread to end [FL-12]")
    fl.close()


@pytest.mark.clause("FL-12")
def test_close_waits_2_s_in_all_for_two_busy_threads(rt, no_thread_leak, vclock, tmp_path,
                                                     caplog) -> None:
    """A handler on the monitor thread closes the listener, registers another path (a second
    monitor thread starts) and then does not return; that path's handler does not return
    either. close() has two stopped threads, both busy, to wait for: 2 s in all, not 2 s for
    the first and more for the second."""
    caplog.set_level(logging.ERROR)
    first, other = tmp_path / "first.json", tmp_path / "other.json"
    write_text(first, "start")
    write_text(other, "start")
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    entered = [threading.Event(), threading.Event()]
    release = threading.Event()

    def blocking_other(content: str) -> None:
        if content == "block":
            entered[1].set()
            release.wait(60)

    def restarting(content: str) -> None:
        if content == "block":
            fl.close()
            fl.register_file_listener(str(other), "blocking-other", blocking_other)
            entered[0].set()
            release.wait(60)

    try:
        fl.register_file_listener(str(first), "restarting", restarting)
        wait_for_poller(vclock)
        write_text(first, "block")
        vclock.advance(1_000_000)
        assert entered[0].wait(BLOCKED_S), "the change was not delivered [FL-6]"
        wait_for_poller(vclock, clause="FL-8")       # the second monitor thread
        write_text(other, "block")
        vclock.advance(1_000_000)
        assert entered[1].wait(BLOCKED_S), "the restarted thread delivered nothing [FL-8]"
        precondition_holds("FL-1", sum(t.name == THREAD for t in antman_threads()) == 2,
                           "two monitor threads, each in a handler that does not return")
        done, took = timed_call(fl.close, "close")
        # A join that gives each thread its own time waits at least 1 s more than 2 s in all
        # (the second thread's timeout, floored): 0.9 s of scheduling delay is tolerated.
        bound = CLOSE_BOUND_S + 0.9
        assert done and took <= bound, (
            f"close() while two stopped monitor threads were in handlers that did not return "
            f"took {'more than ' if not done else ''}{took:.2f} s, expected at most "
            f"{CLOSE_BOUND_S:g} s in all (+0.9 s tolerance) [FL-12]")
    finally:
        release.set()
    wait_until(lambda: not monitor_alive(), "the released monitor threads to end [FL-12]")
    fl.close()


@pytest.mark.clause("RM-16")
@pytest.mark.capability("resource_management")
def test_runtime_close_waits_for_its_listener_once(rt, no_thread_leak, control_env, vclock,
                                                   tmp_path, caplog) -> None:
    caplog.set_level(logging.ERROR)
    config = tmp_path / "gpu_config.json"
    write_text(config, '{"perfControl": 100}')
    ctx = rt.create_runtime(config_file=str(config), status_file=None, clock=vclock)
    release, _ = blocked_handler(ctx.file_listener, vclock, tmp_path / "other.json")
    try:
        done, took = timed_call(ctx.close, "RuntimeContext.close")
        assert done and took <= CLOSE_BOUND_S + TOLERANCE_S, (
            f"RuntimeContext.close() while a handler of its listener did not return took "
            f"{'more than ' if not done else ''}{took:.2f} s, expected at most "
            f"{CLOSE_BOUND_S:g} s in all (+{TOLERANCE_S:g} s tolerance) [RM-16]")
    finally:
        release.set()
    wait_until(lambda: not monitor_alive(), "the released monitor thread to end [RM-16]")


# -- FL-11: a close during a check -------------------------------------------------------------
@pytest.mark.clause("FL-11")
@pytest.mark.parametrize("how", ["close", "unregister_last"])
def test_a_check_stopped_by_close_logs_no_error(rt, no_thread_leak, vclock, tmp_path, caplog,
                                                monkeypatch, how) -> None:
    """The listener is closed (or its last path unregistered) while the monitor thread checks
    a changed path: from within that check, when it takes the status of the opened file. The
    check ends: nothing is delivered and no error is logged, the thread ends."""
    caplog.set_level(logging.ERROR)
    path = tmp_path / "gpu_config.json"
    write_text(path, "v1")
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    cb = Calls()
    try:
        fl.register_file_listener(str(path), "h", cb)
        wait_for_poller(vclock)
        write_text(path, "v22")
        real_fstat = os.fstat
        stopped: list[bool] = []

        def fstat(fd, *args, **kwargs):
            st = real_fstat(fd, *args, **kwargs)
            if not stopped and threading.current_thread().name == THREAD \
                    and os.path.samestat(st, os.stat(path)):
                stopped.append(True)
                if how == "close":
                    fl.close()
                else:
                    fl.unregister_file_listener(str(path), "h")
            return st

        monkeypatch.setattr(os, "fstat", fstat)
        check_once(vclock, "FL-11", f"a {how} during a check")
        monkeypatch.undo()
        if not stopped:
            pytest.skip("the monitor thread took no os.fstat of the opened path: the check "
                        "cannot be stopped from within it here")
        wait_until(lambda: not monitor_alive(), f"the monitor thread to end after {how} [FL-11]")
        assert cb.contents == ["v1"], (
            f"a {how} during a check delivered {cb.contents[1:]} [FL-11]")
        errors = runtime_records(caplog, rt, logging.ERROR)
        assert errors == [], (
            f"a {how} during a check logged {[r.getMessage()[:200] for r in errors]}: a check "
            f"stopped by close is no failure [FL-11]")
    finally:
        monkeypatch.undo()
        fl.close()


@pytest.mark.clause("FL-11")
def test_a_check_stopped_by_close_reads_at_most_1_mib_more(rt, no_thread_leak, vclock,
                                                            tmp_path, monkeypatch) -> None:
    """A file of 3 MiB and 5 bytes, well within max_file_bytes, changes; the listener is
    closed from within the check's first read of it (just before the bytes are read). From
    then on the check reads at most 1 MiB (exactly 1 MiB when it reads in pieces of 1 MiB,
    2 MiB in pieces of 2 MiB, the whole file in one piece), delivers nothing and the thread
    ends."""
    path = tmp_path / "gpu_config.json"
    write_text(path, "v1")
    size = 3 * MiB + 5
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    cb = Calls()
    try:
        fl.register_file_listener(str(path), "h", cb)
        wait_for_poller(vclock)
        write_text(path, "x" * size)
        real_read, real_fstat = os.read, os.fstat
        after_close: list[int] = []            # bytes each read of the file returned

        def read(fd, n, *args, **kwargs):
            ours = threading.current_thread().name == THREAD \
                and os.path.samestat(real_fstat(fd), os.stat(path))
            if ours and not after_close:
                fl.close()
            data = real_read(fd, n, *args, **kwargs)
            if ours:
                after_close.append(len(data))
            return data

        monkeypatch.setattr(os, "read", read)
        check_once(vclock, "FL-11", "a close during the read of a file of 3 MiB")
        monkeypatch.undo()
        if not after_close:
            pytest.skip("the monitor thread read the file without os.read: the close cannot "
                        "be made from within its read here")
        wait_until(lambda: not monitor_alive(), "the monitor thread to end after close [FL-11]")
        assert sum(after_close) <= MiB, (
            f"a close() made during the read of a file of {size} bytes was followed by "
            f"reads of {after_close} bytes ({sum(after_close)} in all): a check reads at "
            f"most 1 MiB ({MiB} bytes) of a file after a close() [FL-11]")
        assert cb.contents == ["v1"], (
            f"a close during the read of a file delivered {[c[:20] for c in cb.contents[1:]]} "
            f"[FL-11]")
    finally:
        monkeypatch.undo()
        fl.close()


# -- FL-2: any positive finite interval ---------------------------------------------------------
@pytest.mark.clause("FL-2")
def test_huge_poll_interval_keeps_the_thread(rt, no_thread_leak, tmp_path) -> None:
    path = tmp_path / "gpu_config.json"
    write_text(path, "v1")
    fl = rt.FileListener(poll_interval_s=1e10)          # the real clock
    cb = Calls()
    fl.register_file_listener(str(path), "h", cb)
    try:
        time.sleep(0.5)                                  # the thread is in its first wait
        assert fl.is_running() and monitor_alive(), \
            "a poll interval of 1e10 s killed the monitor thread [FL-2]"
        assert cb.contents == ["v1"], f"registration delivered {cb.contents} [FL-5]"
    finally:
        done, took = timed_call(fl.close, "close")
    assert done and took <= CLOSE_BOUND_S + TOLERANCE_S, \
        f"close() of a listener waiting 1e10 s took {took:.2f} s [CLK-3]"


# -- API-8: a path that cannot name a file -------------------------------------------------------
@pytest.mark.clause("API-8")
@pytest.mark.parametrize("bad", ["gpu\x00config.json", "gpu\ud800config.json"])
def test_register_rejects_a_path_that_cannot_name_a_file(rt, no_thread_leak, listener,
                                                         tmp_path, bad) -> None:
    path = os.path.join(str(tmp_path), bad)
    expect_value_error(lambda: listener.register_file_listener(path, "h", Calls()),
                       f"register_file_listener({bad!r})", "API-8")
    assert not listener.is_running(), (
        f"register_file_listener({bad!r}) raised ValueError but started the monitor thread: "
        f"the path was registered before it was checked [API-8]")


# -- the listener's lock: every shared change and read is made under it, forced --------------
#: Functions of the reference's listener, the clause their locked lines protect, and what a
#: concurrent call can do to a line of theirs run without the lock (the user-visible cost).
LISTENER_LOCKED = {
    "register_file_listener": ("FL-1", "two concurrent registrations can each start a monitor "
                                       "thread, or one handler can be lost"),
    "unregister_file_listener": ("FL-7", "a concurrent registration can be lost, or the thread "
                                         "stopped while a path is still watched"),
    "close": ("FL-11", "a registration made during close() can be left with no thread"),
    "_join_stopped": ("FL-12", "a concurrent close() can wait again for a thread already "
                               "reported, or forget a thread it must join"),
    "_poll": ("FL-6", "a path unregistered during the round's listing makes the round raise, "
                      "ending the monitor thread"),
    "_deliver": ("FL-6", "a delivery can call a handler set torn by a concurrent change"),
}
#: A line that names one of these reads or changes the listener's shared state.
_SHARED = ("self._watches", "self._running", "self._thread", "self._stop", "self._stopped",
           "self._given_up", "self._activity", "watch.handlers")


@pytest.mark.clause("FL-1", "FL-6", "FL-7", "FL-11", "FL-12")
def test_every_shared_state_line_runs_under_the_listeners_lock(rt, no_thread_leak, vclock,
                                                               tmp_path, monkeypatch) -> None:
    """The listener's registrations, deliveries and shutdowns share its watched paths and
    threads; each line that reads or changes them runs with the listener's lock held, so no
    concurrent call interleaves with it. Forced, not hoped for: the lock is watched
    (fixtures/interleave.py) and every line of the reference's functions records whether the
    thread running it held the lock: registering, a delivery on the registering thread and on
    the monitor thread, unregistering, and a close() that gives up on a thread stuck in a
    handler (all three of its joins' bookkeeping; on a thread of its own, waited for at most
    the 2 s of FL-12 plus ``TOLERANCE_S`` before the handler is released)."""
    from fixtures.interleave import lock_held_by_line, watch_lock
    path, other = tmp_path / "gpu_config.json", tmp_path / "other.json"
    write_text(path, "start")
    write_text(other, "other")
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    watched = watch_lock(monkeypatch, fl, "_lock", "the listener's lock")
    released: list[threading.Event] = []

    closers: list[threading.Thread] = []
    earlier = set(antman_threads())        # an earlier test's stuck thread is not this one's

    def scenario() -> None:
        fl.register_file_listener(str(other), "other-handler", Calls())
        fl.unregister_file_listener(str(other), "other-handler")
        release, _ = blocked_handler(fl, vclock, path)
        released.append(release)
        # close() gives up on the blocked thread (FL-12); on a thread of its own, traced too,
        # so that a runtime whose close() waits for the handler does not hang the test.
        closer, _ = run_in_thread(fl.close, "listener-close")
        closers.append(closer)
        joined(closer, CLOSE_BOUND_S + TOLERANCE_S)

    try:
        _, lines = lock_held_by_line(scenario, tuple(LISTENER_LOCKED), watched,
                                     started_threads=True)
    finally:
        for release in released:
            release.set()
    assert all(joined(c) for c in closers), "close() did not return once released [FL-12]"
    wait_until(lambda: not any(t.name == THREAD and t not in earlier for t in antman_threads()),
               "the released monitor thread to end [FL-12]")
    fl.close()
    ran = {name for name, _, _ in lines}
    if not ran:
        pytest.skip("the check follows the reference's design (its listener's functions "
                    f"{sorted(LISTENER_LOCKED)}); this runtime ran none of them")
    bare = {}
    for name, text, held in lines:
        if not held and any(s in text for s in _SHARED):
            bare.setdefault(name, text)
    if bare:
        name, text = next(iter(bare.items()))
        clause, why = LISTENER_LOCKED[name]
        others = sorted(set(bare) - {name})
        pytest.fail(f"{name} ran {text!r} without the listener's lock: {why}"
                    + (f" (so did {', '.join(others)})" if others else "") + f" [{clause}]")


@pytest.mark.clause("FL-5")
def test_the_registering_read_holds_the_paths_scan_lock(rt, no_thread_leak, listener, vclock,
                                                        tmp_path) -> None:
    """The read and delivery of a registration (FL-5) run with the path's scan lock held, the
    lock a poll round takes before it reads the path: a round never reads and delivers the
    same path at the same time. Forced: at each call of the reference's read, the path's
    scan lock must be locked (no round runs: the virtual clock stands still)."""
    from fixtures.interleave import at_each_call

    def scan_lock_locked(frame) -> bool | None:
        lock = getattr(frame.f_locals.get("watch"), "scan_lock", None)
        return None if lock is None else bool(lock.locked())

    path = tmp_path / "gpu_config.json"
    write_text(path, "v1")
    cb = Calls()
    _, locked = at_each_call(lambda: listener.register_file_listener(str(path), "h", cb),
                             "_read_if_changed", scan_lock_locked)
    locked = [x for x in locked if x is not None]
    if not locked:
        pytest.skip("the check follows the reference's design (a path's scan_lock taken "
                    "around _read_if_changed); this runtime has none")
    assert cb.contents == ["v1"], f"registration delivered {cb.contents} [FL-5]"
    assert all(locked), ("the registration read the path without its scan lock: a poll round "
                         "can read it at the same time and deliver the content twice, or an "
                         "older content after a newer one [FL-5]")
