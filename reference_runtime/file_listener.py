"""FileListener: one monitor thread that calls handlers when watched files change (SPEC.md, FL).

AntMan's ``file_listener.{h,cc}``, with its races and deadlocks removed:

- One thread (``antman-file-listener``) polls every watched path every ``poll_interval_s``
  (1 s by default) through the injected clock; it starts with the first registration and
  stops when the last handler is unregistered.
- A path is read when its stat signature (mtime, size, inode, ctime) changed since the
  last read, or when ``content_check_interval_s`` (5 s) passed since the last read. A read
  is delivered when its content hash differs from the last delivered content; the hash is
  taken of the very bytes handed to the handlers (one read).
- Handlers receive the whole content as ``str`` (strict UTF-8), in registration order,
  and run without the listener's lock: they may register and unregister handlers.
- Registering a path that is not watched yet reads it at once and, when it exists,
  delivers its content to that handler before ``register_file_listener`` returns.
- Missing paths, non-regular files, unreadable files, non-UTF-8 content and files larger
  than ``max_file_bytes`` are never delivered; each problem is logged once per episode.
- Reading never blocks: the path is opened with ``O_NONBLOCK`` and its type and size are
  checked on the opened descriptor, whose bytes are the ones delivered (a FIFO swapped in
  after the stat, or a file whose read would wait, is a problem, not a hang).
- ``close()`` and the last ``unregister_file_listener`` wait at most ``CLOSE_TIMEOUT_S``
  (2 s) for the thread; a thread still in a handler or a read after that is reported and
  left to end when that call returns, delivering nothing more.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat as stat_module
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

from .clock import REAL_CLOCK, Clock
from .env import checked_path
from .log_text import quote

__all__ = ["FileListener", "global_file_listener", "THREAD_NAME",
           "DEFAULT_POLL_INTERVAL_S", "CONTENT_CHECK_INTERVAL_S", "DEFAULT_MAX_FILE_BYTES",
           "CLOSE_TIMEOUT_S"]

log = logging.getLogger(__name__)

THREAD_NAME = "antman-file-listener"
DEFAULT_POLL_INTERVAL_S = 1.0        # kSleepIntervalInUs
CONTENT_CHECK_INTERVAL_S = 5.0       # kFileContentCheckTimeoutInSec (strict >)
DEFAULT_MAX_FILE_BYTES = 64 << 20
CLOSE_TIMEOUT_S = 2.0                # close() and the last unregister wait at most this (FL-12)
_WAITING = "waiting for its next check"     # what a monitor thread in its clock wait does


@dataclass
class _Watch:
    """One watched path: its handlers and what was last read and delivered."""

    path: str
    handlers: list[tuple[str, Callable[[str], object]]] = field(default_factory=list)
    scan_lock: threading.Lock = field(default_factory=threading.Lock)
    signature: tuple[int, int, int, int] | None = None   # stat of the last read
    last_read_us: int = 0
    delivered: bytes | None = None       # digest of the last delivered content
    problem: str | None = None           # the problem last logged (log once per episode)


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def _kind(mode: int) -> str:
    for test, name in ((stat_module.S_ISDIR, "a directory"), (stat_module.S_ISFIFO, "a FIFO"),
                       (stat_module.S_ISCHR, "a character device"),
                       (stat_module.S_ISBLK, "a block device"),
                       (stat_module.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return f"file type {stat_module.S_IFMT(mode):#o}"


# Opening never blocks (a FIFO or a device swapped in after the check), never makes a
# terminal the controlling one, and the descriptor is not inherited by child processes.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC     # POSIX
_READ_CHUNK = 1 << 20


class FileListener:
    """Watches files and calls their handlers with the new content."""

    def __init__(self, *, clock: Clock | None = None,
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
                 content_check_interval_s: float = CONTENT_CHECK_INTERVAL_S,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        for what, value in (("poll_interval_s", poll_interval_s),
                            ("content_check_interval_s", content_check_interval_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not value > 0 or value != value or value == float("inf"):
                raise ValueError(f"{what} must be a positive finite number of seconds, "
                                 f"got {value!r}")
        if not isinstance(max_file_bytes, int) or isinstance(max_file_bytes, bool) \
                or max_file_bytes < 0:
            raise ValueError(f"max_file_bytes must be a non-negative int, got {max_file_bytes!r}")
        self._clock = clock if clock is not None else REAL_CLOCK
        self.poll_interval_us = max(1, round(poll_interval_s * 1_000_000))
        self.content_check_interval_us = max(1, round(content_check_interval_s * 1_000_000))
        self.max_file_bytes = max_file_bytes
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        # the monitor thread started and not asked to stop, with the event that stops it
        self._running: tuple[threading.Thread, threading.Event] | None = None
        self._stopped: list[threading.Thread] = []     # stopped threads not joined yet
        # not ended within CLOSE_TIMEOUT_S; weak: a thread that ended and was dropped from
        # _stopped is forgotten here too
        self._given_up: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
        # what each monitor thread does, from its start; weak: an ended thread dropped from
        # _running and _stopped is forgotten here too
        self._activity: weakref.WeakKeyDictionary[threading.Thread, str] = \
            weakref.WeakKeyDictionary()

    # -- public API ------------------------------------------------------------------
    def register_file_listener(self, path: str | os.PathLike, handler_name: str,
                               callback: Callable[[str], object]) -> None:
        """Add a handler for ``path`` (duplicate names allowed)."""
        if not callable(callback):
            raise TypeError(f"register_file_listener({path!r}, {handler_name!r}): "
                            f"callback is not callable")
        path = checked_path(path, "register_file_listener: the path")
        with self._lock:
            watch = self._watches.get(path)
            created = watch is None
            if created:
                watch = _Watch(path)
                self._watches[path] = watch
            watch.handlers.append((handler_name, callback))
            self._start_locked()
        log.info("registered file listener %s on %s", quote(handler_name), quote(path, 4096))
        if created:
            with watch.scan_lock:
                content = self._read_if_changed(watch)
                if content is not None:
                    self._deliver(watch, content)

    def unregister_file_listener(self, path: str | os.PathLike, handler_name: str) -> None:
        """Remove the first handler of ``path`` named ``handler_name``; no-op when absent."""
        path = os.fspath(path)
        with self._lock:
            watch = self._watches.get(path)
            if watch is None:
                log.debug("unregister_file_listener(%s, %s): path not watched",
                          quote(path, 4096), quote(handler_name))
                return
            for i, (name, _) in enumerate(watch.handlers):
                if name == handler_name:
                    del watch.handlers[i]
                    break
            else:
                log.debug("unregister_file_listener(%s, %s): no such handler",
                          quote(path, 4096), quote(handler_name))
                return
            if not watch.handlers:
                del self._watches[path]
            if self._watches:
                return
            self._stop_locked()
        self._join_stopped()

    def is_running(self) -> bool:
        """True while a monitor thread is started and not asked to stop."""
        with self._lock:
            return self._running is not None and self._running[0].is_alive()

    def close(self) -> None:
        """Drop every handler, stop the monitor thread and join it (idempotent)."""
        with self._lock:
            self._watches.clear()
            self._stop_locked()
        self._join_stopped()

    def __enter__(self) -> "FileListener":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- thread management -------------------------------------------------------------
    def _start_locked(self) -> None:
        if self._running is not None:
            return
        stop = threading.Event()
        thread = threading.Thread(target=self._poll, args=(stop,), name=THREAD_NAME,
                                  daemon=True)
        self._activity[thread] = _WAITING
        self._running = thread, stop
        thread.start()

    def _stop_locked(self) -> None:
        if self._running is None:
            return
        thread, stop = self._running
        stop.set()
        self._stopped.append(thread)
        self._running = None

    def _join_stopped(self) -> None:
        """Join stopped monitor threads, never the calling thread itself, waiting at most
        ``CLOSE_TIMEOUT_S`` in all (FL-12): a thread that does not end by then (a handler
        that does not return, a read the system does not end) is reported once and left to
        end when that call returns; it delivers nothing more."""
        me = threading.current_thread()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        with self._lock:
            pending = [t for t in self._stopped if t is not me and t not in self._given_up]
        for t in pending:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                with self._lock:
                    self._given_up.add(t)
                    doing = self._activity[t]
                log.error("file listener: the monitor thread did not end within %g s of "
                          "close (it is %s); it ends when that call returns and delivers "
                          "nothing more", CLOSE_TIMEOUT_S, doing)
        with self._lock:
            self._stopped = [t for t in self._stopped if t.is_alive()]   # joined: dropped

    def _doing(self, what: str) -> None:
        """Record what the calling monitor thread is doing (named if close() gives up)."""
        me = threading.current_thread()
        with self._lock:
            self._activity[me] = what

    def _poll(self, stop: threading.Event) -> None:
        while not self._clock.wait(stop, self.poll_interval_us):
            with self._lock:
                watches = [self._watches[p] for p in sorted(self._watches)]
            for watch in watches:
                if stop.is_set():
                    return
                # A path being read by a registration right now is skipped this round.
                if not watch.scan_lock.acquire(blocking=False):
                    continue
                try:
                    self._doing(f"reading {quote(watch.path, 4096)}")
                    content = self._read_if_changed(watch, stop=stop)
                    if content is not None and not stop.is_set():
                        self._deliver(watch, content, stop)
                except BaseException:  # a check failing otherwise (FL-9): the thread goes on
                    log.exception("file listener: scanning %s failed", quote(watch.path, 4096))
                finally:
                    watch.scan_lock.release()
            self._doing(_WAITING)

    # -- reading and delivering --------------------------------------------------------
    def _problem(self, watch: _Watch, reason: str) -> None:
        if watch.problem != reason:
            watch.problem = reason
            log.warning("file listener: %s: %s; not delivered", quote(watch.path, 4096), reason)

    def _read_if_changed(self, watch: _Watch,
                         stop: threading.Event | None = None) -> str | None:
        """The new content of ``watch`` when it changed since the last delivery, else None.

        Called with ``watch.scan_lock`` held. The path is checked with ``stat`` (a path
        that is not a regular file is never opened), then opened without blocking
        (``O_NONBLOCK``: a FIFO or device swapped in since the check, or a file whose read
        would wait, cannot stop the thread) and checked again on the opened descriptor,
        whose bytes are the ones read, hashed and delivered (FL-13).
        """
        try:
            st = os.stat(watch.path)
        except FileNotFoundError:
            watch.signature = None
            watch.problem = None        # a missing file is not a problem; it never fires
            return None
        except OSError as exc:
            self._problem(watch, f"cannot stat ({exc.strerror or exc})")
            return None
        if not stat_module.S_ISREG(st.st_mode):
            self._problem(watch, f"not a regular file ({_kind(st.st_mode)})")
            watch.signature = None
            return None
        now = self._clock.now_us()
        if _signature(st) == watch.signature \
                and now - watch.last_read_us <= self.content_check_interval_us:
            return None
        try:
            fd = os.open(watch.path, _OPEN_FLAGS)
        except FileNotFoundError:
            watch.signature = None
            return None
        except OSError as exc:
            watch.signature = None
            self._problem(watch, f"cannot open ({exc.strerror or exc})")
            return None
        try:
            st = os.fstat(fd)
            if not stat_module.S_ISREG(st.st_mode):
                watch.signature = None
                self._problem(watch, f"not a regular file ({_kind(st.st_mode)})")
                return None
            sig = _signature(st)
            if st.st_size > self.max_file_bytes:
                watch.signature, watch.last_read_us = sig, now
                self._problem(watch, f"{st.st_size} bytes exceeds the limit of "
                                     f"{self.max_file_bytes} bytes")
                return None
            data = self._read_descriptor(fd, stop)
        except OSError as exc:
            watch.signature = None
            self._problem(watch, f"cannot read ({exc.strerror or exc})")
            return None
        finally:
            os.close(fd)
        if data is None:                 # stopped while reading
            return None
        watch.signature, watch.last_read_us = sig, now
        if len(data) > self.max_file_bytes:
            self._problem(watch, f"content exceeds the limit of {self.max_file_bytes} bytes")
            return None
        digest = hashlib.blake2b(data).digest()
        if digest == watch.delivered:
            watch.problem = None
            return None
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._problem(watch, f"content is not valid UTF-8 (byte {data[exc.start]:#04x} "
                                 f"at offset {exc.start})")
            return None
        watch.delivered = digest
        watch.problem = None
        return content

    def _read_descriptor(self, fd: int, stop: threading.Event | None) -> bytes | None:
        """At most ``max_file_bytes + 1`` bytes of ``fd``, in chunks; None when ``stop`` was
        set between two chunks (a close() does not wait for the rest of a large file)."""
        chunks: list[bytes] = []
        left = self.max_file_bytes + 1
        while left:                      # never below 0: a read returns at most left bytes
            if stop is not None and stop.is_set():
                return None
            chunk = os.read(fd, min(left, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _deliver(self, watch: _Watch, content: str,
                 stop: threading.Event | None = None) -> None:
        """Call the handlers of ``watch`` in registration order, without ``self._lock``;
        none after the thread was asked to stop."""
        with self._lock:
            if self._watches.get(watch.path) is not watch:
                return
            handlers = list(watch.handlers)
        for name, callback in handlers:
            if stop is not None:
                if stop.is_set():
                    return
                self._doing(f"running the handler {quote(name)} of {quote(watch.path, 4096)}")
            try:
                callback(content)
            except Exception:
                log.exception("file listener: handler %s of %s raised", quote(name),
                              quote(watch.path, 4096))
            except BaseException:
                if stop is None:       # the registering thread's own (FL-5): its caller's
                    raise
                # On the monitor thread SystemExit or KeyboardInterrupt would end the thread
                # silently and every later change would be ignored (FL-6).
                log.exception("file listener: handler %s of %s raised", quote(name),
                              quote(watch.path, 4096))

    def __repr__(self) -> str:
        return (f"FileListener(paths={sorted(self._watches)}, "
                f"poll_interval_us={self.poll_interval_us})")


_global_lock = threading.Lock()
_global_listener: FileListener | None = None


def global_file_listener() -> FileListener:
    """The process-wide listener on the real clock (``FileListener::GlobalFileListener``)."""
    global _global_listener
    with _global_lock:
        if _global_listener is None:
            _global_listener = FileListener()
        return _global_listener
