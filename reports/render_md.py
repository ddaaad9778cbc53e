"""``certification.md``: the certification document as Markdown (verdict first)."""

from __future__ import annotations

from typing import Any

from reports import claim_status, model, render_ranking, safe_text

SYMBOL = {"PASS": "✅", "FAIL": "❌", "ERROR": "🟧", "TIMEOUT": "⏱️", "CRASH": "💀",
          "NOT_SUPPORTED": "➖", "WAIVED": "🛡️", "NOT_RUN": "⬜", "SKIPPED": "⏭️",
          "FLAKY": "🎲"}
VERDICT_SYMBOL = {model.CERTIFIED: "✅", model.NOT_CERTIFIED: "❌", model.INCOMPLETE: "⚠️",
                  model.NO_VERDICT: "ℹ️", model.CERTIFIED_WITH_WAIVERS: "🛡️"}


def _cell(text: Any) -> str:
    """Text of the document in a sentence, list item or table cell: one line, Markdown syntax
    inert, control and bidi characters visible (reports/safe_text.py)."""
    return safe_text.markdown(text)


def _code(text: Any, *, in_table: bool = False) -> str:
    """Text of the document as a code span (backticks included)."""
    return safe_text.markdown_code(text, in_table=in_table)


def target_text(target: dict[str, Any], short: bool = False) -> str:
    """The execution target in words (``short``: without the note)."""
    kind, note = target["kind"], target.get("note")
    if kind == "gpu" and target["devices"]:
        return (f"{len(target['devices'])} × {target['model']}, driver "
                f"{target['driver_version']}, CUDA {target['cuda_version']}"
                + ("" if short else clocks_text(target)))
    text = {"gpu": f"GPU {target['model']}", "cpu": "host CPU",
            "unknown": "unknown target"}.get(kind, "simulated device")
    devices = target.get("worker_devices")
    if kind == "unknown" and devices:
        text = f"{len(devices)} unidentified device{'s' if len(devices) > 1 else ''}"
    elif kind in ("gpu", "simulated") and devices:
        text = f"{len(devices)} × {text}"
    return text + (f" ({note})" if note and not short else "")


def clocks_text(target: dict[str, Any]) -> str:
    """``; GPU 0 clocks at start/end: SM 1980/1980 MHz (max 1980), memory 2619/2619 MHz``."""
    clocks = (target.get("extras") or {}).get("gpu_clocks")
    if not isinstance(clocks, dict) or not clocks.get("start"):
        return ""
    start, end = clocks["start"][0], (clocks.get("end") or [{}])[0]
    return (f"; GPU {start.get('index')} clocks at start/end: SM {start.get('sm_mhz')}/"
            f"{end.get('sm_mhz')} MHz (max {start.get('sm_max_mhz')}), memory "
            f"{start.get('memory_mhz')}/{end.get('memory_mhz')} MHz")


COMMIT_SOURCE = {"git": "the git checkout", "env": "ANTMAN_SUITE_COMMIT",
                 "archive": "the git archive stamp"}


def host_text(platform: dict[str, Any]) -> str:
    """The host in words: ``2 × Intel(R) Xeon(R) ... (x86_64)``."""
    model = platform.get("cpu_model") or "unknown CPU model"
    return f"{platform.get('cpu_count')} × {model} ({platform.get('machine')})"


def bench_machine(info: dict[str, Any]) -> str:
    """Where a benchmark ran, from its ``extra_info``."""
    cpus = f"{info.get('cpu_count')} CPUs" if info.get("cpu_count") else ""
    if info.get("backend") == "cuda" or (info.get("gpu_model") and
                                         str(info.get("device_env", "")).lower() == "cuda"):
        return f"{info.get('gpu_model') or 'GPU'} (driver {info.get('gpu_driver')}, " \
               f"CUDA {info.get('cuda_driver')}), {cpus}"
    return f"simulated device, {cpus}" if cpus else "simulated device"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def bench_figures(doc: dict[str, Any]) -> list[dict[str, str]]:
    """Every figure the benchmarks recorded (``extra_info["figures"]``), as text cells."""
    rows = []
    for b in doc.get("benchmarks") or []:
        info = b.get("extra_info") or {}
        for f in info.get("figures") or []:
            if not isinstance(f, dict):
                continue
            met = claim_status.status(f, info)
            name = str(f.get("name", "")) + (" [host CPU]" if f.get("host_cpu") else "")
            rows.append({"benchmark": str(b.get("name")), "figure": name,
                         "value": f"{_fmt(f.get('value'))} {f.get('unit', '')}".strip(),
                         "target": str(f.get("target") or ""),
                         "met": "" if met == claim_status.NO_TARGET else met,
                         "machine": bench_machine(info), "how": str(f.get("how") or "")})
    return rows


def _summary(doc: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    labels = {"must_pass": "must-pass clauses", "clauses": "all clauses", "tests": "tests"}
    order = doc["summary"]["tests"]["by_outcome"]
    out = ["## Summary", "", "| | total | " + " | ".join(f"{SYMBOL[o]} {o}" for o in order)
           + " |", "|---|---:|" + "---:|" * len(order)]
    for key in keys:
        s = doc["summary"][key]
        cells = [str(s["by_outcome"].get(o, "")) if o in s["by_outcome"] else "–" for o in order]
        out.append(f"| {labels[key]} | {s['total']} | " + " | ".join(cells) + " |")
    return out + [""]


def _plots(figures: list[dict[str, str]]) -> list[str]:
    out = []
    for f in figures:
        if f.get("file"):
            out += [f"### {_cell(f['title'])}", "", f"![{_cell(f['title'])}]({f['file']})",
                    "" if not f["nodeid"] else f"From {_code(f['nodeid'])}.", ""]
    return out


def _bench_stats(doc: dict[str, Any], heading: str) -> list[str]:
    if not doc["benchmarks"]:
        return []
    out = [heading, "", "| benchmark | mean (µs) | min (µs) | max (µs) | stddev (µs) | rounds |",
           "|---|---:|---:|---:|---:|---:|"]
    for b in doc["benchmarks"]:
        s = b["stats"]
        out.append(f"| {_cell(b['fullname'])} | {s['mean'] * 1e6:.2f} | "
                   f"{s['min'] * 1e6:.2f} | {s['max'] * 1e6:.2f} | "
                   f"{(s['stddev'] or 0) * 1e6:.2f} | {s['rounds']} |")
    return out + [""]


def _bench_targets(doc: dict[str, Any]) -> list[str]:
    rows = bench_figures(doc)
    if not rows:
        return []
    out = ["### Benchmark figures against their targets", "",
           "| benchmark | figure | value | target | | machine | how measured |",
           "|---|---|---:|---|---|---|---|"]
    out += [f"| {_cell(r['benchmark'])} | {_cell(r['figure'])} | {_cell(r['value'])} "
            f"| {_cell(r['target'])} | {r['met']} | {_cell(r['machine'])} | "
            f"{_cell(r['how'])} |" for r in rows]
    return out + [""]


def render(doc: dict[str, Any], figures: list[dict[str, str]]) -> str:
    v = doc["verdict"]
    rt = doc["runtime"]
    no_verdict = v["status"] == model.NO_VERDICT
    out = [f"# {VERDICT_SYMBOL[v['status']]} {v['status']}", ""]
    if no_verdict:
        out.append(f"**{_cell(rt['name'])} {_cell(rt['version'])}** (module "
                   f"{_code(rt['module'])}), not a certification run, on "
                   f"{_cell(target_text(doc['execution_target']))}; {doc['generated_at']}.")
    else:
        out.append(f"**{_cell(rt['name'])} {_cell(rt['version'])}** (module "
                   f"{_code(rt['module'])}) against SPEC.md "
                   f"**{_cell(doc['spec']['version'])}**, on "
                   f"{_cell(target_text(doc['execution_target']))}; "
                   f"{_cell(v.get('scope') or 'profile: ' + (', '.join(v['profiles']) or 'none'))}"
                   f"; "
                   f"{doc['generated_at']}.")
        if rt.get("worker_cmd"):
            out += ["", f"Worker command: {_code(rt['worker_cmd'])}."]
    out.append("")
    if v["reasons"]:
        out += ["## Why", ""] + [f"- {_cell(r['message'])}" for r in v["reasons"]] + [""]
    out += _waived_and_flaky(doc)
    if no_verdict:  # nothing certified: the benchmarks first, no clause listings
        bench = _bench_targets(doc) + _plots(figures) \
            + _bench_stats(doc, "### Benchmark statistics")
        out += ["## Benchmarks", ""] + (bench or ["This run recorded no benchmark.", ""])
    if v["warnings"]:
        out += ["## Notes", ""] + [f"- {_cell(w['message'])}" for w in v["warnings"]] + [""]
    out += _summary(doc, ("tests",) if no_verdict else ("must_pass", "clauses", "tests"))
    if no_verdict:
        return "\n".join(out + _waivers(doc) + _tests(doc) + _provenance(doc))

    out += ["## Clause grid", "", "Legend: " + ", ".join(
        f"{SYMBOL[o]} {o}" for o in ("PASS", "WAIVED", "NOT_SUPPORTED", "FLAKY", "FAIL",
                                     "ERROR", "TIMEOUT", "CRASH", "NOT_RUN")) +
        "; *italic* = not must-pass in this run.", "", "| area | clauses |", "|---|---|"]
    areas: dict[str, list[dict]] = {}
    for c in doc["clauses"]:
        if not c["withdrawn"]:
            areas.setdefault(c["area"], []).append(c)
    for area, cs in areas.items():
        cells = " ".join(f"{SYMBOL[c['outcome']]}" + (c["id"] if c["must_pass"]
                                                       else f"*{c['id']}*") for c in cs)
        out.append(f"| {area} | {cells} |")
    out.append("")

    out += _failing_clauses(doc)
    out += _waivers(doc)
    if figures:
        out += ["## Figures", ""] + _plots(figures)
    if doc["benchmarks"]:
        out += _bench_stats(doc, "## Benchmarks") + _bench_targets(doc)

    out += ["## Clauses by area", ""]
    for area, cs in areas.items():
        out += [f"### {area}", "", "| clause | outcome | must-pass | tests | notes |",
                "|---|---|---|---:|---|"]
        for c in cs:
            note = f"waiver {c['waiver']}" if c["waiver"] else ""
            if c["partial"]:
                note = (note + "; " if note else "") + "some tests skipped"
            out.append(f"| {c['id']} {_cell(c['title'])} | {SYMBOL[c['outcome']]} "
                       f"{c['outcome']} | {'yes' if c['must_pass'] else ''} | "
                       f"{len(c['tests'])} | {_cell(note)} |")
        out.append("")
    return "\n".join(out + _tests(doc) + _provenance(doc))


def _waivers(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    waivers = doc["expectations"]["waivers"]
    if waivers:
        out += ["## Waivers", "", f"File: `{doc['expectations']['path']}`", "",
                "| waiver | status | matched | reason | link |", "|---|---|---|---|---|"]
        for w in waivers:
            count = w.get("matched_count", len(w["matched"]))
            shown = ", ".join(w["matched"][:5]) + (f" (of {count})" if count > 5 else "")
            out.append(f"| {_cell(w['id'])} | {w['status']} {_cell(w['note'])} | "
                       f"{_cell(shown)} | {_cell(w['reason'])} | {_cell(w['link'])} |")
        out.append("")
    return out


def _waived_and_flaky(doc: dict[str, Any]) -> list[str]:
    """What the verdict leans on: the waived clauses and tests with their waivers' reasons,
    and the FLAKY tests with their pass ratio and each failed run's message."""
    from reports import outcome_summary
    out: list[str] = []
    waived = outcome_summary.waived_lines(doc)
    if waived:
        out += ["## Waived", ""] + [f"- {_cell(line)}" for line in waived] + [""]
    flaky = [t for t in doc["tests"] if t.get("observed_outcome") == "FLAKY" and t.get("repeat")]
    if flaky:
        out += ["## Flaky tests", ""]
        for t in flaky:
            r = t["repeat"]
            out.append(f"- {_code(t['nodeid'])}: {SYMBOL['FLAKY']} FLAKY, passed {r['passed']} "
                       f"of {r['runs']} runs")
            out += [f"  - run {f['run']} {f['outcome']}: {_cell((f['message'] or '')[:300])}"
                    for f in r["failures"][:5]]
        out.append("")
    return out


def spec_reference(c: dict[str, Any]) -> str:
    """Where a clause is specified: ``SPEC.md line 268 (#bfc-5-free-and-coalescing)``."""
    where = c.get("spec") or {}
    return f"{where.get('path', 'SPEC.md')} line {where.get('line')} (#{where.get('anchor')})"


def _failing_clauses(doc: dict[str, Any]) -> list[str]:
    """Each clause that did not pass: its failures with their messages, then its text."""
    bad = [c for c in doc["clauses"] if c["outcome"] in model.FAILING]
    if not bad:
        return []
    out = ["## Clauses that did not pass", "", "Root cause first.", ""]
    for c in render_ranking.ranked(bad):
        must = "must-pass" if c["must_pass"] else "not must-pass in this run"
        out += [f"### {SYMBOL[c['outcome']]} {c['id']} {c['title']}: {c['outcome']} ({must})",
                ""]
        out += render_ranking.md_lines(c)
        for f in c.get("failures") or []:
            how = "" if f["tagged"] else " (untagged failure: blamed on every clause of the test)"
            out += [f"- {_code(f['nodeid'])}: {f['outcome']}{how}", "",
                    *safe_text.markdown_block(f["message"], 1500, indent="  "), ""]
            if f.get("antman_note"):
                out += [f"  {_cell(line)}" for line in f["antman_note"].splitlines()] + [""]
        if not c.get("failures"):
            out += [f"- {_cell(n)}" for n in c["notes"][:5]] + ([""] if c["notes"] else [])
        if c.get("text"):
            out += [f"{spec_reference(c)}:", ""]
            out += [f"> {line}" if line else ">" for line in c["text"].splitlines()] + [""]
    return out


def _tests(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    bad = [t for t in doc["tests"] if t["outcome"] not in ("PASS",)]
    if bad:
        out += ["## Tests that did not pass", "", "| test | outcome | clauses | message |",
                "|---|---|---|---|"]
        for t in bad:
            failures = t.get("failures") or []
            msg = ("; ".join(f"[{', '.join(f['clauses'])}] {f['message'][:300]}"
                             for f in failures[:3]) if failures else (t["message"] or "")[:300])
            if t.get("antman"):
                msg += f" — {t['antman']['note'].splitlines()[0]}"
            outcome = t["outcome"] + (f" (observed {t['observed_outcome']})"
                                      if t["outcome"] != t["observed_outcome"] else "")
            outcomes = t.get("clause_outcomes") or {c: t["outcome"] for c in t["clauses"]}
            clauses = ", ".join(f"{c} {o}" for c, o in outcomes.items())
            out.append(f"| {_code(t['nodeid'], in_table=True)} | "
                       f"{SYMBOL[t['outcome']]} {outcome} | "
                       f"{_cell(clauses)} | {_cell(msg)} |")
        out.append("")
    return out


def _provenance(doc: dict[str, Any]) -> list[str]:
    rt, suite = doc["runtime"], doc["suite"]
    git = suite.get("git") or {}
    tgt = doc["execution_target"]
    inv = doc["invocation"]
    return ["## Provenance", "",
            f"- Runtime: {_cell(rt['name'])} {_cell(rt['version'])}, module "
            f"{_code(rt['module'])} ({_cell(rt['path'])}), targets spec "
            f"{_cell(rt['spec_version'])}; capabilities: "
            f"{_cell(', '.join(rt['capabilities']) or 'none')}"
            + (f"; worker command {_code(rt['worker_cmd'])}" if rt.get("worker_cmd") else ""),
            *([f"- Worker's hello record: {_cell(model.hello_identity(rt['worker_hello']))}"]
              if rt.get("worker_hello") else []),
            f"- Suite: {_cell(suite['name'])} {_cell(suite['version'])}, commit "
            f"{_cell(git.get('commit') or 'unknown')}"
            f"{' (dirty)' if git.get('dirty') else ''}"
            + (f" (from {COMMIT_SOURCE.get(git.get('source'), git.get('source'))})"
               if git.get("commit") else ""),
            f"- Must-pass list: {_code(doc['mustpass']['path'])} (sha256 "
            f"{(doc['mustpass']['sha256'] or '')[:12]}, "
            f"{'official' if doc['mustpass']['official'] else 'NOT official'}),"
            + (" not applied (no conformance test ran)"
               if doc["verdict"]["status"] == model.NO_VERDICT
               else f" {len(doc['mustpass']['required'])} clauses required in this run"),
            f"- Execution target: {_cell(target_text(tgt))}",
            f"- Python {_cell(doc['python']['version'])} "
            f"({_cell(doc['python']['implementation'])}) on "
            f"{_cell(doc['platform']['platform'])}; host {_cell(host_text(doc['platform']))}",
            f"- Command: {_code(inv.get('command') or 'pytest ' + ' '.join(inv['args']))} in "
            f"{_code(inv.get('cwd'))}" + (f" (tox environment {_cell(inv['tox_env'])})"
                                          if inv.get("tox_env") else ""),
            f"- Invocation: {_code('pytest ' + ' '.join(inv['args']))}; xdist workers "
            f"{inv['xdist_workers']}; Hypothesis profile {_cell(inv['hypothesis_profile'])}; "
            f"exit status {inv['exitstatus']}; {inv['duration_s']} s",
            ""]
