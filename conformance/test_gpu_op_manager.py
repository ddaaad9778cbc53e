"""OPM clauses: GPU ops queued while throttled, idle slots before launches, FIFO, shutdown.

Exact on the virtual clock: every idle slot is a clock wait, so a queued op's launch time is
the sum of the slots before it.
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import threading
import time

import numpy as np
import pytest

from conformance.control_helpers import carries, close_within, runtime_records
from conformance.execution_helpers import (CPU, GPU, INTER_OP_PREFIX, OP_MANAGER_PREFIX, POST,
                                           Log, RecordingBackend, manager_threads,
                                           recording_action, run_in_thread, sim_runtime,
                                           wait_until)
from conformance.execution_helpers import earlier_manager_threads_set_aside  # noqa: F401 - autouse
from conformance.preconditions import precondition_holds

pytestmark = pytest.mark.capability("executor", "gpu_op_manager", "resource_management",
                                    "virtual_clock")


class Managed:
    """A runtime on a virtual clock with a GPUResourceManagement action (no config file)."""

    def __init__(self, rt, clock, rm_class=None, **runtime_kw) -> None:
        self.rt = rt
        self.clock = clock
        self._cm = sim_runtime(rt, clock=clock, **runtime_kw)
        self.ctx = self._cm.__enter__()
        self.rm = (rm_class or rt.GPUResourceManagement)(None, clock=clock,
                                                         registry=self.ctx.registry)
        self.post = Log()
        self.ctx.registry.register(POST, 1, recording_action(rt, "post", self.post))

    def throttle(self, perf: int, idle_us: int) -> None:
        assert self.rm.parse_manage_info_from_json(f'{{"perfControl": {perf}}}') or \
            self.rm.perf_control == perf, "[RM-3]"
        self.rm.set_estimated_idle_time(idle_us)

    def close(self) -> None:
        self.rm.close()
        self._cm.__exit__(None, None, None)


@pytest.fixture
def managed(rt, auto_clock):
    m = Managed(rt, auto_clock)
    yield m
    m.close()


@pytest.fixture
def managed_manual(rt, virtual_clock):
    m = Managed(rt, virtual_clock)
    yield m
    m.close()


def probe(log: Log, tag: str, clock, rm):
    """A PyFunc body recording (tag, clock time, E, thread name) at its launch."""

    def func(*args):
        log.add((tag, clock.now_us(), rm.get_estimated_idle_time(),
                 threading.current_thread().name))
        return np.float32(len(args))

    return func


def expected_slots(e: int, n: int) -> list[int]:
    slots = []
    for i in range(n):
        slot = e // (n - i)
        slots.append(slot)
        e -= slot
    return slots


def chain(rt, n: int, log: Log, clock, rm, device: str = GPU):
    g = rt.Graph()
    for i in range(n):
        g.add_node(f"op{i}", "PyFunc", [f"op{i - 1}"] if i else [], device=device,
                   func=probe(log, f"op{i}", clock, rm))
    return g


def wait_for_idle_slot(clock) -> None:
    wait_until(lambda: any(n.startswith(OP_MANAGER_PREFIX) for n in clock.waiting_threads()),
               "the manager thread to wait in an idle slot")


def run_into_idle_slot(rt, m: Managed, log: Log, idle_us: int):
    """Run a throttled two-op GPU chain in a thread; return (session, runner, out) once the
    manager thread waits in the first idle slot."""
    s = m.ctx.new_session(chain(rt, 2, log, m.clock, m.rm))
    m.throttle(50, idle_us)
    runner, out = run_in_thread(lambda: s.run(["op1"]), "test-managed-run")
    wait_for_idle_slot(m.clock)
    assert log.snapshot() == [], (
        f"{log.snapshot()} launched while the first idle slot was still running: the slot "
        f"comes before the launch [OPM-4]")
    return s, runner, out


def assert_queued_launches(log: Log, names: list[str], t0: int, slot_us: int,
                           cpu_tag: str) -> None:
    """The GPU ops ``names`` were launched in this order (the queue's FIFO order), on the
    manager thread, one equal slot of ``slot_us`` after another from ``t0``; the CPU node
    ``cpu_tag`` ran on the runner, not queued."""
    events = log.snapshot()
    gpu = [e for e in events if e[0] in names]
    assert [e[0] for e in gpu] == names, (
        f"launch order {[e[0] for e in gpu]}, expected the queue order {names}: GPU ops are "
        f"queued and launched first in, first out [OPM-2]")
    assert [e[1] - t0 for e in gpu] == np.cumsum([slot_us] * len(names)).tolist(), \
        f"launch times {[e[1] - t0 for e in gpu]} [OPM-4]"
    assert all(e[3].startswith(OP_MANAGER_PREFIX) for e in gpu), \
        f"queued ops ran on {sorted({e[3] for e in gpu})} [OPM-3]"
    cpu_thread = next(e[3] for e in events if e[0] == cpu_tag)
    assert cpu_thread.startswith(INTER_OP_PREFIX), \
        f"the CPU node {cpu_tag!r} ran on {cpu_thread}, not the runner [OPM-2]"


def run_gated_step(rt, managed, log: Log, tracer, checked: threading.Event, seen: list[bool],
                   *, tail: bool) -> tuple[bool, dict]:
    """Run the managed step c0 (CPU) -> g (GPU, queued on the manager) [-> tail (CPU), when
    ``tail``: the step then ends off the manager thread] under ``tracer``, and close its
    session. c0 waits until ``checked`` is set (the trace saw the manager thread check its
    queue) and fails the step, instead of queueing g, when a check in ``seen`` ran without
    the manager's condition held. Returns (run() returned within PROMPT_S, its outcome)."""
    def c0():
        checked.wait(PROMPT_S)
        if not all(seen):
            raise RuntimeError("the manager thread checked its queue without its condition")
        return np.float32(1)

    g = rt.Graph()
    g.add_node("c0", "PyFunc", device=CPU, func=c0)
    g.add_node("g", "PyFunc", ["c0"], device=GPU,
               func=probe(log, "g", managed.clock, managed.rm))
    if tail:
        g.add_node("tail", "PyFunc", ["g"], device=CPU, func=lambda x: x)
    s = managed.ctx.new_session(g)
    managed.throttle(50, 1000)
    threading.settrace(tracer)
    try:
        runner, out = run_in_thread(lambda: s.run(["tail" if tail else "g"]), "test-managed-run")
        runner.join(PROMPT_S)
        in_time = not runner.is_alive()
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
        s.close()                           # ends a step whose queued op nobody launches
        runner.join(PROMPT_S)
    return in_time, out


# -- OPM-6: the shutdown's wake-up (first in the module: a shutdown that wakes the manager
# thread without its condition fails every managed step, and one that the thread misses hangs
# the next test's step for ever, so this test must fail first) --------------------------------

@pytest.mark.clause("OPM-6")
def test_shutdown_wakes_the_manager_thread_under_its_condition(rt, managed) -> None:
    """A managed step c0 (CPU) -> g (GPU) ends on the manager thread, which then shuts its
    manager down: the shutdown must change the manager's state with the manager's condition
    held. Without it, a manager thread between its check of that state and its wait misses
    the wake-up and waits for ever, and the thread that ends the step joins it for ever.
    Forced, not hoped for: a trace records, at each line of the shutdown touching the
    terminate state, whether the thread running it holds the condition (the step ends on the
    manager thread, so a shutdown without the condition cannot hang this test). c0 runs only
    once the manager thread has checked its queue, with its condition held (OPM-3's
    precondition, as in the next test: a thread that checks it without the condition dies at
    its wait, and c0 then fails the step before it queues g, which nobody would launch)."""
    module = getattr(rt, "gpu_op_manager", None)
    manager = getattr(module, "GpuOpManager", None)
    run_code = getattr(getattr(manager, "_run", None), "__code__", None)
    shutdown_code = getattr(getattr(manager, "shutdown", None), "__code__", None)
    if run_code is None or shutdown_code is None:
        pytest.skip("the check follows the reference's design (GpuOpManager._run and "
                    "shutdown sharing a condition _cv); this runtime has no such functions")
    from fixtures.interleave import self_holds
    holds = self_holds("_cv")
    checks: list[bool] = []                 # held, at each line of _run reading the queue
    writes: list[bool] = []                 # held, at each line of shutdown touching _terminate
    checked = threading.Event()

    def lines_of(field: str, seen: list[bool], then=None):
        def lines(frame, event, arg):
            if event == "line" and field in linecache.getline(frame.f_code.co_filename,
                                                              frame.f_lineno):
                seen.append(holds(frame))
                if then is not None:
                    then()
            return lines
        return lines

    run_lines = lines_of("_queue", checks, checked.set)
    shutdown_lines = lines_of("_terminate", writes)

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is run_code:
            return run_lines
        if event == "call" and frame.f_code is shutdown_code:
            return shutdown_lines
        return None

    log = Log()
    # no CPU tail: the step ends on the manager thread
    in_time, out = run_gated_step(rt, managed, log, tracer, checked, checks, tail=False)
    if not checks or not writes:
        pytest.skip("the check follows the reference's design (GpuOpManager._run reading "
                    "_queue, shutdown setting _terminate); this runtime ran no such line")
    precondition_holds("OPM-3", all(checks),
                       "the manager thread checks its queue with its condition held")
    assert all(writes), (
        f"{writes.count(False)} of {len(writes)} line(s) of the op manager's shutdown touching "
        f"its terminate state ran without the manager's condition held: the manager thread "
        f"can check that state, miss the wake-up and wait for ever, and the end of the step "
        f"joins it for ever (run() {'returned' if in_time else 'hung'}: "
        f"{out.get('error')!r}) [OPM-6]")
    precondition_holds("OPM-3", in_time and [e[0] for e in log.snapshot()] == ["g"],
                       f"the op g that c0 queued while the manager thread waited is launched "
                       f"and the step ends within {PROMPT_S} s")


# -- OPM-3: the manager thread's wait for an op (first in the module: a manager thread that
# dies at its first wait hangs every managed step after it, so this test must fail first) ----

@pytest.mark.clause("OPM-3")
def test_the_manager_thread_waits_for_its_first_op_under_its_condition(rt, managed) -> None:
    """A managed step whose root is the CPU node ``c0``, whose consumer is the GPU op ``g``
    (followed by a CPU node: the step ends off the manager thread): the manager thread starts
    with an empty queue and blocks until ``c0`` queues ``g``, checking the queue with its
    condition held (a thread that checks it without the condition can miss the op queued
    meanwhile, or die at its wait, and nothing launches ``g``).
    Forced, not hoped for: a trace of the manager thread records, at each line of its loop
    that reads the queue, whether it holds the condition, and ``c0`` runs only once the first
    such line has run. When that line ran without the condition, ``c0`` fails the step
    instead of queueing ``g``: the test fails at once on the clause, where the step would
    otherwise wait for ever for a launch (a ``g`` queued and never launched, a lost wake-up,
    fails after PROMPT_S, and close() ends the step)."""
    from fixtures.interleave import self_holds
    module = getattr(rt, "gpu_op_manager", None)
    run_code = getattr(getattr(getattr(module, "GpuOpManager", None), "_run", None),
                       "__code__", None)
    if run_code is None:
        pytest.skip("the check follows the reference's design (GpuOpManager._run checking "
                    "_queue under a condition _cv); this runtime has no such function")
    holds = self_holds("_cv")
    seen: list[bool] = []                   # held, at each line of _run reading the queue
    checked = threading.Event()

    def lines(frame, event, arg):
        if event == "line" and "_queue" in linecache.getline(frame.f_code.co_filename,
                                                             frame.f_lineno):
            seen.append(holds(frame))
            checked.set()
        return lines

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code is run_code:
            return lines
        return None

    log = Log()
    in_time, out = run_gated_step(rt, managed, log, tracer, checked, seen, tail=True)
    if not seen:
        pytest.skip("the check follows the reference's design (GpuOpManager._run reading "
                    "_queue); this runtime ran no such line")
    assert all(seen), (
        f"{seen.count(False)} of {len(seen)} check(s) of the queue by the manager thread ran "
        f"without the op manager's condition held: the thread can miss the op queued "
        f"meanwhile, or fail at its wait, and the queued op is never launched [OPM-3]")
    assert in_time and "error" not in out and [e[0] for e in log.snapshot()] == ["g"], (
        f"run() {'failed' if in_time else f'had not returned after {PROMPT_S} s'} "
        f"({out.get('error')!r}), ops launched {[e[0] for e in log.snapshot()]}: the op "
        f"that c0 queued while the manager thread waited must be launched [OPM-3]")


# -- OPM-7: a failure during an idle slot (early: a failure that does not end the slot, or
# whose abort raises, hangs the later tests that close a session during a slot, or fail a
# queued op, in their step or their teardown; these release what they hold) -----------------

def fail_elsewhere_during_idle_slot(rt, m: Managed, log: Log):
    """Run a managed step (E = 10^9 µs on the manual clock) whose GPU chain gpu_op -> gpu_next
    is queued, gpu_op in its idle slot, when the CPU root ``fail`` raises; return (whether
    run() returned within PROMPT_S, its outcome, the ops launched during the slot). A run
    still waiting then is released by moving the clock past the slot, so that a runtime
    whose failure does not end the slot fails the test instead of hanging it."""
    clock = m.clock
    launched_in_slot: list = []

    def fail_while_slot_waits():
        wait_for_idle_slot(clock)
        launched_in_slot.extend(log.snapshot())
        raise RuntimeError("failure elsewhere")

    g = rt.Graph()
    g.add_node("gpu_op", "PyFunc", device=GPU, func=probe(log, "gpu_op", clock, m.rm))
    g.add_node("gpu_next", "PyFunc", ["gpu_op"], device=GPU,
               func=probe(log, "gpu_next", clock, m.rm))
    g.add_node("fail", "PyFunc", device=CPU, func=fail_while_slot_waits)
    s = m.ctx.new_session(g)
    m.throttle(50, 10 ** 9)
    runner, out = run_in_thread(lambda: s.run(["gpu_next", "fail"]), "test-managed-run")
    runner.join(PROMPT_S)
    in_time = not runner.is_alive()
    if not in_time:
        clock.advance(10 ** 9)             # the slot nothing ended: its deadline
        runner.join(PROMPT_S)
    return in_time, out, launched_in_slot


@pytest.mark.clause("OPM-7", "OPM-6", "EXEC-9")
def test_failure_elsewhere_interrupts_the_idle_slot(rt, managed_manual) -> None:
    m = managed_manual
    clock = m.clock
    log = Log()
    t0 = clock.now_us()
    in_time, out, launched_in_slot = fail_elsewhere_during_idle_slot(rt, m, log)
    assert in_time, (
        f"run() had not returned {PROMPT_S} s after the CPU node 'fail' failed the step while "
        f"the manager thread waited in an idle slot on a stopped clock: the failure must end "
        f"the slot at once [OPM-7]")
    assert isinstance(out.get("error"), rt.OpError) and "failure elsewhere" in str(out["error"]), \
        f"run() must raise the step's first error, got {out} [OPM-7]"
    assert launched_in_slot == [], (
        f"{launched_in_slot} launched while its idle slot was still running: the slot comes "
        f"before the launch [OPM-4]")
    assert log.snapshot() == [], "a queued op was launched after the step failed [OPM-7]"
    waits = [r for r in clock.records if r.thread.startswith(OP_MANAGER_PREFIX)]
    assert waits and all(r.interrupted for r in waits) and clock.now_us() == t0, \
        f"the slot must end at once, without clock time: {waits} [OPM-7]"
    assert manager_threads() == [], f"manager threads left: {manager_threads()} [OPM-6]"


@pytest.mark.clause("OPM-7")
def test_a_failed_step_aborts_its_manager_under_its_condition(rt, managed_manual) -> None:
    """The step fails (the CPU node ``fail`` raises) while the manager thread waits in an idle
    slot: the thread that records the failure marks the manager aborted, so that no queued
    op is launched any more, with the manager's condition held, as every change of the
    manager's state is made (the manager thread reads that state between its waits). Forced,
    not hoped for: a trace records, at each line of the abort touching that state, whether
    the thread running it holds the condition; the failure happens on an inter-op thread,
    whose errors end the step, so an abort that fails without the condition cannot hang this
    test (on the manager thread, a queued op's failure, it would)."""
    from fixtures.interleave import lines_run_in, self_holds
    m = managed_manual
    (in_time, out, _), lines = lines_run_in(
        lambda: fail_elsewhere_during_idle_slot(rt, m, Log()), "GpuOpManager.abort",
        self_holds("_cv"))
    touching = [held for text, held in lines if "_aborted" in text]
    if not touching:
        pytest.skip("the check follows the reference's design (GpuOpManager.abort setting "
                    "_aborted under a condition _cv); this runtime ran no such line")
    assert all(touching), (
        f"{touching.count(False)} of {len(touching)} line(s) of the op manager's abort "
        f"touching its aborted state ran without the manager's condition held (run() "
        f"{'returned' if in_time else 'hung'}: {out.get('error')!r}): an abort that fails "
        f"there, on the manager thread when a queued op fails, leaves the step waiting for "
        f"ever for that op [OPM-7]")



@pytest.mark.clause("OPM-7")
def test_a_launch_begun_as_the_step_fails_retires_its_op_unrun(rt, monkeypatch,
                                                               managed) -> None:
    """The manager thread has taken ``gpu_op`` from its queue, its slot is over and it has
    begun the launch, when the CPU node ``fail`` fails the step: the launch must find the
    step aborted and retire ``gpu_op`` unrun, and run() must end with the failure (a launch
    that retires the op without counting it done leaves the step waiting for it for ever).
    Forced, not hoped for: the manager thread is held at the start of the executor's launch
    of a queued op (the reference's ``ExecutorState._launch``) until the step has failed."""
    state = getattr(getattr(rt, "executor", None), "ExecutorState", None)
    launch = getattr(state, "_launch", None)
    if launch is None:
        pytest.skip("the check follows the reference's design (ExecutorState._launch, the "
                    "launch of a queued op); this runtime has no such method")
    entered, failed = threading.Event(), threading.Event()

    states = []

    def held_launch(self, item):
        if not entered.is_set():
            states.append(self)
            entered.set()
            failed.wait(PROMPT_S)      # the step fails between the manager's check and here
        return launch(self, item)

    monkeypatch.setattr(state, "_launch", held_launch)
    m, log = managed, Log()

    def fail():
        assert entered.wait(PROMPT_S), "the queued op 'gpu_op' was never launched [OPM-2]"
        failed.set()                   # run() records the error as this raises
        raise RuntimeError("failure elsewhere")

    g = rt.Graph()
    g.add_node("gpu_op", "PyFunc", device=GPU, func=probe(log, "gpu_op", m.clock, m.rm))
    g.add_node("fail", "PyFunc", device=CPU, func=fail)
    s = m.ctx.new_session(g)
    m.throttle(50, 1000)
    runner, out = run_in_thread(lambda: s.run(["gpu_op", "fail"]), "test-managed-run")
    runner.join(PROMPT_S)
    returned = not runner.is_alive()
    if not returned:                   # the step waits for ever for the op: end it, so that
        for stuck in states:           # closing the session does not wait for it too
            getattr(stuck, "_finish", lambda: None)()
    assert returned, (
        f"run() had not returned {PROMPT_S:g} s after the step failed while the manager "
        f"thread was launching the queued op 'gpu_op': a launch that finds the step aborted "
        f"must retire its op and count it done [OPM-7]")
    assert isinstance(out.get("error"), rt.OpError) and "failure elsewhere" in str(out["error"]), \
        f"run() must raise the step's first error, got {out} [OPM-7]"
    assert log.snapshot() == [], (
        f"'gpu_op' ran although the step had failed before its launch: {log.snapshot()} "
        f"[OPM-7]")


@pytest.mark.clause("OPM-7")
def test_ops_retired_after_a_failure_have_no_idle_slot(rt, auto_clock) -> None:
    """Two GPU roots of a managed step are queued, ``bad`` first: its kernel raises on the
    manager thread after its slot. ``after``, queued behind it, is retired unrun with no idle
    slot: from the failure on, the manager thread neither synchronizes the GPU nor reads or
    deducts E (with E = 1000 and one op left, a slot would be 500 µs, so a manager that gave
    ``after`` its slot would drain the GPU and read E first)."""
    events, ran = Log(), Log()
    failed = threading.Event()

    def manager_after_failure() -> bool:
        return failed.is_set() and threading.current_thread().name.startswith(OP_MANAGER_PREFIX)

    def gpu_finishes(index) -> None:
        if manager_after_failure():
            events.add(("synchronize", index))

    class Recording(rt.GPUResourceManagement):
        def get_estimated_idle_time(self):
            if manager_after_failure():
                events.add(("get_estimated_idle_time",))
            return super().get_estimated_idle_time()

        def spend_idle_time(self, us):
            if manager_after_failure():
                events.add(("spend_idle_time", us))
            return super().spend_idle_time(us)

    def bad():
        failed.set()
        raise RuntimeError("planned failure of a queued op")

    backend = RecordingBackend(rt.select_backend("sim", num_gpus=1, gpu_memory_bytes=1 << 26),
                               Log(), on_sync=gpu_finishes)
    m = Managed(rt, auto_clock, rm_class=Recording, gpu_memory_bytes=1 << 26, backend=backend)
    try:
        g = rt.Graph()
        g.add_node("bad", "PyFunc", device=GPU, func=bad)
        g.add_node("after", "PyFunc", device=GPU, func=probe(ran, "after", auto_clock, m.rm))
        s = m.ctx.new_session(g)
        m.throttle(50, 1000)
        runner, out = run_in_thread(lambda: s.run([], target_nodes=["bad", "after"]),
                                    "test-managed-run")
        runner.join(PROMPT_S)
        assert not runner.is_alive(), (
            f"run() had not returned {PROMPT_S:g} s after the queued op 'bad' failed [OPM-7]")
    finally:
        m.close()
    assert isinstance(out.get("error"), rt.OpError) \
        and "planned failure of a queued op" in str(out["error"]), \
        f"run() must raise the step's first error, bad's, got {out} [OPM-7]"
    assert ran.snapshot() == [], "'after' ran although the step had failed [OPM-7]"
    assert events.snapshot() == [], (
        f"after the queued op 'bad' failed the step, the manager thread made {events.snapshot()} "
        f"for 'after', which it retires unrun: such an op has no idle slot, so no drain of the "
        f"GPUs and no read or deduction of E [OPM-7]")


# -- OPM-4 -----------------------------------------------------------------------------------

@pytest.mark.clause("OPM-4", "OPM-3", "OPM-5")
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 33, 64])
@pytest.mark.parametrize("idle", [1, 63, 1000, 999_983])
def test_idle_slot_before_each_launch(rt, managed, n: int, idle: int) -> None:
    log = Log()
    s = managed.ctx.new_session(chain(rt, n, log, managed.clock, managed.rm))
    managed.throttle(50, idle)
    t0 = managed.clock.now_us()
    s.run([f"op{n - 1}"])
    slots = expected_slots(idle, n)
    got = log.snapshot()
    assert [e[0] for e in got] == [f"op{i}" for i in range(n)], "[OPM-3]"
    launch = [e[1] - t0 for e in got]
    spent = np.cumsum(slots).tolist()
    assert launch == spent, (
        f"N={n}, E={idle}: ops launched at {launch[:8]}... µs, expected the sums of the idle "
        f"slots floor(E_i / N_i) {spent[:8]}... (slot waited BEFORE each launch) [OPM-4]")
    remaining = [e[2] for e in got]
    assert remaining == [idle - x for x in spent], (
        f"N={n}, E={idle}: E seen at each launch {remaining[:8]}..., expected "
        f"{[idle - x for x in spent][:8]}... (each slot deducted) [OPM-4]")
    assert remaining[-1] == 0, "E must be spent exactly by the step's last GPU op [OPM-4]"
    assert all(e[3].startswith(OP_MANAGER_PREFIX) for e in got), \
        f"queued ops must run on the manager thread: {sorted({e[3] for e in got})} [OPM-3]"
    (_, graph_id, *_), = managed.post.snapshot()
    assert managed.rm.get_executor_queued_op_num(graph_id) == n, \
        f"set_executor_queued_op_num({graph_id}, {n}) expected [OPM-5]"


@pytest.mark.clause("OPM-5")
def test_a_failed_step_counts_the_ops_it_queued(rt, managed) -> None:
    """A chain of five GPU ops whose second fails: two were queued (the failing one included);
    the three after it never became ready, so they are not counted."""
    log = Log()
    clock, rm = managed.clock, managed.rm
    graph_ids: list[int] = []
    managed.ctx.registry.register(0, 0, recording_action(
        rt, "pre", Log(), on_run=lambda options: graph_ids.append(options.graph_id)))

    def fail(x):
        raise RuntimeError("planned")

    g = rt.Graph()
    g.add_node("op0", "PyFunc", device=GPU, func=probe(log, "op0", clock, rm))
    g.add_node("op1", "PyFunc", ["op0"], device=GPU, func=fail)
    for i in range(2, 5):
        g.add_node(f"op{i}", "PyFunc", [f"op{i - 1}"], device=GPU,
                   func=probe(log, f"op{i}", clock, rm))
    s = managed.ctx.new_session(g)
    managed.throttle(50, 5000)
    with pytest.raises(rt.OpError):
        s.run(["op4"])
        pytest.fail("a step whose second GPU op raised succeeded [OPM-5]")
    (graph_id,) = graph_ids
    got = rm.get_executor_queued_op_num(graph_id)
    assert got == 2, (f"a managed step that failed at its second GPU op recorded {got} queued "
                      f"ops, expected 2 (the ops it queued) [OPM-5]")
    assert [e[0] for e in log.snapshot()] == ["op0"], \
        f"ops launched {log.snapshot()}, expected op0 only [OPM-5]"


REFUSAL = "queued-op count refused by the RM action"


def refusing_resource_management(rt):
    """A GPUResourceManagement subclass whose ``set_executor_queued_op_num`` raises while
    ``refuse`` is set: a user's RM action that breaks RM-15, so that the work ending a managed
    step raises (OPM-5)."""

    class RefusingQueuedOpCount(rt.GPUResourceManagement):
        refuse = True

        def set_executor_queued_op_num(self, key, n) -> None:
            if self.refuse:
                raise RuntimeError(REFUSAL)
            super().set_executor_queued_op_num(key, n)

    return RefusingQueuedOpCount


@pytest.fixture
def refusing(rt, auto_clock):
    m = Managed(rt, auto_clock, rm_class=refusing_resource_management(rt))
    yield m
    m.close()


def queued_op_between_cpu_nodes(rt, m: Managed, log: Log, tail=None):
    """CPU root -> op0, an asynchronous GPU op -> CPU tail (running ``tail`` if given): the
    root's thread queues op0, and the step ends on the CPU tail, off the manager thread, so
    that the step queues one op and finishes however a runtime counts its queued ops."""
    g = rt.Graph()
    g.add_node("root", "PyFunc", device=CPU, func=probe(log, "root", m.clock, m.rm))
    g.add_node("op0", "PyFunc", ["root"], device=GPU, is_async=True,
               func=probe(log, "op0", m.clock, m.rm))
    g.add_node("tail", "PyFunc", ["op0"], device=CPU,
               func=tail or probe(log, "tail", m.clock, m.rm))
    return g


@pytest.mark.clause("OPM-5")
def test_a_failing_queued_op_count_fails_the_step(rt, refusing) -> None:
    """The step itself succeeds; the RM action's set_executor_queued_op_num raises when it
    finishes. run must raise an UnknownError naming that exception, end the step as a failed
    one (buffers freed, manager joined, no POST action), and leave the session usable."""
    m = refusing
    log = Log()
    s = m.ctx.new_session(queued_op_between_cpu_nodes(rt, m, log))
    alloc = m.ctx.device_mgr.lookup_device(GPU).get_allocator()
    before = alloc.get_stats().bytes_in_use
    m.throttle(50, 1000)
    runner, out = run_in_thread(lambda: s.run(["tail"]), "test-managed-run")
    runner.join(10)
    assert not runner.is_alive(), \
        "run() hung after the RM action's set_executor_queued_op_num raised [OPM-5]"
    error = out.get("error")
    got = f"raised {error!r}" if "result" not in out else f"returned {out['result']!r}"
    assert isinstance(error, rt.UnknownError) and REFUSAL in str(error), (
        f"the RM action's set_executor_queued_op_num raised RuntimeError({REFUSAL!r}) as the "
        f"managed step finished: run {got}, expected an UnknownError whose message contains "
        f"that text [OPM-5]")
    assert [e[0] for e in log.snapshot()] == ["root", "op0", "tail"], \
        f"nodes run {log.snapshot()}, expected root, op0 and tail [OPM-5]"
    assert alloc.get_stats().bytes_in_use == before, (
        f"{alloc.get_stats().bytes_in_use - before} bytes still in use on {GPU} after the step "
        f"whose queued-op count failed [OPM-5]")
    assert manager_threads() == [], \
        f"run() raised with its manager thread not joined: {manager_threads()} [OPM-6]"
    assert m.post.snapshot() == [], \
        f"POST actions ran after the step failed: {m.post.snapshot()} [OPM-5]"
    m.rm.refuse = False
    log.clear()
    m.throttle(50, 1000)
    ran = [e[0] for e in log.snapshot()] if len(s.run(["tail"])) == 1 else None
    assert ran == ["root", "op0", "tail"], \
        f"the next run of the session returned no fetch or ran {ran} [OPM-5]"
    assert len(m.post.snapshot()) == 1, \
        f"POST actions of the next run: {m.post.snapshot()}, expected one [OPM-5]"


@pytest.mark.clause("OPM-5")
def test_a_failed_steps_first_error_outranks_a_failing_queued_op_count(rt, refusing,
                                                                        caplog) -> None:
    """The step's last node fails, then set_executor_queued_op_num raises as the step
    finishes: run raises the step's first error, not the later one, and the later one, which
    that error does not carry, is logged as an error (its text in the record's message or in
    its exception)."""
    m = refusing
    log = Log()
    caplog.set_level(logging.ERROR)

    def fail(x):
        raise rt.InvalidArgumentError("planned failure of tail")

    s = m.ctx.new_session(queued_op_between_cpu_nodes(rt, m, log, tail=fail))
    m.throttle(50, 1000)
    runner, out = run_in_thread(lambda: s.run(["tail"]), "test-managed-run")
    runner.join(10)
    assert not runner.is_alive(), \
        "run() hung after the RM action's set_executor_queued_op_num raised [OPM-5]"
    error = out.get("error")
    assert isinstance(error, rt.InvalidArgumentError) and "planned failure" in str(error), (
        f"a step failed at its tail, then set_executor_queued_op_num raised: run raised "
        f"{error!r}, expected the step's first error, tail's InvalidArgumentError [OPM-5]")
    assert manager_threads() == [], \
        f"run() raised with its manager thread not joined: {manager_threads()} [OPM-6]"
    logged = [r for r in runtime_records(caplog, rt, logging.ERROR) if carries(r, REFUSAL)]
    assert logged, (
        f"set_executor_queued_op_num raised RuntimeError({REFUSAL!r}) after the step had "
        f"failed; run raised the step's first error and no error record of the runtime "
        f"carries the later one [OPM-5]")


@pytest.mark.clause("OPM-3", "OPM-4")
def test_fifo_launch_order(rt, managed) -> None:
    log = Log()
    clock, rm = managed.clock, managed.rm
    g = rt.Graph()
    g.add_node("root", "PyFunc", device=CPU, is_expensive=False,
               func=probe(log, "root", clock, rm))
    names = [f"g{i}" for i in (3, 1, 4, 0, 5, 9, 2, 6)]
    for name in names:                     # consumers in this insertion order (EXEC-11)
        g.add_node(name, "PyFunc", ["root"], device=GPU, func=probe(log, name, clock, rm))
    g.add_node("cpu_tail", "PyFunc", ["root"], device=CPU, is_expensive=False,
               func=probe(log, "cpu_tail", clock, rm))
    s = managed.ctx.new_session(g)
    for _ in range(3):
        log.clear()
        managed.throttle(50, 8000)
        t0 = clock.now_us()
        s.run(names + ["cpu_tail"])
        assert_queued_launches(log, names, t0, 1000, "cpu_tail")


@pytest.mark.clause("OPM-4")
def test_slot_deducts_the_idle_time_it_took(rt, managed_manual) -> None:
    """Slots that last longer than requested (a real sleep oversleeps) deduct what they took."""
    m = managed_manual
    clock, log = m.clock, Log()
    s = m.ctx.new_session(chain(rt, 4, log, clock, m.rm))
    m.throttle(50, 1000)
    t0 = clock.now_us()
    runner, out = run_in_thread(lambda: s.run(["op3"]), "test-managed-run")
    # E = 1000, N = 4: slot 250, let run 400 -> E = 600; N = 3: slot 200, run 200 -> E = 400;
    # N = 2: slot 200, let run 700 -> E = 0 and 300 µs of overrun; N = 1: slot 0, no wait.
    for advance in (400, 200, 700):
        wait_for_idle_slot(clock)
        clock.tick(advance)
    runner.join(10)
    assert not runner.is_alive() and "error" not in out, f"run() hung or failed: {out} [OPM-4]"
    got = log.snapshot()
    assert [(e[0], e[1] - t0, e[2]) for e in got] == [
        ("op0", 400, 600), ("op1", 600, 400), ("op2", 1300, 0), ("op3", 1300, 0)], (
        f"(op, launch µs, E at launch) = {[(e[0], e[1] - t0, e[2]) for e in got]}: each slot "
        f"must deduct the idle time it took on the clock, clamped at E = 0 [OPM-4]")
    assert clock.sleeps_of(OP_MANAGER_PREFIX) == [250, 200, 200], \
        f"slots requested {clock.sleeps_of(OP_MANAGER_PREFIX)}, expected [250, 200, 200] [OPM-4]"
    assert m.rm.in_step_idle == 1300, \
        f"in-step idle {m.rm.in_step_idle} µs, expected all 1300 µs the slots took [OPM-4]"


@pytest.mark.clause("OPM-4", "OPM-7")
def test_interrupted_slot_deducts_what_it_took(rt, managed_manual) -> None:
    m = managed_manual
    log = Log()
    s, runner, out = run_into_idle_slot(rt, m, log, 10 ** 6)
    m.clock.tick(1234)                     # part of the 500 000 µs slot
    close_within(s, "close() during an idle slot never returned: the step it cancels never "
                    "ended [OPM-7]")
    runner.join(10)
    assert not runner.is_alive() and isinstance(out.get("error"), rt.CancelledError), \
        f"close() during an idle slot must fail the step: {out} [OPM-7]"
    assert m.rm.get_estimated_idle_time() == 10 ** 6 - 1234, (
        f"E = {m.rm.get_estimated_idle_time()} after a slot interrupted 1234 µs in, expected "
        f"{10 ** 6 - 1234} (the idle time it took, not the slot requested) [OPM-4]")


# -- OPM-1, OPM-2 ----------------------------------------------------------------------------

@pytest.mark.clause("OPM-2", "OPM-3")
def test_gpu_consumers_of_a_queued_op_launch_in_edge_order(rt, managed) -> None:
    log = Log()
    clock, rm = managed.clock, managed.rm
    g = rt.Graph()
    g.add_node("a", "PyFunc", device=GPU, func=probe(log, "a", clock, rm))
    names = [f"c{i}" for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    for i, name in enumerate(names):       # output edges of 'a' in this order
        g.add_node(name, "PyFunc", ["a"], device=GPU, func=probe(log, name, clock, rm))
        if i == 3:
            g.add_node("cpu", "PyFunc", ["a"], device=CPU, is_expensive=False,
                       func=probe(log, "cpu", clock, rm))
    s = managed.ctx.new_session(g)
    for _ in range(20):
        log.clear()
        managed.throttle(50, 9000)
        t0 = clock.now_us()
        s.run(names + ["cpu"])
        assert_queued_launches(log, ["a"] + names, t0, 1000, "cpu")


@pytest.mark.clause("OPM-2")
def test_synchronous_gpu_kernels_are_queued_too(rt, managed) -> None:
    log = Log()
    clock, rm = managed.clock, managed.rm
    g = rt.Graph()
    # Their simulated compute time (EXEC-12) is waited on the thread that runs their kernel.
    g.add_node("x", "Placeholder", device=GPU, dtype="float32", cost_us=5)
    g.add_node("mm", "MatMul", ["x", "x"], device=GPU, cost_us=7)
    g.add_node("p", "PyFunc", ["mm"], device=GPU, func=probe(log, "p", clock, rm))
    g.add_node("c", "PyFunc", ["p"], device=CPU, func=probe(log, "c", clock, rm))
    s = managed.ctx.new_session(g)
    managed.throttle(50, 300)
    t0 = clock.now_us()
    s.run(["c"], {"x": np.eye(2, dtype=np.float32)})
    (p, c) = log.snapshot()
    waits = clock.sleeps_of(OP_MANAGER_PREFIX)
    assert 5 in waits and 7 in waits and p[3].startswith(OP_MANAGER_PREFIX), (
        f"manager thread waits {waits}, 'p' ran on {p[3]}: the Placeholder (5 µs), the MatMul "
        f"(7 µs) and the PyFunc must be queued, their kernels run by the manager thread "
        f"[OPM-2]")
    slots = [w for w in waits if w not in (5, 7)]
    assert slots == [100, 100, 100], f"idle slots {slots}: E=300 over 3 queued ops [OPM-4]"
    assert p[1] - t0 == 312 and p[2] == 0, (
        f"the Placeholder and MatMul must be queued with slots of 100 µs each: 'p' launched "
        f"at {p[1] - t0} µs with E={p[2]}, expected 300 + 5 + 7 and 0 [OPM-4]")
    assert c[3].startswith(INTER_OP_PREFIX), f"the CPU node ran on {c[3]} [OPM-2]"


@pytest.mark.clause("OPM-1")
@pytest.mark.parametrize("perf,idle,device", [(100, 1000, GPU), (50, 0, GPU), (50, 1000, CPU)],
                         ids=["perf100", "E0", "no-gpu-op"])
def test_no_queueing_when_not_managed(rt, managed, perf: int, idle: int, device: str) -> None:
    log = Log()
    clock, rm = managed.clock, managed.rm
    alive: list[list[str]] = []

    def look(x):
        alive.append(manager_threads())
        return x

    g = chain(rt, 3, log, clock, rm, device=device)
    g.add_node("look", "PyFunc", ["op2"], device=device, func=look)
    s = managed.ctx.new_session(g)
    managed.throttle(perf, idle)
    t0 = clock.now_us()
    s.run(["look"])
    got = log.snapshot()
    assert [e[1] - t0 for e in got] == [0, 0, 0], \
        f"perf={perf}, E={idle}, {device}: ops waited {[e[1] - t0 for e in got]} µs [OPM-1]"
    assert [e[2] for e in got] == [idle] * 3, "E must not change inside the step [OPM-1]"
    assert not any(e[3].startswith(OP_MANAGER_PREFIX) for e in got) and alive == [[]], \
        f"perf={perf}, E={idle}: a GpuOpManager thread existed: {alive} [OPM-1]"
    assert clock.sleeps_of(OP_MANAGER_PREFIX) == [], "[OPM-1]"


@pytest.mark.clause("OPM-1", "OPM-4")
@pytest.mark.parametrize("perf,idle", [(99, 1), (1, 1), (99, 2)])
def test_managed_just_inside_the_bounds(rt, managed, perf: int, idle: int) -> None:
    """perfControl 99 (below 100) and E = 1 (above 0) make a managed step."""
    log = Log()
    s = managed.ctx.new_session(chain(rt, 1, log, managed.clock, managed.rm))
    managed.throttle(perf, idle)
    t0 = managed.clock.now_us()
    s.run(["op0"])
    ((_, launched, left, thread),) = log.snapshot()
    assert thread.startswith(OP_MANAGER_PREFIX), (
        f"perf={perf}, E={idle}: the GPU op ran on {thread}; expected a managed step, its op "
        f"queued and launched by the manager thread [OPM-1]")
    assert (launched - t0, left) == (idle, 0), (
        f"perf={perf}, E={idle}: the managed GPU op launched at {launched - t0} µs with "
        f"E={left}, expected after an idle slot of {idle} µs with E=0 [OPM-4]")


# -- OPM-6, OPM-7 ----------------------------------------------------------------------------

@pytest.mark.clause("OPM-6")
def test_last_op_on_the_manager_thread_is_joined_by_run(rt, managed) -> None:
    log = Log()
    s = managed.ctx.new_session(chain(rt, 2, log, managed.clock, managed.rm))
    seen: set[str] = set()
    for _ in range(50):
        log.clear()
        managed.throttle(50, 10)
        s.run(["op1"])
        last = log.snapshot()[-1]
        assert last[3].startswith(OP_MANAGER_PREFIX), \
            f"the step's last node ran on {last[3]}, expected the manager thread [OPM-3]"
        seen.add(last[3])
        assert manager_threads() == [], \
            f"run() returned with manager threads alive: {manager_threads()} [OPM-6]"
    assert len(seen) == 50, "each managed step must have its own manager thread [OPM-3]"


@pytest.mark.clause("OPM-6")
def test_the_manager_thread_ends_by_returning(rt, managed, monkeypatch) -> None:
    """Shut down with its queue empty, the manager thread returns: no exception escapes it
    (threading.excepthook sees none), whether the step ends on the manager thread (a GPU
    chain), on an inter-op thread (a CPU node after the GPU op) or with an error."""
    escaped: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(
        f"{args.exc_type.__name__} in {getattr(args.thread, 'name', '?')}"))
    log = Log()

    def fail(x):
        raise ValueError("planned")

    ends_on_cpu = chain(rt, 1, log, managed.clock, managed.rm)
    ends_on_cpu.add_node("c", "PyFunc", ["op0"], device=CPU, func=lambda x: x)
    fails = chain(rt, 1, log, managed.clock, managed.rm)
    fails.add_node("bad", "PyFunc", ["op0"], device=GPU, func=fail)
    for graph, fetch in ((chain(rt, 2, log, managed.clock, managed.rm), "op1"),
                         (ends_on_cpu, "c"), (fails, "bad")):
        s = managed.ctx.new_session(graph)
        for _ in range(3):
            managed.throttle(50, 10)
            if fetch == "bad":
                with pytest.raises(rt.OpError):
                    s.run([fetch])
                    pytest.fail("a managed step whose GPU op raised succeeded [OPM-6]")
            else:
                s.run([fetch])
            assert manager_threads() == [], \
                f"run() returned with manager threads alive: {manager_threads()} [OPM-6]"
    assert escaped == [], (
        f"exceptions escaped the manager threads as the steps ended: {escaped}; a manager "
        f"shut down with nothing queued must return [OPM-6]")


@contextlib.contextmanager
def slow_manager_exit(delay_s: float = 0.05):
    """Make every GpuOpManager thread started meanwhile linger ``delay_s`` before it ends.

    A trace hook (``threading.settrace``) delays the return of the thread's outermost frame,
    so a manager thread that ``run`` does not join is certainly still alive when ``run``
    returns, while a joined one has ended.
    """
    hooked: list[str] = []
    delayed: list[threading.Thread] = []     # the threads already hooked (idents are reused)

    def tracer(frame, event, arg):
        if event != "call":
            return None
        me = threading.current_thread()
        if not me.name.startswith(OP_MANAGER_PREFIX) or any(t is me for t in delayed):
            return None
        delayed.append(me)
        hooked.append(me.name)

        def outermost(frame, event, arg):
            if event == "return":
                time.sleep(delay_s)
            return outermost

        return outermost

    threading.settrace(tracer)
    try:
        yield hooked
    finally:
        threading.settrace(None)


@pytest.mark.clause("OPM-6")
@pytest.mark.parametrize("last", ["gpu", "cpu"], ids=["ends-on-manager", "ends-elsewhere"])
def test_run_joins_the_manager_thread(rt, managed, last: str) -> None:
    log = Log()
    g = chain(rt, 2, log, managed.clock, managed.rm)
    g.add_node("tail", "PyFunc", ["op1"], device=GPU if last == "gpu" else CPU,
               func=probe(log, "tail", managed.clock, managed.rm))
    s = managed.ctx.new_session(g)
    with slow_manager_exit() as hooked:
        for _ in range(3):
            managed.throttle(50, 30)
            s.run(["tail"])
            assert manager_threads() == [], (
                f"run() returned while the step's manager thread was alive: "
                f"{manager_threads()} (the step ended on the "
                f"{'manager' if last == 'gpu' else 'inter-op'} thread) [OPM-6]")
    assert len(hooked) == 3, (
        f"expected one manager thread per managed step, saw {len(hooked)} [OPM-6]")


@pytest.mark.clause("OPM-7", "SESS-8")
def test_close_interrupts_the_idle_slot(rt, managed_manual) -> None:
    m = managed_manual
    log = Log()
    s, runner, out = run_into_idle_slot(rt, m, log, 10 ** 9)
    close_within(s, "close() during an idle slot never returned: the step it cancels never "
                    "ended [OPM-7]")
    runner.join(10)
    assert not runner.is_alive(), "run() hung after close() [OPM-7]"
    assert isinstance(out.get("error"), rt.CancelledError), \
        f"close() during an idle slot must fail the step with CancelledError: {out} [OPM-7]"
    assert log.snapshot() == [] and manager_threads() == [], \
        f"ops launched {log.snapshot()} / threads left {manager_threads()} [OPM-6]"


@pytest.mark.clause("OPM-6", "EXEC-13")
def test_throttled_steps_leave_no_thread(rt, managed) -> None:
    log = Log()
    s = managed.ctx.new_session(chain(rt, 3, log, managed.clock, managed.rm))
    s.run(["op2"])
    before = {t.name for t in threading.enumerate()}
    for i in range(200):
        managed.throttle(50, 1 + i)
        s.run(["op2"])
    after = {t.name for t in threading.enumerate()}
    assert not (after - before), f"threads left after 200 managed steps: {after - before} " \
                                 f"[OPM-6]"


# -- OPM-8 -----------------------------------------------------------------------------------

SYNC_US = 7_000  # virtual time one synchronize takes: the GPU finishing its queued work


@pytest.mark.clause("OPM-8", "OPM-4")
@pytest.mark.parametrize("idle", [2, 1003, 999_983])
def test_idle_slot_starts_once_the_steps_gpus_have_drained(rt, auto_clock, idle: int) -> None:
    """A chain alternating GPU:0 and GPU:1 (and a CPU node), on a backend whose
    ``synchronize`` takes SYNC_US of virtual time: before every non-zero slot both GPUs are
    synchronized, the slot is measured after that, and only the slot is deducted from E."""
    log, sync_times = Log(), []

    def gpu_finishes(index) -> None:
        sync_times.append(auto_clock.now_us())
        auto_clock.advance(SYNC_US)

    backend = RecordingBackend(rt.select_backend("sim", num_gpus=2, gpu_memory_bytes=1 << 26),
                               log, on_sync=gpu_finishes)
    m = Managed(rt, auto_clock, num_gpus=2, gpu_memory_bytes=1 << 26, backend=backend)
    try:
        g = rt.Graph()
        devices = ["/device:GPU:0", "/device:GPU:1", CPU, "/device:GPU:1", "/device:GPU:0"]
        for i, dev in enumerate(devices):
            g.add_node(f"op{i}", "PyFunc", [f"op{i - 1}"] if i else [], device=dev,
                       func=probe(log, f"op{i}", auto_clock, m.rm))
        s = m.ctx.new_session(g)
        s.run(["op4"])                    # unmanaged: only EXEC-14's synchronize at the end
        log.clear()
        sync_times.clear()
        m.throttle(50, idle)
        t0 = auto_clock.now_us()
        s.run(["op4"])
        got = log.snapshot()
    finally:
        m.close()
    slots = iter(expected_slots(idle, 4))          # four GPU ops, N_0 = 4
    expected, t, e = [], t0, idle
    for i, dev in enumerate(devices):
        if dev != CPU:
            slot = next(slots)
            if slot:
                expected += [("synchronize", t), ("synchronize", t + SYNC_US)]
                t += 2 * SYNC_US + slot
                e -= slot
        expected.append((f"op{i}", t, e))
    expected += [("synchronize", t), ("synchronize", t + SYNC_US)]   # EXEC-14
    left = [ev[2] for ev in got if ev[0] != "synchronize"]
    want = [x[2] for x in expected if x[0] != "synchronize"]
    assert left == want, (
        f"E={idle}: E left at each launch {left}, expected {want}: each GPU op's slot is "
        f"floor(E_i / N_i), spent before its launch [OPM-4]")
    times, seen, indices = iter(sync_times), [], []
    for ev in got:                       # (synchronize, index) → (synchronize, clock µs)
        if ev[0] == "synchronize":
            indices.append(ev[1])
            seen.append(("synchronize", next(times)))
        else:
            seen.append(ev[:3])
    assert [x[0] for x in seen] == [x[0] for x in expected], (
        f"E={idle}: events {[x[0] for x in seen]}, expected {[x[0] for x in expected]}: both "
        f"GPUs synchronized before each non-zero idle slot and none before a zero one [OPM-8]")
    assert seen == expected, (
        f"E={idle}: launches (op, clock µs, E left) {[x for x in seen if x[0] != 'synchronize']}"
        f", expected {[x for x in expected if x[0] != 'synchronize']}: each slot starts after "
        f"the GPUs drained and only the slot is deducted from E [OPM-8]")
    pairs = [sorted(indices[j:j + 2]) for j in range(0, len(indices), 2)]
    assert all(p == [0, 1] for p in pairs), (
        f"E={idle}: synchronize indices {indices}: each drain synchronizes GPU:0 and GPU:1 "
        f"once [OPM-8]")


SLOT_FAILURE = "the GPU stopped answering"


@pytest.mark.clause("OPM-8")
@pytest.mark.parametrize("where", ["synchronize", "get_estimated_idle_time", "spend_idle_time"])
def test_an_idle_slot_that_raises_fails_the_step(rt, auto_clock, where: str) -> None:
    """The backend's ``synchronize`` before op0's slot, or the RM action's call made for that
    slot, raises on the manager thread (a GPU that reports an error, a user's RM action): the
    step must fail with an UnknownError naming op0 and containing that text, without
    hanging, and neither op0 nor op1 (queued after it once op0 ran) is launched. A runtime
    whose run hangs fails after PROMPT_S and is not closed (its step never ends)."""
    def failing_here(what: str) -> bool:
        return where == what and threading.current_thread().name.startswith(OP_MANAGER_PREFIX)

    def gpu_finishes(index) -> None:
        if failing_here("synchronize"):
            raise RuntimeError(SLOT_FAILURE)

    class FailingCalls(rt.GPUResourceManagement):
        def get_estimated_idle_time(self):
            if failing_here("get_estimated_idle_time"):
                raise RuntimeError(SLOT_FAILURE)
            return super().get_estimated_idle_time()

        def spend_idle_time(self, us):
            if failing_here("spend_idle_time"):
                raise RuntimeError(SLOT_FAILURE)
            return super().spend_idle_time(us)

    log = Log()
    backend = RecordingBackend(rt.select_backend("sim", num_gpus=1, gpu_memory_bytes=1 << 26),
                               Log(), on_sync=gpu_finishes)
    # Not Managed's context manager: a runtime whose step never ends is left open (closing
    # it would wait for that step), and nothing may close it later, at the process's exit.
    ctx = rt.create_runtime(backend=backend, clock=auto_clock, config_file=None,
                            status_file=None, gpu_memory_bytes=1 << 26)
    rm = FailingCalls(None, clock=auto_clock, registry=ctx.registry)
    s = ctx.new_session(chain(rt, 2, log, auto_clock, rm))
    assert rm.parse_manage_info_from_json('{"perfControl": 50}'), "[RM-3]"
    rm.set_estimated_idle_time(1000)          # op0's slot: 500 µs
    runner, out = run_in_thread(lambda: s.run(["op1"]), "test-managed-run")
    runner.join(PROMPT_S)
    if runner.is_alive():
        pytest.fail(f"run() had not returned {PROMPT_S} s after {where} raised "
                    f"RuntimeError({SLOT_FAILURE!r}) on the manager thread during the idle "
                    f"slot before op0: the step must fail, not wait for ever [OPM-8]")
    try:
        error = out.get("error")
        got = f"raised {error!r}" if "result" not in out else f"returned {out['result']!r}"
        assert isinstance(error, rt.UnknownError) and SLOT_FAILURE in str(error) \
            and "op0" in str(error), (
            f"{where} raised RuntimeError({SLOT_FAILURE!r}) during the idle slot before op0: "
            f"run {got}, expected an UnknownError naming op0 and containing that text [OPM-8]")
        cause = error.__cause__
        attributes = (error.node_name, error.op, error.device)
        expected = ("op0", "PyFunc", ctx.device_mgr.lookup_device(GPU).name)
        assert isinstance(cause, RuntimeError) and str(cause) == SLOT_FAILURE \
            and attributes == expected, (
            f"the step's UnknownError has __cause__ {cause!r} and (node_name, op, device) "
            f"{attributes}, expected the RuntimeError {where} raised and op0's {expected} "
            f"[OPM-8]")
        assert log.snapshot() == [], (
            f"ops launched after the idle slot before op0 failed: {log.snapshot()} [OPM-8]")
        assert manager_threads() == [], \
            f"run() raised with manager threads alive: {manager_threads()} [OPM-6]"
    finally:
        rm.close()
        ctx.close()


# -- exact accounting at the microsecond boundary ---------------------------------------------

@pytest.mark.clause("OPM-4", "OPM-7")
@pytest.mark.parametrize("taken_us", [0, 1, 2])
def test_interrupted_slot_deducts_to_the_microsecond(rt, managed_manual, taken_us: int) -> None:
    """A slot ended after 0, 1 or 2 µs deducts exactly 0, 1 or 2 µs: the measured idle time is
    never rounded up (a slot ended before any clock time passed deducts nothing)."""
    m = managed_manual
    s, runner, out = run_into_idle_slot(rt, m, Log(), 10 ** 6)
    if taken_us:
        m.clock.tick(taken_us)
    close_within(s, "close() during an idle slot never returned: the step it cancels never "
                    "ended [OPM-7]")
    runner.join(10)
    assert not runner.is_alive() and isinstance(out.get("error"), rt.CancelledError), \
        f"close() during an idle slot must fail the step: {out} [OPM-7]"
    e = m.rm.get_estimated_idle_time()
    assert e == 10 ** 6 - taken_us, (
        f"E = {e} after a slot interrupted {taken_us} µs in, expected {10 ** 6 - taken_us}: "
        f"spent_i is the clock time the wait took, 0 included [OPM-4]")
    assert m.rm.in_step_idle == taken_us, (
        f"in-step idle {m.rm.in_step_idle} µs after a slot interrupted {taken_us} µs in, "
        f"expected {taken_us} [OPM-4]")


# -- which thread queues a GPU op, and what it does next (OPM-2, OPM-3) ------------------------

#: Real-time bound on a node that a correct runtime runs at once, without the clock moving
#: (a loaded machine is slow). A runtime that holds the node back fails after this bound,
#: never a correct one: nothing but the test could release it.
PROMPT_S = 10.0


def small_pool_session(rt, m: Managed, g):
    """A session over ``g`` whose inter-op pool has two threads (SESS-1), so a test can keep
    both of them busy."""
    return rt.DirectSession(m.ctx.device_mgr, g, registry=m.ctx.registry, clock=m.clock,
                            inter_op_threads=2)


def wait_for_the_first_slot(clock) -> None:
    """Until the manager thread waits in an idle slot (a step with none fails on OPM-4)."""
    wait_until(lambda: any(n.startswith(OP_MANAGER_PREFIX) for n in clock.waiting_threads()),
               "the manager thread to wait in the idle slot before its first launch [OPM-4]")


def holding(log: Log, tag: str, release: threading.Event):
    """A CPU PyFunc body that records ``tag`` and keeps its thread until ``release``."""

    def func(*args):
        log.add((tag, threading.current_thread().name))
        release.wait(3 * PROMPT_S)
        return np.float32(0)

    return func


@pytest.mark.clause("OPM-3")
def test_a_thread_that_queued_gpu_ops_is_free_while_they_wait(rt, managed_manual) -> None:
    """On a two-thread pool, ``hold`` keeps one thread; the CPU node ``c0`` queues the GPU ops
    ``g0`` and ``g1`` on the other and hands its expensive consumer ``free`` to the runner.
    While the manager waits in g0's idle slot (g1 still queued, the clock stopped), ``free``
    must run: the thread that queued the ops returned to the pool without waiting for the
    queue to drain (AntMan's Process busy-waits until it drains, D-OPM-6)."""
    m = managed_manual
    clock, rm, log = m.clock, m.rm, Log()
    release, freed = threading.Event(), threading.Event()

    def free(*args):
        log.add(("free", clock.now_us(), rm.get_estimated_idle_time(),
                 threading.current_thread().name))
        freed.set()
        return np.float32(0)

    g = rt.Graph()
    g.add_node("hold", "PyFunc", device=CPU, func=holding(log, "hold", release))
    g.add_node("c0", "PyFunc", device=CPU, is_expensive=False,
               func=probe(log, "c0", clock, rm))
    for name in ("g0", "g1"):
        g.add_node(name, "PyFunc", ["c0"], device=GPU, func=probe(log, name, clock, rm))
    g.add_node("free", "PyFunc", ["c0"], device=CPU, is_expensive=True, func=free)
    s = small_pool_session(rt, m, g)
    try:
        m.throttle(50, 2000)               # two GPU ops: slots of 1000 µs each
        t0 = clock.now_us()
        runner, out = run_in_thread(lambda: s.run(["g0", "g1", "free", "hold"]),
                                    "test-managed-run")
        wait_for_the_first_slot(clock)
        free_in_time = freed.wait(PROMPT_S)
        clock.tick(1000)                   # g0 launches; the manager waits in g1's slot
        clock.advance(1000)                # g1 launches
        wait_until(lambda: any(e[0] == "g1" for e in log.snapshot()), "g1's launch [OPM-4]")
        release.set()
        runner.join(PROMPT_S)
        assert not runner.is_alive() and "error" not in out, f"run() hung or failed: {out} [OPM-3]"
    finally:
        release.set()
        s.close()
    events = log.snapshot()
    order = [e[0] for e in events if e[0] in ("g0", "g1", "free")]
    at = next(e[1] for e in events if e[0] == "free") - t0
    assert free_in_time and order[0] == "free" and at == 0, (
        f"the CPU node 'free' ran at {at} µs, in the order {order}: with g1 queued and the "
        f"manager in g0's idle slot, the pool thread whose Process queued g0 and g1 must "
        f"return to the pool, not wait until the queue drains [OPM-3]")
    assert [e[0] for e in events if e[0] in ("g0", "g1")] == ["g0", "g1"], "[OPM-3]"


@pytest.mark.clause("OPM-2", "OPM-1")
def test_gpu_ops_stay_queued_after_the_idle_budget_runs_out(rt, managed_manual) -> None:
    """A managed step g0 (GPU) → c (CPU) → g1 (GPU) with E = 1000: g0's slot of 500 µs
    overruns to 1000 µs, so E is 0 when c makes g1 ready on an inter-op thread. The step is
    managed from start to end (OPM-1 decides once): g1 is queued all the same and launched by
    the manager thread (AntMan re-evaluates E > 0 for every op and launches it directly,
    D-OPM-8)."""
    m = managed_manual
    clock, rm, log = m.clock, m.rm, Log()
    g = rt.Graph()
    g.add_node("g0", "PyFunc", device=GPU, func=probe(log, "g0", clock, rm))
    g.add_node("c", "PyFunc", ["g0"], device=CPU, is_expensive=False,
               func=probe(log, "c", clock, rm))
    g.add_node("g1", "PyFunc", ["c"], device=GPU, func=probe(log, "g1", clock, rm))
    s = m.ctx.new_session(g)
    m.throttle(50, 1000)
    t0 = clock.now_us()
    runner, out = run_in_thread(lambda: s.run(["g1"]), "test-managed-run")
    try:
        wait_for_the_first_slot(clock)
        clock.advance(1000)                # the 500 µs slot takes 1000 µs: E = 0
        runner.join(PROMPT_S)
    finally:
        s.close()                          # ends a step that waits in a slot nobody ends
        runner.join(PROMPT_S)
    got = {e[0]: e for e in log.snapshot()}
    assert "c" in got and (got["c"][1] - t0, got["c"][2]) == (1000, 0), (
        f"'c' ran at {got['c'][1] - t0 if 'c' in got else None} µs with "
        f"E={got['c'][2] if 'c' in got else None}, expected 1000 µs and E=0: the overrun slot "
        f"deducts what it took, clamped at 0 [OPM-4]")
    assert "g1" in got and got["g1"][1] - t0 == 1000, (
        f"g1 launched at {got['g1'][1] - t0 if 'g1' in got else 'no time'}: with E = 0 its "
        f"slot is 0 [OPM-4]")
    assert not runner.is_alive() and "error" not in out, f"run() hung or failed: {out} [OPM-2]"
    assert got["c"][3].startswith(INTER_OP_PREFIX), f"'c' ran on {got['c'][3]} [EXEC-11]"
    assert got["g1"][3].startswith(OP_MANAGER_PREFIX), (
        f"g1, made ready once E had run out, ran on {got['g1'][3]}: every GPU op of a managed "
        f"step must be queued and launched by the manager thread, E > 0 is decided once at the "
        f"start of the step [OPM-2]")
    (_, graph_id, *_), = m.post.snapshot()
    assert rm.get_executor_queued_op_num(graph_id) == 2, (
        f"the step queued {rm.get_executor_queued_op_num(graph_id)} ops, expected both GPU "
        f"ops [OPM-5]")


def launch_marker(log, name: str, clock, rm, release: threading.Event,
                  launched: threading.Event):
    """The function of GPU node ``name``: a probe that also logs ``"<name> while held"``
    (whether ``release`` was still unset when it ran) and sets ``launched``."""
    inner = probe(log, name, clock, rm)

    def run(*args):
        log.add((f"{name} while held", not release.is_set()))
        launched.set()
        return inner(*args)
    return run


def run_holding_the_pool(rt, m, g, fetches: list[str], idle_us: int,
                         release: threading.Event, launched: threading.Event) -> bool:
    """Run one managed step of ``g`` on a two-thread pool (perfControl 50, E = ``idle_us``)
    whose CPU nodes hold their threads until ``release``; True when ``launched`` was set
    within PROMPT_S while they held them. The step must then end without error."""
    s = small_pool_session(rt, m, g)
    try:
        m.throttle(50, idle_us)
        runner, out = run_in_thread(lambda: s.run(fetches), "test-managed-run")
        launched_in_time = launched.wait(PROMPT_S)
        release.set()
        runner.join(PROMPT_S)
        assert not runner.is_alive() and "error" not in out, f"run() hung or failed: {out} [OPM-2]"
    finally:
        release.set()
        s.close()
    return launched_in_time


@pytest.mark.clause("OPM-2")
def test_gpu_consumers_of_a_queued_op_need_no_pool_thread(rt, managed) -> None:
    """On a two-thread pool, the queued op g0's consumers are hold0 and hold1 (CPU, handed to
    the runner, where each keeps a thread) and then g1 (GPU). g1 must be queued by the manager
    thread that ran g0 and launched while both holds still keep the pool: it needs no pool
    thread (AntMan hands it to the runner, behind the holds, whose Process queues it,
    D-OPM-11). This is EXEC-11's rule for a queued kernel's consumers too; the test is marked
    OPM-2 only, so that EXEC-11 stays in the must-pass section of the executor alone."""
    m = managed
    clock, rm, log = m.clock, m.rm, Log()
    release, launched = threading.Event(), threading.Event()
    g1 = launch_marker(log, "g1", clock, rm, release, launched)
    g = rt.Graph()
    g.add_node("g0", "PyFunc", device=GPU, func=probe(log, "g0", clock, rm))
    for name in ("hold0", "hold1"):        # output edges of g0: the holds first
        g.add_node(name, "PyFunc", ["g0"], device=CPU, func=holding(log, name, release))
    g.add_node("g1", "PyFunc", ["g0"], device=GPU, func=g1)
    launched_in_time = run_holding_the_pool(rt, m, g, ["g1", "hold0", "hold1"], 2000,
                                            release, launched)
    events = {e[0]: e for e in log.snapshot()}
    assert launched_in_time and events["g1 while held"][1], (
        f"g1, a GPU consumer of the queued op g0, was launched only once the CPU consumers "
        f"hold0 and hold1 had released the two inter-op threads: the manager thread that ran "
        f"g0 must queue g1 itself, not hand it to the runner [OPM-2]")
    for name in ("g0", "g1"):
        assert events[name][3].startswith(OP_MANAGER_PREFIX), \
            f"{name} ran on {events[name][3]} [OPM-3]"
    for name in ("hold0", "hold1"):
        assert events[name][1].startswith(INTER_OP_PREFIX), \
            f"{name} ran on {events[name][1]}, not the runner [EXEC-11]"


@pytest.mark.clause("OPM-2")
def test_gpu_roots_of_a_managed_step_need_no_pool_thread(rt, managed) -> None:
    """On a two-thread pool, the CPU roots hold0 and hold1 (handed to the runner first) keep
    both threads; the GPU root g0 must be queued by the thread that starts the step and
    launched while they do (AntMan hands it to the runner, behind the holds, D-OPM-11)."""
    m = managed
    clock, rm, log = m.clock, m.rm, Log()
    release, launched = threading.Event(), threading.Event()
    g0 = launch_marker(log, "g0", clock, rm, release, launched)
    g = rt.Graph()
    for name in ("hold0", "hold1"):        # roots in this order: the holds first
        g.add_node(name, "PyFunc", device=CPU, func=holding(log, name, release))
    g.add_node("g0", "PyFunc", device=GPU, func=g0)
    launched_in_time = run_holding_the_pool(rt, m, g, ["g0", "hold0", "hold1"], 1000,
                                            release, launched)
    events = {e[0]: e for e in log.snapshot()}
    assert launched_in_time and events["g0 while held"][1], (
        f"the GPU root g0 was launched only once the CPU roots hold0 and hold1 had released "
        f"the two inter-op threads: the thread that starts a managed step must queue its GPU "
        f"roots itself, not hand them to the runner [OPM-2]")
    assert events["g0"][3].startswith(OP_MANAGER_PREFIX), \
        f"g0 ran on {events['g0'][3]} [OPM-3]"


# (function of the op manager, a field it changes, what a concurrent call can do without the
# condition's lock, the clause). Each line of the function touching the field must run with
# the manager's condition held by the thread running it (the step's threads and the manager
# thread).
OP_MANAGER_FIELDS = [
    ("GpuOpManager.enqueue", "_queue",
     "an op queued while the manager thread checks the queue can be missed: the thread "
     "waits for ever and the step never ends", "OPM-3"),
    ("GpuOpManager.abort", "_aborted",
     "an abort while the manager thread checks its state can be missed: the queued ops of "
     "the failed step wait out their idle slots", "OPM-7"),
    ("GpuOpManager.shutdown", "_terminate",
     "a shutdown while the manager thread checks its state can be missed: the thread "
     "waits for ever and the step's end joins it for ever", "OPM-6"),
    ("GpuOpManager._run", "_queue",
     "the manager thread can take an op while another is being queued, or miss the wake-up "
     "that follows", "OPM-3"),
]


@pytest.mark.parametrize("function,field,consequence,clause", [
    pytest.param(*row, marks=pytest.mark.clause(row[3]), id=f"{row[0].split('.')[-1]}")
    for row in OP_MANAGER_FIELDS])
def test_the_op_managers_state_changes_under_its_condition(rt, monkeypatch, managed, function,
                                                           field, consequence,
                                                           clause) -> None:
    """A managed step's threads queue ops and abort or shut the manager down while its
    thread takes ops from the queue: each of them must change the queue and the flags with
    the manager's condition held. Forced, not hoped for: the condition of every op manager
    made during the test is watched (fixtures/interleave.py), and each line of the function
    touching the field records whether the thread running it held the condition."""
    from fixtures.interleave import lines_run_in, self_holds, watch_new_locks
    module = getattr(rt, "gpu_op_manager", None)
    watched = watch_new_locks(monkeypatch, getattr(module, "GpuOpManager", None), "_cv",
                              "the op manager's condition")

    def fail(x):
        raise RuntimeError("planned")

    g = rt.Graph()
    g.add_node("op0", "PyFunc", device=GPU, func=lambda: np.float32(1))
    g.add_node("op1", "PyFunc", ["op0"], device=GPU, func=lambda x: x)
    # the failure on the CPU: the abort reaches the manager from a thread of the pool, whose
    # errors end the step (a failing abort on the manager thread would leave it hanging)
    g.add_node("bad", "PyFunc", ["op0"], device=CPU, func=fail)
    g.add_node("after", "PyFunc", ["bad", "op1"], device=GPU, func=lambda x, y: x)
    s = managed.ctx.new_session(g)

    def steps() -> None:
        managed.throttle(50, 5000)
        s.run(["op1"])                       # shut down at the step's end
        managed.throttle(50, 5000)
        with pytest.raises(rt.OpError):
            s.run(["after"])                 # aborted
        s.close()

    _, lines = lines_run_in(steps, function,
                            self_holds("_cv"))
    touching = [held for text, held in lines if field in text]
    if not watched or not touching:
        pytest.skip(f"the check follows the reference's design ({function} touching {field} "
                    f"of a condition _cv); this runtime ran no such line")
    assert all(touching), (
        f"{touching.count(False)} of {len(touching)} line(s) of {function} touching {field} "
        f"ran without the op manager's condition held: {consequence} [{clause}]")
