"""Text from the implementation under test, made safe for each output of the suite.

Every text an implementation or the environment hands the suite (a worker's records and
standard error, a fork's ``NAME``, test IDs, failure messages quoting them, host names,
paths) is valid where it came from and may still break an output: a lone surrogate cannot be
written as UTF-8, NUL and ESC are not XML 1.0 characters, ESC sequences and CR rewrite a
terminal, bidi overrides reorder what a reader sees, markup forges HTML or Markdown, and a
megabyte line floods everything. This module is the one place that decides what each output
makes of such text (SPEC.md section 7, Report); one function per output:

- ``json_text`` / ``json_document``: no lone surrogates (each becomes the visible text
  ``\\ud800``), at most ``MAX_TEXT_CHARS`` characters per string; other characters are kept
  (the JSON encoder escapes control characters). ``json_document`` applies it to every string
  (keys too) of a document, in place: the certification document passes through it once,
  before anything is written (reports/writer.py).
- ``xml``: only XML 1.0 characters, control and bidi characters visible (tab, LF, CR kept).
- ``html``: control and bidi characters visible, then HTML-escaped (quotes too).
- ``markdown`` (inline text, table cells), ``markdown_code`` (a code span) and
  ``markdown_block`` (a fenced block): control and bidi characters visible, Markdown syntax
  inert.
- ``terminal``: ESC, CR and every other control or bidi character visible, length bounded;
  ``multiline`` keeps LF and tab.

"Visible" means the character is replaced by its Python escape (``\\x1b``, ``\\u202e``,
``\\U0001fffe``), so what was there can still be read. A bounded text ends with
``...[N characters]``, N the length of the whole text.
"""

from __future__ import annotations

import html as _html
import re
import sys
from typing import Any

__all__ = ["MAX_TEXT_CHARS", "TERMINAL_LINE_CHARS", "json_text", "json_document", "xml",
           "html", "markdown", "markdown_code", "markdown_block", "terminal", "terminal_safe",
           "bounded"]

#: The longest string a report holds (and an HTML, Markdown or XML text is cut to).
MAX_TEXT_CHARS = 64 * 1024
#: The longest line written to the terminal.
TERMINAL_LINE_CHARS = 2000

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls, DEL, lone surrogates, bidi controls, invisible separators and
# noncharacters that XML 1.0 forbids; tab, LF and CR are decided by each output.
_UNSAFE = ("\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200b\u200e\u200f"
           "\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ufffe\uffff")
_VISIBLE_KEEP_TAB_LF_CR = re.compile(f"[{_UNSAFE}]")
_VISIBLE_KEEP_TAB_LF = re.compile(f"[{_UNSAFE}\r]")
_VISIBLE_ALL = re.compile(f"[{_UNSAFE}\t\n\r]")
_NONCHARACTER_PLANES = re.compile("[\U0001fffe\U0001ffff\U0002fffe\U0002ffff\U0003fffe"
                                  "\U0003ffff\U000efffe\U000effff\U000ffffe\U000fffff"
                                  "\U0010fffe\U0010ffff]")
# Always active: \ ` * [ ] < | ~ &; ``_`` only where it can start or end emphasis (not
# between two letters or digits, as in x86_64); a block marker only at the start.
_MARKDOWN_SYNTAX = re.compile(r"([\\`*\[\]<|~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_MARKDOWN_BLOCK_START = re.compile(r"^(\s*)(#{1,6}(?=\s|$)|>|[+-](?=\s|$)|\d{1,9}[.)](?=\s|$))")


def _escape(match: re.Match[str]) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def bounded(text: str, limit: int = MAX_TEXT_CHARS, length: int | None = None) -> str:
    """``text`` cut to ``limit`` characters; the end says how long it was (``length``, when
    ``text`` is already a cut of a longer text)."""
    if len(text) <= limit and length is None:
        return text
    tail = f"...[{length if length is not None else len(text)} characters]"
    return text[:max(0, limit - len(tail))] + tail


def _visible(text: Any, pattern: re.Pattern[str], limit: int, from_end: bool = False) -> str:
    text = str(text if text is not None else "")
    # cut before escaping (bounded work), and again after (escapes lengthen the text)
    length = len(text)
    shown = text[-limit:] if from_end else text[:limit]
    shown = _NONCHARACTER_PLANES.sub(_escape, pattern.sub(_escape, shown))
    if length <= limit and len(shown) <= limit:
        return shown
    if from_end:
        head = f"[{length} characters]..."
        keep = limit - len(head)
        return head + shown[len(shown) - keep:] if keep > 0 else shown[len(shown) - limit:]
    return bounded(shown, limit, length)


def json_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` for JSON: lone surrogates visible, at most ``limit`` characters."""
    return _SURROGATE.sub(_escape, bounded(text, limit))


def json_document(doc: Any, limit: int = MAX_TEXT_CHARS) -> Any:
    """Every string of ``doc`` (dict keys too) through ``json_text``; dicts and lists are
    changed in place, and ``doc`` (or the new string) is returned."""
    if isinstance(doc, str):
        return json_text(doc, limit)
    if isinstance(doc, dict):
        items = list(doc.items())
        doc.clear()
        for key, value in items:
            doc[json_text(key, limit) if isinstance(key, str) else key] = \
                json_document(value, limit)
    elif isinstance(doc, list):
        doc[:] = [json_document(v, limit) for v in doc]
    elif isinstance(doc, tuple):
        return tuple(json_document(v, limit) for v in doc)
    return doc


def xml(text: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` with XML 1.0 characters only (control, bidi and noncharacters visible; tab,
    LF and CR kept). Markup is left to the XML writer (ElementTree escapes ``<``, ``&``);
    ``limit=0`` leaves the length alone (a whole file)."""
    return _visible(text, _VISIBLE_KEEP_TAB_LF_CR, limit or sys.maxsize)


def html(text: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` for HTML element content or a quoted attribute."""
    return _html.escape(_visible(text, _VISIBLE_KEEP_TAB_LF, limit), quote=True)


def markdown(text: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` for inline Markdown (a sentence, a list item, a table cell): one line,
    syntax characters backslash-escaped, so it can neither format nor break out."""
    flat = _visible(text, _VISIBLE_KEEP_TAB_LF, limit).replace("\t", " ").replace("\n", " ")
    inert = _MARKDOWN_SYNTAX.sub(r"\\\1", flat)
    return _MARKDOWN_BLOCK_START.sub(_inert_block_start, inert, count=1)


def _inert_block_start(m: re.Match[str]) -> str:
    lead, marker = m.group(1), m.group(2)
    if marker[0].isdigit():
        return f"{lead}{marker[:-1]}\\{marker[-1]}"
    return f"{lead}\\{marker}"


def markdown_code(text: Any, limit: int = MAX_TEXT_CHARS, *, in_table: bool = False) -> str:
    """``text`` as a whole Markdown code span (delimiters included): one line, fenced by
    more backticks than any run of backticks in it; ``in_table`` escapes ``|``."""
    flat = _visible(text, _VISIBLE_KEEP_TAB_LF, limit).replace("\t", " ").replace("\n", " ")
    if in_table:
        flat = flat.replace("|", "\\|")
    fence = "`" * (max((len(r) for r in re.findall("`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def markdown_block(text: Any, limit: int = MAX_TEXT_CHARS, indent: str = "") -> list[str]:
    """``text`` as the lines of a fenced Markdown code block (fences included), fenced by
    more backticks than any run in it, each line prefixed by ``indent``."""
    body = _visible(text, _VISIBLE_KEEP_TAB_LF, limit)
    fence = "`" * max(3, max((len(r) for r in re.findall("`+", body)), default=0) + 1)
    return [indent + fence, *(indent + line for line in body.splitlines()), indent + fence]


def terminal(text: Any, limit: int = TERMINAL_LINE_CHARS, *, multiline: bool = False,
             tail: bool = False) -> str:
    """``text`` for the terminal: ESC, CR, every other control character, bidi controls and
    lone surrogates visible; ``multiline`` keeps LF and tab; at most ``limit`` characters,
    the last ones with ``tail`` (the end of a log)."""
    return _visible(text, _VISIBLE_KEEP_TAB_LF if multiline else _VISIBLE_ALL, limit,
                    from_end=tail)


def terminal_safe(text: Any, limit: int = 300) -> str:
    """One terminal line of at most ``limit`` characters (``terminal`` with a short default
    for fields of a listing: a clause title, a file name, an error)."""
    shown = terminal(text, max(4 * limit, 64))
    return shown if len(shown) <= limit else shown[:max(limit - 3, 0)] + "..."
