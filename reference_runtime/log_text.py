"""Text from outside the runtime, made safe for a log line (SPEC.md RM-21).

Config keys and values, file paths and other text the runtime did not write itself are
logged through ``quote``: repr-style quoting escapes every control character, line or
paragraph separator and other non-printable character (a bus id holding a newline cannot
start a forged log line), and a long text is cut, so that one log line stays short whatever
the input.
"""

from __future__ import annotations

from typing import Any

__all__ = ["quote", "QUOTE_CHARS"]

QUOTE_CHARS = 60        # characters of an outside text quoted in a log line


def quote(text: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of the first ``limit`` characters of ``str(text)``, with the full length
    when it was cut."""
    text = str(text)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}...({len(text)} characters)"
