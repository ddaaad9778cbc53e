"""A training job for the co-location benchmark: ``python -m benchmarks.bench_job [options]``.

Builds the runtime named by ``ANTMAN_RUNTIME`` (default ``reference_runtime``) with
``create_runtime`` (so ``GPU_CONFIG_FILE`` enables resource management, as in an AntMan job),
trains the MLP workload step after step and writes one JSON line per record on standard
output: ``{"type": "hello", "pid", "backend"}``, then per step ``{"type": "step", "step",
"t_us", "duration_us", "busy_us"}`` with ``t_us`` the system-wide monotonic clock
(``CLOCK_MONOTONIC``, comparable between processes of one machine) when the step returned and
``busy_us`` its ``sess_duration_us`` minus the idle slots slept (see ``bench_support``).
Standard input at end of file stops it after the current step; it exits with 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_job")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--input-dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu-memory", type=int, default=256 << 20)
    p.add_argument("--poll-interval", type=float, default=0.1)
    args = p.parse_args(argv)

    rt = importlib.import_module(os.environ.get("ANTMAN_RUNTIME") or "reference_runtime")
    from benchmarks.bench_support import StepProbe, TimingClock

    stop = threading.Event()

    def watch_stdin() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="bench-job-stdin", daemon=True).start()
    clock = TimingClock()
    out = sys.stdout
    with rt.create_runtime(clock=clock, gpu_memory_bytes=args.gpu_memory,
                           poll_interval_s=args.poll_interval, status_file=None) as ctx:
        wl = rt.MLPWorkload(ctx, batch=args.batch, input_dim=args.input_dim,
                            hidden=args.hidden, layers=args.layers, seed=args.seed)
        probe = StepProbe(clock).install(rt, ctx.registry)
        out.write(json.dumps({"type": "hello", "pid": os.getpid(),
                              "backend": ctx.backend.name}) + "\n")
        out.flush()
        step = 0
        while not stop.is_set():
            start = time.monotonic_ns()
            wl.step()
            end = time.monotonic_ns()
            rec = probe.records[-1]
            probe.clear()
            out.write(json.dumps({"type": "step", "step": step, "t_us": end // 1000,
                                  "duration_us": (end - start) // 1000,
                                  "busy_us": rec.sess_us - rec.idle_act_us}) + "\n")
            out.flush()
            step += 1
        wl.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
