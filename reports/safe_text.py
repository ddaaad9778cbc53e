"""Text from a report or an input file, made safe to print on a terminal."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: object, limit: int = 300) -> str:
    """``text`` on one line with control characters escaped (ESC is ``\\x1b``, CR ``\\r``, a
    newline ``\\n``; C1 controls and bidirectional overrides too), truncated to ``limit``
    characters with ``...`` when longer."""
    s = str(text)
    if len(s) > 4 * limit:   # escaping never shortens: cut first, bounded work
        s = s[: 4 * limit]
    s = _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), s)
    return s if len(s) <= limit else s[: max(limit - 3, 0)] + "..."
