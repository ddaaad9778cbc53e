"""A test's arrangement is evidence about the clause it depends on (SPEC.md section 7).

A conformance test arranges a state (allocates chunks, fills a pool, suspends a step) before
it checks its own clause, and that arrangement relies on behaviour other clauses define: two
512 KiB requests fill a 1 MiB pool only because the allocator splits chunks (BFC-4). When the
arrangement fails, the implementation broke the clause it relies on, not the clause under
test, so the test declares the dependency and its failure is attributed there::

    with precondition("BFC-4", "two 512 KiB chunks fill the 1 MiB pool"):
        p1, p2 = bfc.allocate_raw(256, 512 * KiB), bfc.allocate_raw(256, 512 * KiB)
        assert None not in (p1, p2), f"{p1}, {p2} [BFC-4]"

    precondition_holds("RM-12", step.suspended(), "perfControl 0 suspends the step")
    relies_on("RM-4", "RM-12")          # declared only: the report ranks failures by them

Any exception in the block (an assertion of the test, the virtual clock's ``ClockStall``, an
error of the runtime) becomes a ``PreconditionFailed`` tagged with the clause depended on;
the tags of the original message are kept as text but no longer tag it. Every clause a test
declares, whether or not its precondition held, is recorded (``declared()``): the report
uses it to say which failure another one likely follows from (reports/attribution.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PreconditionFailed", "declared", "precondition", "precondition_holds", "relies_on",
           "reset"]

_TAG = re.compile(r"\[([A-Z][A-Z0-9]*-\d+)\]")
_declared: list[str] = []


class PreconditionFailed(AssertionError):
    """The arrangement of a test failed: evidence against the clause it depends on."""

    #: read by reports/attribution.py: the failure is a precondition of the test
    antman_precondition: str

    def __init__(self, clause: str, what: str, cause: BaseException | None = None) -> None:
        inner = ""
        if cause is not None:
            text = str(cause).split("\nassert ", 1)[0].strip()
            name = type(cause).__name__
            text = text if isinstance(cause, AssertionError) and text else \
                f"{name}: {text}" if text else name
            inner = ": " + _TAG.sub(r"(\1)", text)
        super().__init__(f"precondition failed, {what} [{clause}]{inner}")
        self.antman_precondition = clause


def _declare(clause: str) -> None:
    if not _TAG.fullmatch(f"[{clause}]"):
        raise ValueError(f"precondition clause {clause!r} is no clause ID")
    if clause not in _declared:
        _declared.append(clause)


@contextmanager
def precondition(clause: str, what: str) -> Iterator[None]:
    """The block arranges what the test needs, relying on ``clause``; see the module doc."""
    _declare(clause)
    try:
        yield
    except PreconditionFailed:
        raise
    except Exception as exc:
        raise PreconditionFailed(clause, what, exc) from exc


def precondition_holds(clause: str, condition: object, what: str) -> None:
    """Fail as a precondition on ``clause`` unless ``condition`` is true."""
    _declare(clause)
    if not condition:
        raise PreconditionFailed(clause, what)


def relies_on(*clauses: str) -> None:
    """Declare clauses whose behaviour the test relies on without checking it itself (a
    black-box test sees a misread config only as its own clause failing)."""
    for clause in clauses:
        _declare(clause)


def declared() -> list[str]:
    """The clauses the running test declared it depends on, in order."""
    return list(_declared)


def reset() -> None:
    """Forget the declarations (the report plugin calls it before each test)."""
    _declared.clear()
