"""How the reports show the root-cause ranking of failing clauses (reports/attribution.py).

Failing clauses are listed root cause first (``rank``); each clause that likely follows from
another one's failure says so, naming that failure, under its heading.
"""

from __future__ import annotations

from typing import Any

from reports import safe_text


def ranked(clauses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``clauses`` in rank order (root causes first); unranked ones after, in their order."""
    return sorted(clauses, key=lambda c: (c.get("rank") is None, c.get("rank") or 0))


def cause_text(c: dict[str, Any]) -> str | None:
    """``likely follows from BFC-4 (test): because`` for a clause that is not a root cause,
    ``root cause`` for a ranked root, None for a clause that is not ranked."""
    follows = c.get("follows_from")
    if follows:
        return (f"likely follows from the failure of {follows['clause']} in "
                f"{follows['nodeid']} ({follows['because']})")
    if c.get("rank"):
        return "root cause: failing in tests that depend on no other failing clause"
    return None


def md_lines(c: dict[str, Any]) -> list[str]:
    """The Markdown lines under a failing clause's heading."""
    text = cause_text(c)
    if not text:
        return []
    follows = c.get("follows_from")
    out = [f"*{safe_text.markdown(text)}*", ""]
    if follows and follows.get("message"):
        first = follows["message"].splitlines()[0][:300]
        out[0] = f"*{safe_text.markdown(text)}:* {safe_text.markdown_code(first)}"
    return out


def html_line(c: dict[str, Any]) -> str:
    """The HTML line above a failing clause's failures."""
    text = cause_text(c)
    if not text:
        return ""
    follows = c.get("follows_from")
    extra = ""
    if follows and follows.get("message"):
        extra = f": <code>{safe_text.html(follows['message'].splitlines()[0][:300])}</code>"
    cls = "muted" if follows else ""
    return f"<div class='{cls}'><i>{safe_text.html(text)}</i>{extra}</div>"
