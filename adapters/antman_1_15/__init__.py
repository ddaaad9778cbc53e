"""Adapter: AntMan 1.15 as shipped (TensorFlow 1.15.4 with AntMan's changes), as a runtime.

The reference runtime differs from AntMan's code deliberately in the places SPEC.md section 8
lists (``D-RM-3``, ...). This package is the reference runtime with each of those
differences undone: a copy of ``reference_runtime`` made at import time (``loader.py``: the
reference package is neither imported nor changed), whose sources are patched by one switch
per section 8 entry (``deviations.py``). ``pytest conformance --runtime adapters.antman_1_15``
therefore certifies AntMan's behaviour, and every failure it gets is one of section 8's.

- ``SWITCHES``: ``{deviation id: on}``, all on by default; ``ANTMAN_1_15_OFF`` turns some
  off (``ANTMAN_1_15_OFF="D-RM-3,D-FL-1"``; ``all`` gives back the reference's behaviour).
  The switches are read once, at import (the worker subprocess inherits the variable).
- Where AntMan aborts the process or never returns, the copy raises ``AntManGuardError`` or
  bounds the wait (``guards.py``), so that a certification ends; each such entry says so
  in its ``bounded`` text.
- Entries without a switch: ``deviations.DEVIATIONS`` says why (``unobservable``,
  ``not_implemented``).

``python -m adapters.antman_1_15`` lists the switches.
"""

from __future__ import annotations

import os as _os
from pathlib import Path as _Path

from .deviations import BY_ID, DEVIATIONS, OFF_ENV_VAR, active_patches, switches_from_env
from .guards import AntManGuardError
from .loader import ReferenceCopyFinder as _Finder
from .loader import apply_patches as _apply_patches
from .loader import REFERENCE_DIR as _REFERENCE_DIR

#: Deviation id -> whether AntMan's behaviour is switched on (read from ANTMAN_1_15_OFF).
try:
    SWITCHES: dict[str, bool] = switches_from_env(_os.environ)
except ValueError as _exc:
    import sys as _sys
    if _sys.argv[:1] == ["-m"]:        # ``python -m adapters.antman_1_15[...]``: a usage error
        print(f"adapters.antman_1_15: {_exc}", file=_sys.stderr)
        raise SystemExit(2) from None
    raise                              # an importer (the suite) reports it as a usage error

_finder = _Finder(__name__, _Path(__file__).resolve().parent,
                  lambda: active_patches(SWITCHES))
_finder.install()

# The reference package's __init__, run as this package's (its relative imports load the
# patched copies through the finder).
_init_source = _apply_patches("__init__", (_REFERENCE_DIR / "__init__.py").read_text(
    encoding="utf-8"), active_patches(SWITCHES))
exec(compile(_init_source, f"<{__name__} copy of reference_runtime/__init__.py>", "exec",  # noqa: S102
             dont_inherit=True), globals())

NAME = "antman-1.15"
VERSION = "1.15.4"
