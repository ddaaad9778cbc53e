"""WORKER clauses: certify an implementation from outside, through its worker process.

Each test starts its own worker (``worker`` fixture, fixtures/worker.py), so one broken
behaviour never hides another. Times are read on the suite's monotonic clock; periods on
the worker's (``t_us``). Tolerances and bounds are the ones SPEC.md states.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections.abc import Callable

import pytest

from conformance.control_measurement import (CONTROL_ATTEMPTS, InvalidMeasurement,
                                             describe_attempts, steady)
from conformance.device_choice import DEVICE_VARIABLE, SIMULATED
from conformance.preconditions import relies_on
from fixtures.worker import MIB, TERMINATION_S, Record, WorkerProcess, median_period_us

pytestmark = [pytest.mark.capability("worker")]

WINDOW = 8                      # periods per median (WORKER-10)
SILENCE_S = 1.5                 # suspension watched this long after D (WORKER-11)
MIN_GAP_BOUND_S = 2.0           # G = max(2 s, 10 x B) (WORKER-8)
STATUS_POLL_S = 0.05            # statistics file read every 50 ms (WORKER-9)
STATUS_INTERVAL_S = 11.0        # 10 s dump interval counted in whole seconds (WORKER-9)
SHRINK_TARGET = MIB             # WORKER-8, WORKER-9
SUSPENDED_CHECK_S = 0.5         # WORKER-4: is the worker silent before SIGTERM?
BLOCKED_WRITE_S = 30.0          # WORKER-4: the unread pipe fills within this
UNREAD_TERMINATION_S = 3 * TERMINATION_S   # WORKER-4's 5 s, a margin for a loaded host
THROTTLE_STEP_MS = 100          # longer steps: throttling overheads weigh less (WORKER-10)
THROTTLE_LEVELS = (50, 25, 100)  # perfControl written in turn (WORKER-10)
CONTROL_BAND = (0.75, 1.25)      # P_100 / B: the control (WORKER-10)


def on_simulated_backend(rt, request: pytest.FixtureRequest) -> bool:
    """Whether the worker's devices are the runtime's simulated GPUs: it is the in-process
    runtime's own (no ``--worker-cmd``), which selects its backend by DEVICE-7, and the test
    runs with ``ANTMAN_DEVICE=sim`` (section 5), which the worker inherits."""
    return (not request.config.getoption("--worker-cmd")
            and callable(getattr(rt, "select_backend", None))
            and os.environ.get(DEVICE_VARIABLE) == SIMULATED)


def figure(rec: Record, name: str, clause: str) -> int:
    value = rec[name]
    assert value is not None, (f"step {rec['step']} reports {name}=null: the worker cannot "
                               f"observe it, so {clause} cannot hold [{clause}]")
    return value


def step_ms(w: WorkerProcess) -> float:
    return float(w.env["ANTMAN_WORKER_STEP_MS"])


def baseline(w: WorkerProcess) -> tuple[float, float]:
    """(B, G): the median unthrottled period in µs after 3 warm-up steps, and the gap bound."""
    w.steps(3)
    b = median_period_us(w.steps(WINDOW + 1))
    return b, max(MIN_GAP_BOUND_S, 10 * b / 1e6)


def until_in_force(w: WorkerProcess, t_write: float, check: Callable[[Record], None],
                   n: int = 5) -> list[Record]:
    """Step records up to the n-th that starts D after ``t_write``; ``check`` each of those."""
    start_after = t_write + w.detection_bound_s
    seen: list[Record] = []
    in_force = 0
    while in_force < n:
        rec = w.next_step()
        assert rec is not None, "[WORKER-2]"
        seen.append(rec)
        if rec.start_s >= start_after:
            check(rec)
            in_force += 1
    return seen


def expect_limit(w: WorkerProcess, t_write: float, requested: int, expected: int,
                 clause: str) -> Callable[[Record], None]:
    def check(rec: Record) -> None:
        limit = figure(rec, "device_limit", clause)
        assert limit == expected, (
            f"after maxDeviceMem={requested} for {w.bus_id!r} was written, step {rec['step']} "
            f"(started {rec.start_s - t_write:.2f} s after the write, D="
            f"{w.detection_bound_s:.2f} s) reports device_limit={limit}, expected {expected} "
            f"[{clause}]")
        in_use = figure(rec, "device_bytes_in_use", clause)
        assert in_use <= expected, (
            f"step {rec['step']} reports device_bytes_in_use={in_use} above the limit "
            f"{expected} in force [{clause}]")
    return check


def assert_single_change(records: list[Record], old: int, new: int, clause: str) -> None:
    limits = [r["device_limit"] for r in records]
    odd = sorted(set(limits) - {old, new}, key=repr)
    assert not odd, (f"device_limit took values {odd} while changing from {old} to {new} "
                     f"[{clause}]")
    first_new = limits.index(new)
    assert old not in limits[first_new:], (
        f"device_limit went back from {new} to {old} at step "
        f"{records[first_new + limits[first_new:].index(old)]['step']} [{clause}]")
    for rec in records[first_new:]:
        in_use = figure(rec, "device_bytes_in_use", clause)
        assert in_use <= new, (f"step {rec['step']} reports device_bytes_in_use={in_use} "
                               f"above the limit {new} in force [{clause}]")


def half_limit(w: WorkerProcess, divisor: int) -> int:
    value = w.initial_limit // divisor // MIB * MIB
    assert value > 0, (
        f"the device's memory_limit {w.initial_limit} is below {divisor} MiB [WORKER-2]")
    return value


def assert_exited_0(rc: int | None, cause: str, clause: str) -> None:
    """`rc` is wait_exit(TERMINATION_S)'s status of a worker stopped by `cause`."""
    assert rc == 0, (f"{cause}: worker "
                     f"{'still ran' if rc is None else f'exited with status {rc}'} "
                     f"after {TERMINATION_S:g} s, expected exit status 0 [{clause}]")


# -- WORKER-1..4: start, records, knobs, termination ------------------------------------
@pytest.mark.clause("WORKER-1", "WORKER-2")
def test_hello_then_one_record_per_step(worker, rt, request) -> None:
    w = worker()
    hello = w.hello
    assert hello is not None, "[WORKER-2]"
    buses = [d["pci_bus_id"] for d in hello["devices"]]
    assert len(buses) == len(set(buses)), f"hello lists a pci_bus_id twice: {buses} [WORKER-2]"
    model = hello["workload"].get("model")
    assert isinstance(model, str) and model.strip(), (
        f"the hello record's workload {hello['workload']} names no model (model, a non-empty "
        f"string) [WORKER-2]")
    if on_simulated_backend(rt, request):
        unmarked = [d["name"] for d in hello["devices"] if d.get("simulated") is not True]
        assert not unmarked, (
            f"the worker of {rt.NAME} ran with {DEVICE_VARIABLE}=sim, so its devices are "
            f"simulated, but its hello record does not mark {unmarked} \"simulated\": true "
            f"(the report would call them GPUs) [WORKER-2]")
    # The harness checks every record (JSON, members, types, numbering, clock) as it reads.
    steps = w.steps(10)
    assert [r["step"] for r in steps] == list(range(10)), "[WORKER-2]"


@pytest.mark.clause("WORKER-2")
def test_a_worker_without_vmem_reports_no_host_bytes(worker) -> None:
    """Started with ``TF_GPU_VMEM=false`` and without AntMan's control files, the job runs
    without VMem: its device has no host fallback, so every step record's
    ``host_bytes_in_use`` is 0, not null, from a worker that observes the figure (writes it
    as an integer) with the protocol's environment."""
    observed = worker().steps(1)[0]["host_bytes_in_use"]
    if observed is None:
        return                          # the worker cannot observe the host figure at all
    w = worker(TF_GPU_VMEM="false", GPU_CONFIG_FILE=None, GPU_STATUS_FILE=None)
    for rec in w.steps(3):
        assert rec["host_bytes_in_use"] == 0 and type(rec["host_bytes_in_use"]) is int, (
            f"step {rec['step']} of a worker without VMem reports host_bytes_in_use="
            f"{rec['host_bytes_in_use']!r} (with VMem it reported {observed}); its device has "
            f"no host fallback, so 0 [WORKER-2]")


@pytest.mark.clause("WORKER-3", "WORKER-4")
def test_max_steps_writes_exactly_n_steps_then_exits_0(worker) -> None:
    n = 3 + WINDOW + 1                  # 3 warm-up steps, then WINDOW periods
    w = worker(ANTMAN_WORKER_MAX_STEPS=n)
    steps = w.steps(n)
    period = median_period_us(steps[3:])
    floor_us = step_ms(w) / 4 * 1000
    assert period >= floor_us, (
        f"median unthrottled period {period:.0f} us of steps 3..{n - 1} is below "
        f"ANTMAN_WORKER_STEP_MS/4 = {floor_us:.0f} us [WORKER-3]")
    rc, extra = w.wait_exit(TERMINATION_S)
    assert not extra, (f"ANTMAN_WORKER_MAX_STEPS={n}: worker wrote {n + len(extra)} step "
                       f"records [WORKER-3]")
    assert_exited_0(rc, f"ANTMAN_WORKER_MAX_STEPS={n}, last step {steps[-1]['step']}",
                    "WORKER-3")


@pytest.mark.clause("WORKER-3")
@pytest.mark.parametrize("step_ms,max_steps", [pytest.param("nan", "three", id="nan"),
                                               pytest.param("0", "-1", id="0")])
def test_invalid_knobs_fall_back_to_their_defaults(worker, step_ms: str, max_steps: str) -> None:
    """Unparsable or out-of-range knobs (a poll interval of ``nan`` or ``0`` too): the worker
    still starts and trains (each knob at its default: ANTMAN_WORKER_MAX_STEPS 0 means it
    keeps training) and says so on stderr, naming each variable."""
    w = worker(ANTMAN_WORKER_MAX_STEPS=max_steps, ANTMAN_WORKER_SEED="-1",
               ANTMAN_WORKER_STEP_MS=step_ms, ANTMAN_WORKER_POLL_INTERVAL_S=step_ms)
    steps = w.steps(4)
    assert [r["step"] for r in steps] == [0, 1, 2, 3], \
        f"a worker with invalid knobs wrote steps {[r['step'] for r in steps]} [WORKER-3]"
    tail = w.stderr_tail(1 << 20)       # all of it: a runtime may log much at start
    missing = [k for k in ("ANTMAN_WORKER_MAX_STEPS", "ANTMAN_WORKER_SEED",
                           "ANTMAN_WORKER_STEP_MS", "ANTMAN_WORKER_POLL_INTERVAL_S")
               if k not in tail]
    assert not missing, (f"standard error names no invalid value of {missing}: "
                         f"{tail[-600:]!r} [WORKER-3]")


@pytest.mark.clause("WORKER-3")
@pytest.mark.parametrize("seed,max_steps", [pytest.param("0", "", id="seed-0"),
                                            pytest.param("", "0", id="max-steps-0")])
def test_valid_and_empty_knobs_write_no_line(worker, seed: str, max_steps: str) -> None:
    """``ANTMAN_WORKER_SEED=0`` is valid (the smallest seed), and so is
    ``ANTMAN_WORKER_MAX_STEPS=0`` (training until stopped, the value WORKER-1 starts every
    worker with); an empty value is unset (the default): none is reported, nor are the valid
    ``ANTMAN_WORKER_STEP_MS`` (50) and ``ANTMAN_WORKER_POLL_INTERVAL_S`` (0.1) every worker
    is started with (WORKER-1)."""
    w = worker(ANTMAN_WORKER_SEED=seed, ANTMAN_WORKER_MAX_STEPS=max_steps)
    steps = w.steps(3)
    assert [r["step"] for r in steps] == [0, 1, 2], (
        f"a worker with ANTMAN_WORKER_MAX_STEPS={max_steps!r} wrote steps "
        f"{[r['step'] for r in steps]} [WORKER-3]")
    tail = w.stderr_tail(1 << 20)
    named = [k for k in ("ANTMAN_WORKER_SEED", "ANTMAN_WORKER_MAX_STEPS",
                         "ANTMAN_WORKER_STEP_MS", "ANTMAN_WORKER_POLL_INTERVAL_S") if k in tail]
    assert not named, (f"standard error names {named}, set to SEED={seed!r} and "
                       f"MAX_STEPS={max_steps!r} (0 valid, empty unset), 50 and 0.1 (valid): "
                       f"{tail[-600:]!r} [WORKER-3]")


@pytest.mark.clause("WORKER-3")
@pytest.mark.parametrize("knobs,in_effect", [
    pytest.param({"ANTMAN_WORKER_STEP_MS": "37.5", "ANTMAN_WORKER_MAX_STEPS": "1000",
                  "ANTMAN_WORKER_SEED": "7"}, (37.5, 1000, 7), id="given"),
    pytest.param({"ANTMAN_WORKER_STEP_MS": "nan", "ANTMAN_WORKER_MAX_STEPS": "-1",
                  "ANTMAN_WORKER_SEED": "-1"}, (50, 0, 0), id="invalid"),
    pytest.param({"ANTMAN_WORKER_STEP_MS": " ", "ANTMAN_WORKER_MAX_STEPS": "",
                  "ANTMAN_WORKER_SEED": " "}, (50, 0, 0), id="empty"),
    pytest.param({"ANTMAN_WORKER_STEP_MS": None, "ANTMAN_WORKER_MAX_STEPS": None,
                  "ANTMAN_WORKER_SEED": None, "ANTMAN_WORKER_POLL_INTERVAL_S": None},
                 (50, 0, 0), id="unset")])
def test_hello_states_the_knobs_in_effect(worker, knobs: dict[str, str | None],
                                          in_effect: tuple[float, int, int]) -> None:
    """The hello record's ``workload`` states ``step_ms``, ``max_steps`` and ``seed`` as
    given, or their defaults (50, 0, 0) for invalid, empty and unset values (None: the
    variable is not in the worker's environment); then the worker trains with them."""
    w = worker(**knobs)
    assert w.hello is not None, "[WORKER-2]"
    workload = w.hello["workload"]
    wrong = []
    for name, expected in zip(("step_ms", "max_steps", "seed"), in_effect):
        kinds = (int, float) if name == "step_ms" else (int,)
        value = workload.get(name)
        if isinstance(value, bool) or not isinstance(value, kinds) or value != expected:
            wrong.append(f"{name}={value!r} (in effect: {expected!r})")
    assert not wrong, (f"started with {knobs}, the hello record's workload states "
                       f"{', '.join(wrong)} [WORKER-3]")
    steps = w.steps(2)
    assert [r["step"] for r in steps] == [0, 1], \
        f"started with {knobs}, the worker wrote steps {steps} [WORKER-3]"


@pytest.mark.clause("WORKER-3")
@pytest.mark.parametrize("value", ["3600000.5", "3600001"])
def test_a_step_ms_beyond_an_hour_falls_back_to_the_default(worker, value: str) -> None:
    """``ANTMAN_WORKER_STEP_MS`` above 3 600 000 (a step of an hour) is invalid: the hello
    record states the default 50, the worker trains with it, and one line on standard error
    names the variable. (3 600 000 itself is valid; no test waits for a step of an hour.)"""
    w = worker(ANTMAN_WORKER_STEP_MS=value)
    got = w.hello["workload"].get("step_ms")
    assert got == 50, (f"started with ANTMAN_WORKER_STEP_MS={value}, above an hour "
                       f"(3600000 ms), the hello states step_ms {got!r}, not the default 50 "
                       f"[WORKER-3]")
    steps = w.steps(2)
    assert [r["step"] for r in steps] == [0, 1], \
        f"started with ANTMAN_WORKER_STEP_MS={value}, the worker wrote steps {steps} [WORKER-3]"
    lines = [line for line in w.stderr_tail(1 << 20).splitlines()
             if "ANTMAN_WORKER_STEP_MS" in line]
    assert len(lines) == 1, (f"started with ANTMAN_WORKER_STEP_MS={value}, invalid, standard "
                             f"error has {len(lines)} lines naming the variable, not one: "
                             f"{lines[:3]!r} [WORKER-3]")


@pytest.mark.clause("WORKER-2", "WORKER-3")
def test_poll_interval_knob_beyond_60_s_is_not_in_force(worker) -> None:
    """``ANTMAN_WORKER_POLL_INTERVAL_S=60.5``: whether the worker refuses the value (WORKER-3
    lets it bound the knob above) or its implementation does, the interval in force that the
    hello record states is at most 60 s (WORKER-2), and the worker trains."""
    w = worker(ANTMAN_WORKER_POLL_INTERVAL_S="60.5")
    hello = w.hello
    assert hello is not None, "[WORKER-2]"
    poll = hello["poll_interval_s"]
    assert 0 < poll <= 60, (f"with ANTMAN_WORKER_POLL_INTERVAL_S=60.5 the hello record states "
                            f"poll_interval_s {poll!r}, beyond 60 s [WORKER-2]")
    steps = w.steps(2)
    assert [r["step"] for r in steps] == [0, 1], \
        f"with ANTMAN_WORKER_POLL_INTERVAL_S=60.5 the worker wrote steps {steps} [WORKER-3]"


@pytest.mark.clause("WORKER-3")
def test_poll_interval_knob_up_to_60_s_is_valid_and_stated_as_requested(worker) -> None:
    """``ANTMAN_WORKER_POLL_INTERVAL_S=60`` (the most WORKER-2 allows) and ``0.25`` are
    valid: no line names the variable. An implementation whose interval is fixed states the
    same ``poll_interval_s`` for both; one that takes the requested interval states each
    exactly as requested (60 and 0.25, not a value a microsecond off)."""
    stated = {}
    for value in ("60", "0.25"):
        w = worker(ANTMAN_WORKER_POLL_INTERVAL_S=value)
        assert w.hello is not None, "[WORKER-3]"
        stated[value] = w.hello["poll_interval_s"]
        steps = w.steps(1)
        assert [r["step"] for r in steps] == [0], (
            f"with ANTMAN_WORKER_POLL_INTERVAL_S={value} the worker wrote steps {steps} "
            f"[WORKER-3]")
        tail = w.stderr_tail(1 << 20)
        assert "ANTMAN_WORKER_POLL_INTERVAL_S" not in tail, (
            f"ANTMAN_WORKER_POLL_INTERVAL_S={value} is valid (positive, finite, at most "
            f"60 s), yet standard error names it: {tail[-600:]!r} [WORKER-3]")
        w.close()
    if stated["60"] != stated["0.25"]:
        wrong = {k: v for k, v in stated.items() if v != float(k)}
        assert not wrong, (
            f"the worker takes the requested poll interval (it states {stated['60']!r} for "
            f"60 and {stated['0.25']!r} for 0.25), so poll_interval_s must be the value "
            f"requested; it states {wrong} [WORKER-3]")


@pytest.mark.clause("WORKER-4")
def test_a_worker_whose_reader_went_away_exits_with_a_failure_status(worker) -> None:
    w = worker()
    w.steps(3)
    w.close_stdout()
    rc = w.exit_status(TERMINATION_S)
    assert rc is not None and rc != 0, (
        f"after the suite closed the read end of its standard output, the worker "
        f"{'still ran' if rc is None else 'exited with status 0'} {TERMINATION_S:g} s later; "
        f"expected an exit with a status other than 0 (its records are lost) [WORKER-4]")


@pytest.mark.clause("WORKER-4")
def test_a_worker_whose_reader_went_away_says_why_on_stderr(worker) -> None:
    """A worker that exits with a status (not killed by SIGPIPE) after its reader went away
    writes on standard error, after the read end closed, a line saying why."""
    w = worker()
    w.steps(3)
    before = w.stderr_path.stat().st_size
    w.close_stdout()
    rc = w.exit_status(TERMINATION_S)
    if rc is None or rc in (-signal.SIGPIPE, 128 + signal.SIGPIPE):
        return                  # still running (the exit-status test fails it) or no status
    added = w.stderr_path.read_bytes()[before:]
    assert added.strip(), (
        f"after the suite closed the read end of its standard output, the worker exited "
        f"with status {rc} and wrote nothing more on standard error; expected a line saying "
        f"why it stopped [WORKER-4]")


@pytest.mark.clause("WORKER-4")
def test_sigterm_stops_a_worker_blocked_writing_a_record_with_status_0(worker) -> None:
    """The suite stops reading the worker's standard output, keeping the pipe open, until the
    worker is blocked writing a record; SIGTERM then stops it with status 0, and the record
    it cannot write is lost with a line on standard error saying so."""
    w = worker()
    w.steps(3)
    before = w.stderr_path.stat().st_size
    if not w.stop_reading(BLOCKED_WRITE_S):
        pytest.skip("no thread of the worker was seen blocked writing its standard output "
                    "(/proc does not tell on this host)")
    w.request_stop("sigterm")
    rc = w.exit_status(UNREAD_TERMINATION_S)
    assert rc == 0, (
        f"SIGTERM while the worker was blocked writing a record to a standard output no one "
        f"read: worker {'still ran' if rc is None else f'exited with status {rc}'} "
        f"{UNREAD_TERMINATION_S:g} s later, expected exit status 0 [WORKER-4]")
    added = w.stderr_path.read_bytes()[before:]
    assert added.strip(), (
        "SIGTERM while the worker was blocked writing a record to a standard output no one "
        "read: it exited and wrote nothing on standard error; expected a line saying that "
        "the record was lost [WORKER-4]")


@pytest.mark.clause("WORKER-4")
def test_stdin_eof_stops_the_worker_with_status_0(worker) -> None:
    w = worker()
    w.steps(3)
    w.request_stop("stdin")
    rc, _ = w.wait_exit(TERMINATION_S)
    assert_exited_0(rc, "standard input closed", "WORKER-4")


@pytest.mark.clause("WORKER-4")
def test_stdin_eof_during_a_step_writes_that_steps_record(worker) -> None:
    """Standard input closed 200 ms into a step of about 800 ms: the step runs to its end,
    its record is written, and no step starts after it."""
    w = worker(ANTMAN_WORKER_STEP_MS=800)
    last = w.steps(2)[-1]["step"]
    time.sleep(0.2)                     # the next step is under way: it began on the record
    w.request_stop("stdin")
    rc, extra = w.wait_exit(TERMINATION_S)
    assert [r["step"] for r in extra] == [last + 1], (
        f"standard input closed during step {last + 1}: the worker then wrote the step "
        f"records {[r['step'] for r in extra]}; expected that step's record alone (the step "
        f"runs to its end, and none starts after it) [WORKER-4]")
    assert_exited_0(rc, "standard input closed during a step", "WORKER-4")


@pytest.mark.clause("WORKER-4")
def test_sigterm_stops_a_suspended_worker_with_status_0(worker) -> None:
    w = worker()
    w.steps(3)
    t = w.rewrite_config(w.config(perf=0))
    w.expect_silence(t + w.detection_bound_s)
    late = w.expect_silence(time.monotonic() + SUSPENDED_CHECK_S)   # only for the message
    w.request_stop("sigterm")
    rc, extra = w.wait_exit(TERMINATION_S)
    state = (f"not suspended: {len(late)} step records after perfControl=0 took effect, "
             f"WORKER-11" if late else "suspended")
    assert_exited_0(rc, f"SIGTERM while perfControl=0 ({state})", "WORKER-4")
    if not late:
        assert not extra, (
            f"SIGTERM while perfControl=0 suspended the step: the worker then wrote the step "
            f"records {[r['step'] for r in extra]}; the suspended step, cut short by the "
            f"shutdown, writes none, and none starts after it [WORKER-4]")


# -- WORKER-5..8: memory limits ------------------------------------------------------------
@pytest.mark.clause("WORKER-5", "WORKER-6")
def test_memory_limit_in_force_from_a_step_boundary(worker) -> None:
    w = worker()
    l0, l1 = w.initial_limit, half_limit(w, 2)
    for rec in w.steps(3):
        assert figure(rec, "device_limit", "WORKER-6") == l0, (
            f"before any limit was written step {rec['step']} reports device_limit="
            f"{rec['device_limit']}, expected the hello memory_limit {l0} [WORKER-6]")
    for old, new in ((l0, l1), (l1, l0)):
        t = w.rewrite_config(w.config(limit=new))
        seen = until_in_force(w, t, expect_limit(w, t, new, new, "WORKER-6"))
        assert_single_change(seen, old, new, "WORKER-6")


@pytest.mark.clause("WORKER-7")
def test_limit_above_the_initial_limit_is_clamped(worker) -> None:
    w = worker()
    l0, l1 = w.initial_limit, half_limit(w, 2)
    t = w.rewrite_config(w.config(limit=l1))
    until_in_force(w, t, expect_limit(w, t, l1, l1, "WORKER-7"), n=1)
    t = w.rewrite_config(w.config(limit=2 * l0))
    until_in_force(w, t, expect_limit(w, t, 2 * l0, l0, "WORKER-7"))


@pytest.mark.clause("WORKER-8")
def test_shrink_below_demand_keeps_the_job_running(worker, report_artifacts) -> None:
    w = worker()
    l0 = w.initial_limit
    _, gap = baseline(w)

    def check(rec: Record) -> None:
        limit = figure(rec, "device_limit", "WORKER-8")
        in_use = figure(rec, "device_bytes_in_use", "WORKER-8")
        assert SHRINK_TARGET <= limit < l0, (
            f"after maxDeviceMem={SHRINK_TARGET} step {rec['step']} reports device_limit="
            f"{limit}, expected {SHRINK_TARGET} <= limit < {l0} [WORKER-8]")
        assert in_use <= limit, (f"step {rec['step']} reports device_bytes_in_use={in_use} "
                                 f"above device_limit={limit} [WORKER-8]")

    t = w.rewrite_config(w.config(limit=SHRINK_TARGET))
    last = w.records[-1].read_s
    try:
        for rec in until_in_force(w, t, check, n=20):
            assert rec.read_s - last <= gap, (
                f"after maxDeviceMem={SHRINK_TARGET}: no step record for "
                f"{rec.read_s - last:.2f} s before step {rec['step']}, more than {gap:.2f} s "
                f"[WORKER-8]")
            last = rec.read_s
    finally:
        report_artifacts.add("e2e_timeline", w.timeline())


# -- WORKER-9: statistics ------------------------------------------------------------------
@pytest.mark.clause("WORKER-9")
def test_statistics_file_is_valid_and_updated(worker) -> None:
    w = worker()
    steps: list[Record] = [w.next_step()]
    host_limit = int(w.env["TF_CUDA_HOST_MEM_LIMIT_IN_MB"]) * MIB

    def poll(until: float, done: Callable[[bytes, dict], bool]) -> tuple[bytes, dict] | None:
        while time.monotonic() < until:
            tick = min(until, time.monotonic() + STATUS_POLL_S)
            while (rec := w.next_step(until=tick)) is not None:
                steps.append(rec)
            got = w.read_status()
            if got is not None and done(*got):
                return got
        return None

    def check_entry(doc: dict, which: str) -> None:
        usage = doc.get("gpuUsageInfo") or {}
        assert w.bus_id in usage, (f"{which} statistics version has gpuUsageInfo keys "
                                   f"{sorted(usage)}, expected {w.bus_id!r} [WORKER-9]")
        got = usage[w.bus_id].get("hostMemPoolSize")
        assert got == host_limit, (
            f"{which} statistics version: hostMemPoolSize={got}, expected "
            f"TF_CUDA_HOST_MEM_LIMIT_IN_MB x 2^20 = {host_limit} [WORKER-9]")

    d = w.detection_bound_s
    first = poll(steps[0].read_s + d, lambda data, doc: True)
    assert first is not None, (f"GPU_STATUS_FILE {w.status_path} absent {d:.2f} s after the "
                               f"first step record (the implementation never wrote its "
                               f"statistics file) [WORKER-9]")
    first_read = time.monotonic()
    check_entry(first[1], "first")
    w.rewrite_config(w.config(limit=SHRINK_TARGET))
    second = poll(first_read + STATUS_INTERVAL_S + d, lambda data, doc: doc != first[1])
    assert second is not None, (
        f"GPU_STATUS_FILE unchanged {STATUS_INTERVAL_S + d:.2f} s after its first version, "
        f"although maxDeviceMem={SHRINK_TARGET} was written [WORKER-9]:\n"
        f"{first[0].decode(errors='replace')[:800]}")
    second_read = time.monotonic()
    check_entry(second[1], "updated")
    recent = [r["duration_us"] for r in steps if r.read_s >= second_read - 10]
    assert recent, "no step record in the 10 s before the update [WORKER-9]"
    median = statistics.median(recent)
    batch = second[1].get("miniBatchDuration")
    assert isinstance(batch, (int, float)) and median / 10 <= batch <= median * 10, (
        f"miniBatchDuration={batch} us, expected within a factor of 10 of the median step "
        f"duration_us {median:.0f} [WORKER-9]")


# -- WORKER-10, 11: perfControl ------------------------------------------------------------
def throttle_bands() -> dict[int, tuple[float, float]]:
    """perfControl -> the band of P_p / B (WORKER-10); 100 is the control."""
    return {p: CONTROL_BAND if p == 100 else (0.75 * 100 / p, 1.5 * 100 / p)
            for p in THROTTLE_LEVELS}


def wrong_against_both_controls(ratios: dict[int, float],
                                bands: dict[int, tuple[float, float]]) -> list[int]:
    """The throttled levels outside their band on the same side whether B or the final
    perfControl 100 period is taken as the control: their verdict does not depend on which
    control the machine's noise left right, so a drifted control is no reason to withhold
    it (WORKER-10)."""
    def side(r: float, band: tuple[float, float]) -> int:
        return -1 if r < band[0] else (1 if r > band[1] else 0)
    return [p for p, r in ratios.items()
            if p < 100 and side(r, bands[p]) != 0
            and side(r, bands[p]) == side(r / ratios[100], bands[p])]


@pytest.mark.clause("WORKER-10")
def test_perf_control_throttles_the_step_period(worker, report_artifacts) -> None:
    """B is taken once the unthrottled period is steady; perfControl 100 at the end is the
    control: out of its band, the whole measurement is taken again, and a control that
    stays out makes the measurement invalid (ERROR), not the implementation wrong
    (conformance/control_measurement.py)."""
    w = worker(ANTMAN_WORKER_STEP_MS=THROTTLE_STEP_MS)
    w.steps(3)                                                  # warm-up (WORKER-10)
    bands = throttle_bands()
    low, high = bands[100]
    attempts: list[str] = []
    ratios: dict[int, float] = {}
    b = 0.0
    try:
        for attempt in range(CONTROL_ATTEMPTS):
            b = steady(lambda: median_period_us(w.steps(WINDOW + 1)),
                       "the unthrottled step period B", "WORKER-10")
            if attempt == 0:
                floor_us = step_ms(w) / 4 * 1000
                assert b >= floor_us, (
                    f"median unthrottled period {b:.0f} us is below ANTMAN_WORKER_STEP_MS/4 = "
                    f"{floor_us:.0f} us: steps too short to measure throttling [WORKER-3]")
            ratios = {}                       # every level is measured before any assertion
            for perf in THROTTLE_LEVELS:
                t = w.rewrite_config(w.config(perf=perf))
                window = w.steps_starting_after(t + w.detection_bound_s, WINDOW + 1)
                ratios[perf] = median_period_us(window) / b
            attempts.append(f"B={b:.0f} us, " + ", ".join(
                f"P_{p}/B={r:.3f}" for p, r in ratios.items()))
            if low <= ratios[100] <= high:
                break
        else:
            if not wrong_against_both_controls(ratios, bands):
                raise InvalidMeasurement(
                    f"invalid measurement: the control P_100/B stayed outside [{low:g}, "
                    f"{high:g}] in {CONTROL_ATTEMPTS} measurements "
                    f"({describe_attempts(attempts)}): the unthrottled period moved while "
                    f"throttling was measured, so the throttled periods cannot be judged "
                    f"[WORKER-10]")
    finally:
        report_artifacts.add("throttle_accuracy", {
            "target_percent": list(ratios),
            "measured_percent": [round(100 / r, 2) for r in ratios.values()]})
        report_artifacts.add("e2e_timeline", w.timeline())
    drifted = not low <= ratios[100] <= high
    outside = (wrong_against_both_controls(ratios, bands) if drifted else
               [p for p, r in ratios.items() if not bands[p][0] <= r <= bands[p][1]])
    # Not even perfControl 25 stretched the period to the lower bound of perfControl 50.
    ignored = all(r < bands[50][0] for p, r in ratios.items() if p < 100)
    assert len(outside) == 0, (
        f"median period / unthrottled median B={b:.0f} us: "
        + ", ".join(f"perfControl={p}: {r:.3f} (expected [{bands[p][0]:g}, {bands[p][1]:g}]"
                    f"{'' if p not in outside else ', OUTSIDE'})" for p, r in ratios.items())
        + ("; the step period ignores perfControl: the implementation does not throttle"
           if ignored else "")
        + (f"; the control P_100/B stayed outside [{low:g}, {high:g}], yet against P_100 "
           f"as the control too: " + ", ".join(
               f"perfControl={p}: {ratios[p] / ratios[100]:.3f}" for p in ratios if p < 100)
           if drifted else "")
        + (f"; earlier measurements: {describe_attempts(attempts[:-1])}"
           if len(attempts) > 1 else "") + " [WORKER-10]")


@pytest.mark.clause("WORKER-11")
def test_perf_control_zero_suspends_and_nonzero_resumes(worker) -> None:
    relies_on("RM-4", "RM-12")       # the worker reads perfControl 0 and suspends its step
    w = worker()
    _, gap = baseline(w)
    d = w.detection_bound_s
    t = w.rewrite_config(w.config(perf=0))
    late = [r for r in w.expect_silence(t + d + SILENCE_S) if r.read_s > t + d]
    assert len(late) == 0, (
        f"perfControl=0: {len(late)} step records read more than D={d:.2f} s after the write, "
        f"first step {late[0]['step']} at +{late[0].read_s - t:.2f} s (training went on: the "
        f"implementation did not suspend) [WORKER-11]")
    t2 = w.rewrite_config(w.config(perf=100))
    first = w.wait_for(lambda r: True, t2 + d - time.monotonic(),
                       f"a step after perfControl=100 followed perfControl=0", "WORKER-11")
    last = first.read_s
    for _ in range(5):
        rec = w.next_step(until=last + gap)
        assert rec is not None, (f"after resuming, no step record for {gap:.2f} s "
                                 f"[WORKER-11]")
        last = rec.read_s


# -- WORKER-12: bad config -----------------------------------------------------------------
def bad_versions(bus: str) -> list[bytes]:
    def js(obj: object) -> bytes:
        return json.dumps(obj).encode()
    return [
        ('{"gpuConfigInfo": {"%s": {"maxDeviceMem": 10' % bus).encode(),
        b"",
        b"[]",
        b"5",
        js({"gpuConfigInfo": bus}),
        js({"gpuConfigInfo": {bus: 268435456}}),
        js({"gpuConfigInfo": {bus: {"maxDeviceMem": "268435456"}}}),
        js({"gpuConfigInfo": {bus: {"maxDeviceMem": -268435456}}}),
        js({"gpuConfigInfo": {bus: {"maxDeviceMem": 268435456.5}}}),
        js({"perfControl": "0"}),
        js({"perfControl": 4294967296}),
        js({"perfControl": -1}),
        b"\xff\xfe{}",
    ]


@pytest.mark.clause("WORKER-12")
def test_bad_config_keeps_the_job_running_with_its_last_good_state(worker) -> None:
    w = worker()
    _, gap = baseline(w)
    l1, l2 = half_limit(w, 2), half_limit(w, 4)
    t = w.rewrite_config(w.config(limit=l1))
    until_in_force(w, t, expect_limit(w, t, l1, l1, "WORKER-12"), n=1)
    spacing = 2 * w.poll_interval_s + 0.1
    written: list[bytes] = []
    seen: list[Record] = []
    for version in bad_versions(w.bus_id):
        written.append(version)
        t = w.rewrite_config(version)
        seen += w.collect_until(t + spacing, max_gap_s=gap, clause="WORKER-12",
                                context=lambda: f" after writing {written[-1][:80]!r}")
    seen += w.collect_until(t + w.detection_bound_s, max_gap_s=gap, clause="WORKER-12",
                            context=lambda: f" after writing {written[-1][:80]!r}")
    for rec in seen:
        limit = figure(rec, "device_limit", "WORKER-12")
        assert limit == l1, (f"after bad config versions {[v[:40] for v in written]}, step "
                             f"{rec['step']} reports device_limit={limit}, expected the last "
                             f"good {l1} [WORKER-12]")
    t = w.rewrite_config(w.config(limit=l2))
    until_in_force(w, t, expect_limit(w, t, l2, l2, "WORKER-12"), n=1)
