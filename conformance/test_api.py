"""API clauses: the runtime module, its capabilities and the names each capability requires."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from conformance import spec
from conformance.preconditions import precondition_holds

#: The names each capability requires (API-1, API-3 to API-7); start-up checks them too.
NAMES_BY_CAPABILITY = {cap: names for cap, names in spec.CAPABILITY_NAMES.items() if names}

CLOCK_TAKERS = ("BFCAllocator", "GPUBFCAllocator", "FileListener", "GPUResourceManagement",
                "GPUStatistics", "DirectSession", "create_runtime")


@pytest.mark.clause("API-1")
def test_runtime_module_identifies_itself(rt) -> None:
    for attr in ("NAME", "VERSION", "SPEC_VERSION"):
        value = getattr(rt, attr)
        assert isinstance(value, str) and value, f"{rt.__name__}.{attr}={value!r} [API-1]"
    assert rt.SPEC_VERSION == spec.spec_version(), (
        f"{rt.__name__}.SPEC_VERSION={rt.SPEC_VERSION!r}, suite spec is "
        f"{spec.spec_version()!r} [API-1]")


@pytest.mark.clause("API-2")
def test_capabilities_are_from_the_closed_vocabulary(rt) -> None:
    assert isinstance(rt.CAPABILITIES, frozenset), "CAPABILITIES must be a frozenset [API-2]"
    unknown = set(rt.CAPABILITIES) - spec.CAPABILITIES
    assert not unknown, f"unknown capabilities {sorted(unknown)} [API-2]"


@pytest.mark.clause("API-3", "API-5", "API-6", "API-7")
@pytest.mark.parametrize("capability", sorted(NAMES_BY_CAPABILITY))
def test_declared_capability_exposes_its_names(rt, capability: str) -> None:
    if capability not in rt.CAPABILITIES:
        pytest.skip(f"NOT_SUPPORTED: runtime {rt.NAME} does not declare capability "
                    f"{capability!r}")
    missing = [n for n in NAMES_BY_CAPABILITY[capability] if not hasattr(rt, n)]
    assert not missing, f"capability {capability!r} declared but {missing} missing [API-1]"


@pytest.mark.clause("API-4")
@pytest.mark.capability("virtual_clock")
def test_components_take_an_injectable_clock(rt) -> None:
    present = [n for n in CLOCK_TAKERS if hasattr(rt, n)]
    assert present, "no clock-taking component exposed [API-4]"
    lacking = [n for n in present
               if "clock" not in inspect.signature(getattr(rt, n)).parameters]
    assert not lacking, f"{lacking} take no 'clock' argument [API-4]"


@pytest.fixture
def simulated_memories(rt) -> None:
    """The simulated memories are names of the ``bfc`` capability (API-3): a runtime that
    does not declare it is not held to them (stock TensorFlow as a black box)."""
    if "bfc" not in rt.CAPABILITIES:
        pytest.skip(f"NOT_SUPPORTED: runtime {rt.NAME} does not declare capability 'bfc', "
                    f"whose names (API-3) include the simulated memories")


@pytest.mark.clause("API-3")
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memories_never_hand_out_the_null_pointer(rt) -> None:
    """A pointer is a positive int (0 is C's null pointer, TF's failure) and a multiple of
    256, also from the first instance a process makes (a fresh interpreter: the suite's own
    process made many before this test)."""
    probe = (f"import {rt.__name__} as rt\n"
             "for kind in (rt.SimulatedDeviceMemory, rt.SimulatedHostMemory):\n"
             "    print(kind.__name__, kind(1 << 20).alloc(256, 1024))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, ANTMAN_DEVICE="sim"))
    assert proc.returncode == 0, f"the probe failed: {proc.stderr[-2000:]} [API-3]"
    pointers = dict(line.split() for line in proc.stdout.splitlines())
    for kind, text in pointers.items():
        assert text.isdigit() and int(text) > 0 and int(text) % 256 == 0, (
            f"the first {kind} of a process handed out pointer {text} [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memory_hands_out_disjoint_int_ranges_after_wrapping(rt, kind: str) -> None:
    """Addresses cost nothing in a simulation: terabyte regions allocated, freed and
    allocated again (past where a bump pointer would wrap) stay positive, 256-aligned ints
    whose live ranges never overlap."""
    tib = 1 << 40
    memory = getattr(rt, kind)(64 * tib)
    live: dict[int, int] = {}
    for size, free_first in ((6 * tib, None), (6 * tib, None), (6 * tib, 0), (3 * tib, 1),
                             (5 * tib, None), (tib, 2)):
        if free_first is not None:
            ptr = sorted(live)[free_first]
            memory.free(ptr, live.pop(ptr))
        ptr = memory.alloc(256, size)
        assert type(ptr) is int and ptr > 0 and ptr % 256 == 0, (
            f"{kind}.alloc(256, {size}) returned {ptr!r} [API-3]")
        for other, other_size in live.items():
            assert ptr + size <= other or other + other_size <= ptr, (
                f"{kind} handed out [{ptr:#x}, +{size}) over the live region "
                f"[{other:#x}, +{other_size}) [API-3]")
        live[ptr] = size
    assert memory.live_regions == live, f"{kind}.live_regions {memory.live_regions} [API-3]"


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("method", ["alloc", "free"])
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memory_changes_its_regions_under_its_lock(rt, monkeypatch, kind: str,
                                                              method: str) -> None:
    """A simulated memory is the sub-allocator of every allocator built on it, called from
    their threads: alloc places a region after a search of the live ones and records it in
    three places, free checks and removes it from them. Forced, not hoped for: the memory's
    lock is watched (fixtures/interleave.py) and each line the method runs records whether
    the calling thread held it; some line must."""
    from fixtures.interleave import lock_held_in, watch_lock
    memory = getattr(rt, kind)(1 << 20)
    p = memory.alloc(256, 1024)
    watched = watch_lock(monkeypatch, memory, "_lock", f"the {kind}'s lock")
    _, held = lock_held_in(lambda: memory.free(memory.alloc(256, 512), 512), method, watched)
    memory.free(p, 1024)
    if not held:
        pytest.skip(f"the check follows the reference's design ({method} a method of the "
                    f"memory's class); this runtime's {method} ran no line of its own")
    assert any(held), (
        f"{kind}.{method} ran {len(held)} line(s), none with the memory's lock held: two "
        f"allocations at once can be handed overlapping regions, and a free can be lost or "
        f"leave the live regions inconsistent [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memory_fail_is_a_bool_false_at_first(rt, kind: str) -> None:
    memory = getattr(rt, kind)(1 << 20)
    assert memory.fail is False, (
        f"a new {kind}'s fail is {memory.fail!r}, expected the bool False [API-3]")
    memory.fail = True
    assert memory.alloc(256, 1024) is None, f"{kind}.alloc with fail True served [API-3]"
    memory.fail = False
    assert memory.alloc(256, 1024) is not None, f"{kind}.alloc with fail False refused [API-3]"


@pytest.mark.clause("API-3")
@pytest.mark.usefixtures("simulated_memories")
def test_host_regions_never_overlap_a_live_device_region_however_many_host_memories(rt) -> None:
    """One device region stays live while 65536 host memories are made one after another,
    each with one region: none of them overlaps the device region."""
    device = rt.SimulatedDeviceMemory(1 << 20)
    d = device.alloc(256, 1 << 20)
    overlapping = []
    for i in range(1 << 16):
        h = rt.SimulatedHostMemory(1 << 20).alloc(256, 1 << 20)
        if h < d + (1 << 20) and d < h + (1 << 20):
            overlapping.append((i, h))
    assert not overlapping, (
        f"of 65536 host memories, {len(overlapping)} (the first: number {overlapping[0][0]}) "
        f"handed out a region over the live device region [{d:#x}, +1 MiB) [API-3]")


def _half_and_256_placed(rt, kind: str) -> tuple[Any, int, int, int, int]:
    """A new memory of ``kind`` (capacity no bound) with region a (half the largest region
    one serves, found by bisection) and b (256) placed one after the other: (memory,
    largest, a_size, a, b). Skips a memory that serves 2^62 bytes (no end to test at)."""
    memory_of = getattr(rt, kind)
    huge = 1 << 62
    lo, hi = 256, huge                          # lo is served, hi is not (or is the cap)
    if memory_of(huge).alloc(256, hi) is not None:
        pytest.skip(f"a {kind} serves {huge} bytes: no end of its addresses to test at")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if memory_of(huge).alloc(256, mid) is not None:
            lo = mid
        else:
            hi = mid
    largest = lo
    memory = memory_of(huge)
    a_size = largest // 2 // 256 * 256
    a = memory.alloc(256, a_size)
    b = memory.alloc(256, 256)
    assert a is not None and b is not None and b > a, f"{kind}: a={a!r} b={b!r} [API-3]"
    return memory, largest, a_size, a, b


def _start_and_beyond(rt, kind: str):
    """Regions a (half the largest) and b (256) placed one after the other and freed, so that
    the next-fit position is after b; then d, too large for the room after that position,
    placed from the start over a, and f (256) right after d. Returns the memory, the gap the
    memory leaves between two regions, the next-fit position, a, d's size, d and f."""
    memory, largest, a_size, a, b = _half_and_256_placed(rt, kind)
    gap = b - (a + a_size)
    next_fit = b + 256 + gap                    # as far after b as b is after a
    memory.free(a, a_size)
    memory.free(b, 256)
    d_size = (largest - gap - 256) // 256 * 256
    d = memory.alloc(256, d_size)
    f = memory.alloc(256, 256)
    return memory, gap, next_fit, a, d_size, d, f


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_next_fit_never_runs_into_a_region_placed_beyond_it(rt, kind: str) -> None:
    """Regions a (half the largest) and b (256) are placed one after the other and freed;
    the next-fit position is then after b. Region d, too large for the room after that
    position, is placed from the start over it, and f (256) right after d, beyond it; d is
    freed. A region that would run 256 bytes into f if placed at the next-fit position must
    go elsewhere: no two live regions overlap or touch."""
    memory, gap, next_fit, a, d_size, d, f = _start_and_beyond(rt, kind)
    precondition_holds("API-3", d == a and f is not None and f > next_fit,
                       f"{kind}: a region of {d_size} bytes goes to the start ({d!r}, a={a:#x}) "
                       f"and one of 256 bytes after it ({f!r}), beyond the next-fit position "
                       f"{next_fit:#x}")
    memory.free(d, d_size)
    size = f + 256 - next_fit
    g = memory.alloc(256, size)
    assert g is not None, (
        f"{kind}: alloc(256, {size}) refused with room for it before f at {f:#x} [API-3]")
    assert g + size < f or f + 256 < g, (
        f"{kind}: a region of {size} bytes was placed at {g:#x}, up to {g + size:#x}, over or "
        f"against the live region [{f:#x}, +256) [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_next_fit_takes_the_room_up_to_a_region_placed_beyond_it(rt, kind: str) -> None:
    """As above, f lies beyond the next-fit position; a region that ends as far before f as
    b is after a fits at that position exactly, so it goes there, not into the room a freed
    region left at the start."""
    memory, gap, next_fit, a, d_size, d, f = _start_and_beyond(rt, kind)
    precondition_holds("API-3", d == a and f is not None and f > next_fit + gap,
                       f"{kind}: a region of {d_size} bytes goes to the start ({d!r}, a={a:#x}) "
                       f"and one of 256 bytes after it ({f!r}), beyond the next-fit position "
                       f"{next_fit:#x} and a gap")
    memory.free(d, d_size)
    size = f - gap - next_fit                   # ends as far before f as b is after a
    g = memory.alloc(256, size)
    assert g == next_fit, (
        f"{kind}: a region of {size} bytes, which fits at the next-fit position {next_fit:#x} "
        f"up to {gap} bytes before the live region at {f:#x}, was placed at "
        f"{g if g is None else hex(g)}, not there (next fit) [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_next_fit_holds_up_to_the_end_of_the_address_space(rt, kind: str) -> None:
    """Next fit at the edge: the largest region a new memory serves (found by bisection, its
    capacity no bound) marks where its addresses end. A region that ends exactly there, after
    the last region placed, goes after it, not in the room a freed region left."""
    memory, largest, a_size, a, b = _half_and_256_placed(rt, kind)
    after_b = b + 256 + (b - (a + a_size))      # as far after b as b is after a
    size = a + largest - after_b                # ends where the largest region ends
    memory.free(a, a_size)
    c = memory.alloc(256, size)
    assert c == after_b, (
        f"{kind}: the largest region is {largest} bytes; after regions a (freed) and b, a "
        f"region of {size} bytes, which fits after b up to that end, was placed at "
        f"{c if c is None else hex(c)}, expected {after_b:#x} after b, not in the room a "
        f"freed region left (next fit) [API-3]")


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memories_made_and_dropped_never_take_a_live_ones_addresses(rt,
                                                                              kind: str) -> None:
    """Two memories of the kind stay live, each with a region, while 65,536 more are made
    and dropped one after another, each with one region (more than the 61,440 a process may
    hold at once, so addresses of dropped ones must be taken again): none of them is refused,
    and none overlaps a live region."""
    memory_of = getattr(rt, kind)
    kept = [memory_of(1 << 20) for _ in range(2)]
    live = [m.alloc(256, 1 << 20) for m in kept]
    overlapping = []
    for i in range(1 << 16):
        try:
            p = memory_of(1 << 20).alloc(256, 1 << 20)
        except MemoryError as e:
            pytest.fail(f"{kind} number {i + 1} of those made and dropped one after another, "
                        f"with 2 live, was refused: {e} [API-3]")
        if any(p < q + (1 << 20) and q < p + (1 << 20) for q in live):
            overlapping.append((i, p))
    assert not overlapping, (
        f"of 65536 {kind}s made and dropped, {len(overlapping)} (the first: number "
        f"{overlapping[0][0] + 1}) handed out a region over one of a live {kind}: "
        f"{[hex(q) for q in live]} [API-3]")


# Run in a fresh interpreter, where no instance is live yet: the memories of the kind made
# one by one and kept, each with a region of 4 KiB, until one is refused (at most 61,441).
# The second one made is dropped at once; its region's address is a stale pointer.
_BOUND_PROBE = """\
import gc, json, sys
import {module} as rt
kind, other = getattr(rt, sys.argv[1]), getattr(rt, sys.argv[2])
held = [kind(1 << 20)]
pointers = [held[0].alloc(256, 4096)]
dropped = kind(1 << 20)
stale = dropped.alloc(256, 4096)
del dropped
gc.collect()
error = None
while len(held) <= 61440:
    try:
        m = kind(1 << 20)
    except Exception as e:
        error = [type(e).__name__, str(e)]
        break
    held.append(m)
    pointers.append(m.alloc(256, 4096))
beside = other(1 << 20).alloc(256, 4096)
ends = sorted(pointers + [beside])
out = dict(live=len(held), error=error, distinct=len(set(pointers)) == len(pointers),
           stale_at=[i for i, p in enumerate(pointers) if p == stale],
           bad=[p for p in pointers if not (type(p) is int and p > 0 and p % 256 == 0)][:3],
           other=beside is not None and all(b - a > 4096 for a, b in zip(ends, ends[1:])))
gone = held.pop(100)
gone_pointer = pointers.pop(100)
del gone, m
gc.collect()
again = kind(1 << 20).alloc(256, 4096)
out["again"] = again is not None and again not in set(pointers)
print(json.dumps(out))
"""


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memories_live_at_once_are_bounded_by_61440(rt, kind: str) -> None:
    """A fresh process holds 61,440 memories of the kind live at once, each with its own
    addresses; the address range of one dropped early is taken again only by the last of
    them (none is left unused then); the 61,441st is refused with MemoryError naming 61440,
    the other kind is not; once one of them is garbage collected, one more is made."""
    other = ("SimulatedHostMemory" if kind == "SimulatedDeviceMemory"
             else "SimulatedDeviceMemory")
    proc = subprocess.run([sys.executable, "-c", _BOUND_PROBE.format(module=rt.__name__),
                           kind, other], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, ANTMAN_DEVICE="sim"))
    assert proc.returncode == 0, f"the probe failed: {proc.stderr[-2000:]} [API-3]"
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["distinct"] and not out["bad"], (
        f"of the {out['live']} live {kind}s of a process, two handed out the same address, or "
        f"some a pointer that is not a positive multiple of 256 ({out['bad']}) [API-3]")
    assert out["error"] is not None and out["live"] == 61440, (
        f"a process made {out['live']} live {kind}s, the next one "
        f"{'raised ' + repr(out['error']) if out['error'] else 'too'}; expected 61440 live "
        f"and the next refused [API-3]")
    name, message = out["error"]
    assert name == "MemoryError" and re.search(r"(?<![\d.])61,?440(?!\.?\d)", message), (
        f"the {kind} made while 61440 are live raised {name}: {message!r}, expected "
        f"MemoryError naming 61440 [API-3]")
    assert out["stale_at"] in ([], [61439]), (
        f"the address of a {kind} dropped early was handed out again by live instance number "
        f"{out['stale_at'][0] + 1} of 61440, while addresses no instance took were left "
        f"[API-3]")
    assert out["other"], (
        f"with 61440 live {kind}s, each with a region, a new {other} served no region apart "
        f"from theirs [API-3]")
    assert out["again"], (
        f"once one of 61440 live {kind}s was garbage collected, a new one served no region "
        f"apart from the live ones [API-3]")


# Run in a fresh interpreter, where no address range was taken yet: four threads, started
# together, each make 500 memories of the kind and keep them; then the race is forced: while
# one memory is being made, at each line its construction runs in a function named ``take``
# (the reference's design) without the lock of that function's ``self`` held, another thread
# makes one to the end.
_THREADS_PROBE = """\
import json, sys, threading
import {module} as rt
kind = getattr(rt, sys.argv[1])
barrier = threading.Barrier(4)
made = []
def make():
    barrier.wait()
    made.extend([kind(1 << 20) for _ in range(500)])           # list.extend is atomic
threads = [threading.Thread(target=make) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
forced = 0
def lines(frame, event, arg):
    global forced
    lock = getattr(frame.f_locals.get("self"), "_lock", None)
    if event == "line" and lock is not None and not lock.locked():
        forced += 1
        other = threading.Thread(target=lambda: made.append(kind(1 << 20)))
        other.start()
        other.join()
    return lines
def tracer(frame, event, arg):
    return lines if event == "call" and frame.f_code.co_name == "take" else None
sys.settrace(tracer)
made.append(kind(1 << 20))
sys.settrace(None)
pointers = [m.alloc(256, 4096) for m in made]
print(json.dumps(dict(made=len(made), distinct=len(set(pointers)), forced=forced)))
"""


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_simulated_memories_made_at_once_from_threads_take_distinct_addresses(
        rt, kind: str) -> None:
    """Memories of the kind made from several threads at once, also one made while another
    is half made (forced, in a fresh process: _THREADS_PROBE), each hand out addresses no
    other live one does."""
    proc = subprocess.run([sys.executable, "-c", _THREADS_PROBE.format(module=rt.__name__),
                           kind], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, ANTMAN_DEVICE="sim"))
    assert proc.returncode == 0, f"the probe failed: {proc.stderr[-2000:]} [API-3]"
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["distinct"] == out["made"] == 2001 + out["forced"], (
        f"{out['made']} live {kind}s made from threads at once ({out['forced']} of them in "
        f"the middle of another's construction) handed out {out['distinct']} distinct "
        f"addresses [API-3]")
