"""Which clauses a test that did not pass is evidence against (SPEC.md section 7).

A test names the clauses it exercises with ``@pytest.mark.clause``; each of its checks names
the one clause it checks with a ``[CLAUSE-ID]`` tag in its message. When a test fails, the
report blames the clauses its failures name, not every clause the test is marked with:

- A failure is one exception raised by a phase (setup, call, teardown). An exception group
  (Hypothesis reports several distinct failures as one) is as many failures as it has leaf
  exceptions, each with its own message and its own tags.
- FAIL and ERROR are attributed by tags: a failure names the clauses in the ``[CLAUSE-ID]``
  tags of its own message (the text before pytest's ``assert`` explanation; Hypothesis'
  falsifying example is shown, never searched). Tags that name no clause of SPEC.md are
  ignored. A failure without a known tag is *untagged*: it is attributed to the test's
  only clause, or, when the test names several, to all of them, and the report says so
  (``attribution: "untagged"``).
- TIMEOUT and CRASH stop the whole test without a failed check: they are attributed to
  every clause of the test.
- A teardown failure after the test body failed is a consequence of that failure (the body
  never reached its own cleanup, so leaked threads or a listener that cannot close are what
  the first failure left behind): it is shown, and attributed to the clauses of the body's
  failure.
- A clause of the test that no failure names is *not established* by this test: the test
  stopped at a failure of another clause before it could show that this one holds. The
  test counts as NOT_RUN for that clause (the clause is partly exercised, or NOT_RUN when no
  other test exercised it), with a note naming the failure that stopped it.
- A failure of the test's arrangement is attributed to the clause the test declared it
  depends on (``conformance.preconditions``: the exception carries
  ``antman_precondition``, and its message that clause's tag), not to the clause under test;
  the failure is marked ``precondition``.

One bug, one clause, root cause first: when several clauses fail, ``explain`` ranks them.
A clause is a *root* when at least one of its failures comes from a test that depends on no
other failing clause (its declared preconditions, ``tests[].depends``, all name clauses
that did not fail). Every other failing clause *follows from* the failing clause its tests
depend on most often, and says which failure that is (``clauses[].follows_from``). Roots
come first (those that explain most other clauses first), then the clauses that follow
from them (``clauses[].rank``; ``failure_ranking`` in the document).

The per-clause outcome of every test feeds the clause outcomes (reports/model.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reports import outcomes as oc

TAG = re.compile(r"\[([A-Z][A-Z0-9]*-\d+)\]")
#: Outcomes whose failures are attributed by their tags.
TAGGED = frozenset({oc.FAIL, oc.ERROR})
MESSAGE_LIMIT = 4000
NOTES_LIMIT = 2000

#: How a test's failing outcome was attributed (``tests[].attribution`` in the report).
#: The attribute of an exception raised by a failed precondition: the clause depended on.
PRECONDITION_ATTRIBUTE = "antman_precondition"

BY_TAG = "tag"              # every failure named its clauses
UNTAGGED = "untagged"       # a failure named none: the test's clauses (all of them)
WHOLE_TEST = "whole-test"   # TIMEOUT or CRASH: every clause of the test


def tags(text: str) -> list[str]:
    """The ``[CLAUSE-ID]`` tags of a message, in order, without repeats."""
    return list(dict.fromkeys(TAG.findall(text)))


def leaves(exc: BaseException) -> list[BaseException]:
    """The distinct failures in ``exc``: the leaves of (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def own_message(exc: BaseException) -> str:
    """The exception's message without pytest's ``assert`` explanation or notes."""
    text = str(exc)
    if isinstance(exc, AssertionError):
        text = re.split(r"\nassert |\Aassert ", text, maxsplit=1)[0]
    return text.strip()


def describe(exc: BaseException) -> str:
    """A readable message for one failure: type (unless an assertion), text, notes
    (Hypothesis' falsifying example)."""
    text = str(exc).strip()
    if not isinstance(exc, AssertionError) or not text:
        name = type(exc).__name__
        text = f"{name}: {text}" if text else name
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 15] + " ... [truncated]"
    notes = "\n".join(str(n) for n in getattr(exc, "__notes__", None) or [])
    if notes:
        if len(notes) > NOTES_LIMIT:
            notes = notes[: NOTES_LIMIT - 15] + " ... [truncated]"
        text = f"{text}\n{notes}"
    return text


def failures(exc: BaseException | None) -> list[dict[str, Any]]:
    """``[{"tags": [...], "message": str, "precondition": bool}]``: each distinct failure in
    ``exc``; ``precondition``: a failure of the test's arrangement (see the module doc)."""
    if exc is None:
        return []
    return [{"tags": tags(own_message(e)), "message": describe(e),
             "precondition": isinstance(getattr(e, PRECONDITION_ATTRIBUTE, None), str)}
            for e in leaves(exc)]


@dataclass
class Attribution:
    """What one test's outcome says about each clause."""
    observed: dict[str, str]                 # clause -> this test's observed outcome for it
    how: str | None = None                   # BY_TAG, UNTAGGED, WHOLE_TEST; None: no problem
    notes: dict[str, str] = field(default_factory=dict)   # clause -> why NOT_RUN
    failures: list[dict[str, Any]] = field(default_factory=list)
    # each: {"outcome", "clauses" (blamed), "message", "tagged", "precondition"}


def attribute(markers: Sequence[str], phases: Sequence[tuple[str, str | None]],
              phase_failures: Mapping[int, Sequence[Mapping[str, Any]]],
              known: Iterable[str], whens: Sequence[str] = ()) -> Attribution:
    """The attribution of one test (see the module docstring).

    ``phases`` are the test's phase outcomes in order, ``whens`` their names ("setup",
    "call", "teardown"; unknown when shorter); ``phase_failures`` maps the index of a failing
    phase to its failures (``failures()``). Clauses named by a tag but not marked on the test
    are included: the failure is evidence against them.
    """
    known = set(known)
    markers = list(dict.fromkeys(markers))
    problems = [(i, o, m) for i, (o, m) in enumerate(phases)
                if o in oc.WAIVABLE and o != oc.NOT_SUPPORTED]
    if not problems:
        outcome, _ = oc.combine_phases(phases)
        return Attribution({c: outcome for c in markers})
    result = Attribution({})
    kinds: set[str] = set()
    body: list[str] = []                    # clauses blamed by the call phase
    for i, outcome, message in problems:
        found = list(phase_failures.get(i, ()))
        when = whens[i] if i < len(whens) else None
        if when == "teardown" and body:
            rows = [(list(body), f["message"], False, False) for f in found] \
                or [(list(body), message or outcome, False, False)]
        elif outcome not in TAGGED:
            kinds.add(WHOLE_TEST)
            rows = [(list(markers), f["message"], False, False) for f in found] \
                or [(list(markers), message or outcome, False, False)]
        elif not found:
            kinds.add(UNTAGGED)
            rows = [(list(markers), message or outcome, False, False)]
        else:
            rows = []
            for f in found:
                named = [c for c in f.get("tags", ()) if c in known]
                kinds.add(BY_TAG if named else UNTAGGED)
                rows.append((named or list(markers), f["message"], bool(named),
                             bool(named) and bool(f.get("precondition"))))
        for clauses, text, tagged, arranged in rows:
            if when in ("setup", "call"):
                body += [c for c in clauses if c not in body]
            result.failures.append({"outcome": outcome, "clauses": clauses,
                                    "message": text, "tagged": tagged,
                                    "precondition": arranged})
            for c in clauses:
                old = result.observed.get(c)
                if old is None or oc.severity(outcome) < oc.severity(old):
                    result.observed[c] = outcome
    result.how = (WHOLE_TEST if WHOLE_TEST in kinds else UNTAGGED if UNTAGGED in kinds
                  else BY_TAG)
    stopped_by = ", ".join(f"{c} {o}" for c, o in result.observed.items())
    for c in markers:
        if c not in result.observed:
            result.observed[c] = oc.NOT_RUN
            result.notes[c] = f"not established: the test stopped at a failure of {stopped_by}"
    return result


#: Clause outcomes that are failures for the ranking (NOT_SUPPORTED is a claim, not a bug).
BROKEN = frozenset({oc.CRASH, oc.TIMEOUT, oc.ERROR, oc.FAIL})


def explain(clauses: list[dict[str, Any]], tests: Iterable[Any]) -> list[str]:
    """Rank the failing clauses, root cause first (see the module docstring).

    ``clauses`` are the document's clause entries (``id``, ``observed_outcome``), updated in
    place with ``rank`` (1 first; None for a clause that did not fail) and ``follows_from``
    (None for a root, else ``{"clause", "nodeid", "message", "because"}``); ``tests`` carry
    ``nodeid``, ``depends`` (the clauses their preconditions name) and ``verdicts``
    (``Attribution``). Returns the failing clause IDs in rank order.
    """
    failing = {c["id"] for c in clauses if c.get("observed_outcome") in BROKEN}
    # incidents: (clause, test, failure, the failing clauses the test depends on)
    incidents: dict[str, list[tuple[Any, dict[str, Any], list[str]]]] = {}
    for t in sorted(tests, key=lambda t: t.nodeid):
        depends = list(getattr(t, "depends", None) or [])
        for f in t.verdicts.failures:
            for c in f["clauses"]:
                if c not in failing:
                    continue
                causes = [d for d in depends if d in failing and d != c]
                incidents.setdefault(c, []).append((t, f, causes))
    cause_of: dict[str, str] = {}
    explains: Counter[str] = Counter()
    for c in sorted(failing):
        rows = incidents.get(c, [])
        if not rows or any(not causes for _, _, causes in rows):
            continue
        votes = Counter(d for _, _, causes in rows for d in causes)
        cause_of[c] = max(sorted(votes), key=lambda d: votes[d])
    roots = failing - set(cause_of)
    if not roots and failing:    # a cycle of dependencies: the most failing tests leads
        lead = max(sorted(failing), key=lambda c: len(incidents.get(c, [])))
        cause_of.pop(lead, None)
        roots = {lead}

    def root_of(c: str) -> str:
        seen = set()
        while c in cause_of and c not in seen:
            seen.add(c)
            c = cause_of[c]
        return c

    for c in cause_of:
        explains[root_of(c)] += 1
    support = Counter(d for rows in incidents.values() for _, _, causes in rows for d in causes)
    order = sorted(roots, key=lambda c: (-explains[c], -support[c], -len(incidents.get(c, [])),
                                         c))
    placed = set(order)
    while len(order) < len(failing):
        nxt = sorted((c for c in failing - placed if cause_of.get(c) in placed),
                     key=lambda c: (order.index(cause_of[c]), c))
        if not nxt:                              # inside a cycle: break it at its first
            nxt = [min(failing - placed)]
            cause_of.pop(nxt[0], None)
        for c in nxt:
            order.append(c)
            placed.add(c)
    for entry in clauses:
        cid = entry["id"]
        entry["rank"] = order.index(cid) + 1 if cid in placed else None
        entry["follows_from"] = None
        cause = cause_of.get(cid)
        if cause is None:
            continue
        rows = incidents[cid]
        with_cause = [t for t, _, causes in rows if cause in causes]
        # The failure of the cause to name: its first own check failing in a test depending on
        # nothing that failed, else any failure of it there, else one in a test of this clause.
        cause_rows = incidents.get(cause, [])
        pick = next(((t, f) for t, f, causes in cause_rows
                     if not causes and not f.get("precondition")), None) or \
            next(((t, f) for t, f, causes in cause_rows if not causes), None) or \
            next(((t, f) for t, f, _ in cause_rows if cid in t.clauses), None) or \
            (cause_rows[0][:2] if cause_rows else (with_cause[0], None))
        t, f = pick
        entry["follows_from"] = {
            "clause": cause, "nodeid": t.nodeid,
            "message": (f["message"] if f else "")[:MESSAGE_LIMIT],
            "because": f"{len(with_cause)} of its {len(rows)} failure(s) come from tests that "
                       f"depend on {cause}, which failed"}
    return order
