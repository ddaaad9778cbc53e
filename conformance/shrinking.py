"""A failing property or stateful test ends FAIL, with its falsifying example, inside the
per-test time limit (SPEC.md section 7): never TIMEOUT because Hypothesis was still shrinking.

Hypothesis stops shrinking a failure after ``MAX_SHRINKING_SECONDS`` (300 s; its engine
documents the constant as the one to change) and then reports the smallest example found so
far, which still fails. Around each test call the suite sets it to ``SHRINK_SHARE`` of the
test's pytest-timeout limit (``--timeout``, the ``timeout`` marker or ini option; at least
``MIN_SHRINK_S``), so that finding the failure, shrinking it, explaining it and replaying
the result fit in the limit on a loaded machine: with the suite's 120 s, 30 s of shrinking.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

SHRINK_SHARE = 0.25
MIN_SHRINK_S = 1.0


def timeout_of(item: pytest.Item) -> float | None:
    """The pytest-timeout limit of ``item`` in seconds; None when there is none."""
    marker = item.get_closest_marker("timeout")
    value = None
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if value is None:
        value = getattr(item.config.option, "timeout", None)
    if value is None:
        try:
            value = item.config.getini("timeout")
        except (ValueError, KeyError):
            value = None
    try:
        limit = float(value) if value not in (None, "") else 0.0
    except (TypeError, ValueError):
        return None
    return limit if limit > 0 else None


def shrink_budget_s(timeout_s: float | None) -> float | None:
    """Seconds Hypothesis may shrink within a test limited to ``timeout_s`` (None: no limit,
    Hypothesis' own bound applies)."""
    if timeout_s is None:
        return None
    return max(MIN_SHRINK_S, SHRINK_SHARE * timeout_s)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    budget = shrink_budget_s(timeout_of(item))
    if budget is None:
        return (yield)
    from hypothesis.internal.conjecture import engine
    saved = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = min(saved, budget)  # type: ignore[assignment]
    try:
        return (yield)
    finally:
        engine.MAX_SHRINKING_SECONDS = saved
