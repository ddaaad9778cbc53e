"""Reading files that come from elsewhere without trusting them. ``read_regular`` is the one
reader of a file named on a command line or found in a run folder (a report, an expectations
file, a fork's source): a regular file of bounded size, opened without blocking, no FIFO,
device or folder, a symbolic link only where the caller follows them. ``load_report`` adds
what a certification report from elsewhere (a fork, a bundle, a published folder) must be:
at most ``MAX_REPORT_BYTES``, UTF-8 JSON, valid against the schema. Every failure is one
``ReportError`` whose message fits on one line.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

REPORT_NAME = "certification.json"
#: The largest certification.json read (the published GPU run is about 1 MB; a report of the
#: whole suite is well under 10 MiB).
MAX_REPORT_BYTES = 64 << 20


class ReportError(ValueError):
    """A file handed to the report tools cannot be used; the message is one line."""


class UnusableFile(ReportError):
    """The path is not a regular file, is too large, or cannot be read."""


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line, at most ``limit`` characters (for error messages)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))


def read_regular(path: Path, limit: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes: the one place the
    tools open and read a file named from outside.

    The file is opened non-blocking (a FIFO with no writer is not waited on) and checked on
    its descriptor, so a path swapped after a check cannot slip through; a device such as
    ``/dev/zero``, a folder or a FIFO is refused, and at most ``limit + 1`` bytes are read
    whatever the file claims. A symbolic link as the last component is refused unless
    ``follow_symlinks`` (a ``latest`` pointer, a file named on a developer's command line).
    Every failure is an ``UnusableFile`` whose message is one line naming the path."""
    flags = _OPEN_FLAGS | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and exc.errno == errno.ELOOP and path.is_symlink():
            raise UnusableFile(f"{path} is a symbolic link (not followed)") from None
        raise UnusableFile(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnusableFile(f"{path} is not a regular file")
        if st.st_size > limit:
            raise UnusableFile(f"{path} is {st.st_size} bytes, more than the {limit} allowed")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnusableFile(f"{path} grew past the {limit} bytes allowed while read")
        return b"".join(chunks)
    except OSError as exc:
        raise UnusableFile(f"cannot read {path}: {exc.strerror or exc}") from None
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
