"""The reference runtime's worker: ``python -m reference_runtime.worker`` (SPEC.md, WORKER).

Builds the runtime as a TensorFlow process would (``create_runtime``: the AntMan actions
from ``GPU_CONFIG_FILE`` / ``GPU_STATUS_FILE``, then the devices), trains the MLP workload
one ``session.run`` per step, and writes the protocol's JSON records on standard output:
a hello record, then one record per step. Everything else goes to standard error.

The worker only trains and reports: limits, throttling, suspension and statistics are the
runtime's own doing. The step is sized by ``ANTMAN_WORKER_STEP_MS``: a small MLP computed
for real, plus a simulated compute time per compute node (``cost_us``, EXEC-12) that stands
for the device's kernel time. Standard input at end of file, or SIGTERM, stops it at the
next step boundary (a suspended step is woken by closing the runtime); it exits with 0,
also when a record's write blocks on an unread standard output (the record is lost, and a
line on standard error says so).
``WORKER_COMMAND`` starts it with single-threaded BLAS (reference_runtime/__init__.py says why).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, TextIO

from . import NAME, SPEC_VERSION, VERSION
from .file_listener import DEFAULT_POLL_INTERVAL_S

__all__ = ["Knobs", "read_knobs", "main", "PROTOCOL_VERSION"]

# No handler is configured: logging's last resort writes warnings and errors, with their
# tracebacks, on standard error.
log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
STOP_JOIN_S = 1.0          # wait for the step boundary before waking a suspended step
CLOSE_JOIN_S = 2.5         # then wait this long for the training thread to end
COST_SHARE = 0.9           # share of ANTMAN_WORKER_STEP_MS spent as simulated device time
DEVICE = "/device:GPU:0"
# Knob ranges: a step of an hour, a poll of a minute (WORKER-2 bounds poll_interval_s at
# 60 s). Beyond them a value is invalid (WORKER-3: replaced by the default), before it can
# overflow the step's simulated time.
MAX_STEP_MS = 3_600_000.0
MAX_POLL_INTERVAL_S = 60.0


@dataclass(frozen=True)
class Knobs:
    step_ms: float = 50.0
    max_steps: int = 0
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    seed: int = 0


def _knob(env: dict[str, str], name: str, parse: Callable[[str], Any],
          ok: Callable[[Any], bool], default: Any) -> Any:
    text = env.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = parse(text.strip())
    except ValueError:
        value = None
    if value is None or not ok(value):
        log.warning("%s=%r is invalid; using the default %r (WORKER-3)", name, text, default)
        return default
    return value


def read_knobs(env: dict[str, str] | None = None) -> Knobs:
    """The ``ANTMAN_WORKER_*`` knobs (WORKER-3); an invalid value falls back to its default."""
    env = os.environ if env is None else env
    d = Knobs()

    def within(upper: float) -> Callable[[float], bool]:
        return lambda v: math.isfinite(v) and 0 < v <= upper

    return Knobs(
        step_ms=_knob(env, "ANTMAN_WORKER_STEP_MS", float, within(MAX_STEP_MS), d.step_ms),
        max_steps=_knob(env, "ANTMAN_WORKER_MAX_STEPS", int, lambda v: v >= 0, d.max_steps),
        poll_interval_s=_knob(env, "ANTMAN_WORKER_POLL_INTERVAL_S", float,
                              within(MAX_POLL_INTERVAL_S), d.poll_interval_s),
        seed=_knob(env, "ANTMAN_WORKER_SEED", int, lambda v: v >= 0, d.seed),
    )


class _Output:
    """Standard output as the protocol's record stream: one JSON object per line, each
    written whole to the stream's descriptor as it is made.

    No Python buffer holds a record, so nothing of the worker's is left to flush at exit:
    when the reader went away, the failed write is the training thread's failure, and the
    exit status is the one that failure gives (EX_SOFTWARE, WORKER-4), not the interpreter's
    failed last flush. Text an implementation printed on the stream goes out first, in the
    order it was printed (it breaks the protocol, WORKER-2, and the suite sees it there).
    One thread writes at a time: the main thread the hello record, before the training
    thread starts, which then writes every step record; so no lock.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd = stream.fileno()

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode()
        self._stream.flush()                 # anything printed before this record
        while data:                          # a pipe may take a long record in parts
            data = data[os.write(self._fd, data):]


def _allocators(device: Any) -> tuple[Any, Any]:
    alloc = device.get_allocator()
    return getattr(alloc, "device_allocator", alloc), getattr(alloc, "host_allocator", None)


def _stat(allocator: Any, field: str) -> int:
    # Every allocator the worker reads is a BFC allocator, which keeps statistics: no figure
    # of the reference is WORKER-2's null.
    return int(getattr(allocator.get_stats(), field))


def _hello(ctx: Any, knobs: Knobs) -> dict[str, Any]:
    devices = []
    for dev in ctx.device_mgr.list_devices():
        if dev.device_type.upper() != "GPU":
            continue
        device_alloc, _ = _allocators(dev)
        # "simulated" (an extra member, WORKER-2): only the worker knows that its GPU is the
        # simulated device, and the report must not call it a GPU (SPEC.md section 7).
        devices.append({"name": dev.name, "pci_bus_id": dev.pci_bus_id,
                        "memory_limit": _stat(device_alloc, "bytes_limit"),
                        "simulated": ctx.backend.name == "sim"})
    devices.sort(key=lambda d: not d["name"].endswith(DEVICE))   # the training device first
    return {"type": "hello", "protocol": PROTOCOL_VERSION,
            "runtime": {"name": NAME, "version": VERSION}, "spec_version": SPEC_VERSION,
            "pid": os.getpid(), "t_us": ctx.clock.now_us(),
            "poll_interval_s": ctx.file_listener.poll_interval_us / 1e6,
            "devices": devices,
            "workload": {"model": "mlp",
                         "step_ms": knobs.step_ms, "max_steps": knobs.max_steps,
                         "seed": knobs.seed}}


def _build_workload(ctx: Any, knobs: Knobs) -> Any:
    """``MLPWorkload``'s default model (E2E-1), with ``COST_SHARE`` of the step budget as
    simulated device time.

    The whole simulated time sits on the first forward MatMul, so a step makes a single
    clock wait: on a loaded machine every wait costs a scheduling delay, and one wait per
    step keeps the step period close to its budget.
    """
    from .workload import MLPWorkload

    cost_us = int(knobs.step_ms * 1000 * COST_SHARE)

    class _WorkerMLP(MLPWorkload):
        def build_graph(self) -> Any:
            graph = super().build_graph()
            graph.node("matmul0").attrs["cost_us"] = cost_us
            return graph

    return _WorkerMLP(ctx, seed=knobs.seed, device=DEVICE)


def _train(ctx: Any, workload: Any, knobs: Knobs, out: _Output, stop: threading.Event,
           failure: list[BaseException]) -> None:
    device_alloc, host_alloc = _allocators(ctx.device_mgr.lookup_device(DEVICE))
    clock = ctx.clock
    step = 0
    try:
        while not stop.is_set() and (knobs.max_steps == 0 or step < knobs.max_steps):
            start = clock.now_us()
            loss = workload.step()
            end = clock.now_us()
            if stop.is_set() and ctx.closed:
                return                       # the step was cut short by shutdown
            out.write({"type": "step", "step": step, "t_us": end,
                       "duration_us": end - start, "loss": loss,
                       "device_bytes_in_use": _stat(device_alloc, "bytes_in_use"),
                       "host_bytes_in_use": (0 if host_alloc is None     # no host fallback
                                             else _stat(host_alloc, "bytes_in_use")),
                       "device_limit": _stat(device_alloc, "bytes_limit")})
            step += 1
    except BaseException as exc:             # reported by the main thread, unless
        if not ctx.closed:                   # shutdown cut the step (close() follows stop)
            failure.append(exc)
    finally:
        stop.set()                           # trained or failed: the main thread goes on


def _watch_stdin(stop: threading.Event) -> None:
    # os.read on the raw descriptor: a daemon thread blocked in a buffered read would abort
    # the interpreter at exit.
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    stop.set()


def main() -> int:
    """The worker: configured by the environment alone (WORKER-1, WORKER-3); its command
    line takes no argument (any is a usage error, status 2, before anything is written to
    standard output)."""
    argparse.ArgumentParser(description="The reference runtime's worker, configured by the "
                            "environment (SPEC.md WORKER-1, WORKER-3).").parse_args()
    knobs = read_knobs()
    out = _Output(sys.stdout)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):   # Ctrl-C stops it as SIGTERM does
        signal.signal(signum, lambda *_: stop.set())
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True,
                     name="antman-worker-stdin").start()

    from .process_state import create_runtime
    ctx = create_runtime(poll_interval_s=knobs.poll_interval_s)
    failure: list[BaseException] = []
    try:
        workload = _build_workload(ctx, knobs)
        out.write(_hello(ctx, knobs))
        trainer = threading.Thread(target=_train, name="antman-worker-train",
                                   args=(ctx, workload, knobs, out, stop, failure))
        trainer.start()
        stop.wait()                          # a signal, the end of standard input, or the
        trainer.join(STOP_JOIN_S)            # training thread's end: the next step boundary
    finally:
        ctx.close()                          # wakes a suspended or throttled step
    trainer.join(CLOSE_JOIN_S)
    if failure:
        log.error("training failed", exc_info=failure[0])
        return os.EX_SOFTWARE                # not 0 (WORKER-4); 2 is the usage error's
    if trainer.is_alive():  # a record write blocked on an unread stdout (WORKER-4)
        log.error("the training thread did not stop; exiting anyway")
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
