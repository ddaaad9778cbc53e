"""Reading certification reports that come from elsewhere (a fork, a bundle, a published
folder) without trusting them: a regular file (no symlink, no device or FIFO), at most
``MAX_REPORT_BYTES``, UTF-8 JSON, valid against the schema. Every failure is one
``ReportError`` whose message fits on one line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

REPORT_NAME = "certification.json"
#: The largest certification.json read (the published GPU run is about 1 MB).
MAX_REPORT_BYTES = 32 * 1024 * 1024


class ReportError(ValueError):
    """A report cannot be used; the message is one line."""


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters (for error messages)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file (a symlink is refused) of at most
    ``limit`` bytes; read with that bound whatever the file claims."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = "a symbolic link" if path.is_symlink() else exc.strerror or str(exc)
        raise ReportError(f"{path}: cannot read ({why})") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReportError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise ReportError(f"{path}: {st.st_size} bytes, more than the {limit} allowed")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ReportError(f"{path}: more than the {limit} bytes allowed")
        return b"".join(chunks)
    finally:
        os.close(fd)


def parse_report(raw: bytes, where: str) -> dict[str, Any]:
    """The certification document in ``raw``: JSON, schema-valid (``ReportError`` if not)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ReportError(f"{where}: not JSON ({one_line(exc, 120)})") from exc
    if not isinstance(doc, dict):
        raise ReportError(f"{where}: not a certification report (not a JSON object)")
    errors = validation_errors(doc)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReportError(f"{where}: breaks the report schema: {one_line(errors[0], 200)}{more}")
    return doc


#: Schemas of earlier minor versions, kept to read the reports written with them.
EARLIER_SCHEMAS = {"1.3": Path(__file__).resolve().parent / "schema"
                   / "certification-1.3.schema.json"}


def validation_errors(doc: dict[str, Any]) -> list[str]:
    """Where ``doc`` breaks the schema of its own version: the current one, or an earlier
    minor version this checkout keeps (a reader ignores what it does not know)."""
    from reports import writer
    version = doc.get("schema_version")
    earlier = EARLIER_SCHEMAS.get(version) if isinstance(version, str) else None
    if earlier is None:
        return writer.validation_errors(doc)
    import jsonschema
    schema = json.loads(earlier.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]


def report_file(path: Path) -> Path:
    """``path`` itself, or the ``certification.json`` of the run folder ``path``."""
    return path / REPORT_NAME if path.is_dir() else path


def load_report(path: Path) -> dict[str, Any]:
    """The schema-valid certification document at ``path`` (a file or a run folder)."""
    file = report_file(path)
    return parse_report(read_regular(file, MAX_REPORT_BYTES), str(file))
