"""pytest plugin used by the clause-coverage meta test: writes every collected test's clauses."""

from __future__ import annotations

import json
import os

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ["ANTMAN_CLAUSE_DUMP"]
    rows = [{"nodeid": item.nodeid,
             "clauses": [c for m in item.iter_markers("clause") for c in m.args]}
            for item in session.items]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f)
