"""AntMan 1.15's own ways of doing things that the deviation patches call.

Small functions that behave as the original C++ does where it differs from SPEC.md: C
integer conversions, jsoncpp's permissive reading, ``std::ofstream``'s in-place write and
the lock-free ``GetMemPoolStats``. Each names the deviation (SPEC.md section 8) it belongs to.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from .guards import AntManGuardError

__all__ = ["c_int", "jsoncpp_prefix", "jsoncpp_reader", "jsoncpp_double_uint", "write_in_place",
           "unlocked_pool_stats", "sigfpe", "jsoncpp_abort", "UnlockedPoolStats"]

SIZE_T_MASK = (1 << 64) - 1


def c_int(value: int) -> int:
    """``int parsed = asUInt64()``: a uint64 truncated to a 32-bit ``int`` (D-RM-1)."""
    value &= 0xFFFF_FFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def jsoncpp_prefix(content: Any) -> Any:
    """The text up to the end of the first JSON value: jsoncpp's ``Reader`` ignores what
    follows the root (D-RM-8). Text that does not start with a value is returned as it is
    (the parser then rejects it)."""
    if not isinstance(content, str):
        return content
    try:
        stripped = content.lstrip(" \t\r\n")
        _, end = json.JSONDecoder().raw_decode(stripped)
    except (ValueError, RecursionError):
        return content
    return stripped[:end]


def jsoncpp_reader(loads: Any) -> Any:
    """``loads`` as jsoncpp's ``Reader`` parses: text after the root value is ignored
    (D-RM-8); the document is read once, and only a rejection for that text reads again
    the part before it."""
    def read(text: str, **bounds: Any) -> Any:
        try:
            return loads(text, **bounds)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":
                raise
            return loads(text[:exc.pos], **bounds)
    return read


def jsoncpp_double_uint(text: str) -> int | None:
    """A number literal with a fraction or an exponent, read as jsoncpp does: a ``double``,
    accepted by ``isUInt64`` when it is integral and in [0, 2^64) (D-RM-10). None for a
    literal without fraction or exponent (read exactly, as jsoncpp's integers are); raises
    ``ValueError`` when the double is no uint64."""
    if not any(c in text for c in ".eE"):
        return None
    number = float(text)
    if not math.isfinite(number) or number < 0 or number >= 2.0 ** 64 \
            or number != math.floor(number):
        raise ValueError(f"{text} is not a uint64 as a double")
    return int(number)


def write_in_place(target: str, data: bytes) -> None:
    """``std::ofstream(path)``: truncate whatever is at the path and write into it (D-STAT-2).
    Opened without blocking, so that a FIFO without a reader fails instead of hanging."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


@dataclass(frozen=True)
class UnlockedPoolStats:
    pool_bytes: int
    stable_bytes: int


def unlocked_pool_stats(bfc: Any) -> UnlockedPoolStats:
    """``GetMemPoolStats`` as AntMan's ``GPUStatistics`` calls it: the regions walked without
    the BFC lock (D-STAT-3)."""
    pool = stable = 0
    for _, size, fully_free in bfc._adj_regions():
        pool += size
        if not fully_free:
            stable += size
    return UnlockedPoolStats(pool, stable)


def sigfpe() -> int:
    """``/ gpu_perf_control_`` with the value 0: SIGFPE kills the process (D-RM-3)."""
    raise AntManGuardError("SIGFPE (AntMan 1.15 kills the process): perfControl became 0 "
                           "between the check and the division in DoSleepOrSuspend")


def jsoncpp_abort(what: str) -> None:
    """A jsoncpp type assertion with exceptions off: ``abort()`` (D-RM-4)."""
    raise AntManGuardError(f"jsoncpp assertion (AntMan 1.15 aborts the process): {what} is "
                           f"not an object")
