"""The environment of a process a meta-test starts: what it is given first, then the caller's.

A runner may provide the suite's packages through ``PYTHONPATH`` (a GPU runner without
network that carries them as a folder, a site with its own layout) rather than an
environment's site-packages. A child process given a ``PYTHONPATH`` of its own must keep
those entries, after its own, or it starts without jsonschema or pytest's plugins and fails
for the host, not for what the meta-test checks. Stand-in modules (``pynvml``, ``cupy``)
come first, so they still win over any installed one.
"""

from __future__ import annotations

import os
from pathlib import Path


def python_path(*first: str | Path, environ: dict[str, str] | None = None) -> str:
    """``first`` then the entries of ``environ``'s (default: this process's) ``PYTHONPATH``,
    without repeats and empty entries, joined for ``PYTHONPATH``."""
    inherited = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    entries = [str(p) for p in first] + inherited.split(os.pathsep)
    return os.pathsep.join(dict.fromkeys(e for e in entries if e))
