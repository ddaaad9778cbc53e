"""A training job for the co-location benchmark: ``python -m benchmarks.bench_job [options]``.

Builds the runtime named by ``ANTMAN_RUNTIME`` (default ``reference_runtime``) with
``create_runtime`` (so ``GPU_CONFIG_FILE`` enables resource management, as in an AntMan job),
trains the MLP workload step after step and writes one JSON line per record on standard
output: ``{"type": "hello", "pid", "backend"}``, then per step ``{"type": "step", "step",
"t_us", "duration_us", "busy_us"}`` with ``t_us`` the system-wide monotonic clock
(``CLOCK_MONOTONIC``, comparable between processes of one machine) when the step returned and
``busy_us`` its ``sess_duration_us`` minus the idle slots slept (see ``bench_support``),
``perf`` the perfControl in force after the step, ``sleep_req_us``/``sleep_act_us`` the
throttle sleep of the step as requested and as it really lasted, and, with ``--events`` on the
cuda backend,
``gpu_span_us``: CUDA events recorded on the device's stream when the step starts (a PRE
session-run action) and when its work is done (POST, phase 0), so the GPU's own clock times
the step from its first queued work to its last kernel. ``--variant NAME`` runs the runtime
with another idle-time distribution (``benchmarks.idle_variants``). Standard input at end of
file stops it after the current step; it exits with 0.
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
    p.add_argument("--variant", default="reference")
    p.add_argument("--events", action="store_true")
    args = p.parse_args(argv)

    runtime = os.environ.get("ANTMAN_RUNTIME") or "reference_runtime"
    from benchmarks import idle_variants
    variant, _, spin = args.variant.partition("+spin")
    idle_variants.apply(variant, runtime)
    rt = importlib.import_module(runtime)
    from benchmarks.bench_support import GpuSpanProbe, StepProbe, TimingClock

    stop = threading.Event()

    def watch_stdin() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="bench-job-stdin", daemon=True).start()
    clock = TimingClock(spin_us=int(spin or 0))
    out = sys.stdout
    with rt.create_runtime(clock=clock, gpu_memory_bytes=args.gpu_memory,
                           poll_interval_s=args.poll_interval, status_file=None) as ctx:
        wl = rt.MLPWorkload(ctx, batch=args.batch, input_dim=args.input_dim,
                            hidden=args.hidden, layers=args.layers, seed=args.seed)
        probe = StepProbe(clock).install(rt, ctx.registry)
        span = (GpuSpanProbe().install(rt, ctx.registry)
                if args.events and ctx.backend.name == "cuda" else None)
        rm = ctx.resource_management
        out.write(json.dumps({"type": "hello", "pid": os.getpid(), "variant": args.variant,
                              "backend": ctx.backend.name}) + "\n")
        out.flush()
        step = 0
        slept = clock.other_sleeps()
        while not stop.is_set():
            start = time.monotonic_ns()
            wl.step()
            end = time.monotonic_ns()
            before, slept = slept, clock.other_sleeps()
            rec = probe.records[-1]
            probe.clear()
            out.write(json.dumps({
                "type": "step", "step": step, "t_us": end // 1000,
                "duration_us": (end - start) // 1000, "busy_us": rec.sess_us - rec.idle_act_us,
                "perf": rm.perf_control if rm is not None else None,
                "sleep_req_us": slept[0] - before[0], "sleep_act_us": slept[1] - before[1],
                "gpu_span_us": span.take() if span is not None else None}) + "\n")
            out.flush()
            step += 1
        wl.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
