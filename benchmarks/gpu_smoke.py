"""Smoke check of the CUDA backend on a real NVIDIA GPU, with NVML figures.

    python benchmarks/gpu_smoke.py [--json OUT.json]

Exercises, each step independently (a failing step is reported and the next one runs):
the NVML observer, ``CudaBackend`` (device info, real PCI bus ids), cudaMalloc regions and the
NVML-visible release, pinned mapped host memory used in place by kernels, CuPy routed through
a GPU BFC + VMem allocator (device first, then host), a shrink of the pool seen by NVML, and a
co-tenant process taking the GPU's memory to force real out-of-memory. Prints one line per
step and a JSON summary. Not a test: the conformance tests are ``conformance/test_gpu.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MiB = 1 << 20
RESULTS: dict[str, Any] = {}


def step(name: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def wrap(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            t0 = time.perf_counter()
            try:
                out = fn()
                RESULTS[name] = {"ok": True, "s": round(time.perf_counter() - t0, 3),
                                 "data": out}
                print(f"[ OK ] {name} ({RESULTS[name]['s']} s): {json.dumps(out, default=str)}",
                      flush=True)
            except Exception as exc:
                RESULTS[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                 "trace": traceback.format_exc()[-3000:]}
                print(f"[FAIL] {name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}",
                      flush=True)
        run.__name__ = fn.__name__
        return run
    return wrap


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import numpy as np
    import cupy as cp
    from fixtures.nvml import NvmlObserver, execution_target, normalize_bus_id
    from fixtures.cotenant import CoTenant
    import reference_runtime as rt
    from reference_runtime.cuda_backend import (CudaBackend, CupyAllocatorRouting,
                                                as_cupy_array)

    obs = NvmlObserver()
    backend = CudaBackend()
    adj = rt.GPUAdjustableAllocator()

    def proc_used() -> dict[str, Any]:
        cp.cuda.runtime.deviceSynchronize()
        pm = obs.process_used(0)
        return {"bytes": pm.bytes, "method": pm.method}

    @step("target")
    def target() -> Any:
        t = execution_target()
        m = obs.memory(0)
        procs = obs.processes(0)
        return {"target": t, "memory": m.__dict__, "pid": os.getpid(),
                "nvml_processes": procs, "pid_visible": os.getpid() in procs,
                "cupy": cp.__version__, "runtime": cp.cuda.runtime.runtimeGetVersion(),
                "driver": cp.cuda.runtime.driverGetVersion()}

    @step("backend_info")
    def backend_info() -> Any:
        info = backend.gpu_info(0)
        return {"count": backend.gpu_count(), "info": info.__dict__,
                "nvml_bus_ids": obs.bus_ids(),
                "match": normalize_bus_id(info.pci_bus_id) in obs.bus_ids()}

    @step("device_region_release")
    def device_region_release() -> Any:
        mem = backend.device_memory(0, 8 << 30)
        rows = []
        for size in (2 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB):
            before = proc_used()
            p = mem.alloc(256, size)
            during = proc_used()
            mem.free(p, size)
            after = proc_used()
            rows.append({"size": size, "grow": during["bytes"] - before["bytes"],
                         "drop": during["bytes"] - after["bytes"], "method": after["method"]})
        return rows

    @step("host_mapped_in_place")
    def host_mapped_in_place() -> Any:
        host = backend.host_memory(0)
        n = 1 << 20
        p = host.alloc(256, n * 4)
        attrs = cp.cuda.runtime.pointerGetAttributes(p)
        a = as_cupy_array(p, (n,), np.float32, device_id=0)
        a[...] = cp.arange(n, dtype=cp.float32)
        a += 1
        b = cp.asnumpy(a)
        ok = bool(np.array_equal(b, np.arange(n, dtype=np.float32) + 1))
        m = as_cupy_array(p, (512, 512), np.float32, device_id=0)
        rng = np.random.default_rng(1)
        x = rng.standard_normal((512, 512)).astype(np.float32)
        m.set(x) if hasattr(m, "set") else m.__setitem__(Ellipsis, cp.asarray(x))
        y = cp.asnumpy(m @ m)
        ref = x.astype(np.float64) @ x.astype(np.float64)
        rel = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        del a, m
        host.free(p, n * 4)
        return {"ptr_type": attrs.type, "device": attrs.device, "kernel_ok": ok,
                "matmul_rel_err": rel}

    def make_stack(limit: int, growth: bool = True) -> tuple[Any, Any, Any]:
        bfc = rt.GPUBFCAllocator(backend.device_memory(0, limit), limit, "GPU_0_bfc",
                                 allow_growth=growth)
        vmem = rt.maybe_create_gpu_vmem_allocator(bfc, host_sub_allocator=backend.host_memory(0),
                                                  tf_gpu_id=0,
                                                  physical_total_memory=obs.memory(0).total)
        return bfc, vmem, CupyAllocatorRouting({0: vmem})

    def mlp(xp: Any, seed: int, n: int = 2048, d: int = 1024, steps: int = 3) -> list[float]:
        rng = np.random.default_rng(seed)
        x = xp.asarray(rng.standard_normal((n, d)).astype(np.float32))
        w = xp.asarray((rng.standard_normal((d, d)) * 0.01).astype(np.float32))
        out = []
        for _ in range(steps):
            h = xp.maximum(x @ w, 0)
            loss = float((h * h).mean())
            g = x.T @ (2 * h * (h > 0)) / n
            w = w - 0.1 * g
            out.append(loss)
        out.append(float(xp.abs(w).sum()))
        return out

    @step("routing_device_then_host")
    def routing_device_then_host() -> Any:
        ref = mlp(np, 7)
        bfc, vmem, routing = make_stack(1 << 30)
        with routing:
            on_dev = mlp(cp, 7)
            dev_stats = bfc.get_stats()
            host_before = vmem.host_allocator.get_stats()
            adj.adjust_memory_limit(16 * MiB, bfc)   # device too small: host fallback
            on_host = mlp(cp, 7)
            host_after = vmem.host_allocator.get_stats()
            gc.collect()
            routing.flush()
            live = routing.live_buffers
        rel_dev = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(on_dev, ref))
        rel_host = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(on_host, ref))
        return {"ref": ref, "dev": on_dev, "host": on_host, "rel_dev": rel_dev,
                "rel_host": rel_host, "dev_peak": dev_stats.peak_bytes_in_use,
                "host_peak_before": host_before.peak_bytes_in_use,
                "host_peak_after": host_after.peak_bytes_in_use,
                "bfc_in_use_after": bfc.get_stats().bytes_in_use,
                "host_in_use_after": vmem.host_allocator.get_stats().bytes_in_use,
                "live_after": live}

    @step("routing_threads_and_cycles")
    def routing_threads_and_cycles() -> Any:
        bfc, vmem, routing = make_stack(1 << 30)
        with routing:
            arrays = [cp.ones(1 << 18, dtype=cp.float32) for _ in range(16)]
            t = threading.Thread(target=lambda: arrays.clear(), name="antman-smoke-free")
            t.start()
            t.join()
            class Cycle:
                pass
            c = Cycle()
            c.self = c
            c.arr = cp.zeros(1 << 20, dtype=cp.float32)
            del c
            gc.collect()
            pending = routing.pending_frees
            routing.flush()
            live = routing.live_buffers
            in_use = bfc.get_stats().bytes_in_use
        return {"pending_after_gc": pending, "live": live, "bfc_in_use": in_use}

    @step("memory_outside_the_pool")
    def memory_outside_the_pool() -> Any:
        bfc, vmem, routing = make_stack(8 << 30)
        rows = []
        with routing:
            for i in range(5):
                mlp(cp, 3, n=8192, d=2048, steps=1)
                used = proc_used()
                pool = adj.get_mem_pool_stats(bfc).pool_bytes
                rows.append({"used": used["bytes"], "pool": pool,
                             "outside": used["bytes"] - pool})
            gc.collect()
        adj.adjust_memory_limit(0, bfc)
        return {"rows": rows, "outside_growth": rows[-1]["outside"] - rows[0]["outside"],
                "host_peak": vmem.host_allocator.get_stats().peak_bytes_in_use}

    @step("shrink_seen_by_nvml")
    def shrink_seen_by_nvml() -> Any:
        rows = []
        for _ in range(3):
            bfc, vmem, routing = make_stack(4 << 30)
            ptrs = [vmem.allocate_raw(256, s) for s in (200 * MiB, 400 * MiB, 800 * MiB)]
            for p in ptrs:
                vmem.deallocate_raw(p)
            pool = adj.get_mem_pool_stats(bfc)
            before = proc_used()
            limit = adj.adjust_memory_limit(1 * MiB, bfc)
            after = proc_used()
            pool_after = adj.get_mem_pool_stats(bfc)
            released = pool.pool_bytes - pool_after.pool_bytes
            # grow again: the device takes allocations again
            adj.adjust_memory_limit(4 << 30, bfc)
            p = vmem.allocate_raw(256, 300 * MiB)
            regrow = proc_used()
            on_device = bfc.get_stats().bytes_in_use >= 300 * MiB   # the only live one
            vmem.deallocate_raw(p)
            adj.adjust_memory_limit(0, bfc)
            rows.append({"pool_before": pool.pool_bytes, "released": released, "limit": limit,
                         "drop": before["bytes"] - after["bytes"],
                         "regrow": regrow["bytes"] - after["bytes"], "on_device": on_device,
                         "method": after["method"]})
        return rows

    @step("cotenant_real_oom")
    def cotenant_real_oom() -> Any:
        t0 = time.perf_counter()
        with CoTenant(backend.pci_bus_id(0)) as tenant:
            started = time.perf_counter() - t0
            hold = tenant.leave(16 * MiB)
            free_seen, total = cp.cuda.runtime.memGetInfo()
            mem = backend.device_memory(0, 8 << 30)
            p = mem.alloc(256, 1 << 30)
            refused = p is None
            if p is not None:
                mem.free(p, 1 << 30)
            ref = mlp(np, 11, n=4096, d=2048)
            bfc, vmem, routing = make_stack(8 << 30)
            with routing:
                res = mlp(cp, 11, n=4096, d=2048)
                host_peak = vmem.host_allocator.get_stats().peak_bytes_in_use
            rel = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(res, ref))
            free_after_release = tenant.release()
            hold2 = tenant.take(512 * MiB)
        return {"start_s": round(started, 2), "held": hold.held, "free_reported": hold.free,
                "free_seen": free_seen, "refused_1GiB": refused,
                "driver_failures": mem.driver_failures, "host_peak": host_peak,
                "rel": rel, "free_after_release": free_after_release, "take512": hold2.held,
                "take_s": round(time.perf_counter() - t0, 2)}

    for fn in (target, backend_info, device_region_release, host_mapped_in_place,
               routing_device_then_host, routing_threads_and_cycles, memory_outside_the_pool,
               shrink_seen_by_nvml,
               cotenant_real_oom):
        fn()
    obs.close()
    ok = all(r["ok"] for r in RESULTS.values())
    print(f"SMOKE {'OK' if ok else 'FAILED'}: "
          f"{sum(r['ok'] for r in RESULTS.values())}/{len(RESULTS)} steps")
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
