"""Reading a file named on the command line without trusting it: a regular file of bounded
size, read without blocking (a FIFO or a device such as /dev/zero is refused, not waited on or
read forever)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnusableFile(ValueError):
    """The path is not a regular file, is too large, or cannot be read."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    The file is opened non-blocking (opening a FIFO with no writer does not wait) and checked
    on its descriptor, so a path swapped after a check cannot slip through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnusableFile(f"cannot open {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnusableFile(f"{path} is not a regular file")
        if info.st_size > limit:
            raise UnusableFile(f"{path} is {info.st_size} bytes, more than the {limit} allowed")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise UnusableFile(f"{path} grew past the {limit} bytes allowed while read")
        return b"".join(chunks)
    except OSError as exc:
        raise UnusableFile(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
