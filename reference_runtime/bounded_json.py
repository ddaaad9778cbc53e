"""A JSON reader with bounds on nesting and on the number of values (SPEC.md RM-19).

The config file is written by another program, so its size is the only thing the runtime
controls (FL-9). ``json.loads`` turns every value of a document into a Python object before
the caller can look at it, recurses once per nesting level (a ``RecursionError`` past about
a thousand) and has no limit of its own: a 63 MiB ``[1,1,...]`` becomes 33 million objects.
``loads`` here reads the same grammar (``json.loads`` with ``strict=True``, without the
``NaN``/``Infinity`` extensions) with an explicit stack instead of recursion, and stops at
the first value beyond ``max_values``: a rejected document costs no more than one at the
bound, whatever its size. A container nested beyond ``max_depth`` is read but not built
(``None`` stands for it), so that a deep value under a key the caller ignores, or next to
the values it needs, costs nothing of the rest of the document.

Strings are scanned by the standard library's own C scanner (``json.decoder.scanstring``),
number literals by RFC 8259's pattern (ASCII digits only). Numbers are returned
as ``JSONNumber``, which keeps the literal: a caller reads exactly only the values it
needs, from the literal (``1e6`` and ``1048576.0`` stay integers), and a 5000-digit
literal costs nothing until it is looked at.
"""

from __future__ import annotations

import json.decoder
import re
from typing import Any

from .log_text import QUOTE_CHARS

__all__ = ["loads", "JSONNumber", "JSONBoundsError", "DEFAULT_MAX_DEPTH", "DEFAULT_MAX_VALUES"]

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_VALUES = 100_000

_WHITESPACE = json.decoder.WHITESPACE       # [ \t\n\r]*
#: RFC 8259's number, ASCII digits only (json.scanner.NUMBER_RE's ``\d`` takes any Unicode
#: decimal digit, which json.loads' C scanner does not)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_scanstring = json.decoder.scanstring       # the C string scanner of json.loads
_LITERALS = (("true", True), ("false", False), ("null", None))
#: The characters of a string after its opening quote, up to its closing quote, as
#: ``scanstring`` accepts them: read without building the string, for a string not kept
#: (``scanstring`` rejects a \uXXXX at the end of the text as an escape, not as the end).
_STRING_BODY = re.compile(r'(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}(?!\Z)))*+')
#: Stands for the name of a root member not built (``members``).
_SKIPPED = object()


class JSONBoundsError(ValueError):
    """The document holds more values than the reader accepts."""


class JSONNumber:
    """A JSON number, kept as its literal (``text``); read exactly by its caller."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        """The literal, cut as ``log_text.quote`` cuts a text from outside (RM-21): whole
        when its first ``QUOTE_CHARS`` characters are all of it."""
        head = self.text[:QUOTE_CHARS]
        if head == self.text:
            return head
        return f"{head}...({len(self.text)} characters)"

    def __repr__(self) -> str:
        return f"JSONNumber({str(self)!r})"


def _error(message: str, text: str, pos: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(message, text, pos)


def _too_many(max_values: int, pos: int) -> JSONBoundsError:
    return JSONBoundsError(f"more than {max_values} values (the value at character {pos} is "
                           f"one too many)")


def loads(text: str, *, max_depth: int, max_values: int,
          members: frozenset[str] | None) -> Any:
    """Parse ``text`` as one JSON value (dict, list, str, JSONNumber, bool or None).

    An array or object inside ``max_depth`` others is read (its syntax checked, its values
    counted) but not built: it is None in its parent, so that the rest of the document stays
    usable (``DEFAULT_MAX_DEPTH`` and ``DEFAULT_MAX_VALUES`` are the config's bounds). A root
    object keeps only the members named in ``members`` (all of them for None): the others
    are read as a value too deep is. A string not kept is checked, not built (CPython holds a
    string at up to 4 bytes a character, whatever its size in the text). Raises
    ``json.JSONDecodeError`` for text that is not JSON and ``JSONBoundsError`` at the value
    (a member name counts as one) beyond the ``max_values``-th; both are ``ValueError``. Reading stops there, so the work and memory
    spent are bounded by the bounds, not by the text.
    """
    count = 0
    # Each open container: [the container (None when not built), the key awaiting its
    # value (_SKIPPED for a member not kept), True for an object].
    stack: list[list[Any]] = []
    end = len(text)
    pos = _WHITESPACE.match(text, 0).end()
    while True:
        # -- one value at ``pos`` -----------------------------------------------------------
        count += 1
        if count > max_values:
            raise _too_many(max_values, pos)
        if pos >= end:
            raise _error("Expecting value", text, pos)
        c = text[pos]
        value: Any
        kept = not stack or (stack[-1][0] is not None and stack[-1][1] is not _SKIPPED)
        if c == '"':
            if kept:
                value, pos = _scanstring(text, pos + 1, True)
            else:
                pos = _skip_string(text, pos)
        elif c == "{" or c == "[":
            is_object = c == "{"
            kept = kept and len(stack) < max_depth
            container: Any = ({} if is_object else []) if kept else None
            pos = _WHITESPACE.match(text, pos + 1).end()
            if pos < end and text[pos] == ("}" if is_object else "]"):
                pos += 1                                   # empty: a complete value
                value = container
            else:
                stack.append([container, None, is_object])
                if is_object:
                    # A name counts as a value; the check of its member's value, which
                    # always follows, is the check of both.
                    pos = _member_name(text, pos, stack, members)
                    count += 1
                continue                                   # its first element follows
        else:
            m = _NUMBER.match(text, pos)
            if m is not None:
                value = JSONNumber(m.group())   # dropped below where nothing is kept
                pos = m.end()
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
                pos = _WHITESPACE.match(text, pos).end()
                if pos != end:
                    raise _error("Extra data", text, pos)
                return value
            top = stack[-1]
            container, is_object = top[0], top[2]
            if container is None or top[1] is _SKIPPED:
                pass                                       # not built: nothing is kept
            elif is_object:
                container[top[1]] = value
            else:
                container.append(value)
            pos = _WHITESPACE.match(text, pos).end()
            c = text[pos:pos + 1]                          # "" at the end
            if c == ",":
                pos = _WHITESPACE.match(text, pos + 1).end()
                if is_object:
                    pos = _member_name(text, pos, stack, members)   # counted with its value
                    count += 1
                break                                      # the next element follows
            if c == ("}" if is_object else "]"):
                stack.pop()
                pos += 1
                value = container                          # None when too deep to build
                continue                                   # the container is complete
            raise _error("Expecting ',' delimiter", text, pos)


def _skip_string(text: str, pos: int) -> int:
    """The position after the string whose opening quote is at ``pos``, read as
    ``scanstring`` reads it (the same errors) but not built."""
    end = _STRING_BODY.match(text, pos + 1).end()
    if not text.startswith('"', end):
        try:                        # what follows ``end`` is no string's: the scanner's error
            _scanstring(text, end, True)
        except json.JSONDecodeError as exc:    # an unterminated string is named by its start
            raise _error(exc.msg, text, pos if exc.msg.startswith("Unterminated") else exc.pos)
    return end + 1


def _member_name(text: str, pos: int, stack: list[list[Any]],
                 members: frozenset[str] | None) -> int:
    """Read ``"name" :`` at ``pos`` into the name slot of the innermost container (_SKIPPED
    for a root member not in ``members``; nothing when the container is not built, its slot
    unread); returns the position of the value."""
    if pos >= len(text) or text[pos] != '"':
        raise _error("Expecting property name enclosed in double quotes", text, pos)
    top = stack[-1]
    if top[0] is None:
        pos = _skip_string(text, pos)
    elif members is None or len(stack) > 1:
        top[1], pos = _scanstring(text, pos + 1, True)
    else:
        # A name longer in the text than 6 characters (\uXXXX) for each of the longest
        # member's is none of them: checked, not built.
        end = _skip_string(text, pos)
        top[1] = _SKIPPED
        if end - pos - 2 <= 6 * max(map(len, members)):
            name = _scanstring(text, pos + 1)[0]           # checked: strict or not
            if name in members:
                top[1] = name
        pos = end
    pos = _WHITESPACE.match(text, pos).end()
    if pos >= len(text) or text[pos] != ":":
        raise _error("Expecting ':' delimiter", text, pos)
    return _WHITESPACE.match(text, pos + 1).end()
