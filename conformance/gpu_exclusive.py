"""Each GPU test has the GPU to itself: a host-wide lock held from its setup to its teardown.

xdist's ``--dist loadgroup`` sends the tests of the ``gpu`` group to one worker, but only
where the installed pytest lets xdist rename a test's node ID (pytest-xdist 3.8 with pytest
9.2 does not: the group is silently ignored and GPU tests run at once on several workers, a
co-tenant taking the memory another test is about to allocate). Two suite runs on one runner,
as CI services schedule them, would disturb each other the same way. So exclusivity does not
rest on the scheduler: every test marked ``gpu`` takes an exclusive ``flock`` on one lock file
of the host before its setup and releases it after its teardown.

The wait for the lock is outside the per-test limit (the hook wraps pytest-timeout's), so a
test queued behind others is not reported TIMEOUT for their time; it has a bound of its own
(``ANTMAN_GPU_LOCK_WAIT_S``, default ``DEFAULT_WAIT_S``), after which the test fails naming
the process and the test that held the GPU. The lock file is ``$ANTMAN_GPU_LOCK`` or
``<tmp>/antman-conformance-gpu-<uid>.lock``, opened without following a symbolic link (a link
planted in a shared temporary folder is refused, not written through).
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_ENV_VAR = "ANTMAN_GPU_LOCK"
WAIT_ENV_VAR = "ANTMAN_GPU_LOCK_WAIT_S"
DEFAULT_WAIT_S = 1800.0          # 13 GPU tests, each bounded by the 120 s per-test limit
POLL_S = 0.05
MAX_HOLDER_BYTES = 4096


class GpuLockTimeout(RuntimeError):
    """The GPU stayed held by another test for longer than the wait's bound."""


def lock_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    explicit = env.get(LOCK_ENV_VAR, "").strip()
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"antman-conformance-gpu-{os.getuid()}.lock"


def wait_bound_s(environ: dict[str, str] | None = None) -> float:
    """``$ANTMAN_GPU_LOCK_WAIT_S`` when it is a finite positive number, else the default."""
    env = os.environ if environ is None else environ
    raw = env.get(WAIT_ENV_VAR, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        return DEFAULT_WAIT_S
    return value if math.isfinite(value) and value > 0 else DEFAULT_WAIT_S


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GpuLockTimeout(f"GPU lock {path} is a symbolic link; refusing to use it "
                                 f"(set {LOCK_ENV_VAR} to a path of your own)") from None
        raise


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, MAX_HOLDER_BYTES)
        info = json.loads(raw.decode("utf-8", "replace") or "{}")
        return f"pid {info.get('pid')!r} running {str(info.get('test'))[:300]!r}"
    except (OSError, ValueError, AttributeError):
        return "an unknown holder"


@contextmanager
def gpu_exclusive(test: str, *, path: Path | None = None, wait_s: float | None = None,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[float]:
    """Hold the host's GPU lock for ``test``; yields the seconds spent waiting for it."""
    path = lock_path() if path is None else path
    bound = wait_bound_s() if wait_s is None else wait_s
    fd = _open(path)
    try:
        start = clock()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = clock() - start
                if waited >= bound:
                    raise GpuLockTimeout(
                        f"waited {waited:.0f} s for the GPU, held by {_holder(fd)} "
                        f"(lock {path}; bound {WAIT_ENV_VAR}={bound:g} s)") from None
                sleep(POLL_S)
        waited = clock() - start
        record = json.dumps({"pid": os.getpid(), "test": test}).encode()[:MAX_HOLDER_BYTES]
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        try:
            yield waited
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
