"""AntMan 1.15's verdict is pinned: every SPEC.md section 8 entry is detected on its clauses.

``adapters.antman_1_15`` is the reference runtime with each section 8 deviation undone by a
switch (all on by default). ``reports/antman_deviations.json`` (``python -m
adapters.antman_1_15.pinning --write``) records, for each switch alone, the tests that fail
and the clauses they fail, and the failures with every switch on. These tests check:

- the data covers every section 8 entry, with the entry's current text; each switch makes
  at least one test fail on a clause the entry names, and any other clause it fails is
  declared with the reason (``Deviation.also``); the entries without a switch are listed
  here with the reason (unobservable through the API, or not reproduced);
- with every switch on, the adapter fails exactly the union of what the switches fail alone
  (nothing else fails), certified now in a pytest subprocess over the modules the switches
  map to;
- turning one switch off makes exactly the failures that only that switch causes disappear
  (a sample of switches, each certified now over its own modules).

The subprocess runs use Hypothesis seed 0 and a per-test timeout, as the broken-fork
meta-test runs forks.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.antman_1_15 import pinning  # noqa: E402
from adapters.antman_1_15.deviations import BY_ID, DEVIATIONS  # noqa: E402

DATA = pinning.load() if pinning.DATA_PATH.exists() else \
    {"deviations": {}, "all_on": {"modules": [], "failures": {}}}
SWITCHES = [d for d in DEVIATIONS if d.patches and not d.unobservable]
#: Entries of section 8 without a switch that a test could see, and why.
WITHOUT_A_TEST = {d.id: d.unobservable or d.not_implemented for d in DEVIATIONS
                  if d.unobservable or d.not_implemented}
#: Switches whose "off" run is certified by default (cheap modules, several areas);
#: ANTMAN_META_ALL_SWITCHES=1 runs every switch; ANTMAN_META_WORKERS sets the xdist workers
#: of the run with every switch on (2 by default).
SAMPLE = ("D-BFC-3", "D-ADJ-3", "D-DEVICE-1", "D-REG-1", "D-OPM-1", "D-STAT-1", "D-SESS-3")


def test_every_combination_of_one_switch_applies() -> None:
    """Every switch's patches apply alone, and with every other switch on."""
    from adapters.antman_1_15.deviations import active_patches
    from adapters.antman_1_15.loader import REFERENCE_DIR, apply_patches
    modules = {m for d in DEVIATIONS for m, _, _ in d.patches}
    sources = {m: (REFERENCE_DIR / f"{m.replace('.', '/')}.py").read_text(encoding="utf-8")
               for m in modules}
    ids = [d.id for d in DEVIATIONS]
    combos = [{i: True for i in ids}] + [{i: i == j for i in ids} for j in ids] \
        + [{i: i != j for i in ids} for j in ids]
    for switches in combos:
        patches = active_patches(switches)
        for m, text in sources.items():
            compile(apply_patches(m, text, patches), m, "exec")


def test_switches_are_read_from_the_environment() -> None:
    from adapters.antman_1_15.deviations import switches_from_env
    assert all(switches_from_env({}).values())
    assert not any(switches_from_env({"ANTMAN_1_15_OFF": "all"}).values())
    off = switches_from_env({"ANTMAN_1_15_OFF": " D-RM-3 ,D-FL-1"})
    assert [i for i, on in off.items() if not on] == ["D-FL-1", "D-RM-3"]
    with pytest.raises(ValueError, match="unknown deviations D-NOPE-1"):
        switches_from_env({"ANTMAN_1_15_OFF": "D-NOPE-1"})
    import subprocess
    out = subprocess.run([sys.executable, "-m", "adapters.antman_1_15"], cwd=ROOT,
                         env={**os.environ, "ANTMAN_1_15_OFF": "D-NOPE-1"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "unknown deviations D-NOPE-1" in out.stderr \
        and "Traceback" not in out.stderr, out


def test_the_adapter_never_imports_the_reference() -> None:
    import subprocess
    code = ("import sys, adapters.antman_1_15 as a; "
            "assert 'reference_runtime' not in sys.modules, 'imported the reference'; "
            "print(a.NAME, a.get_pci_bus_id('pci bus id: 3b:00.0'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                     if k != "ANTMAN_1_15_OFF"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["antman-1.15", "00.0"], out.stdout   # D-DEVICE-1
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "ANTMAN_1_15_OFF": "all"})
    assert out.stdout.split() == ["antman-1.15", "3b:00.0"], out.stdout + out.stderr


def _slow(nodeid: str, failure: dict[str, Any]) -> bool:
    """A TIMEOUT of a test no switch is pinned to fail: the machine was too slow for the
    test's own limit (pinning.py keeps these apart)."""
    pinned = {n for dev in DATA["deviations"].values() for n in dev["failures"]}
    return pinning.set_apart(nodeid, failure, pinned)


def _pairs(failures: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    return {(n, c) for n, f in failures.items() for c in f["clauses"]}


def test_every_entry_of_section_8_is_pinned() -> None:
    entries = pinning.spec_entries()
    assert set(entries) == set(BY_ID), (
        f"section 8 and the adapter's switches differ: only in SPEC.md "
        f"{sorted(set(entries) - set(BY_ID))}, only in the adapter "
        f"{sorted(set(BY_ID) - set(entries))}")
    assert set(DATA["deviations"]) == set(BY_ID), "regenerate: " + pinning.COMMAND
    for d in DEVIATIONS:
        pinned = DATA["deviations"][d.id]
        assert pinned["entry"] == entries[d.id]["text"], \
            f"{d.id}: the entry's text changed; regenerate with {pinning.COMMAND}"
        assert pinned["clauses"] == list(d.clauses), f"{d.id}: regenerate"


#: Entries whose AntMan behaviour the API cannot show (the switch exists), and entries the
#: adapter does not reproduce (no switch); SPEC.md section 8 says so in each.
UNOBSERVABLE = ("D-ADJ-2", "D-RM-6", "D-STAT-3")
NOT_IMPLEMENTED = ("D-EXEC-2", "D-EXEC-3")


def test_entries_without_a_test_are_listed() -> None:
    assert sorted(WITHOUT_A_TEST) == sorted(UNOBSERVABLE + NOT_IMPLEMENTED), WITHOUT_A_TEST
    assert all(BY_ID[i].unobservable and BY_ID[i].patches for i in UNOBSERVABLE)
    assert all(BY_ID[i].not_implemented and not BY_ID[i].patches for i in NOT_IMPLEMENTED)
    text = (ROOT / "SPEC.md").read_text(encoding="utf-8")
    for ident in WITHOUT_A_TEST:
        entry = pinning.spec_entries()[ident]["text"]
        assert "not observable" in entry or "no switch" in entry, (
            f"SPEC.md section 8 must say that {ident} is not observable through the API or "
            f"has no switch")
    assert "adapters/antman_1_15" in text


#: Switches whose AntMan behaviour no conformance test sees yet, and why: reported XFAIL
#: while undetected, FAIL once a test catches them (remove the entry then).
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("ident", [d.id for d in SWITCHES])
def test_each_switch_fails_its_own_clauses(ident: str) -> None:
    d = BY_ID[ident]
    failures = DATA["deviations"][ident]["failures"]
    own = {n for n, f in failures.items() if set(f["clauses"]) & set(d.clauses)}
    if ident in KNOWN_GAPS:
        if own:
            pytest.fail(f"{ident} is detected now ({sorted(own)[:3]}): remove it from "
                        f"KNOWN_GAPS")
        pytest.xfail(f"known gap: {KNOWN_GAPS[ident]}")
    assert own, (f"{ident} ({d.antman}) makes no test fail on {', '.join(d.clauses)}: "
                 f"the suite does not detect it; pinned failures: {sorted(failures)}")
    allowed = set(d.clauses) | set(d.also)
    stray = {n: f["clauses"] for n, f in failures.items() if set(f["clauses"]) - allowed}
    assert not stray, (f"{ident} also fails clauses it does not name: {stray}; declare a "
                       f"clause the behaviour truly breaks in Deviation.also, with the "
                       f"reason, or fix the test that blames it")
    unused = set(d.also) - {c for f in failures.values() for c in f["clauses"]}
    assert not unused, f"{ident}: also={sorted(unused)} no longer fail: remove them"


#: Errors of Python itself, not of a behaviour AntMan's C++ has: a switch whose pinned failure
#: is one of these patches code the reference no longer has in that shape (its anchor still
#: matched, its body did not), and its run fails everything for that reason alone.
PATCH_ERRORS = re.compile(r"(AttributeError|NameError|UnboundLocalError)\b")


@pytest.mark.parametrize("ident", [d.id for d in SWITCHES])
def test_no_switch_fails_by_a_patch_that_no_longer_fits(ident: str) -> None:
    broken = {n: p for n, f in DATA["deviations"][ident]["failures"].items()
              for p in f["patterns"] if PATCH_ERRORS.search(p.replace("\\", ""))}
    assert not broken, (f"{ident}'s pinned failures are Python errors of its own patch, not "
                        f"AntMan's behaviour: {dict(list(broken.items())[:3])}; fix the patch "
                        f"to the reference's code, then regenerate with {pinning.COMMAND}")


@pytest.mark.parametrize("argv", [["--all-on-workers", "-1"], ["--all-on-workers", "65"],
                                  ["--jobs", "0"], ["--only", "D-NOPE-1"]])
def test_the_pinning_tool_refuses_bad_arguments_before_any_run(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A usage error (exit 2, one line naming the argument), and the pin is left as it is."""
    before = pinning.DATA_PATH.read_bytes()
    assert pinning.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pinning: ") and len(err.splitlines()) == 1, err
    assert pinning.DATA_PATH.read_bytes() == before


def test_the_pin_is_made_on_the_simulated_device_on_every_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU host the GPU clauses would run and the workers take the GPU (their default
    backend is auto): a pin made there would differ from one made on a CPU host. Each run
    deselects the tests marked gpu and gives every process the simulated device."""
    seen: dict[str, Any] = {}

    def fake_run(cmd: list[str], **kwargs: Any) -> Any:
        seen.update(cmd=cmd, env=kwargs["env"])
        raise RuntimeError("stop before any run")

    monkeypatch.setattr(pinning, "run_certification", fake_run)
    monkeypatch.setenv("ANTMAN_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="stop before any run"):
        pinning.certify(["conformance/test_gpu.py"], (), tmp_path / "run")
    cmd = seen["cmd"]
    assert cmd[cmd.index("-m", cmd.index("pytest") + 1) + 1] == "not gpu", cmd
    assert seen["env"]["ANTMAN_DEVICE"] == "sim"


def test_the_pin_and_a_later_run_set_apart_the_same_failures() -> None:
    """The all-on pin and the runs compared with it use one rule: a load-bound failure
    (TIMEOUT, or a CPU-time test) is set apart only where no switch is pinned to fail the
    test. A pin that set apart every load-bound failure, while the comparison kept those a
    switch explains, reported such tests as newly failing on every later run."""
    pinned_test = "conformance/test_x.py::test_pinned"
    free_test = "conformance/test_x.py::test_free"
    failures = {pinned_test: {"outcome": "TIMEOUT", "clauses": ["FL-7"], "messages": ["t"]},
                free_test: {"outcome": "TIMEOUT", "clauses": ["FL-7"], "messages": ["t"]},
                "conformance/test_x.py::test_plain": {"outcome": "FAIL", "clauses": ["RM-5"],
                                                      "messages": ["m"]}}

    class FakeRun:
        def failures(self) -> dict[str, dict[str, Any]]:
            return failures

    kept, slow = pinning._record(FakeRun(), pinned={pinned_test})   # type: ignore[arg-type]
    assert set(kept) == {pinned_test, "conformance/test_x.py::test_plain"}
    assert slow == [free_test]
    later = {n for n, f in failures.items()
             if not pinning.set_apart(n, f, {pinned_test})}
    assert later == set(kept)


def test_all_on_is_the_union_of_the_switches() -> None:
    """With every switch on, the failing tests are those the switches fail alone, apart
    from the tests listed as failing only together (two switches' behaviours combined, or
    a race one switch's run did not hit); a test one switch fails alone may pass with all
    on (another switch's failure stops it first on another check)."""
    union = {n for d in SWITCHES for n in DATA["deviations"][d.id]["failures"]}
    together = set(DATA["all_on"]["failures"]) - union
    assert together == set(DATA["all_on"].get("only_together", [])), "regenerate"
    assert len(together) <= 10, f"too many failures no switch explains: {sorted(together)}"


@pytest.fixture(scope="module")
def all_on_run(tmp_path_factory: pytest.TempPathFactory) -> pinning.Run:
    return pinning.certify(DATA["all_on"]["modules"], (),
                           tmp_path_factory.mktemp("antman-all-on"), workers=_workers())


def _workers() -> int:
    """xdist workers of the run with every switch on: ANTMAN_META_WORKERS, 2 by default."""
    value = os.environ.get("ANTMAN_META_WORKERS", "2")
    if not value.isdigit() or not 1 <= int(value) <= 64:
        pytest.fail(f"ANTMAN_META_WORKERS={value!r}: expected a number of workers from 1 to 64")
    return int(value)


@pytest.mark.antman_full
@pytest.mark.timeout(1800)         # the whole selection, AntMan's bounded hangs included
def test_certified_verdict_with_every_switch_on(all_on_run: pinning.Run) -> None:
    run = all_on_run
    assert run.report is not None, run.problems
    assert run.report["runtime"]["module"] == pinning.RUNTIME
    assert run.report["verdict"]["status"] != "CERTIFIED"
    got = {n for n, f in run.failures().items() if not _slow(n, f)}
    want = set(DATA["all_on"]["failures"])
    assert got == want, (
        f"AntMan 1.15's verdict moved: newly failing {sorted(got - want)[:20]}, no longer "
        f"failing {sorted(want - got)[:20]}; regenerate with {pinning.COMMAND} if the "
        f"change is intended")
    together = set(DATA["all_on"].get("only_together", []))
    for t in run.report["tests"]:
        if t["outcome"] in pinning.BAD and t["nodeid"] in DATA["all_on"]["failures"] \
                and t["nodeid"] not in together:
            assert t.get("antman", {}).get("verdict") == "same-as-antman", (
                f"{t['nodeid']} is not recognised as AntMan's behaviour: {t.get('antman')}")


def _sample() -> list[str]:
    if os.environ.get("ANTMAN_META_ALL_SWITCHES"):
        return [d.id for d in SWITCHES]
    return list(SAMPLE)


@pytest.mark.antman_full
@pytest.mark.timeout(900)
@pytest.mark.parametrize("ident", _sample())
def test_switching_one_off_removes_exactly_its_failures(
        ident: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    d = BY_ID[ident]
    run = pinning.certify(d.modules, (ident,), tmp_path_factory.mktemp(ident))
    assert run.report is not None, run.problems
    in_modules = {n: f for n, f in DATA["all_on"]["failures"].items()
                  if n.split("::")[0] in d.modules}
    mine = _pairs(DATA["deviations"][ident]["failures"])
    others: set[tuple[str, str]] = set()
    for other in SWITCHES:
        if other.id != ident:
            others |= _pairs(DATA["deviations"][other.id]["failures"])
    mine_t = set(DATA["deviations"][ident]["failures"])
    others_t = {n for o in SWITCHES if o.id != ident for n in DATA["deviations"][o.id]["failures"]}
    together = set(DATA["all_on"].get("only_together", []))   # races and combinations
    expected = set(in_modules) - (mine_t - others_t) - together
    got = {n for n, f in run.failures().items() if not _slow(n, f)} - together
    assert got == expected, (
        f"with {ident} off: still failing {sorted(got - expected)[:20]}, also gone "
        f"{sorted(expected - got)[:20]}")
