"""A mutation campaign: a seeded sample of mutants, each certified against its observers.

For each sampled mutant: when it is on the reviewed list (``equivalents.toml``) it is not run
(unless ``check_equivalents``) and takes the list's kind; otherwise the conformance modules
that observe its module (``targets.OBSERVERS``) run against it; a survivor is then run against
every other conformance module (``confirm``), where a kill is recorded as a gap of the static
map. With ``whole_suite`` there is no separate observer run and no confirmation: every mutant
runs against the whole conformance suite in one pytest process, its map's modules first; so
a kill by a module outside the map means that every module of the map passed (a gap,
recorded in ``MutantResult.map_gap``), and a survivor survived every test. A whole-suite
sample therefore shows directly that the map hides nothing. Before the first mutant the unmutated copy of the runtime runs through the whole
conformance suite under the same options (the baseline): a harness that fails it would make
every verdict meaningless, so the campaign stops.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .equivalents import Equivalent
from .journal import Journal
from .operators import Mutant
from .runner import EVERY_SKIP, MutantResult, Options, Run, Workspace, run_pytest
from .sampling import Population, draw
from .targets import OBSERVERS, all_conformance_modules, complement, observers

__all__ = ["Campaign", "CampaignResult", "baseline", "run_campaign", "evaluate", "sample_of"]


@dataclass(frozen=True)
class Campaign:
    seed: str
    sample: int
    options: Options = Options()
    jobs: int = 1
    confirm: bool = True
    check_equivalents: bool = False
    keys: tuple[str, ...] = ()          # run exactly these mutants instead of a sample
    modules: tuple[str, ...] = ()       # run these conformance modules instead of the map's
    generator: str = "suite"            # the mutant source (sampling.GENERATORS)
    whole_suite: bool = False           # every conformance module, not the map's


@dataclass
class CampaignResult:
    campaign: Campaign
    population_size: int
    population_by_module: dict[str, int]
    results: list[MutantResult]
    baseline: Run | None
    started: float
    wall_s: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    list_problems: list[str] = field(default_factory=list)
    resumed: int = 0                    # results taken from the journal, not run again


def baseline(workspace: Workspace, options: Options) -> Run:
    """The unmutated copy through the whole conformance suite (one core, as a mutant runs);
    its skips are the host's, expected by definition (``EVERY_SKIP``)."""
    return run_pytest(workspace, whole_suite_modules(), options, tag="baseline",
                      expected_skips=EVERY_SKIP)


def whole_suite_modules() -> tuple[str, ...]:
    """Every conformance module, in the suite's order (``--whole-suite``)."""
    return tuple(f"conformance/{m}" for m in all_conformance_modules())


def outside_map(module: str, test: str) -> str | None:
    """The conformance module of ``test`` (a JUnit name, ``conformance.test_x[.Class]::name``)
    when the static map of ``module`` lacks it, else None."""
    parts = test.split("::")[0].replace("/", ".").split(".")
    name = next((p for p in parts if p.startswith("test_")), None)
    if name is None or f"{name}.py" in OBSERVERS.get(module, ()):
        return None
    return f"conformance/{name}.py"


def evaluate(mutant: Mutant, source: str, workspace: Workspace, campaign: Campaign,
             listed: Equivalent | None, expected_skips: frozenset[str] | None = None
             ) -> MutantResult:
    result = MutantResult(
        key=mutant.key, module=mutant.module, function=mutant.function,
        operator=mutant.operator, line=mutant.line, change=mutant.describe(),
        line_text=mutant.line_text, diff=mutant.diff(source), outcome="survived")
    if listed is not None:
        result.listed, result.reason = listed.kind, listed.reason
        if not campaign.check_equivalents:
            result.outcome = listed.kind
            return result
    tag = mutant.key.replace("/", "_").replace(":", "_")
    first = (observers(mutant.module) + complement(mutant.module) if campaign.whole_suite
             else campaign.modules or observers(mutant.module))
    with workspace.mutated(mutant, source):
        runs = [run_pytest(workspace, first, campaign.options, tag=tag,
                           expected_skips=expected_skips)]
        rest = () if campaign.modules or campaign.whole_suite else complement(mutant.module)
        if runs[0].outcome == "passed" and campaign.confirm and rest and listed is None:
            runs.append(run_pytest(workspace, rest, campaign.options, tag=tag + ".confirm",
                                   expected_skips=expected_skips))
    result.runs = runs
    result.wall_s = round(sum(r.wall_s for r in runs), 2)
    result.cpu_s = round(sum(r.cpu_s for r in runs), 2)
    killing = next((r for r in runs if r.outcome == "killed"), None)
    if killing is not None:
        result.outcome = "killed"
        result.how, result.test, result.clause = killing.how, killing.test, killing.clause
        result.message = killing.message
        if killing is not runs[0] and killing.test:
            result.map_gap = killing.test.split("::")[0]
        elif campaign.whole_suite and killing.test:
            result.map_gap = outside_map(mutant.module, killing.test)
        if listed is not None:
            result.list_mistake = True
    elif any(r.outcome == "error" for r in runs):
        result.outcome = "error"
        bad = next(r for r in runs if r.outcome == "error")
        result.message = bad.note
    elif listed is not None:
        result.outcome = listed.kind
    return result


def sample_of(population: Population, campaign: Campaign) -> list[Mutant]:
    """The campaign's mutants in order: its keys, else its seeded sample."""
    if campaign.keys:
        by_key = population.by_key()
        unknown = [k for k in campaign.keys if k not in by_key]
        if unknown:
            raise KeyError(f"no such mutant: {', '.join(unknown)}")
        return [by_key[k] for k in campaign.keys]
    return draw(population.mutants, campaign.seed, campaign.sample)


def run_campaign(population: Population, equivalents: dict[str, Equivalent],
                 campaign: Campaign, *, work_dir: Path, baseline_run: Run | None,
                 progress: Callable[[int, int, MutantResult], None] | None = None,
                 journal: Journal | None = None) -> CampaignResult:
    """Run the campaign's sample with ``campaign.jobs`` workspaces under ``work_dir``.
    With a ``journal``, the mutants it already holds are not run again (their recorded
    results are kept) and every other one is recorded in it as it ends."""
    sample = sample_of(population, campaign)
    resumed = dict(journal.done) if journal is not None else {}
    load_before = os.getloadavg()
    start = time.time()
    free: queue.Queue[Workspace] = queue.Queue()
    for i in range(max(1, min(campaign.jobs, len(sample) - len(resumed)))):
        free.put(Workspace(work_dir / f"job{i}"))
    results: list[MutantResult | None] = [resumed.get(i) for i in range(len(sample))]
    expected_skips = frozenset(baseline_run.skipped) if baseline_run is not None else None
    done = len(resumed)
    lock = threading.Lock()

    def one(index: int, mutant: Mutant) -> None:
        nonlocal done
        workspace = free.get()
        try:
            result = evaluate(mutant, population.sources[mutant.module], workspace, campaign,
                              equivalents.get(mutant.key), expected_skips)
        finally:
            free.put(workspace)
        results[index] = result
        if journal is not None:
            journal.record(index, result)
        with lock:
            done += 1
            if progress is not None:
                progress(done, len(sample), result)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, campaign.jobs),
                                                 thread_name_prefix="mutant")
    try:
        for future in [pool.submit(one, i, m) for i, m in enumerate(sample)
                       if i not in resumed]:
            future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    by_module: dict[str, int] = {}
    for m in population.mutants:
        by_module[m.module] = by_module.get(m.module, 0) + 1
    return CampaignResult(campaign, len(population.mutants), by_module,
                          [r for r in results if r is not None], baseline_run, start,
                          round(time.time() - start, 1), load_before, os.getloadavg(),
                          resumed=len(resumed))
