"""API clauses: the runtime module, its capabilities and the names each capability requires."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

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


@pytest.mark.clause("API-3")
@pytest.mark.parametrize("kind", ["SimulatedDeviceMemory", "SimulatedHostMemory"])
@pytest.mark.usefixtures("simulated_memories")
def test_next_fit_never_runs_into_a_region_placed_beyond_it(rt, kind: str) -> None:
    """Regions a (half the largest) and b (256) are placed one after the other and freed;
    the next-fit position is then after b. Region d, too large for the room after that
    position, is placed from the start over it, and f (256) right after d, beyond it; d is
    freed. A region that would run 256 bytes into f if placed at the next-fit position must
    go elsewhere: no two live regions overlap or touch."""
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
    gap = b - (a + a_size)
    next_fit = b + 256 + gap                    # as far after b as b is after a
    memory.free(a, a_size)
    memory.free(b, 256)
    d_size = (largest - gap - 256) // 256 * 256
    d = memory.alloc(256, d_size)
    f = memory.alloc(256, 256)
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
def test_next_fit_holds_up_to_the_end_of_the_address_space(rt, kind: str) -> None:
    """Next fit at the edge: the largest region a new memory serves (found by bisection, its
    capacity no bound) marks where its addresses end. A region that ends exactly there, after
    the last region placed, goes after it, not in the room a freed region left."""
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
    after_b = b + 256 + (b - (a + a_size))      # as far after b as b is after a
    size = a + largest - after_b                # ends where the largest region ends
    memory.free(a, a_size)
    c = memory.alloc(256, size)
    assert c == after_b, (
        f"{kind}: the largest region is {largest} bytes; after regions a (freed) and b, a "
        f"region of {size} bytes, which fits after b up to that end, was placed at "
        f"{c if c is None else hex(c)}, expected {after_b:#x} after b, not in the room a "
        f"freed region left (next fit) [API-3]")
