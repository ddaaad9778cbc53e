"""How waived and flaky outcomes read outside the JSON: the terminal summary, pytest's own
counts, and the JUnit XML.

- The terminal lists the waived clauses and tests with their waivers' reasons, each FLAKY test
  with its pass ratio and failures, and the waivers that did not apply.
- pytest's counts do not call a waived test failed beside a verdict that excuses it: the
  reports of WAIVED tests move from pytest's ``failed``/``error`` counts to ``waived``, and the
  failed runs of FLAKY tests to ``flaky`` (the final line reads "3 passed, 1 waived, 1 flaky";
  their tracebacks are not printed as failures, their messages are in the summary and report).
- In the JUnit XML each run of a WAIVED or FLAKY test carries ``antman:reported_outcome`` and
  ``antman:waiver`` / ``antman:flaky`` properties; the suite carries ``antman:waived`` and
  ``antman:flaky`` (the verdict is ``antman:verdict``, reports/writer.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports import outcomes as oc
from reports import stability
from reports import safe_text
from reports.safe_text import terminal_safe

LIST_LIMIT = 20
WAIVED_CATEGORY = "waived"
FLAKY_CATEGORY = "flaky"


def _waivers(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["id"]: w for w in doc.get("expectations", {}).get("waivers", [])}


def waived_lines(doc: dict[str, Any]) -> list[str]:
    """One line per WAIVED clause, then per WAIVED test, with the waiver and its reason."""
    waivers = _waivers(doc)

    def why(wid: str | None) -> str:
        w = waivers.get(wid or "", {})
        return f"{wid}: {w.get('reason', '?')} ({w.get('link', '?')})"

    rows = [f"waived clause {c['id']} ({c['observed_outcome']}) by {why(c['waiver'])}"
            for c in doc.get("clauses", []) if c.get("outcome") == oc.WAIVED]
    rows += [f"waived test {t['nodeid']} ({t['observed_outcome']}) by {why(t['waiver'])}"
             for t in doc.get("tests", []) if t.get("outcome") == oc.WAIVED]
    return _bounded(rows)


def flaky_lines(doc: dict[str, Any]) -> list[str]:
    rows = []
    for t in doc.get("tests", []):
        if t.get("observed_outcome") != oc.FLAKY or not t.get("repeat"):
            continue
        r = t["repeat"]
        rows.append(f"FLAKY {t['nodeid']}: passed {r['passed']} of {r['runs']} runs")
        rows += [f"    run {f['run']} {f['outcome']}: {(f['message'] or '').partition(chr(10))[0]}"
                 for f in r["failures"][:5]]
    return _bounded(rows)


def waiver_status_lines(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(status, line) for each waiver that did not apply."""
    found = [(w["status"], f"waiver {w['id']}: {w['status']} ({w['note']})")
             for w in doc.get("expectations", {}).get("waivers", []) if w["status"] != "applied"]
    if len(found) > LIST_LIMIT:
        found = found[:LIST_LIMIT] + [("", f"... and {len(found) - LIST_LIMIT} more waiver(s) "
                                          f"that did not apply (certification.json)")]
    return [(s, terminal_safe(line)) for s, line in found]


def _bounded(rows: list[str]) -> list[str]:
    if len(rows) > LIST_LIMIT:
        rows = rows[:LIST_LIMIT] + [f"... and {len(rows) - LIST_LIMIT} more (certification.json)"]
    return [terminal_safe(r) for r in rows]


def recategorize(stats: dict[str, list[Any]], doc: dict[str, Any]) -> None:
    """Moves the reports of WAIVED tests out of pytest's ``failed``/``error`` counts into
    ``waived``, and the failed runs of FLAKY tests into ``flaky`` (see the module docstring)."""
    outcome = {t["nodeid"]: t["outcome"] for t in doc.get("tests", [])
               if t["outcome"] in (oc.WAIVED, oc.FLAKY)}
    if not outcome:
        return
    for category in ("failed", "error"):
        kept = []
        for report in stats.get(category, []):
            nodeid = stability.base_nodeid(str(getattr(report, "nodeid", "")))
            target = {oc.WAIVED: WAIVED_CATEGORY, oc.FLAKY: FLAKY_CATEGORY}.get(
                outcome.get(nodeid, ""))
            if target is None:
                kept.append(report)
            else:
                stats.setdefault(target, []).append(report)
        if category in stats:
            if kept:
                stats[category] = kept
            else:
                del stats[category]


def _junit_address(nodeid: str) -> tuple[str, str]:
    """(classname, name) pytest's JUnit XML gives a node ID."""
    names = nodeid.split("::")
    names[0] = names[0].replace("/", ".")
    if names[0].endswith(".py"):
        names[0] = names[0][:-3]
    return ".".join(names[:-1]), names[-1]


def testcase_properties(doc: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Node ID of each WAIVED or FLAKY test -> the properties of its JUnit testcases (every
    run of a repeated test is a testcase of its own; each gets its test's properties)."""
    waivers = _waivers(doc)
    props: dict[str, list[tuple[str, str]]] = {}
    for t in doc.get("tests", []):
        if t["outcome"] == oc.WAIVED:
            w = waivers.get(t["waiver"] or "", {})
            props[t["nodeid"]] = [("antman:reported_outcome", oc.WAIVED),
                                  ("antman:waiver", f"{t['waiver']}: {w.get('reason', '')}")]
        elif t["outcome"] == oc.FLAKY and t.get("repeat"):
            props[t["nodeid"]] = [("antman:reported_outcome", oc.FLAKY),
                                  ("antman:flaky", stability.flaky_message(t["repeat"]))]
    return props


def annotate_testcases(root: Any, doc: dict[str, Any]) -> None:
    """Adds ``testcase_properties`` to the matching ``<testcase>`` elements under ``root``."""
    import xml.etree.ElementTree as ET
    wanted = testcase_properties(doc)
    if not wanted:
        return
    by_address: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for nodeid, props in wanted.items():
        by_address[_junit_address(nodeid)] = props
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        base = stability.base_nodeid(f"x::{name}").split("::", 1)[1]
        props = by_address.get((classname, base))
        if not props:
            continue
        holder = case.find("properties")
        if holder is None:
            holder = ET.Element("properties")
            case.insert(0, holder)
        for k, v in props:
            ET.SubElement(holder, "property", {"name": k, "value": safe_text.xml(v)})


def suite_properties(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """``antman:waived`` (the waived clauses and tests) and ``antman:flaky`` (FLAKY tests with
    their pass ratios) for the ``<testsuite>``."""
    waived = [f"{c['id']} ({c['waiver']})" for c in doc.get("clauses", [])
              if c.get("outcome") == oc.WAIVED]
    waived += [f"{t['nodeid']} ({t['waiver']})" for t in doc.get("tests", [])
               if t.get("outcome") == oc.WAIVED]
    flaky = [f"{t['nodeid']} ({t['repeat']['passed']}/{t['repeat']['runs']} passed)"
             for t in doc.get("tests", []) if t.get("observed_outcome") == oc.FLAKY
             and t.get("repeat")]
    return [("antman:waived", "; ".join(_cap(waived))), ("antman:flaky", "; ".join(_cap(flaky)))]


def _cap(rows: Iterable[str]) -> list[str]:
    rows = list(rows)
    return rows[:LIST_LIMIT] + ([f"and {len(rows) - LIST_LIMIT} more"]
                                if len(rows) > LIST_LIMIT else [])
