"""The mutation tool's own logic (``mutation/``): generation, sampling, selection, the
reviewed list of equivalent mutants, the classification of runs and the report.

These tests are fast (one real mutant run of a few seconds at the end); the campaign itself,
``tox -e mutation``, is not run in CI.
"""

from __future__ import annotations

import json
import os
import random
import textwrap
from pathlib import Path

import pytest

from mutation import equivalents as eq
from mutation import report
from mutation import runner as runner_mod
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
    problems = eq.problems(entries, list(runtime_population.mutants)
                           + list(population(generator="mutmut").mutants))
    assert not problems, "stale entries in mutation/equivalents.toml:\n" + "\n".join(problems)
    for entry in entries.values():
        assert len(entry.reason) >= 20, f"{entry.key}: the reason must say why ({entry.reason!r})"


def test_every_unspecified_entry_names_its_clause_or_why_it_stays_open() -> None:
    root = CONFORMANCE_DIR.parent
    spec = (root / "SPEC.md").read_text(encoding="utf-8")
    entries = eq.load()
    assert any(e.kind == "unspecified" for e in entries.values())
    problems = eq.unspecified_reason_problems(entries, spec, root)
    assert not problems, "\n".join(problems)
    bad = {"k": eq.Equivalent("k", "x", "c", "y", "unspecified", "the wording is free here")}
    assert "'open: ' or 'within" in eq.unspecified_reason_problems(bad, spec, root)[0]
    for reason, needle in (
            ("within NOPE-1 (conformance/test_bfc.py): x", "no clause"),
            ("within BFC-6 (conformance/nothing.py): x", "no conformance module"),
            ("within BFC-6 (conformance/test_env.py): x", "tags none"),
            ("within BFC-6 (conformance/test_bfc.py::test_absent): x", "no test")):
        bad = {"k": eq.Equivalent("k", "x", "c", "y", "unspecified", reason)}
        assert needle in " ".join(eq.unspecified_reason_problems(bad, spec, root)), reason


@pytest.mark.parametrize("body,error", [
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "equivalent"\n', "missing"),
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "maybe"\nreason = "r"\n', "kind"),
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "equivalent"\nreason = "r"\n'
     'note = 1\n', "unknown"),
    ('key = "k"\nline = "x"\nchange = "c"\nmutated = "y"\nkind = "equivalent"\nreason = " "\n',
     "missing"),
    ('key = "k"\nline = "x"\nchange = "c"\nkind = "equivalent"\nreason = "r"\n', "missing"),
])
def test_malformed_reviewed_entries_are_refused(tmp_path: Path, body: str, error: str) -> None:
    path = tmp_path / "eq.toml"
    path.write_text("[[mutant]]\n" + body, encoding="utf-8")
    with pytest.raises(ValueError, match=error):
        eq.load(path)


def test_a_deleted_line_is_reviewed_with_an_empty_mutated_line(tmp_path: Path) -> None:
    """A mutant that deletes a whole line (a decorator) leaves nothing: its entry's
    ``mutated`` is the empty string, which every other field may not be."""
    path = tmp_path / "eq.toml"
    path.write_text('[[mutant]]\nkey = "k"\nline = "@x"\nchange = "c"\nmutated = ""\n'
                    'kind = "equivalent"\nreason = "r"\n', encoding="utf-8")
    assert eq.load(path)["k"].mutated == ""


@pytest.mark.parametrize("text, error", [
    ("[[mutant]]\nkey = \"k\"\nkey = \"j\"\n", "Cannot overwrite"),
    ("not toml at all\n", "after a key"),
    ("mutant = 1\n", "array of tables"),
    ("mutant = [1, 2]\n", "array of tables"),
])
def test_a_reviewed_list_that_is_no_toml_is_a_usage_error(
        tmp_path: Path, text: str, error: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import mutation.__main__ as cli
    path = tmp_path / "eq.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(eq.ReviewedListError, match=error):
        eq.load(path)
    original = eq.load
    monkeypatch.setattr(eq, "load", lambda p=path: original(p))
    assert cli.main(["check"]) == 2
    err = capsys.readouterr().err
    assert error in err and "Traceback" not in err and str(path) in err


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


@pytest.mark.parametrize("quiet_s,expected", [
    (None, "killed"),            # silence unknown: as before
    (44.9, "error"),             # the last test ended within the per-test limit: still going
    (45.0, "killed"),            # silent for the whole per-test limit: a hang
    (300.0, "killed")])
def test_a_run_ended_by_the_wall_limit_while_progressing_has_no_verdict(quiet_s, expected
                                                                         ) -> None:
    """A slow host must not turn a passing mutant into a kill: at the wall limit, a run whose
    output grew within the per-test limit is an error (no verdict), not a timeout kill."""
    run = Run(("conformance/test_bfc.py",), None, 300.0, 80.0, quiet_s=quiet_s,
              test_timeout_s=45 if quiet_s is not None else None)
    classify(run, None, "")
    assert run.outcome == expected, run
    if expected == "error":
        assert "still progressing" in run.note and "--mutant-timeout-s" in run.note


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
    refused = Run(("conformance/test_api.py",), 4, 1.0, 1.0)
    classify(refused, None, "ERROR: runtime 'mutant_runtime' declares unknown capabilities "
                            "['XXworkloadXX'] (SPEC.md API-2); known: bfc\n")
    assert (refused.outcome, refused.how) == ("killed", "refused")
    assert "unknown capabilities" in refused.message


def test_a_skip_the_reference_also_makes_is_no_kill(tmp_path: Path) -> None:
    run = Run(("conformance/test_vmem.py",), 0, 1.0, 1.0)
    classify(run, junit(tmp_path, SKIPPED), "",
             expected_skips=frozenset({"conformance.test_vmem::test_v"}))
    assert run.outcome == "passed"


def test_a_baseline_expects_every_skip_of_its_host(tmp_path: Path) -> None:
    # On a one-GPU runner the unmutated copy skips GPU-12's two-real-GPU test NOT_SUPPORTED:
    # the baseline is what defines the expected skips, so it passes; a mutant's run that
    # makes the same skip without the baseline's list is still a kill.
    from mutation.runner import EVERY_SKIP
    run = Run(("conformance/test_vmem.py",), 0, 1.0, 1.0)
    classify(run, junit(tmp_path, SKIPPED), "", expected_skips=EVERY_SKIP)
    assert (run.outcome, run.skipped) == ("passed", ["conformance.test_vmem::test_v"])
    mutant = Run(("conformance/test_vmem.py",), 0, 1.0, 1.0)
    classify(mutant, junit(tmp_path, SKIPPED), "", expected_skips=frozenset())
    assert (mutant.outcome, mutant.how) == ("killed", "skipped")


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
    # the unmutated copy, ended by a wall limit far below what the module needs: a slow
    # host, reported as such (no verdict), never as a kill
    slow = run_pytest(workspace, ("conformance/test_env.py", "conformance/test_bfc.py",
                                  "conformance/test_executor.py"),   # far beyond 2 s anywhere
                      Options(mutant_timeout_s=2, test_timeout_s=60), tag="slow")
    assert slow.exit_code is None and slow.outcome == "error", slow
    assert "still progressing" in slow.note, slow


def test_mutant_runs_and_their_subprocesses_use_the_simulated_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the host's ANTMAN_DEVICE says (cuda on a GPU runner, or unset: auto, which
    takes a GPU where there is one), a mutant's pytest run and the workers and workload
    commands it starts get the simulated device, as the measure's reports say."""
    workspace = Workspace(tmp_path / "ws")
    for host in ("cuda", "auto", None):
        if host is None:
            monkeypatch.delenv("ANTMAN_DEVICE", raising=False)
        else:
            monkeypatch.setenv("ANTMAN_DEVICE", host)
        env = runner_mod._environment(workspace)
        assert env["ANTMAN_DEVICE"] == "sim", (host, env.get("ANTMAN_DEVICE"))
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(workspace.base)


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


@pytest.mark.parametrize("value", ["b58c0ef", "B58C0EF", "not a commit", "ab" * 20 + "a",
                                   "ab" * 20 + "\nx", "cd" * 32 + "c"])
def test_a_suite_commit_that_names_no_commit_is_a_usage_error(
        value: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An abbreviated ANTMAN_SUITE_COMMIT was ignored without a word, so a copied tree's stale
    git metadata was named in the report of a whole campaign: now nothing starts."""
    import mutation.__main__ as cli

    def started(*a: object, **k: object) -> None:
        raise AssertionError("the campaign started")

    monkeypatch.setattr(cli, "population", started)
    monkeypatch.setattr(cli, "baseline", started)
    monkeypatch.setenv("ANTMAN_SUITE_COMMIT", value)
    assert cli.main(["run", "--seed", "1", "--sample", "1"]) == 2
    err = capsys.readouterr().err
    assert "ANTMAN_SUITE_COMMIT must be a full commit hash" in err, err
    assert repr(value.strip()[:80]) in err and "Traceback" not in err, err


@pytest.mark.parametrize("value, problem", [
    (None, False), ("", False), ("  ", False), ("ab" * 20, False), ("AB" * 20 + "\n", False),
    ("cd" * 32, False), ("ab" * 20 + "a", True), ("a" * 39, True), ("cd" * 32 + "c", True),
    ("g" * 40, True)])
def test_which_suite_commits_name_a_commit(value: str | None, problem: bool) -> None:
    from reports import environment
    env = {} if value is None else {"ANTMAN_SUITE_COMMIT": value}
    assert (environment.commit_variable_problem(env) is not None) is problem


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
    # a second run's latest-seed link: the link itself, not the folder it points to (a run
    # into the same --out used to end with IsADirectoryError when it replaced the link)
    (tmp_path / "20260101-seed-1").mkdir()
    (tmp_path / "latest-seed-1").symlink_to("20260101-seed-1")
    link = cli.inside(tmp_path, "latest-seed-1")
    assert link.is_symlink() and link == tmp_path.resolve() / "latest-seed-1"


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


# --- the second mutant source: mutmut's documented operators -----------------------------

MUTMUT_SNIPPET = textwrap.dedent('''\
    """Docstring 1."""
    import functools

    LIMIT = 10
    RATE = 0.5
    NAME = "bfc"
    __all__ = ["f"]


    @functools.lru_cache
    def f(x, y=2, z=None):
        """Docstring 2."""
        total = x + y
        total += 1
        for i in range(3):
            if i is None or i in (x,):
                break
            if i < x and x == y:
                continue
        key = lambda v: v * 2
        quiet = lambda: None
        w = None
        keep = 7  # pragma: no mutate
        if w is None and total > 100:
            log.warning("total %d over %d", total, LIMIT + 1)
            raise ValueError("too large: " + str(total - 1))
        return total is not None and y not in (True, False)
    ''')


@pytest.fixture(scope="module")
def mutmut_snippet_mutants() -> list[Mutant]:
    from mutation.mutmut_operators import mutmut_mutants_of_source
    return mutmut_mutants_of_source("snippet.py", MUTMUT_SNIPPET)


@pytest.mark.parametrize("operator, original, replacement", [
    ("number", "10", "11"), ("number", "0.5", "1.5"), ("number", "3", "4"),
    ("string", '"bfc"', '"XXbfcXX"'),
    ("keyword", "True", "False"), ("keyword", "False", "True"), ("keyword", "None", '""'),
    ("keyword", "is", "is not"), ("keyword", "is not", "is"), ("keyword", "in", "not in"),
    ("keyword", "not in", "in"), ("keyword", "break", "continue"),
    ("keyword", "continue", "break"), ("keyword", "and", "or"), ("keyword", "or", "and"),
    ("operator", "+", "-"), ("operator", "*", "/"), ("operator", "+=", "-="),
    ("comparison", "<", "<="), ("comparison", "==", "!="),
    ("assignment", "x + y", "None"), ("assignment", "None", '""'),
    ("augmented", "+=", "="),
    ("decorator", "@functools.lru_cache", ""),
    ("lambda", "v * 2", "None"), ("lambda", "None", "0"),
    ("default", "2", "None"), ("number", "2", "3"),
])
def test_each_mutmut_operator_makes_its_mutant(mutmut_snippet_mutants: list[Mutant],
                                               operator: str, original: str,
                                               replacement: str) -> None:
    assert (operator, original, replacement) in changes(mutmut_snippet_mutants)


def test_mutmut_mutants_are_exact_edits_that_compile(mutmut_snippet_mutants) -> None:
    from mutation.mutmut_operators import MUTMUT_OPERATORS
    assert {m.operator for m in mutmut_snippet_mutants} == set(MUTMUT_OPERATORS)
    for m in mutmut_snippet_mutants:
        assert compiles(m, MUTMUT_SNIPPET), m
        after = m.apply(MUTMUT_SNIPPET)
        assert after.count("\n") == MUTMUT_SNIPPET.count("\n"), m    # no line moves
    decorator = next(m for m in mutmut_snippet_mutants if m.operator == "decorator")
    assert "@" not in decorator.apply(MUTMUT_SNIPPET)
    assert len({m.key for m in mutmut_snippet_mutants}) == len(mutmut_snippet_mutants)


def test_what_mutmut_generator_leaves_alone(mutmut_snippet_mutants) -> None:
    touched = {m.line for m in mutmut_snippet_mutants}
    lines = MUTMUT_SNIPPET.splitlines()
    for needle in ('"""Docstring 1."""', "import functools", '__all__ = ["f"]',
                   '"""Docstring 2."""', "keep = 7  # pragma: no mutate",
                   'log.warning("total %d over %d", total, LIMIT + 1)',
                   'raise ValueError("too large: " + str(total - 1))'):
        number = next(i for i, ln in enumerate(lines, 1) if ln.strip() == needle)
        assert number not in touched, needle


def test_mutmut_keys_never_collide_with_the_reviewed_list() -> None:
    from mutation.mutmut_operators import MUTMUT_OPERATORS
    from mutation.operators import OPERATORS
    assert not set(MUTMUT_OPERATORS) & set(OPERATORS)
    entries = eq.load()
    assert all(e.key.split(":")[2] in set(OPERATORS) | set(MUTMUT_OPERATORS)
               for e in entries.values())


def test_mutmut_samples_are_seeded_and_order_free(mutmut_snippet_mutants) -> None:
    a = draw(mutmut_snippet_mutants, "7", 5)
    shuffled = list(mutmut_snippet_mutants)
    random.Random(3).shuffle(shuffled)
    assert [m.key for m in draw(shuffled, "7", 5)] == [m.key for m in a]
    assert [m.key for m in draw(mutmut_snippet_mutants, "8", 5)] != [m.key for m in a]


def test_the_generator_is_chosen_by_name(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MUTMUT_SNIPPET, encoding="utf-8")
    suite = population(tmp_path, ["m.py"])
    other = population(tmp_path, ["m.py"], generator="mutmut")
    from mutation.mutmut_operators import MUTMUT_OPERATORS
    from mutation.operators import OPERATORS
    assert {m.operator for m in suite.mutants} <= set(OPERATORS)
    assert {m.operator for m in other.mutants} == set(MUTMUT_OPERATORS)


# --- whole-suite mode --------------------------------------------------------------------

def test_whole_suite_runs_every_module_in_one_run_map_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mutation.campaign as campaign_mod
    from mutation.targets import complement, observers
    calls: list[tuple[str, ...]] = []
    killer = {"test": None}

    def fake_run(workspace, modules, options, *, tag="run", expected_skips=None) -> Run:
        calls.append(tuple(modules))
        run = Run(tuple(modules), 0, 1.0, 1.0, outcome="passed")
        if killer["test"]:
            run.exit_code, run.outcome, run.how, run.test = 1, "killed", "test", killer["test"]
        return run

    class FakeWorkspace:
        from contextlib import nullcontext

        def mutated(self, mutant, source):
            return self.nullcontext()

    monkeypatch.setattr(campaign_mod, "run_pytest", fake_run)
    source = "def f(a):\n    return a < 1\n"
    mutant = mutants_of_source("env.py", source)[0]
    whole = Campaign(seed="1", sample=1, whole_suite=True, generator="mutmut")
    r = campaign_mod.evaluate(mutant, source, FakeWorkspace(), whole, None)   # a survivor
    assert calls == [observers("env.py") + complement("env.py")] and r.outcome == "survived"
    assert sorted(calls[0]) == sorted(campaign_mod.whole_suite_modules())
    calls.clear()
    campaign_mod.evaluate(mutant, source, FakeWorkspace(), Campaign(seed="1", sample=1), None)
    assert calls == [observers("env.py"), complement("env.py")]        # the map, confirmed
    calls.clear()
    killer["test"] = "conformance.test_env::test_x"
    assert campaign_mod.evaluate(mutant, source, FakeWorkspace(), whole, None).map_gap is None
    killer["test"] = "conformance.test_worker_protocol.TestA::test_y"
    r = campaign_mod.evaluate(mutant, source, FakeWorkspace(), whole, None)
    assert (r.outcome, r.map_gap) == ("killed", "conformance/test_worker_protocol.py")


def test_run_passes_generator_and_mode_to_the_campaign_and_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import mutation.__main__ as cli
    seen: dict[str, object] = {}

    def fake_population(*a, **k):
        seen["generator"] = k.get("generator")
        return type("P", (), {"mutants": (), "by_key": lambda self: {}})()

    def fake_campaign(pop, entries, campaign, **kw):
        seen["campaign"] = campaign
        return CampaignResult(campaign, 0, {}, [result("a", "killed", how="test"),
                                                result("b", "survived")],
                              None, 0.0, 1.0, (0.0,) * 3, (0.0,) * 3)

    monkeypatch.setattr(cli, "population", fake_population)
    monkeypatch.setattr(cli, "reviewable_mutants", lambda: [])
    monkeypatch.setattr(cli, "run_campaign", fake_campaign)
    code = cli.main(["run", "--generator", "mutmut", "--whole-suite", "--seed", "7",
                     "--sample", "2", "--no-baseline", "--out", str(tmp_path)])
    assert code == 0
    c = seen["campaign"]
    assert seen["generator"] == "mutmut" and (c.generator, c.whole_suite) == ("mutmut", True)
    out = capsys.readouterr().out
    assert "kill rate 50.0 % (95 % CI 9.4-90.5 %, Wilson" in out
    data = cli.read_report(tmp_path / "latest-mutmut-seed-7")
    assert (data["campaign"]["generator"], data["campaign"]["mode"]) == ("mutmut", "whole-suite")
    assert data["summary"]["kill_rate_ci95"] == [0.0945, 0.9055]
    from mutation.journal import fingerprint
    assert data["suite"]["code_fingerprint"] == fingerprint({})     # what ran, without git
    text = (tmp_path / "latest-mutmut-seed-7" / "mutation.md").read_text(encoding="utf-8")
    assert "Mutant source `mutmut`" in text and "whole conformance suite" in text
    assert cli.main(["rescore", str(tmp_path / "latest-mutmut-seed-7"), "--into",
                     str(tmp_path / "again")]) == 0                 # a written report reads back
    assert "kill rate 50.0 % (95 % CI 9.4-90.5 %, Wilson" in capsys.readouterr().out
    assert cli.main(["run", "--whole-suite", "--modules", "conformance/test_env.py",
                     "--out", str(tmp_path)]) == 2
    assert "exclude each other" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["run", "--generator", "cosmic"])


# --- confidence intervals ----------------------------------------------------------------

@pytest.mark.parametrize("k, n, low, high", [
    # Newcombe (1998), Statistics in Medicine 17:857, table I, method 3 (Wilson score)
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718), (29, 29, 0.883, 1.0), (0, 10, 0.0, 0.2775),
])
def test_wilson_interval_matches_published_values(k: int, n: int, low: float,
                                                  high: float) -> None:
    lo, hi = report.wilson_interval(k, n)
    assert (round(lo, 4), round(hi, 4)) == (low, high)
    assert lo <= k / n <= hi


def test_wilson_interval_edge_cases() -> None:
    assert report.wilson_interval(0, 0) is None
    with pytest.raises(ValueError):
        report.wilson_interval(3, 2)
    narrow, wide = report.wilson_interval(90, 100), report.wilson_interval(9, 10)
    assert wide[0] < narrow[0] and narrow[1] < wide[1]       # more mutants, narrower interval
    s = report.summary([result("a", "killed"), result("b", "equivalent", reason="r" * 20)])
    assert s["kill_rate_ci95"] == [0.2065, 1.0]
    assert report.summary([])["kill_rate_ci95"] is None


def test_sweep_selects_every_lock_notify_and_snapshot(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from mutation import sweep
    from mutation.__main__ import main
    from mutation.sampling import population
    pop = population()
    chosen = sweep.select(pop)
    kinds = {kind: [m for k, m in chosen if k == kind] for kind in sweep.KINDS}
    assert {m.key for m in kinds["lock"]} == {m.key for m in pop.mutants
                                              if m.operator == "unlock"}
    notify = {m.key for m in kinds["notify"]}
    assert "gpu_op_manager.py:GpuOpManager.enqueue:delete:e9e006a1" in notify  # commented line
    assert all(m.operator == "delete" for m in kinds["notify"]) and len(notify) >= 10
    snapshot = {m.describe() for m in kinds["snapshot"]}
    assert "'list(self._devices)' -> '(self._devices)'" in snapshot
    assert not any("shape" in d for d in snapshot), "a kernel's tuple(shape) is no snapshot"
    for argv in (["sweep", "--kinds", "locks"], ["sweep", "--kinds", ","],
                 ["sweep", "--repeat", "0"], ["sweep", "--at", "../SPEC.md"]):
        try:
            status = main(argv)
        except SystemExit as exc:          # argparse's usage error
            status = exc.code
        assert status == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and argv[-1] in err.strip().splitlines()[-1], err


def test_index_lists_every_report_and_keeps_the_intro(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from mutation import index
    from mutation.__main__ import main
    results = [result("a", "killed", how="test"), result("b", "survived")]
    campaign = CampaignResult(Campaign(seed="9", sample=2, generator="mutmut"), 10, {}, results,
                              None, 0.0, 1.0, (0.0,) * 3, (0.0,) * 3)
    report.write(campaign, tmp_path / "mutmut-seed-9")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "mutation.json").write_text("{not json")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text(json.dumps(
        {"commit": "abc", "repeat": 10, "counts": {"lock": {"caught": 3, "missed": 1,
                                                            "equivalent": 2}}}))
    (tmp_path / "README.md").write_text(f"# Hand-written\n\nkept\n{index.INTRO_END}\nold table\n")
    assert main(["index", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("# Hand-written\n\nkept\n") and "old table" not in text
    assert "| mutmut-seed-9 | mutmut | 9 | map |" in text and "| 1/2 | 50.0 % | 9.4-90.5 % |" in text
    assert "| sweep | lock | abc | 10 | 3 | 0 | 1 | 0 | 2 |" in text
    assert "Unreadable reports (left out): broken" in text
    assert main(["index", str(tmp_path / "README.md")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_sweep_confirms_outside_the_map_and_reports_the_gap(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    """A sweep run the map's modules pass goes on through the rest of the suite (the campaign's
    confirmation), so a test outside the map counts as a kill and its module is reported as
    the map's gap, in sweep.json and in the table."""
    from mutation import sweep
    pop = population()
    kind, mutant = next((k, m) for k, m in sweep.select(pop) if k == "lock")
    seen: dict[str, object] = {}

    def fake_campaign(population, equivalents, campaign, **kw):
        seen["confirm"] = campaign.confirm
        results = [result(mutant.key, "killed", module=mutant.module, how="test",
                          test="conformance.test_session::t", clause="API-9",
                          map_gap="conformance/test_session.py")] * 2
        results.append(result(mutant.key, "killed", module=mutant.module, how="test",
                              test="conformance.test_devices::t", clause="DEVICE-1"))
        return CampaignResult(campaign, len(results), {}, results, None, 0.0, 1.0,
                              (0.0,) * 3, (0.0,) * 3)

    monkeypatch.setattr(sweep, "run_campaign", fake_campaign)
    data = sweep.run_sweep(pop, {}, [(kind, mutant)], repeat=3, jobs=1, options=Options(),
                           work_dir=tmp_path, baseline_run=None)
    assert seen["confirm"] is True
    row = data["mutants"][0]
    assert (row["verdict"], row["killed"], row["runs"]) == ("caught", 3, 3)
    assert row["map_gaps"] == ["conformance/test_session.py"]
    assert "| conformance/test_session.py |" in sweep.to_markdown(data, "h")


def test_an_untagged_kill_is_blamed_on_the_tests_only_clause(tmp_path: Path) -> None:
    """As the certification report blames an untagged failure: a kill whose message names no
    clause is the test's only clause; a test marked with several clauses names none."""
    from mutation.marks import marked_clauses
    from mutation.runner import first_failure
    case = ('<testcase classname="conformance.{m}" name="{t}"><{kind} message="{msg}"/>'
            '</testcase>')
    cases = {
        ("test_resource_management", "test_bad_input_keeps_the_job_running", "error",
         "RuntimeError: dictionary changed size during iteration"): "RM-5",
        ("test_session", "test_the_context_keeps_its_sessions_under_its_lock[close]",
         "failure", "AssertionError: boom [SESS-1]"): "SESS-1",
        ("test_executor", "test_a_run_of_a_deep_graph_of_diamonds_ends", "failure",
         "Failed: Timeout (&gt;45.0s) from pytest-timeout."): "EXEC-10",
        ("test_session_run_actions", "test_phases_have_no_bound", "failure",
         "Failed: Timeout (&gt;45.0s) from pytest-timeout."): None,
        ("test_nowhere", "test_x", "failure", "no tag"): None,
    }
    assert marked_clauses("conformance.test_session_run_actions::test_phases_have_no_bound"
                          ) == ("REG-5", "REG-2")
    for (module, test, kind, msg), clause in cases.items():
        junit = tmp_path / "junit.xml"
        junit.write_text("<testsuites><testsuite>"
                         + case.format(m=module, t=test, kind=kind, msg=msg)
                         + "</testsuite></testsuites>")
        assert first_failure(junit) == (f"conformance.{module}::{test}",
                                        msg.replace("&gt;", ">"), clause), test


def test_a_report_names_the_commit_its_operator_names_for_a_copied_tree(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the working tree can carry stale git metadata: ANTMAN_SUITE_COMMIT names the
    commit instead, as in the certification report, and the report says where it came from."""
    head = report._git("rev-parse", "HEAD")
    named = "0123456789abcdef0123456789abcdef01234567"
    given = report.suite_commit({"ANTMAN_SUITE_COMMIT": named.upper()})
    assert given == {"commit": named, "uncommitted_changes": None, "commit_source": "env"}
    assert report.commit_text(given) == f"{named} (named by ANTMAN_SUITE_COMMIT)"
    for environ in ({}, {"ANTMAN_SUITE_COMMIT": head}, {"ANTMAN_SUITE_COMMIT": "not-a-sha"}):
        found = report.suite_commit(environ)
        assert found["commit"] == (head or None) and found["commit_source"] == "git", found
        assert isinstance(found["uncommitted_changes"], bool), found
    assert report.commit_text({"commit": "abc", "uncommitted_changes": True,
                               "commit_source": "git"}) == "abc with uncommitted changes"


def test_run_at_a_module_runs_its_whole_population_in_source_order(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``run --at MODULE[:LINE]`` runs every mutant of the module (or line), each once, in
    source order, and the report says they were chosen, not sampled; a module that is not
    mutated, a line with no mutant, and ``--at`` with ``--key`` are usage errors."""
    import mutation.__main__ as cli
    from mutation.sampling import population as real_population
    seen: dict[str, object] = {}

    def fake_campaign(pop, entries, campaign, **kw):
        seen["keys"] = campaign.keys
        return CampaignResult(campaign, 0, {}, [result(k, "killed", how="test")
                                                for k in campaign.keys],
                              None, 0.0, 1.0, (0.0,) * 3, (0.0,) * 3)

    monkeypatch.setattr(cli, "reviewable_mutants", lambda: [])
    monkeypatch.setattr(cli, "run_campaign", fake_campaign)
    pop = real_population(generator="suite")
    clock_keys = [m.key for m in pop.mutants if m.module == "clock.py"]
    line = pop.by_key()[clock_keys[-1]].line
    on_line = [m.key for m in pop.mutants if m.module == "clock.py" and m.line == line]
    assert len(clock_keys) > len(on_line) >= 1
    assert cli.main(["run", "--at", "clock.py", "--at", f"clock.py:{line}", "--no-baseline",
                     "--out", str(tmp_path)]) == 0
    assert list(seen["keys"]) == clock_keys              # the line's mutants are not run twice
    out = capsys.readouterr().out
    assert f"{len(clock_keys)} given by key or module" in out and "sample 150" not in out
    text = (tmp_path / "latest-seed-keys" / "mutation.md").read_text(encoding="utf-8")
    assert f"the {len(clock_keys)} mutants given by key or module (not a random sample" in text
    assert cli.main(["run", "--at", f"clock.py:{line}", "--no-baseline",
                     "--out", str(tmp_path)]) == 0
    assert list(seen["keys"]) == on_line
    capsys.readouterr()
    for argv, needle in ((["--at", "nope.py"], "is not a mutated runtime module"),
                         (["--at", "clock.py:1"], "no mutant on that line"),
                         (["--at", "clock.py:x"], "LINE must be a line number"),
                         (["--at", "clock.py", "--key", clock_keys[0]], "exclude each other")):
        seen.clear()
        assert cli.main(["run", *argv, "--no-baseline", "--out", str(tmp_path)]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and not seen, (argv, err)
