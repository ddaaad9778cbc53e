"""GPUStatistics: step durations and GPU memory figures dumped to a JSON file (SPEC.md, STAT).

AntMan's ``gpu_statistics.{h,cc}``, a POST_SESSION_RUN action at phase 1, enabled by a
status file path (``GPU_STATUS_FILE``). After each successful step it records the step's
duration in a per-graph window and, on the first run, at most every 10 s, or on a huge
change (x10 against the oldest entry of the window), re-checks the averaged durations and
the VMem allocators' figures; when something moved it rewrites the file, atomically.
The file's layout is the original's; its JSON Schema is ``schemas/gpu_status.schema.json``.
A symlink at the path is followed; anything else that is not a regular file is never
replaced. Temporary files are held under ``flock`` while written, and the first dump of an
instance removes those of writers that died mid-write.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import json
import logging
import os
import stat as stat_module
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from .clock import REAL_CLOCK, Clock
from .device import get_pci_bus_id
from .env import ENV_DEFAULT, path_from_env
from .log_text import quote
from .session_run_action_registry import (SessionRunAction,
                                                           SessionRunActionOptions)

__all__ = ["GPUStatistics", "AllocatorStatus", "STATUS_FILE_ENV_VAR",
           "GPU_STATISTICS_INTERVAL_S", "MAX_RECORD_INTERVAL_S", "DURATION_STATISTICS_NUM_SESS",
           "DURATION_HUGE_CHANGE_THRESHOLD", "PHASE", "ENV_DEFAULT", "MAX_GRAPHS"]

log = logging.getLogger(__name__)

STATUS_FILE_ENV_VAR = "GPU_STATUS_FILE"
GPU_STATISTICS_INTERVAL_S = 10
MAX_RECORD_INTERVAL_S = 100
DURATION_STATISTICS_NUM_SESS = 10         # the window holds at most this minus one entries
DURATION_HUGE_CHANGE_THRESHOLD = 10
# duration_statistics_threshold = 0.01: |cur - last| * 100 >= last
PHASE = 1
MAX_GRAPHS = 256          # graphs whose window and stored duration are held (STAT-2)



@dataclass
class AllocatorStatus:
    """One VMem GPU's figures (``GPUVMemAllocatorStatus``)."""

    gpu_pci_bus_id: str
    allocator: Any
    deviceMemUsedMax: int = 0
    deviceMemUsedMin: int = 0
    deviceMemPoolSize: int = 0
    deviceMemStable: int = 0
    hostMemUsedMax: int = 0
    hostMemUsedMin: int = 0
    hostMemPoolSize: int = 0

    FIELDS = ("deviceMemUsedMax", "deviceMemUsedMin", "deviceMemPoolSize", "deviceMemStable",
              "hostMemUsedMax", "hostMemUsedMin", "hostMemPoolSize")

    def figures(self) -> tuple[int, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)

    def update(self) -> None:
        from .bfc_allocator import BFCAllocator
        from .gpu_adjustable_allocator import GPUAdjustableAllocator
        device = self.allocator.device_allocator
        host = self.allocator.host_allocator
        ds = device.get_stats()
        if ds is not None:
            self.deviceMemUsedMax = ds.peak_bytes_in_use
            self.deviceMemUsedMin = ds.bytes_in_use
        hs = host.get_stats()
        if hs is not None:
            self.hostMemUsedMax = hs.peak_bytes_in_use
            self.hostMemUsedMin = hs.bytes_in_use
            self.hostMemPoolSize = hs.bytes_limit or 0
        if isinstance(device, BFCAllocator):
            pool = GPUAdjustableAllocator().get_mem_pool_stats(device)
            self.deviceMemPoolSize = pool.pool_bytes
            self.deviceMemStable = pool.stable_bytes
        else:
            log.error("the device allocator of %s is not a BFC allocator; pool figures skipped",
                      self.gpu_pci_bus_id)

    def swap_reason(self) -> str:
        """"" without host use; "OOM" when demand exceeded the pool; else "FRAGMENT"."""
        if self.hostMemUsedMax == 0:
            return ""
        if self.deviceMemUsedMax + self.hostMemUsedMax > self.deviceMemPoolSize:
            return "OOM"
        return "FRAGMENT"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f: int(getattr(self, f)) for f in self.FIELDS}
        out["deviceMemUsedNvidia"] = -1
        out["swapReason"] = self.swap_reason()      # derived from the figures above
        return out


@dataclass
class _Duration:
    recording_time: int      # clock.time_s() of the newest window entry it was computed from
    duration: int            # µs


class GPUStatistics(SessionRunAction):
    """The statistics action (``"GPUStatistics"``, POST phase 1)."""

    def __init__(self, status_file: str | os.PathLike | None = ENV_DEFAULT, *,
                 clock: Clock | None = None) -> None:
        self.status_file = path_from_env(status_file, STATUS_FILE_ENV_VAR)
        self.enabled = bool(self.status_file)
        self._clock = clock if clock is not None else REAL_CLOCK
        self._record_lock = threading.Lock()
        self._check_lock = threading.Lock()
        self._histories: dict[int, collections.deque[tuple[int, int]]] = {}
        self._durations: dict[int, _Duration] = {}
        self._statuses: list[AllocatorStatus] = []
        self._last_write: int | None = None
        self._last_error: str | None = None
        self._swept = False                  # stale temporaries removed (first dump)

    # -- the action --------------------------------------------------------------------
    def run_action(self, options: SessionRunActionOptions) -> None:
        if not self.enabled:
            return
        graph_id = int(options.graph_id)
        duration = int(options.sess_duration_us)     # in [0, 2^64-1] (REG-9)
        huge = self.record_session_run_duration(graph_id, duration)
        if not self.should_check_gpu_statistics() and not huge:
            return
        with self._check_lock:
            dur_flag = self.check_session_run_duration(graph_id, duration)
            stat_flag = self.check_gpu_vmem_allocator_statistics(options.device_mgr)
            if dur_flag or stat_flag:
                self.dump_gpu_statistics()
            self._last_write = self._clock.time_s()

    def should_check_gpu_statistics(self) -> bool:
        last = self._last_write
        return last is None or self._clock.time_s() - last >= GPU_STATISTICS_INTERVAL_S

    def record_session_run_duration(self, graph_id: int, duration: int) -> bool:
        """Add to the graph's window; True on a huge change against its oldest entry."""
        now = self._clock.time_s()
        with self._record_lock:
            history = self._histories.pop(graph_id, None)   # re-inserted: most recent last
            if history is None:
                self._histories[graph_id] = collections.deque([(now, duration)])
                while len(self._histories) > MAX_GRAPHS:     # forget the least recently run
                    del self._histories[next(iter(self._histories))]
                return False
            self._histories[graph_id] = history
            oldest = history[0][1]
            history.append((now, duration))
            if len(history) >= DURATION_STATISTICS_NUM_SESS:
                history.popleft()
        k = DURATION_HUGE_CHANGE_THRESHOLD
        return duration > oldest * k or oldest > duration * k

    def check_session_run_duration(self, graph_id: int, duration: int) -> bool:
        """Re-average every recent window; True when a graph is new or its mean moved 1 %."""
        now = self._clock.time_s()
        with self._record_lock:
            windows = [(g, list(h)) for g, h in self._histories.items()]
        held = {g for g, _ in windows}
        for g in [g for g in self._durations if g not in held]:
            del self._durations[g]             # a graph forgotten by the bound (STAT-2)
        if graph_id not in self._durations:
            self._durations[graph_id] = _Duration(now, duration)
            return True
        changed = False
        for g, window in windows:
            recording_time = window[-1][0]
            if now - recording_time >= MAX_RECORD_INTERVAL_S:
                continue
            cur = sum(d for _, d in window) // len(window)
            stored = self._durations.get(g)       # None: never stored, as last = 0
            self._durations[g] = _Duration(recording_time, cur)
            if stored is None or abs(cur - stored.duration) * 100 >= stored.duration:
                changed = True
        return changed

    def check_gpu_vmem_allocator_statistics(self, device_mgr: Any) -> bool:
        """Update every VMem GPU's figures; True when any of the 7 figures changed."""
        if not self._statuses:
            self._find_allocators(device_mgr)
        changed = False
        for status in self._statuses:
            old = status.figures()
            status.update()
            if status.figures() != old:
                changed = True
        return changed

    def _find_allocators(self, device_mgr: Any) -> None:
        from .gpu_vmem_allocator import GPUVMemAllocator
        if device_mgr is None:
            log.error("GPUStatistics: no device manager; allocator figures unavailable")
            return
        for device in device_mgr.list_devices():
            if str(device.device_type).upper() != "GPU":
                continue
            allocator = device.get_allocator()
            if isinstance(allocator, GPUVMemAllocator):
                bus = get_pci_bus_id(device.attributes.physical_device_desc)
                self._statuses.append(AllocatorStatus(bus, allocator))

    # -- the file ----------------------------------------------------------------------
    def statistics(self) -> dict[str, Any]:
        """The document the next dump would write."""
        now = self._clock.time_s()
        usage = {s.gpu_pci_bus_id: s.to_json() for s in self._statuses} or None
        durations: dict[str, int] = {}
        max_duration = 0
        for g, entry in self._durations.items():
            durations[f"graph_{g}"] = entry.duration
            if entry.duration > max_duration and now - entry.recording_time < MAX_RECORD_INTERVAL_S:
                max_duration = entry.duration
        return {"Durations": durations, "gpuUsageInfo": usage,
                "miniBatchDuration": max_duration}

    def dump_gpu_statistics(self) -> None:
        """Replace the status file atomically (temp file, fsync, rename); a failure is logged
        (once per distinct reason, STAT-8) and the step goes on.

        A symlink at the path is followed and its target replaced; anything at the
        (resolved) path that is not a regular file is left alone (STAT-9). The first dump
        of an instance removes temporary files left by writers that died (STAT-10).
        """
        text = json.dumps(self.statistics(), indent="\t", sort_keys=True) + "\n"
        try:
            target = _destination(self.status_file)
            if not self._swept:
                self._swept = True
                removed = _remove_stale_temporaries(target)
                if removed:
                    log.info("%s: removed %d temporary file(s) left by a writer that died",
                             quote(self.status_file, 4096), removed)
            _replace_atomically(target, text.encode("utf-8"))
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc.strerror or exc}"
            if reason != self._last_error:
                log.error("%s: cannot write the statistics file (%s)",
                          quote(self.status_file, 4096), reason)
            self._last_error = reason
            return
        self._last_error = None


# -- the status file on disk (STAT-8, STAT-9, STAT-10) --------------------------------------
_TEMP_SUFFIX = ".tmp"
_ATTEMPTS = 3          # a temporary removed by another instance's sweep is made again


def _kind(mode: int) -> str:
    for test, name in ((stat_module.S_ISDIR, "a directory"), (stat_module.S_ISFIFO, "a FIFO"),
                       (stat_module.S_ISCHR, "a character device"),
                       (stat_module.S_ISBLK, "a block device"),
                       (stat_module.S_ISSOCK, "a socket"),
                       (stat_module.S_ISLNK, "an unresolvable symlink")):
        if test(mode):
            return name
    return f"a file of type {stat_module.S_IFMT(mode):#o}"


_MAX_SYMLINK_HOPS = 40   # as the kernel's MAXSYMLINKS: more is a loop ("does not resolve")


def _check_protected(link: str, st: os.stat_result, directory: str) -> None:
    """The kernel's ``fs.protected_symlinks`` rule, applied by the runtime itself (it
    resolves the status path on its own, so the kernel's check never runs): a symlink in a
    sticky world-writable directory is followed only when it is owned by this process's
    user or by the directory's owner (STAT-9). Raises ``OSError(EACCES)`` otherwise."""
    dir_st = os.stat(directory)
    sticky_world_writable = (dir_st.st_mode & stat_module.S_ISVTX
                             and dir_st.st_mode & stat_module.S_IWOTH)
    if not sticky_world_writable or st.st_uid in (os.geteuid(), dir_st.st_uid):
        return
    raise OSError(errno.EACCES, f"{quote(link, 4096)} is a symlink owned by uid {st.st_uid} "
                                f"in the sticky world-writable directory "
                                f"{quote(directory, 4096)} (owner uid {dir_st.st_uid}), "
                                f"neither this process's user nor the directory's owner; "
                                f"it is not followed")


def _resolve(path: str) -> str:
    """``os.path.realpath(path)`` (non-strict), following each symlink met on the way only
    under the protected-symlinks rule of :func:`_check_protected`; ``..`` after a symlink
    leaves its target, as in the kernel (no lexical ``abspath`` first). A chain of more than
    ``_MAX_SYMLINK_HOPS`` symlinks resolves to the symlink where it stopped."""
    pending = os.path.join(os.getcwd(), path).split(os.sep)[::-1]   # ".." after a symlink
    resolved = os.sep
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if not os.path.isdir(resolved):       # as the kernel: no ".." out of a file
                raise OSError(errno.ENOTDIR, f"{quote(resolved, 4096)} is not a directory; "
                                             f"the status path goes on through it with ..")
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            st = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            return os.path.normpath(os.path.join(candidate, *reversed(pending)))
        if not stat_module.S_ISLNK(st.st_mode):
            resolved = candidate
            continue
        hops += 1
        if hops > _MAX_SYMLINK_HOPS:
            return os.path.normpath(os.path.join(candidate, *reversed(pending)))
        _check_protected(candidate, st, resolved)
        link = os.readlink(candidate)
        if os.path.isabs(link):
            resolved = os.sep
        pending.extend(link.split(os.sep)[::-1])
    return resolved


def _destination(status_file: str) -> str:
    """The file a dump replaces: the path with its symlinks resolved, when that is a
    regular file or does not exist. Anything else raises ``OSError`` (not replaced), as
    does a symlink the protected-symlinks rule forbids following (STAT-9)."""
    target = _resolve(status_file)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    if not stat_module.S_ISREG(st.st_mode):
        raise OSError(errno.EEXIST, f"{quote(target, 4096)} is {_kind(st.st_mode)}, not a "
                                    f"regular file; it is left as it is")
    return target


def _temporary_prefix(target: str) -> tuple[str, str]:
    """The directory of ``target`` (absolute, from :func:`_resolve`) and the name prefix of
    its temporary files."""
    directory, name = os.path.split(target)
    return directory, f".{name}."


def _replace_atomically(target: str, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``target`` holding an exclusive ``flock``
    (which marks it as being written), fsync it and rename it over ``target``."""
    directory, prefix = _temporary_prefix(target)
    for _ in range(_ATTEMPTS):
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=_TEMP_SUFFIX, dir=directory)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink == 0:
                continue              # removed as stale before the lock was taken: again
            os.fchmod(fd, 0o644)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.replace(tmp, target)
            tmp = None
            return
        finally:
            os.close(fd)              # releases the lock
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    raise OSError(errno.EAGAIN, f"the temporary file was removed {_ATTEMPTS} times while "
                                f"being written")


def _remove_stale_temporaries(target: str) -> int:
    """Remove ``.<name>.*.tmp`` beside ``target`` that no writer holds locked (STAT-10)."""
    directory, prefix = _temporary_prefix(target)
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(_TEMP_SUFFIX)):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW
                         | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat_module.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue              # a live writer holds it
            if os.lstat(entry.path).st_ino == st.st_ino:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            pass                      # gone meanwhile (another sweep) or not removable
        finally:
            os.close(fd)
    return removed
