"""STAT clauses: GPUStatistics (dump policy on the virtual clock, figures, schema, atomicity).

A run "dumped" when the status file, removed before the run, exists after it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading

import pytest

from conformance.control_helpers import (MiB, bus_id, control_env, gpus,  # noqa: F401
                                         runtime_records, runtimes)
from conformance.preconditions import precondition
from fixtures.status_reader import status_reader, validate_status  # noqa: F401
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("statistics", "virtual_clock")

S = 1_000_000


class Harness:
    """A GPUStatistics on a virtual clock over a runtime's devices."""

    def __init__(self, rt, ctx, path) -> None:
        self.rt, self.ctx, self.path = rt, ctx, path
        self.clock = VirtualClock()
        self.stats = rt.GPUStatistics(str(path), clock=self.clock)

    def run(self, d: int, graph: int = 1) -> bool:
        if self.path.exists():
            self.path.unlink()
        self.stats.run_action(self.rt.SessionRunActionOptions(
            device_mgr=self.ctx.device_mgr, graph_id=graph, sess_duration_us=d))
        return self.path.exists()

    def later(self, seconds: int) -> "Harness":
        self.clock.advance(seconds * S)
        return self

    def doc(self) -> dict:
        return json.loads(self.path.read_text(encoding="utf-8"))


@pytest.fixture
def harness(rt, runtimes, tmp_path):
    ctx = runtimes()
    return Harness(rt, ctx, tmp_path / "status.json")


def alloc(ctx, n: int) -> int:
    p = gpus(ctx)[0].get_allocator().allocate_raw(256, n)
    assert p is not None, "[BFC-1]"
    return p


@pytest.mark.clause("STAT-1")
@pytest.mark.parametrize("path", [None, ""])
def test_disabled_writes_nothing(rt, runtimes, tmp_path, monkeypatch, caplog, path) -> None:
    """Disabled, a run does nothing: no file written or removed anywhere (the working
    directory, nor beside it a file of STAT-10's temporary form), and no log record (an empty
    path taken for the working directory would fail the write, STAT-9, and log it)."""
    ctx = runtimes()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (tmp_path / ".cwd.1.tmp").write_bytes(b"")       # STAT-10's form for a status path cwd
    monkeypatch.chdir(cwd)
    stats = rt.GPUStatistics(path, clock=VirtualClock())
    before = (set(os.listdir(tmp_path)), set(os.listdir(cwd)))
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                sess_duration_us=100))
    assert (set(os.listdir(tmp_path)), set(os.listdir(cwd))) == before, \
        "a disabled GPUStatistics wrote or removed a file [STAT-1]"
    assert not caplog.records, (f"a disabled GPUStatistics logged "
                                f"{[r.getMessage() for r in caplog.records]} [STAT-1]")


@pytest.mark.clause("STAT-1")
def test_default_path_from_environment(rt, runtimes, control_env, tmp_path) -> None:
    ctx = runtimes()
    path = tmp_path / "from_env.json"
    control_env.setenv("GPU_STATUS_FILE", str(path))
    rt.GPUStatistics(clock=VirtualClock()).run_action(rt.SessionRunActionOptions(
        device_mgr=ctx.device_mgr, graph_id=1, sess_duration_us=100))
    assert path.exists(), "GPU_STATUS_FILE was not used as the default path [STAT-1]"


#: The reference's statistics functions run by concurrent steps (SESS-6), the lock each
#: takes, and what a concurrent step can do to one that runs without it.
STATISTICS_LOCKED = {
    "record_session_run_duration": (
        "_record_lock", "STAT-2",
        "a concurrent step of the same graph can lose its entry or break the window's bound"),
    "check_session_run_duration": (
        "_record_lock", "STAT-2",
        "the re-averaging can read a window while a concurrent step changes it, and raise"),
    "run_action": (
        "_check_lock", "STAT-3",
        "two concurrent checks can re-average the stored durations and write the status "
        "file at once, one of them raising or writing a stale document"),
}


@pytest.mark.clause("STAT-2", "STAT-3")
@pytest.mark.parametrize("function", sorted(STATISTICS_LOCKED))
def test_every_shared_window_access_takes_its_lock(rt, harness, monkeypatch, function) -> None:
    """The windows (STAT-2) and the checks (STAT-3) are shared by concurrent steps: each is
    read and changed under its lock. Forced, not hoped for: the lock is watched
    (fixtures/interleave.py), a step records and checks (a check is due 10 s after the last),
    and each line of the function records whether the calling thread held the lock; some
    line must."""
    from fixtures.interleave import lock_held_in, watch_lock
    h = harness
    lock_name, clause, consequence = STATISTICS_LOCKED[function]
    assert h.run(1000), "the first run did not write the status file [STAT-3]"
    watched = watch_lock(monkeypatch, h.stats, lock_name, f"the statistics' {lock_name}")
    _, held = lock_held_in(lambda: h.later(10).run(1100), function, watched)
    if not held:
        pytest.skip(f"the check follows the reference's design ({function} a method of the "
                    f"statistics' class); this runtime's {function} ran no line of its own")
    assert any(held), (f"{function} ran {len(held)} line(s), none with the statistics' "
                       f"{lock_name} held: {consequence} [{clause}]")


@pytest.mark.clause("STAT-2")
def test_concurrent_runs_keep_the_windows_sound(rt, harness) -> None:
    """Threads record steps of one graph, and of new graphs, while another checks the figures
    at every call (the clock moves 10 s before each), with thread switches forced every
    microsecond: no call raises."""
    h = harness
    stats, errors = h.stats, []

    def boundaries(graph: int, d: int, checking: bool) -> None:
        try:
            for i in range(600):
                if checking:
                    h.clock.advance(10 * S)
                stats.run_action(h.rt.SessionRunActionOptions(
                    device_mgr=h.ctx.device_mgr, graph_id=graph if graph else 10_000 + i * 7 + d,
                    sess_duration_us=d + i % 7))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=boundaries, args=args)
               for args in ((1, 1000, True), (1, 1500, False), (0, 1, False),
                            (0, 2, False))]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "concurrent run_action calls hung [STAT-2]"
    assert not errors, f"concurrent run_action calls raised {errors[:1]!r} [STAT-2]"


@pytest.mark.clause("STAT-2")
def test_reaveraging_reads_each_window_at_one_instant(rt, harness) -> None:
    """One thread's every step re-averages (the clock moves 10 s before each) while three
    others keep appending to the windows of 20 graphs, with thread switches forced every
    microsecond: a re-averaging that iterated the live windows, rather than copies taken at
    one instant, would meet one changing under it."""
    h = harness
    stats, errors, done = h.stats, [], threading.Event()

    def options(graph: int):
        return h.rt.SessionRunActionOptions(device_mgr=h.ctx.device_mgr, graph_id=graph,
                                            sess_duration_us=1000)

    def checking() -> None:
        try:
            for _ in range(3000):
                if errors:
                    break
                h.clock.advance(10 * S)
                stats.run_action(options(0))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()

    def appending(k: int) -> None:
        try:
            i = 0
            while not done.is_set():
                stats.run_action(options(1 + (i + k) % 20))
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=checking)] + [
        threading.Thread(target=appending, args=(k,)) for k in range(3)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        done.set()
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads), "steps re-averaging windows hung [STAT-2]"
    assert not errors, f"a step re-averaging windows others append to raised {errors[:1]!r} " \
        "[STAT-2]"


@pytest.mark.clause("STAT-3")
def test_first_run_then_every_10_s(harness) -> None:
    h = harness
    assert h.run(1000), "the first run did not write the file [STAT-3]"
    assert not h.run(1000), "a second run within 10 s wrote the file [STAT-3]"
    assert not h.later(9).run(1000), "a run 9 s after the check wrote the file [STAT-3]"
    assert not h.later(1).run(1000), \
        "a check with unchanged durations and figures wrote the file [STAT-3]"
    p = alloc(h.ctx, MiB)                       # a figure changes
    assert not h.later(1).run(1000), \
        "1 s after a check without a dump the file was written: last_check not updated [STAT-3]"
    assert h.later(9).run(1000), "10 s after the last check a changed figure was not dumped [STAT-3]"
    gpus(h.ctx)[0].get_allocator().deallocate_raw(p)


@pytest.mark.clause("STAT-2", "STAT-3")
@pytest.mark.parametrize("d,huge", [(10_001, True), (10_000, False), (99, True), (100, False)])
def test_huge_change_forces_a_check(harness, d, huge) -> None:
    h = harness
    assert h.run(1000), "the first run was not checked [STAT-3]"
    assert not h.run(1000), "an unchanged run was checked [STAT-3]"
    assert h.run(d) is huge, (f"a run of {d} µs after oldest 1000 µs {'did not force' if huge else 'forced'} "
                              f"a dump (huge change is x10 strict) [STAT-2]")


@pytest.mark.clause("STAT-2")
def test_window_holds_at_most_nine(harness) -> None:
    h = harness
    assert h.run(1), "[STAT-2]"
    for i in range(9):
        assert not h.run(5), f"run {i + 2} (5 µs after oldest 1 µs) dumped [STAT-2]"
    assert not h.run(11), ("11 µs was a huge change: the oldest entry (1 µs) was not dropped "
                           "when the window reached 10 [STAT-2]")
    assert h.run(51), "51 µs against the oldest 5 µs was not a huge change [STAT-2]"


@pytest.mark.clause("STAT-2")
def test_window_holds_nine_entries(harness) -> None:
    """The window drops its oldest entry when it reaches 10, not before: the 10th run still
    compares with the 1st run's duration, the 11th with the 2nd's."""
    h = harness
    assert h.run(1), "[STAT-2]"
    for i in range(8):
        assert not h.run(5), f"run {i + 2} (5 µs after oldest 1 µs) dumped [STAT-2]"
    assert h.run(11), ("run 10 (11 µs) was no huge change: the window of 9 entries had "
                       "already dropped the 1st run's 1 µs [STAT-2]")
    assert not h.run(11), ("run 11 (11 µs) was a huge change: the window had not dropped "
                           "the 1st run's 1 µs when it reached 10 entries [STAT-2]")


MAX_GRAPHS = 256


@pytest.mark.clause("STAT-2")
def test_at_most_256_graphs_are_held(harness) -> None:
    """A job running a new graph at every step: the graphs run least recently are forgotten
    (256 held, the newest), and the memory held stops growing."""
    import tracemalloc
    harness.run(1000, graph=1)                 # the first run checks: graph 1 stored
    tracemalloc.start()
    try:
        for g in range(2, 1001):
            harness.run(1000, graph=g)         # no check: recorded only
        grown_at_1000 = tracemalloc.get_traced_memory()[0]
        for g in range(1001, 3001):
            harness.run(1000, graph=g)
        grown_at_3000 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert harness.later(10).run(1000, graph=3000), "[STAT-4]"   # graph 3000 stored
    assert harness.later(10).run(1000, graph=3000), "[STAT-4]"   # every window re-averaged
    graphs = set(harness.doc()["Durations"])
    newest = {f"graph_{g}" for g in range(3001 - MAX_GRAPHS, 3001)}
    assert graphs == newest, (
        f"after runs of 3000 graphs, one each, Durations holds {len(graphs)} graphs "
        f"({sorted(graphs - newest, key=len)[:3]} ... beyond the newest 256): expected exactly "
        f"the 256 run most recently [STAT-2]")
    growth = grown_at_3000 - grown_at_1000
    assert growth < 256 * 1024, (
        f"2000 more graphs run once each grew the memory held by {growth} bytes: the windows "
        f"of forgotten graphs are still held [STAT-2]")


@pytest.mark.clause("STAT-4")
@pytest.mark.parametrize("x,flagged", [(10_200, True), (10_198, False), (9_800, True),
                                       (9_802, False)])
def test_one_percent_threshold(harness, x, flagged) -> None:
    h = harness
    assert h.run(10_000), "[STAT-4]"
    assert h.later(10).run(x) is flagged, \
        (f"mean {(10_000 + x) // 2} against 10000: dump={not flagged}, expected {flagged} "
         f"(|cur - last| * 100 >= last) [STAT-4]")
    if flagged:
        assert h.doc()["Durations"] == {"graph_1": (10_000 + x) // 2}, "[STAT-4]"


@pytest.mark.clause("STAT-4")
def test_one_percent_threshold_is_exact_against_the_stored_mean(harness) -> None:
    """last 10100, cur 10000: |cur - last| × 100 = 10000 < 10100, no change (a threshold of
    a 101st of last, 100 µs, would flag it)."""
    h = harness
    assert h.run(10_100), "[STAT-4]"
    assert not h.later(10).run(9_900), (
        "mean 10000 against a stored 10100 (|cur - last| * 100 = 10000 < 10100) was dumped "
        "[STAT-4]")


@pytest.mark.clause("STAT-4")
def test_new_graph_flags_a_change(harness) -> None:
    h = harness
    assert h.run(1000, graph=1), "[STAT-4]"
    assert h.later(10).run(3000, graph=2), "a new graph at a check was not dumped [STAT-4]"
    assert h.doc()["Durations"] == {"graph_1": 1000, "graph_2": 3000}, "[STAT-4]"


@pytest.mark.clause("STAT-4")
def test_graph_never_stored_counts_zero(harness) -> None:
    h = harness
    assert h.run(1000, graph=1), "[STAT-4]"
    assert not h.later(1).run(400, graph=2), "[STAT-4]"      # recorded, not checked
    assert h.later(10).run(1000, graph=1), \
        "a graph recorded but never stored did not flag a change (last = 0) [STAT-4]"
    assert h.doc()["Durations"] == {"graph_1": 1000, "graph_2": 400}, "[STAT-4]"


@pytest.mark.clause("STAT-4", "STAT-7")
def test_mini_batch_duration_and_stale_graphs(harness) -> None:
    h = harness
    assert h.run(5000, graph=1), "the first run was not checked [STAT-3]"
    assert h.later(101).run(1000, graph=2), "a new graph's run was not checked [STAT-3]"
    doc = h.doc()
    assert doc["Durations"] == {"graph_1": 5000, "graph_2": 1000}, \
        f"Durations = {doc['Durations']}: every stored graph must be listed [STAT-7]"
    assert doc["miniBatchDuration"] == 1000, \
        f"miniBatchDuration = {doc['miniBatchDuration']}: a graph 101 s old counted [STAT-7]"
    assert h.later(1).run(30_000, graph=2), "a huge change was not checked [STAT-3]"
    assert h.doc()["miniBatchDuration"] == 15_500, "[STAT-4]"


@pytest.mark.clause("STAT-4")
@pytest.mark.parametrize("age,reaveraged", [(99, True), (100, False), (101, False)])
def test_windows_100_s_old_are_not_reaveraged(harness, age, reaveraged) -> None:
    """Graph 1's window [1000, 1050] (mean 1025, stored 1000) is re-averaged at a check
    only while its newest entry is less than 100 s old."""
    h = harness
    setup = (h.run(1000, graph=1),               # t=0: first check, graph_1 stored 1000
             h.later(10).run(3000, graph=2),     # t=10: graph_2 is new: stored 3000
             h.later(1).run(1050, graph=1))      # t=11: recorded, no check
    assert setup == (True, True, False), f"dumps of the set-up runs: {setup} [STAT-4]"
    dumped = h.later(age).run(3000, graph=2)     # t=11+age: a check; graph_2 unchanged
    assert dumped is reaveraged, (
        f"a check when graph_1's newest entry is {age} s old "
        f"{'dumped' if dumped else 'did not dump'}: its window must be re-averaged (mean "
        f"1025 against 1000) exactly when that entry is less than 100 s old [STAT-4]")
    if dumped:
        assert h.doc()["Durations"] == {"graph_1": 1025, "graph_2": 3000}, \
            f"Durations {h.doc()['Durations']} [STAT-4]"


@pytest.mark.clause("STAT-7")
@pytest.mark.parametrize("age,expected", [(99, 5000), (100, 1000), (101, 1000)])
def test_mini_batch_duration_ignores_graphs_100_s_old(harness, age, expected) -> None:
    h = harness
    setup = (h.run(5000, graph=1),               # t=0: graph_1 stored 5000, recorded at 0
             h.later(10).run(1000, graph=2))     # t=10: graph_2 stored 1000
    p = alloc(h.ctx, MiB)                        # a figure changes: the next check dumps
    dumped = h.later(age - 10).run(1000, graph=2)
    assert setup == (True, True) and dumped, f"dumps {setup}, then {dumped} at t={age} [STAT-7]"
    got = h.doc()["miniBatchDuration"]
    assert got == expected, (f"miniBatchDuration {got} with graph_1 (5000 µs) stored {age} s "
                             f"ago, expected {expected}: only graphs less than 100 s old "
                             f"count [STAT-7]")
    gpus(h.ctx)[0].get_allocator().deallocate_raw(p)


@pytest.mark.clause("STAT-7")
@pytest.mark.parametrize("d", [0, 1, 2])
def test_mini_batch_duration_of_the_shortest_means(harness, d) -> None:
    """The largest stored mean is the mean itself down to 0 µs: no floor above it."""
    h = harness
    assert h.run(d, graph=1), f"the first run ({d} µs) was not checked [STAT-3]"
    doc = h.doc()
    assert doc["Durations"] == {"graph_1": d}, f"Durations {doc['Durations']} [STAT-7]"
    assert doc["miniBatchDuration"] == d, (
        f"miniBatchDuration {doc['miniBatchDuration']} with the one graph stored {d} µs just "
        f"now: it is the largest stored mean, {d} [STAT-7]")


class _JumpingClock(VirtualClock):
    """A virtual clock that moves 100 s on after each reading of the whole seconds: every
    reading a run_action takes is 100 s after the one before it."""

    def time_s(self) -> int:
        now = super().time_s()
        self.advance(100 * S)
        return now


@pytest.mark.clause("STAT-7")
def test_mini_batch_duration_is_a_stored_mean_or_0_when_the_clock_jumps(rt, runtimes,
                                                                        tmp_path) -> None:
    """The clock moves 100 s between any two readings within the step (a host suspended
    mid-step): whichever reading the ages are taken at, miniBatchDuration is the graph's
    stored mean (5000) or 0 when it counts as too old, never a value of neither."""
    ctx = runtimes()
    path = tmp_path / "status.json"
    stats = rt.GPUStatistics(str(path), clock=_JumpingClock())
    stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                sess_duration_us=5000))
    assert path.exists(), "the first run of a graph wrote no statistics file [STAT-3]"
    doc = json.loads(path.read_text(encoding="utf-8"))
    got = doc["miniBatchDuration"]
    assert got in (0, 5000), (f"miniBatchDuration {got} with one graph stored at 5000 µs: "
                              f"it is that mean or, the graph too old, 0 [STAT-7]")


def figures_of(doc: dict, bus: str) -> dict:
    return doc["gpuUsageInfo"][bus]


@pytest.mark.clause("STAT-5", "STAT-6", "STAT-7")
def test_figures_and_oom(rt, runtimes, control_env, tmp_path) -> None:
    control_env.setenv("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "16")
    ctx = runtimes()
    h = Harness(rt, ctx, tmp_path / "status.json")
    a = gpus(ctx)[0].get_allocator()
    p1, p2 = a.allocate_raw(256, 4 * MiB), a.allocate_raw(256, 60 * MiB)
    host = a.allocate_raw(256, 8 * MiB)           # the device is full: host fallback
    a.deallocate_raw(p2)
    assert h.run(1000), "the first run was not checked [STAT-3]"
    got = figures_of(h.doc(), bus_id(rt, gpus(ctx)[0]))
    expected = {"deviceMemUsedMax": 64 * MiB, "deviceMemUsedMin": 4 * MiB,
                "deviceMemPoolSize": 64 * MiB, "deviceMemStable": 64 * MiB,
                "hostMemUsedMax": 8 * MiB, "hostMemUsedMin": 8 * MiB,
                "hostMemPoolSize": 16 * MiB, "deviceMemUsedNvidia": -1, "swapReason": "OOM"}
    figures = {k: v for k, v in got.items() if k != "swapReason"}
    assert figures == {k: v for k, v in expected.items() if k != "swapReason"}, (
        f"gpuUsageInfo = {got}, expected {expected} [STAT-5]")
    assert got.get("swapReason") == expected["swapReason"], (
        f"swapReason {got.get('swapReason')!r}, expected {expected['swapReason']!r} [STAT-6]")
    assert validate_status(h.doc()) == [], f"{validate_status(h.doc())} [STAT-7]"
    a.deallocate_raw(p1)
    a.deallocate_raw(host)


@pytest.mark.clause("STAT-7")
def test_every_object_of_the_document_has_its_keys_sorted(rt, runtimes, control_env,
                                                            tmp_path) -> None:
    """Read as text, in the order written: graph_2 is stored before graph_10 (which sorts
    first as a string), and a GPU's figures are many keys, so a dump in any other order
    than sorted shows in at least one object."""
    control_env.setenv("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "16")
    ctx = runtimes()
    h = Harness(rt, ctx, tmp_path / "status.json")
    p = alloc(ctx, MiB)
    assert h.run(1000, graph=2), "the first run was not checked [STAT-3]"
    assert h.later(10).run(3000, graph=10), "a new graph's run was not checked [STAT-3]"
    objects: list[list[str]] = []

    def keep_order(pairs: list) -> dict:
        objects.append([k for k, _ in pairs])
        return dict(pairs)

    doc = json.loads(h.path.read_text(encoding="utf-8"), object_pairs_hook=keep_order)
    assert sorted(doc["Durations"]) == ["graph_10", "graph_2"], f"{doc['Durations']} [STAT-7]"
    assert doc["gpuUsageInfo"], f"gpuUsageInfo {doc['gpuUsageInfo']!r}: no GPU tracked [STAT-7]"
    unsorted = [keys for keys in objects if keys != sorted(keys)]
    assert not unsorted, (f"objects of the status file with their keys not in sorted order: "
                          f"{unsorted} [STAT-7]")
    gpus(ctx)[0].get_allocator().deallocate_raw(p)


@pytest.mark.clause("STAT-6")
def test_no_host_use_has_no_reason(rt, harness) -> None:
    p = alloc(harness.ctx, 4 * MiB)
    assert harness.run(1000), "[STAT-6]"
    assert figures_of(harness.doc(), bus_id(rt, gpus(harness.ctx)[0]))["swapReason"] == "", (
        "[STAT-6]")
    gpus(harness.ctx)[0].get_allocator().deallocate_raw(p)


def chunks_filling_the_pool(allocator, sizes_mib: tuple[int, ...]) -> list[int]:
    """Device chunks of exactly ``sizes_mib`` filling the pool: the arrangement of a swapReason
    test, which relies on the split rule (BFC-4) to cut each chunk to its request."""
    with precondition("BFC-4", f"chunks of {list(sizes_mib)} MiB fill the 128 MiB pool"):
        ptrs = [allocator.allocate_raw(256, n * MiB) for n in sizes_mib]
        got = [None if p is None else allocator.allocated_size(p) for p in ptrs]
        assert got == [n * MiB for n in sizes_mib], (
            f"chunk sizes {got}, expected {[n * MiB for n in sizes_mib]} [BFC-4]")
    return ptrs


@pytest.mark.clause("STAT-6")
def test_fragment_when_the_pool_had_room(rt, runtimes, tmp_path) -> None:
    ctx = runtimes(gpu_memory_bytes=128 * MiB)
    h = Harness(rt, ctx, tmp_path / "status.json")
    a = gpus(ctx)[0].get_allocator()
    ptrs = chunks_filling_the_pool(a, (40, 8, 40, 40))
    a.deallocate_raw(ptrs[0])
    a.deallocate_raw(ptrs[2])                   # 80 MiB free, in two 40 MiB holes
    a.clear_stats()                             # device peak = 48 MiB in use
    host = a.allocate_raw(256, 48 * MiB)        # fits no hole: host fallback
    assert h.run(1000), "[STAT-6]"
    got = figures_of(h.doc(), bus_id(rt, gpus(ctx)[0]))
    assert got["deviceMemPoolSize"] == 128 * MiB and got["deviceMemUsedMax"] == 48 * MiB, (
        "[STAT-6]")
    assert 0 < got["hostMemUsedMax"] <= 80 * MiB, f"{got} [STAT-5]"
    assert got["swapReason"] == "FRAGMENT", \
        (f"host used while the pool had room (device max {got['deviceMemUsedMax']} + host max "
         f"{got['hostMemUsedMax']} <= pool {got['deviceMemPoolSize']}): swapReason "
         f"{got['swapReason']!r}, expected 'FRAGMENT' [STAT-6]")
    for p in (ptrs[1], ptrs[3], host):
        a.deallocate_raw(p)


@pytest.mark.clause("STAT-6")
@pytest.mark.parametrize("host_request,reason", [(64 * MiB, "FRAGMENT"),
                                                 (64 * MiB + 256, "OOM")])
def test_demand_equal_to_the_pool_is_fragment(rt, runtimes, tmp_path, host_request,
                                              reason) -> None:
    """Device peak 64 MiB in a 128 MiB pool whose free space is two 32 MiB holes; a 64 MiB
    host region makes the demand exactly the pool, one more chunk makes it 192 MiB."""
    ctx = runtimes(gpu_memory_bytes=128 * MiB)
    h = Harness(rt, ctx, tmp_path / "status.json")
    a = gpus(ctx)[0].get_allocator()
    ptrs = chunks_filling_the_pool(a, (32, 32, 32, 32))
    a.deallocate_raw(ptrs[0])
    a.deallocate_raw(ptrs[2])
    a.clear_stats()                                  # device peak = 64 MiB in use
    host = a.allocate_raw(256, host_request)         # no 64 MiB hole: host fallback
    assert h.run(1000), "the first run did not dump [STAT-6]"
    got = figures_of(h.doc(), bus_id(rt, gpus(ctx)[0]))
    demand = got["deviceMemUsedMax"] + got["hostMemUsedMax"]
    assert (got["deviceMemPoolSize"], got["deviceMemUsedMax"], demand == 128 * MiB) == (
        128 * MiB, 64 * MiB, reason == "FRAGMENT"), f"figures {got} [STAT-6]"
    assert got["swapReason"] == reason, (
        f"device max {got['deviceMemUsedMax']} + host max {got['hostMemUsedMax']} = {demand} "
        f"against a pool of {got['deviceMemPoolSize']}: swapReason {got['swapReason']!r}, "
        f"expected {reason!r} (OOM only when the demand exceeds the pool) [STAT-6]")
    for p in (ptrs[1], ptrs[3], host):
        a.deallocate_raw(p)


@pytest.mark.clause("STAT-5")
def test_gpus_are_found_once_by_the_first_check_that_finds_any(rt, runtimes, tmp_path,
                                                                caplog) -> None:
    first, other = runtimes(num_gpus=1), runtimes(num_gpus=2)
    h = Harness(rt, first, tmp_path / "status.json")
    caplog.set_level(logging.ERROR)
    h.stats.run_action(rt.SessionRunActionOptions(device_mgr=None, graph_id=1,
                                                  sess_duration_us=1000))
    assert h.path.exists() and h.doc()["gpuUsageInfo"] is None, \
        f"a first check without a device manager: {h.doc()} [STAT-5]"
    assert len(runtime_records(caplog, rt, logging.ERROR)) == 1, \
        "a check without a device manager logged no error [STAT-5]"
    h.later(10)
    assert h.run(1000), "the check that first finds the GPUs did not dump [STAT-5]"
    found = sorted(h.doc()["gpuUsageInfo"])
    assert found == [bus_id(rt, gpus(first)[0])], f"tracked {found} [STAT-5]"
    p = gpus(other)[1].get_allocator().allocate_raw(256, MiB)
    h.later(10)
    h.path.unlink(missing_ok=True)
    h.stats.run_action(rt.SessionRunActionOptions(device_mgr=other.device_mgr, graph_id=1,
                                                  sess_duration_us=3000))
    assert h.path.exists(), "a mean moved from 1000 to 1666 µs and nothing was dumped [STAT-5]"
    assert sorted(h.doc()["gpuUsageInfo"]) == found, (
        f"a later check over another device manager tracked {sorted(h.doc()['gpuUsageInfo'])}"
        f", expected the GPUs found first {found} [STAT-5]")
    gpus(other)[1].get_allocator().deallocate_raw(p)


class ListedDevices:
    """A duck-typed device manager: ``list_devices()`` of the devices it is given."""

    def __init__(self, devices) -> None:
        self.devices = devices

    def list_devices(self):
        return list(self.devices)


class NoStats:
    """An allocator without stats (``get_stats()`` None, VMEM-8); the rest is ``allocator``'s."""

    def __init__(self, allocator) -> None:
        self._allocator = allocator

    def get_stats(self):
        return None

    def __getattr__(self, name: str):
        return getattr(self._allocator, name)


class WithAllocator:
    """``device`` with ``allocator`` as its allocator."""

    def __init__(self, device, allocator) -> None:
        self._device, self._allocator = device, allocator

    def get_allocator(self, *args, **kwargs):
        return self._allocator

    def __getattr__(self, name: str):
        return getattr(self._device, name)


@pytest.mark.clause("STAT-5")
def test_only_devices_of_type_gpu_are_tracked(rt, runtimes, tmp_path) -> None:
    """A device manager of duck-typed devices: GPU 0 as it is, and GPU 1 presented as an
    ``XLA_GPU`` device (every other attribute, its VMem allocator and bus id included, GPU
    1's own): only GPU 0 is tracked."""

    class Typed:
        def __init__(self, device, device_type: str) -> None:
            self._device, self.device_type = device, device_type

        def __getattr__(self, name: str):
            return getattr(self._device, name)

    ctx = runtimes(num_gpus=2)
    g0, g1 = gpus(ctx)
    h = Harness(rt, ctx, tmp_path / "status.json")
    h.stats.run_action(rt.SessionRunActionOptions(
        device_mgr=ListedDevices([g0, Typed(g1, "XLA_GPU")]), graph_id=1, sess_duration_us=1000))
    assert h.path.exists(), "the first run was not checked [STAT-3]"
    tracked = sorted(h.doc()["gpuUsageInfo"] or {})
    assert tracked == [bus_id(rt, g0)], (
        f"a device manager of GPU 0 and an XLA_GPU device with GPU 1's VMem allocator: "
        f"tracked {tracked}, expected only GPU 0's {bus_id(rt, g0)!r} (a device whose type "
        f"upper-cased is not 'GPU' is no GPU) [STAT-5]")

def checked_with(rt, h, gpu, allocator, what: str):
    """Run the statistics action once over a device manager holding ``gpu`` with
    ``allocator`` as its allocator; return (its bus id, its gpuUsageInfo entry). A check
    that raises fails STAT-5; a runtime that does not track such a GPU skips."""
    try:
        h.stats.run_action(rt.SessionRunActionOptions(
            device_mgr=ListedDevices([WithAllocator(gpu, allocator)]), graph_id=1,
            sess_duration_us=1000))
    except Exception as exc:     # noqa: BLE001 - the figures are what the clause says
        pytest.fail(f"a check over {what} raised {exc!r} [STAT-5]")
    bus = bus_id(rt, gpu)
    info = (h.doc()["gpuUsageInfo"] or {}).get(bus)
    if info is None:
        pytest.skip("this runtime does not track the GPU of a device manager of the "
                    "test's own making (STAT-5 leaves open how its GPUs are read)")
    return bus, info



@pytest.mark.clause("STAT-5")
def test_device_allocator_without_stats_leaves_the_host_figures(rt, runtimes, tmp_path,
                                                                caplog) -> None:
    """A GPU whose VMem allocator has a device allocator without stats (``get_stats()`` is
    None, VMEM-8) and no BFC allocator: its device figures stay 0, its host figures are
    still read, and an error names its bus id (no pool figures)."""

    ctx = runtimes()
    g0 = gpus(ctx)[0]
    vmem = g0.get_allocator()
    if not isinstance(vmem, rt.GPUVMemAllocator):
        pytest.skip("the runtime's GPU allocator is no GPUVMemAllocator")
    host = vmem.host_allocator
    p = host.allocate_raw(256, MiB)
    try:
        h = Harness(rt, ctx, tmp_path / "status.json")
        wrapped = rt.GPUVMemAllocator(NoStats(vmem.device_allocator), host)
        caplog.set_level(logging.ERROR)
        bus, info = checked_with(rt, h, g0, wrapped, "a device allocator without stats")
        got = {k: info.get(k) for k in ("deviceMemUsedMax", "deviceMemUsedMin",
                                        "hostMemUsedMin")}
        assert got["deviceMemUsedMax"] == got["deviceMemUsedMin"] == 0 \
            and (got["hostMemUsedMin"] or 0) >= MiB, (
            f"a GPU whose device allocator has no stats, with 1 MiB in use on the host, "
            f"reported {got} [STAT-5]")
        assert runtime_records(caplog, rt, logging.ERROR, containing=bus), (
            f"a check over the GPU {bus}, whose device allocator is no BFC allocator, logged "
            f"no error naming it [STAT-5]")
    finally:
        host.deallocate_raw(p)


@pytest.mark.clause("STAT-5")
def test_host_allocator_without_stats_leaves_the_device_figures(rt, runtimes, tmp_path) -> None:
    """A GPU whose VMem allocator has a host allocator without stats (``get_stats()`` is
    None): the check raises nothing, its host figures stay 0 and its device figures are
    still read."""
    ctx = runtimes()
    g0 = gpus(ctx)[0]
    vmem = g0.get_allocator()
    if not isinstance(vmem, rt.GPUVMemAllocator):
        pytest.skip("the runtime's GPU allocator is no GPUVMemAllocator")
    device = vmem.device_allocator
    p = device.allocate_raw(256, MiB)
    try:
        h = Harness(rt, ctx, tmp_path / "status.json")
        wrapped = rt.GPUVMemAllocator(device, NoStats(vmem.host_allocator))
        bus, info = checked_with(rt, h, g0, wrapped, "a host allocator without stats")
        got = {k: info.get(k) for k in ("hostMemUsedMax", "hostMemUsedMin", "hostMemPoolSize",
                                        "deviceMemUsedMin")}
        assert got["hostMemUsedMax"] == got["hostMemUsedMin"] == got["hostMemPoolSize"] == 0 \
            and (got["deviceMemUsedMin"] or 0) >= MiB, (
            f"a GPU whose host allocator has no stats, with 1 MiB in use on the device, "
            f"reported {got} [STAT-5]")
    finally:
        device.deallocate_raw(p)


@pytest.mark.clause("STAT-5")
def test_figures_before_the_first_reading_count_as_zero(rt, runtimes, control_env,
                                                        tmp_path) -> None:
    """A GPU found by a later check (the first had no device manager) whose 7 figures are all
    0 (no host memory, nothing allocated) changed no figure: with the mean unchanged, that
    check writes nothing."""
    control_env.setenv("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "0")
    ctx = runtimes()
    probe = Harness(rt, ctx, tmp_path / "probe.json")
    with precondition("STAT-5", "a GPU with no host memory and nothing allocated reads 0"):
        assert probe.run(1000), "a first run was not dumped [STAT-3]"
        figures = [{k: v for k, v in info.items() if k not in ("deviceMemUsedNvidia",
                                                                 "swapReason")}
                   for info in (probe.doc()["gpuUsageInfo"] or {}).values()]
        assert figures and all(set(f.values()) == {0} for f in figures), \
            f"the figures of an idle GPU without host memory: {figures} [STAT-5]"
    h = Harness(rt, ctx, tmp_path / "status.json")
    h.stats.run_action(rt.SessionRunActionOptions(device_mgr=None, graph_id=1,
                                                  sess_duration_us=1000))
    assert h.path.exists() and h.doc()["gpuUsageInfo"] is None, \
        "a first check without a device manager [STAT-5]"
    assert not h.later(10).run(1000), (
        "the check that first found a GPU whose 7 figures are 0, with the mean unchanged, "
        "was dumped: figures before the first reading count as 0 [STAT-5]")


@pytest.mark.clause("STAT-5", "STAT-7")
def test_no_vmem_gpu_gives_null_usage(rt, runtimes, control_env, tmp_path) -> None:
    control_env.setenv("TF_GPU_VMEM", "false")
    ctx = runtimes()
    h = Harness(rt, ctx, tmp_path / "status.json")
    assert h.run(1000), "the first run was not checked [STAT-3]"
    doc = h.doc()
    assert doc["gpuUsageInfo"] is None, f"gpuUsageInfo = {doc['gpuUsageInfo']} without VMem [STAT-7]"
    assert validate_status(doc) == [], f"{validate_status(doc)} [STAT-7]"


@pytest.mark.clause("STAT-7")
def test_document_layout(rt, runtimes, tmp_path) -> None:
    ctx = runtimes(num_gpus=2)
    h = Harness(rt, ctx, tmp_path / "status.json")
    assert h.run(1234, graph=(1 << 64) - 1), "[STAT-7]"
    doc = h.doc()
    assert sorted(doc) == ["Durations", "gpuUsageInfo", "miniBatchDuration"], \
        f"top-level keys {sorted(doc)} [STAT-7]"
    assert doc["Durations"] == {f"graph_{(1 << 64) - 1}": 1234}, "[STAT-7]"
    assert sorted(doc["gpuUsageInfo"]) == sorted(bus_id(rt, g) for g in gpus(ctx)), "[STAT-7]"
    errors = validate_status(doc)
    assert errors == [], f"the status file is invalid against the schema: {errors} [STAT-7]"


MAX_DUMPS = 2000        # bound of test_atomic_under_a_concurrent_reader
MIN_VERSIONS = 5        # distinct versions its reader must see


@pytest.mark.clause("STAT-8")
def test_atomic_under_a_concurrent_reader(rt, harness, status_reader) -> None:
    h = harness
    reader = status_reader(h.path)
    # Keep rewriting until the reader has seen several versions: only then did its reads
    # overlap the rewrites (bounded; a reader that never keeps up fails below).
    for i in range(MAX_DUMPS):
        h.later(10)
        h.stats.run_action(rt.SessionRunActionOptions(
            device_mgr=h.ctx.device_mgr, graph_id=1 + i % 3, sess_duration_us=1000 * (1 + i % 7)))
        if i + 1 >= 120 and len(set(reader.versions)) >= MIN_VERSIONS:
            break
    reader.stop()
    reader.check()
    versions = len(set(reader.versions))
    assert versions >= MIN_VERSIONS, (
        f"the concurrent reader saw {versions} distinct version(s) of the status file in "
        f"{i + 1} dumps ({reader.reads} valid reads), fewer than {MIN_VERSIONS}: its reads "
        f"never overlapped the rewrites, nothing was checked [STAT-8]")
    leftovers = sorted(set(os.listdir(h.path.parent)) - {h.path.name})
    assert leftovers == [], f"temporary files left beside the status file: {leftovers} [STAT-8]"


@pytest.mark.clause("STAT-8")
def test_replacement_leaves_open_readers_the_old_version(rt, harness) -> None:
    """A reader that opened the file before a dump reads the whole previous version."""
    h = harness
    assert h.run(1000), "[STAT-8]"
    old_text = h.path.read_text(encoding="utf-8")
    old_inode = h.path.stat().st_ino
    with open(h.path, encoding="utf-8") as reader:
        h.later(10)
        h.stats.run_action(h.rt.SessionRunActionOptions(
            device_mgr=h.ctx.device_mgr, graph_id=2, sess_duration_us=5000))
        new_text = h.path.read_text(encoding="utf-8")
        assert new_text != old_text, "the second dump did not change the file [STAT-8]"
        seen = reader.read()
    assert seen == old_text, ("a reader holding the previous file saw it change under it: the "
                              "file was rewritten in place, not replaced [STAT-8]")
    assert h.path.stat().st_ino != old_inode, \
        "the status file kept its inode: not replaced by a rename [STAT-8]"


@pytest.mark.clause("STAT-8")
def test_write_failure_is_logged_once(rt, runtimes, tmp_path, caplog) -> None:
    ctx = runtimes()
    path = tmp_path / "missing-dir" / "status.json"
    stats = rt.GPUStatistics(str(path), clock=(clock := VirtualClock()))
    caplog.set_level(logging.ERROR)
    for i in range(3):
        stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                    sess_duration_us=1000 * (i + 1) ** 3))
        clock.advance(10 * S)
    errors = runtime_records(caplog, rt, logging.ERROR, containing=str(path))
    assert len(errors) == 1, f"{len(errors)} error lines for one unwritable path [STAT-8]"


@pytest.mark.clause("STAT-8")
def test_write_failure_after_a_success_is_logged_again(rt, runtimes, tmp_path, caplog) -> None:
    ctx = runtimes()
    folder = tmp_path / "status-dir"
    path = folder / "status.json"
    stats = rt.GPUStatistics(str(path), clock=(clock := VirtualClock()))
    caplog.set_level(logging.ERROR)

    def boundary(d: int) -> None:
        stats.run_action(rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=1,
                                                    sess_duration_us=d))
        clock.advance(10 * S)

    boundary(1000)                               # the folder is missing: an error
    folder.mkdir()
    boundary(2000)                               # written
    assert path.exists(), "the status file was not written once its folder existed [STAT-8]"
    path.unlink()
    folder.rmdir()
    boundary(4000)                               # the same reason again, after a success
    errors = runtime_records(caplog, rt, logging.ERROR, containing=str(path))
    assert len(errors) == 2, (f"a write failure, a success, then the same failure logged "
                              f"{len(errors)} error lines, expected 2 [STAT-8]")


# -- exact accounting at the microsecond boundary ---------------------------------------------
# STAT-2 to STAT-4 count whole seconds of clock.time_s(), not microseconds of now_us(): a run
# 999 999 µs into a second and one 9 000 001 µs later are 10 s of time_s() apart.

@pytest.mark.clause("STAT-3")
@pytest.mark.parametrize("offset_us,checked", [(-1, False), (0, True), (1, True)])
def test_check_interval_counts_time_s_to_the_microsecond(harness, offset_us, checked) -> None:
    h = harness
    h.clock.advance(S - 1)                              # time_s() + 0, 999 999 µs in
    assert h.run(1000), "the first run was not checked [STAT-3]"
    p = alloc(h.ctx, MiB)                               # a figure changes: a check dumps
    try:
        h.clock.advance(10 * S - (S - 1) + offset_us)   # now_us 10 000 000 + offset
        dumped = h.run(1000)
        assert dumped is checked, (
            f"a run at time_s() + {9 if offset_us < 0 else 10} ({9 * S + 1 + offset_us} µs "
            f"after the check) {'dumped' if dumped else 'did not dump'} a changed figure: "
            f"a check comes exactly when clock.time_s() - last_check >= 10 [STAT-3]")
    finally:
        gpus(h.ctx)[0].get_allocator().deallocate_raw(p)


@pytest.mark.clause("STAT-4")
@pytest.mark.parametrize("offset_us,reaveraged", [(-1, True), (0, False), (1, False)])
def test_reaveraging_age_counts_time_s_to_the_microsecond(harness, offset_us,
                                                          reaveraged) -> None:
    """Graph 1's newest entry is recorded 999 999 µs into second 11; a check at second
    110 (age 99, µs 110 999 999) re-averages it, one at second 111 (age 100, 100 000 001 µs
    after the entry) does not."""
    h = harness
    setup = (h.run(1000, graph=1),                     # t=0: first check, graph_1 stored 1000
             h.later(10).run(3000, graph=2))           # t=10: graph_2 is new: stored 3000
    h.clock.advance(2 * S - 1)                         # time_s 11, 999 999 µs in
    setup += (h.run(1050, graph=1),)                   # recorded, no check
    assert setup == (True, True, False), f"dumps of the set-up runs: {setup} [STAT-4]"
    h.clock.advance(99 * S + 1 + offset_us)            # now_us 111 000 000 + offset
    dumped = h.run(3000, graph=2)                      # a check; graph_2 unchanged
    assert dumped is reaveraged, (
        f"a check at time_s {110 if offset_us < 0 else 111} (graph_1's newest entry "
        f"{99 if offset_us < 0 else 100} s of time_s() old) "
        f"{'dumped' if dumped else 'did not dump'}: re-averaged exactly when now - t < 100 "
        f"in time_s() seconds [STAT-4]")


@pytest.mark.clause("STAT-2")
@pytest.mark.parametrize("d,huge", [(10_000, False), (10_001, True), (0, True), (1, True),
                                    (100, False), (99, True)])
def test_huge_change_to_the_microsecond(harness, d, huge) -> None:
    """Oldest 1000 µs: 10 001 µs is more than ten times it, 10 000 is not; 99 µs is less
    than a tenth, 100 is not; a run of 0 µs is a huge change (1000 > 10 × 0)."""
    h = harness
    assert h.run(1000), "the first run was not checked [STAT-3]"
    assert h.run(d) is huge, (
        f"a run of {d} µs after an oldest entry of 1000 µs "
        f"{'did not force' if huge else 'forced'} a check: huge exactly when d > 10 × o or "
        f"o > 10 × d [STAT-2]")


@pytest.mark.clause("STAT-2")
def test_zero_durations_are_no_huge_change(harness) -> None:
    h = harness
    assert h.run(0), "the first run (0 µs) was not checked [STAT-3]"
    assert not h.run(0), "0 µs after an oldest entry of 0 µs was a huge change [STAT-2]"
    assert h.run(1), "1 µs after an oldest entry of 0 µs (1 > 10 × 0) was no huge change [STAT-2]"
