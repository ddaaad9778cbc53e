"""The index of published mutation reports (``python -m mutation index [DIR]``).

Every ``<folder>/mutation.json`` and ``<folder>/sweep.json`` under ``DIR`` (by default
``reports/published/mutation/``) becomes a row, with the figures read from the report itself:
generator, seed, mode, suite commit, machine, kill rate and its interval, or the sweep's
verdicts per kind. The text above the generated tables (``INTRO_END`` marks its end) is kept,
so what a reader is told about the runs is written once, by hand, and the figures never are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.untrusted import ReportError, read_regular

from .report import percent, table_cell, wilson_interval

__all__ = ["INTRO_END", "index_markdown", "rows"]

INTRO_END = "<!-- generated below: python -m mutation index -->"
MAX_REPORT_BYTES = 64 << 20


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(read_regular(path, MAX_REPORT_BYTES, follow_symlinks=False))
    except (ReportError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def rows(folder: Path) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """(campaign rows, sweep rows, unreadable report folders) of the reports under folder."""
    campaigns, sweeps, bad = [], [], []
    for path in sorted(folder.glob("*/mutation.json")):
        d = _load(path)
        try:
            c, s, m = d["campaign"], d["summary"], d["machine"]
            ci = s.get("kill_rate_ci95") or wilson_interval(s["killed"], s["counted"])
            campaigns.append([
                path.parent.name, c.get("generator", "suite"), c["seed"],
                c.get("mode", "map"), str(d["suite"]["commit"])[:10], str(m.get("cpus")),
                str(s["sampled"]), f"{s['killed']}/{s['counted']}", percent(s["kill_rate"]),
                f"{100 * ci[0]:.1f}-{100 * ci[1]:.1f} %" if ci else "-",
                str(s["survived"]), str(s["error"]),
                f"{s['equivalent']}/{s['unspecified']}/{s['gpu-only']}"])
        except (KeyError, TypeError, IndexError):
            bad.append(path.parent.name)
    for path in sorted(folder.glob("*/sweep.json")):
        d = _load(path)
        try:
            counts = d["counts"]
            for kind in ("lock", "notify", "snapshot"):
                k = counts.get(kind, {})
                reviewed = sum(v for key, v in k.items()
                               if key not in ("caught", "flaky", "missed", "error"))
                sweeps.append([path.parent.name, kind, str(d["commit"])[:10], str(d["repeat"]),
                               str(k.get("caught", 0)), str(k.get("flaky", 0)),
                               str(k.get("missed", 0)), str(k.get("error", 0)), str(reviewed)])
        except (KeyError, TypeError, AttributeError):
            bad.append(path.parent.name)
    return campaigns, sweeps, bad


def index_markdown(folder: Path, intro: str) -> str:
    campaigns, sweeps, bad = rows(folder)
    out = [intro.rstrip("\n"), "", INTRO_END, "", "## Campaigns", "",
           "| report | generator | seed | mode | commit | CPUs | sampled | killed/counted | "
           "kill rate | 95 % CI (Wilson) | survived | errors | equivalent/unspecified/GPU-only |",
           "|" + "---|" * 13]
    out += ["| " + " | ".join(table_cell(str(v)) for v in r) + " |" for r in campaigns]
    if sweeps:
        out += ["", "## Synchronisation sweeps", "",
                "| report | kind | commit | runs each | caught | flaky | missed | errors | "
                "reviewed |", "|" + "---|" * 9]
        out += ["| " + " | ".join(table_cell(str(v)) for v in r) + " |" for r in sweeps]
    if bad:
        out += ["", "Unreadable reports (left out): " + ", ".join(table_cell(b) for b in bad)]
    return "\n".join(out) + "\n"
