"""Black-box stand-in for an implementation that cannot be imported (SPEC.md WORKER-1).

Selected when ``--worker-cmd`` is given without ``--runtime``/``ANTMAN_RUNTIME``. Its only
capability is ``worker``, so every in-process clause is reported NOT_SUPPORTED and only the
WORKER clauses run, through the worker command.

What is certified is named by ``ANTMAN_WORKER_NAME``, ``ANTMAN_WORKER_VERSION`` and
``ANTMAN_WORKER_SPEC_VERSION`` where they are set, otherwise by the worker's own hello record
(``runtime.name``, ``runtime.version``, ``spec_version``; see :func:`identity`). ``NAME`` and
``VERSION`` below are what is known before any worker ran (they name the run folder).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from conformance import spec

#: The report takes its execution target from the worker's hello record (reports/environment).
BLACK_BOX = True
DEFAULT_NAME = "black-box worker"
DEFAULT_VERSION = "unknown"

NAME: str = os.environ.get("ANTMAN_WORKER_NAME") or DEFAULT_NAME
VERSION: str = os.environ.get("ANTMAN_WORKER_VERSION") or DEFAULT_VERSION
SPEC_VERSION: str = os.environ.get("ANTMAN_WORKER_SPEC_VERSION") or spec.spec_version()
CAPABILITIES: frozenset[str] = frozenset({"worker"})
#: Filled from ``--worker-cmd`` by fixtures/worker.py at configuration time.
WORKER_COMMAND: list[str] = []


def identity(hello: Mapping[str, Any] | None) -> dict[str, str]:
    """``name``, ``version``, ``spec_version`` of the implementation under test.

    Each is the ``ANTMAN_WORKER_*`` variable where set (non-empty), else the worker's hello
    record (WORKER-2) where one was read, else the default (``black-box worker``,
    ``unknown``, the suite's spec version).
    """
    runtime = hello.get("runtime") if isinstance(hello, Mapping) else None
    runtime = runtime if isinstance(runtime, Mapping) else {}
    spec_version = hello.get("spec_version") if isinstance(hello, Mapping) else None

    def pick(var: str, reported: Any, default: str) -> str:
        given = os.environ.get(var)
        if given:
            return given
        return reported if isinstance(reported, str) and reported else default

    return {"name": pick("ANTMAN_WORKER_NAME", runtime.get("name"), DEFAULT_NAME),
            "version": pick("ANTMAN_WORKER_VERSION", runtime.get("version"), DEFAULT_VERSION),
            "spec_version": pick("ANTMAN_WORKER_SPEC_VERSION", spec_version,
                                 spec.spec_version())}
