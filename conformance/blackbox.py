"""Black-box stand-in for an implementation that cannot be imported (SPEC.md WORKER-1).

Selected when ``--worker-cmd`` is given without ``--runtime``/``ANTMAN_RUNTIME``. Its only
capability is ``worker``, so every in-process clause is reported NOT_SUPPORTED and only the
WORKER clauses run, through the worker command. ``ANTMAN_WORKER_NAME``,
``ANTMAN_WORKER_VERSION`` and ``ANTMAN_WORKER_SPEC_VERSION`` name what is certified; the
worker's own hello record names it too and is kept with each test's results.
"""

from __future__ import annotations

import os

from conformance import spec

NAME: str = os.environ.get("ANTMAN_WORKER_NAME") or "black-box worker"
VERSION: str = os.environ.get("ANTMAN_WORKER_VERSION") or "unknown"
SPEC_VERSION: str = os.environ.get("ANTMAN_WORKER_SPEC_VERSION") or spec.spec_version()
CAPABILITIES: frozenset[str] = frozenset({"worker"})
#: Filled from ``--worker-cmd`` by fixtures/worker.py at configuration time.
WORKER_COMMAND: list[str] = []
