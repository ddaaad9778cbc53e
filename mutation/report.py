"""The report of a campaign: ``mutation.json`` and ``mutation.md``.

The kill rate is ``killed / (killed + survived + error)``: mutants on the reviewed list
(``equivalent``, ``unspecified``, ``gpu-only``) are left out and listed with their reasons; a harness error
counts against the suite (it is no kill). Tables per runtime module and per operator; every
survivor with its diff; every kill with the test and clause that caught it; the cost per
mutant (wall and CPU seconds) with the machine's load, since the figures depend on it.

A sample's kill rate estimates the population's: every rate is given with its 95 % Wilson
score interval (``wilson_interval``), which stays inside [0, 1] and keeps its coverage for
small samples and rates near 1, where the normal approximation does not. The report records
the mutant source (``--generator``) and whether the static map or the whole suite was run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .campaign import CampaignResult
from .equivalents import Equivalent
from .runner import MutantResult, Run
from .targets import ROOT

__all__ = ["summary", "to_json", "to_markdown", "write", "rescore", "wilson_interval"]

EXCLUDED_OUTCOMES = ("equivalent", "unspecified", "gpu-only")
Z_95 = 1.959963984540054            # the standard normal quantile of 0.975


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion ``successes / trials`` (95 % for
    the default ``z``); None when there are no trials."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes out of {trials} trials")
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = (z / (1 + z2 / trials)) * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def ci_text(interval: list[float] | tuple[float, float] | None) -> str:
    """``95 % CI 80.1-92.3 %`` (or ``n/a``)."""
    if not interval:
        return "n/a"
    return f"95 % CI {100 * interval[0]:.1f}-{100 * interval[1]:.1f} %"


def _counts(results: list[MutantResult]) -> dict[str, Any]:
    out = {k: 0 for k in ("sampled", "killed", "survived", "error", *EXCLUDED_OUTCOMES)}
    out["sampled"] = len(results)
    for r in results:
        out[r.outcome] += 1
    counted = out["killed"] + out["survived"] + out["error"]
    out["counted"] = counted
    out["kill_rate"] = round(out["killed"] / counted, 4) if counted else None
    interval = wilson_interval(out["killed"], counted)
    out["kill_rate_ci95"] = [round(x, 4) for x in interval] if interval else None
    return out


def summary(results: list[MutantResult]) -> dict[str, Any]:
    counts = _counts(results)
    killed = [r for r in results if r.outcome == "killed"]
    ran = [r for r in results if r.runs]
    walls = [r.wall_s for r in ran]
    cpus = [r.cpu_s for r in ran]

    def stats(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        ordered = sorted(values)
        return {"mean": round(statistics.fmean(values), 2),
                "median": round(statistics.median(values), 2),
                "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
                "max": round(max(values), 2), "total": round(sum(values), 1)}

    return {
        **counts,
        "killed_by": {how: sum(1 for r in killed if r.how == how)
                      for how in ("test", "timeout", "import", "refused", "skipped")},
        "map_gaps": sum(1 for r in results if r.map_gap),
        "list_mistakes": sum(1 for r in results if r.list_mistake),
        "cost_per_mutant": {"wall_s": stats(walls), "cpu_s": stats(cpus), "run": len(ran),
                            "killed_wall_s": stats([r.wall_s for r in killed if r.runs]),
                            "survived_wall_s": stats([r.wall_s for r in results
                                                      if r.outcome == "survived"])},
    }


def _table(results: list[MutantResult], field: str) -> list[dict[str, Any]]:
    groups: dict[str, list[MutantResult]] = {}
    for r in results:
        groups.setdefault(getattr(r, field), []).append(r)
    rows = []
    for name in sorted(groups):
        c = _counts(groups[name])
        rows.append({field: name, **{k: c[k] for k in ("sampled", "killed", "survived", "error",
                                                         *EXCLUDED_OUTCOMES, "kill_rate",
                                                         "kill_rate_ci95")}})
    return rows


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def suite_commit(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The commit a report names, found as the certification report finds it
    (``reports.environment.suite_git``): ``ANTMAN_SUITE_COMMIT`` where the operator names the
    commit of a copied working tree whose git metadata does not describe it, else the
    checkout's HEAD (with whether the code the fingerprint covers has uncommitted changes),
    else a ``git archive`` stamp."""
    from reports import environment
    found = environment.suite_git(ROOT, environ)
    dirty = (bool(_git("status", "--porcelain", "--", "reference_runtime", "conformance",
                       "fixtures", "SPEC.md", "mutation"))
             if found["source"] == "git" else None)
    return {"commit": found["commit"], "uncommitted_changes": dirty,
            "commit_source": found["source"]}


_NAMED_BY = {"env": "named by ANTMAN_SUITE_COMMIT", "archive": "from the git archive stamp"}


def commit_text(suite: dict[str, Any]) -> str:
    """``<commit>[ with uncommitted changes][ (named by ANTMAN_SUITE_COMMIT)]``."""
    named = _NAMED_BY.get(suite.get("commit_source") or "")
    return (f"{suite.get('commit') or 'unknown'}"
            f"{' with uncommitted changes' if suite.get('uncommitted_changes') else ''}"
            f"{f' ({named})' if named else ''}")


def code_fingerprint() -> str:
    """SHA-256 of the runtime, the suite, its fixtures and the harness (``journal``)."""
    from .journal import fingerprint
    return fingerprint({})


def to_json(result: CampaignResult) -> dict[str, Any]:
    c = result.campaign
    return {
        "schema": "antman-mutation-report/1",
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # the code itself (journal.fingerprint of no settings): it names what ran even where
        # the copy's git metadata does not (a copied working tree)
        "suite": {**suite_commit(), "code_fingerprint": code_fingerprint()},
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                    "cpus": os.cpu_count(), "load_before": list(result.load_before),
                    "load_after": list(result.load_after)},
        "campaign": {"seed": c.seed, "sample": c.sample, "keys": list(c.keys),
                     "generator": c.generator,
                     "mode": "whole-suite" if c.whole_suite else "map",
                     "modules": list(c.modules),
                     "jobs": c.jobs, "confirm": c.confirm,
                     "check_equivalents": c.check_equivalents,
                     "mutant_timeout_s": c.options.mutant_timeout_s,
                     "test_timeout_s": c.options.test_timeout_s,
                     "hypothesis_seed": c.options.hypothesis_seed},
        "population": {"size": result.population_size, "by_module": result.population_by_module},
        "baseline": result.baseline.to_json() if result.baseline is not None else None,
        "wall_s": result.wall_s,
        "resumed": result.resumed,
        "summary": summary(result.results),
        "by_module": _table(result.results, "module"),
        "by_operator": _table(result.results, "operator"),
        "list_problems": result.list_problems,
        "mutants": [r.to_json() for r in result.results],
    }


def percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f} %"


def to_markdown(data: dict[str, Any]) -> str:
    s, c = data["summary"], data["campaign"]
    lines = [
        f"# Mutation report: seed {c['seed']}, {s['sampled']} mutants",
        "",
        f"Mutant source `{c.get('generator', 'suite')}`; "
        + ("every mutant run against the whole conformance suite (its map's modules first)"
           if c.get("mode") == "whole-suite" else
           "every mutant run against the modules of its static map, survivors confirmed on "
           "the rest") + ".",
        "",
        *([f"Rescored with the reviewed list of {data['rescored']} (nothing was run again).",
           ""] if data.get("rescored") else []),
        f"Kill rate **{percent(s['kill_rate'])}** ({ci_text(s.get('kill_rate_ci95'))}, Wilson "
        f"score): {s['killed']} killed of {s['counted']} "
        f"counted mutants ({s['survived']} survived, {s['error']} harness errors); "
        f"{s['equivalent']} equivalent, {s['unspecified']} changing only unspecified "
        f"behaviour and {s['gpu-only']} GPU-only mutants left out (reviewed list, reasons "
        f"below).",
        "",
        f"- killed by a failing test {s['killed_by']['test']}, by a timeout "
        f"{s['killed_by']['timeout']}, at import {s['killed_by']['import']}, refused before "
        f"any test (API-1, API-2) {s['killed_by'].get('refused', 0)}, by a test "
        f"skipped that the reference runs {s['killed_by']['skipped']}; kills outside "
        f"the static map (map gaps) {s['map_gaps']}; listed mutants that were killed "
        f"{s['list_mistakes']}",
        f"- population {data['population']['size']} mutants; "
        + (f"the {len(c['keys'])} mutants given by key or module (not a random sample: the "
           f"rate is theirs, not the population's)" if c["keys"] else
           f"sample of {c['sample']} drawn with seed {c['seed']!r}"),
        *([f"- resumed: {data['resumed']} of the {s['sampled']} results were recorded by an "
           f"earlier run of this campaign on the same code (its journal) and not run again; "
           f"wall time {data['wall_s']} s is this run's"] if data.get("resumed") else []),
        f"- suite commit {commit_text(data['suite'])}"
        + (f" (code fingerprint {data['suite']['code_fingerprint'][:16]})"
           if data["suite"].get("code_fingerprint") else "")
        + f"; generated {data['generated']}",
        f"- options: one pytest process per run, {c['jobs']} at a time, stop at the first "
        f"failure, per-test limit {c['test_timeout_s']} s, wall limit {c['mutant_timeout_s']} s "
        f"per run, Hypothesis seed {c['hypothesis_seed']}, survivors confirmed on the rest of "
        f"the suite: {'yes' if c['confirm'] else 'no'}",
        "",
        "## Cost per mutant",
        "",
    ]
    cost = s["cost_per_mutant"]
    lines += ["| | mean | median | p90 | max | total |", "|---|---|---|---|---|---|"]
    for label, key in (("wall s (all run)", "wall_s"), ("CPU s (all run)", "cpu_s"),
                       ("wall s (killed)", "killed_wall_s"),
                       ("wall s (survived)", "survived_wall_s")):
        v = cost[key]
        if v:
            lines.append(f"| {label} | {v['mean']} | {v['median']} | {v['p90']} | {v['max']} "
                         f"| {v['total']} |")
    m = data["machine"]
    base = data["baseline"]
    lines += ["", f"Campaign wall time {data['wall_s']} s on {m['cpus']} CPUs (load average "
              f"{m['load_before'][0]:.2f} before, {m['load_after'][0]:.2f} after; the machine is "
              f"shared, so the figures are indicative), Python {m['python']}."
              + (f" Baseline (the unmutated copy, whole suite): {base['wall_s']} s wall, "
                 f"{base['cpu_s']} s CPU." if base else ""), ""]
    for title, key, field in (("By module", "by_module", "module"),
                              ("By operator", "by_operator", "operator")):
        lines += [f"## {title}", "",
                  f"| {field} | sampled | killed | survived | error | equivalent | unspecified "
                  f"| gpu-only | kill rate | 95 % CI |", "|---|---|---|---|---|---|---|---|---|---|"]
        for row in data[key]:
            lines.append(f"| {row[field]} | {row['sampled']} | {row['killed']} | "
                         f"{row['survived']} | {row['error']} | {row['equivalent']} | "
                         f"{row['unspecified']} | {row['gpu-only']} | "
                         f"{percent(row['kill_rate'])} | "
                         f"{ci_text(row.get('kill_rate_ci95')).removeprefix('95 % CI ')} |")
        lines.append("")
    mutants = data["mutants"]
    survivors = [r for r in mutants if r["outcome"] in ("survived", "error")]
    lines += ["## Survivors", ""]
    if not survivors:
        lines += ["None.", ""]
    for r in survivors:
        lines += [f"### {r['key']} ({r['outcome']})", "",
                  f"`{r['module']}` line {r['line']}, in `{r['function']}`, {r['operator']}: "
                  f"{r['change']}" + (f"; {r['message']}" if r["message"] else ""), "",
                  "```diff", r["diff"].rstrip("\n"), "```", ""]
    problems = data["list_problems"]
    mistakes = [r for r in mutants if r["list_mistake"]]
    gaps = [r for r in mutants if r["map_gap"]]
    if problems or mistakes or gaps:
        lines += ["## Problems of the reviewed list and of the static map", ""]
        lines += [f"- list: {p}" for p in problems]
        lines += [f"- {r['key']} is listed as {r['listed']} but was killed by {r['test']}"
                  for r in mistakes]
        lines += [f"- {r['key']} was killed outside the map of `{r['module']}`, by "
                  f"{r['test']}: add `{r['map_gap']}`" for r in gaps]
        lines.append("")
    left_out = [r for r in mutants if r["outcome"] in EXCLUDED_OUTCOMES]
    lines += ["## Left out of the rate (reviewed list)", ""]
    if left_out:
        lines += ["| mutant | line | change | kind | reason |", "|---|---|---|---|---|"]
        for r in left_out:
            lines.append(f"| {r['key']} | `{table_cell(r['line_text'])}` | `{table_cell(r['change'])}` | "
                         f"{r['outcome']} | {table_cell(r['reason'] or '')} |")
    else:
        lines.append("None.")
    lines += ["", "## Killed", "", "| mutant | line | change | killed by | clause | how | wall s |",
              "|---|---|---|---|---|---|---|"]
    for r in mutants:
        if r["outcome"] == "killed":
            lines.append(f"| {r['key']} | {r['line']} | `{table_cell(r['change'])}` | "
                         f"{table_cell(r['test'] or '')} | {r['clause'] or '-'} | {r['how']} | "
                         f"{r['wall_s']} |")
    return "\n".join(lines) + "\n"


def table_cell(text: str) -> str:
    """``text`` safe in one Markdown table cell (the one place report tables escape it)."""
    return text.replace("|", "\\|").replace("\n", "\\n")


def write(result: CampaignResult, folder: Path) -> tuple[Path, Path]:
    """Write ``mutation.json`` and ``mutation.md`` into ``folder``."""
    return write_data(to_json(result), folder)


def rescore(data: dict[str, Any], entries: dict[str, Equivalent]) -> dict[str, Any]:
    """``data`` (a ``mutation.json``) with the reviewed list ``entries`` applied again.

    A survivor now on the list takes its kind; a kill of a listed mutant is a list mistake;
    an entry removed from the list puts its mutant back among the survivors (it was not
    run: it is reported as such). Nothing is run again.
    """
    results = []
    for d in data["mutants"]:
        r = MutantResult(**{**d, "runs": [Run(**x) for x in d["runs"]]})
        entry = entries.get(r.key)
        r.listed, r.reason = (entry.kind, entry.reason) if entry else (None, None)
        r.list_mistake = False
        if r.outcome == "killed":
            r.list_mistake = entry is not None
        elif r.outcome != "error":
            if entry is not None:
                r.outcome = entry.kind
            elif r.runs:
                r.outcome = "survived"
            else:
                r.outcome, r.message = "survived", "was on the reviewed list when run: not run"
        results.append(r)
    out = dict(data)
    out["mutants"] = [r.to_json() for r in results]
    out["summary"] = summary(results)
    out["by_module"] = _table(results, "module")
    out["by_operator"] = _table(results, "operator")
    out["rescored"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return out


def write_data(data: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "mutation.json", folder / "mutation.md"
    write_aside(json_path, json.dumps(data, indent=1) + "\n")
    write_aside(md_path, to_markdown(data))
    return json_path, md_path


def write_aside(path: Path, text: str) -> None:
    """``path`` replaced by ``text`` at once: written beside it, then renamed over it, so a
    reader never sees half a report."""
    aside = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        aside.write_text(text, encoding="utf-8")
        os.replace(aside, path)
    finally:
        aside.unlink(missing_ok=True)
