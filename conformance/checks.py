"""Checks that name their clause when the implementation raises the wrong thing (SPEC.md 7).

``pytest.raises(E)`` fails with ``DID NOT RAISE`` or lets another exception through, and
neither message names a clause, so the report would blame every clause of the test (a
stateful machine names many). ``raises(E, clause, what)`` is the same check, tagged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["raises"]


@contextmanager
def raises(expected: type[BaseException] | tuple[type[BaseException], ...], clause: str,
           what: str) -> Iterator[None]:
    """The block MUST raise ``expected``; otherwise an assertion tagged with ``clause``."""
    names = " or ".join(e.__name__ for e in (expected if isinstance(expected, tuple)
                                             else (expected,)))
    try:
        yield
    except expected:
        return
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}, expected {names} "
                             f"[{clause}]") from exc
    raise AssertionError(f"{what} did not raise {names} [{clause}]")
