"""REG clauses: the SessionRunActionRegistry (groupings, phases, errors, names, concurrency).

The session-level ordering (pre actions before the step, post actions only after a
successful step) is tested with the session (SESS clauses).
"""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.checks import names_identifier
from conformance.control_helpers import (MiB, bus_id, control_env, gpus,  # noqa: F401
                                         joined, pool_bytes, bytes_limit, run_in_thread,
                                         runtimes)
from conformance.preconditions import precondition_holds

pytestmark = pytest.mark.capability("session_run_actions")


class Recorder:
    """An action that appends ``label`` to a shared log; optionally raises."""

    def __init__(self, rt, log: list, label, *, error: BaseException | None = None,
                 hook=None) -> None:
        self.name = f"rec-{label}"
        self.log, self.label, self.error, self.hook = log, label, error, hook

    def run_action(self, options) -> None:
        self.log.append(self.label)
        if self.hook is not None:
            self.hook(options)
        if self.error is not None:
            raise self.error


def options(rt, **kw):
    return rt.SessionRunActionOptions(**kw)


@pytest.mark.clause("REG-1")
def test_groupings_are_pre_0_and_post_1(rt) -> None:
    assert int(rt.Grouping.PRE_SESSION_RUN) == 0, "Grouping.PRE_SESSION_RUN != 0 [REG-1]"
    assert int(rt.Grouping.POST_SESSION_RUN) == 1, "Grouping.POST_SESSION_RUN != 1 [REG-1]"
    assert len(list(rt.Grouping)) == 2, f"Grouping has {list(rt.Grouping)}, expected 2 [REG-1]"
    reg, log = rt.SessionRunActionRegistry(), []
    reg.register(1, 0, Recorder(rt, log, "int-post"))
    reg.run_grouping(rt.Grouping.POST_SESSION_RUN, options(rt))
    reg.run_grouping(rt.Grouping.PRE_SESSION_RUN, options(rt))
    assert log == ["int-post"], f"register(1, ...) ran as {log}, expected POST only [REG-1]"


@pytest.mark.clause("REG-1")
@pytest.mark.parametrize("bad", [2, -1, "POST_SESSION_RUN", None])
def test_unknown_grouping_is_a_value_error(rt, bad) -> None:
    reg = rt.SessionRunActionRegistry()
    for call, args in (("register", (bad, 0, Recorder(rt, [], 0))),
                       ("run_grouping", (bad, options(rt))),
                       ("get_action", (bad, 0, "x")),
                       ("actions", (bad,))):
        with pytest.raises(ValueError):
            getattr(reg, call)(*args)
            pytest.fail(f"{call}({bad!r}, ...) did not raise ValueError [REG-1]")
    assert reg.actions(0) == [] and reg.actions(1) == [], \
        f"a rejected register({bad!r}, ...) left a registration [REG-1]"


@pytest.mark.clause("REG-1")
@pytest.mark.parametrize("bad", [True, False, 1.0, 0.0, 0j])
def test_values_merely_equal_to_a_grouping_are_value_errors(rt, bad) -> None:
    """True == 1 and 1.0 == 1, but neither is a Grouping nor an int."""
    reg, log = rt.SessionRunActionRegistry(), []
    reg.register(0, 0, Recorder(rt, log, "pre"))
    reg.register(1, 0, Recorder(rt, log, "post"))
    for call, args in (("register", (bad, 0, Recorder(rt, log, "x"))),
                       ("run_grouping", (bad, options(rt))),
                       ("get_action", (bad, 0, "rec-pre")),
                       ("actions", (bad,))):
        with pytest.raises(ValueError):
            getattr(reg, call)(*args)
            pytest.fail(f"{call}({bad!r}, ...) did not raise ValueError [REG-1]")
    assert log == [] and len(reg.actions(0)) == len(reg.actions(1)) == 1, \
        f"a call with grouping {bad!r} ran {log} or registered [REG-1]"


@pytest.mark.clause("REG-2")
@given(phases=st.lists(st.integers(min_value=-4, max_value=4), max_size=12))
def test_phases_ascending_then_registration_order(rt, phases) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    actions = []
    for i, p in enumerate(phases):
        a = Recorder(rt, log, i)
        actions.append(a)
        reg.register(rt.Grouping.POST_SESSION_RUN, p, a)
    expected = [i for i, _ in sorted(enumerate(phases), key=lambda ip: ip[1])]  # stable
    reg.run_grouping(rt.Grouping.POST_SESSION_RUN, options(rt))
    assert log == expected, (f"run_grouping(POST) ran {log} for phases {phases}, expected "
                             f"{expected} [REG-2]")
    got = [(p, actions.index(a)) for p, a in reg.actions(rt.Grouping.POST_SESSION_RUN)]
    assert got == [(phases[i], i) for i in expected], \
        f"actions(POST) = {got} for phases {phases} [REG-2]"
    reg.run_grouping(rt.Grouping.PRE_SESSION_RUN, options(rt))
    assert len(log) == len(phases), "run_grouping(PRE) ran POST actions [REG-2]"


@pytest.mark.clause("REG-2")
def test_empty_grouping_runs_nothing(rt) -> None:
    reg = rt.SessionRunActionRegistry()
    assert reg.run_grouping(rt.Grouping.PRE_SESSION_RUN, options(rt)) is None, "[REG-2]"
    assert reg.actions(rt.Grouping.PRE_SESSION_RUN) == [], "[REG-2]"


@pytest.mark.clause("REG-2", "REG-9")
def test_actions_receive_the_options_object(rt) -> None:
    reg, seen = rt.SessionRunActionRegistry(), []
    reg.register(0, 0, Recorder(rt, [], 0, hook=seen.append))
    opts = options(rt, graph_id=42, sess_duration_us=1234)
    reg.run_grouping(0, opts)
    assert seen == [opts], f"run_action got {seen}, expected the options passed [REG-2]"


@pytest.mark.clause("REG-2")
def test_actions_returns_a_new_list(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    a, b = Recorder(rt, log, "a"), Recorder(rt, log, "b")
    reg.register(1, 0, a)
    got = reg.actions(1)
    got.append((1, b))
    got[0] = (0, b)
    assert reg.actions(1) == [(0, a)], \
        f"changing the list actions() returned changed the registry: {reg.actions(1)} [REG-2]"
    assert reg.actions(1) is not reg.actions(1), "actions() returned the same list twice [REG-2]"
    reg.run_grouping(1, options(rt))
    assert log == ["a"], f"the run after the list was changed ran {log} [REG-2]"


@pytest.mark.clause("REG-3")
def test_first_error_stops_the_grouping_and_propagates(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    boom = RuntimeError("phase 2 failed")
    reg.register(1, 1, Recorder(rt, log, "p1"))
    reg.register(1, 2, Recorder(rt, log, "p2-fails", error=boom))
    reg.register(1, 2, Recorder(rt, log, "p2-after"))
    reg.register(1, 3, Recorder(rt, log, "p3"))
    with pytest.raises(RuntimeError) as info:
        reg.run_grouping(1, options(rt))
    assert info.value is boom, f"run_grouping raised {info.value!r}, not the action's error [REG-3]"
    # whatever the phase order (REG-2), nothing runs after the failing action: not even the
    # action registered after it in its own phase
    assert log[-1:] == ["p2-fails"] and "p2-after" not in log, (
        f"after an error the grouping ran {log}: it must stop at the failing action [REG-3]")
    assert log == ["p1", "p2-fails"], f"the grouping ran {log} in this order [REG-2]"


@pytest.mark.clause("REG-4")
def test_get_action_exact_match(rt) -> None:
    reg = rt.SessionRunActionRegistry()
    first, second, other = Recorder(rt, [], 1), Recorder(rt, [], 2), Recorder(rt, [], 3)
    first.name = second.name = "Act"
    other.name = "Other"
    reg.register(1, 2, first)
    reg.register(1, 2, second)
    reg.register(1, 3, other)
    assert reg.get_action(1, 2, "Act") is first, "get_action(POST, 2, 'Act') is not the first [REG-4]"
    for args in ((1, 3, "Act"), (0, 2, "Act"), (1, 2, "act"), (1, 2, "Ac"), (1, 2, "")):
        assert reg.get_action(*args) is None, f"get_action{args} matched [REG-4]"
    assert reg.get_action(1, 3, "Other") is other, "[REG-4]"


@pytest.mark.clause("REG-4")
def test_get_action_skips_an_action_without_a_name(rt) -> None:
    """An action with ``run_action`` and no ``name`` attribute has no name: no name, the
    empty one included, finds it; a named action after it at the same phase is found."""
    class Nameless:
        def run_action(self, options) -> None:
            pass

    reg = rt.SessionRunActionRegistry()
    nameless, named = Nameless(), Recorder(rt, [], 1)
    named.name = ""
    reg.register(1, 2, nameless)
    assert reg.get_action(1, 2, "") is None, \
        "get_action(POST, 2, '') found an action that has no name attribute [REG-4]"
    reg.register(1, 2, named)
    assert reg.get_action(1, 2, "") is named, \
        "get_action(POST, 2, '') did not find the action named '' [REG-4]"


@pytest.mark.clause("REG-5")
def test_duplicates_run_once_per_registration(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    a = Recorder(rt, log, "a")
    reg.register(0, 0, a)
    reg.register(0, 0, a)
    reg.register(0, -1, a)
    reg.run_grouping(0, options(rt))
    assert log == ["a", "a", "a"], f"an action registered 3 times ran {len(log)} times [REG-5]"


@pytest.mark.clause("REG-4")
@pytest.mark.parametrize("other", ["Act ", " Act", "Act\u00a0", "ACT", "\uff21ct", "A\u0063t\u200b",
                                   "Act\n"])
def test_get_action_takes_no_other_spelling(rt, other) -> None:
    reg = rt.SessionRunActionRegistry()
    act = Recorder(rt, [], 1)
    act.name = "Act"
    reg.register(1, 2, act)
    assert reg.get_action(1, 2, other) is None, \
        f"get_action(POST, 2, {other!r}) matched the action named 'Act' [REG-4]"
    spelled = Recorder(rt, [], 2)
    spelled.name = other
    reg.register(1, 2, spelled)
    assert reg.get_action(1, 2, "Act") is act and reg.get_action(1, 2, other) is spelled, \
        f"with 'Act' and {other!r} registered, get_action mixed them up [REG-4]"


@pytest.mark.clause("REG-5")
def test_unregister_is_by_identity_not_equality(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []

    class EqualsEverything(Recorder):
        def __eq__(self, other) -> bool:
            return True

        __hash__ = object.__hash__

    greedy, target = EqualsEverything(rt, log, "greedy"), Recorder(rt, log, "target")
    reg.register(1, 0, greedy)
    reg.register(1, 0, target)
    assert reg.unregister(1, 0, target) is True, "unregister(target) returned False [REG-5]"
    reg.run_grouping(1, options(rt))
    assert log == ["greedy"], (f"unregister(target) with an action before it that == every "
                               f"object: the run was {log}, expected ['greedy'] [REG-5]")
    assert reg.unregister(1, 0, Recorder(rt, log, "stranger")) is False, \
        "unregister of an object never registered returned True (compared with ==) [REG-5]"
    assert [a for _, a in reg.actions(1)] == [greedy], \
        f"registrations left: {reg.actions(1)}, expected the greedy action only [REG-5]"


@pytest.mark.clause("REG-5")
@pytest.mark.parametrize("phase", [1.0, True, "1", None])
def test_non_int_phase_is_a_type_error(rt, phase) -> None:
    reg = rt.SessionRunActionRegistry()
    with pytest.raises(TypeError):
        reg.register(1, phase, Recorder(rt, [], 0))
    assert reg.actions(1) == [], f"register(POST, {phase!r}, a) registered [REG-5]"


@pytest.mark.clause("REG-5")
def test_non_action_is_a_type_error(rt) -> None:
    reg = rt.SessionRunActionRegistry()
    for bad in (object(), "GPUStatistics", lambda options: None):
        with pytest.raises(TypeError):
            reg.register(1, 0, bad)
    assert reg.actions(1) == [], "[REG-5]"


@pytest.mark.clause("REG-5")
def test_unregister_removes_by_identity(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    a, twin = Recorder(rt, log, "a"), Recorder(rt, log, "twin")
    twin.name = a.name
    reg.register(1, 0, a)
    reg.register(1, 0, twin)
    reg.register(1, 0, a)
    assert reg.unregister(1, 0, a) is True, "unregister(POST, 0, a) returned False [REG-5]"
    reg.run_grouping(1, options(rt))
    assert log == ["twin", "a"], f"after unregistering the first 'a' the run was {log} [REG-5]"
    assert reg.unregister(1, 1, a) is False, "unregister at another phase returned True [REG-5]"
    assert reg.unregister(1, 0, a) is True, "[REG-5]"
    assert reg.unregister(1, 0, a) is False, "unregister of an absent action returned True [REG-5]"


@pytest.mark.clause("REG-6")
def test_action_name_defaults_to_class_name(rt) -> None:
    class MyThrottle(rt.SessionRunAction):
        def run_action(self, options) -> None:
            pass

    act = MyThrottle()
    assert act.name == "MyThrottle", f"SessionRunAction.name = {act.name!r} [REG-6]"
    act.name = "renamed"
    assert act.name == "renamed", "SessionRunAction.name is not settable [REG-6]"


@pytest.mark.clause("REG-6")
def test_registration_helper_names_and_registers(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []

    @rt.register_session_run_action(rt.Grouping.PRE_SESSION_RUN, -3, registry=reg)
    class WarmUp(rt.SessionRunAction):
        def run_action(self, options) -> None:
            log.append(type(self).__name__)

    assert isinstance(WarmUp, type), "the decorator did not return the class [REG-6]"
    found = reg.get_action(rt.Grouping.PRE_SESSION_RUN, -3, "WarmUp")
    assert isinstance(found, WarmUp), f"get_action(PRE, -3, 'WarmUp') = {found!r} [REG-6]"
    reg.run_grouping(0, options(rt))
    assert log == ["WarmUp"], "[REG-6]"
    assert rt.global_registry().get_action(0, -3, "WarmUp") is None, \
        "register_session_run_action(registry=reg) also registered globally [REG-6]"


@pytest.mark.clause("REG-6")
def test_registration_helper_names_the_instance_after_the_class(rt) -> None:
    """REGISTER_SESSION_RUN_ACTION names the action with the class token after constructing
    it: a name the constructor gave the instance does not survive the registration."""
    reg = rt.SessionRunActionRegistry()

    @rt.register_session_run_action(rt.Grouping.POST_SESSION_RUN, 4, registry=reg)
    class Throttle(rt.SessionRunAction):
        def __init__(self) -> None:
            self.name = "self-named"

        def run_action(self, options) -> None:
            pass

    registered = reg.actions(rt.Grouping.POST_SESSION_RUN)
    assert len(registered) == 1, f"one decoration registered {registered!r} [REG-6]"
    [(phase, action)] = registered
    assert (phase, type(action), action.name) == (4, Throttle, "Throttle"), (
        f"registered ({phase}, {type(action).__name__}, name {action.name!r}), expected the "
        f"instance at phase 4 named 'Throttle' after its class, not its constructor's "
        f"'self-named' [REG-6]")
    assert reg.get_action(rt.Grouping.POST_SESSION_RUN, 4, "self-named") is None, \
        "get_action found the action under the name its constructor gave it [REG-6]"


@pytest.mark.clause("REG-6", "REG-7")
def test_registration_helper_defaults_to_global_registry(rt) -> None:
    glob = rt.global_registry()

    @rt.register_session_run_action(rt.Grouping.POST_SESSION_RUN, 977)
    class GlobalProbe(rt.SessionRunAction):
        def run_action(self, options) -> None:
            pass

    try:
        found = glob.get_action(rt.Grouping.POST_SESSION_RUN, 977, "GlobalProbe")
        assert isinstance(found, GlobalProbe), "the helper did not register globally [REG-6]"
    finally:
        if found is not None:
            glob.unregister(rt.Grouping.POST_SESSION_RUN, 977, found)


@pytest.mark.clause("REG-7")
def test_global_registry_is_a_singleton_and_instances_independent(rt) -> None:
    assert rt.global_registry() is rt.global_registry(), "global_registry() changed [REG-7]"
    r1, r2 = rt.SessionRunActionRegistry(), rt.SessionRunActionRegistry()
    assert r1 is not rt.global_registry(), "[REG-7]"
    r1.register(1, 0, Recorder(rt, [], 0))
    assert r2.actions(1) == [], "a new registry shares registrations with another [REG-7]"
    assert all(a.name != "rec-0" for _, a in rt.global_registry().actions(1)), \
        "a new registry's registration reached the global registry [REG-7]"


@pytest.mark.clause("REG-8")
def test_registration_at_a_phase_still_to_run_waits_for_the_next_run(rt) -> None:
    """During a run, an action at phase 0 registers at phase 0 (running) and at phase 5 (which
    already has an action and has not run yet): neither runs in this run, both in the next."""
    reg, log = rt.SessionRunActionRegistry(), []
    late0, late5 = Recorder(rt, log, "late-0"), Recorder(rt, log, "late-5")

    def hook(options) -> None:
        if "registered" not in log:
            log.append("registered")
            reg.register(1, 5, late5)
            reg.register(1, 0, late0)

    reg.register(1, 0, Recorder(rt, log, "first", hook=hook))
    reg.register(1, 5, Recorder(rt, log, "second"))
    reg.run_grouping(1, options(rt))
    assert log == ["first", "registered", "second"], (
        f"registrations made during the run at phases 0 (running) and 5 (not run yet) ran in "
        f"it: {log}; a run uses the registrations present when it started [REG-8]")
    reg.run_grouping(1, options(rt))
    assert log[3:] == ["first", "late-0", "second", "late-5"], \
        f"the next run ran {log[3:]}, expected first, late-0, second, late-5 [REG-8]"


@pytest.mark.clause("REG-5")
def test_clear_removes_every_registration(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    for grouping, label in ((0, "pre"), (1, "post"), (1, "post-again")):
        reg.register(grouping, 3, Recorder(rt, log, label))
    reg.clear()
    left = {g: reg.actions(g) for g in (0, 1)}
    assert left == {0: [], 1: []}, f"clear() left registrations {left} [REG-5]"
    assert reg.get_action(1, 3, "rec-post") is None, (
        "get_action found an action registered before clear() [REG-5]")
    for grouping in (0, 1):
        reg.run_grouping(grouping, options(rt))
    assert log == [], f"run_grouping after clear() ran {log} [REG-5]"


#: The registry's changes, each a compound change of the phase lists and the run-order
#: snapshot, and what a concurrent change can do to one made without the registry's lock.
REGISTRY_CHANGES = {
    "register": (lambda reg, a, b: reg.register(1, 0, b),
                 "a concurrent registration can be lost, or left out of the run order"),
    "unregister": (lambda reg, a, b: reg.unregister(1, 0, a),
                   "a concurrent registration can be lost with the emptied phase, or a "
                   "removed action left in the run order"),
    "clear": (lambda reg, a, b: reg.clear(),
              "a registration made during clear() can survive it in one view and not the other"),
}


@pytest.mark.clause("REG-8")
@pytest.mark.parametrize("method", sorted(REGISTRY_CHANGES))
def test_every_change_takes_the_registrys_lock(rt, monkeypatch, method) -> None:
    """A change updates the phase lists and the run-order snapshot together: with the
    registry's lock held, so that concurrent changes never lose one another (REG-8). Forced,
    not hoped for: the lock is watched (fixtures/interleave.py) and each line the method runs
    records whether the calling thread held it; some line must."""
    from fixtures.interleave import lock_held_in, watch_lock
    reg, log = rt.SessionRunActionRegistry(), []
    a, b = Recorder(rt, log, "a"), Recorder(rt, log, "b")
    reg.register(1, 0, a)
    watched = watch_lock(monkeypatch, reg, "_lock", "the registry's lock")
    call, consequence = REGISTRY_CHANGES[method]
    _, held = lock_held_in(lambda: call(reg, a, b), method, watched)
    if not held:
        pytest.skip(f"the check follows the reference's design ({method} a method of the "
                    f"registry's class); this runtime's {method} ran no line of its own")
    assert any(held), (f"{method} ran {len(held)} line(s), none with the registry's lock held: "
                       f"{consequence} [REG-8]")


@pytest.mark.clause("REG-8")
def test_actions_may_use_the_registry_while_running(rt) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    late = Recorder(rt, log, "late")
    results = {}

    def hook(options) -> None:
        reg.register(1, 5, late)                       # takes effect from the next run
        results["get"] = reg.get_action(1, 0, "rec-first")
        results["actions"] = len(reg.actions(1))
        reg.unregister(1, 0, first)

    first = Recorder(rt, log, "first", hook=hook)
    reg.register(1, 0, first)
    t, out = run_in_thread(lambda: reg.run_grouping(1, options(rt)), name="reg-run")
    assert joined(t), "run_grouping deadlocked when an action used the registry [REG-8]"
    assert "error" not in out, f"run_grouping raised {out.get('error')!r} [REG-8]"
    assert log == ["first"], f"a registration made during the run ran in it: {log} [REG-8]"
    assert results == {"get": first, "actions": 2}, "[REG-8]"
    reg.run_grouping(1, options(rt))
    assert log == ["first", "late"], f"the next run ran {log[1:]}, expected ['late'] [REG-8]"


@pytest.mark.clause("REG-8")
def test_concurrent_register_and_run(rt) -> None:
    reg = rt.SessionRunActionRegistry()
    counter = {"runs": 0}
    lock = threading.Lock()

    class Count:
        name = "count"

        def run_action(self, options) -> None:
            with lock:
                counter["runs"] += 1

    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def registrar(k: int) -> None:
        start.wait()
        try:
            for i in range(200):
                reg.register(1, (k * 7 + i) % 5 - 2, Count())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def runner() -> None:
        start.wait()
        try:
            for _ in range(200):
                reg.run_grouping(1, options(rt))
                reg.actions(1)
                reg.get_action(1, 0, "count")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=registrar, args=(k,)) for k in range(3)]
    threads += [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        assert joined(t), "concurrent registry use did not finish [REG-8]"
    assert not errors, f"concurrent registry use raised {errors[:3]} [REG-8]"
    phases = [p for p, _ in reg.actions(1)]
    assert len(phases) == 600, f"{len(phases)} registrations survived of 600 [REG-8]"
    # descending throughout is the phase-order rule broken, any other disorder concurrency
    descending = phases == sorted(phases, reverse=True)
    assert phases == sorted(phases), (
        f"actions(POST) out of phase order after concurrent use "
        f"[{'REG-2' if descending else 'REG-8'}]")
    before = counter["runs"]
    reg.run_grouping(1, options(rt))
    assert counter["runs"] - before == 600, "[REG-8]"


@pytest.mark.clause("REG-9")
def test_options_fields_and_defaults(rt) -> None:
    o = rt.SessionRunActionOptions()
    got = (o.device_mgr, o.session, o.graph_id, o.sess_duration_us)
    assert got == (None, None, 0, 0), f"SessionRunActionOptions() = {got} [REG-9]"
    o = rt.SessionRunActionOptions(device_mgr="m", session="s", graph_id=7, sess_duration_us=9)
    assert (o.device_mgr, o.session, o.graph_id, o.sess_duration_us) == ("m", "s", 7, 9), "[REG-9]"


@pytest.mark.clause("REG-10")
@pytest.mark.capability("resource_management", "statistics")
def test_runtime_registers_statistics_at_1_and_management_at_2(rt, runtimes, tmp_path) -> None:
    cfg, status = tmp_path / "cfg.json", tmp_path / "status.json"
    ctx = runtimes(config_file=str(cfg), status_file=str(status))
    post = [(p, a.name) for p, a in ctx.registry.actions(rt.Grouping.POST_SESSION_RUN)]
    assert sorted(post) == [(1, "GPUStatistics"), (2, "GPUResourceManagement")], \
        f"create_runtime registered POST actions {post} [REG-10]"
    assert post == sorted(post), f"actions(POST) lists {post}, not in phase order [REG-2]"
    assert ctx.registry.actions(rt.Grouping.PRE_SESSION_RUN) == [], "[REG-10]"
    assert ctx.registry.get_action(1, 2, "GPUResourceManagement") is ctx.resource_management, (
        "[REG-10]")
    assert ctx.registry.get_action(1, 1, "GPUStatistics") is ctx.statistics, "[REG-10]"
    ctx.close()
    assert ctx.registry.actions(rt.Grouping.POST_SESSION_RUN) == [], \
        "RuntimeContext.close() left actions registered [REG-10]"


@pytest.mark.clause("REG-10")
def test_close_unregisters_the_runtime_s_own_registration_of_each_action_once(
        rt, runtimes, tmp_path) -> None:
    """The user registers the runtime's two actions again in its registry (REG-5 allows it):
    close() removes the runtime's registration of each, not the user's, and a second close()
    (idempotent, DEVICE-8) removes nothing more."""
    missing = {"resource_management", "statistics"} - set(rt.CAPABILITIES)
    if missing:
        pytest.skip(f"the runtime does not declare {sorted(missing)}")
    ctx = runtimes(config_file=str(tmp_path / "cfg.json"),
                   status_file=str(tmp_path / "status.json"))
    post = rt.Grouping.POST_SESSION_RUN
    ctx.registry.register(post, 1, ctx.statistics)
    ctx.registry.register(post, 2, ctx.resource_management)
    users = [(1, ctx.statistics), (2, ctx.resource_management)]

    def left() -> list:
        return [(p, a) for p, a in ctx.registry.actions(post)]

    def same(entries) -> bool:       # which registrations are left, in any order (REG-2's)
        return len(entries) == len(users) and all(
            any(p == q and a is b for q, b in entries) for p, a in users)

    ctx.close()
    assert same(left()), (
        f"after close() the registry holds {[(p, a.name) for p, a in left()]}, expected the "
        f"user's own registrations of GPUStatistics at 1 and GPUResourceManagement at 2 "
        f"[REG-10]")
    ctx.close()
    assert same(left()), (
        f"a second close() changed the registry: it holds {[(p, a.name) for p, a in left()]}, "
        f"expected the user's two registrations [REG-10]")


@pytest.mark.clause("REG-10")
@pytest.mark.capability("resource_management", "statistics")
def test_disabled_actions_are_not_registered(rt, runtimes) -> None:
    ctx = runtimes()
    assert ctx.registry.actions(rt.Grouping.POST_SESSION_RUN) == [], \
        "create_runtime without files registered actions [REG-10]"
    assert ctx.resource_management is None and ctx.statistics is None, "[REG-10]"


@pytest.mark.clause("API-7", "REG-10")
@pytest.mark.capability("resource_management", "statistics")
@pytest.mark.parametrize("config_env,status_env", [(None, None), ("", ""), ("cfg", None),
                                                    (None, "status"), ("cfg", "status")])
def test_file_paths_default_to_the_environment(rt, control_env, tmp_path, config_env,
                                               status_env) -> None:
    """Without ``config_file`` / ``status_file``, ``create_runtime`` reads GPU_CONFIG_FILE
    and GPU_STATUS_FILE: unset or empty disables the action, a path enables it."""
    for name, value in (("GPU_CONFIG_FILE", config_env), ("GPU_STATUS_FILE", status_env)):
        if value is not None:
            control_env.setenv(name, str(tmp_path / value) if value else "")
    with rt.create_runtime(num_gpus=1, gpu_memory_bytes=64 * MiB) as ctx:
        assert ctx.closed is False, f"a new runtime context's closed is {ctx.closed!r} [API-7]"
        assert (ctx.resource_management is not None) == bool(config_env), (
            f"GPU_CONFIG_FILE={config_env!r}: resource_management is "
            f"{ctx.resource_management!r} [API-7]")
        assert (ctx.statistics is not None) == bool(status_env), (
            f"GPU_STATUS_FILE={status_env!r}: statistics is {ctx.statistics!r} [API-7]")
    assert ctx.closed is True, f"closed is {ctx.closed!r} after the with block [API-7]"


@pytest.mark.clause("API-7")
@pytest.mark.parametrize("backend", ["default", None])
def test_backend_defaults_to_the_environment(rt, control_env, backend) -> None:
    """Without ``backend``, or with None, ``create_runtime`` resolves the backend as
    ``select_backend(None)`` does (DEVICE-7): ``$ANTMAN_DEVICE`` first, so a bad value there
    is a ``ValueError`` naming the variable, not the "auto" an empty name would give."""
    control_env.setenv("ANTMAN_DEVICE", "gpu0")
    kwargs = {} if backend == "default" else {"backend": backend}
    try:
        ctx = rt.create_runtime(num_gpus=1, gpu_memory_bytes=64 * MiB, config_file=None,
                                status_file=None, **kwargs)
    except ValueError as exc:
        assert names_identifier(exc, "ANTMAN_DEVICE"), (
            f"create_runtime({kwargs}) with ANTMAN_DEVICE=gpu0: the ValueError {str(exc)!r} "
            f"does not name ANTMAN_DEVICE [API-7]")
    else:
        ctx.close()
        pytest.fail(f"create_runtime({kwargs}) with ANTMAN_DEVICE=gpu0 raised no ValueError: "
                    f"the variable was not read [API-7]")


@pytest.mark.clause("REG-10", "RM-8")
@pytest.mark.capability("resource_management", "statistics")
def test_statistics_record_the_step_before_the_limit_changes(rt, runtimes, tmp_path) -> None:
    cfg, status = tmp_path / "cfg.json", tmp_path / "status.json"
    ctx = runtimes(config_file=str(cfg), status_file=str(status))
    gpu = gpus(ctx)[0]
    alloc = gpu.get_allocator()
    p = alloc.allocate_raw(256, 8 * MiB)
    alloc.deallocate_raw(p)
    pool = pool_bytes(gpu)
    assert pool >= 8 * MiB, "[REG-10]"
    cfg.write_text(json.dumps({"gpuConfigInfo": {bus_id(rt, gpu): {"maxDeviceMem": MiB}}}))
    assert ctx.resource_management.parse_manage_info_from_json(cfg.read_text()), "[REG-10]"
    listed = [p for p, _ in ctx.registry.actions(rt.Grouping.POST_SESSION_RUN)]
    assert listed == sorted(listed), f"POST actions listed in phase order {listed} [REG-2]"
    ctx.registry.run_grouping(rt.Grouping.POST_SESSION_RUN,
                              rt.SessionRunActionOptions(device_mgr=ctx.device_mgr, graph_id=3,
                                                         sess_duration_us=1000))
    doc = json.loads(status.read_text())
    dumped = doc["gpuUsageInfo"][bus_id(rt, gpu)]["deviceMemPoolSize"]
    assert dumped == pool, (f"statistics dumped deviceMemPoolSize={dumped}, expected the pool "
                            f"before the shrink ({pool}): statistics must run first [REG-10]")
    assert bytes_limit(gpu) == MiB, "the limit was not applied at the boundary [RM-8]"


# --- every argument's edges (REG-1, REG-4, REG-5, REG-6, REG-9) -----------------------------

BAD_GROUPINGS = [-1, 2, "PRE_SESSION_RUN", None, True, False, 1.0, 0j]


def _numpy_one():
    import numpy as np
    return np.int64(1)


@pytest.mark.clause("REG-1")
@pytest.mark.parametrize("bad", BAD_GROUPINGS + ["numpy"])
def test_unregister_and_the_helper_refuse_a_bad_grouping(rt, bad) -> None:
    bad = _numpy_one() if bad == "numpy" else bad
    reg, log = rt.SessionRunActionRegistry(), []
    act = Recorder(rt, log, "post")
    reg.register(1, 0, act)
    with pytest.raises(ValueError):
        reg.unregister(bad, 0, act)
        pytest.fail(f"unregister({bad!r}, 0, a) did not raise ValueError [REG-1]")
    assert [a for _, a in reg.actions(1)] == [act], \
        f"a refused unregister({bad!r}, ...) removed the POST registration [REG-1]"
    with pytest.raises(ValueError):
        decorator = rt.register_session_run_action(bad, 0, registry=reg)
        pytest.fail(f"register_session_run_action({bad!r}, 0) returned {decorator!r} instead "
                    f"of raising ValueError from the call [REG-1]")
    assert [a for _, a in reg.actions(1)] == [act] and reg.actions(0) == [], \
        f"a refused register_session_run_action({bad!r}, ...) registered [REG-1]"


@pytest.mark.clause("REG-1")
def test_a_numpy_integer_is_not_a_grouping(rt) -> None:
    one = _numpy_one()
    reg, log = rt.SessionRunActionRegistry(), []
    reg.register(1, 0, Recorder(rt, log, "post"))
    for call, args in (("register", (one, 0, Recorder(rt, log, "x"))),
                       ("run_grouping", (one, options(rt))),
                       ("get_action", (one, 0, "rec-post")),
                       ("actions", (one,))):
        with pytest.raises(ValueError):
            getattr(reg, call)(*args)
            pytest.fail(f"{call}(np.int64(1), ...) did not raise ValueError [REG-1]")
    assert log == [] and len(reg.actions(1)) == 1, \
        f"a call with grouping np.int64(1) ran {log} or registered [REG-1]"


@pytest.mark.clause("REG-5")
@pytest.mark.parametrize("phase", [True, False, 0.0, 1.0, "0", None, "numpy"])
def test_a_bad_phase_is_a_type_error_in_every_call(rt, phase) -> None:
    phase = _numpy_one() if phase == "numpy" else phase
    reg, log = rt.SessionRunActionRegistry(), []
    act = Recorder(rt, log, "a")
    act.name = "A"
    reg.register(1, 1, act)
    reg.register(1, 0, act)
    for call, args in (("register", (1, phase, Recorder(rt, log, "x"))),
                       ("unregister", (1, phase, act)),
                       ("get_action", (1, phase, "A")),
                       ("register_session_run_action", (1, phase))):
        target = rt if call == "register_session_run_action" else reg
        with pytest.raises(TypeError):
            got = getattr(target, call)(*args)
            pytest.fail(f"{call}(POST, {phase!r}, ...) returned {got!r} instead of raising "
                        f"TypeError [REG-5]")
    # the registrations as a set of (phase, action): their order is REG-2's
    kept = sorted(reg.actions(1), key=lambda pair: pair[0])
    assert kept == [(0, act), (1, act)], (
        f"calls with phase {phase!r} changed the registrations to {reg.actions(1)} [REG-5]")


@pytest.mark.clause("REG-5", "REG-2")
def test_phases_have_no_bound(rt) -> None:
    """0, -1 and phases beyond any machine integer are ordered by value like any other."""
    phases = [2**64, -1, 0, -(2**63) - 1, 2**63, 10**30, 2**31, -(2**31) - 1, 1]
    reg, log = rt.SessionRunActionRegistry(), []
    acts = {}
    for p in phases:
        acts[p] = Recorder(rt, log, p)
        acts[p].name = f"at-{p}"
        reg.register(1, p, acts[p])
    reg.run_grouping(1, options(rt))
    ordinary = [p for p in log if -(2**31) <= p < 2**31]      # phases of a C++ int
    precondition_holds("REG-2", ordinary == sorted(ordinary),
                       f"phases of an int run in ascending order: ran as {ordinary}")
    assert log == sorted(phases), f"phases {phases} ran as {log}, expected ascending [REG-5]"
    assert [q for q, _ in reg.actions(1)] == sorted(phases), \
        f"actions(POST) phases {[q for q, _ in reg.actions(1)]} [REG-5]"
    for p in phases:
        assert reg.get_action(1, p, f"at-{p}") is acts[p], \
            f"get_action(POST, {p}, 'at-{p}') did not find it [REG-5]"
    for p in (2**64 + 1, 2**64 - 1, -(2**63)):
        assert reg.get_action(1, p, f"at-{2**64}") is None, \
            f"get_action(POST, {p}, ...) found the action at phase 2^64 [REG-5]"
    assert reg.unregister(1, 2**64 - 1, acts[2**64]) is False, \
        "unregister at phase 2^64-1 removed the action at phase 2^64 [REG-5]"
    assert reg.unregister(1, 2**64, acts[2**64]) is True, "[REG-5]"


@pytest.mark.clause("REG-5")
@pytest.mark.parametrize("other", [None, "rec-a", 0, object()])
def test_unregister_of_a_non_action_returns_false(rt, other) -> None:
    reg, log = rt.SessionRunActionRegistry(), []
    act = Recorder(rt, log, "a")
    reg.register(1, 0, act)
    assert reg.unregister(1, 0, other) is False, \
        f"unregister(POST, 0, {other!r}) did not return False [REG-5]"
    assert [a for _, a in reg.actions(1)] == [act], \
        f"unregister(POST, 0, {other!r}) removed a registration [REG-5]"


@pytest.mark.clause("REG-4")
@pytest.mark.parametrize("bad", [None, b"Act", 0, 1.0, ["Act"]])
def test_get_action_name_must_be_a_str(rt, bad) -> None:
    """An action whose name is ``bad`` itself is registered: only a type check refuses it."""
    reg = rt.SessionRunActionRegistry()
    act = Recorder(rt, [], 1)
    act.name = "Act"
    reg.register(1, 0, act)
    odd = Recorder(rt, [], 2)
    odd.name = bad
    reg.register(1, 0, odd)
    with pytest.raises(TypeError):
        got = reg.get_action(1, 0, bad)
        pytest.fail(f"get_action(POST, 0, {bad!r}) returned {got!r} instead of raising "
                    f"TypeError [REG-4]")


@pytest.mark.clause("REG-4")
def test_get_action_takes_a_str_subclass_and_the_empty_name(rt) -> None:
    class Name(str):
        pass

    reg = rt.SessionRunActionRegistry()
    act, empty = Recorder(rt, [], 1), Recorder(rt, [], 2)
    act.name, empty.name = "Act", ""
    reg.register(1, 0, act)
    reg.register(1, 0, empty)
    assert reg.get_action(1, 0, Name("Act")) is act, \
        "get_action with a str subclass 'Act' did not find the action [REG-4]"
    assert reg.get_action(1, 0, "") is empty, "get_action(POST, 0, '') did not find it [REG-4]"


@pytest.mark.clause("REG-6")
@pytest.mark.parametrize("bad", [None, b"Act", 0, True])
def test_an_action_name_must_be_a_str(rt, bad) -> None:
    class MyAction(rt.SessionRunAction):
        def run_action(self, options) -> None:
            pass

    act = MyAction()
    with pytest.raises(TypeError):
        act.name = bad
        pytest.fail(f"setting an action's name to {bad!r} did not raise TypeError [REG-6]")
    assert act.name == "MyAction", \
        f"a refused name {bad!r} left the name {act.name!r}, expected 'MyAction' [REG-6]"
    act.name = ""
    assert act.name == "", f"the empty name was not kept: {act.name!r} [REG-6]"
    with pytest.raises(TypeError):
        act.name = bad
    assert act.name == "", f"a refused name {bad!r} replaced '' by {act.name!r} [REG-6]"


@pytest.mark.clause("REG-6")
@pytest.mark.parametrize("bad", ["global", 0, object(), "list"])
def test_the_helper_refuses_a_registry_that_is_not_one(rt, bad) -> None:
    bad = [] if bad == "list" else bad
    before = rt.global_registry().actions(1)
    with pytest.raises(TypeError):
        decorator = rt.register_session_run_action(1, 0, registry=bad)
        pytest.fail(f"register_session_run_action(POST, 0, registry={bad!r}) returned "
                    f"{decorator!r} instead of raising TypeError from the call [REG-6]")
    assert rt.global_registry().actions(1) == before, \
        f"a refused registry {bad!r} changed the global registry [REG-6]"


OPTION_FIELDS = ("graph_id", "sess_duration_us")
MAX_UINT64 = 2**64 - 1


@pytest.mark.clause("REG-9")
@pytest.mark.parametrize("bad", [-1, -(2**64), MAX_UINT64 + 1, True, False, 5.0, float("nan"),
                                 "5", None])
@pytest.mark.parametrize("field", OPTION_FIELDS)
def test_option_amounts_are_uint64_integers(rt, field, bad) -> None:
    with pytest.raises(ValueError) as info:
        got = rt.SessionRunActionOptions(**{field: bad})
        pytest.fail(f"SessionRunActionOptions({field}={bad!r}) built {got!r} [REG-9]")
    assert names_identifier(info.value, field), (
        f"SessionRunActionOptions({field}={bad!r}): the ValueError {str(info.value)!r} does "
        f"not name {field!r} [REG-9]")
    opts = rt.SessionRunActionOptions(graph_id=7, sess_duration_us=9)
    with pytest.raises(ValueError) as info:
        setattr(opts, field, bad)
        pytest.fail(f"options.{field} = {bad!r} did not raise ValueError [REG-9]")
    assert names_identifier(info.value, field), (
        f"options.{field} = {bad!r}: the ValueError {str(info.value)!r} does not name "
        f"{field!r} [REG-9]")
    assert (opts.graph_id, opts.sess_duration_us) == (7, 9), (
        f"a refused options.{field} = {bad!r} changed the options to {opts!r} [REG-9]")


@pytest.mark.clause("REG-9")
@pytest.mark.parametrize("field", OPTION_FIELDS)
def test_option_amounts_accept_zero_the_maximum_and_numpy(rt, field) -> None:
    import numpy as np
    for value, want in ((0, 0), (MAX_UINT64, MAX_UINT64), (np.uint64(MAX_UINT64), MAX_UINT64),
                        (np.int32(5), 5)):
        opts = rt.SessionRunActionOptions(**{field: value})
        got = getattr(opts, field)
        assert got == want and type(got) is int, (
            f"SessionRunActionOptions({field}={value!r}).{field} is {got!r} "
            f"({type(got).__name__}), expected the int {want} [REG-9]")
        setattr(opts, field, value)
        assert getattr(opts, field) == want and type(getattr(opts, field)) is int, (
            f"options.{field} = {value!r} kept {getattr(opts, field)!r} [REG-9]")


@pytest.mark.clause("REG-9")
@pytest.mark.parametrize("given", [None, "opts", "object"])
def test_run_grouping_hands_any_options_object_as_is(rt, given) -> None:
    given = object() if given == "object" else given
    reg, seen = rt.SessionRunActionRegistry(), []
    reg.register(0, 0, Recorder(rt, [], "a", hook=seen.append))
    reg.register(0, 1, Recorder(rt, [], "b", hook=seen.append))
    reg.run_grouping(0, given)
    assert len(seen) == 2 and all(s is given for s in seen), (
        f"run_grouping(PRE, {given!r}) handed {seen!r} to its actions, expected that very "
        f"object twice [REG-9]")


@pytest.mark.clause("REG-6")
def test_decorating_a_class_that_cannot_be_an_action_registers_nothing(rt) -> None:
    reg = rt.SessionRunActionRegistry()
    decorate = rt.register_session_run_action(1, 0, registry=reg)
    refusal = RuntimeError("no device")

    class NeedsAnArgument:
        def __init__(self, device) -> None:
            self.device = device

        def run_action(self, options) -> None:
            pass

    class FailsToBuild:
        def __init__(self) -> None:
            raise refusal

        def run_action(self, options) -> None:
            pass

    class NoRunAction:
        pass

    with pytest.raises(TypeError):
        decorate(NeedsAnArgument)
        pytest.fail("decorating a class that needs an argument did not raise [REG-6]")
    with pytest.raises(RuntimeError) as info:
        decorate(FailsToBuild)
    assert info.value is refusal, \
        f"decorating a class whose constructor raises raised {info.value!r} instead [REG-6]"
    with pytest.raises(TypeError):
        decorate(NoRunAction)
        pytest.fail("decorating a class without run_action did not raise TypeError [REG-6]")
    assert reg.actions(0) == [] and reg.actions(1) == [], \
        f"a failed decoration registered {reg.actions(1)} [REG-6]"


@pytest.mark.clause("REG-6")
def test_session_run_action_is_abstract(rt) -> None:
    """An action class that does not define run_action cannot be built: neither the base
    class itself nor a subclass that forgets run_action (so the helper registers nothing)."""
    reg = rt.SessionRunActionRegistry()

    class ForgotRunAction(rt.SessionRunAction):
        pass

    for cls in (rt.SessionRunAction, ForgotRunAction):
        try:
            made = cls()
        except TypeError:
            continue
        pytest.fail(f"{cls.__name__}() built {made!r} instead of raising TypeError: "
                    f"run_action is abstract [REG-6]")
    with pytest.raises(TypeError):
        rt.register_session_run_action(1, 0, registry=reg)(ForgotRunAction)
        pytest.fail("decorating a SessionRunAction subclass without run_action did not "
                    "raise TypeError [REG-6]")
    assert reg.actions(1) == [], f"the failed decoration registered {reg.actions(1)} [REG-6]"
