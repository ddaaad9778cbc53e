"""Checks that name their clause when the implementation raises the wrong thing (SPEC.md 7).

``pytest.raises(E)`` fails with ``DID NOT RAISE`` or lets another exception through, and
neither message names a clause, so the report would blame every clause of the test (a
stateful machine names many). ``raises(E, clause, what)`` is the same check, tagged; as
``pytest.raises`` it yields what it caught (``.value``).

``names_identifier(message, name)`` is how a test checks that an error or a log line *names*
an identifier (an argument, a field, a method, an allocator): as a whole word (SPEC.md,
"How to read this specification"), so ``XXgpu_memory_bytesXX`` or ``max_gpu_memory_bytes``
does not name ``gpu_memory_bytes``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Raised", "names_identifier", "raises"]

_WORD = "A-Za-z0-9_"


def names_identifier(message: object, name: str) -> bool:
    """``str(message)`` (an exception, a log message, a string) contains ``name`` with no
    letter, digit or ``_`` right before or after it."""
    pattern = rf"(?<![{_WORD}]){re.escape(name)}(?![{_WORD}])"
    return re.search(pattern, str(message)) is not None


class Raised:
    """What ``raises`` caught: ``value``, the exception (set once the block has raised it)."""

    value: BaseException


@contextmanager
def raises(expected: type[BaseException] | tuple[type[BaseException], ...], clause: str,
           what: str) -> Iterator[Raised]:
    """The block MUST raise ``expected``; otherwise an assertion tagged with ``clause``.
    Yields a ``Raised`` whose ``value`` is the exception, for checks of its message."""
    names = " or ".join(e.__name__ for e in (expected if isinstance(expected, tuple)
                                             else (expected,)))
    caught = Raised()
    try:
        yield caught
    except expected as exc:
        caught.value = exc
        return
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__name__}: {exc}, expected {names} "
                             f"[{clause}]") from exc
    raise AssertionError(f"{what} did not raise {names} [{clause}]")
