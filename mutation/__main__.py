"""``python -m mutation``: mutation testing of the reference runtime against the suite.

    python -m mutation run [--seed S ...] [--sample N] [--jobs J] [--publish] ...
    python -m mutation list --seed S --sample N     # the sample, without running it
    python -m mutation list --at MODULE[:LINE]      # every mutant of a module or a line
    python -m mutation show KEY                     # one mutant's diff
    python -m mutation check                        # the reviewed list against the mutants
    python -m mutation rescore REPORT_DIR           # apply the reviewed list again (no run)
    python -m mutation entry KEY --kind K --reason R   # a reviewed-list entry, printed

``run`` writes one report per seed under ``reports/out/mutation/<time>-seed-<S>/``
(``mutation.json``, ``mutation.md``; ``latest-seed-<S>`` links to it) and, with
``--publish``, copies it to ``reports/published/mutation/seed-<S>/``. It exits 1 when a
seed's kill rate is below ``--min-kill-rate`` or a harness error happened.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from . import equivalents as eq
from . import report
from .campaign import Campaign, baseline, run_campaign
from .runner import STOP, MutantResult, Options, Workspace
from .sampling import draw, population
from .targets import ROOT

DEFAULT_SEEDS = ("1", "2")
DEFAULT_SAMPLE = 150
OUT_DIR = ROOT / "reports" / "out" / "mutation"
PUBLISHED_DIR = ROOT / "reports" / "published" / "mutation"


def _progress(done: int, total: int, r: MutantResult) -> None:
    by = f" by {r.test} [{r.clause or '-'}]" if r.outcome == "killed" else ""
    gap = f" (map gap: {r.map_gap})" if r.map_gap else ""
    print(f"[{done:4d}/{total}] {r.outcome:10} {r.module}:{r.line} {r.operator} {r.change}"
          f"{by}{gap} {r.wall_s:.1f} s", flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    pop = population()
    entries = eq.load()
    problems = eq.problems(entries, list(pop.mutants))
    for p in problems:
        print(f"reviewed list: {p}", file=sys.stderr)
    options = Options(mutant_timeout_s=args.mutant_timeout_s, test_timeout_s=args.test_timeout_s)
    seeds = args.seed or (["keys"] if args.key else list(DEFAULT_SEEDS))
    status = 0
    with tempfile.TemporaryDirectory(prefix="antman-mutation-") as tmp:
        work = Path(tmp)
        base_run = None
        if not args.no_baseline:
            print("baseline: the unmutated copy through the whole conformance suite ...",
                  flush=True)
            base_run = baseline(Workspace(work / "baseline"), options)
            print(f"baseline: {base_run.outcome} in {base_run.wall_s} s wall, "
                  f"{base_run.cpu_s} s CPU", flush=True)
            if base_run.outcome != "passed":
                print(f"the unmutated runtime does not pass under the harness: "
                      f"{base_run.test}: {base_run.message} {base_run.note}\n{base_run.log}",
                      file=sys.stderr)
                return 2
        for seed in seeds:
            campaign = Campaign(seed=seed, sample=args.sample, options=options, jobs=args.jobs,
                                confirm=not args.no_confirm,
                                check_equivalents=args.check_equivalents,
                                keys=tuple(args.key or ()),
                                modules=tuple(args.modules or ()))
            print(f"seed {seed}: {len(pop.mutants)} mutants, sample {args.sample}", flush=True)
            result = run_campaign(pop, entries, campaign, work_dir=work / f"seed-{seed}",
                                  baseline_run=base_run, progress=_progress)
            result.list_problems = problems
            stamp = time.strftime("%Y%m%d-%H%M%S")
            folder = Path(args.out) / f"{stamp}-seed-{seed}"
            json_path, md_path = report.write(result, folder)
            latest = Path(args.out) / f"latest-seed-{seed}"
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(folder.name)
            s = report.summary(result.results)
            rate = s["kill_rate"]
            print(f"seed {seed}: kill rate {100 * rate:.1f} % ({s['killed']}/{s['counted']}; "
                  f"{s['survived']} survived, {s['error']} errors, {s['equivalent']} equivalent, "
                  f"{s['unspecified']} unspecified, {s['gpu-only']} GPU-only); report {md_path}"
                  if rate is not None
                  else f"seed {seed}: nothing counted; report {md_path}", flush=True)
            if args.publish:
                target = PUBLISHED_DIR / f"seed-{seed}"
                target.mkdir(parents=True, exist_ok=True)
                for path in (json_path, md_path):
                    shutil.copy2(path, target / path.name)
                print(f"published to {target}", flush=True)
            if s["error"] or (rate is not None and rate < args.min_kill_rate):
                status = 1
    return status


def cmd_rescore(args: argparse.Namespace) -> int:
    source = Path(args.report)
    path = source / "mutation.json" if source.is_dir() else source
    data = report.rescore(json.loads(path.read_text(encoding="utf-8")), eq.load())
    folder = Path(args.into) if args.into else path.parent
    _, md_path = report.write_data(data, folder)
    s = data["summary"]
    print(f"kill rate {report._pct(s['kill_rate'])} ({s['killed']}/{s['counted']}; "
          f"{s['survived']} survived, {s['equivalent']} equivalent, {s['unspecified']} "
          f"unspecified, {s['gpu-only']} GPU-only); report {md_path}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    pop = population()
    entries = eq.load()
    if args.at:
        module, _, line = args.at.partition(":")
        chosen = [m for m in pop.mutants if m.module == module
                  and (not line or m.line == int(line))]
    else:
        chosen = draw(pop.mutants, args.seed, args.sample)
    for m in chosen:
        listed = entries.get(m.key)
        mark = f"  [{listed.kind}]" if listed else ""
        print(f"{m.key}  {m.module}:{m.line}  {m.operator}  {m.describe()}{mark}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    pop = population()
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


def cmd_check(args: argparse.Namespace) -> int:
    entries = eq.load()
    problems = eq.problems(entries, list(population().mutants))
    for p in problems:
        print(p)
    print(f"{len(entries)} reviewed entries, {len(problems)} problem(s)")
    return 1 if problems else 0


def cmd_entry(args: argparse.Namespace) -> int:
    m = population().by_key().get(args.key)
    if m is None:
        print(f"no such mutant: {args.key}", file=sys.stderr)
        return 1
    print(eq.entry_text(m, args.kind, args.reason))
    return 0


def _stop(signum: int, frame: object) -> None:
    STOP.set()                       # kills the pytest process groups of the runs in progress
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run seeded samples and write their reports")
    run.add_argument("--seed", action="append",
                     help=f"sample seed, repeatable (default: {' and '.join(DEFAULT_SEEDS)})")
    run.add_argument("--sample", type=int, default=DEFAULT_SAMPLE,
                     help=f"mutants per seed (default {DEFAULT_SAMPLE})")
    run.add_argument("--key", action="append", help="run this mutant (repeatable) instead of "
                                                    "a sample")
    run.add_argument("--modules", nargs="+", metavar="PATH",
                     help="run these conformance modules against every mutant instead of the "
                          "static map's (a quick check while writing tests; no confirmation)")
    run.add_argument("--jobs", type=int, default=1,
                     help="mutants run at once, one core each (default 1)")
    run.add_argument("--mutant-timeout-s", type=float, default=300.0,
                     help="wall limit of one pytest run against a mutant (default 300)")
    run.add_argument("--test-timeout-s", type=int, default=45,
                     help="per-test limit (pytest-timeout) in mutant runs (default 45)")
    run.add_argument("--no-confirm", action="store_true",
                     help="do not run survivors against the conformance modules outside "
                          "their map")
    run.add_argument("--check-equivalents", action="store_true",
                     help="also run the sampled mutants of the reviewed list (a kill is a "
                          "mistake in the list)")
    run.add_argument("--no-baseline", action="store_true",
                     help="skip the baseline run of the unmutated copy")
    run.add_argument("--min-kill-rate", type=float, default=0.0,
                     help="exit 1 when a seed's kill rate is below this fraction")
    run.add_argument("--out", default=str(OUT_DIR), help=f"report folder (default {OUT_DIR})")
    run.add_argument("--publish", action="store_true",
                     help=f"copy each seed's report to {PUBLISHED_DIR}/seed-<S>/")
    run.set_defaults(func=cmd_run)
    lst = sub.add_parser("list", help="print a sample without running it")
    lst.add_argument("--seed", default=DEFAULT_SEEDS[0])
    lst.add_argument("--sample", type=int, default=DEFAULT_SAMPLE)
    lst.add_argument("--at", metavar="MODULE[:LINE]",
                     help="every mutant of a runtime module (or of one of its lines) instead")
    lst.set_defaults(func=cmd_list)
    show = sub.add_parser("show", help="print the diff of mutants")
    show.add_argument("key", nargs="+")
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
    entry.set_defaults(func=cmd_entry)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
