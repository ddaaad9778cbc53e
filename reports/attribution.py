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

The per-clause outcome of every test feeds the clause outcomes (reports/model.py).
"""

from __future__ import annotations

import re
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
    """``[{"tags": [...], "message": str}]``: each distinct failure in ``exc``."""
    if exc is None:
        return []
    return [{"tags": tags(own_message(e)), "message": describe(e)} for e in leaves(exc)]


@dataclass
class Attribution:
    """What one test's outcome says about each clause."""
    observed: dict[str, str]                 # clause -> this test's observed outcome for it
    how: str | None = None                   # BY_TAG, UNTAGGED, WHOLE_TEST; None: no problem
    notes: dict[str, str] = field(default_factory=dict)   # clause -> why NOT_RUN
    failures: list[dict[str, Any]] = field(default_factory=list)
    # each: {"outcome", "clauses" (blamed), "message", "tagged"}


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
            rows = [(list(body), f["message"], False) for f in found] \
                or [(list(body), message or outcome, False)]
        elif outcome not in TAGGED:
            kinds.add(WHOLE_TEST)
            rows = [(list(markers), f["message"], False) for f in found] \
                or [(list(markers), message or outcome, False)]
        elif not found:
            kinds.add(UNTAGGED)
            rows = [(list(markers), message or outcome, False)]
        else:
            rows = []
            for f in found:
                named = [c for c in f.get("tags", ()) if c in known]
                kinds.add(BY_TAG if named else UNTAGGED)
                rows.append((named or list(markers), f["message"], bool(named)))
        for clauses, text, tagged in rows:
            if when == "call":
                body += [c for c in clauses if c not in body]
            result.failures.append({"outcome": outcome, "clauses": clauses,
                                    "message": text, "tagged": tagged})
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
