"""``certification.html``: one self-contained page (inline CSS and SVG, no external resources)."""

from __future__ import annotations

from html import escape
from typing import Any

from reports import model, render_ranking, safe_text
from reports.render_md import bench_figures, host_text, target_text

#: outcome -> (background, text colour, legend meaning)
STYLE = {
    "PASS": ("#2e7d32", "#fff", "passed"),
    "WAIVED": ("#1565c0", "#fff", "failed, covered by a valid waiver"),
    "NOT_SUPPORTED": ("#90a4ae", "#fff", "capability not declared"),
    "FLAKY": ("#ad1457", "#fff", "passed in some runs, failed in others (--repeat)"),
    "FAIL": ("#c62828", "#fff", "failed"),
    "ERROR": ("#ef6c00", "#fff", "setup/teardown error"),
    "TIMEOUT": ("#6a1b9a", "#fff", "hung"),
    "CRASH": ("#212121", "#fff", "process crashed"),
    "NOT_RUN": ("#eceff1", "#546e7a", "no test exercised it"),
    "SKIPPED": ("#cfd8dc", "#37474f", "skipped, not applicable"),
}
VERDICT_STYLE = {model.CERTIFIED: ("#1b5e20", "#e8f5e9"),
                 model.CERTIFIED_WITH_WAIVERS: ("#0d47a1", "#e3f2fd"),
                 model.NOT_CERTIFIED: ("#b71c1c", "#ffebee"),
                 model.INCOMPLETE: ("#e65100", "#fff3e0"),
                 model.NO_VERDICT: ("#37474f", "#eceff1")}

CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 color:#212121;margin:0;background:#fafafa}
main,.wrap{max-width:1200px;margin:0 auto;padding:0 24px 48px}
.verdict .wrap{padding:0 24px}
h2{font-size:20px;margin:32px 0 10px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
td code{overflow-wrap:anywhere}
pre{white-space:pre-wrap;margin:0;max-height:14em;overflow:auto}
.verdict{padding:28px 0 20px;border-bottom:4px solid}
.verdict .status{font-size:46px;font-weight:800;letter-spacing:.02em;margin:0}
.verdict .sub{font-size:16px;margin-top:6px}
.verdict ul{margin:12px 0 0;padding-left:20px;font-size:15px}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:8px;
 margin-top:18px}
.fact{background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:8px 10px}
.fact b{display:block;font-size:11px;text-transform:uppercase;color:#757575;letter-spacing:.05em}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;border-radius:3px;padding:0 6px;font-size:12px;font-weight:600;
 white-space:nowrap}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:8px 0 12px;font-size:13px}
.legend span.sw{display:inline-block;width:14px;height:14px;border-radius:3px;
 vertical-align:-2px;margin-right:5px;border:1px solid #0002}
.grid{display:grid;grid-template-columns:90px 1fr;gap:6px 10px;align-items:start}
.grid .area{font-weight:700;padding-top:6px}
.cells{display:flex;flex-wrap:wrap;gap:4px}
.cell{min-width:62px;padding:0 5px;height:34px;border-radius:4px;
 font:600 12px/34px ui-monospace,monospace;text-align:center;border:1px solid #0002}
.cell.opt{opacity:.45;border:1px dashed #000}
.warn{background:#fffde7;border:1px solid #fff59d;border-radius:6px;padding:8px 12px}
.warn ul{margin:4px 0;padding-left:20px}
.figs{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
figure{margin:0;background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:10px;
 flex:0 1 auto;max-width:100%}
figure svg{max-width:100%;height:auto}
figcaption{font-size:12px;color:#616161;margin-top:4px}
details{margin:6px 0}
summary{cursor:pointer;font-weight:600;padding:4px 0}
.muted{color:#757575}
"""


def badge(outcome: str) -> str:
    bg, fg, _ = STYLE[outcome]
    return f'<span class="badge" style="background:{bg};color:{fg}">{escape(outcome)}</span>'


def _e(text: Any) -> str:
    """Every text of the page passes here: escaped, control and bidi characters visible
    (reports/safe_text.py)."""
    return safe_text.html(text)


def _facts(doc: dict[str, Any]) -> str:
    rt, suite, v = doc["runtime"], doc["suite"], doc["verdict"]
    git = suite.get("git") or {}
    inv = doc["invocation"]
    items = [
        ("Runtime", f"{_e(rt['name'])} {_e(rt['version'])} <span class=muted>({_e(rt['module'])})</span>"),
        ("Capabilities", _e(", ".join(rt["capabilities"]) or "none")),
        ("Spec version", _e(doc["spec"]["version"])
         + f" <span class=muted>({doc['spec']['clauses']} clauses)</span>"),
        ("Profile", _e(", ".join(v["profiles"]) or "none")),
        ("Execution target", _e(target_text(doc["execution_target"]))),
        ("Suite", f"{_e(suite['version'])} <code>{_e((git.get('commit') or 'unknown')[:12])}"
                  f"</code>{' dirty' if git.get('dirty') else ''}"),
        ("Run", f"{_e(doc['generated_at'])}, {inv['duration_s']} s, "
                f"{inv['xdist_workers'] or 'no'} xdist workers"),
        ("Host", _e(host_text(doc["platform"]))),
        ("Command", f"<code>{_e(inv.get('command') or '')}</code>"),
        ("Hypothesis profile", _e(inv["hypothesis_profile"])),
    ]
    if rt.get("worker_cmd"):
        items.append(("Worker command", f"<code>{_e(rt['worker_cmd'])}</code>"))
    if rt.get("worker_hello"):
        items.append(("Worker's hello record", _e(model.hello_identity(rt["worker_hello"]))))
    return '<div class="facts">' + "".join(
        f'<div class="fact"><b>{k}</b>{val}</div>' for k, val in items) + "</div>"


def _verdict(doc: dict[str, Any]) -> str:
    v = doc["verdict"]
    fg, bg = VERDICT_STYLE[v["status"]]
    rt = doc["runtime"]
    reasons = "".join(f"<li>{_e(r['message'])}</li>" for r in v["reasons"])
    if v["status"] == model.NO_VERDICT:
        figs = bench_figures(doc)
        met = sum(r["met"] == "met" for r in figs)
        judged = sum(r["met"] in ("met", "missed") for r in figs)
        sub = (f'<b>{_e(rt["name"])} {_e(rt["version"])}</b> &middot; not a certification run'
               f' &middot; {len(doc["benchmarks"])} benchmark(s)'
               + (f", {met} of {judged} figures met their targets" if judged else ""))
    else:
        must = doc["summary"]["must_pass"]
        ok = must["by_outcome"]["PASS"] + must["by_outcome"]["WAIVED"]
        sub = (f'<b>{_e(rt["name"])} {_e(rt["version"])}</b> against SPEC.md '
               f'<b>{_e(doc["spec"]["version"])}</b> &middot; {ok} of {must["total"]} must-pass '
               f'clauses passed or waived'
               + (f' &middot; <b>{_e(v["scope"])}</b>' if v.get("scope") else ""))
    return (f'<header class="verdict" style="background:{bg};border-color:{fg}">'
            f'<div class="wrap"><p class="status" style="color:{fg}">{_e(v["status"])}</p>'
            f'<div class="sub">{sub}</div>'
            + (f"<ul>{reasons}</ul>" if reasons else "") + _facts(doc) + "</div></header>")


def _summary(doc: dict[str, Any], keys: tuple[str, ...] = ("must_pass", "clauses", "tests")
             ) -> str:
    order = list(doc["summary"]["tests"]["by_outcome"])
    head = "".join(f"<th>{badge(o)}</th>" for o in order)
    rows = []
    labels = {"must_pass": "Must-pass clauses", "clauses": "All clauses", "tests": "Tests"}
    for key, label in ((k, labels[k]) for k in keys):
        s = doc["summary"][key]
        cells = "".join(f'<td class="n">{s["by_outcome"].get(o, "–") or ""}</td>'
                        for o in order)
        rows.append(f"<tr><th>{label}</th><td class=n><b>{s['total']}</b></td>{cells}</tr>")
    return (f"<h2>Summary</h2><table><tr><th></th><th>total</th>{head}</tr>"
            + "".join(rows) + "</table>")


def _legend(outcomes: list[str]) -> str:
    parts = [f'<span><span class="sw" style="background:{STYLE[o][0]}"></span><b>{o}</b> '
             f'<span class=muted>{STYLE[o][2]}</span></span>' for o in outcomes]
    parts.append('<span><span class="sw" style="background:#2e7d32;opacity:.45;'
                 'border:1px dashed #000"></span>faded: not must-pass in this run</span>')
    return '<div class="legend">' + "".join(parts) + "</div>"


def _grid(doc: dict[str, Any]) -> str:
    areas: dict[str, list[dict]] = {}
    for c in doc["clauses"]:
        if not c["withdrawn"]:
            areas.setdefault(c["area"], []).append(c)
    rows = []
    for area, cs in areas.items():
        cells = []
        for c in cs:
            bg, fg, _ = STYLE[c["outcome"]]
            tip = f"{c['id']} {c['title']}: {c['outcome']} ({len(c['tests'])} tests)"
            cells.append(f'<a href="#{_e(c["id"])}" title="{_e(tip)}" style="text-decoration:none">'
                         f'<div class="cell{"" if c["must_pass"] else " opt"}" '
                         f'style="background:{bg};color:{fg}">{_e(c["id"])}</div></a>')
        rows.append(f'<div class="area">{_e(area)}</div><div class="cells">{"".join(cells)}</div>')
    return ("<h2>Clauses</h2>"
            + _legend(["PASS", "WAIVED", "NOT_SUPPORTED", "FLAKY", "FAIL", "ERROR", "TIMEOUT",
                       "CRASH", "NOT_RUN"])
            + f'<div class="grid">{"".join(rows)}</div>')


def spec_reference(c: dict[str, Any]) -> str:
    """Where a clause is specified, in words: ``SPEC.md line 268 (#bfc-5-free-and-coalescing)``."""
    where = c.get("spec") or {}
    return f"{where.get('path', 'SPEC.md')} line {where.get('line')} (#{where.get('anchor')})"


def _clause_detail(c: dict[str, Any], tests: dict[str, dict]) -> str:
    """A failing clause: its failures (test and message), its text and where to read it."""
    failures = "".join(
        f"<div><code>{_e(f['nodeid'])}</code> {badge(f['outcome'])}"
        + ("" if f["tagged"] else " <span class=muted>(untagged failure: blamed on every "
                                  "clause of the test)</span>")
        + f"<pre>{_e(f['message'])}</pre>"
        + (f"<p class=muted>{_e(f['antman_note'])}</p>" if f.get("antman_note") else "")
        + "</div>" for f in c.get("failures") or [])
    if not failures:
        failures = "".join(
            f"<div><code>{_e(n)}</code> {badge(tests[n]['outcome'])}"
            + (f"<pre>{_e(tests[n]['message'])}</pre>" if tests[n]["message"] else "")
            + "</div>" for n in c["tests"] if n in tests and tests[n]["outcome"] != "PASS")
    text = (f"<details><summary>{_e(spec_reference(c))}</summary><pre>{_e(c['text'])}</pre>"
            "</details>" if c.get("text") else "")
    return (render_ranking.html_line(c)
            + (failures or "<span class=muted>no test names this clause</span>") + text)


def _problems(doc: dict[str, Any]) -> str:
    tests = {t["nodeid"]: t for t in doc["tests"]}
    bad = [c for c in doc["clauses"] if c["must_pass"] and c["outcome"] not in ("PASS", "WAIVED")]
    if not bad:
        return ""
    rows = []
    for c in render_ranking.ranked(bad):
        rows.append(f"<tr><td><b>{_e(c['id'])}</b> {_e(c['title'])}</td><td>{badge(c['outcome'])}"
                    f"</td><td>{_clause_detail(c, tests)}</td></tr>")
    return ("<h2>Must-pass clauses that did not pass</h2><table><tr><th>clause</th>"
            "<th>outcome</th><th>failures, and the clause in SPEC.md</th></tr>"
            + "".join(rows) + "</table>")


def _notes(doc: dict[str, Any]) -> str:
    warns = doc["verdict"]["warnings"]
    if not warns:
        return ""
    return ('<h2>Notes</h2><div class="warn"><ul>'
            + "".join(f"<li>{_e(w['message'])}</li>" for w in warns) + "</ul></div>")


def _waivers(doc: dict[str, Any]) -> str:
    ws = doc["expectations"]["waivers"]
    if not ws:
        return ""
    rows = "".join(
        f"<tr><td><code>{_e(w['id'])}</code></td><td><b>{_e(w['status'])}</b> "
        f"<span class=muted>{_e(w['note'])}</span></td><td>{_e(', '.join(w['matched'][:6]))}"
        + (f" <span class=muted>(of {w.get('matched_count')})</span>"
           if (w.get("matched_count") or 0) > 6 else "") + ""
        f"</td><td>{_e(w['reason'])}</td><td>{_e(', '.join(w['gpu']) or 'any')}</td>"
        f"<td>{_e(w['link'])}</td></tr>" for w in ws)
    return (f"<h2>Waivers</h2><p class=muted>{_e(doc['expectations']['path'])}</p><table><tr>"
            "<th>waiver</th><th>status</th><th>matched</th><th>reason</th><th>GPU scope</th>"
            "<th>link</th></tr>" + rows + "</table>")


def _waived_and_flaky(doc: dict[str, Any]) -> str:
    """The waived clauses and tests with their waivers' reasons; the FLAKY tests with their
    pass ratio and each failed run's message."""
    from reports import outcome_summary
    parts = []
    waived = outcome_summary.waived_lines(doc)
    if waived:
        parts.append("<h2>Waived</h2><ul>" + "".join(f"<li>{_e(w)}</li>" for w in waived)
                     + "</ul>")
    flaky = [t for t in doc["tests"] if t.get("observed_outcome") == "FLAKY" and t.get("repeat")]
    if flaky:
        rows = "".join(
            f"<tr><td><code>{_e(t['nodeid'])}</code></td><td>{badge('FLAKY')} passed "
            f"{t['repeat']['passed']} of {t['repeat']['runs']} runs</td><td>"
            + "".join(f"<div>run {f['run']} {badge(f['outcome'])}<pre>{_e(f['message'] or '')}"
                      f"</pre></div>" for f in t["repeat"]["failures"][:5])
            + "</td></tr>" for t in flaky)
        parts.append("<h2>Flaky tests</h2><table><tr><th>test</th><th>runs</th>"
                     "<th>failed runs</th></tr>" + rows + "</table>")
    return "".join(parts)


def _plots(figures: list[dict[str, str]]) -> list[str]:
    parts = []
    for f in figures:
        if f.get("error"):
            parts.append(f"<p class=muted>{_e(f['title'])} ({_e(f['nodeid'])}): "
                         f"{_e(f['error'])}</p>")
            continue
        cap = f"<figcaption>{_e(f['title'])}" + (
            f" &middot; from <code>{_e(f['nodeid'])}</code>" if f["nodeid"] else "") + \
            "</figcaption>"
        parts.append(f"<figure>{f['svg']}{cap}</figure>")
    return [f'<div class="figs">{"".join(parts)}</div>'] if parts else []


def _bench_stats(doc: dict[str, Any]) -> list[str]:
    if not doc["benchmarks"]:
        return []
    rows = "".join(
        f"<tr><td><code>{_e(b['fullname'])}</code></td>"
        + "".join(f'<td class="n">{(b["stats"][k] or 0) * 1e6:.2f}</td>'
                  for k in ("mean", "min", "max", "stddev", "median"))
        + f'<td class="n">{b["stats"]["rounds"]}</td></tr>' for b in doc["benchmarks"])
    return ["<h3>Benchmark statistics (µs)</h3><table><tr><th>benchmark</th><th>mean"
            "</th><th>min</th><th>max</th><th>stddev</th><th>median</th><th>rounds"
            "</th></tr>" + rows + "</table>"]


def _bench_targets(doc: dict[str, Any]) -> list[str]:
    figs = bench_figures(doc)
    if not figs:
        return []
    colour = {"met": "#2e7d32", "missed": "#c62828"}
    body = "".join(
        f"<tr><td><code>{_e(r['benchmark'])}</code></td><td>{_e(r['figure'])}</td>"
        f'<td class="n">{_e(r["value"])}</td><td>{_e(r["target"])}</td>'
        f"<td style='color:{colour.get(r['met'], '#757575')};font-weight:600'>"
        f"{_e(r['met'])}</td><td>{_e(r['machine'])}</td>"
        f"<td class=muted>{_e(r['how'])}</td></tr>" for r in figs)
    return ["<h3>Benchmark figures against their targets</h3><table><tr>"
            "<th>benchmark</th><th>figure</th><th>value</th><th>target</th>"
            "<th></th><th>machine</th><th>how measured</th></tr>" + body + "</table>"]


def _figures(doc: dict[str, Any], figures: list[dict[str, str]]) -> str:
    """Certification runs: plots, then benchmark statistics and figures against targets."""
    parts = _plots(figures) + _bench_stats(doc) + _bench_targets(doc)
    return "<h2>Figures</h2>" + "".join(parts) if parts else ""


def _benchmarks_first(doc: dict[str, Any], figures: list[dict[str, str]]) -> str:
    """Runs without a verdict: figures against targets, plots, then statistics."""
    parts = _bench_targets(doc) + _plots(figures) + _bench_stats(doc)
    if not parts:
        return "<h2>Benchmarks</h2><p class=muted>this run recorded no benchmark</p>"
    return "<h2>Benchmarks</h2>" + "".join(parts)


def _by_area(doc: dict[str, Any]) -> str:
    tests = {t["nodeid"]: t for t in doc["tests"]}
    areas: dict[str, list[dict]] = {}
    for c in doc["clauses"]:
        areas.setdefault(c["area"], []).append(c)
    parts = ["<h2>Clauses by area</h2>"]
    for area, cs in areas.items():
        counts: dict[str, int] = {}
        for c in cs:
            counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
        open_ = any(c["outcome"] in ("FAIL", "ERROR", "TIMEOUT", "CRASH")
                    or (c["must_pass"] and c["outcome"] != "PASS") for c in cs)
        rows = []
        for c in cs:
            tl = "".join(f"<div><code>{_e(n)}</code> {badge(tests[n]['outcome'])}</div>"
                         for n in c["tests"] if n in tests)
            notes = []
            if c["waiver"]:
                notes.append(f"waiver {_e(c['waiver'])}")
            if c["partial"]:
                notes.append("some tests skipped or not run")
            if c["withdrawn"]:
                notes.append("withdrawn")
            rows.append(f'<tr id="{_e(c["id"])}"><td><b>{_e(c["id"])}</b></td><td>{_e(c["title"])}'
                        f'</td><td>{badge(c["outcome"])}</td><td>{"yes" if c["must_pass"] else ""}'
                        f'</td><td>{tl or "<span class=muted>none</span>"}</td>'
                        f'<td>{"; ".join(notes)}</td></tr>')
        summary = " ".join(f"{badge(o)}&nbsp;{n}" for o, n in counts.items())
        parts.append(f"<details{' open' if open_ else ''}><summary>{_e(area)} &nbsp; {summary}"
                     "</summary><table><tr><th>clause</th><th>title</th><th>outcome</th>"
                     "<th>must-pass</th><th>tests</th><th>notes</th></tr>"
                     + "".join(rows) + "</table></details>")
    return "".join(parts)


def _clauses_of(t: dict[str, Any]) -> str:
    """The test's clauses; for one that did not pass, what it says about each."""
    outcomes = t.get("clause_outcomes") or {}
    if t["outcome"] == "PASS" or not outcomes:
        return _e(", ".join(t["clauses"]))
    return "<br>".join(f"{_e(c)} {badge(o)}" for c, o in outcomes.items())


def _tests(doc: dict[str, Any]) -> str:
    bad = [t for t in doc["tests"] if t["outcome"] != "PASS"]

    def rows(ts: list[dict]) -> str:
        out = []
        for t in ts:
            seed = t["hypothesis"] or {}
            extra = (f"<br><span class=muted>observed {t['observed_outcome']}, waiver "
                     f"{_e(t['waiver'])}</span>" if t["waiver"] else "")
            failures = t.get("failures") or []
            if failures:
                message = "".join(
                    f"<div><b>{_e(', '.join(f['clauses']))}</b>"
                    + ("" if f["tagged"] else " <span class=muted>(untagged)</span>")
                    + f"<pre>{_e(f['message'])}</pre></div>" for f in failures)
            else:
                message = f"<pre>{_e(t['message'])}</pre>" if t["message"] else ""
            if t.get("antman"):
                message += f"<p class=muted>{_e(t['antman']['note'])}</p>"
            out.append(f"<tr><td><code>{_e(t['nodeid'])}</code></td><td>{badge(t['outcome'])}"
                       f"{extra}</td><td>{_clauses_of(t)}</td>"
                       f'<td class="n">{t["duration_s"]:.3f}</td>'
                       f"<td>{_e(seed.get('seed') or seed.get('source') or '')}</td>"
                       f"<td>{message}</td></tr>")
        return ("<table><tr><th>test</th><th>outcome</th><th>clauses</th><th>s</th>"
                "<th>Hypothesis seed</th><th>message</th></tr>" + "".join(out) + "</table>")

    parts = ["<h2>Tests</h2>"]
    if bad:
        parts.append(f"<h3>Not passed ({len(bad)})</h3>" + rows(bad))
    parts.append(f"<details><summary>All tests ({len(doc['tests'])})</summary>"
                 + rows(doc["tests"]) + "</details>")
    return "".join(parts)


def _provenance(doc: dict[str, Any]) -> str:
    import json
    keep = {k: doc[k] for k in ("runtime", "suite", "spec", "mustpass", "execution_target",
                                "python", "platform", "invocation")}
    keep["expectations"] = {k: v for k, v in doc["expectations"].items() if k != "waivers"}
    return ("<h2>Provenance</h2><details><summary>Runtime, suite, target, invocation</summary>"
            f"<pre style='max-height:none'>{_e(json.dumps(keep, indent=2))}</pre></details>")


def render(doc: dict[str, Any], figures: list[dict[str, str]]) -> str:
    v = doc["verdict"]["status"]
    title = f"{v}: {doc['runtime']['name']} {doc['runtime']['version']} · spec {doc['spec']['version']}"
    if v == model.NO_VERDICT:  # nothing certified: the benchmarks first, no clause listings
        sections = [_benchmarks_first(doc, figures), _notes(doc), _summary(doc, ("tests",)),
                    _waivers(doc), _tests(doc), _provenance(doc)]
    else:
        sections = [_problems(doc), _waived_and_flaky(doc), _notes(doc), _summary(doc),
                    _grid(doc), _waivers(doc),
                    _figures(doc, figures), _by_area(doc), _tests(doc), _provenance(doc)]
    body = "".join([_verdict(doc), "<main>", *sections, "</main>"])
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n")
