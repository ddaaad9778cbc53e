"""``python -m adapters.tensorflow_bfc build | info | bench``.

- ``build [--force]``: build the shim for the installed TensorFlow (importing the package
  already does when the cache has no build), print where it is and how long it took.
- ``info``: print the build's ``build-info.json`` (the cache key's components).
- ``bench [--pairs N] [--repeat R]``: the cost of one allocate_raw + deallocate_raw pair from
  Python (1000 bytes, served from a free chunk, no region growth), through the adapter's API
  and through the bare shim binding, and, for comparison, the reference runtime's Python
  BFC allocator: the best of R timeit runs of N pairs, in microseconds per pair.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit

from . import build
from .loader import shim

MiB = 1 << 20


def _build(force: bool) -> None:
    result = shim.BUILD
    if force and result.seconds is None:
        result = build.build(force=True)
    how = (f"built in {result.seconds:.1f} s" if result.seconds is not None
           else f"cached (built in {result.info['build_seconds']} s)")
    print(f"tensorflow_bfc shim for TensorFlow {result.info['tensorflow_version']}: {how}, "
          f"{result.info['jobs']} parallel compile jobs, key {result.key}\n  {result.path}")


def _pair_us(allocate, deallocate, pairs: int, repeat: int) -> float:
    best = min(timeit.repeat(lambda: deallocate(allocate()), number=pairs, repeat=repeat))
    return best / pairs * 1e6


def _bench(pairs: int, repeat: int) -> None:
    from . import AllocationAttributes, BFCAllocator, SimulatedDeviceMemory

    def make(cls):
        bfc = cls(SimulatedDeviceMemory(1 << 30), 64 * MiB, True, "bench", retry_timeout_us=0)
        keep = bfc.allocate_raw(256, 1000)   # the region exists: pairs reuse a free chunk
        return bfc, keep

    rows = []
    bfc, _ = make(BFCAllocator)
    rows.append(("adapter: allocate_raw(256, 1000) + deallocate_raw",
                 _pair_us(lambda: bfc.allocate_raw(256, 1000), bfc.deallocate_raw, pairs,
                          repeat)))
    no_retry = AllocationAttributes(no_retry_on_failure=True)
    rows.append(("adapter: allocate_raw(256, 1000, no_retry) + deallocate_raw",
                 _pair_us(lambda: bfc.allocate_raw(256, 1000, no_retry), bfc.deallocate_raw,
                          pairs, repeat)))
    c = bfc._c
    rows.append(("bare shim binding", _pair_us(lambda: c.allocate_raw(256, 1000, True),
                                               c.deallocate_raw, pairs, repeat)))
    import reference_runtime
    ref, _ = make(reference_runtime.BFCAllocator)
    rows.append(("reference runtime (Python BFC)",
                 _pair_us(lambda: ref.allocate_raw(256, 1000), ref.deallocate_raw, pairs,
                          repeat)))
    machine = platform.processor() or platform.machine()
    print(f"allocate+free pair, best of {repeat} x {pairs} pairs ({machine}, Python "
          f"{platform.python_version()}):")
    for label, us in rows:
        print(f"  {us:8.3f} us  {label}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adapters.tensorflow_bfc")
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="build the shim (or report the cached build)")
    p_build.add_argument("--force", action="store_true", help="build even if cached")
    sub.add_parser("info", help="print build-info.json")
    p_bench = sub.add_parser("bench", help="per-call cost of an allocate+free pair")
    p_bench.add_argument("--pairs", type=int, default=200_000)
    p_bench.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    if args.command == "build":
        _build(args.force)
    elif args.command == "info":
        print(json.dumps(shim.BUILD.info, indent=2))
    else:
        _bench(args.pairs, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
