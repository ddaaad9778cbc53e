"""FL clauses: the FileListener (one thread, polling, change detection, handlers, faults).

Timing runs on the manual virtual clock: ``poll(clock)`` advances one poll interval and
waits until the monitor thread is back in its wait, so each check is observed exactly.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import stat as stat_module
import threading
from typing import Any
import weakref

import pytest

from conformance.checks import names_identifier
from conformance.control_helpers import (SETTLE_TIMEOUT_S, joined, listener,  # noqa: F401
                                         poll, run_in_thread, runtime_records, vclock,
                                         wait_for_poller, write_text)
from conformance.execution_helpers import wait_until
from conformance.preconditions import precondition_holds
from fixtures.threads import antman_threads, no_thread_leak  # noqa: F401
from fixtures.virtual_clock import SettleTimeout, VirtualClock

pytestmark = pytest.mark.capability("file_listener", "virtual_clock")

THREAD = "antman-file-listener"


class Calls:
    """A handler recording (thread name, content) of each call."""

    def __init__(self, log: list | None = None, tag: str = "") -> None:
        self.calls: list[tuple[str, str]] = []
        self.log, self.tag = log, tag

    def __call__(self, content: str) -> None:
        self.calls.append((threading.current_thread().name, content))
        if self.log is not None:
            self.log.append((self.tag, content))

    @property
    def contents(self) -> list[str]:
        return [c for _, c in self.calls]


#: Monitor threads alive when the running test started: an earlier test's listener (one a
#: broken runtime left deadlocked, say) is not this test's evidence.
_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _monitor_threads_of_earlier_tests() -> None:
    _EARLIER.clear()
    _EARLIER.update(t for t in antman_threads() if t.name == THREAD)


def monitor_threads() -> list[threading.Thread]:
    """The monitor threads started since the running test began."""
    return [t for t in antman_threads() if t.name == THREAD and t not in _EARLIER]


def names_the_word(message: str, *words: str) -> bool:
    """``message`` names one of ``words`` as a word, in any case (FL-9: "the word
    ``directory``"): "FIFO" in "is a FIFO", not in "FIFOXX"."""
    return any(names_identifier(message.lower(), w) for w in words)


def register(fl, clock, path, name="h", cb=None):
    cb = cb if cb is not None else Calls()
    fl.register_file_listener(str(path), name, cb)
    wait_for_poller(clock)
    return cb


@pytest.mark.clause("FL-1")
def test_one_thread_for_all_paths(rt, no_thread_leak, listener, vclock, tmp_path) -> None:
    assert not listener.is_running(), "FileListener runs a thread before any registration [FL-1]"
    assert monitor_threads() == [], "[FL-1]"
    for i in range(3):
        listener.register_file_listener(str(tmp_path / f"f{i}.json"), f"h{i}", Calls())
    wait_for_poller(vclock)
    assert listener.is_running(), "is_running() is False after registering [FL-1]"
    names = [t.name for t in monitor_threads()]
    assert names == [THREAD], f"3 watched paths run threads {names}, expected one {THREAD!r} [FL-1]"
    listener.close()
    assert monitor_threads() == [], "close() left the monitor thread alive [FL-1]"


@pytest.mark.clause("FL-1")
def test_the_monitor_thread_is_a_daemon(rt, no_thread_leak, listener, vclock, tmp_path) -> None:
    """A process that never closes its listener still exits: the interpreter does not wait
    for a daemon thread, and a monitor thread polls until close()."""
    listener.register_file_listener(str(tmp_path / "c.json"), "h", Calls())
    wait_for_poller(vclock)
    threads = monitor_threads()
    precondition_holds("FL-1", len(threads) == 1, "registering starts one monitor thread")
    assert threads[0].daemon, (
        f"the monitor thread {threads[0].name!r} is not a daemon thread: a process that "
        f"never calls close() cannot exit [FL-1]")


@pytest.mark.clause("FL-2")
@pytest.mark.parametrize("interval_s,interval_us", [(1.0, 1_000_000), (0.25, 250_000)])
def test_polls_through_the_clock(rt, no_thread_leak, vclock, tmp_path, interval_s,
                                 interval_us) -> None:
    path = tmp_path / "c.json"
    write_text(path, "v1")
    with rt.FileListener(clock=vclock, poll_interval_s=interval_s) as fl:
        cb = register(fl, vclock, path)
        write_text(path, "v2")
        vclock.tick(interval_us - 1)
        assert cb.contents == ["v1"], f"delivered before one poll interval: {cb.contents} [FL-2]"
        vclock.tick(1)
        assert cb.contents == ["v1", "v2"], \
            f"after {interval_us} µs the change was not delivered: {cb.contents} [FL-2]"
        assert cb.calls[-1][0] == THREAD, f"delivered on {cb.calls[-1][0]!r} [FL-2]"
        waits = vclock.sleeps_of(THREAD)
        assert waits and set(waits) == {interval_us}, \
            f"poll waits {waits}, expected {interval_us} µs each [FL-2]"


@pytest.mark.clause("FL-2")
def test_paths_checked_in_path_order(rt, listener, vclock, tmp_path) -> None:
    log: list = []
    b, a = tmp_path / "b.json", tmp_path / "a.json"
    for p in (b, a):
        write_text(p, "0")
    register(listener, vclock, b, "hb", Calls(log, "b"))
    register(listener, vclock, a, "ha", Calls(log, "a"))
    log.clear()
    write_text(b, "1")
    write_text(a, "1")
    poll(vclock)
    assert [t for t, _ in log] == ["a", "b"], f"paths checked in order {log} [FL-2]"


@pytest.mark.clause("FL-2")
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_poll_interval_is_rejected(rt, bad) -> None:
    with pytest.raises((ValueError, TypeError)):
        rt.FileListener(poll_interval_s=bad)


@pytest.mark.clause("FL-2")
@pytest.mark.parametrize("interval_s,interval_us", [(1e-7, 1), (4.9e-7, 1), (1.4e-6, 1),
                                                    (1.6e-6, 2), (2.5e-6, 2)])
def test_poll_wait_is_rounded_and_never_zero(rt, no_thread_leak, vclock, tmp_path,
                                            interval_s, interval_us) -> None:
    """round(interval × 10^6), at least 1 µs: a tiny interval must not become a busy loop."""
    with rt.FileListener(clock=vclock, poll_interval_s=interval_s) as fl:
        register(fl, vclock, tmp_path / "c.json")
        waits = vclock.sleeps_of(THREAD)
        assert waits == [interval_us], (f"poll_interval_s={interval_s}: poll waits {waits}, "
                                        f"expected [{interval_us}] µs [FL-2]")


@pytest.mark.clause("FL-2")
def test_path_order_is_code_point_order(rt, listener, vclock, tmp_path) -> None:
    log: list = []
    names = ["b.json", "B.json", "a.json", "_.json", "\u00e9.json"]
    for name in names:
        write_text(tmp_path / name, "0")
    for name in names:
        register(listener, vclock, tmp_path / name, name, Calls(log, name))
    log.clear()
    for name in names:
        write_text(tmp_path / name, "1")
    poll(vclock)
    expected = sorted(names)                  # "B" < "_" < "a" < "b" < "\u00e9"
    assert [t for t, _ in log] == expected, \
        f"paths checked in the order {[t for t, _ in log]}, expected {expected} [FL-2]"


@pytest.mark.clause("FL-3")
def test_touch_without_change_delivers_nothing(rt, listener, vclock, tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, '{"perfControl": 50}')
    cb = register(listener, vclock, path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    poll(vclock, 7)                       # past the 5 s content re-check too
    assert cb.contents == ['{"perfControl": 50}'], \
        f"a touch without a content change delivered {cb.contents[1:]} [FL-3]"


@pytest.mark.clause("FL-3")
def test_a_read_leaves_no_descriptor_of_the_path_open(rt, listener, vclock, tmp_path) -> None:
    """The registration's read, the read of a rewrite and the content re-check after 5 s
    each close the file they opened: between checks no descriptor of this process names
    the watched file."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    path = tmp_path / "c.json"

    def held() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                    found.append(fd)
            except OSError:
                pass
        return found

    write_text(path, '{"perfControl": 50}')
    cb = register(listener, vclock, path)
    assert held() == [], f"after the registration's read {held()} name {path} [FL-3]"
    write_text(path, '{"perfControl": 60}')
    poll(vclock, 7)                       # the rewrite, then the 5 s content re-check
    assert cb.contents == ['{"perfControl": 50}', '{"perfControl": 60}'], \
        f"delivered {cb.contents} [FL-3]"
    assert held() == [], f"after three reads the descriptors {held()} name {path} [FL-3]"


@pytest.mark.clause("FL-3")
def test_same_size_change_with_old_mtime_is_delivered(rt, listener, vclock, config_writer) -> None:
    config_writer.write(perf=50)
    cb = register(listener, vclock, config_writer.path)
    new = config_writer.write_same_size(perf=60)
    poll(vclock, 6)
    assert cb.contents[-1] == new and len(cb.contents) == 2, \
        f"same-size rewrite with the old mtime: delivered {cb.contents[1:]} [FL-3]"


@pytest.mark.clause("FL-3")
def test_recreated_with_older_mtime_is_delivered(rt, listener, vclock, config_writer) -> None:
    config_writer.write(perf=50)
    cb = register(listener, vclock, config_writer.path)
    new = config_writer.recreate_older(perf=70)
    poll(vclock)
    assert cb.contents == [cb.contents[0], new], \
        f"a re-creation with an older mtime delivered {cb.contents[1:]} [FL-3]"


@pytest.mark.clause("FL-3")
def test_in_place_rewrite_is_delivered_whole(rt, listener, vclock, config_writer) -> None:
    config_writer.write(perf=50)
    cb = register(listener, vclock, config_writer.path)
    text = config_writer.write_in_place(perf=20, limits={"3b:00.0": 123})
    poll(vclock)
    assert cb.contents[1:] == [text], f"in-place rewrite delivered {cb.contents[1:]} [FL-3]"
    assert isinstance(cb.contents[1], str), "the content is not a str [FL-6]"


@pytest.mark.clause("FL-4")
def test_missing_file_never_fires(rt, listener, vclock, tmp_path) -> None:
    path = tmp_path / "absent.json"
    cb = register(listener, vclock, path)
    poll(vclock, 7)
    assert cb.calls == [], f"a missing file delivered {cb.contents} [FL-4]"
    write_text(path, "created")
    poll(vclock)
    assert cb.contents == ["created"], f"creating the file delivered {cb.contents} [FL-4]"


@pytest.mark.clause("FL-4")
def test_delete_and_recreate(rt, listener, vclock, tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, "same")
    cb = register(listener, vclock, path)
    path.unlink()
    poll(vclock, 2)
    assert cb.contents == ["same"], f"deleting the file delivered {cb.contents[1:]} [FL-4]"
    write_text(path, "same")
    poll(vclock, 7)
    assert cb.contents == ["same"], \
        f"re-creating with the same content delivered {cb.contents[1:]} [FL-4]"
    path.unlink()
    poll(vclock)
    write_text(path, "different")
    poll(vclock)
    assert cb.contents == ["same", "different"], \
        f"re-creating with new content delivered {cb.contents[1:]} [FL-4]"


@pytest.mark.clause("FL-5")
def test_registration_delivers_current_content_synchronously(rt, listener, vclock,
                                                             tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, "start-up")
    cb = Calls()
    listener.register_file_listener(str(path), "first", cb)
    assert cb.calls == [(threading.current_thread().name, "start-up")], \
        f"register_file_listener on an existing file delivered {cb.calls} [FL-5]"
    second = Calls()
    listener.register_file_listener(str(path), "second", second)
    wait_for_poller(vclock)
    poll(vclock, 7)
    assert second.calls == [], \
        f"adding a handler to a watched path delivered {second.contents} [FL-5]"
    assert cb.contents == ["start-up"], f"no change, yet delivered {cb.contents[1:]} [FL-5]"


@pytest.mark.clause("FL-5")
def test_a_registration_holds_up_no_other_path(rt, listener, vclock, tmp_path) -> None:
    """While the handler of a registration's start-up delivery runs on the registering
    thread, a check still reads and delivers the other watched paths. The path being
    registered sorts first (FL-2), so a check that waited for its registration would deliver
    nothing until the handler returned (on the virtual clock a check takes no time: the
    monitor thread must be back in its wait)."""
    first, other = tmp_path / "a.json", tmp_path / "b.json"
    write_text(other, "b1")
    cb = register(listener, vclock, other)
    write_text(first, "a1")
    entered, release = threading.Event(), threading.Event()

    def slow(content: str) -> None:
        entered.set()
        release.wait(60.0)                   # released by the test; bounded all the same

    t, out = run_in_thread(lambda: listener.register_file_listener(str(first), "slow", slow),
                           name="registering")
    try:
        wait_until(entered.is_set, "the registration to deliver the start-up content [FL-5]")
        write_text(other, "b2")
        vclock.tick(1_000_000, clause="FL-5")
        assert cb.contents == ["b1", "b2"], (
            f"while a registration's handler ran, the check delivered {cb.contents[1:]} for "
            f"another path, expected ['b2'] [FL-5]")
    finally:
        release.set()
        assert joined(t), "the registration did not return once its handler did [FL-5]"
    assert "error" not in out, f"the registration raised {out.get('error')!r} [FL-5]"


@pytest.mark.clause("FL-5")
@pytest.mark.parametrize("callback", [None, "handler", 0], ids=["None", "str", "int"])
def test_a_callback_that_is_not_callable_is_refused(rt, no_thread_leak, listener, vclock,
                                                    tmp_path, callback) -> None:
    path = tmp_path / "c.json"
    write_text(path, "v1")
    try:
        listener.register_file_listener(str(path), "h", callback)
    except TypeError:
        pass
    else:
        pytest.fail(f"register_file_listener with the callback {callback!r} did not raise "
                    f"TypeError [FL-5]")
    assert not listener.is_running() and monitor_threads() == [], (
        f"register_file_listener with the callback {callback!r} raised TypeError but "
        f"started the monitor thread: the path is watched [FL-5]")
    cb = register(listener, vclock, path, name="later")
    assert cb.contents == ["v1"], (
        f"a registration after the refused one (callback {callback!r}) delivered "
        f"{cb.contents}: the refused registration left the path watched [FL-5]")


@pytest.mark.clause("FL-6", "FL-5")
def test_handlers_in_registration_order_with_duplicates(rt, listener, vclock, tmp_path) -> None:
    path = tmp_path / "c.json"
    log: list = []
    register(listener, vclock, path, "dup", Calls(log, "1"))
    register(listener, vclock, path, "other", Calls(log, "2"))
    register(listener, vclock, path, "dup", Calls(log, "3"))
    write_text(path, "x")
    poll(vclock)
    assert [t for t, _ in log] == ["1", "2", "3"], f"handlers ran as {log} [FL-6]"


@pytest.mark.clause("FL-6")
def test_raising_handler_is_logged_and_the_rest_run(rt, listener, vclock, tmp_path,
                                                     caplog) -> None:
    path = tmp_path / "c.json"
    after = Calls()

    def bad(content: str) -> None:
        raise ValueError("handler failure")

    register(listener, vclock, path, "bad", bad)
    register(listener, vclock, path, "after", after)
    caplog.set_level(logging.WARNING)
    write_text(path, "x")
    poll(vclock)
    assert after.contents == ["x"], "a raising handler stopped the next handler [FL-6]"
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 1 and str(path) in errors[0].getMessage() \
        and names_identifier(errors[0].getMessage(), "bad"), \
        f"a raising handler logged {[r.getMessage() for r in errors]} [FL-6]"
    write_text(path, "y")
    poll(vclock)
    assert after.contents == ["x", "y"], "the monitor thread stopped after a handler raised [FL-6]"


@pytest.mark.clause("FL-6")
@pytest.mark.parametrize("exit_exception", [SystemExit, KeyboardInterrupt])
def test_handler_raising_an_exit_exception_does_not_end_the_monitor(
        rt, listener, vclock, tmp_path, caplog, exit_exception) -> None:
    """SystemExit and KeyboardInterrupt, not Exception subclasses, raised by a handler on the
    monitor thread are logged like any other exception, and later changes are delivered."""
    path = tmp_path / "c.json"
    after = Calls()
    raised = []

    def exits(content: str) -> None:
        if not raised:
            raised.append(content)
            raise exit_exception(f"{exit_exception.__name__} from a handler")

    register(listener, vclock, path, "exits", exits)
    register(listener, vclock, path, "after", after)
    caplog.set_level(logging.WARNING)
    write_text(path, "x")
    poll(vclock)
    assert raised == ["x"], f"the handler was not called with the change: {raised} [FL-6]"
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 1 and str(path) in errors[0].getMessage() \
        and names_identifier(errors[0].getMessage(), "exits"), (
        f"a handler raising {exit_exception.__name__} on the monitor thread logged "
        f"{[r.getMessage() for r in errors]}, expected one error naming the path and the "
        f"handler [FL-6]")
    assert after.contents == ["x"], \
        f"a handler raising {exit_exception.__name__} stopped the next handler [FL-6]"
    write_text(path, "y")
    poll(vclock)
    assert after.contents == ["x", "y"], (
        f"after a handler raised {exit_exception.__name__} the monitor thread delivered "
        f"{after.contents}: later changes are ignored [FL-6]")


@pytest.mark.clause("FL-6")
@pytest.mark.parametrize("exit_exception", [SystemExit, KeyboardInterrupt])
def test_handler_raising_an_exit_exception_on_registration_reaches_the_caller(
        rt, listener, vclock, tmp_path, exit_exception) -> None:
    """On the registering thread (FL-5) an exception that is not an ``Exception`` raised by
    the handler of the start-up delivery is the caller's: the very exception reaches the
    caller of ``register_file_listener``, and the registration stays in effect (a later
    change reaches the handler on the monitor thread)."""
    path = tmp_path / "c.json"
    write_text(path, "x")
    raised = []
    later = Calls()

    def exits(content: str) -> None:
        if raised:
            later(content)
            return
        exc = exit_exception(f"{exit_exception.__name__} from a handler")
        raised.append((threading.current_thread(), content, exc))
        raise exc

    caught = None
    try:
        listener.register_file_listener(str(path), "exits", exits)
    except BaseException as exc:  # noqa: BLE001 - the exception under test
        caught = exc
    wait_for_poller(vclock)
    assert [(t, c) for t, c, _ in raised] == [(threading.current_thread(), "x")], (
        f"the registration did not call its handler once with the content on the "
        f"registering thread: {[(t.name, c) for t, c, _ in raised]} [FL-6]")
    assert caught is raised[0][2], (
        f"a handler raising {exit_exception.__name__} during register_file_listener: the "
        f"call {'raised ' + repr(caught) if caught is not None else 'returned'}, expected "
        f"the handler's {exit_exception.__name__} to reach the caller [FL-6]")
    write_text(path, "y")
    poll(vclock)
    assert later.calls == [(THREAD, "y")], (
        f"after the handler of a registration raised {exit_exception.__name__} to its "
        f"caller, a change of the path was delivered as {later.calls}, expected 'y' once on "
        f"the monitor thread: the registration stays in effect [FL-6]")


@pytest.mark.clause("FL-6", "FL-7")
def test_handler_may_register_and_unregister(rt, no_thread_leak, listener, vclock,
                                             tmp_path) -> None:
    path, other = tmp_path / "c.json", tmp_path / "o.json"
    write_text(other, "other")
    late, other_cb = Calls(), Calls()

    def self_managing(content: str) -> None:
        listener.register_file_listener(str(path), "late", late)
        listener.register_file_listener(str(other), "other", other_cb)
        listener.unregister_file_listener(str(path), "self")

    register(listener, vclock, path, "self", self_managing)
    write_text(path, "go")
    poll(vclock)                      # settle() fails if the monitor thread deadlocked
    assert other_cb.calls == [(THREAD, "other")], \
        f"registering a new path from a handler delivered {other_cb.calls} [FL-6]"
    write_text(path, "next")
    poll(vclock)
    assert late.contents == ["next"], f"handler registered from a handler got {late.contents} [FL-6]"


@pytest.mark.clause("FL-6")
def test_handlers_of_a_delivery_are_those_registered_when_it_started(rt, listener, vclock,
                                                                     tmp_path) -> None:
    path = tmp_path / "c.json"
    log: list = []
    late = Calls(log, "late")

    def first(content: str) -> None:
        log.append(("first", content))
        if content == "change":
            listener.unregister_file_listener(str(path), "second")
            listener.register_file_listener(str(path), "late", late)

    register(listener, vclock, path, "first", first)
    register(listener, vclock, path, "second", Calls(log, "second"))
    write_text(path, "change")
    poll(vclock)
    assert log == [("first", "change"), ("second", "change")], (
        f"a delivery whose first handler unregistered the second and registered another "
        f"called {log}: expected the handlers registered when it started [FL-6]")
    log.clear()
    write_text(path, "next")
    poll(vclock)
    assert log == [("first", "next"), ("late", "next")], \
        f"the next delivery called {log}, expected first and late [FL-6]"


@pytest.mark.clause("FL-7")
def test_unregister_removes_first_of_name_and_ignores_unknown(rt, listener, vclock,
                                                               tmp_path) -> None:
    path = tmp_path / "c.json"
    log: list = []
    register(listener, vclock, path, "dup", Calls(log, "1"))
    register(listener, vclock, path, "dup", Calls(log, "2"))
    listener.unregister_file_listener(str(path), "dup")
    listener.unregister_file_listener(str(path), "nobody")
    listener.unregister_file_listener(str(tmp_path / "unknown"), "dup")
    write_text(path, "x")
    poll(vclock)
    assert [t for t, _ in log] == ["2"], f"after unregistering the first 'dup': {log} [FL-7]"


@pytest.mark.clause("FL-7")
@pytest.mark.parametrize("given", ["str then Path", "Path then str", "Path then Path"])
def test_a_path_given_as_str_or_path_like_names_the_same_path(rt, no_thread_leak, listener,
                                                              vclock, tmp_path, given) -> None:
    """A handler registered with the path as a ``str`` or a ``pathlib.Path`` is unregistered
    with either: the path is no longer watched and, the last one, its thread stops."""
    path = tmp_path / "c.json"
    first, then = (path if g == "Path" else str(path) for g in given.split(" then "))
    cb = Calls()
    listener.register_file_listener(first, "h", cb)
    wait_for_poller(vclock)
    listener.unregister_file_listener(then, "h")
    assert not listener.is_running(), (
        f"{given}: unregistering the only handler left the listener running [FL-7]")
    write_text(path, "x")
    listener.register_file_listener(str(tmp_path / "other.json"), "o", Calls())
    wait_for_poller(vclock)
    poll(vclock)
    assert cb.calls == [], (
        f"{given}: a handler unregistered was called with {cb.contents} [FL-7]")


@pytest.mark.clause("FL-7")
def test_unregistering_the_last_handler_stops_and_joins(rt, no_thread_leak, listener, vclock,
                                                        tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    register(listener, vclock, a, "h")
    register(listener, vclock, b, "h")
    listener.unregister_file_listener(str(a), "h")
    assert listener.is_running(), "stopped while a path was still watched [FL-7]"
    listener.unregister_file_listener(str(b), "h")
    assert not listener.is_running(), "is_running() after the last unregister [FL-7]"
    assert monitor_threads() == [], "the last unregister returned before joining [FL-7]"


@pytest.mark.clause("FL-7")
@pytest.mark.parametrize("worked", [False, True], ids=["idle", "read_and_delivered"])
def test_stopped_threads_do_not_accumulate(rt, no_thread_leak, listener, vclock, tmp_path,
                                           worked: bool) -> None:
    """Four register/unregister cycles stop four monitor threads; once they ended, the
    listener may keep at most one of them (a listener in a long-lived process that watches
    and drops paths over and over must not grow). ``read_and_delivered``: each thread read
    the path and ran a handler before it was stopped, and what it was doing is not kept
    either."""
    path = tmp_path / "c.json"
    write_text(path, "v0")
    ended: list[weakref.ref] = []
    for i in range(4):
        calls = register(listener, vclock, path, f"h{i}")
        if worked:
            write_text(path, f"v{i + 1}")
            poll(vclock)
            assert calls.contents == [f"v{i}", f"v{i + 1}"], (
                f"cycle {i}: the handler got {calls.contents}, expected ['v{i}', 'v{i + 1}'] "
                f"[FL-7]")
        (thread,) = monitor_threads()
        ended.append(weakref.ref(thread))
        del thread
        listener.unregister_file_listener(str(path), f"h{i}")
    gc.collect()
    kept = sum(1 for ref in ended if ref() is not None)
    cycles = "cycles whose threads read the path and ran a handler" if worked else "cycles"
    assert kept <= 1, (f"after 4 stop/start {cycles} the listener keeps {kept} ended monitor "
                       f"threads, expected at most 1 [FL-7]")


@pytest.mark.clause("FL-7")
def test_unregister_from_the_monitor_thread(rt, no_thread_leak, listener, vclock,
                                            tmp_path) -> None:
    path = tmp_path / "c.json"

    def leave(content: str) -> None:
        listener.unregister_file_listener(str(path), "leaver")

    register(listener, vclock, path, "leaver", leave)
    write_text(path, "bye")
    vclock.advance(1_000_000)
    wait_until(lambda: not listener.is_running(),
               "is_running() to turn False after a handler unregistered the last path: "
               "unregister from a handler did not stop the thread [FL-7]", timeout_s=5.0)
    listener.close()                  # joins the thread that stopped itself
    assert monitor_threads() == [], "close() did not join a self-stopped thread [FL-7]"


@pytest.mark.clause("FL-7")
def test_unregister_while_a_handler_uses_the_listener(rt, no_thread_leak, listener, vclock,
                                                      tmp_path) -> None:
    """AntMan joins under the listener lock: a handler taking that lock then deadlocks."""
    path = tmp_path / "c.json"
    in_handler, go, done = threading.Event(), threading.Event(), threading.Event()

    def handler(content: str) -> None:
        if content != "trigger":
            return
        in_handler.set()
        go.wait(5)
        listener.register_file_listener(str(tmp_path / "side"), "side", Calls())
        listener.unregister_file_listener(str(tmp_path / "side"), "side")
        done.set()

    register(listener, vclock, path, "h", handler)
    write_text(path, "trigger")
    vclock.advance(1_000_000)
    assert in_handler.wait(5), "the change was not delivered [FL-7]"
    t = threading.Thread(target=listener.unregister_file_listener, args=(str(path), "h"),
                         name="unregistering", daemon=True)
    t.start()
    # FL-1: is_running() is False as soon as the thread is asked to stop, so once it turns
    # False the unregister has reached its stop-and-join (where AntMan deadlocks). It is
    # asked on a probe thread: an is_running() that waits for the lock the unregister holds
    # while it joins fails here instead of hanging the test.

    def stopped() -> bool:
        probe, answer = run_in_thread(listener.is_running, "is-running-probe")
        assert joined(probe), ("is_running() blocked while unregister_file_listener joined "
                               "the monitor thread: the join holds the listener lock [FL-7]")
        assert "error" not in answer, f"is_running() raised {answer.get('error')!r} [FL-7]"
        return not answer["result"]

    wait_until(stopped,
               "unregister_file_listener of the last path to ask the thread to stop [FL-1]",
               timeout_s=5.0)
    go.set()
    assert joined(t), "unregister_file_listener deadlocked with a running handler [FL-7]"
    assert done.is_set(), "the handler could not use the listener during unregister [FL-6]"


@pytest.mark.clause("FL-8")
def test_restart_after_stop(rt, no_thread_leak, listener, vclock, tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, "v1")
    register(listener, vclock, path, "h")
    listener.unregister_file_listener(str(path), "h")
    assert not listener.is_running(), "[FL-8]"
    cb = register(listener, vclock, path, "h2")
    assert listener.is_running(), "registering after a stop did not restart [FL-8]"
    assert cb.contents == ["v1"], \
        f"re-registering a dropped path did not deliver its content: {cb.contents} [FL-8]"
    write_text(path, "v2")
    poll(vclock)
    assert cb.contents == ["v1", "v2"], f"the restarted thread delivered {cb.contents} [FL-8]"


@pytest.mark.clause("FL-9")
def test_directory_at_path(rt, listener, vclock, config_writer, caplog) -> None:
    caplog.set_level(logging.WARNING)
    config_writer.replace_with_directory()
    cb = register(listener, vclock, config_writer.path)
    poll(vclock, 7)
    assert cb.calls == [], "a directory at the path was delivered [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(config_writer.path))
    assert len(warnings) == 1, \
        f"a directory at the path logged {len(warnings)} warnings, expected 1 [FL-9]"
    message = warnings[0].getMessage().replace(str(config_writer.path), "<path>")  # its name
    assert names_the_word(message, "directory"), \
        f"the warning for a directory at the path does not say it is one: {message!r} [FL-9]"
    assert listener.is_running(), "[FL-9]"
    config_writer.delete()
    text = config_writer.write(perf=30)
    poll(vclock)
    assert cb.contents == [text], f"the file replacing the directory delivered {cb.contents} [FL-9]"


@pytest.mark.clause("FL-9")
def test_fifo_is_never_opened(rt, listener, vclock, tmp_path, caplog) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    caplog.set_level(logging.WARNING)
    path = tmp_path / "fifo"
    os.mkfifo(path)
    cb = register(listener, vclock, path)        # would block for ever if it opened the FIFO
    poll(vclock, 2)
    assert cb.calls == [], "a FIFO was delivered [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(path))
    assert len(warnings) == 1, \
        f"a FIFO at the path logged {len(warnings)} warnings, expected 1 [FL-9]"
    message = warnings[0].getMessage().replace(str(path), "<path>").lower()   # its name
    assert names_the_word(message, "fifo", "pipe"), (
        f"the warning for a FIFO at the path does not say it is one: {message!r} [FL-9]")


@pytest.mark.clause("FL-9")
def test_socket_at_path_is_named(rt, listener, vclock, tmp_path, caplog, monkeypatch) -> None:
    """A UNIX socket at the path (which open() refuses) is reported as a socket."""
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no UNIX sockets on this platform")
    caplog.set_level(logging.WARNING)
    monkeypatch.chdir(tmp_path)                  # bound by a short relative name
    path = tmp_path / "gpu_config.json"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path.name)
        cb = register(listener, vclock, path)
        poll(vclock, 2)
    finally:
        server.close()
    assert cb.calls == [], "a socket was delivered [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(path))
    assert len(warnings) == 1, \
        f"a socket at the path logged {len(warnings)} warnings, expected 1 [FL-9]"
    message = warnings[0].getMessage().replace(str(path), "<path>").lower()   # its name
    assert names_the_word(message, "socket"), (
        f"the warning for a socket at the path does not say it is one: {message!r} [FL-9]")


@pytest.mark.clause("FL-9")
@pytest.mark.parametrize("kind", ["character", "block"])
def test_device_at_path_is_named(rt, listener, vclock, tmp_path, caplog, monkeypatch,
                                 kind) -> None:
    """A device at the path is never delivered and its one warning names its kind: a
    character device (a symbolic link to /dev/null: stat follows it), a block device
    (simulated: a regular file whose ``os.stat`` says it is one, since many hosts, containers
    among them, have no block device a test may use)."""
    path = tmp_path / "gpu_config.json"
    if kind == "character":
        device = "/dev/null"
        if not hasattr(os, "symlink") or not os.path.exists(device):
            pytest.skip("no /dev/null on this platform")
        os.symlink(device, path)
    else:
        write_text(path, "a block device's bytes")
        real = os.stat

        def stat(p, *args, **kwargs):
            st = real(p, *args, **kwargs)
            if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(path):
                return os.stat_result((stat_module.S_IFBLK | 0o600,) + tuple(st)[1:])
            return st

        monkeypatch.setattr(os, "stat", stat)
    caplog.set_level(logging.WARNING)
    cb = register(listener, vclock, path)
    poll(vclock, 2)
    assert cb.calls == [], f"a {kind} device was delivered [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(path))
    assert len(warnings) == 1, \
        f"a {kind} device at the path logged {len(warnings)} warnings, expected 1 [FL-9]"
    message = warnings[0].getMessage().replace(str(path), "<path>").lower()   # its name
    assert names_the_word(message, f"{kind} device"), (
        f"the warning for a {kind} device at the path does not say it is one: {message!r} "
        f"[FL-9]")


class FrozenStat:
    """``os.stat`` of ``path`` answers ``frozen`` (when set) while a regular file is there: a
    file system whose timestamps are too coarse to show a rewrite, and whose rewrite kept the
    inode and size, shows the signature of the last read (FL-3's simulation). The content
    read is the real one; ``os.fstat`` is not changed."""

    def __init__(self, monkeypatch, path) -> None:
        self.path, self.frozen = str(path), None
        real = os.stat

        def stat(p, *args, **kwargs):
            st = real(p, *args, **kwargs)
            if self.frozen is not None and isinstance(p, (str, os.PathLike)) \
                    and os.fspath(p) == self.path and not args and not kwargs \
                    and stat_module.S_ISREG(st.st_mode):
                return self.frozen
            return st

        monkeypatch.setattr(os, "stat", stat)


@pytest.mark.clause("FL-4")
def test_a_recreated_file_is_read_at_the_next_check(rt, listener, vclock, tmp_path,
                                                    monkeypatch) -> None:
    """A deleted file re-created with new content is delivered at the next check, also where
    it shows the signature of the file read before the deletion (a coarse file system reusing
    the inode): the deletion forgets that signature."""
    path = tmp_path / "c.json"
    write_text(path, "v1")
    cb = register(listener, vclock, path)
    stat = FrozenStat(monkeypatch, path)
    stat.frozen = os.stat(path)                            # the signature of the last read
    path.unlink()
    poll(vclock)
    write_text(path, "v2")
    poll(vclock)                                           # 2 s after the last read
    assert cb.contents == ["v1", "v2"], (
        f"a file re-created after a check found it missing, showing the last read's stat "
        f"signature, delivered {cb.contents[1:]} at the next check, expected ['v2'] [FL-4]")


def _refuse_open(path, error: type[OSError], errno_: int):
    real = os.open

    def refusing(p, *args, **kwargs):
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(path):
            raise error(errno_, os.strerror(errno_), str(path))
        return real(p, *args, **kwargs)
    return refusing


def _of_path(path, fd: int) -> bool:
    """``fd`` is open on the file at ``path`` now."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def _same_file(st: os.stat_result, path) -> bool:
    try:
        return os.path.samestat(st, os.stat(path))
    except OSError:
        return False


def _fstat_says_fifo(path):
    real = os.fstat

    def fstat(fd, *args, **kwargs):
        st = real(fd, *args, **kwargs)
        if _same_file(st, path):                           # swapped in after the check
            return os.stat_result((stat_module.S_IFIFO | 0o644,) + tuple(st)[1:],
                                  {"st_atime_ns": st.st_atime_ns, "st_mtime_ns": st.st_mtime_ns,
                                   "st_ctime_ns": st.st_ctime_ns})
        return st
    return fstat


def _read_fails(path):
    real = os.read

    def read(fd, *args, **kwargs):
        if _of_path(path, fd):
            raise OSError(5, os.strerror(5))
        return real(fd, *args, **kwargs)
    return read


#: A problem found after the stat check -> (the function of ``os`` it replaces, its fault).
READ_FAULTS = {
    "open_enoent": ("open", lambda p: _refuse_open(p, FileNotFoundError, 2)),
    "open_eacces": ("open", lambda p: _refuse_open(p, PermissionError, 13)),
    "fstat_fifo": ("fstat", _fstat_says_fifo),
    "read_eio": ("read", _read_fails),
}


@pytest.mark.clause("FL-9")
@pytest.mark.parametrize("fault", sorted(READ_FAULTS))
def test_after_a_failed_read_the_next_content_is_delivered(rt, listener, vclock, tmp_path,
                                                           monkeypatch, caplog, fault) -> None:
    """A change whose read fails (the file vanishes or is refused at its open, a FIFO is
    swapped in after the check, the read fails) is no read: the next content, delivered at
    the next check, also where the file then shows the signature of the last read again (a
    coarse file system, a rewrite back to the same size in place). A read refused, of a FIFO
    or failing logs one warning naming the path."""
    caplog.set_level(logging.WARNING)
    path = tmp_path / "c.json"
    write_text(path, "v1")
    cb = register(listener, vclock, path)
    last_read = os.stat(path)
    stat = FrozenStat(monkeypatch, path)
    write_text(path, "v22")                                # a changed signature
    name, make = READ_FAULTS[fault]
    real = getattr(os, name)
    monkeypatch.setattr(os, name, make(path))
    poll(vclock)
    monkeypatch.setattr(os, name, real)
    assert cb.contents == ["v1"], f"{fault}: a failed read delivered {cb.contents[1:]} [FL-9]"
    if fault != "open_enoent":                             # a file gone is FL-4's
        warnings = runtime_records(caplog, rt, containing=str(path))
        assert len(warnings) == 1, \
            f"{fault}: a failed read logged {len(warnings)} warnings, expected 1 [FL-9]"
    write_text(path, "v3")
    stat.frozen = last_read                                # the last read's signature again
    poll(vclock)
    assert cb.contents == ["v1", "v3"], (
        f"{fault}: after a check whose read failed, the next content, showing the stat "
        f"signature of the last read, delivered {cb.contents[1:]} at the next check, "
        f"expected ['v3'] [FL-9]")


@pytest.mark.clause("FL-9")
def test_a_check_failing_otherwise_is_logged_and_the_thread_goes_on(rt, listener, vclock,
                                                                    tmp_path, monkeypatch,
                                                                    caplog) -> None:
    """A check on the monitor thread that fails with an exception that is no OSError (a
    ``MemoryError`` from the read of the changed file: simulated) delivers nothing and logs
    an error naming the path; the thread goes on and the content is delivered at the first
    check whose read succeeds."""
    caplog.set_level(logging.ERROR)
    path = tmp_path / "c.json"
    write_text(path, "v1")
    cb = register(listener, vclock, path)
    write_text(path, "v22")
    real = os.read

    def read(fd, *args, **kwargs):
        if threading.current_thread().name == THREAD and _of_path(path, fd):
            raise MemoryError()
        return real(fd, *args, **kwargs)

    monkeypatch.setattr(os, "read", read)
    poll(vclock)
    monkeypatch.setattr(os, "read", real)
    assert cb.contents == ["v1"], f"a check whose read failed delivered {cb.contents[1:]} [FL-9]"
    errors = runtime_records(caplog, rt, logging.ERROR, containing=str(path))
    assert len(errors) >= 1, (
        "a check failing with a MemoryError logged no error naming the path [FL-9]")
    assert listener.is_running(), "a check failing with a MemoryError ended the thread [FL-9]"
    poll(vclock)
    assert cb.contents == ["v1", "v22"], (
        f"after a check that failed with a MemoryError, the next check delivered "
        f"{cb.contents[1:]}, expected ['v22'] [FL-9]")


@pytest.mark.clause("FL-9")
def test_after_a_directory_the_next_content_is_delivered(rt, listener, vclock, config_writer,
                                                         monkeypatch) -> None:
    """A file that replaces a directory at the path is delivered at the next check, also
    where it shows the signature of the last read (a coarse file system)."""
    config_writer.write(perf=40)
    cb = register(listener, vclock, config_writer.path)
    stat = FrozenStat(monkeypatch, config_writer.path)
    stat.frozen = os.stat(config_writer.path)
    config_writer.replace_with_directory()
    poll(vclock)
    config_writer.delete()
    text = config_writer.write(perf=41)
    poll(vclock)
    assert cb.contents[1:] == [text], (
        f"a file replacing a directory, showing the last read's stat signature, delivered "
        f"{cb.contents[1:]} at the next check, expected its content [FL-9]")


@pytest.mark.clause("FL-9")
def test_non_utf8_content(rt, listener, vclock, config_writer, caplog) -> None:
    caplog.set_level(logging.WARNING)
    config_writer.write(perf=40)
    cb = register(listener, vclock, config_writer.path)
    config_writer.write_non_utf8()
    poll(vclock, 8)
    assert len(cb.calls) == 1, f"non-UTF-8 content was delivered: {cb.contents[1:]} [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(config_writer.path))
    assert len(warnings) == 1, f"non-UTF-8 content logged {len(warnings)} warnings [FL-9]"
    text = config_writer.write(perf=41)
    poll(vclock)
    assert cb.contents[1:] == [text], f"the next valid content delivered {cb.contents[1:]} [FL-9]"


def above_then_at_the_size_limit(rt, vclock, config_writer, caplog, *, above: int,
                                 count_warnings: bool) -> None:
    """A listener with ``max_file_bytes=4096``: a file of ``above`` bytes is not delivered
    (one warning, when ``count_warnings``), then one of exactly 4096 bytes is (FL-9)."""
    caplog.set_level(logging.WARNING)
    with rt.FileListener(clock=vclock, max_file_bytes=4096) as fl:
        config_writer.write(perf=40)
        cb = register(fl, vclock, config_writer.path)
        config_writer.write_large(perf=50, size=above)
        poll(vclock, 2)
        assert len(cb.calls) == 1, \
            f"a file of {above} bytes, above max_file_bytes = 4096, was delivered [FL-9]"
        if count_warnings:
            warnings = runtime_records(caplog, rt, containing=str(config_writer.path))
            assert len(warnings) == 1, \
                f"a file above max_file_bytes logged {len(warnings)} warnings, expected 1 [FL-9]"
            message = warnings[0].getMessage().replace(str(config_writer.path), "<path>")
            assert names_identifier(message, str(above)) \
                and names_identifier(message, "4096"), (
                    f"the warning for a file of {above} bytes, above max_file_bytes = 4096, "
                    f"does not name its size and the limit: {message!r} [FL-9]")
        text = config_writer.write_large(perf=60, size=4096)
        poll(vclock)
        assert cb.contents[1:] == [text], \
            "a file of exactly max_file_bytes was not delivered [FL-9]"


@pytest.mark.clause("FL-9")
def test_file_above_the_size_limit(rt, vclock, config_writer, caplog) -> None:
    above_then_at_the_size_limit(rt, vclock, config_writer, caplog, above=8192,
                                 count_warnings=True)


@pytest.mark.clause("FL-9")
@pytest.mark.parametrize("good", ["new", "delivered again", "deleted"])
def test_a_problem_that_comes_back_is_logged_again(rt, listener, vclock, config_writer,
                                                   caplog, good) -> None:
    """Non-UTF-8 content, then a good version (a new one, delivered, or the one delivered
    last, found equal and not delivered) or no file at all (found missing at a check), then
    the same non-UTF-8 content: each ends the first episode, so the problem is logged
    twice."""
    caplog.set_level(logging.WARNING)
    config_writer.write(perf=40)
    cb = register(listener, vclock, config_writer.path)
    config_writer.write_non_utf8()
    poll(vclock, 3)
    if good == "deleted":
        config_writer.delete()
    else:
        text = config_writer.write(perf=41 if good == "new" else 40)
    poll(vclock)
    config_writer.write_non_utf8()
    poll(vclock, 3)
    warnings = runtime_records(caplog, rt, containing=str(config_writer.path))
    assert len(warnings) == 2, (
        f"non-UTF-8 content, a good version ({good}), then non-UTF-8 content again logged "
        f"{len(warnings)} warnings, expected 2 (two episodes) [FL-9]")
    if good == "new":                # (whether an equal content is delivered is FL-3's)
        assert cb.contents[1:] == [text], f"delivered {cb.contents[1:]} [FL-9]"


@pytest.mark.clause("FL-9")
def test_size_limit_is_inclusive(rt, vclock, config_writer, caplog) -> None:
    above_then_at_the_size_limit(rt, vclock, config_writer, caplog, above=4097,
                                 count_warnings=False)


@pytest.mark.clause("FL-9")
def test_a_file_above_the_size_limit_is_not_opened_again_unchanged(rt, vclock, config_writer,
                                                                  monkeypatch) -> None:
    """The check that finds a file above ``max_file_bytes`` counts as its read (FL-3): the
    next checks, 1, 2 and 3 s later with the file unchanged, do not open it again."""
    opened: list[str] = []
    real_open = os.open

    def counting_open(p, *args, **kwargs):
        if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(config_writer.path):
            opened.append(os.fspath(p))
        return real_open(p, *args, **kwargs)

    with rt.FileListener(clock=vclock, max_file_bytes=4096) as fl:
        config_writer.write(perf=40)
        cb = register(fl, vclock, config_writer.path)
        config_writer.write_large(perf=50, size=8192)
        poll(vclock)                                       # finds the file above the limit
        monkeypatch.setattr(os, "open", counting_open)
        try:
            poll(vclock, 3)
        finally:
            monkeypatch.undo()
        assert len(cb.calls) == 1, "a file above max_file_bytes was delivered [FL-9]"
        assert opened == [], (
            f"a file above max_file_bytes, unchanged since the check that found it so, was "
            f"opened {len(opened)} times by the next 3 checks, within the content check "
            f"interval, expected 0 [FL-9]")


@pytest.mark.clause("FL-9")
def test_default_size_limit_is_64_mib(rt, vclock, tmp_path) -> None:
    """Without ``max_file_bytes`` the limit is 64 MiB, inclusive: a (sparse) file of NUL
    bytes, valid UTF-8, of exactly 64 MiB is delivered, one of 64 MiB + 1 byte is not."""
    limit = 64 << 20
    at, above = tmp_path / "at.json", tmp_path / "above.json"
    for path, size in ((at, limit), (above, limit + 1)):
        with open(path, "wb") as f:
            f.truncate(size)
    with rt.FileListener(clock=vclock) as fl:
        sizes: list[tuple[str, int]] = []
        for path in (at, above):
            fl.register_file_listener(str(path), "h",
                                      lambda c, p=path.name: sizes.append((p, len(c))))
        wait_for_poller(vclock)
    assert sizes == [("at.json", limit)], (
        f"with the default max_file_bytes, files of 64 MiB and 64 MiB + 1 byte delivered "
        f"{sizes} (name, characters), expected only the first, whole [FL-9]")


@pytest.mark.clause("FL-9")
def test_a_path_that_cannot_be_stat_ed_is_not_delivered(rt, listener, vclock, tmp_path,
                                                        caplog) -> None:
    """A path under a regular file (``stat`` fails with ENOTDIR, not ENOENT) cannot be
    read: nothing is delivered, on registration or at a check, and one warning names it."""
    caplog.set_level(logging.WARNING)
    (tmp_path / "plain").write_text("not a directory")
    path = tmp_path / "plain" / "c.json"
    cb = register(listener, vclock, path)
    poll(vclock, 2)
    assert cb.calls == [], f"a path stat cannot read delivered {cb.contents} [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(path))
    assert len(warnings) == 1, \
        f"a path stat cannot read logged {len(warnings)} warnings, expected 1 [FL-9]"
    assert listener.is_running(), "[FL-9]"


@pytest.mark.clause("FL-9")
def test_a_file_that_cannot_be_opened_is_not_delivered(rt, listener, vclock, tmp_path,
                                                       caplog, monkeypatch) -> None:
    """A regular file whose open fails with a permission error (simulated: the suite may
    run as root) delivers nothing, on registration or at a check, logs one warning, and
    its content is delivered at the first check after it can be opened again."""
    caplog.set_level(logging.WARNING)
    path = tmp_path / "c.json"
    write_text(path, "v1")
    real_open = os.open

    def refusing_open(p, *args, **kwargs):
        if os.fspath(p) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    cb = register(listener, vclock, path)
    poll(vclock, 2)
    monkeypatch.setattr(os, "open", real_open)
    assert cb.calls == [], f"a file that cannot be opened delivered {cb.contents} [FL-9]"
    warnings = runtime_records(caplog, rt, containing=str(path))
    assert len(warnings) == 1, \
        f"a file that cannot be opened logged {len(warnings)} warnings, expected 1 [FL-9]"
    poll(vclock)
    assert cb.contents == ["v1"], \
        f"once it could be opened, the file delivered {cb.contents}, expected ['v1'] [FL-9]"


@pytest.mark.clause("FL-9")
def test_size_limit_holds_for_content_beyond_the_size_stat_gives(rt, vclock, tmp_path,
                                                                  caplog) -> None:
    """A /proc file has a stat size of 0 whatever it holds: the limit applies to the bytes
    read, so its content of n bytes is not delivered with max_file_bytes 0 or n - 1 (not even
    cut to the limit) and is with n."""
    target = "/proc/version"
    if not os.path.isfile(target) or os.stat(target).st_size != 0:
        pytest.skip(f"needs {target}, a regular file whose stat size is 0")
    with open(target, "rb") as f:
        content = f.read()
    path = tmp_path / "c.json"
    os.symlink(target, path)
    caplog.set_level(logging.WARNING)
    control = tmp_path / "control.json"
    control.write_text("", encoding="utf-8")
    for limit in (0, len(content) - 1, len(content)):
        caplog.clear()
        with rt.FileListener(clock=vclock, max_file_bytes=limit) as fl:
            # What is delivered at registration is FL-5's: a small regular file first.
            seen = Calls()
            fl.register_file_listener(str(control), "control", seen)
            precondition_holds("FL-5", seen.contents == [""],
                               "an empty regular file's content is delivered at registration")
            caplog.clear()
            cb = Calls()
            fl.register_file_listener(str(path), "h", cb)
        if limit < len(content):
            assert cb.contents == [], (
                f"{target} ({len(content)} bytes, stat size 0) was delivered with "
                f"max_file_bytes {limit}: {[len(c) for c in cb.contents]} characters [FL-9]")
            warned = runtime_records(caplog, rt, logging.WARNING, containing=str(path))
            assert len(warned) == 1, (
                f"{target} above max_file_bytes {limit} logged {len(warned)} warnings naming "
                f"{path}, expected 1 [FL-9]")
        else:
            assert cb.contents == [content.decode("utf-8")], (
                f"{target} of exactly max_file_bytes ({limit}) bytes delivered "
                f"{[len(c) for c in cb.contents]} characters, expected its {len(content)} "
                f"[FL-9]")


@pytest.mark.clause("FL-9")
def test_reading_stops_past_the_size_limit_of_a_file_without_end(rt, no_thread_leak, vclock,
                                                                 tmp_path, caplog) -> None:
    """/proc/self/pagemap has a stat size of 0 and holds 8 bytes for every page of the
    address space (read in multiples of 8): with max_file_bytes 7 a check reads 8 bytes and
    finds it above the limit, at once; reading on to its end would not end."""
    target = "/proc/self/pagemap"
    try:
        with open(target, "rb", buffering=0) as f:
            readable = len(f.read(8)) == 8 and os.fstat(f.fileno()).st_size == 0
    except OSError:
        readable = False
    if not readable:
        pytest.skip(f"needs {target}, readable, with a stat size of 0")
    path = tmp_path / "c.json"
    os.symlink(tmp_path / "missing", path)           # missing at registration (FL-4)
    caplog.set_level(logging.WARNING)
    with rt.FileListener(clock=vclock, max_file_bytes=7) as fl:
        cb = register(fl, vclock, path)
        swap = tmp_path / "swap"
        os.symlink(target, swap)
        os.replace(swap, path)
        vclock.advance(1_000_000)
        try:
            vclock.settle(timeout_s=3.0)
        except SettleTimeout:
            raise AssertionError(
                f"the check of {target} with max_file_bytes 7 did not end within 3 s: the "
                f"read went on past max_file_bytes + 1 bytes [FL-9]") from None
        assert cb.contents == [], f"{target} was delivered with max_file_bytes 7 [FL-9]"
        warned = runtime_records(caplog, rt, logging.WARNING, containing=str(path))
        assert len(warned) == 1, (
            f"{target} above max_file_bytes 7 logged {len(warned)} warnings naming {path}, "
            f"expected 1 [FL-9]")


@pytest.mark.clause("FL-10")
def test_rapid_rewrites_deliver_the_last_version(rt, listener, vclock, config_writer) -> None:
    config_writer.write(perf=1)
    cb = register(listener, vclock, config_writer.path)
    last = config_writer.rapid_rewrites([{"perfControl": p} for p in range(2, 52)])
    poll(vclock)
    assert cb.contents[-1] == last, \
        f"after 50 rapid rewrites the last delivery was {cb.contents[-1]!r} [FL-10]"
    assert len(cb.calls) == 2, f"{len(cb.calls) - 1} deliveries for one check [FL-10]"


@pytest.mark.clause("FL-10", "FL-3")
def test_torn_write_then_completion(rt, listener, vclock, config_writer) -> None:
    config_writer.write(perf=10)
    cb = register(listener, vclock, config_writer.path)
    partial = config_writer.write_torn(perf=20, limits={"3b:00.0": 1 << 20})
    poll(vclock)
    config_writer.finish_torn()
    poll(vclock)
    assert cb.contents[1] == partial, "the torn content was not what was read [FL-3]"
    assert cb.contents[-1] == config_writer.path.read_text(), \
        "the completed write was not delivered [FL-10]"


@pytest.mark.clause("FL-11")
def test_close_is_idempotent_and_restartable(rt, no_thread_leak, listener, vclock,
                                             tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, "v")
    register(listener, vclock, path)
    listener.close()
    listener.close()
    assert not listener.is_running() and monitor_threads() == [], \
        "close() did not stop and join [FL-11]"
    write_text(path, "w")
    cb = register(listener, vclock, path, "again")
    assert cb.contents == ["w"], "registering after close() did not start afresh [FL-11]"


@pytest.mark.clause("FL-11")
def test_close_from_a_handler_ends_the_round(rt, no_thread_leak, listener, vclock, tmp_path,
                                             caplog) -> None:
    """A handler of a.json closes the listener at a check; b.json, after it in path order,
    became a directory since the last check: the round ends with the close, so b.json is not
    checked and nothing is logged about it."""
    caplog.set_level(logging.WARNING)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_text(a, "v1")

    def closing(content: str) -> None:
        if content == "close":
            listener.close()

    register(listener, vclock, a, "closer", closing)
    register(listener, vclock, b, "hb")              # missing: nothing logged (FL-4)
    write_text(a, "close")
    b.mkdir()
    caplog.clear()
    poll(vclock)
    wait_until(lambda: not monitor_threads(), "the monitor thread to end after a handler "
               "closed the listener [FL-11]", timeout_s=5.0)
    about_b = runtime_records(caplog, rt, logging.WARNING, containing=str(b))
    assert not about_b, (
        f"after a handler of {a.name} closed the listener, the same check went on to "
        f"{b.name}: {[r.getMessage()[:200] for r in about_b]} [FL-11]")


class _ClockPausingOneRead:
    """A virtual clock whose first reading (``now_us``) on the thread named ``thread_name``
    waits until ``release`` is set: a registration on that thread is held inside its read
    of the path (FL-5), after the path was found and before anything is delivered."""

    def __init__(self, inner: VirtualClock, thread_name: str) -> None:
        self.inner, self.thread_name = inner, thread_name
        self.paused, self.release = threading.Event(), threading.Event()

    def now_us(self) -> int:
        if threading.current_thread().name == self.thread_name and not self.paused.is_set():
            self.paused.set()
            self.release.wait(SETTLE_TIMEOUT_S)
        return self.inner.now_us()

    def __getattr__(self, name: str) -> Any:     # time_s, wait, sleep_us: the inner clock's
        return getattr(self.inner, name)


@pytest.mark.clause("FL-11")
def test_close_during_a_registrations_read_leaves_it_nothing_to_deliver(
        rt, no_thread_leak, vclock, tmp_path) -> None:
    """A registration reads its path (FL-5); close() is called on another thread while that
    read is under way and returns; the read then ends with the content: the handler close()
    removed is not called (the registration returns without an error)."""
    path = tmp_path / "c.json"
    write_text(path, "v1")
    clock = _ClockPausingOneRead(vclock, "registrar")
    fl = rt.FileListener(clock=clock, poll_interval_s=1.0)
    cb = Calls()
    try:
        reg, out = run_in_thread(lambda: fl.register_file_listener(str(path), "h", cb),
                                 name="registrar")
        if not clock.paused.wait(SETTLE_TIMEOUT_S):
            assert joined(reg), "register_file_listener did not return [FL-5]"
            pytest.skip("the check holds a registration inside its read at its clock "
                        "reading; this runtime's registration read no clock")
        closer, closed = run_in_thread(fl.close, name="closer")
        assert joined(closer), ("close() did not return while a registration was reading "
                                "its path [FL-11]")
        assert "error" not in closed, f"close() raised {closed.get('error')!r} [FL-11]"
        clock.release.set()
        assert joined(reg), "the registration did not return once its read went on [FL-5]"
        assert "error" not in out, (f"the registration interrupted by close() raised "
                                    f"{out.get('error')!r} [FL-11]")
        assert cb.calls == [], (
            f"close() returned during a registration's read, then that registration called "
            f"the handler close() had removed: {cb.calls} [FL-11]")
    finally:
        clock.release.set()
        fl.close()


@pytest.mark.clause("FL-11")
def test_global_listener_is_a_singleton(rt) -> None:
    assert rt.global_file_listener() is rt.global_file_listener(), \
        "global_file_listener() returned two listeners [FL-11]"


@pytest.mark.clause("FL-11")
def test_global_listener_is_a_file_listener(rt) -> None:
    listener = rt.global_file_listener()
    assert isinstance(listener, rt.FileListener), (
        f"global_file_listener() returned {listener!r}, not a FileListener [FL-11]")


@pytest.mark.clause("FL-11")
def test_the_global_listener_is_made_under_a_lock(rt, monkeypatch) -> None:
    """The first calls of ``global_file_listener()`` check for the listener and make it under
    one lock, so that two threads calling it at once get the same listener. Forced, not hoped
    for: the reference's module lock is watched (fixtures/interleave.py), the listener is not
    made yet, and some line of the call must run with the lock held."""
    import sys
    from fixtures.interleave import lock_held_in, watch_lock
    module = sys.modules.get(getattr(rt.global_file_listener, "__module__", ""), None)
    if module is None or not hasattr(module, "_global_listener"):
        pytest.skip("the check follows the reference's design (a module-level _global_listener "
                    "made on the first call); this runtime has none")
    watched = watch_lock(monkeypatch, module, "_global_lock", "the global listener's lock")
    monkeypatch.setattr(module, "_global_listener", None)      # the first call, again
    made, held = lock_held_in(rt.global_file_listener, "global_file_listener", watched)
    made.close()
    if not held:
        pytest.skip("the check follows the reference's design; this runtime's "
                    "global_file_listener ran no line of its own")
    assert any(held), (f"global_file_listener() ran {len(held)} line(s), none with its lock "
                       f"held: two threads calling it at once can each make a listener, and "
                       f"one of them watches files nobody else sees [FL-11]")


@pytest.mark.clause("FL-2", "CLK-2")
def test_real_clock_by_default(rt, no_thread_leak, tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, "v1")
    got = threading.Event()
    seen: list[str] = []

    def cb(content: str) -> None:
        seen.append(content)
        if content == "v2":
            got.set()

    with rt.FileListener(poll_interval_s=0.02) as fl:
        fl.register_file_listener(str(path), "h", cb)
        write_text(path, "v2")
        assert got.wait(10), f"no delivery within 10 s on the real clock: {seen} [FL-2]"


# -- exact accounting at the microsecond boundary ---------------------------------------------

def freeze_stat(monkeypatch, path) -> None:
    """From now on ``os.stat(path)`` keeps answering the signature ``path`` has now
    (``FrozenStat``; ``monkeypatch.undo()`` ends it)."""
    frozen = os.stat(path)
    FrozenStat(monkeypatch, path).frozen = frozen


@pytest.mark.clause("FL-3")
def test_content_check_interval_counts_from_the_last_read(rt, no_thread_leak, tmp_path,
                                                          monkeypatch) -> None:
    """On a clock that reads one hour at the start, not 0: with an unchanged stat signature,
    the checks 1 to 5 s after the registration's read do not read the path again (5 s is
    not more than the interval), the check at 6 s does. The age of a read is the clock's
    time since it, whatever the clock read when it was made."""
    clock = VirtualClock(start_us=3_600_000_000, settle_timeout_s=SETTLE_TIMEOUT_S)
    path = tmp_path / "c.json"
    write_text(path, "old")
    with rt.FileListener(clock=clock, poll_interval_s=1.0) as fl:
        cb = register(fl, clock, path)                    # the last read, at 3 600 s
        freeze_stat(monkeypatch, path)
        try:
            write_text(path, "new")
            poll(clock, 5)
            assert cb.contents == ["old"], (
                f"with the clock started at 3 600 s, the checks 1 to 5 s after the last read "
                f"delivered {cb.contents[1:]} with an unchanged stat signature: the content "
                f"is read again only when more than 5 s passed since the last read [FL-3]")
            poll(clock)
            assert cb.contents == ["old", "new"], (
                f"the check 6 s after the last read delivered {cb.contents[1:]}, expected "
                f"['new'] [FL-3]")
        finally:
            monkeypatch.undo()


@pytest.mark.clause("FL-3")
@pytest.mark.parametrize("age_offset_us", [-1, 0, 1])
def test_content_check_interval_to_the_microsecond(rt, listener, vclock, tmp_path, monkeypatch,
                                                   age_offset_us: int) -> None:
    """A path whose stat signature does not change (a file system whose timestamps are too
    coarse to show a rewrite, simulated by a stat that keeps answering the signature of the
    last read) is read again at the first check more than 5 s (5 000 000 µs, strict) after its
    last read: at 5 000 001 µs, not at 5 000 000. A check comes when the clock passes the
    poll wait's deadline, at the clock's time then: three 1 s polls, then one advance of
    2 000 000 + ``age_offset_us`` µs, make a check 5 000 000 + ``age_offset_us`` µs after
    the registration's read."""
    path = tmp_path / "c.json"
    write_text(path, "old")
    cb = register(listener, vclock, path)                 # the last read of path
    freeze_stat(monkeypatch, path)
    try:
        write_text(path, "new")
        poll(vclock, 3)                                   # checks 1, 2 and 3 s after the read
        assert cb.contents == ["old"], (
            f"delivered {cb.contents[1:]} before the content check interval passed, with an "
            f"unchanged stat signature [FL-3]")
        vclock.tick(2_000_000 + age_offset_us)            # a check at 5 000 000 + offset µs
        expected = ["old", "new"] if age_offset_us > 0 else ["old"]
        assert cb.contents == expected, (
            f"at a check {5_000_000 + age_offset_us} µs after the last read, delivered "
            f"{cb.contents[1:]}, expected {expected[1:]}: the content is read again only when "
            f"more than 5 000 000 µs passed [FL-3]")
    finally:
        monkeypatch.undo()


# -- argument edges ---------------------------------------------------------------------------

@pytest.mark.clause("FL-9")
@pytest.mark.parametrize("bad", [-1, -(1 << 40), True, False, 4096.0, float("nan"), "4096", None])
def test_bad_max_file_bytes_is_rejected(rt, bad) -> None:
    with pytest.raises(ValueError) as info:
        rt.FileListener(max_file_bytes=bad)
    assert names_identifier(info.value, "max_file_bytes"), \
        f"max_file_bytes={bad!r}: the ValueError {info.value!r} does not name the argument [FL-9]"


@pytest.mark.clause("FL-9")
def test_max_file_bytes_zero_delivers_only_an_empty_file(rt, no_thread_leak, vclock,
                                                         tmp_path) -> None:
    path = tmp_path / "c.json"
    write_text(path, "x")
    with rt.FileListener(clock=vclock, max_file_bytes=0) as fl:
        cb = register(fl, vclock, path)
        assert cb.contents == [], f"max_file_bytes=0 delivered {cb.contents} [FL-9]"
        write_text(path, "")
        poll(vclock)
        assert cb.contents == [""], \
            f"max_file_bytes=0: an empty file must be deliverable, got {cb.contents} [FL-9]"


@pytest.mark.clause("FL-3")
@pytest.mark.parametrize("bad", [0, -1.0, -5, float("nan"), float("inf"), float("-inf"), True,
                                 "5", None])
def test_bad_content_check_interval_is_rejected(rt, bad) -> None:
    with pytest.raises(ValueError) as info:
        rt.FileListener(content_check_interval_s=bad)
    assert names_identifier(info.value, "content_check_interval_s"), (
        f"content_check_interval_s={bad!r}: the ValueError {info.value!r} does not name the "
        f"argument [FL-3]")


@pytest.mark.clause("FL-2")
@pytest.mark.parametrize("bad", [0, -1, float("-inf"), True, False, None, "1.0"])
def test_bad_poll_interval_names_the_argument(rt, bad) -> None:
    with pytest.raises(ValueError) as info:
        rt.FileListener(poll_interval_s=bad)
    assert names_identifier(info.value, "poll_interval_s"), (
        f"poll_interval_s={bad!r}: the ValueError {info.value!r} does not name the argument "
        f"[FL-2]")


@pytest.mark.clause("FL-3")
@pytest.mark.parametrize("interval_s,age_offset_us", [(2e-6, 0), (2e-6, 1), (1e-7, 0),
                                                      (1e-7, 1)])
def test_short_content_check_interval_to_the_microsecond(rt, no_thread_leak, vclock, tmp_path,
                                                         monkeypatch, interval_s: float,
                                                         age_offset_us: int) -> None:
    """content_check_interval_s=2e-6 is 2 µs, 1e-7 rounds up to 1 µs (never 0): a check that
    many µs after the last read does not read again, one µs later does."""
    interval_us = max(1, round(interval_s * 1_000_000))
    path = tmp_path / "c.json"
    write_text(path, "old")
    with rt.FileListener(clock=vclock, poll_interval_s=1e-6,
                         content_check_interval_s=interval_s) as fl:
        cb = register(fl, vclock, path)
        freeze_stat(monkeypatch, path)
        try:
            write_text(path, "new")
            vclock.tick(interval_us + age_offset_us)      # one check, at that age
            expected = ["old", "new"] if age_offset_us > 0 else ["old"]
            assert cb.contents == expected, (
                f"content_check_interval_s={interval_s}: a check {interval_us + age_offset_us}"
                f" µs after the last read delivered {cb.contents[1:]}, expected "
                f"{expected[1:]} [FL-3]")
        finally:
            monkeypatch.undo()
