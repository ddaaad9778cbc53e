"""A JSON reader with bounds on nesting and on the number of values (SPEC.md RM-19).

The config file is written by another program, so its size is the only thing the runtime
controls (FL-9). ``json.loads`` turns every value of a document into a Python object before
the caller can look at it, recurses once per nesting level (a ``RecursionError`` past about
a thousand) and has no limit of its own: a 63 MiB ``[1,1,...]`` becomes 33 million objects.
``loads`` here reads the same grammar (``json.loads`` with ``strict=True``, without the
``NaN``/``Infinity`` extensions) with an explicit stack instead of recursion, and stops at
the first value beyond ``max_values`` or the first container beyond ``max_depth``: a
rejected document costs no more than one at the bounds, whatever its size.

Strings and number literals are scanned by the standard library's own C scanners
(``json.decoder.scanstring`` and the ``json.scanner`` number pattern). Numbers are returned
as ``JSONNumber``, which keeps the literal: a caller converts only the values it reads, and
exactly (``Decimal``), so that ``1e6`` and ``1048576.0`` stay integers and a 5000-digit
literal costs nothing until it is looked at.
"""

from __future__ import annotations

import json.decoder
import json.scanner
from decimal import Decimal
from typing import Any

__all__ = ["loads", "JSONNumber", "JSONBoundsError", "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_VALUES"]

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_VALUES = 100_000

_WHITESPACE = json.decoder.WHITESPACE       # [ \t\n\r]*
_NUMBER = json.scanner.NUMBER_RE            # -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?
_scanstring = json.decoder.scanstring       # the C string scanner of json.loads
_LITERALS = (("true", True), ("false", False), ("null", None))
_EXCERPT = 20                               # characters of a long literal quoted in messages


class JSONBoundsError(ValueError):
    """The document is nested deeper, or holds more values, than the reader accepts."""


class JSONNumber:
    """A JSON number, kept as its literal; converted exactly when read."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def to_decimal(self) -> Decimal:
        return Decimal(self.text)

    def __str__(self) -> str:
        if len(self.text) <= 2 * _EXCERPT:
            return self.text
        return f"{self.text[:_EXCERPT]}...({len(self.text)} characters)"

    def __repr__(self) -> str:
        return f"JSONNumber({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSONNumber) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _error(message: str, text: str, pos: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(message, text, pos)


def loads(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH,
          max_values: int = DEFAULT_MAX_VALUES) -> Any:
    """Parse ``text`` as one JSON value (dict, list, str, JSONNumber, bool or None).

    Raises ``json.JSONDecodeError`` for text that is not JSON and ``JSONBoundsError`` for a
    container nested more than ``max_depth`` deep or a value (a member name counts as one)
    beyond the ``max_values``-th; both are ``ValueError``. Reading stops at the first
    problem, so the work and memory spent are bounded by the bounds, not by the text.
    """
    count = 0
    # Each open container: [the container, the key awaiting its value (objects)].
    stack: list[list[Any]] = []
    end = len(text)
    pos = _WHITESPACE.match(text, 0).end()
    root: Any = None
    while True:
        # -- one value at ``pos`` -----------------------------------------------------------
        count += 1
        if count > max_values:
            raise JSONBoundsError(f"more than {max_values} values (the value at character "
                                  f"{pos} is one too many)")
        if pos >= end:
            raise _error("Expecting value", text, pos)
        c = text[pos]
        value: Any
        if c == '"':
            value, pos = _scanstring(text, pos + 1, True)
        elif c == "{" or c == "[":
            if len(stack) >= max_depth:
                raise JSONBoundsError(f"nested deeper than {max_depth} levels (at character "
                                      f"{pos})")
            container: Any = {} if c == "{" else []
            pos = _WHITESPACE.match(text, pos + 1).end()
            close = "}" if c == "{" else "]"
            if pos < end and text[pos] == close:
                value, pos = container, pos + 1          # empty: a complete value
            else:
                stack.append([container, None])
                if c == "{":
                    pos = _member_name(text, pos, stack[-1])
                    count += 1
                    if count > max_values:
                        raise JSONBoundsError(f"more than {max_values} values (the member "
                                              f"name before character {pos} is one too many)")
                continue                                   # its first element follows
        else:
            m = _NUMBER.match(text, pos)
            if m is not None:
                value, pos = JSONNumber(m.group()), m.end()
            else:
                for word, constant in _LITERALS:
                    if text.startswith(word, pos):
                        value, pos = constant, pos + len(word)
                        break
                else:
                    raise _error("Expecting value", text, pos)
        # -- the value is complete: store it, then close containers ------------------------
        while True:
            if not stack:
                root = value
                pos = _WHITESPACE.match(text, pos).end()
                if pos != end:
                    raise _error("Extra data", text, pos)
                return root
            top = stack[-1]
            container = top[0]
            if isinstance(container, dict):
                container[top[1]] = value
            else:
                container.append(value)
            pos = _WHITESPACE.match(text, pos).end()
            c = text[pos] if pos < end else ""
            if c == ",":
                pos = _WHITESPACE.match(text, pos + 1).end()
                if isinstance(container, dict):
                    pos = _member_name(text, pos, top)
                    count += 1
                    if count > max_values:
                        raise JSONBoundsError(f"more than {max_values} values (the member "
                                              f"name before character {pos} is one too many)")
                break                                      # the next element follows
            if c == ("}" if isinstance(container, dict) else "]"):
                stack.pop()
                value, pos = container, pos + 1
                continue                                   # the container is complete
            raise _error("Expecting ',' delimiter", text, pos)


def _member_name(text: str, pos: int, top: list[Any]) -> int:
    """Read ``"name" :`` at ``pos`` into ``top[1]``; returns the position of the value."""
    if pos >= len(text) or text[pos] != '"':
        raise _error("Expecting property name enclosed in double quotes", text, pos)
    top[1], pos = _scanstring(text, pos + 1, True)
    pos = _WHITESPACE.match(text, pos).end()
    if pos >= len(text) or text[pos] != ":":
        raise _error("Expecting ':' delimiter", text, pos)
    return _WHITESPACE.match(text, pos + 1).end()
