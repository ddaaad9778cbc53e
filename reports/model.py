"""The certification document (``certification.json``) and its verdict, built from run data.

Verdict, in order:

- ``NOT CERTIFIED`` when the run required a GPU (``--require-gpu``) and the execution target
  is none, or the runtime declares no ``cuda``; the runtime targets another spec version; the
  must-pass list of the
  spec version is missing, malformed or not the official one; the runtime declares no
  complete profile of the list; tests failed to collect; the session hit an internal error;
  a must-pass clause names no clause of SPEC.md; or a must-pass clause whose requirements hold
  is FAIL, ERROR, TIMEOUT, CRASH or NOT_SUPPORTED without a valid waiver.
- ``INCOMPLETE`` otherwise when a required must-pass clause was not run, the run selected a
  subset of the suite (``-k``, ``-m``, ``--deselect``, node IDs, paths that do not cover
  ``conformance/``), or collected tests were never reported (``-x``, interruption, crashes).
- ``CERTIFIED WITH WAIVERS`` otherwise when a waiver was applied (a clause or test is
  WAIVED): the run certifies only with the failures its expectations file excuses, which the
  verdict's reason ``waivers-applied`` lists with their waivers. Never reported as CERTIFIED.
- ``CERTIFIED`` otherwise: every required must-pass clause is PASS.

With ``--repeat N`` (reports/stability.py) a FLAKY must-pass clause is ``NOT CERTIFIED``
(``mustpass-flaky``) like any failure; for the reference runtime (``reference_runtime``) any
FLAKY test is ``NOT CERTIFIED`` (``flaky-tests``), waived or not, on a must-pass clause or
not: its tests must be deterministic, so a flaky test there is a defect of the suite.

With ``--require-gpu`` the GPU clauses (``gpu-target`` sections) are required whatever the
execution target, so a runner without a usable GPU can never certify.

A run that collected no test naming a clause (a benchmark run, say) certifies nothing: its
verdict is ``NO VERDICT`` (reason ``no-conformance-tests``) unless tests failed to collect or
the session hit an internal error (``NOT CERTIFIED``, as above). The checks of the
certification setup (spec version, must-pass list, profile) become notes; the must-pass
clauses are not reported as missing. ``--require-certified`` fails such a run.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance import spec
from reports import attribution
from reports import expectations as exp
from reports import outcomes as oc
from reports import stability
from reports.mustpass import MustPassList

#: 1.1: ``runtime.worker_hello``; ``execution_target`` kinds "cpu" and "unknown", ``source``,
#: ``worker_devices`` and the devices' ``pci_bus_id`` (black-box runs, reports/environment.py).
#: 1.2: verdict status ``NO VERDICT`` (runs without conformance tests).
#: 1.3: attribution by assertion tag (``tests[].clause_outcomes``, ``attribution``,
#: ``failures``; ``clauses[].failures``; reports/attribution.py).
#: 1.4: test outcome FLAKY and ``tests[].repeat`` (``--repeat N``), ``invocation.repeat``;
#: verdict status ``CERTIFIED WITH WAIVERS``; waivers' ``outcomes``, ``matched_count`` and
#: status ``not-covered`` (``matched`` keeps at most 5 IDs).
SCHEMA_VERSION = "1.4"
CERTIFIED = "CERTIFIED"
CERTIFIED_WITH_WAIVERS = "CERTIFIED WITH WAIVERS"
NOT_CERTIFIED = "NOT CERTIFIED"
INCOMPLETE = "INCOMPLETE"
NO_VERDICT = "NO VERDICT"
#: Fatal reasons that keep the full verdict even when no conformance test was collected
#: (the tests that failed to collect may be the conformance tests).
_ALWAYS_FATAL = ("collection-errors", "internal-error")
FAILING = (oc.CRASH, oc.TIMEOUT, oc.ERROR, oc.FAIL, oc.FLAKY, oc.NOT_SUPPORTED)
#: The runtime whose flaky tests are defects of the suite (conformance/plugin.py's default).
REFERENCE_RUNTIME = "reference_runtime"
#: Statuses, best first (``reports diff`` compares verdicts by this order).
STATUS_ORDER = (CERTIFIED, CERTIFIED_WITH_WAIVERS, INCOMPLETE, NO_VERDICT, NOT_CERTIFIED)


@dataclass
class TestRecord:
    nodeid: str
    clauses: list[str] = field(default_factory=list)
    capabilities: list[str] = field(default_factory=list)
    gpu: bool = False
    phases: list[tuple[str, str | None]] = field(default_factory=list)
    whens: list[str] = field(default_factory=list)         # phase names, as ``phases``
    failures: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # by phase index
    duration_s: float = 0.0
    worker: str | None = None
    hypothesis: dict[str, Any] | None = None
    outcome: str = oc.NOT_RUN
    observed: str = oc.NOT_RUN
    message: str | None = None
    waiver: str | None = None
    #: what the test says about each clause (reports/attribution.py); set by ``build``
    verdicts: attribution.Attribution = field(
        default_factory=lambda: attribution.Attribution({}))
    clause_outcomes: dict[str, str] = field(default_factory=dict)   # after waivers
    #: the clauses the test's preconditions name (conformance/preconditions.py)
    depends: list[str] = field(default_factory=list)
    #: ``--repeat``: runs, ran, passed, flaky, failures (reports/stability.py ``fold``)
    repeat: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "outcome": self.outcome,
                "observed_outcome": self.observed, "duration_s": round(self.duration_s, 6),
                "clauses": self.clauses, "capabilities": self.capabilities, "gpu": self.gpu,
                "worker": self.worker, "hypothesis": self.hypothesis,
                "message": self.message, "waiver": self.waiver,
                "clause_outcomes": self.clause_outcomes,
                "attribution": self.verdicts.how, "failures": self.verdicts.failures,
                "depends": self.depends, "repeat": self.repeat}


@dataclass
class RunData:
    """Everything the plugin gathered; ``build`` turns it into the document."""
    clauses: Mapping[str, spec.Clause]
    spec_version: str
    tests: dict[str, TestRecord]
    runtime: dict[str, Any]
    suite: dict[str, Any]
    python: dict[str, Any]
    platform: dict[str, Any]
    target: dict[str, Any]
    invocation: dict[str, Any]
    mustpass: MustPassList | None
    mustpass_error: str | None = None
    mustpass_official: bool = True
    expectations: exp.Expectations = field(default_factory=exp.Expectations)
    selection_reasons: list[str] = field(default_factory=list)
    collection_errors: list[str] = field(default_factory=list)
    exitstatus: int = 0
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    benchmarks: list[dict[str, Any]] = field(default_factory=list)
    worker_hellos: list[dict[str, Any]] = field(default_factory=list)
    require_gpu: bool = False          # --require-gpu: GPU clauses required whatever the target
    #: why the run stopped before its end ({"code", "message"}; reports/run_budget.py)
    stopped: dict[str, str] | None = None
    repeat: int = 1                    # --repeat N (reports/stability.py)
    run_id: str = ""
    generated_at: str = ""
    today: dt.date | None = None


_GROUP_MESSAGE = re.compile(r"\A((?:setup|teardown): )?(?:Base)?ExceptionGroup\b")


def _root_cause_first(message: str | None, failures: Mapping[int, Sequence[Mapping[str, Any]]]
                      ) -> str | None:
    """A test whose phase raised an exception group (Hypothesis' "found 2 distinct failures")
    reads first the message of its first failure, not the group's count."""
    group = _GROUP_MESSAGE.match(message or "")
    if not group:
        return message
    for phase in sorted(failures):
        found = [f for f in failures[phase] if f.get("message")]
        if found:
            more = len(found) - 1
            text = (group.group(1) or "") + found[0]["message"]
            if more:
                text += f"\n(and {more} more distinct failure{'s' if more > 1 else ''}: {message})"
            return text
    return message


def _finish_tests(data: RunData, waivers: list[exp.Waiver]) -> None:
    exact: dict[str, list[exp.Waiver]] = {}     # globs without wildcards: looked up, not scanned
    globs: list[exp.Waiver] = []
    for w in waivers:
        if w.test is not None:
            if "*" in w.test or "?" in w.test:
                globs.append(w)
            else:
                exact.setdefault(w.test, []).append(w)
    uncovered: dict[str, set[str]] = {}
    for t in data.tests.values():
        t.observed, t.message = oc.combine_phases(t.phases)
        t.message = _root_cause_first(t.message, t.failures)
        t.verdicts = attribution.attribute(t.clauses, t.phases, t.failures, data.clauses,
                                           t.whens)
        if t.repeat and t.repeat.get("flaky"):
            t.observed, t.message = oc.FLAKY, stability.flaky_message(t.repeat)
            t.verdicts.observed = {c: oc.FLAKY if o in oc.FAILED_RUN else oc.PASS
                                   for c, o in t.verdicts.observed.items()}
            t.verdicts.notes = {}
        t.outcome = t.observed
        for w in [*exact.get(t.nodeid, ()), *(g for g in globs if g.matches_test(t.nodeid))]:
            w.match(t.nodeid)
            if t.outcome in oc.WAIVABLE and t.waiver is None:
                if w.covers(t.outcome):
                    t.outcome, t.waiver, w.status = oc.WAIVED, w.id, exp.APPLIED
                else:
                    uncovered.setdefault(w.id, set()).add(t.observed)
        t.clause_outcomes = {c: oc.WAIVED if t.waiver and o in oc.WAIVABLE else o
                             for c, o in t.verdicts.observed.items()}
    for w in waivers:
        if w.test is None:
            continue
        if not w.matched_count:
            w.status, w.note = exp.STALE, "matched no test of this run"
        elif w.status != exp.APPLIED and w.id in uncovered:
            named = ", ".join(sorted(uncovered[w.id], key=oc.severity))
            w.status = exp.NOT_COVERED
            w.note = (f"matched {named}, which it does not cover: name it in outcomes "
                      f"(outcomes = [\"{sorted(uncovered[w.id], key=oc.severity)[0]}\"])")
        elif w.status != exp.APPLIED:
            w.status, w.note = exp.UNNEEDED, "every matched test passed or did not run"


def _waive_tests_of_waived_clauses(data: RunData, clauses: list[dict]) -> None:
    """A test whose every failure is blamed on clauses a clause waiver covers is WAIVED too
    (by the first such clause's waiver): it is not reported as a failure beside a verdict
    that excuses it."""
    waived = {c["id"]: c["waiver"] for c in clauses if c["outcome"] == oc.WAIVED}
    for t in data.tests.values():
        if t.outcome not in oc.WAIVABLE:
            continue
        blamed = [c for c, o in t.clause_outcomes.items() if o in oc.WAIVABLE]
        if blamed and all(c in waived for c in blamed):
            t.outcome, t.waiver = oc.WAIVED, waived[blamed[0]]
            t.clause_outcomes = {c: oc.WAIVED if o in oc.WAIVABLE else o
                                 for c, o in t.clause_outcomes.items()}


def _clauses(data: RunData, waivers: list[exp.Waiver], required: set[str]) -> list[dict]:
    by_clause: dict[str, list[TestRecord]] = {}
    for t in data.tests.values():
        for cid in t.clause_outcomes:
            by_clause.setdefault(cid, []).append(t)
    clause_waivers = {}
    for w in waivers:
        if w.clause is not None:
            clause_waivers.setdefault(w.clause, []).append(w)
            if w.clause not in data.clauses:
                w.status, w.note = exp.STALE, f"no clause {w.clause} in SPEC.md"
    sections = data.mustpass.sections if data.mustpass else {}
    result = []
    for cid, clause in data.clauses.items():
        tests = sorted(by_clause.get(cid, []), key=lambda t: t.nodeid)
        observed = oc.aggregate(t.verdicts.observed[cid] for t in tests)
        outcome = oc.aggregate(t.clause_outcomes[cid] for t in tests)
        waiver = next((t.waiver for t in tests
                       if t.clause_outcomes[cid] == oc.WAIVED and outcome == oc.WAIVED), None)
        for w in clause_waivers.get(cid, []):
            if outcome == oc.NOT_RUN:
                w.status, w.note = exp.STALE, f"no test of {cid} ran"
                continue
            w.match(cid)
            if outcome in oc.WAIVABLE and w.covers(outcome):
                outcome, waiver, w.status = oc.WAIVED, w.id, exp.APPLIED
            elif outcome in oc.WAIVABLE and w.status != exp.APPLIED:
                w.status = exp.NOT_COVERED
                w.note = (f"{cid} is {outcome}, which it does not cover: name it in outcomes "
                          f"(outcomes = [\"{outcome}\"])")
            elif w.status != exp.APPLIED:
                w.status, w.note = exp.UNNEEDED, f"{cid} is {outcome} without it"
        not_run = [t for t in tests
                   if t.clause_outcomes[cid] in (oc.SKIPPED, oc.NOT_RUN, oc.NOT_SUPPORTED)]
        notes = sorted({f"{t.nodeid}: {t.clause_outcomes[cid]}"
                        + (f" ({why})" if (why := t.verdicts.notes.get(cid) or t.message)
                           else "") for t in not_run})
        failures = [{"nodeid": t.nodeid, "outcome": f["outcome"], "message": f["message"],
                     "tagged": f["tagged"], "precondition": f.get("precondition", False)}
                    for t in tests for f in t.verdicts.failures if cid in f["clauses"]]
        section = sections.get(cid)
        result.append({
            "id": cid, "title": clause.title, "area": clause.area,
            "withdrawn": clause.withdrawn, "outcome": outcome, "observed_outcome": observed,
            "must_pass": cid in required,
            "mustpass_section": section.header if section else None,
            "tests": [t.nodeid for t in tests], "waiver": waiver,
            "partial": bool(not_run) and len(not_run) < len(tests), "notes": notes[:20],
            "failures": failures[:20],
            "spec": {"path": "SPEC.md", "line": clause.line, "anchor": clause.anchor},
            "text": clause.text if outcome in FAILING or outcome == oc.WAIVED else None,
        })
    return result


def _verdict(data: RunData, clauses: list[dict], required: set[str],
             profiles: list[str]) -> dict[str, Any]:
    fatal: list[dict[str, Any]] = []
    incomplete: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []

    def reason(bucket: list, code: str, message: str, ids: list[str] | None = None) -> None:
        bucket.append({"code": code, "message": message, "clauses": ids or []})

    def listing(ids: list[str], limit: int = 20) -> str:
        more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
        return ", ".join(ids[:limit]) + more

    rt = data.runtime
    if data.require_gpu:
        target = data.target
        if target.get("kind") != "gpu":
            why = target.get("note") or f"the execution target is {target.get('kind')}"
            reason(fatal, "gpu-required",
                   f"--require-gpu: no usable NVIDIA GPU on this runner ({why})")
        if "cuda" not in (rt.get("capabilities") or []):
            reason(fatal, "gpu-required",
                   f"--require-gpu: runtime {rt.get('name')} does not declare the cuda "
                   f"capability, so no GPU clause can run")
    if rt.get("spec_version") != data.spec_version:
        reason(fatal, "spec-version-mismatch",
               f"runtime {rt.get('name')} targets spec {rt.get('spec_version')}, the suite "
               f"certifies spec {data.spec_version}")
    if data.mustpass is None:
        reason(fatal, "mustpass-missing", data.mustpass_error
               or f"no must-pass list for spec {data.spec_version}")
    else:
        if not data.mustpass_official:
            reason(fatal, "mustpass-unofficial",
                   f"must-pass list {data.mustpass.path} is not the official list of spec "
                   f"{data.spec_version}")
        if data.mustpass.profiles and not profiles:
            wanted = "; ".join(f"{n}: {' '.join(c)}" for n, c in data.mustpass.profiles.items())
            reason(fatal, "no-profile",
                   f"runtime declares no complete profile of the must-pass list ({wanted})")
        unknown = sorted(set(data.mustpass.sections) - set(data.clauses))
        if unknown:
            reason(fatal, "mustpass-unknown-clause",
                   f"must-pass list names clauses missing from SPEC.md: {', '.join(unknown)}",
                   unknown)
        unlisted = [cid for cid, c in data.clauses.items()
                    if not c.withdrawn and cid not in data.mustpass.sections]
        if unlisted:
            reason(warnings, "mustpass-out-of-date",
                   f"{len(unlisted)} clause(s) of SPEC.md are not on the must-pass list: "
                   f"{listing(unlisted)}", unlisted)
    if data.collection_errors:
        reason(fatal, "collection-errors",
               f"{len(data.collection_errors)} test module(s) failed to collect: "
               + ", ".join(data.collection_errors[:5]))
    if data.exitstatus == 3:
        reason(fatal, "internal-error", "pytest reported an internal error")
    req = [c for c in clauses if c["must_pass"]]
    for outcome in FAILING:
        ids = [c["id"] for c in req if c["outcome"] == outcome]
        if ids:
            reason(fatal, f"mustpass-{outcome.lower().replace('_', '-')}",
                   f"{len(ids)} must-pass clause(s) {outcome}: {listing(ids)}", ids)
    not_run = [c["id"] for c in req if c["outcome"] == oc.NOT_RUN]
    if not_run:
        reason(incomplete, "mustpass-not-run",
               f"{len(not_run)} must-pass clause(s) not exercised: {listing(not_run)}", not_run)
    if data.selection_reasons:
        reason(incomplete, "subset-selection",
               "the run selected part of the suite: " + "; ".join(data.selection_reasons))
    unreported = sorted(t.nodeid for t in data.tests.values() if t.outcome == oc.NOT_RUN)
    if unreported:
        reason(incomplete, "tests-not-run",
               f"{len(unreported)} collected test(s) never ran, e.g. {unreported[0]}")
    if data.stopped:
        reason(incomplete, "run-stopped", stopped_message(data.stopped["message"], unreported))
    elif data.exitstatus == 2:
        reason(incomplete, "interrupted", "the session was interrupted")

    git = data.suite.get("git") or {}
    if not git.get("commit"):
        reason(warnings, "suite-commit-unknown",
               "the suite's git commit is unknown: it is not a git checkout, has no git "
               "archive stamp, and ANTMAN_SUITE_COMMIT is not set")
    if git.get("dirty"):
        reason(warnings, "suite-dirty", "the suite's working tree has uncommitted changes")
    checkout = git.get("checkout") or {}
    if checkout.get("commit"):
        reason(warnings, "suite-commit-disagrees",
               f"ANTMAN_SUITE_COMMIT names {git.get('commit')}, which the report records, but "
               f"the git checkout holding the suite is at {checkout['commit']}"
               f"{' with uncommitted changes' if checkout.get('dirty') else ''}: the copy was "
               f"made from a commit this checkout does not describe, or the variable is stale")
    profile = data.invocation.get("hypothesis_profile")
    if profile != "certify":
        reason(warnings, "hypothesis-profile",
               f"Hypothesis profile {profile!r}; certification runs use 'certify'")
    partial = [c["id"] for c in req if c["partial"]]
    if partial:
        reason(warnings, "partial-clauses",
               f"must-pass clause(s) partly exercised (some tests skipped, unsupported or not run): "
               f"{listing(partial)}", partial)
    variants = sorted({hello_identity(h) for h in data.worker_hellos})
    if len(variants) > 1:
        reason(warnings, "worker-hello-inconsistent",
               f"the worker's hello records disagree on what ran ({len(variants)} variants): "
               + "; ".join(variants[:5]))
    flaky = sorted(t.nodeid for t in data.tests.values() if t.observed == oc.FLAKY)
    if flaky:
        ratios = [f"{t.nodeid} ({t.repeat['passed']}/{t.repeat['runs']} passed)"
                  for t in sorted(data.tests.values(), key=lambda t: t.nodeid)
                  if t.observed == oc.FLAKY and t.repeat]
        if rt.get("module") == REFERENCE_RUNTIME:
            reason(fatal, "flaky-tests",
                   f"{len(flaky)} test(s) FLAKY on the reference runtime (a defect of the "
                   f"suite): {listing(ratios, 10)}")
        else:
            reason(warnings, "flaky-tests", f"{len(flaky)} test(s) FLAKY: {listing(ratios, 10)}")
    by_status: dict[str, list[exp.Waiver]] = {}
    for w in data.expectations.waivers:
        if w.status in (exp.STALE, exp.UNNEEDED, exp.EXPIRED, exp.NOT_COVERED):
            by_status.setdefault(w.status, []).append(w)
    for status, found in by_status.items():   # one warning per status, however many waivers
        shown = "; ".join(f"{w.id}: {w.note}" for w in found[:10])
        more = f"; and {len(found) - 10} more" if len(found) > 10 else ""
        reason(warnings, f"waiver-{status}",
               f"{len(found)} waiver(s) {status}: {shown}{more}")

    if not is_certification_run(data) and not any(r["code"] in _ALWAYS_FATAL for r in fatal):
        return _no_verdict(data, fatal, incomplete, warnings, profiles)
    applied = [w for w in data.expectations.waivers if w.status == exp.APPLIED]
    if applied and not fatal and not incomplete:
        waived = [c["id"] for c in clauses if c["outcome"] == oc.WAIVED]
        shown = "; ".join(f"{w.id} ({w.clause or w.test}): {w.reason}" for w in applied[:10])
        more = f"; and {len(applied) - 10} more" if len(applied) > 10 else ""
        reason(incomplete, "waivers-applied",
               f"certified only with {len(applied)} waiver(s) of "
               f"{data.expectations.path or 'the expectations file'}: {shown}{more}", waived)
        status = CERTIFIED_WITH_WAIVERS
    else:
        status = NOT_CERTIFIED if fatal else INCOMPLETE if incomplete else CERTIFIED
    return {"status": status, "reasons": fatal + incomplete, "warnings": warnings,
            "profiles": profiles,
            "scope": scope(profiles, required, data.target.get("source") == "worker")}


def stopped_message(why: str, not_run: list[str], limit: int = 10) -> str:
    """A run that stopped early: why, and the tests that did not run."""
    if not not_run:
        return f"{why}; every collected test had run"
    more = f" and {len(not_run) - limit} more" if len(not_run) > limit else ""
    return (f"{why}; {len(not_run)} collected test(s) did not run: "
            + ", ".join(not_run[:limit]) + more)


def scope(profiles: list[str], required: set[str], black_box: bool) -> str:
    """What a verdict covered, in words: the profile and the must-pass clauses it required.

    A black-box run exercises the implementation through its worker only: its API clauses
    are checked on the suite's stand-in module (conformance.blackbox), so it covers the
    WORKER clauses and says so.
    """
    areas = sorted({cid.split("-")[0] for cid in required})
    named = " + ".join(profiles) or "no"
    if black_box or areas == ["WORKER"]:
        worker = sum(1 for cid in required if cid.startswith("WORKER-"))
        return f"{named} profile: WORKER clauses only ({worker} must-pass WORKER clauses)"
    return f"{named} profile: {len(required)} must-pass clauses in {len(areas)} areas"


def is_certification_run(data: RunData) -> bool:
    """Whether the run collected at least one test that names a clause."""
    return any(t.clauses for t in data.tests.values())


def _no_verdict(data: RunData, fatal: list[dict[str, Any]], incomplete: list[dict[str, Any]],
                warnings: list[dict[str, Any]], profiles: list[str]) -> dict[str, Any]:
    """``NO VERDICT``: the run collected no conformance test, so must-pass clauses that did not
    run and the selection are no reasons; other findings stay as notes."""
    n = len(data.benchmarks)
    what = (f"this is a benchmark run ({n} benchmark{'s' if n != 1 else ''})" if n
            else "no collected test names a clause of SPEC.md")
    reasons = [{"code": "no-conformance-tests",
                "message": f"no conformance test ran: {what}; it certifies nothing",
                "clauses": []}]
    skip = {"mustpass-not-run", "subset-selection", "hypothesis-profile"}
    notes = [r for r in fatal + incomplete if r["code"] not in skip]
    notes += [r for r in warnings if r["code"] not in skip]
    return {"status": NO_VERDICT, "reasons": reasons, "warnings": notes, "profiles": profiles,
            "scope": None}


def hello_identity(hello: Mapping[str, Any]) -> str:
    """What a worker's hello record says ran: runtime, spec version, devices (by bus)."""
    rt = hello.get("runtime") if isinstance(hello.get("runtime"), Mapping) else {}
    devices = [f"{d.get('name')}@{d.get('pci_bus_id')}" for d in hello.get("devices") or []
               if isinstance(d, Mapping)]
    return (f"{rt.get('name')} {rt.get('version')}, spec {hello.get('spec_version')}, "
            f"devices [{', '.join(devices)}]")


def _counts(values: list[str], order: tuple[str, ...]) -> dict[str, Any]:
    c = Counter(values)
    return {"total": len(values), "by_outcome": {o: c.get(o, 0) for o in order}}


def build(data: RunData) -> dict[str, Any]:
    """The certification document for ``data``; mutates waiver statuses."""
    target = data.target
    models = [d["model"] for d in target.get("devices", [])]
    waivers = exp.activate(data.expectations, models, data.today)
    data.tests = stability.fold(data.tests, data.repeat)
    _finish_tests(data, waivers)
    caps = data.runtime.get("capabilities") or []
    gpu_target = target.get("kind") == "gpu" or data.require_gpu
    # --require-gpu: the GPU clauses are required whatever the target and capabilities.
    required_caps = [*caps, "cuda"] if data.require_gpu else caps
    required = (set(data.mustpass.required(required_caps, gpu_target)) if data.mustpass
                else set())
    profiles = data.mustpass.satisfied_profiles(caps) if data.mustpass else []
    clauses = _clauses(data, waivers, required)
    _waive_tests_of_waived_clauses(data, clauses)
    verdict = _verdict(data, clauses, required, profiles)
    ranking = attribution.explain(clauses, data.tests.values())   # root cause first
    live = [c for c in clauses if not c["withdrawn"]]
    tests = sorted(data.tests.values(), key=lambda t: t.nodeid)
    mp = data.mustpass
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": data.run_id,
        "generated_at": data.generated_at,
        "verdict": verdict,
        "runtime": data.runtime,
        "suite": data.suite,
        "spec": {"version": data.spec_version, "clauses": len(live)},
        "mustpass": {
            "path": str(mp.path) if mp else None, "sha256": mp.sha256 if mp else None,
            "official": data.mustpass_official if mp else False,
            "error": data.mustpass_error,
            "profiles": {k: list(v) for k, v in mp.profiles.items()} if mp else {},
            "required": sorted(required),
        },
        "expectations": data.expectations.to_json(),
        "python": data.python,
        "platform": data.platform,
        "execution_target": target,
        "invocation": {**data.invocation, "exitstatus": data.exitstatus, "repeat": data.repeat,
                       "stopped": data.stopped,
                       "selection_complete": not data.selection_reasons,
                       "selection_reasons": data.selection_reasons,
                       "collection_errors": data.collection_errors},
        "summary": {
            "clauses": _counts([c["outcome"] for c in live], oc.CLAUSE_OUTCOMES),
            "must_pass": _counts([c["outcome"] for c in live if c["must_pass"]],
                                 oc.CLAUSE_OUTCOMES),
            "tests": _counts([t.outcome for t in tests], oc.TEST_OUTCOMES),
        },
        "clauses": clauses,
        "failure_ranking": ranking,
        "tests": [t.to_json() for t in tests],
        "artifacts": data.artifacts,
        "benchmarks": data.benchmarks,
    }
