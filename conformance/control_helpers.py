"""Helpers shared by the control-plane test modules (CLK, REG, FL, RM, STAT, DEVICE).

Everything here reaches the implementation through the ``rt`` module handed in, never by
importing it.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.preconditions import precondition, precondition_holds
from fixtures.virtual_clock import VirtualClock

MiB = 1 << 20
POLL_US = 1_000_000
JOIN_TIMEOUT_S = 5.0        # generous bound on a thread that must end (never a speed check)
SETTLE_TIMEOUT_S = 5.0      # ditto, for threads woken by the virtual clock

#: Variables the control plane reads or forces; every test starts without them.
CONTROL_ENV = ("GPU_CONFIG_FILE", "GPU_STATUS_FILE", "TF_FORCE_GPU_ALLOW_GROWTH",
               "TF_GPU_VMEM", "TF_CUDA_HOST_MEM_LIMIT_IN_MB", "TF_RO_PLANNED_GPU",
               "TF_ENABLE_GPU_GARBAGE_COLLECTION")


@pytest.fixture
def control_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Unset the control-plane variables; restore the environment afterwards, including
    the variables a GPUResourceManagement forces to "true" (RM-1)."""
    for name in CONTROL_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def vclock() -> VirtualClock:
    return VirtualClock(settle_timeout_s=SETTLE_TIMEOUT_S)


@pytest.fixture
def listener(rt: types.ModuleType, vclock: VirtualClock) -> Iterator[Any]:
    """A FileListener on the manual virtual clock, 1 s poll; closed afterwards."""
    fl = rt.FileListener(clock=vclock, poll_interval_s=1.0)
    yield fl
    closer = threading.Thread(target=fl.close, name="listener-close", daemon=True)
    closer.start()
    closer.join(JOIN_TIMEOUT_S)
    if closer.is_alive():
        pytest.fail("FileListener.close() did not return: deadlock [FL-11]")


@pytest.fixture
def runtimes(rt: types.ModuleType, control_env: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """A factory ``make(**kwargs)`` for ``rt.create_runtime``; every runtime is closed after.

    Defaults: one GPU of 64 MiB, no config and no status file unless given.
    """
    yield from runtime_factory(rt, num_gpus=1, gpu_memory_bytes=64 * MiB)


def runtime_factory(rt: types.ModuleType, **defaults: Any) -> Iterator[Callable[..., Any]]:
    """Yield ``make(**kwargs)`` for ``rt.create_runtime`` with ``defaults`` (no config and no
    status file unless given); close every runtime it made when resumed."""
    made: list[Any] = []

    def make(**kwargs: Any) -> Any:
        ctx = rt.create_runtime(**{"config_file": None, "status_file": None, **defaults,
                                   **kwargs})
        made.append(ctx)
        return ctx

    yield make
    for ctx in reversed(made):
        ctx.close()


def wait_for_poller(clock: VirtualClock, count: int = 1, *, clause: str = "FL-2") -> None:
    """Block until ``count`` threads wait on the virtual clock (a started monitor thread);
    ``clause``: the clause that puts them there (a failure is its precondition failure)."""
    with precondition(clause, f"{count} polling thread(s) wait on the clock"):
        clock.wait_for_waiters(count, clause=clause)


def perf_in_force(rm: Any, perf: int) -> None:
    """The arrangement of a test that needs perfControl ``perf`` in force: the value given
    is the value read (RM-4), a precondition of what the test checks."""
    read = rm.perf_control
    precondition_holds("RM-4", read == perf, f"perfControl {perf} is read as {perf} (read {read})")


def poll(clock: VirtualClock, times: int = 1, interval_us: int = POLL_US) -> None:
    """Let a 1 s FileListener make ``times`` checks, deterministically."""
    for _ in range(times):
        clock.tick(interval_us)


def gpus(ctx: Any) -> list[Any]:
    return [d for d in ctx.device_mgr.list_devices() if str(d.device_type).upper() == "GPU"]


def bus_id(rt: types.ModuleType, device: Any) -> str:
    return rt.get_pci_bus_id(device.attributes.physical_device_desc)


def device_bfc(device: Any) -> Any:
    """The GPU's BFC allocator: the VMem allocator's device side, or the allocator itself."""
    allocator = device.get_allocator()
    return getattr(allocator, "device_allocator", allocator)


def bytes_limit(device: Any) -> int:
    return device_bfc(device).get_stats().bytes_limit


def pool_bytes(device: Any) -> int:
    return device_bfc(device).memory_map().total_region_allocated_bytes


class RuntimeRecords(list):
    """The runtime's log records a test looked for; its repr (shown in a failed assertion's
    explanation) names the logger namespace searched and the records seen elsewhere, so
    that a runtime logging under another name is told why none was found."""

    def __init__(self, records: list[logging.LogRecord], namespace: str, level: int,
                 elsewhere: list[logging.LogRecord]) -> None:
        super().__init__(records)
        self.namespace, self.level, self.elsewhere = namespace, level, elsewhere

    def __repr__(self) -> str:
        found = [f"{r.name} {r.levelname}: {r.getMessage()[:120]}" for r in self]
        text = (f"RuntimeRecords({found!r}, from loggers {self.namespace!r} and "
                f"'{self.namespace}.*' at {logging.getLevelName(self.level)} or above")
        if not self and self.elsewhere:
            others = sorted({f"{r.name} ({r.levelname})" for r in self.elsewhere})
            text += (f"; none found there, but {len(self.elsewhere)} such record(s) came from "
                     f"other loggers: {', '.join(others[:5])}: a runtime logs under its own "
                     f"package name (SPEC.md API-1)")
        return text + ")"


def runtime_records(caplog: pytest.LogCaptureFixture, rt: types.ModuleType,
                    level: int = logging.WARNING, *, containing: str | None = None
                    ) -> RuntimeRecords:
    """Log records of the runtime's loggers (named after its top-level package, or under it,
    SPEC.md API-1) at ``level`` or above, optionally with ``containing`` in the message."""
    namespace = rt.__name__.split(".")[0]

    def wanted(r: logging.LogRecord) -> bool:
        return r.levelno >= level and (containing is None or containing in r.getMessage())

    ours = [r for r in caplog.records
            if r.name == namespace or r.name.startswith(namespace + ".")]
    others = [r for r in caplog.records if r not in ours and wanted(r)]
    return RuntimeRecords([r for r in ours if wanted(r)], namespace, level, others)


def carries(record: logging.LogRecord, text: str) -> bool:
    """``text`` is in the record's message or in the exception it logs (an error logged
    with its exception, as OPM-5 words it)."""
    exc = record.exc_info[1] if record.exc_info else None
    return text in record.getMessage() or (exc is not None and text in str(exc))


def run_in_thread(fn: Callable[[], Any], name: str = "test-step") -> tuple[threading.Thread, dict]:
    """Start ``fn`` on a thread; the dict receives ``result`` or ``error``."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc

    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    return t, out


def joined(thread: threading.Thread, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    thread.join(timeout_s)
    return not thread.is_alive()


def close_within(session: Any, failure: str, timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """``session.close()`` on a thread, bounded: a close that waits for a step that never ends
    fails the test with ``failure`` (which carries its clause tag) at once, instead of
    holding the test to its time limit; an error close() raised is raised here."""
    closer, out = run_in_thread(session.close, name="test-close")
    assert joined(closer, timeout_s), failure
    if "error" in out:
        raise out["error"]


def not_joined(threads: list[threading.Thread], timeout_s: float = JOIN_TIMEOUT_S) -> list[str]:
    """The names of ``threads`` still alive after joining them all within one shared bound
    (a bound each would make a test of many stuck threads wait many times over)."""
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]


def write_text(path: Path, text: str) -> None:
    """Atomic replacement, for tests that do not need ConfigWriter's fault modes."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def expect_value_error(call: Callable[[], Any], what: str, clause: str) -> None:
    """``call()`` must raise ``ValueError``; a result it returned instead is closed."""
    try:
        result = call()
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - reported with the clause
        raise AssertionError(f"{what} raised {exc!r}, expected ValueError [{clause}]") from exc
    close = getattr(result, "close", None)
    if callable(close):
        close()
    raise AssertionError(f"{what} returned instead of raising ValueError [{clause}]")
