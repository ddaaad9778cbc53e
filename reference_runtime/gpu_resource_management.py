"""GPUResourceManagement: memory limits and compute throttling from a config file (SPEC.md, RM).

AntMan's ``gpu_resource_management.{h,cc}``, a POST_SESSION_RUN action at phase 2:

- Enabled by a config file path (``GPU_CONFIG_FILE``); enabling forces
  ``TF_FORCE_GPU_ALLOW_GROWTH`` and ``TF_GPU_VMEM`` to ``"true"`` (so it must be built
  before the GPU allocators). A FileListener handler ``"GPUResourceManage"`` parses the file
  whenever its content changes, the content present at start-up included.
- ``gpuConfigInfo.<bus id>.maxDeviceMem`` (bytes) limits are applied at the next successful
  step boundary through ``GPUUsageAdjustment``; a shrink that falls short is retried at every
  later boundary until reached or superseded.
- ``perfControl`` (percent, 0..100) throttles: after each step the calling thread sleeps so
  that the step period is about ``compute * 100 / perf``; 0 suspends the step until a
  non-zero value arrives or the action is closed. The whole idle time of a period is slept
  after the step (AntMan also hands half of it to the next step's GpuOpManager as idle slots
  between GPU ops, which costs the job its host/GPU overlap: D-RM-12); idle time the executor
  spent inside a step (an idle budget given through ``set_estimated_idle_time``, spent by the
  GpuOpManager through ``spend_idle_time``) is not compute, and a sleep's oversleep, measured
  on the clock, shortens the next sleep, so that the period holds on a real clock too.

Every malformed input keeps the last good state and logs one line naming the file. The
document is read by ``bounded_json`` (at most 100 000 values, nothing kept beyond 64 levels,
numbers read exactly from their literal), so a hostile file costs no more than one at the
bounds; a bus
id that names no GPU is forgotten at the step boundary that finds it and logged once while
remembered; text from the file is quoted in log lines (``log_text.quote``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable
from numbers import Integral
from typing import Any

from .bounded_json import DEFAULT_MAX_DEPTH, DEFAULT_MAX_VALUES, JSONNumber
from .bounded_json import loads as bounded_loads
from .clock import REAL_CLOCK, Clock
from .env import ENV_DEFAULT, path_from_env
from .file_listener import FileListener, global_file_listener
from .log_text import quote
from .gpu_usage_adjustment import (AdjustOutcome, GPUUsageAdjustment, UINT64_MAX,
                                   gpu_bfc_allocators)
from .session_run_action_registry import (Grouping, SessionRunAction,
                                                           SessionRunActionOptions,
                                                           SessionRunActionRegistry)

__all__ = ["GPUResourceManagement", "CONFIG_FILE_ENV_VAR", "FILE_LISTENER_NAME", "FIXED_COST_US",
           "SUSPEND_RECHECK_US", "PHASE", "ENV_DEFAULT", "MAX_CONFIG_DEPTH", "MAX_CONFIG_VALUES",
           "MAX_BUS_IDS", "MAX_UNKNOWN_REMEMBERED"]

log = logging.getLogger(__name__)

CONFIG_FILE_ENV_VAR = "GPU_CONFIG_FILE"
FILE_LISTENER_NAME = "GPUResourceManage"
FIXED_COST_US = 50                  # fixed_cost in DoSleepOrSuspend
SUSPEND_RECHECK_US = 100_000        # a suspended step re-checks its session this often
PHASE = 2                           # POST_SESSION_RUN phase
MAX_CONFIG_DEPTH = DEFAULT_MAX_DEPTH     # nesting levels kept of a config document (RM-19)
MAX_CONFIG_VALUES = DEFAULT_MAX_VALUES   # values of a config document (RM-19)
#: The members of a config's root that it reads (RM-3): the others are read, not built (RM-19)
CONFIG_MEMBERS = frozenset({"gpuConfigInfo", "perfControl"})
MAX_BUS_IDS = 256                   # bus ids with a limit held at once (RM-20)
MAX_UNKNOWN_REMEMBERED = 256        # unknown bus ids remembered, each logged once (RM-20)
MAX_REASONS_LOGGED = 16             # reasons quoted in one warning (RM-5)


class _Reject(Exception):
    """A config value that is not accepted; the message is the reason."""


def _describe(value: Any) -> str:
    """A JSON value in a few characters: never the whole of a large value."""
    if isinstance(value, str):
        return f"a string ({quote(value)})"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, list):
        return f"an array of {len(value)} elements"
    if isinstance(value, dict):
        return f"an object of {len(value)} members"
    if value is None:
        return "null"
    return str(value)


# sign, integer part, fraction, exponent of a JSON number literal
_NUMBER_PARTS = re.compile(r"(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([-+]?[0-9]+))?")
_HUGE_EXPONENT = 10 ** 19      # stands for an exponent literal of more than 18 digits


def _uint(value: Any, what: str, upper: int) -> int:
    """A JSON number whose exact decimal value is an integer in [0, ``upper``] (RM-4).

    Read from the literal, in time proportional to its length: no conversion of a long
    literal, whatever its exponent (``1e400``, ``1e-99999999999999999999``, 5000 digits).
    """
    if not isinstance(value, JSONNumber):
        raise _Reject(f"{what} is {_describe(value)}, expected a non-negative integer")
    # a literal loads() read: RFC 8259's number, so it always matches
    m = _NUMBER_PARTS.fullmatch(value.text)
    sign, whole, fraction, exponent = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0                                    # zero, whatever its sign or exponent
    significant = digits.rstrip("0")
    if exponent is None:
        exp = 0
    elif len(exponent.lstrip("+-").lstrip("0")) > 18:
        exp = -_HUGE_EXPONENT if exponent.startswith("-") else _HUGE_EXPONENT
    else:
        exp = int(exponent)
    # value = significant * 10 ** shift
    shift = len(digits) - len(significant) + exp - len(fraction)
    if shift < 0:
        raise _Reject(f"{what} is {value}, not an integer")
    if sign:
        raise _Reject(f"{what} is {value}, negative")
    if len(significant) + shift > len(str(upper)):
        raise _Reject(f"{what} is {value}, above the maximum {upper}")
    number = int(significant) * 10 ** shift
    if number > upper:
        raise _Reject(f"{what} is {value}, above the maximum {upper}")
    return number


class _Problems:
    """The reasons a document was partly rejected: the first few, and how many in all."""

    def __init__(self) -> None:
        self.first: list[str] = []
        self.count = 0

    def add(self, reason: str) -> None:
        self.count += 1
        if len(self.first) < MAX_REASONS_LOGGED:
            self.first.append(reason)

    def __bool__(self) -> bool:
        return self.count > 0

    def __str__(self) -> str:
        text = "; ".join(self.first)
        more = self.count - len(self.first)
        return text + (f"; and {more} more" if more else "")


class GPUResourceManagement(SessionRunAction):
    """The resource-management action (``"GPUResourceManagement"``, POST phase 2)."""

    def __init__(self, config_file: str | os.PathLike | None = ENV_DEFAULT, *,
                 clock: Clock | None = None, file_listener: FileListener | None = None,
                 registry: SessionRunActionRegistry | None = None,
                 gpu_bus_ids: Iterable[str] = ()) -> None:
        self.config_file = path_from_env(config_file, CONFIG_FILE_ENV_VAR)
        self.enabled = bool(self.config_file)
        self.name = "GPUResourceManagement"
        self._clock = clock if clock is not None else REAL_CLOCK
        self._adjustment = GPUUsageAdjustment()
        self._manage_lock = threading.Lock()     # limits, pending, perf
        self._idle_lock = threading.Lock()       # idle-time and queued-op bookkeeping
        self._apply_lock = threading.Lock()      # one boundary applies limits at a time
        self._perf = 100
        self._limits: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._estimated_idle_us = 0
        self._total_time_slot_us = 0
        self._in_step_idle_us = 0                # idle the executor spent in the step (RM-14)
        self._oversleep_us = 0                   # the last throttle sleep's oversleep (RM-10)
        self._queued_op_num: dict[Any, int] = {}
        self._unknown: dict[str, None] = {}      # bus ids found to name no GPU (RM-20)
        # bus ids of this process's GPUs (given, or found at a boundary): an entry for one
        # is never the one the bound of RM-20 drops
        self._own_gpus = frozenset(gpu_bus_ids)
        self._known: frozenset[str] = self._own_gpus
        self._closed = threading.Event()
        self._suspended: set[threading.Event] = set()
        self._listener: FileListener | None = None
        if registry is not None:
            registry.register(Grouping.POST_SESSION_RUN, PHASE, self)
        if self.enabled:
            os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
            os.environ["TF_GPU_VMEM"] = "true"
            self._listener = file_listener if file_listener is not None \
                else global_file_listener()
            self._listener.register_file_listener(self.config_file, FILE_LISTENER_NAME,
                                                  self._on_config_changed)

    # -- config ------------------------------------------------------------------------
    def _on_config_changed(self, content: str) -> None:
        if not self._closed.is_set():
            self.parse_manage_info_from_json(content)

    def parse_manage_info_from_json(self, content: str | bytes) -> bool:
        """Apply a config document; True when every part of it was accepted.

        Invalid parts are ignored (their last good value stays) and reported in one log
        line naming the file; an unparsable document, one beyond the reader's value bound
        (RM-19) or a non-object root changes nothing.
        """
        source = quote(self.config_file or "<config>", 4096)
        try:
            if isinstance(content, (bytes, bytearray)):
                content = bytes(content).decode("utf-8")
            doc = bounded_loads(content, max_depth=MAX_CONFIG_DEPTH,
                                max_values=MAX_CONFIG_VALUES, members=CONFIG_MEMBERS)
        except ValueError as exc:             # JSONDecodeError, JSONBoundsError, UnicodeError
            reason = "empty" if isinstance(content, str) and not content.strip() \
                else f"unparsable JSON ({exc})" if isinstance(exc, json.JSONDecodeError) \
                else f"not UTF-8 ({exc.reason})" if isinstance(exc, UnicodeDecodeError) \
                else str(exc)
            log.warning("%s: config rejected: %s; keeping the last good state", source, reason)
            return False
        if not isinstance(doc, dict):
            log.warning("%s: config rejected: the root is %s, not an object; keeping the last "
                        "good state", source, _describe(doc))
            return False
        problems = _Problems()
        limits = self._parse_memory(doc, problems)
        perf = self._parse_perf(doc, problems)
        beyond = 0
        with self._manage_lock:
            known = self._known                # the GPUs' entries first: never beyond
            for bus_id, limit in sorted(limits.items(), key=lambda e: e[0] not in known):
                if bus_id not in self._limits and len(self._limits) >= MAX_BUS_IDS \
                        and not (bus_id in known and self._drop_one_unknown_locked()):
                    beyond += 1
                    continue
                self._limits[bus_id] = limit
                self._pending[bus_id] = limit
            if perf is not None and perf != self._perf:
                self._set_perf_locked(perf)
        if beyond:
            problems.add(f"{beyond} gpuConfigInfo entries for bus ids beyond the "
                         f"{MAX_BUS_IDS} held")
        if problems:
            log.warning("%s: ignored %s; keeping the last good values", source, problems)
            return False
        return True

    def _drop_one_unknown_locked(self) -> bool:
        """Make room for a GPU's entry (RM-20): drop the held entry longest held whose bus
        id is no known GPU's; False when every held entry is a GPU's."""
        victim = next((b for b in self._limits if b not in self._known), None)
        if victim is None:
            return False
        del self._limits[victim]
        self._pending.pop(victim, None)
        return True

    @staticmethod
    def _parse_memory(doc: dict, problems: _Problems) -> dict[str, int]:
        info = doc.get("gpuConfigInfo")
        if info is None:
            return {}
        if not isinstance(info, dict):
            problems.add(f"gpuConfigInfo: is {_describe(info)}, not an object")
            return {}
        limits: dict[str, int] = {}
        for key, entry in info.items():
            where = f"gpuConfigInfo[{quote(key)}]"
            if not isinstance(entry, dict):
                problems.add(f"{where}: is {_describe(entry)}, not an object")
                continue
            value = entry.get("maxDeviceMem")
            if value is None:
                continue
            try:
                limits[key] = _uint(value, f"{where}.maxDeviceMem", UINT64_MAX)
            except _Reject as exc:
                problems.add(str(exc))
        return limits

    @staticmethod
    def _parse_perf(doc: dict, problems: _Problems) -> int | None:
        value = doc.get("perfControl")
        if value is None:
            return None
        try:
            return _uint(value, "perfControl", 100)
        except _Reject as exc:
            problems.add(str(exc))
            return None

    def _set_perf_locked(self, perf: int) -> None:
        """A new value wakes the suspended steps: each re-checks and goes on, or waits
        again at 0 (RM-12)."""
        self._perf = perf
        self._wake_locked()

    @property
    def perf_control(self) -> int:
        """The current perfControl percentage (100 until a config sets it)."""
        return self._perf

    @property
    def memory_limits(self) -> dict[str, int]:
        """Bus id -> the last accepted ``maxDeviceMem`` (before clamping)."""
        with self._manage_lock:
            return dict(self._limits)

    # -- the action --------------------------------------------------------------------
    def run_action(self, options: SessionRunActionOptions) -> None:
        if not self.enabled or self._closed.is_set():
            return
        perf = self._perf                 # read once per step
        if self._pending:
            self._apply_limits(options.device_mgr)
        self._sleep_or_suspend(options.sess_duration_us, perf, options.session)

    def _apply_limits(self, device_mgr: Any) -> None:
        if device_mgr is None:
            return                                    # nothing to look in: stays pending
        with self._apply_lock:
            with self._manage_lock:
                pending = sorted(self._pending.items())
            gpus = gpu_bfc_allocators(device_mgr)
            self._known = self._own_gpus | frozenset(gpus)
            unknown: list[str] = []
            for bus_id, limit in pending:
                if bus_id not in gpus:
                    unknown.append(bus_id)
                    continue
                outcome = self._adjustment.adjust(bus_id, limit, device_mgr)
                if outcome is AdjustOutcome.FELL_SHORT:
                    continue                          # retried at the next boundary
                with self._manage_lock:
                    if self._pending.get(bus_id) == limit:   # not superseded meanwhile
                        del self._pending[bus_id]
            if unknown:
                self._forget_unknown(unknown)

    def _forget_unknown(self, bus_ids: list[str]) -> None:
        """Drop the limits of bus ids that name no GPU (RM-20): forgotten at once, logged in
        one line the first time each is found while remembered."""
        with self._manage_lock:
            for bus_id in bus_ids:
                self._pending.pop(bus_id, None)
                self._limits.pop(bus_id, None)
            new = [b for b in bus_ids if b not in self._unknown]
            for bus_id in bus_ids:                    # most recently found last
                self._unknown.pop(bus_id, None)
                self._unknown[bus_id] = None
            while len(self._unknown) > MAX_UNKNOWN_REMEMBERED:
                del self._unknown[next(iter(self._unknown))]
        if new:
            named = ", ".join(quote(b) for b in new[:MAX_REASONS_LOGGED])
            more = len(new) - MAX_REASONS_LOGGED
            log.error("%s: no GPU has the bus id %s%s: %s dropped", quote(
                self.config_file or "<config>", 4096), named,
                f" (and {more} more)" if more > 0 else "",
                "its limit is" if len(new) == 1 else "their limits are")

    def do_sleep_or_suspend(self, sess_duration_us: int) -> int:
        """AntMan ``DoSleepOrSuspend``; returns the sleep requested in µs (0 if none)."""
        return self._sleep_or_suspend(_microseconds(sess_duration_us, "sess_duration_us"),
                                      self._perf, None)

    def _sleep_or_suspend(self, sess_duration_us: int, perf: int, session: Any) -> int:
        if perf >= 100:
            if self._total_time_slot_us or self._estimated_idle_us or self._in_step_idle_us \
                    or self._oversleep_us:
                with self._idle_lock:
                    self._total_time_slot_us = 0
                    self._estimated_idle_us = 0
                    self._in_step_idle_us = 0
                    self._oversleep_us = 0
            return 0
        if perf == 0:
            self._suspend(session)
            return 0
        d = max(0, int(sess_duration_us))
        with self._idle_lock:
            consumed = self._in_step_idle_us      # idle the executor spent in the step
            self._in_step_idle_us = 0
            actual_run = d - consumed if d > consumed else 1
            total_time = actual_run * 100 // perf
            if total_time > d + FIXED_COST_US:
                # Less the last throttle sleep's oversleep (0 on an exact clock).
                sleep_us = max(total_time - d - FIXED_COST_US - self._oversleep_us, 0)
                self._oversleep_us = 0
            else:
                sleep_us = 0
            self._total_time_slot_us = sleep_us   # all of it after the step (D-RM-12)
        if sleep_us:
            start = self._clock.now_us()
            if self._clock.sleep_us(sleep_us, self._closed):
                over = int(self._clock.now_us()) - start - sleep_us
                with self._idle_lock:
                    self._oversleep_us = min(max(over, 0), sleep_us)
        return sleep_us

    def _suspend(self, session: Any) -> None:
        """Block the calling step while perfControl is 0 (woken by a non-zero value or close)."""
        wake = threading.Event()
        with self._manage_lock:
            if self._perf != 0:
                return
            self._suspended.add(wake)
        log.info("%s: perfControl is 0: suspending the step",
                 quote(self.config_file or "<config>", 4096))
        try:
            while self._perf == 0 and not self._closed.is_set() \
                    and not getattr(session, "closed", False):
                self._clock.wait(wake, SUSPEND_RECHECK_US)
                wake.clear()
        finally:
            with self._manage_lock:
                self._suspended.discard(wake)

    def wake_suspended(self) -> None:
        """Make suspended steps re-check their condition now (e.g. a session was closed)."""
        with self._manage_lock:
            self._wake_locked()

    def _wake_locked(self) -> None:
        for event in self._suspended:
            event.set()

    # -- idle-time and queued-op bookkeeping (GpuOpManager) ------------------------------
    def get_estimated_idle_time(self) -> int:
        with self._idle_lock:
            return self._estimated_idle_us

    def set_estimated_idle_time(self, us: int) -> None:
        us = _microseconds(us, "us")
        with self._idle_lock:
            self._estimated_idle_us = max(0, us)

    def spend_idle_time(self, us: int) -> int:
        """The executor spent ``us`` µs idle in the step: deduct it from E (clamped at 0) and
        count all of it as the step's in-step idle, which RM-10 does not count as compute.
        Returns E."""
        us = max(0, _microseconds(us, "us"))
        with self._idle_lock:
            self._estimated_idle_us = max(self._estimated_idle_us - us, 0)
            self._in_step_idle_us += us
            return self._estimated_idle_us

    @property
    def in_step_idle(self) -> int:
        """Idle time the executor spent in the current step so far (µs, RM-14)."""
        with self._idle_lock:
            return self._in_step_idle_us

    @property
    def oversleep(self) -> int:
        """The last throttle sleep's oversleep still to be compensated (µs)."""
        with self._idle_lock:
            return self._oversleep_us

    def get_executor_queued_op_num(self, key: Any) -> int:
        with self._idle_lock:
            return self._queued_op_num.get(key, 0)

    def set_executor_queued_op_num(self, key: Any, n: int) -> None:
        """Record ``n`` for ``key``, keeping the maximum ever seen (a high-water mark)."""
        n = _microseconds(n, "n")
        with self._idle_lock:
            if n > self._queued_op_num.get(key, 0):
                self._queued_op_num[key] = int(n)

    @property
    def total_time_slot(self) -> int:
        """The idle time of the last throttled period, slept after its step (µs, RM-10)."""
        with self._idle_lock:
            return self._total_time_slot_us

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Stop listening, wake suspended steps and interrupt throttle sleeps (idempotent: a
        later call finds the listener already left, and the steps it wakes leave anyway)."""
        self._closed.set()
        self.wake_suspended()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.unregister_file_listener(self.config_file, FILE_LISTENER_NAME)

    def __repr__(self) -> str:
        return (f"GPUResourceManagement(config_file={self.config_file!r}, perf={self._perf}, "
                f"limits={self.memory_limits})")


def _microseconds(value: object, what: str) -> int:
    """``value`` as an int (NumPy integers accepted; negative values are the caller's to
    clamp), else ``ValueError`` naming ``what``: booleans, floats and strings are not
    amounts (RM-14)."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{what} must be an int, got {value!r}")
    return int(value)
