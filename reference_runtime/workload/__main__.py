"""``python -m reference_runtime.workload``: train the MLP workload, one JSON line per step.

Honours ``GPU_CONFIG_FILE`` and ``GPU_STATUS_FILE`` like any AntMan job (the runtime is
built by ``create_runtime``). Example::

    python -m reference_runtime.workload --steps 20 --batch 256 --hidden 1024 --layers 3
    python -m reference_runtime.workload --steps 20 --target-bytes 2G
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Sequence

from ..workload import MLPWorkload

def _bytes(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"size must be a positive finite number: {text!r}")
    return int(value * units[unit])


def _allocator_json(device: Any) -> dict[str, Any]:
    alloc = device.get_allocator()
    out: dict[str, Any] = {}
    for side, a in (("device", getattr(alloc, "device_allocator", alloc)),
                    ("host", getattr(alloc, "host_allocator", None))):
        stats = a.get_stats() if a is not None else None
        if stats is not None:
            out[f"{side}_bytes_in_use"] = stats.bytes_in_use
            out[f"{side}_peak_bytes_in_use"] = stats.peak_bytes_in_use
            if side == "device":
                out["device_bytes_limit"] = stats.bytes_limit
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """The command line; a usage error exits with status 2 (argparse), success with 0."""
    p = argparse.ArgumentParser(prog=f"python -m {__package__}",
                                description="Train an MLP on synthetic data; one JSON line "
                                            "per step.")
    p.add_argument("--steps", type=int, default=20, help="default %(default)s")
    p.add_argument("--batch", type=int, default=None, help="default 32 (256 with --target-bytes)")
    p.add_argument("--input-dim", type=int, default=None,
                   help="default 32 (256 with --target-bytes)")
    p.add_argument("--hidden", type=int, default=64, help="default %(default)s")
    p.add_argument("--layers", type=int, default=None, help="default 2 (3 with --target-bytes)")
    p.add_argument("--classes", type=int, default=10, help="default %(default)s")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="default 0.1 * min(1, sqrt(64 / hidden))")
    p.add_argument("--seed", type=int, default=0, help="default %(default)s")
    p.add_argument("--device", default="/device:GPU:0", help="default %(default)s")
    p.add_argument("--target-bytes", type=_bytes, default=None,
                   help="size the hidden width for about this much device memory (e.g. 2G); "
                        "overrides --hidden")
    p.add_argument("--backend", help="sim, cuda or auto (default: $ANTMAN_DEVICE)")
    p.add_argument("--gpu-memory", type=_bytes, default=1 << 30,
                   help="GPU memory limit per GPU (default 1G)")
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error("--steps must be >= 0")

    from ..process_state import create_runtime

    with create_runtime(backend=args.backend, gpu_memory_bytes=args.gpu_memory) as ctx:
        sized = args.target_bytes is not None
        def chosen(value: int | None, default: int) -> int:
            return default if value is None else value        # 0 is MLPWorkload's to reject

        common = dict(batch=chosen(args.batch, 256 if sized else 32),
                      input_dim=chosen(args.input_dim, 256 if sized else 32),
                      layers=chosen(args.layers, 3 if sized else 2), classes=args.classes,
                      learning_rate=args.learning_rate, seed=args.seed, device=args.device)
        try:
            if sized:
                wl = MLPWorkload.sized_for(ctx, args.target_bytes, **common)
            else:
                wl = MLPWorkload(ctx, hidden=args.hidden, **common)
        except ValueError as exc:                     # a bad size: the workload says which
            p.error(str(exc))
        device = ctx.device_mgr.lookup_device(args.device)
        print(json.dumps({"workload": repr(wl), "backend": ctx.backend.name,
                          "param_bytes": wl.param_bytes, "step_bytes": wl.step_bytes}),
              flush=True)
        for i in range(args.steps):
            start = ctx.clock.now_us()
            loss = wl.step()
            record = {"step": i, "loss": loss, "duration_us": ctx.clock.now_us() - start}
            record.update(_allocator_json(device))
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
