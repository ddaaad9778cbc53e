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

Every malformed input keeps the last good state and logs one line naming the file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from decimal import Decimal
from typing import Any

from .clock import REAL_CLOCK, Clock
from .env import ENV_DEFAULT, path_from_env
from .file_listener import FileListener, global_file_listener
from .gpu_usage_adjustment import AdjustOutcome, GPUUsageAdjustment, UINT64_MAX
from .session_run_action_registry import (Grouping, SessionRunAction,
                                                           SessionRunActionOptions,
                                                           SessionRunActionRegistry)

__all__ = ["GPUResourceManagement", "CONFIG_FILE_ENV_VAR", "FILE_LISTENER_NAME", "FIXED_COST_US",
           "SUSPEND_RECHECK_US", "PHASE", "ENV_DEFAULT"]

log = logging.getLogger(__name__)

CONFIG_FILE_ENV_VAR = "GPU_CONFIG_FILE"
FILE_LISTENER_NAME = "GPUResourceManage"
FIXED_COST_US = 50                  # fixed_cost in DoSleepOrSuspend
SUSPEND_RECHECK_US = 100_000        # a suspended step re-checks its session this often
PHASE = 2                           # POST_SESSION_RUN phase


class _Reject(Exception):
    """A config value that is not accepted; the message is the reason."""


def _json_path(*parts: str) -> str:
    out = ""
    for p in parts:
        out += f"[{json.dumps(p)}]" if out else p
    return out


def _uint(value: Any, what: str, upper: int) -> int:
    """A JSON number that is a non-negative integer <= ``upper`` (jsoncpp ``isUInt64``)."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        kind = {str: "a string", bool: "a boolean", list: "an array", dict: "an object"}.get(
            type(value), type(value).__name__)
        raise _Reject(f"{what} is {kind} ({json.dumps(value, default=str)[:40]}), "
                      f"expected a non-negative integer")
    if isinstance(value, Decimal):
        if not value.is_finite() or value != value.to_integral_value():
            raise _Reject(f"{what} is {value}, not an integer")
    if value < 0:
        raise _Reject(f"{what} is {_short(value)}, negative")
    if value > upper:
        raise _Reject(f"{what} is {_short(value)}, above the maximum {upper}")
    return int(value)


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class GPUResourceManagement(SessionRunAction):
    """The resource-management action (``"GPUResourceManagement"``, POST phase 2)."""

    def __init__(self, config_file: str | os.PathLike | None = ENV_DEFAULT, *,
                 clock: Clock | None = None, file_listener: FileListener | None = None,
                 registry: SessionRunActionRegistry | None = None,
                 usage_adjustment: GPUUsageAdjustment | None = None) -> None:
        self.config_file = path_from_env(config_file, CONFIG_FILE_ENV_VAR)
        self.enabled = bool(self.config_file)
        self.name = "GPUResourceManagement"
        self._clock = clock if clock is not None else REAL_CLOCK
        self._adjustment = usage_adjustment or GPUUsageAdjustment()
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
        line naming the file; an unparsable document or a non-object root changes nothing.
        """
        source = self.config_file or "<config>"
        problems: list[str] = []
        try:
            if isinstance(content, (bytes, bytearray)):
                content = bytes(content).decode("utf-8")
            doc = json.loads(content, parse_float=Decimal, parse_int=Decimal,
                             parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = "empty" if isinstance(content, str) and not content.strip() \
                else f"unparsable JSON ({str(exc)[:120]})"
            log.warning("%s: config rejected: %s; keeping the last good state", source, reason)
            return False
        if not isinstance(doc, dict):
            log.warning("%s: config rejected: the root is %s, not an object; keeping the last "
                        "good state", source, type(doc).__name__ if doc is not None else "null")
            return False
        limits = self._parse_memory(doc, problems)
        perf = self._parse_perf(doc, problems)
        with self._manage_lock:
            if limits:
                self._limits.update(limits)
                self._pending.update(limits)
            if perf is not None and perf != self._perf:
                self._set_perf_locked(perf)
        if problems:
            log.warning("%s: ignored %s; keeping the last good values", source,
                        "; ".join(problems))
            return False
        return True

    @staticmethod
    def _parse_memory(doc: dict, problems: list[str]) -> dict[str, int]:
        info = doc.get("gpuConfigInfo")
        if info is None:
            return {}
        if not isinstance(info, dict):
            problems.append(f"gpuConfigInfo: is {type(info).__name__}, not an object")
            return {}
        limits: dict[str, int] = {}
        for key, entry in info.items():
            where = _json_path("gpuConfigInfo", key)
            if not isinstance(entry, dict):
                problems.append(f"{where}: is {type(entry).__name__}, not an object")
                continue
            value = entry.get("maxDeviceMem")
            if value is None:
                continue
            try:
                limits[key] = _uint(value, f"{where}.maxDeviceMem", UINT64_MAX)
            except _Reject as exc:
                problems.append(str(exc))
        return limits

    @staticmethod
    def _parse_perf(doc: dict, problems: list[str]) -> int | None:
        value = doc.get("perfControl")
        if value is None:
            return None
        try:
            return _uint(value, "perfControl", 100)
        except _Reject as exc:
            problems.append(str(exc))
            return None

    def _set_perf_locked(self, perf: int) -> None:
        self._perf = perf
        if perf != 0:
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
            for bus_id, limit in pending:
                outcome = self._adjustment.adjust(bus_id, limit, device_mgr)
                if outcome is AdjustOutcome.FELL_SHORT:
                    continue                          # retried at the next boundary
                with self._manage_lock:
                    if self._pending.get(bus_id) == limit:   # not superseded meanwhile
                        del self._pending[bus_id]

    def do_sleep_or_suspend(self, sess_duration_us: int) -> int:
        """AntMan ``DoSleepOrSuspend``; returns the sleep requested in µs (0 if none)."""
        return self._sleep_or_suspend(sess_duration_us, self._perf, None)

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
        log.info("%s: perfControl is 0: suspending the step", self.config_file or "<config>")
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
        with self._idle_lock:
            self._estimated_idle_us = max(0, int(us))

    def spend_idle_time(self, us: int) -> int:
        """The executor spent ``us`` µs idle in the step: deduct it from E (clamped at 0) and
        count all of it as the step's in-step idle, which RM-10 does not count as compute.
        Returns E."""
        us = max(0, int(us))
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
        with self._idle_lock:
            if n > self._queued_op_num.get(key, 0):
                self._queued_op_num[key] = int(n)

    @property
    def total_time_slot(self) -> int:
        """The idle time of the last throttled period, slept after its step (µs, RM-10)."""
        with self._idle_lock:
            return self._total_time_slot_us

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """Stop listening, wake suspended steps and interrupt throttle sleeps (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.wake_suspended()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.unregister_file_listener(self.config_file, FILE_LISTENER_NAME)

    def __repr__(self) -> str:
        return (f"GPUResourceManagement(config_file={self.config_file!r}, perf={self._perf}, "
                f"limits={self.memory_limits})")
