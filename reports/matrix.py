"""One matrix of certified implementations: ``python -m reports matrix REPORT... -o DIR``.

Writes ``DIR/matrix.html`` (static, self-contained) and ``DIR/matrix.md``: a row per clause of
SPEC.md, grouped by area, and a column per certification run. A column's header names the
implementation (name, version), the profile it was judged in, where it ran (GPU model, or the
simulated device), the date, the suite commit, and the verdict. A cell is the clause's
outcome in that run; a must-pass clause of that run is marked (bold, and ``must-pass`` in the
row header when it is must-pass in any run). A cell that did not pass links to the clause in
that run's ``certification.html`` (a relative link) and carries the failing tests' messages
(tooltip; in HTML also in a ``<details>``).

``REPORT`` is a ``certification.json``, a run folder holding one, or a folder searched (three
levels deep) for run folders; runs with the verdict ``NO VERDICT`` (benchmark runs) found by
the search certify nothing and are left out. Reports are read as untrusted input
(reports/untrusted.py): regular files, size-bounded, schema-checked, and every text they carry
is escaped. A report that cannot be used is a one-line error and exit status 2; the pages are
written aside and then renamed into place.
"""

from __future__ import annotations

import html
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from reports import model
from reports import outcomes as oc
from reports.untrusted import REPORT_NAME, ReportError, load_report, one_line

HTML_NAME = "matrix.html"
MD_NAME = "matrix.md"
SEARCH_DEPTH = 3
MAX_REPORTS = 64
TOOLTIP_LIMIT = 600
#: Outcomes a cell links to the report for (the clause did not pass).
NOT_PASSED = frozenset(model.FAILING) | {oc.WAIVED}


@dataclass
class Column:
    """One certification run."""
    file: Path
    doc: dict[str, Any]
    html_href: str | None          # relative link to its certification.html, if present
    by_id: dict[str, dict[str, Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {c["id"]: c for c in self.doc["clauses"]}

    @property
    def verdict(self) -> str:
        return self.doc["verdict"]["status"]

    def facts(self) -> dict[str, str]:
        d = self.doc
        rt, target = d["runtime"], d["execution_target"]
        git = d["suite"].get("git") or {}
        commit = git.get("commit")
        return {
            "implementation": f"{rt.get('name') or rt['module']} {rt.get('version') or ''}".strip(),
            "profile": " + ".join(d["verdict"]["profiles"]) or "none",
            "device": device_text(target),
            "date": d["generated_at"][:10],
            "suite": (commit[:12] if commit else "unknown")
            + (" (uncommitted changes)" if git.get("dirty") else ""),
            "spec": d["spec"]["version"],
        }

    def clause(self, cid: str) -> dict[str, Any] | None:
        return self.by_id.get(cid)

    def must_pass(self) -> tuple[int, int]:
        """(must-pass clauses that passed or were waived, must-pass clauses)."""
        req = [c for c in self.doc["clauses"] if c["must_pass"] and not c["withdrawn"]]
        return sum(c["outcome"] in (oc.PASS, oc.WAIVED) for c in req), len(req)


def device_text(target: dict[str, Any]) -> str:
    """Where a run executed, short: ``NVIDIA H100 80GB HBM3``, ``simulated device``..."""
    kind = target["kind"]
    if kind == "gpu":
        n = len(target.get("devices") or [])
        return f"{n} × {target.get('model')}" if n > 1 else str(target.get("model"))
    if kind == "simulated":
        return "simulated device" + (f" ({target['model']})" if target.get("model") else "")
    if kind == "cpu":
        return "host CPU (no GPU)"
    return "unknown device" + (f" ({target['model']})" if target.get("model") else "")


def failure_text(clause: dict[str, Any], limit: int = TOOLTIP_LIMIT) -> str:
    """What the failing tests of a clause said, one test per line, bounded."""
    lines = [f"{f.get('nodeid')}: {f.get('outcome')}: {f.get('message')}"
             for f in clause.get("failures") or []]
    if not lines:
        lines = list(clause.get("notes") or [])
    if not lines and clause.get("waiver"):
        lines = [f"waiver {clause['waiver']}"]
    text = "\n".join(" ".join(str(x).split()) for x in lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- finding the reports

def _search(folder: Path, depth: int) -> list[Path]:
    found: list[Path] = []
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise ReportError(f"{folder}: cannot list ({exc.strerror or exc})") from exc
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.name == REPORT_NAME and entry.is_file():
            return [entry]
        if entry.is_dir() and depth > 0:
            found += _search(entry, depth - 1)
    return found


def find_reports(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """(certification.json, named explicitly) for each argument, searching folders."""
    out: list[tuple[Path, bool]] = []
    for p in paths:
        if p.is_dir() and not (p / REPORT_NAME).exists():
            out += [(f, False) for f in _search(p, SEARCH_DEPTH)]
        elif p.is_dir() or p.exists() or p.is_symlink():
            out.append((p / REPORT_NAME if p.is_dir() else p, True))
        else:
            raise ReportError(f"{p}: no such file or folder")
    if len(out) > MAX_REPORTS:
        raise ReportError(f"{len(out)} reports, more than the {MAX_REPORTS} a matrix holds")
    return out


def load_columns(paths: Sequence[Path], out_dir: Path) -> tuple[list[Column], list[str]]:
    """The columns, and notes on what was left out."""
    columns, notes = [], []
    seen: set[Path] = set()
    for file, explicit in find_reports(paths):
        key = file.resolve()
        if key in seen:
            continue
        seen.add(key)
        doc = load_report(file)
        if doc["verdict"]["status"] == model.NO_VERDICT and not explicit:
            where = os.path.relpath(file.resolve(), out_dir.resolve()).replace(os.sep, "/")
            notes.append(f"left out {where}: NO VERDICT (it ran no conformance test)")
            continue
        html_file = file.parent / "certification.html"
        href = None
        if html_file.is_file() and not html_file.is_symlink():
            rel = os.path.relpath(html_file.resolve(), out_dir.resolve())
            href = quote(rel.replace(os.sep, "/"))
        columns.append(Column(file, doc, href))
    if not columns:
        raise ReportError("no certification report to show")
    return columns, notes


def clause_rows(columns: Sequence[Column]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(area, clause entries) in SPEC.md order of the first report naming each clause."""
    order: dict[str, dict[str, Any]] = {}
    for col in columns:
        for c in col.doc["clauses"]:
            order.setdefault(c["id"], c)
    areas: dict[str, list[dict[str, Any]]] = {}
    for c in order.values():
        areas.setdefault(c["area"], []).append(c)
    return list(areas.items())


def _must_anywhere(cid: str, columns: Sequence[Column]) -> bool:
    return any((col.clause(cid) or {}).get("must_pass") for col in columns)


# -- HTML

CSS = """
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;color:#212121;
 margin:0;padding:0 16px 40px;background:#fafafa}
h1{font-size:24px;margin:18px 0 4px}
table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #e0e0e0;padding:3px 6px;text-align:left;vertical-align:top}
thead th{background:#f5f5f5;position:sticky;top:0;z-index:1;font-weight:600;min-width:150px}
td.c,th.c{position:sticky;left:0;background:#fff;z-index:0}
tr.area th{background:#eceff1;text-align:left;font-size:15px}
.o{display:inline-block;border-radius:3px;padding:0 5px;font:600 12px/18px ui-monospace,monospace}
.mp .o{outline:2px solid #000;outline-offset:-1px}
.tag{font-size:11px;color:#757575}
.v{display:block;border-radius:3px;padding:2px 6px;margin:4px 0;font-weight:800;color:#fff}
details{margin:2px 0}summary{cursor:pointer}
pre{white-space:pre-wrap;max-width:40em;max-height:12em;overflow:auto;font-size:11px;margin:2px 0}
.muted{color:#757575}
"""

_COLOURS = {
    oc.PASS: ("#2e7d32", "#fff"), oc.WAIVED: ("#1565c0", "#fff"),
    oc.NOT_SUPPORTED: ("#90a4ae", "#fff"), oc.FAIL: ("#c62828", "#fff"),
    oc.ERROR: ("#ef6c00", "#fff"), oc.TIMEOUT: ("#6a1b9a", "#fff"),
    oc.CRASH: ("#212121", "#fff"), oc.NOT_RUN: ("#eceff1", "#546e7a"),
}
_VERDICT_COLOURS = {model.CERTIFIED: "#1b5e20", model.NOT_CERTIFIED: "#b71c1c",
                    model.INCOMPLETE: "#e65100", model.NO_VERDICT: "#37474f"}


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _badge(outcome: str) -> str:
    bg, fg = _COLOURS.get(outcome, ("#fff", "#000"))
    return f'<span class="o" style="background:{bg};color:{fg}">{_e(outcome)}</span>'


def _html_header(col: Column) -> str:
    f = col.facts()
    v = col.verdict
    passed, required = col.must_pass()
    reasons = "\n".join(one_line(r["message"], 400) for r in col.doc["verdict"]["reasons"])
    verdict = (f'<span class="v" style="background:{_VERDICT_COLOURS.get(v, "#37474f")}" '
               f'title="{_e(reasons)}">{_e(v)}</span>')
    link = f'<a href="{_e(col.html_href)}">report</a>' if col.html_href else ""
    return (f"<th>{verdict}<b>{_e(f['implementation'])}</b><br>"
            f"<span class=tag>profile</span> <span title=\"{_e(col.doc['verdict']['scope'] or '')}\">"
            f"{_e(f['profile'])}</span><br>"
            f"<span class=tag>device</span> {_e(f['device'])}<br>"
            f"<span class=tag>date</span> {_e(f['date'])}<br>"
            f"<span class=tag>suite</span> <code>{_e(f['suite'])}</code><br>"
            f"<span class=tag>spec</span> {_e(f['spec'])}<br>"
            f"<span class=tag>must-pass</span> {passed}/{required} {link}</th>")


def _html_cell(col: Column, cid: str) -> str:
    c = col.clause(cid)
    if c is None:
        return '<td class="muted">—</td>'
    badge = _badge(c["outcome"])
    cls = ' class="mp"' if c["must_pass"] else ""
    if c["outcome"] not in NOT_PASSED:
        return f"<td{cls}>{badge}</td>"
    text = failure_text(c)
    if col.html_href:
        badge = f'<a href="{_e(col.html_href)}#{quote(cid)}" title="{_e(text)}">{badge}</a>'
    detail = f"<details><summary>why</summary><pre>{_e(text)}</pre></details>" if text else ""
    return f"<td{cls}>{badge}{detail}</td>"


def render_html(columns: Sequence[Column], notes: Sequence[str]) -> str:
    head = "".join(_html_header(col) for col in columns)
    rows = []
    span = len(columns) + 1
    for area, clauses in clause_rows(columns):
        rows.append(f'<tr class="area"><th colspan="{span}">{_e(area)}</th></tr>')
        for c in clauses:
            must = " <span class=tag>must-pass</span>" if _must_anywhere(c["id"], columns) else ""
            rows.append(f'<tr><td class="c"><b>{_e(c["id"])}</b>{must}<br>'
                        f'<span class=muted>{_e(c["title"])}</span></td>'
                        + "".join(_html_cell(col, c["id"]) for col in columns) + "</tr>")
    legend = ("<p>A row per clause of SPEC.md, a column per certification run. A framed "
              "outcome is must-pass in that run; an outcome that did not pass links to the "
              "clause in that run's report, and its tooltip (and <i>why</i>) gives the failing "
              "tests' messages. — : the run's spec has no such clause.</p>")
    left = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>Certification matrix</title><style>{CSS}</style></head><body>"
            f"<h1>Certification matrix</h1>{legend}"
            + (f"<ul class=muted>{left}</ul>" if left else "")
            + f'<table><thead><tr><th class="c">clause</th>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></body></html>\n")


# -- Markdown

#: Characters with a meaning inline or in a table cell (a cell never starts a line, so
#: ``#``, ``+``, ``-`` and ``1.`` cannot start a block; ``(`` cannot follow an escaped ``]``).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&$])")


def md_escape(text: Any) -> str:
    """``text`` as literal Markdown inline text on one line (a table cell)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_title(text: str) -> str:
    """``text`` as a Markdown link title (between double quotes)."""
    return re.sub(r'(["()])', r"\\\1", md_escape(text))


def _md_cell(col: Column, cid: str) -> str:
    c = col.clause(cid)
    if c is None:
        return "—"
    text = c["outcome"]
    if c["outcome"] in NOT_PASSED:
        why = failure_text(c)
        if col.html_href:
            title = f' "{md_title(why)}"' if why else ""
            text = f"[{text}]({col.html_href}#{quote(cid)}{title})"
    return f"**{text}**" if c["must_pass"] else text


def render_md(columns: Sequence[Column], notes: Sequence[str]) -> str:
    lines = ["# Certification matrix", "",
             "A row per clause of SPEC.md, a column per certification run. **Bold**: must-pass "
             "in that run. An outcome that did not pass links to the clause in that run's "
             "report; the link's title gives the failing tests' messages. —: the run's spec "
             "has no such clause.", ""]
    lines += [f"- {md_escape(n)}" for n in notes]
    if notes:
        lines.append("")
    lines += ["| run | verdict | implementation | profile | device | date | suite commit | "
              "spec | must-pass passed |", "|---|---|---|---|---|---|---|---|---|"]
    for i, col in enumerate(columns, 1):
        f = col.facts()
        passed, required = col.must_pass()
        verdict = md_escape(col.verdict)
        if col.html_href:
            verdict = f"[{verdict}]({col.html_href})"
        lines.append(f"| {i} | **{verdict}** | {md_escape(f['implementation'])} | "
                     f"{md_escape(f['profile'])} | {md_escape(f['device'])} | "
                     f"{md_escape(f['date'])} | `{md_escape(f['suite'])}` | "
                     f"{md_escape(f['spec'])} | {passed}/{required} |")
    header = "| clause | title | " + " | ".join(
        f"{i}: {md_escape(col.facts()['implementation'])} ({md_escape(col.verdict)})"
        for i, col in enumerate(columns, 1)) + " |"
    sep = "|---|---|" + "---|" * len(columns)
    for area, clauses in clause_rows(columns):
        lines += ["", f"## {md_escape(area)}", "", header, sep]
        for c in clauses:
            must = " (must-pass)" if _must_anywhere(c["id"], columns) else ""
            lines.append(f"| {md_escape(c['id'])}{must} | {md_escape(c['title'])} | "
                         + " | ".join(_md_cell(col, c["id"]) for col in columns) + " |")
    return "\n".join(lines) + "\n"


# -- command

def write_pages(columns: Sequence[Column], notes: Sequence[str], out_dir: Path) -> list[Path]:
    """Writes both pages, each aside and then renamed; returns their paths."""
    from reports.writer import atomic_write
    pages = {out_dir / HTML_NAME: render_html(columns, notes),
             out_dir / MD_NAME: render_md(columns, notes)}
    for path, text in pages.items():
        atomic_write(path, text)
    return list(pages)


def main(reports: Sequence[Path], out_dir: Path) -> int:
    try:
        if out_dir.exists() and not out_dir.is_dir():
            raise ReportError(f"{out_dir}: not a folder")
        out_dir.mkdir(parents=True, exist_ok=True)
        columns, notes = load_columns(reports, out_dir)
        written = write_pages(columns, notes, out_dir)
    except ReportError as exc:
        print(f"matrix: {one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"matrix: {one_line(exc)}", file=sys.stderr)
        return 2
    for n in notes:
        print(n)
    print(f"wrote {written[0]} and {written[1]}: {len(columns)} run(s)")
    return 0


def add_parser(sub: Any) -> None:
    """``matrix`` under ``python -m reports``."""
    p = sub.add_parser("matrix", help="one HTML and Markdown matrix of certification runs "
                                      "(clause by run)")
    p.add_argument("reports", type=Path, nargs="+",
                   help="certification.json files, run folders, or folders to search")
    p.add_argument("-o", "--output", type=Path, required=True, help="folder for the pages")
    p.set_defaults(func=lambda args: main(args.reports, args.output))
