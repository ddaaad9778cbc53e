"""``python -m mutation``: mutation testing of the reference runtime against the suite.

    python -m mutation run [--seed S ...] [--sample N] [--jobs J] [--publish] ...
    python -m mutation run --generator mutmut ...   # mutmut's operators, not the suite's
    python -m mutation run --whole-suite ...        # every mutant against the whole suite
    python -m mutation run --at MODULE[:LINE] ...   # every mutant of a module or a line
    python -m mutation list --seed S --sample N     # the sample, without running it
    python -m mutation list --at MODULE[:LINE]      # every mutant of a module or a line
    python -m mutation show KEY                     # one mutant's diff
    python -m mutation check                        # the reviewed list against the mutants
    python -m mutation rescore REPORT_DIR           # apply the reviewed list again (no run)
    python -m mutation entry KEY --kind K --reason R   # a reviewed-list entry, printed
    python -m mutation sweep [--repeat 10] [--jobs J]  # every lock, notify, snapshot removed
    python -m mutation run|sweep ... --resume      # go on from a stopped run's journal
    python -m mutation index [DIR]                  # DIR/README.md: the table of its reports

``run`` writes one report per seed under ``reports/out/mutation/<time>-seed-<S>/``
(``mutation.json``, ``mutation.md``; ``latest-seed-<S>`` links to it) and, with
``--publish``, copies it to ``reports/published/mutation/seed-<S>/`` (``mutmut-seed-<S>/``
for the mutmut generator's). It exits 1 when a
seed's kill rate is below ``--min-kill-rate`` or a harness error happened.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from reports.child_run import interrupted_by_signals
from reports.untrusted import ReportError, read_regular

from . import equivalents as eq
from . import index, report
from . import sweep
from .campaign import Campaign, baseline, run_campaign, sample_of
from .journal import Journal, JournalError, fingerprint
from .runner import STOP, MutantResult, Options, Run, Workspace
from .operators import Mutant
from .sampling import GENERATORS, Population, draw, population
from .targets import ROOT

DEFAULT_SEEDS = ("1", "2")
DEFAULT_SAMPLE = 150
OUT_DIR = ROOT / "reports" / "out" / "mutation"
PUBLISHED_DIR = ROOT / "reports" / "published" / "mutation"
MAX_MUTATION_REPORT_BYTES = 64 << 20  # a mutation.json of a few thousand mutants is < 10 MiB
_SEED = re.compile(r"[0-9]{1,20}")


class UsageError(Exception):
    """A command line that cannot be carried out; one line, exit status 2."""


# -- argument types (argparse turns their errors into usage errors, exit status 2) ---------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _seconds(text: str) -> float:
    """A finite number of seconds > 0 (0, negatives and nan would end every run at once)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds > 0")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:                 # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"{text!r}: give a fraction from 0 to 1")
    return value


def _seed(text: str) -> str:
    """A seed is a non-negative integer: it names report folders, so nothing else is taken."""
    if not _SEED.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed (a non-negative integer of "
                                         f"at most 20 digits)")
    return text


def _jobs(text: str) -> int:
    value = _positive_int(text)
    cores = os.cpu_count() or 1
    if value > cores:
        raise argparse.ArgumentTypeError(f"{value} jobs on {cores} core(s): each mutant run "
                                         f"takes one core; give at most {cores}")
    return value


def usable_folder(path: Path) -> Path:
    """``path`` created if missing and checked writable (a file written and removed), before
    anything long runs; a ``UsageError`` says why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except FileExistsError:
        raise UsageError(f"{path} is not a folder") from None
    except OSError as exc:
        raise UsageError(f"cannot write reports to {path}: "
                         f"{exc.strerror or exc}") from None
    return path.resolve()


def inside(folder: Path, name: str) -> Path:
    """``folder/name``, refused when it would lie outside ``folder``. The name itself is not
    resolved: a link of that name (``latest-seed-S``) is the link, not what it points to."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UsageError(f"{name!r} would be written outside {folder}")
    return folder.resolve() / name


def read_report(source: Path) -> dict:
    """A ``mutation.json`` (or a folder holding one): a regular file of bounded size."""
    path = source / "mutation.json" if source.is_dir() else source
    try:
        raw = read_regular(path, MAX_MUTATION_REPORT_BYTES, follow_symlinks=True)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not a mutation report: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                         ) from None
    if not isinstance(data, dict) or not isinstance(data.get("mutants"), list):
        raise UsageError(f"{path} is not a mutation report (no list of mutants)")
    return data


def _progress(done: int, total: int, r: MutantResult) -> None:
    by = (f" by {r.test or r.how} [{r.clause or '-'}]" if r.outcome == "killed" else "")
    gap = f" (map gap: {r.map_gap})" if r.map_gap else ""
    print(f"[{done:4d}/{total}] {r.outcome:10} {r.module}:{r.line} {r.operator} {r.change}"
          f"{by}{gap} {r.wall_s:.1f} s", flush=True)


def checked_baseline(work: Path, options: Options) -> Run | bool:
    """The unmutated copy through the whole suite (the baseline of a campaign or a sweep),
    reported; False, after saying why, when it does not pass: every verdict would be void."""
    print("baseline: the unmutated copy through the whole conformance suite ...", flush=True)
    base_run = baseline(Workspace(work / "baseline"), options)
    print(f"baseline: {base_run.outcome} in {base_run.wall_s} s wall, {base_run.cpu_s} s CPU",
          flush=True)
    if base_run.outcome != "passed":
        print(f"the unmutated runtime does not pass under the harness: {base_run.test}: "
              f"{base_run.message} {base_run.note}\n{base_run.log}", file=sys.stderr)
        return False
    return base_run


def cmd_run(args: argparse.Namespace) -> int:
    if args.whole_suite and args.modules:
        raise UsageError("--whole-suite and --modules exclude each other")
    out = usable_folder(Path(args.out))
    if args.publish:
        usable_folder(PUBLISHED_DIR)
    pop = population(generator=args.generator)
    if args.at:
        if args.key:
            raise UsageError("--at and --key exclude each other")
        args.key = list(dict.fromkeys(m.key for at in args.at
                                      for m in mutants_at(pop, at, must_exist=True)))
    if args.key:
        known = pop.by_key()
        unknown = [k for k in args.key if k not in known]
        if unknown:
            raise UsageError(f"no such mutant: {', '.join(unknown)}")
    suite = (ROOT / "conformance").resolve()
    for module in args.modules or ():
        path = (ROOT / module).resolve()
        if not (path.is_file() and path.parent == suite and path.name.startswith("test_")
                and path.suffix == ".py"):
            raise UsageError(f"--modules {module}: not a conformance module "
                             f"(conformance/test_*.py)")
    size = len(args.key) if args.key else args.sample
    jobs = max(1, min(args.jobs, size))      # more workspaces than mutants would idle
    entries = eq.load()
    problems = eq.problems(entries, reviewable_mutants())
    for p in problems:
        print(f"reviewed list: {p}", file=sys.stderr)
    options = Options(mutant_timeout_s=args.mutant_timeout_s, test_timeout_s=args.test_timeout_s)
    seeds = args.seed or (["keys"] if args.key else list(DEFAULT_SEEDS))
    status = 0
    planned = []
    for seed in seeds:
        campaign = Campaign(seed=seed, sample=size, options=options, jobs=jobs,
                            confirm=not args.no_confirm,
                            check_equivalents=args.check_equivalents,
                            keys=tuple(args.key or ()),
                            modules=tuple(args.modules or ()),
                            generator=args.generator, whole_suite=args.whole_suite)
        label = f"seed-{seed}" if args.generator == "suite" else f"{args.generator}-seed-{seed}"
        planned.append((campaign, label, _journal(out, label, campaign, pop, args.no_baseline,
                                                  args.resume)))
    with tempfile.TemporaryDirectory(prefix="antman-mutation-") as tmp:
        work = Path(tmp)
        base_run = next((j.baseline for _, _, j in planned if j.baseline is not None), None)
        if base_run is not None:
            print(f"baseline: {base_run.outcome} in {base_run.wall_s} s wall (from the "
                  f"journal)", flush=True)
        elif not args.no_baseline:
            base_run = checked_baseline(work, options)
        if base_run is False:
            return 2
        for campaign, label, journal in planned:
            seed = campaign.seed
            print(f"seed {seed}: {len(pop.mutants)} mutants ({args.generator} generator), "
                  + (f"{len(args.key)} given by key or module" if args.key
                     else f"sample {args.sample}")
                  + (", each against the whole suite" if args.whole_suite else "")
                  + (f"; {len(journal.done)} already done (journal {journal.path})"
                     if journal.done else ""), flush=True)
            journal.start(base_run)
            try:
                result = run_campaign(pop, entries, campaign, work_dir=work / f"seed-{seed}",
                                      baseline_run=base_run, progress=_progress,
                                      journal=journal)
            finally:
                journal.close()
            result.list_problems = problems
            stamp = time.strftime("%Y%m%d-%H%M%S")
            folder = inside(out, f"{stamp}-{label}")
            json_path, md_path = report.write(result, folder)
            latest = inside(out, f"latest-{label}")
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(folder.name)
            s = report.summary(result.results)
            rate = s["kill_rate"]
            print(f"seed {seed}: kill rate {100 * rate:.1f} % "
                  f"({report.ci_text(s['kill_rate_ci95'])}, Wilson; {s['killed']}/{s['counted']}; "
                  f"{s['survived']} survived, {s['error']} errors, {s['equivalent']} equivalent, "
                  f"{s['unspecified']} unspecified, {s['gpu-only']} GPU-only); report {md_path}"
                  if rate is not None
                  else f"seed {seed}: nothing counted; report {md_path}", flush=True)
            if args.publish:
                target = inside(PUBLISHED_DIR, label)
                target.mkdir(parents=True, exist_ok=True)
                for path in (json_path, md_path):
                    shutil.copy2(path, target / path.name)
                print(f"published to {target}", flush=True)
            if s["error"] or (rate is not None and rate < args.min_kill_rate):
                status = 1
    return status


def _journal(out: Path, label: str, campaign: Campaign, pop, no_baseline: bool,
             resume: bool) -> Journal:
    """The journal of one campaign (``out/journal-<label>.jsonl``), loaded with ``resume``."""
    settings = {"campaign": {**vars(campaign), "jobs": None, "options": vars(campaign.options)},
                "no_baseline": no_baseline}
    journal = Journal(inside(out, f"journal-{label}.jsonl"), fingerprint(settings),
                      [m.key for m in sample_of(pop, campaign)])
    if resume:
        try:
            journal.load()
        except JournalError as exc:
            raise UsageError(str(exc)) from None
    return journal


def cmd_rescore(args: argparse.Namespace) -> int:
    source = Path(args.report)
    path = source / "mutation.json" if source.is_dir() else source
    loaded = read_report(source)
    folder = usable_folder(Path(args.into)) if args.into else path.parent
    try:
        data = report.rescore(loaded, eq.load())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path} is not a mutation report: {type(exc).__name__}: {exc}"
                         ) from None
    _, md_path = report.write_data(data, folder)
    s = data["summary"]
    print(f"kill rate {report.percent(s['kill_rate'])} "
          f"({report.ci_text(s.get('kill_rate_ci95'))}, Wilson; {s['killed']}/{s['counted']}; "
          f"{s['survived']} survived, {s['equivalent']} equivalent, {s['unspecified']} "
          f"unspecified, {s['gpu-only']} GPU-only); report {md_path}")
    return 0


def mutants_at(pop: Population, at: str, *, must_exist: bool) -> list[Mutant]:
    """Every mutant of ``MODULE`` or of ``MODULE:LINE``, in source order. With
    ``must_exist``, a module that is not mutated or a line without a mutant is a usage
    error (``run`` would otherwise run nothing and report a rate of nothing)."""
    module, _, line = at.partition(":")
    if line and not line.isdigit():
        raise UsageError(f"--at {at!r}: LINE must be a line number")
    if must_exist and module not in pop.sources:
        raise UsageError(f"--at {at!r}: {module!r} is not a mutated runtime module")
    chosen = [m for m in pop.mutants if m.module == module
              and (not line or m.line == int(line))]
    if must_exist and not chosen:
        raise UsageError(f"--at {at!r}: no mutant on that line")
    return chosen


def cmd_list(args: argparse.Namespace) -> int:
    pop = population(generator=args.generator)
    entries = eq.load()
    if args.at:
        chosen = mutants_at(pop, args.at, must_exist=False)
    else:
        chosen = draw(pop.mutants, args.seed, args.sample)
    for m in chosen:
        listed = entries.get(m.key)
        mark = f"  [{listed.kind}]" if listed else ""
        print(f"{m.key}  {m.module}:{m.line}  {m.operator}  {m.describe()}{mark}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    pop = population(generator=args.generator)
    by_key = pop.by_key()
    status = 0
    for key in args.key:
        m = by_key.get(key)
        if m is None:
            print(f"no such mutant: {key}", file=sys.stderr)
            status = 1
            continue
        print(f"{m.key} ({m.operator}, line {m.line}, in {m.function})")
        print(m.diff(pop.sources[m.module]))
    return status


def reviewable_mutants() -> list:
    """Every generator's mutants: the reviewed list names mutants of any of them (a key
    holds its operator, so the generators' keys do not collide)."""
    return [m for name in sorted(GENERATORS) for m in population(generator=name).mutants]


def cmd_check(args: argparse.Namespace) -> int:
    entries = eq.load()
    problems = eq.problems(entries, reviewable_mutants())
    problems += eq.unspecified_reason_problems(
        entries, (ROOT / "SPEC.md").read_text(encoding="utf-8"), ROOT)
    for p in problems:
        print(p)
    print(f"{len(entries)} reviewed entries, {len(problems)} problem(s)")
    return 1 if problems else 0


def cmd_entry(args: argparse.Namespace) -> int:
    m = population(generator=args.generator).by_key().get(args.key)
    if m is None:
        print(f"no such mutant: {args.key}", file=sys.stderr)
        return 1
    print(eq.entry_text(m, args.kind, args.reason))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    out = usable_folder(Path(args.out))
    if args.publish:
        usable_folder(PUBLISHED_DIR)
    pop = population()
    if args.at is not None and args.at not in pop.sources:
        raise UsageError(f"--at {args.at!r}: not a mutated runtime module")
    kinds = tuple(args.kinds)
    chosen = sweep.select(pop, kinds, args.at)
    if not chosen:
        raise UsageError("no mutant of those kinds")
    entries = eq.load()
    options = Options(mutant_timeout_s=args.mutant_timeout_s, test_timeout_s=args.test_timeout_s)
    print(f"sweep: {len(chosen)} mutants ({', '.join(kinds)}), {args.repeat} runs each",
          flush=True)
    settings = {"sweep": {"kinds": kinds, "at": args.at, "repeat": args.repeat,
                          "options": vars(options)}, "no_baseline": args.no_baseline}
    journal = Journal(inside(out, "journal-sweep.jsonl"), fingerprint(settings),
                      sweep.run_keys(chosen, entries, args.repeat))
    if args.resume:
        try:
            journal.load()
        except JournalError as exc:
            raise UsageError(str(exc)) from None
        if journal.done:
            print(f"sweep: {len(journal.done)} runs already done (journal {journal.path})",
                  flush=True)
    with tempfile.TemporaryDirectory(prefix="antman-sweep-") as tmp:
        base_run = journal.baseline
        if base_run is None and not args.no_baseline:
            base_run = checked_baseline(Path(tmp), options)
        if base_run is False:
            return 2
        journal.start(base_run)
        try:
            data = sweep.run_sweep(pop, entries, chosen, repeat=args.repeat, jobs=args.jobs,
                                   options=options, work_dir=Path(tmp), baseline_run=base_run,
                                   progress=_progress, journal=journal)
        finally:
            journal.close()
    found = report.suite_commit()
    data["commit"], data["commit_source"] = found["commit"], found["commit_source"]
    data["code_fingerprint"] = report.code_fingerprint()
    data["generated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    header = (f"Suite commit {report.commit_text(found)} (code fingerprint "
              f"{data['code_fingerprint'][:16]}); generated {data['generated']}; "
              f"{os.cpu_count()} CPUs; load average {data['load_before'][0]:.2f} before, "
              f"{data['load_after'][0]:.2f} after.")
    folder = inside(out, f"{time.strftime('%Y%m%d-%H%M%S')}-sweep")
    folder.mkdir(parents=True, exist_ok=True)
    report.write_aside(folder / "sweep.json", json.dumps(data, indent=1) + "\n")
    report.write_aside(folder / "sweep.md", sweep.to_markdown(data, header))
    for kind in kinds:
        c = data["counts"].get(kind, {})
        print(f"sweep {kind}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())),
              flush=True)
    print(f"report {folder / 'sweep.md'}", flush=True)
    if args.publish:
        target = inside(PUBLISHED_DIR, "sweep")
        target.mkdir(parents=True, exist_ok=True)
        for name in ("sweep.json", "sweep.md"):
            shutil.copy2(folder / name, target / name)
        print(f"published to {target}", flush=True)
    missed = sum(c.get("missed", 0) + c.get("flaky", 0) + c.get("error", 0)
                 for c in data["counts"].values())
    return 1 if missed else 0


def cmd_index(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder")
    readme = folder / "README.md"
    intro = "# Published mutation reports\n"
    if readme.is_file():
        try:
            text = read_regular(readme, MAX_MUTATION_REPORT_BYTES).decode("utf-8")
        except (ReportError, UnicodeDecodeError) as exc:
            raise UsageError(f"{readme}: {exc}") from None
        intro = text.split(index.INTRO_END, 1)[0]
    report.write_aside(readme, index.index_markdown(folder, intro))
    print(f"wrote {readme}")
    return 0


def _kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in sweep.KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"{text!r}: give kinds from {', '.join(sweep.KINDS)}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run seeded samples and write their reports")
    run.add_argument("--seed", action="append", type=_seed,
                     help=f"sample seed, repeatable (default: {' and '.join(DEFAULT_SEEDS)})")
    run.add_argument("--sample", type=_positive_int, default=DEFAULT_SAMPLE,
                     help=f"mutants per seed (default {DEFAULT_SAMPLE})")
    run.add_argument("--key", action="append", help="run this mutant (repeatable) instead of "
                                                    "a sample")
    run.add_argument("--at", action="append", metavar="MODULE[:LINE]",
                     help="run every mutant of this runtime module or line (repeatable) "
                          "instead of a sample: the whole population of a module, in "
                          "source order")
    run.add_argument("--generator", choices=sorted(GENERATORS), default="suite",
                     help="the mutant source: suite (the suite's own operators, default) or "
                          "mutmut (mutmut's documented operator set, mutation/mutmut_operators.py)")
    run.add_argument("--whole-suite", action="store_true",
                     help="run every mutant against the whole conformance suite (its map's "
                          "modules first) instead of its static map: shows the map hides "
                          "nothing")
    run.add_argument("--modules", nargs="+", metavar="PATH",
                     help="run these conformance modules against every mutant instead of the "
                          "static map's (a quick check while writing tests; no confirmation)")
    run.add_argument("--jobs", type=_jobs, default=1,
                     help="mutants run at once, one core each (default 1; at most the "
                          "number of cores, and no more than the mutants are used)")
    run.add_argument("--mutant-timeout-s", type=_seconds, default=300.0,
                     help="wall limit of one pytest run against a mutant (default 300)")
    run.add_argument("--test-timeout-s", type=_positive_int, default=45,
                     help="per-test limit (pytest-timeout) in mutant runs (default 45)")
    run.add_argument("--no-confirm", action="store_true",
                     help="do not run survivors against the conformance modules outside "
                          "their map")
    run.add_argument("--check-equivalents", action="store_true",
                     help="also run the sampled mutants of the reviewed list (a kill is a "
                          "mistake in the list)")
    run.add_argument("--no-baseline", action="store_true",
                     help="skip the baseline run of the unmutated copy")
    run.add_argument("--min-kill-rate", type=_fraction, default=0.0,
                     help="exit 1 when a seed's kill rate is below this fraction")
    run.add_argument("--out", default=str(OUT_DIR), help=f"report folder (default {OUT_DIR})")
    run.add_argument("--resume", action="store_true",
                     help="keep the results of an earlier, stopped run of the same campaign "
                          "on the same code (its journal, OUT/journal-<label>.jsonl) and run "
                          "only the rest")
    run.add_argument("--publish", action="store_true",
                     help=f"copy each seed's report to {PUBLISHED_DIR}/seed-<S>/ "
                          f"(mutmut-seed-<S>/ for the mutmut generator)")
    run.set_defaults(func=cmd_run)
    lst = sub.add_parser("list", help="print a sample without running it")
    lst.add_argument("--seed", type=_seed, default=DEFAULT_SEEDS[0])
    lst.add_argument("--sample", type=_positive_int, default=DEFAULT_SAMPLE)
    lst.add_argument("--generator", choices=sorted(GENERATORS), default="suite")
    lst.add_argument("--at", metavar="MODULE[:LINE]",
                     help="every mutant of a runtime module (or of one of its lines) instead")
    lst.set_defaults(func=cmd_list)
    show = sub.add_parser("show", help="print the diff of mutants")
    show.add_argument("key", nargs="+")
    show.add_argument("--generator", choices=sorted(GENERATORS), default="suite")
    show.set_defaults(func=cmd_show)
    rescore = sub.add_parser("rescore", help="apply the reviewed list again to a report "
                                            "(nothing is run)")
    rescore.add_argument("report", help="a report folder or its mutation.json")
    rescore.add_argument("--into", help="write the rescored report here (default: in place)")
    rescore.set_defaults(func=cmd_rescore)
    check = sub.add_parser("check", help="check the reviewed list against the mutants")
    check.set_defaults(func=cmd_check)
    entry = sub.add_parser("entry", help="print a reviewed-list entry for a mutant")
    entry.add_argument("key")
    entry.add_argument("--kind", choices=eq.KINDS, default="equivalent")
    entry.add_argument("--reason", required=True)
    entry.add_argument("--generator", choices=sorted(GENERATORS), default="suite")
    entry.set_defaults(func=cmd_entry)
    idx = sub.add_parser("index", help="write DIR/README.md: a table of the reports under DIR "
                                       "(the text above its tables is kept)")
    idx.add_argument("folder", nargs="?", default=str(PUBLISHED_DIR))
    idx.set_defaults(func=cmd_index)
    sw = sub.add_parser("sweep", help="remove every lock, notify and snapshot in turn, "
                                      "each mutant run several times")
    sw.add_argument("--repeat", type=_positive_int, default=10,
                    help="runs per mutant (default 10); caught means every run killed it")
    sw.add_argument("--kinds", type=_kinds, default=list(sweep.KINDS),
                    help=f"comma-separated kinds (default {','.join(sweep.KINDS)})")
    sw.add_argument("--at", metavar="MODULE", help="only this runtime module's mutants")
    sw.add_argument("--jobs", type=_jobs, default=1, help="runs at once, one core each")
    sw.add_argument("--mutant-timeout-s", type=_seconds, default=300.0,
                    help="wall limit of one pytest run (default 300)")
    sw.add_argument("--test-timeout-s", type=_positive_int, default=45,
                    help="per-test limit in mutant runs (default 45)")
    sw.add_argument("--no-baseline", action="store_true",
                    help="skip the baseline run of the unmutated copy")
    sw.add_argument("--out", default=str(OUT_DIR), help=f"report folder (default {OUT_DIR})")
    sw.add_argument("--resume", action="store_true",
                    help="keep the runs of an earlier, stopped sweep with the same settings "
                         "on the same code (OUT/journal-sweep.jsonl) and run only the rest")
    sw.add_argument("--publish", action="store_true",
                    help=f"copy the report to {PUBLISHED_DIR}/sweep/")
    sw.set_defaults(func=cmd_sweep)
    args = parser.parse_args(argv)
    from reports import environment
    problem = environment.commit_variable_problem()
    if problem:   # before a run whose every report would name the wrong commit
        print(f"{parser.prog} {args.command}: {problem}", file=sys.stderr)
        return 2
    try:          # STOP.set kills the pytest process groups of the runs in progress
        with interrupted_by_signals(STOP.set):
            return args.func(args)
    except (UsageError, eq.ReviewedListError) as exc:
        print(f"{parser.prog} {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
