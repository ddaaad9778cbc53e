"""pytest plugin for mutant runs (``-p mutation.pytest_isolation``): no example database.

Hypothesis keeps the failing examples of a run in ``.hypothesis/`` and replays them first
in the next: a mutant's outcome would depend on the mutants run before it. Each mutant run
loads the suite's profile with the database switched off, so that every run sees the same
examples (``--hypothesis-seed``) and writes nothing into the repository.
"""

from __future__ import annotations

import pytest
from hypothesis import settings


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    current = settings.get_profile(settings.get_current_profile_name())
    settings.register_profile("mutation-run", parent=current, database=None)
    settings.load_profile("mutation-run")
