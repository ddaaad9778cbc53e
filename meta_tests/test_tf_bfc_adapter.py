"""The TensorFlow BFC adapter (``adapters.tensorflow_bfc``): its build, its guards, and the
TensorFlow 2.21 facts behind the reasons of its verdict (README, "TensorFlow's compiled
allocator").

Each fact test drives TensorFlow's compiled allocator through the adapter in a scenario laid
out for TensorFlow 2.21 (2 MiB first region), so that the README's reason for a clause is
checked here and not only asserted: "BFC-11 fails because its scenarios assume a 1 MiB first
region; TensorFlow 2.21's garbage collection itself releases every free region" is two
claims, and the second is ``test_gc_releases_every_free_region``.

Marked ``tensorflow``: it needs TensorFlow's wheel (``tox -e certify-tf-bfc``); the ``tests``
environment deselects it. Real-time tests use generous bounds (the retry of TensorFlow's
``AllocatorRetry`` waits on the real clock) and never assert on speed.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from conformance import spec
from fixtures.oom import FaultInjectingSubAllocator, assert_bfc_valid
from fixtures.virtual_clock import VirtualClock
from meta_tests.test_tensorflow_verdict import tensorflow_version

pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(600)]

KiB = 1 << 10
MiB = 1 << 20
REPORT_DIR_ENV = "ANTMAN_TF_BFC_REPORT_DIR"
PINNED_TENSORFLOW = "2.21.0"


def load_adapter(name: str = "adapters.tensorflow_bfc") -> ModuleType:
    """The adapter (building its shim if needed); skipped without TensorFlow, except in the
    certify-tf-bfc environment, where a missing TensorFlow is a failure."""
    if importlib.util.find_spec("tensorflow") is None:
        message = (f"tensorflow is not importable by {sys.executable}; "
                   f"`tox -e certify-tf-bfc` installs it")
        if os.environ.get(REPORT_DIR_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def rt() -> ModuleType:
    return load_adapter()


@pytest.fixture(scope="module")
def port() -> ModuleType:
    return load_adapter("adapters.tensorflow_bfc.first_region_1mib")


class AdjacentSub:
    """A sub-allocator whose regions touch (as the one of TensorFlow's own BFC tests)."""

    def __init__(self, base: int = 1 << 40) -> None:
        self.next = base
        self.calls: list[int] = []
        self.frees: list[tuple[int, int]] = []

    def alloc(self, alignment: int, num_bytes: int) -> int:
        self.calls.append(num_bytes)
        ptr, self.next = self.next, self.next + num_bytes
        return ptr

    def free(self, ptr: int, num_bytes: int) -> None:
        self.frees.append((ptr, num_bytes))


def no_retry(rt: ModuleType):
    return rt.AllocationAttributes(no_retry_on_failure=True)


def chunks(bfc) -> list[tuple[int, int, bool]]:
    return [(c.ptr, c.size, c.in_use) for r in bfc.memory_map().regions for c in r.chunks]


# --- the runtime module and its build ----------------------------------------------------

def test_runtime_module_names_tensorflow_and_its_capabilities(rt: ModuleType) -> None:
    assert rt.NAME == "tensorflow-bfc"
    assert rt.VERSION == tensorflow_version() == PINNED_TENSORFLOW, (
        f"the adapter reports TensorFlow {rt.VERSION}; the pinned verdict is {PINNED_TENSORFLOW}'s")
    assert rt.SPEC_VERSION == spec.spec_version()
    assert rt.CAPABILITIES == frozenset({"bfc", "env", "vmem", "adjustable"}), (
        "the adapter must not declare virtual_clock: TensorFlow's retry waits on its own clock")


def test_importing_the_adapter_does_not_import_tensorflow(rt: ModuleType) -> None:
    code = "import sys, adapters.tensorflow_bfc; print('tensorflow' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=spec.ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False", proc.stdout


def test_the_build_is_cached_under_its_key(rt: ModuleType) -> None:
    from adapters.tensorflow_bfc import build
    first, again = build.build(), build.build()
    assert again.seconds is None and again.path == first.path, "a second build was not cached"
    assert again.path.parent.name == again.key == build.cache_key(build.plan()[4])
    assert again.info["tensorflow_version"] == rt.VERSION


def test_the_key_changes_with_tensorflow_its_flags_and_the_sources(
        rt: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from adapters.tensorflow_bfc import build
    key = build.cache_key(build.plan()[4])
    install = build.find_tensorflow()

    with monkeypatch.context() as m:
        m.setattr(build, "find_tensorflow",
                  lambda: build.TensorFlowInstall("2.99.0", install.package_dir,
                                                  install.framework_library))
        assert build.cache_key(build.plan()[4]) != key, "a new TensorFlow reused the build"

    flags = build._tensorflow_flags(install, build.cache_root())
    with monkeypatch.context() as m:
        m.setattr(build, "_tensorflow_flags",
                  lambda *_: {**flags, "compile": [*flags["compile"], "-DOTHER=1"]})
        assert build.cache_key(build.plan()[4]) != key, "new compile flags reused the build"

    shim_copy = tmp_path / "shim"
    shutil.copytree(build.SHIM_DIR, shim_copy)
    header = shim_copy / "bfc_private.h"
    header.write_text(header.read_text() + "\n// edited\n")
    with monkeypatch.context() as m:
        m.setattr(build, "SHIM_DIR", shim_copy)
        assert build.cache_key(build.plan()[4]) != key, "an edited header reused the build"
    assert build.cache_key(build.plan()[4]) == key


# --- BFC-7, BFC-8: the first region under growth is 2 MiB ----------------------------------

def test_first_growth_region_is_2_mib(rt: ModuleType) -> None:
    for total, growth, expected in [(64 * MiB, True, 2 * MiB), (MiB + 1, True, MiB + 256),
                                    (3 * MiB, False, 3 * MiB)]:
        bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), total, growth, "GPU_0_bfc")
        assert bfc.memory_map().next_region_size == expected, (total, growth)
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, 1 << 30, True, "GPU_0_bfc", retry_timeout_us=0)
    for n in (MiB, 2 * MiB, 4 * MiB):
        assert bfc.allocate_raw(256, n) is not None
    # TensorFlow 1.15 (BFC-8): 1, 2, 4 MiB; 2.21 doubles the same way from 2 MiB
    assert sim.alloc_calls == [2 * MiB, 4 * MiB, 8 * MiB]
    assert bfc.memory_map().next_region_size == 16 * MiB


def test_the_diagnostic_runtime_changes_only_the_first_region(rt: ModuleType,
                                                              port: ModuleType) -> None:
    sim = port.SimulatedDeviceMemory(1 << 30)
    bfc = port.BFCAllocator(sim, 1 << 30, True, "GPU_0_bfc", retry_timeout_us=0)
    for n in (MiB, 2 * MiB, 4 * MiB):
        bfc.allocate_raw(256, n)
    assert sim.alloc_calls == [MiB, 2 * MiB, 4 * MiB]
    assert isinstance(bfc, rt.BFCAllocator) and port.BFCAllocator.FIRST_GROWTH_REGION == MiB
    assert rt.BFCAllocator.FIRST_GROWTH_REGION == 0
    fixed = port.BFCAllocator(port.SimulatedDeviceMemory(MiB), 3 * MiB, False, "GPU_0_bfc")
    assert fixed.memory_map().next_region_size == 3 * MiB, "no growth: the region is untouched"
    gpu = port.GPUBFCAllocator(port.SimulatedDeviceMemory(MiB), 4 * MiB, "GPU_0_bfc",
                               allow_growth=True)
    assert isinstance(gpu, port.BFCAllocator) and gpu.memory_map().next_region_size == MiB
    vmem = port.maybe_create_gpu_vmem_allocator(bfc, host_sub_allocator=port.SimulatedHostMemory(MiB))
    assert type(vmem.host_allocator) is port.BFCAllocator
    assert vmem.host_allocator.memory_map().next_region_size == MiB


# --- BFC-10: the backpedal runs on every Extend, and loops forever below 2304 bytes -------

def test_backpedal_runs_on_every_extend(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, 1 << 30, True, "GPU_0_bfc", retry_timeout_us=0)
    assert bfc.allocate_raw(256, 256) is not None            # region 2 MiB, next 4 MiB
    sim.fail = True
    expected = [4 * MiB]
    while (smaller := rt._shim.backpedal_size(expected[-1])) >= 3 * MiB:
        expected.append(smaller)
    assert expected == [4194304, 3774976, 3397632], "RoundedBytes(size_t(size * 0.9f))"
    for _ in range(3):
        start = len(sim.alloc_calls)
        assert bfc.allocate_raw(256, 3 * MiB, no_retry(rt)) is None
        assert sim.alloc_calls[start:] == expected, (
            "every refused Extend backpedals (TensorFlow 1.15: only the first)")


def test_backpedal_loop_is_ended_with_its_reason(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, 2560, False, "GPU_0_bfc", retry_timeout_us=0)
    sim.fail = True
    before = (bfc.memory_map(), bfc.get_stats())
    for attributes in (no_retry(rt), None):
        with pytest.raises(rt.TensorFlowGuardError, match=r"forever.*\[BFC-10\]"):
            bfc.allocate_raw(256, 256, attributes)
    # TensorFlow's calls: 2560, then 2304 again and again; the guard ends the second 2304
    assert sim.alloc_calls[:3] == [2560, 2304, 2304], sim.alloc_calls
    assert (bfc.memory_map(), bfc.get_stats()) == before, "the ended loop changed the state"
    sim.fail = False
    assert bfc.allocate_raw(256, 256) is not None, "TensorFlow's mutex was not released"

    # A sub-allocator that refuses a fixed-point size once is asked again, as TensorFlow does
    once = FaultInjectingSubAllocator(rt.SimulatedDeviceMemory(1 << 30))
    bfc = rt.BFCAllocator(once, 256, False, "GPU_0_bfc", retry_timeout_us=0)
    once.fail_nth_call(1)
    assert bfc.allocate_raw(256, 256) is not None and once.calls == [256, 256]


# --- BFC-6: what TensorFlow aborts on, and the pointer inside a chunk it accepts ------------

def test_pointers_tensorflow_aborts_on_are_refused_with_their_reason(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, MiB, False, "GPU_0_bfc", retry_timeout_us=0)
    p = bfc.allocate_raw(256, 1024)
    q = bfc.allocate_raw(256, 256)
    bfc.allocate_raw(256, 256)
    bfc.deallocate_raw(q)
    before = (bfc.memory_map(), bfc.get_stats())
    cases = {0x1234: "below the one", p + MiB * 7: "no region holds it",
             p + 512: "no chunk starts", q: "double free"}
    for ptr, reason in cases.items():
        for name in ("deallocate_raw", "requested_size", "allocated_size", "allocation_id"):
            if reason == "double free" and name != "deallocate_raw":
                continue                      # a free chunk still answers queries (BFC-15)
            with pytest.raises(rt.TensorFlowGuardError, match=reason) as info:
                getattr(bfc, name)(ptr)
            assert "[BFC-6]" in str(info.value) and "GPU_0_bfc" in str(info.value)
    for bad in (-1, 2**64, 1.5, "1"):
        with pytest.raises(rt.InvalidPointerError):
            bfc.deallocate_raw(bad)
    assert (bfc.memory_map(), bfc.get_stats()) == before


def test_a_pointer_in_the_first_256_bytes_of_a_chunk_is_that_chunk(rt: ModuleType) -> None:
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(1 << 30), MiB, False, "GPU_0_bfc",
                          retry_timeout_us=0)
    p = bfc.allocate_raw(256, 1000)
    assert bfc.allocation_id(p + 1) == bfc.allocation_id(p) == 1
    assert bfc.requested_size(p + 255) == 1000
    bfc.deallocate_raw(p + 17)              # TensorFlow frees the chunk at p
    assert bfc.get_stats().bytes_in_use == 0 and bfc.allocation_id(p) == -1


def test_sizes_that_wrap_are_refused_and_sizes_beyond_size_t_fail(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, MiB, True, "GPU_0_bfc", retry_timeout_us=0)
    for n in (2**64 - 255, 2**64 - 1):
        with pytest.raises(rt.TensorFlowGuardError, match=r"wraps.*\[BFC-1\]"):
            bfc.allocate_raw(256, n)
    assert bfc.allocate_raw(256, 2**64 - 256) is None      # rounds without wrapping: too big
    assert bfc.allocate_raw(256, 2**64) is None and sim.alloc_calls == []
    assert rt.rounded_bytes(2**64 - 1) == 0, "TensorFlow's RoundedBytes wraps"


def test_a_zero_next_region_size_is_refused_not_doubled_forever(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, 0, True, "GPU_0_bfc", retry_timeout_us=0)
    assert bfc.allocate_raw(256, 256) is None                 # limit 0: Extend fails first
    rt.GPUAdjustableAllocator().adjust_memory_limit(MiB, bfc)  # ADJ-1 keeps next at 0
    with pytest.raises(rt.TensorFlowGuardError, match=r"forever.*\[BFC-8\]"):
        bfc.allocate_raw(256, 256)
    rt.GPUAdjustableAllocator().free_empty_memory(0, bfc)      # pool 0 == target: no reset
    rt.GPUAdjustableAllocator().adjust_memory_limit(0, bfc)
    assert sim.alloc_calls == []


def test_a_total_memory_whose_rounding_wraps_leaves_a_next_region_size_of_0(
        rt: ModuleType) -> None:
    """Without growth the next region size is RoundedBytes(total_memory), which wraps to 0
    above 2^64-256: the same endless doubling as a total memory of 0 (BFC-8)."""
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(1 << 30), 2**64 - 1, False, "GPU_0_bfc",
                          retry_timeout_us=0)
    assert rt.rounded_bytes(2**64 - 1) == 0 and bfc.memory_map().next_region_size == 0
    with pytest.raises(rt.TensorFlowGuardError, match=r"wraps.*forever.*\[BFC-8\]"):
        bfc.allocate_raw(256, 256)


# --- BFC-15: the requested size a recycled chunk slot keeps ---------------------------------

def test_the_rest_of_a_split_keeps_the_requested_size_of_a_recycled_chunk(
        rt: ModuleType) -> None:
    """A merge frees the chunk slot of the chunk merged away with its requested size; the next
    split takes that slot for the free rest and resets only its allocation id."""
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(1 << 30), 64 * MiB, True, "GPU_0_bfc",
                          retry_timeout_us=0)
    x = bfc.allocate_raw(256, 100)
    y = bfc.allocate_raw(256, 1000)
    assert y == x + 256 and bfc.allocate_raw(256, 300) == x + 1280
    bfc.deallocate_raw(x)
    bfc.deallocate_raw(y)                       # y merges into x: y's slot is freed
    assert bfc.allocate_raw(256, 256) == x      # the split takes y's slot for the rest
    assert (bfc.requested_size(x + 256), bfc.allocation_id(x + 256)) == (1000, -1)


# --- BFC-5, BFC-11: coalescing and garbage collection as in TensorFlow 1.15 ----------------

def test_chunks_coalesce_and_regions_never_merge(rt: ModuleType) -> None:
    sub = AdjacentSub()
    bfc = rt.BFCAllocator(sub, 64 * MiB, True, "GPU_0_bfc", retry_timeout_us=0)
    a = bfc.allocate_raw(256, 200)
    b = bfc.allocate_raw(256, 256)
    c = bfc.allocate_raw(256, 256)
    bfc.deallocate_raw(b)
    bfc.deallocate_raw(a)                       # merges with its free next chunk (b)
    assert chunks(bfc)[:2] == [(a, 512, False), (a + 512, 256, True)]
    bfc.deallocate_raw(c)                       # merges next (the tail), then into a
    assert chunks(bfc) == [(a, 2 * MiB, False)]
    p = bfc.allocate_raw(256, 2 * MiB)          # the whole first region
    q = bfc.allocate_raw(256, 4 * MiB)          # region 2, adjacent in memory
    assert q == p + 2 * MiB and sub.calls == [2 * MiB, 4 * MiB]
    bfc.deallocate_raw(p)
    bfc.deallocate_raw(q)
    assert [(r.ptr, r.size, len(r.chunks)) for r in bfc.memory_map().regions] == [
        (p, 2 * MiB, 1), (q, 4 * MiB, 1)], "adjacent regions merged (SupportsCoalescing)"


def test_gc_releases_every_free_region(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, 16 * MiB, True, "GPU_0_bfc", True, retry_timeout_us=0)
    a = bfc.allocate_raw(256, 2 * MiB)          # R1 2 MiB
    b = bfc.allocate_raw(256, 4 * MiB)          # R2 4 MiB
    c = bfc.allocate_raw(256, 8 * MiB)          # R3 8 MiB; pool 14 MiB, next 16 MiB
    bfc.deallocate_raw(a)
    bfc.deallocate_raw(b)                       # F = 6 MiB
    r = 4 * MiB + 256                           # no free chunk fits; available 2 MiB
    p = bfc.allocate_raw(256, r, no_retry(rt))
    # r <= limit - pool + F = 8 MiB: both free regions released (R2 alone would do), then a
    # region of min(next 16 MiB, available 8 MiB)
    assert p is not None and sim.free_calls == [(a, 2 * MiB), (b, 4 * MiB)]
    assert sim.alloc_calls == [2 * MiB, 4 * MiB, 8 * MiB, 8 * MiB]
    assert bfc.memory_map().total_region_allocated_bytes == 16 * MiB and c is not None
    assert_bfc_valid(bfc, sim)


# --- BFC-12, VMEM-9: TensorFlow's AllocatorRetry, on the real clock -------------------------

def _full(rt: ModuleType, timeout_us: int, clock=None):
    sim = rt.SimulatedDeviceMemory(1 << 30)
    bfc = rt.BFCAllocator(sim, MiB, False, "GPU_0_bfc", clock=clock,
                          retry_timeout_us=timeout_us)
    return bfc, sim, bfc.allocate_raw(256, MiB)


def test_retry_attempts_and_its_real_time_wait(rt: ModuleType) -> None:
    def refusing(timeout_us: int, clock=None):
        sim = rt.SimulatedDeviceMemory(1 << 30)
        bfc = rt.BFCAllocator(sim, 1 << 30, True, "GPU_0_bfc", clock=clock,
                              retry_timeout_us=timeout_us)
        assert bfc.allocate_raw(256, 256) is not None     # region 2 MiB, next 4 MiB
        sim.fail = True                                   # 4 MiB * 0.9 < 4 MiB: no backpedal
        return bfc, sim

    clock = VirtualClock(auto_advance=True)
    bfc, sim = refusing(0, clock)
    for attributes, attempts in [(no_retry(rt), 1), (None, 3), (rt.AllocationAttributes(), 3)]:
        start = len(sim.alloc_calls)
        assert bfc.allocate_raw(256, 4 * MiB, attributes) is None
        assert sim.alloc_calls[start:] == [4 * MiB] * attempts, (attributes, attempts)
    assert clock.records == [], "the injected clock was used: TensorFlow reads Env::NowMicros"
    bfc, sim = refusing(200_000)
    started = time.monotonic()
    assert bfc.allocate_raw(256, 4 * MiB) is None
    assert time.monotonic() - started >= 0.19, "retry_timeout_us=200000 did not wait 0.2 s"
    assert sim.alloc_calls[1:] == [4 * MiB] * 4, "attempt, attempt, wait, last attempt"


def test_a_free_wakes_a_waiting_retry(rt: ModuleType) -> None:
    bfc, _, p = _full(rt, 60_000_000)
    out: list = []
    waiter = threading.Thread(target=lambda: out.append(bfc.allocate_raw(256, 1000)),
                              name="antman-test-tf-waiter", daemon=True)
    started = time.monotonic()
    waiter.start()
    time.sleep(0.5)                     # generous: let the waiter reach its wait
    assert bfc.get_stats().bytes_in_use == MiB, "the waiter holds TensorFlow's mutex"
    bfc.deallocate_raw(p)
    waiter.join(30)
    assert not waiter.is_alive() and out == [p], "a free did not wake the 60 s retry"
    assert time.monotonic() - started < 30


def test_vmem_host_wait_does_not_stall_the_vmem_allocator(rt: ModuleType,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "1")
    dev_sim = rt.SimulatedDeviceMemory(MiB)
    device = rt.BFCAllocator(dev_sim, MiB, False, "GPU_0_bfc", retry_timeout_us=0)
    vmem = rt.maybe_create_gpu_vmem_allocator(device, host_sub_allocator=rt.SimulatedHostMemory(
        1 << 30), retry_timeout_us=60_000_000)
    d1 = vmem.allocate_raw(256, 512 * KiB)
    d2 = vmem.allocate_raw(256, 512 * KiB)
    h = vmem.allocate_raw(256, MiB)                        # host full
    out: list = []
    waiter = threading.Thread(target=lambda: out.append(vmem.allocate_raw(256, MiB)),
                              name="antman-test-tf-host-waiter", daemon=True)
    waiter.start()
    time.sleep(0.5)
    vmem.deallocate_raw(d1)                                # device free through the VMem
    d3 = vmem.allocate_raw(256, 1000)                      # device allocation through it
    assert vmem.allocation_id(d2) == 2 and vmem.get_stats().bytes_in_use == 512 * KiB + 1024
    assert waiter.is_alive(), "the fallback did not wait for host memory"
    vmem.deallocate_raw(h)                                 # wakes the waiter
    waiter.join(30)
    assert not waiter.is_alive() and out == [h] and d3 is not None


# --- ENV: TensorFlow's readers and their log records -----------------------------------------

def test_env_readers_return_what_tensorflow_leaves(rt: ModuleType, caplog, monkeypatch) -> None:
    name = "TF_ANTMAN_SUITE_TEST_VAR"

    def errors() -> list[str]:
        found = [r.getMessage() for r in caplog.records
                 if r.name == "adapters.tensorflow_bfc.env" and r.levelno == logging.ERROR]
        caplog.clear()
        return found

    for value, expected, failed in [("+5", 5, False), ("12abc", 12, True), ("yes", 0, True),
                                    ("99999999999999999999", 2**63 - 1, True), (" 7 ", 7, False)]:
        monkeypatch.setenv(name, value)
        assert rt.read_int64_from_env_var(name, 65536) == expected, value
        logged = errors()
        assert len(logged) == (1 if failed else 0), (value, logged)
        if failed:
            assert "Use the default value: 65536" in logged[0], logged
    monkeypatch.setenv(name, "yes")
    assert rt.read_bool_from_env_var(name, True) is True and len(errors()) == 1
    monkeypatch.setenv(name, "TRUE")
    assert rt.read_bool_from_env_var(name, False) is True and errors() == []


def test_tensorflow_log_records_reach_python_logging(rt: ModuleType, caplog,
                                                     monkeypatch) -> None:
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "TRUE")
    monkeypatch.setenv("TF_ENABLE_GPU_GARBAGE_COLLECTION", "nope")   # logged, not asked for
    assert rt.get_allow_growth_value(True) is True
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    record = records[0]
    assert (record.name, record.levelno) == ("adapters.tensorflow_bfc.tensorflow", logging.ERROR)
    assert record.pathname.endswith("gpu_bfc_allocator.cc") and "TF_FORCE_GPU_ALLOW_GROWTH" in (
        record.getMessage())
    caplog.clear()
    assert rt.get_garbage_collection_value() is True
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        'The TF_ENABLE_GPU_GARBAGE_COLLECTION environment variable is set but could not be '
        'parsed: "nope". Valid values are "true" or "false". Using the default value "true".']


def test_tensorflow_quotes_an_unparsable_value_as_it_is(rt: ModuleType, caplog,
                                                        monkeypatch) -> None:
    """ENV-6: TensorFlow's own error for TF_FORCE_GPU_ALLOW_GROWTH, and the error Status of its
    readers (which the adapter logs as given), hold the value unescaped; its override warning
    names the original value as C++ prints a bool (ENV-3)."""
    value = "x\nforged"
    for var, call in [("TF_FORCE_GPU_ALLOW_GROWTH", lambda: rt.get_allow_growth_value(True)),
                      ("TF_ANTMAN_SUITE_TEST_VAR",
                       lambda: rt.read_bool_from_env_var("TF_ANTMAN_SUITE_TEST_VAR", True)),
                      ("TF_ANTMAN_SUITE_TEST_VAR",
                       lambda: rt.read_int64_from_env_var("TF_ANTMAN_SUITE_TEST_VAR", 7))]:
        caplog.clear()
        monkeypatch.setenv(var, value)
        call()
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and value in errors[0], (var, errors)
        monkeypatch.delenv(var)
    caplog.clear()
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    assert rt.get_allow_growth_value(False) is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].endswith("Original config value was false."), (
        warnings)


# --- the Python sub-allocator ---------------------------------------------------------------

def test_sub_allocator_errors_reach_the_caller_and_leave_a_valid_allocator(rt: ModuleType) -> None:
    sim = rt.SimulatedDeviceMemory(1 << 30)

    class Broken:
        def __init__(self) -> None:
            self.alloc_error: Exception | None = None
            self.free_error: Exception | None = None

        def alloc(self, alignment, num_bytes):
            if self.alloc_error is not None:
                raise self.alloc_error
            return sim.alloc(alignment, num_bytes)

        def free(self, ptr, num_bytes):
            sim.free(ptr, num_bytes)
            if self.free_error is not None:
                raise self.free_error

    sub = Broken()
    bfc = rt.BFCAllocator(sub, 16 * MiB, True, "GPU_0_bfc", True, retry_timeout_us=0)
    sub.alloc_error = KeyError("no memory today")
    with pytest.raises(KeyError, match="no memory today"):
        bfc.allocate_raw(256, 256)
    sub.alloc_error = None
    a = bfc.allocate_raw(256, 2 * MiB)
    b = bfc.allocate_raw(256, 4 * MiB)
    bfc.allocate_raw(256, 8 * MiB)
    bfc.deallocate_raw(a)
    bfc.deallocate_raw(b)
    sub.free_error = OSError("free failed")
    with pytest.raises(OSError, match="free failed"):       # raised after the GC completed
        bfc.allocate_raw(256, 4 * MiB + 256, no_retry(rt))
    assert_bfc_valid(bfc, sim)
    assert bfc.memory_map().total_region_allocated_bytes == 16 * MiB

    class Misaligned:
        def alloc(self, alignment, num_bytes):
            return (1 << 40) + 128

        def free(self, ptr, num_bytes):
            pass

    odd = rt.BFCAllocator(Misaligned(), MiB, True, "GPU_0_bfc", retry_timeout_us=0)
    with pytest.raises(rt.TensorFlowGuardError, match="not aligned to 256"):
        odd.allocate_raw(256, 256)


# --- VMEM-7, ADJ-1: the AntMan layer over TensorFlow's allocator -----------------------------

def test_vmem_knows_its_host_pointers_through_the_friend_class(rt: ModuleType) -> None:
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, False, "GPU_0_bfc",
                             retry_timeout_us=0)
    vmem = rt.maybe_create_gpu_vmem_allocator(device, host_sub_allocator=rt.SimulatedHostMemory(
        1 << 30), retry_timeout_us=0)
    d = vmem.allocate_raw(256, MiB)
    h = vmem.allocate_raw(256, 1000)
    assert vmem.host_allocator.allocation_id(h) == 1
    vmem.deallocate_raw(h)
    for ptr in (h, h + 1, 0xDEAD00):          # a host double free, inside a chunk, unknown
        with pytest.raises(rt.InvalidPointerError, match="GPUVMem_0_bfc"):
            vmem.deallocate_raw(ptr)
    vmem.deallocate_raw(d)
    assert device.get_stats().bytes_in_use == 0


def test_a_limit_of_2_63_does_not_fit_tensorflows_int64_stat(rt: ModuleType) -> None:
    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    assert rt.GPUAdjustableAllocator().adjust_memory_limit(2**63, bfc) == 2**63
    assert bfc.memory_map().memory_limit == 2**63
    assert bfc.get_stats().bytes_limit == -2**63, "AllocatorStats::bytes_limit is int64_t"
    for limit in (2**64 - 1, 2**64 - 2):
        assert rt.GPUAdjustableAllocator().adjust_memory_limit(limit, bfc) == limit
        assert bfc.memory_map().memory_limit == limit
        assert bfc.get_stats().bytes_limit == limit - 2**64
