"""The mutation tool's own logic (``mutation/``): generation, sampling, selection, the
reviewed list of equivalent mutants, the classification of runs and the report.

These tests are fast (one real mutant run of a few seconds at the end); the campaign itself,
``tox -e mutation``, is not run in CI.
"""

from __future__ import annotations

import os
import random
import textwrap
from pathlib import Path

import pytest

from mutation import equivalents as eq
from mutation import report
from mutation.campaign import Campaign, CampaignResult
from mutation.operators import Mutant, compiles, mutants_of_source
from mutation.runner import MutantResult, Options, Run, Workspace, classify, run_pytest
from mutation.sampling import draw, population
from mutation.targets import (CONFORMANCE_DIR, EXCLUDED, OBSERVERS, all_conformance_modules,
                              complement, mutated_modules, observers, runtime_modules)

SNIPPET = textwrap.dedent('''\
    """A docstring with 1 number."""
    import logging
    import threading

    LIMIT = 10
    __all__ = ["Counter"]
    _log = logging.getLogger(__name__)


    class Counter:
        """Counts."""

        def __init__(self) -> None:
            self._lock = threading.Lock()
            self.n: int = 0
            self.items = {}

        def add(self, x: int = 3) -> dict:
            with self._lock:
                self.n += 1
            if x >= LIMIT and not self.full():
                _log.warning("over %d", LIMIT + 1)
                _log.debug("debug %d", 2)
            return dict(self.items)

        def full(self) -> bool:
            return max(0, self.n - LIMIT) > 0

        def __repr__(self) -> str:
            return f"Counter({self.n + 1})"
    ''')


@pytest.fixture(scope="module")
def snippet_mutants() -> list[Mutant]:
    return mutants_of_source("snippet.py", SNIPPET)


@pytest.fixture(scope="module")
def runtime_population():
    return population()


def changes(mutants: list[Mutant]) -> set[tuple[str, str, str]]:
    return {(m.operator, m.original, m.replacement) for m in mutants}


# --- generation ------------------------------------------------------------------------

def test_each_operator_family_is_generated(snippet_mutants: list[Mutant]) -> None:
    found = changes(snippet_mutants)
    expected = {
        ("const", "10", "11"), ("const", "10", "9"),             # the module-level threshold
        ("compare", ">=", ">"), ("compare", ">", ">="),
        ("arith", "+=", "-="), ("arith", "-", "+"),
        ("bool", "and", "or"), ("bool", "not ", ""),
        ("clamp", "max", "min"), ("clamp", "max(0, self.n - LIMIT)", "(self.n - LIMIT)"),
        ("unwrap", "dict(self.items)", "(self.items)"),
        ("delete", "self.n += 1", "pass"),
        ("delete", '_log.warning("over %d", LIMIT + 1)', "pass"),
        ("unlock", "with self._lock", "if True"),
        ("return", "dict(self.items)", "None"),
        ("const", "3", "4"),                                      # a default argument
    }
    assert expected <= found, sorted(expected - found)


def test_what_is_never_mutated(snippet_mutants: list[Mutant]) -> None:
    lines = {m.line_text for m in snippet_mutants}
    assert not any("Counter(" in t and "return f" in t for t in lines), "__repr__ mutated"
    assert not any(t.startswith(('"""', "__all__", "import", "_log = ")) for t in lines)
    assert ("delete", '_log.debug("debug %d", 2)', "pass") not in changes(snippet_mutants)
    inside_log = [m for m in snippet_mutants if "_log." in m.line_text and m.operator != "delete"]
    assert not inside_log, f"the arguments of a log call were mutated: {inside_log}"
    assert not any(m.original.startswith("int") for m in snippet_mutants), "an annotation"


def test_mutants_are_exact_one_place_edits(runtime_population) -> None:
    for m in runtime_population.mutants:
        text = runtime_population.sources[m.module]
        after = m.apply(text)
        assert after.count("\n") == text.count("\n"), f"{m.key} moves line numbers"
        assert after[:m.start] == text[:m.start] and after[m.start + len(m.replacement):] \
            == text[m.end:], m.key
        assert m.line_text == text.splitlines()[m.line - 1].strip(), m.key


def test_keys_are_unique_and_ignore_unrelated_edits() -> None:
    before = {m.key for m in mutants_of_source("snippet.py", SNIPPET)}
    edited = SNIPPET.replace("class Counter:",
                             "def helper(y):\n    return y + 1\n\n\nclass Counter:")
    after = {m.key for m in mutants_of_source("snippet.py", edited)}
    assert before <= after, f"keys changed by an unrelated edit: {sorted(before - after)}"
    assert len(after) == len(mutants_of_source("snippet.py", edited))


def test_sampled_runtime_mutants_compile(runtime_population) -> None:
    sample = random.Random(0).sample(list(runtime_population.mutants), 150)
    bad = [m.key for m in sample if not compiles(m, runtime_population.sources[m.module])]
    assert not bad, f"mutants that do not compile: {bad}"


# --- sampling --------------------------------------------------------------------------

def test_samples_are_seeded_and_order_free(runtime_population) -> None:
    mutants = list(runtime_population.mutants)
    a = draw(mutants, "1", 40)
    shuffled = mutants[:]
    random.Random(7).shuffle(shuffled)
    assert draw(shuffled, "1", 40) == a, "the sample depends on the generation order"
    assert draw(mutants, "2", 40) != a, "two seeds gave the same sample"
    assert len(a) == 40 == len({m.key for m in a})
    assert draw(mutants[:10], "1", 40) == draw(mutants[:10], "1", 10)


def test_samples_are_stable_when_other_mutants_change(runtime_population) -> None:
    mutants = list(runtime_population.mutants)
    a = draw(mutants, "1", 40)
    outside = [m for m in mutants if m not in a]
    fewer = [m for m in mutants if m is not outside[0]]
    assert draw(fewer, "1", 40) == a, "removing an unsampled mutant changed the sample"
    without_first = [m for m in mutants if m is not a[0]]
    assert draw(without_first, "1", 40)[:39] == a[1:], "a removed mutant reshuffled the rest"


# --- selection -------------------------------------------------------------------------

def test_every_mutated_module_has_its_observers() -> None:
    modules = set(mutated_modules())
    assert modules == set(OBSERVERS), (
        f"runtime modules without a map entry: {sorted(modules - set(OBSERVERS))}; "
        f"map entries for no module: {sorted(set(OBSERVERS) - modules)}")
    assert set(EXCLUDED) <= set(runtime_modules()) and not set(EXCLUDED) & set(OBSERVERS)
    assert all(reason.strip() for reason in EXCLUDED.values())
    known = set(all_conformance_modules())
    for module, names in OBSERVERS.items():
        assert names and len(set(names)) == len(names), f"{module}: empty or repeated"
        assert set(names) <= known, f"{module}: unknown modules {sorted(set(names) - known)}"
        assert set(observers(module)) | set(complement(module)) == {
            f"conformance/{n}" for n in known}
        assert not set(observers(module)) & set(complement(module))
        assert all((CONFORMANCE_DIR.parent / p).is_file() for p in observers(module))


# --- the reviewed list -----------------------------------------------------------------

def test_reviewed_list_matches_the_mutants(runtime_population) -> None:
    entries = eq.load()
    problems = eq.problems(entries, list(runtime_population.mutants))
    assert not problems, "stale entries in mutation/equivalents.toml:\n" + "\n".join(problems)
    for entry in entries.values():
        assert len(entry.reason) >= 20, f"{entry.key}: the reason must say why ({entry.reason!r})"


@pytest.mark.parametrize("body,error", [
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "equivalent"\n', "missing"),
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "maybe"\nreason = "r"\n', "kind"),
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "equivalent"\nreason = "r"\n'
     'note = 1\n', "unknown"),
])
def test_malformed_reviewed_entries_are_refused(tmp_path: Path, body: str, error: str) -> None:
    path = tmp_path / "eq.toml"
    path.write_text("[[mutant]]\n" + body, encoding="utf-8")
    with pytest.raises(ValueError, match=error):
        eq.load(path)


def test_a_key_listed_twice_is_refused(tmp_path: Path) -> None:
    entry = ('[[mutant]]\nkey = "k"\nline = "x"\nchange = "c"\nmutated = "y"\n'
             'kind = "equivalent"\nreason = "r"\n')
    path = tmp_path / "eq.toml"
    path.write_text(entry + entry, encoding="utf-8")
    with pytest.raises(ValueError, match="twice"):
        eq.load(path)


def test_entry_text_round_trips(snippet_mutants: list[Mutant], tmp_path: Path) -> None:
    m = next(x for x in snippet_mutants if x.operator == "unwrap")
    path = tmp_path / "eq.toml"
    path.write_text(eq.entry_text(m, "equivalent", 'a "quoted" reason'), encoding="utf-8")
    entries = eq.load(path)
    assert eq.problems(entries, snippet_mutants) == [] and entries[m.key].reason == \
        'a "quoted" reason'
    assert eq.problems(entries, []) and "no such mutant" in eq.problems(entries, [])[0]


def test_an_entry_names_which_of_two_like_mutants_it_means(tmp_path: Path) -> None:
    # f(0, 0) -> f(-1, 0) and f(0, -1): the same line and change; only `mutated` tells them apart
    mutants = [m for m in mutants_of_source("m.py", "def g(f):\n    f(0, 0)\n")
               if m.replacement == "-1"]
    assert sorted(m.mutated_text for m in mutants) == ["f(-1, 0)", "f(0, -1)"]
    first, second = mutants
    path = tmp_path / "eq.toml"
    path.write_text(eq.entry_text(first, "equivalent", "r").replace(
        repr(first.mutated_text).strip("'"), second.mutated_text), encoding="utf-8")
    found = eq.problems(eq.load(path), mutants)
    assert len(found) == 1 and second.mutated_text in found[0]


# --- classification of runs ------------------------------------------------------------

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{cases}
</testsuite></testsuites>"""


def junit(tmp_path: Path, *cases: str) -> Path:
    path = tmp_path / "j.xml"
    path.write_text(JUNIT.format(cases="".join(cases)), encoding="utf-8")
    return path


PASSED = '<testcase classname="conformance.test_bfc" name="test_ok" />'
FAILED = ('<testcase classname="conformance.test_bfc" name="test_split[5]"><failure '
          'message="AssertionError: allocated_size 512, expected 256 [BFC-4, BFC-3]">x'
          '</failure></testcase>')
TIMED_OUT = ('<testcase classname="conformance.test_fl" name="test_t"><failure '
             'message="Failed: Timeout &gt;45.0s">x</failure></testcase>')
IMPORT = ('<testcase classname="conformance.test_api" name="test_a"><error message="failed on '
          'setup with &quot;pytest.UsageError: cannot import runtime module \'m\'&quot;">x'
          '</error></testcase>')
SKIPPED = ('<testcase classname="conformance.test_vmem" name="test_v"><skipped '
           'message="NOT_SUPPORTED: runtime x does not declare capability \'vmem\'" />'
           '</testcase>')


@pytest.mark.parametrize("code,cases,expected", [
    (0, [PASSED], ("passed", "", None)),
    (1, [PASSED, FAILED], ("killed", "test", "BFC-4")),
    (1, [TIMED_OUT], ("killed", "timeout", None)),
    (1, [IMPORT], ("killed", "import", None)),
    (0, [PASSED, SKIPPED], ("killed", "skipped", None)),
    (None, [PASSED], ("passed", "", None)),          # every test passed, then a hang at exit
    (None, [], ("killed", "timeout", None)),
    (2, [PASSED], ("error", "", None)),
    (4, [], ("error", "", None)),
])
def test_runs_are_classified(tmp_path: Path, code, cases, expected) -> None:
    run = Run(("conformance/test_bfc.py",), code, 1.0, 1.0)
    classify(run, junit(tmp_path, *cases) if cases else None, "")
    assert (run.outcome, run.how, run.clause) == expected, run


def test_a_runtime_refused_before_any_test_is_killed_at_import() -> None:
    """Certification validates the runtime module first: one that does not import is a usage
    error (exit status 4) and never certified; other usage errors stay harness errors."""
    run = Run(("conformance/test_api.py",), 4, 1.0, 1.0)
    classify(run, None, "ERROR: cannot import runtime module 'mutant_runtime': importing it "
                        "raised TypeError: 'NoneType' object is not callable\n")
    assert (run.outcome, run.how) == ("killed", "import")
    assert run.message.startswith("ERROR: cannot import runtime module")
    other = Run(("conformance/test_api.py",), 4, 1.0, 1.0)
    classify(other, None, "ERROR: usage: unrecognized arguments: --bogus\n")
    assert other.outcome == "error"


def test_a_skip_the_reference_also_makes_is_no_kill(tmp_path: Path) -> None:
    run = Run(("conformance/test_vmem.py",), 0, 1.0, 1.0)
    classify(run, junit(tmp_path, SKIPPED), "",
             expected_skips=frozenset({"conformance.test_vmem::test_v"}))
    assert run.outcome == "passed"


# --- the report ------------------------------------------------------------------------

def result(key: str, outcome: str, module: str = "bfc_allocator.py", **kw) -> MutantResult:
    return MutantResult(key=key, module=module, function="f", operator="compare", line=1,
                        change="'<' -> '<='", line_text="if a < b:",
                        diff="--- a\n+++ b\n-if a < b:\n+if a <= b:\n", outcome=outcome, **kw)


def test_rate_leaves_out_the_reviewed_mutants() -> None:
    results = [result("a", "killed", how="test"), result("b", "killed", how="timeout"),
               result("c", "survived"), result("d", "equivalent", reason="r" * 20),
               result("e", "gpu-only", module="tensor.py", reason="r" * 20),
               result("f", "unspecified", module="worker.py", reason="r" * 20)]
    s = report.summary(results)
    assert (s["killed"], s["survived"], s["counted"], s["equivalent"], s["gpu-only"],
            s["unspecified"]) == (2, 1, 3, 1, 1, 1)
    assert s["kill_rate"] == round(2 / 3, 4)
    campaign = CampaignResult(Campaign(seed="1", sample=5), 100, {"bfc_allocator.py": 100},
                              results, None, 0.0, 1.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    data = report.to_json(campaign)
    text = report.to_markdown(data)
    assert "Kill rate **66.7 %**" in text
    assert "| bfc_allocator.py | 4 | 2 | 1 | 0 | 1 | 0 | 0 | 66.7 % |" in text
    assert "### c (survived)" in text and "+if a <= b:" in text
    rows = {r["module"]: r for r in data["by_module"]}
    assert rows["tensor.py"]["kill_rate"] is None


def test_rescore_applies_the_reviewed_list() -> None:
    results = [result("a", "killed"), result("c", "survived", runs=[Run((), 0, 1.0, 1.0)])]
    campaign = CampaignResult(Campaign(seed="1", sample=2), 10, {}, results, None, 0.0, 1.0,
                              (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    data = report.to_json(campaign)
    entries = {k: eq.Equivalent(k, "if a < b:", "'<' -> '<='", "if a <= b:", "equivalent", "r" * 20)
               for k in ("a", "c")}
    again = report.rescore(data, entries)
    outcomes = {m["key"]: (m["outcome"], m["list_mistake"]) for m in again["mutants"]}
    assert outcomes == {"a": ("killed", True), "c": ("equivalent", False)}
    assert again["summary"]["kill_rate"] == 1.0 and again["summary"]["list_mistakes"] == 1
    back = report.rescore(again, {})
    assert {m["key"]: m["outcome"] for m in back["mutants"]} == {"a": "killed", "c": "survived"}


# --- one real run ----------------------------------------------------------------------

def test_a_mutant_runs_in_a_copy_of_the_runtime(tmp_path: Path, runtime_population) -> None:
    """The unmutated copy passes; a mutant of ENV-1 is killed by its clause; the working
    tree is untouched."""
    module = "env.py"
    source = runtime_population.sources[module]
    mutant = next(m for m in runtime_population.mutants
                  if m.module == module and m.function == "read_bool_from_env_var"
                  and m.operator == "compare" and m.original == "in")
    workspace = Workspace(tmp_path / "ws")
    options = Options(mutant_timeout_s=120, test_timeout_s=60)
    clean = run_pytest(workspace, ("conformance/test_api.py",), options, tag="clean")
    assert clean.outcome == "passed", clean
    with workspace.mutated(mutant, source):
        run = run_pytest(workspace, ("conformance/test_env.py",), options, tag="mutant")
    assert (run.outcome, run.how, run.clause) == ("killed", "test", "ENV-1"), run
    assert (workspace.package / module).read_text(encoding="utf-8") == source
    assert (CONFORMANCE_DIR.parent / "reference_runtime" / module).read_text(
        encoding="utf-8") == source
    assert run.wall_s > 0 and run.cpu_s > 0


# --- the command line: bad arguments are usage errors before anything runs -----------------

@pytest.mark.parametrize("args, needle", [
    (["run", "--mutant-timeout-s", "0"], "--mutant-timeout-s"),
    (["run", "--mutant-timeout-s", "-1"], "--mutant-timeout-s"),
    (["run", "--mutant-timeout-s", "nan"], "--mutant-timeout-s"),
    (["run", "--mutant-timeout-s", "inf"], "--mutant-timeout-s"),
    (["run", "--test-timeout-s", "0"], "--test-timeout-s"),
    (["run", "--sample", "-3"], "--sample"),
    (["run", "--sample", "ten"], "--sample"),
    (["run", "--seed", "x/../../../escaped"], "--seed"),
    (["run", "--seed", "1\n"], "--seed"),
    (["run", "--jobs", "0"], "--jobs"),
    (["run", "--jobs", str((os.cpu_count() or 1) + 1)], "--jobs"),
    (["run", "--min-kill-rate", "nan"], "--min-kill-rate"),
    (["list", "--seed", "../x"], "--seed"),
])
def test_bad_arguments_are_usage_errors(args: list[str], needle: str,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import mutation.__main__ as cli

    def started(*a: object, **k: object) -> None:
        raise AssertionError("the campaign started")

    monkeypatch.setattr(cli, "population", started)
    monkeypatch.setattr(cli, "baseline", started)
    with pytest.raises(SystemExit) as stopped:
        cli.main(args)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert needle in err.splitlines()[-1] and "Traceback" not in err


def test_an_unusable_out_folder_is_found_before_the_campaign(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import mutation.__main__ as cli
    started = []
    monkeypatch.setattr(cli, "baseline", lambda *a, **k: started.append("baseline"))
    monkeypatch.setattr(cli, "population", lambda *a, **k: started.append("population"))
    (tmp_path / "a_file").write_text("x")
    for out in (tmp_path / "a_file", tmp_path / "a_file" / "below", Path("/dev/null")):
        assert cli.main(["run", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(out) in err, err
    assert started == []
    monkeypatch.setattr(cli, "population", lambda *a, **k: type("P", (), {"mutants": ()})())
    for module in ("../../../etc/passwd", "conformance/spec.py", "conformance/nothing.py"):
        assert cli.main(["run", "--out", str(tmp_path / "out"), "--modules", module]) == 2
        assert "not a conformance module" in capsys.readouterr().err
    with pytest.raises(cli.UsageError, match="outside"):
        cli.inside(tmp_path, "../escaped")
    assert cli.inside(tmp_path, "20260101-seed-1") == tmp_path.resolve() / "20260101-seed-1"


def test_list_and_rescore_refuse_what_they_cannot_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fixtures.nemesis import make_fifo
    from mutation.__main__ import main
    assert main(["list", "--at", "bfc_allocator.py:x"]) == 2
    assert "LINE must be a line number" in capsys.readouterr().err
    fifo = tmp_path / "fifo.json"
    fifo.write_text("")
    make_fifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "list.json").write_text("[]")
    for path in (fifo, Path("/dev/zero"), deep, tmp_path / "list.json", tmp_path / "none"):
        assert main(["rescore", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
