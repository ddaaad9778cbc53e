"""A campaign's journal (``mutation/journal.py``): a stopped campaign resumes where it stopped,
and only on the code and the campaign its results were measured on.

The pytest runs are faked (``run_pytest`` returns a verdict per mutant): what is under test is
which mutants run again, which results are kept, and which journals are refused.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import pytest

import mutation.campaign as campaign_mod
from mutation.campaign import Campaign, run_campaign, sample_of
from mutation.journal import Journal, JournalError, fingerprint, result_from_json
from mutation.runner import Run
from mutation.sampling import population

SOURCE = "def f(a, b):\n    if a < b and a > 0:\n        return a + 1\n    return b - 2\n"


class FakeWorkspace:
    def __init__(self, base: Path) -> None:
        pass

    def mutated(self, mutant, source):
        return nullcontext()


@pytest.fixture
def pop(tmp_path: Path):
    (tmp_path / "env.py").write_text(SOURCE, encoding="utf-8")
    return population(tmp_path, ["env.py"])


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tags of the faked pytest runs; every mutant is killed by ``test_x``."""
    seen: list[str] = []

    def fake_run(workspace, modules, options, *, tag="run", expected_skips=None) -> Run:
        seen.append(tag)
        return Run(tuple(modules), 1, 0.5, 0.5, outcome="killed", how="test",
                   test="conformance.test_env::test_x", clause="ENV-1")

    monkeypatch.setattr(campaign_mod, "run_pytest", fake_run)
    monkeypatch.setattr(campaign_mod, "Workspace", FakeWorkspace)
    return seen


def journal_for(path: Path, pop, campaign: Campaign, settings: str = "a") -> Journal:
    return Journal(path, fingerprint({"s": settings}),
                   [m.key for m in sample_of(pop, campaign)])


def campaign_run(tmp_path: Path, pop, campaign: Campaign, journal: Journal,
                 baseline: Run | None = None):
    journal.start(baseline)
    try:
        return run_campaign(pop, {}, campaign, work_dir=tmp_path / "work",
                            baseline_run=baseline, journal=journal)
    finally:
        journal.close()


def test_a_stopped_campaign_runs_only_what_its_journal_lacks(tmp_path: Path, pop,
                                                             runs: list[str]) -> None:
    campaign = Campaign(seed="3", sample=4, confirm=False)
    path = tmp_path / "journal-seed-3.jsonl"
    baseline = Run(("conformance/test_env.py",), 0, 70.0, 69.0, outcome="passed",
                   skipped=["conformance.test_env::test_gpu"])
    first = campaign_run(tmp_path, pop, campaign, journal_for(path, pop, campaign), baseline)
    assert len(runs) == 4 and first.resumed == 0
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(lines) == 5                                 # the header and four results
    # Stopped after two results, the third written in part: the third runs again.
    path.write_text("".join(lines[:3]) + lines[3][:40], encoding="utf-8")
    runs.clear()
    journal = journal_for(path, pop, campaign)
    journal.load()
    assert sorted(journal.done) == [0, 1]
    assert journal.baseline is not None and journal.baseline.skipped == baseline.skipped
    second = campaign_run(tmp_path, pop, campaign, journal, journal.baseline)
    assert len(runs) == 2 and second.resumed == 2
    assert [r.key for r in second.results] == [r.key for r in first.results]
    assert [r.to_json() for r in second.results] == [r.to_json() for r in first.results]
    # The journal now holds the whole campaign again: nothing is left to run.
    runs.clear()
    journal = journal_for(path, pop, campaign)
    journal.load()
    assert sorted(journal.done) == [0, 1, 2, 3]
    campaign_run(tmp_path, pop, campaign, journal)
    assert runs == []


def test_a_result_without_a_verdict_runs_again(tmp_path: Path, pop, runs: list[str]) -> None:
    campaign = Campaign(seed="3", sample=2, confirm=False)
    path = tmp_path / "j.jsonl"
    campaign_run(tmp_path, pop, campaign, journal_for(path, pop, campaign))
    header, *results = path.read_text(encoding="utf-8").splitlines()
    entry = json.loads(results[1])
    entry["result"]["outcome"] = "error"
    path.write_text("\n".join([header, results[0], json.dumps(entry)]) + "\n", encoding="utf-8")
    journal = journal_for(path, pop, campaign)
    journal.load()
    assert sorted(journal.done) == [0]


def test_a_journal_of_other_code_or_another_campaign_is_refused(tmp_path: Path, pop,
                                                                runs: list[str]) -> None:
    campaign = Campaign(seed="3", sample=2, confirm=False)
    path = tmp_path / "j.jsonl"
    campaign_run(tmp_path, pop, campaign, journal_for(path, pop, campaign))
    with pytest.raises(JournalError, match="fingerprint differs"):
        journal_for(path, pop, campaign, settings="b").load()
    # The code is part of the fingerprint: one byte of the runtime's sources changes it.
    root = tmp_path / "root"
    for folder in ("reference_runtime", "conformance", "fixtures", "mutation"):
        (root / folder).mkdir(parents=True)
    (root / "reference_runtime" / "m.py").write_text("A = 1\n", encoding="utf-8")
    before = fingerprint({"s": "a"}, root)
    (root / "reference_runtime" / "m.py").write_text("A = 2\n", encoding="utf-8")
    assert fingerprint({"s": "a"}, root) != before
    # A result whose mutant is not the sample's at that index is refused, naming the line.
    other = Campaign(seed="4", sample=2, confirm=False)
    keys_3 = [m.key for m in sample_of(pop, campaign)]
    keys_4 = [m.key for m in sample_of(pop, other)]
    assert keys_3 != keys_4
    forged = Journal(path, fingerprint({"s": "a"}), keys_4)
    with pytest.raises(JournalError, match="line 2: mutant .* is not the sample's mutant 1"):
        forged.load()


@pytest.mark.parametrize("body, error", [
    ("not json\n", "line 1 is not JSON"),
    ('{"journal": 99, "fingerprint": "x"}\n', "line 1 is no mutation journal header"),
    ("HEADER\n[1, 2]\n", "line 2: no index of this campaign's sample"),
    ('HEADER\n{"index": 7, "result": {}}\n', "line 2: no index"),
    ('HEADER\n{"index": true, "result": {}}\n', "line 2: no index"),
    ('HEADER\n{"index": 0, "result": {"key": "k", "evil": 1}}\n', "unknown field"),
    ('HEADER\n{"index": 0, "result": {"key": "k"}}\n', "line 2: .*missing"),
    ('HEADER\n{"index": 0}\n', "line 2: not an object"),
    ("HEADER\n\xff\xfe\n{}\n", "line 2 is not JSON"),
    ("HEADER\n" + "[" * 100_000 + "\n{}\n", "line 2 is not JSON"),
])
def test_a_journal_that_is_not_one_is_refused_naming_the_line(tmp_path: Path, pop, body: str,
                                                                error: str) -> None:
    campaign = Campaign(seed="3", sample=2, confirm=False)
    journal = journal_for(tmp_path / "j.jsonl", pop, campaign)
    header = json.dumps({"journal": 1, "fingerprint": journal.fingerprint, "baseline": None})
    (tmp_path / "j.jsonl").write_bytes(body.replace("HEADER", header).encode("utf-8",
                                                                             "surrogateescape"))
    with pytest.raises(JournalError, match=error):
        journal.load()


def test_a_journal_that_is_no_regular_file_is_refused(tmp_path: Path, pop) -> None:
    campaign = Campaign(seed="3", sample=2, confirm=False)
    (tmp_path / "j.jsonl").mkdir()
    with pytest.raises(JournalError, match="not a regular file"):
        journal_for(tmp_path / "j.jsonl", pop, campaign).load()
    (tmp_path / "k.jsonl").symlink_to("/dev/zero")
    with pytest.raises(JournalError):
        journal_for(tmp_path / "k.jsonl", pop, campaign).load()


def test_results_round_trip_through_the_journal(tmp_path: Path, pop, runs: list[str]) -> None:
    campaign = Campaign(seed="3", sample=1, confirm=False)
    path = tmp_path / "j.jsonl"
    first = campaign_run(tmp_path, pop, campaign, journal_for(path, pop, campaign))
    entry = json.loads(path.read_text(encoding="utf-8").splitlines()[1])
    again = result_from_json(entry["result"])
    assert again == first.results[0] and isinstance(again.runs[0].modules, tuple)


def test_run_resume_refuses_a_bad_journal_with_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import mutation.__main__ as cli
    (tmp_path / "journal-seed-5.jsonl").write_text("garbage\n", encoding="utf-8")
    code = cli.main(["run", "--seed", "5", "--sample", "1", "--resume", "--no-baseline",
                     "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "journal-seed-5.jsonl: line 1 is not JSON" in err and "Traceback" not in err
    (tmp_path / "journal-sweep.jsonl").write_text("garbage\n", encoding="utf-8")
    assert cli.main(["sweep", "--at", "gpu_op_manager.py", "--resume", "--no-baseline",
                     "--out", str(tmp_path)]) == 2
    assert "journal-sweep.jsonl: line 1 is not JSON" in capsys.readouterr().err
