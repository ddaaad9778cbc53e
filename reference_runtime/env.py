"""Environment variables, parsed exactly as TensorFlow 1.15 parses them (SPEC.md, ENV clauses).

- ``read_bool_from_env_var``: TF ``ReadBoolFromEnvVar`` ("0"/"false"/"1"/"true", ASCII
  case-insensitive; anything else, the empty string included, logs and keeps the default).
- ``read_int64_from_env_var``: TF ``ReadInt64FromEnvVar`` over ``strings::safe_strto64``.
- ``get_allow_growth_value`` / ``get_garbage_collection_value``: ``GPUBFCAllocator``'s exact,
  case-sensitive reading of ``TF_FORCE_GPU_ALLOW_GROWTH`` / ``TF_ENABLE_GPU_GARBAGE_COLLECTION``.
- ``path_from_env``: a file-path argument whose default (``ENV_DEFAULT``) is an environment
  variable (``GPU_CONFIG_FILE``, ``GPU_STATUS_FILE``).

Every unparsable value produces one ERROR log line and the default; nothing raises.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .log_text import quote

__all__ = [
    "ENV_DEFAULT",
    "path_from_env",
    "checked_path",
    "INT64_MAX",
    "INT64_MIN",
    "read_bool_from_env_var",
    "read_int64_from_env_var",
    "safe_strto64",
    "get_allow_growth_value",
    "get_garbage_collection_value",
]

_log = logging.getLogger(__name__)

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

# C isspace() in the "C" locale.
_C_SPACES = " \t\n\v\f\r"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def read_bool_from_env_var(name: str, default: bool) -> bool:
    """TF ``ReadBoolFromEnvVar``: unset → default; "0"/"false" → False; "1"/"true" → True."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.translate(_ASCII_LOWER)  # absl::AsciiStrToLower: ASCII letters only
    if value in ("0", "false"):
        return False
    if value in ("1", "true"):
        return True
    _log.error("Failed to parse the env-var ${%s} into bool: %s. Use the default value: %s",
               name, quote(raw), default)
    return default


def safe_strto64(text: str) -> int | None:
    """TF ``strings::safe_strto64``: C spaces, optional '-', decimal digits, C spaces.

    Returns None when the text is not such a number or does not fit in an int64.
    """
    s = text.strip(_C_SPACES)
    body = s[1:] if s.startswith("-") else s
    if not body or any(c not in "0123456789" for c in body):
        return None
    digits = body.lstrip("0") or "0"                # any number of leading zeros
    if len(digits) > 19:                            # past int64 (and Python's digit limit)
        return None
    value = -int(digits) if s.startswith("-") else int(digits)
    if value > INT64_MAX or value < INT64_MIN:
        return None
    return value


def read_int64_from_env_var(name: str, default: int) -> int:
    """TF ``ReadInt64FromEnvVar``: unset → default; unparsable or out of int64 → log, default."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = safe_strto64(raw)
    if value is None:
        _log.error("Failed to parse the env-var ${%s} into int64: %s. Use the default value: %d",
                   name, quote(raw), default)
        return default
    return value


def get_allow_growth_value(option: bool) -> bool:
    """``GPUBFCAllocator::GetAllowGrowthValue``: exact "true"/"false" override the option."""
    raw = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    if raw is None:
        return bool(option)
    if raw in ("true", "false"):
        value = raw == "true"
        if value != bool(option):
            _log.warning("Overriding allow_growth setting because the TF_FORCE_GPU_ALLOW_GROWTH "
                         "environment variable is set. Original config value was %s.",
                         bool(option))
        return value
    _log.error('The TF_FORCE_GPU_ALLOW_GROWTH environment variable is set but could not be '
               'parsed: %s. Valid values are "true" or "false". Using original config value '
               'of %s.', quote(raw), bool(option))
    return bool(option)


def get_garbage_collection_value() -> bool:
    """``GPUBFCAllocator::GetGarbageCollectionValue``: unset → True; exact "true"/"false"."""
    raw = os.environ.get("TF_ENABLE_GPU_GARBAGE_COLLECTION")
    if raw is None:
        return True
    if raw == "false":
        return False
    if raw == "true":
        return True
    _log.error('The TF_ENABLE_GPU_GARBAGE_COLLECTION environment variable is set but could not '
               'be parsed: %s. Valid values are "true" or "false". Using the default value '
               '"true".', quote(raw))
    return True


class _FromEnvironment:
    def __repr__(self) -> str:
        return "<env>"


#: Default of a file-path argument: read the path from its environment variable.
ENV_DEFAULT: Any = _FromEnvironment()


def path_from_env(value: str | os.PathLike | None, env_var: str) -> str:
    """A file-path argument: ``ENV_DEFAULT`` reads ``$env_var``; None or "" is no file.

    A path that cannot name a file raises ``ValueError`` here, where it enters the runtime
    (``checked_path``), instead of failing every later use of it.
    """
    if value is ENV_DEFAULT:
        value = os.environ.get(env_var, "")
    return checked_path(value, f"the {env_var} path") if value else ""


def checked_path(value: str | os.PathLike, what: str) -> str:
    """``os.fspath(value)``; ``ValueError`` when it cannot name a file: a NUL character, or
    a character the file-system encoding cannot encode (SPEC.md API-8)."""
    path = os.fspath(value)
    try:
        encoded = os.fsencode(path)
    except UnicodeError as exc:
        raise ValueError(f"{what} {path!r} cannot be encoded for the file system "
                         f"({exc.reason})") from None
    if b"\0" in encoded:
        raise ValueError(f"{what} {path!r} contains a NUL character")
    return path
