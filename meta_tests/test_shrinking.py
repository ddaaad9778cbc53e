"""A failing property test ends FAIL with its falsifying example inside the per-test limit,
never TIMEOUT because Hypothesis was still shrinking (conformance/shrinking.py)."""

from __future__ import annotations

import pytest

from conformance import shrinking
from meta_tests.test_reports import (_plotting_imported_before_pytester,  # noqa: F401
                                     by_id, project, run)

pytest_plugins = ["pytester"]

SLOW_TO_SHRINK = '''
import time
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

@pytest.mark.clause("API-1")
@settings(max_examples=200, database=None, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.integers(1, 10**9), min_size=60, max_size=60))
def test_slow_to_shrink(xs):
    time.sleep(0.08)                      # every example costs time, as a state machine's do
    assert sum(xs) < 0, "always false [API-1]"
'''
# The bounded case takes about 4 s on an idle 2-core machine (a 2 s shrink budget, 80 ms
# examples replayed, pytester's run): twice that leaves room for a runner loaded by 64 xdist
# workers, where a 4 s limit with 30 ms examples was once exceeded. Unbounded, the shrink of
# 80 ms examples outlasts 8 s (the control; 30 ms ones shrank fully in 5.5 s).
LIMIT_S = 8


def test_the_budget_is_a_share_of_the_test_limit() -> None:
    assert shrinking.shrink_budget_s(120) == 30
    assert shrinking.shrink_budget_s(2) == shrinking.MIN_SHRINK_S
    assert shrinking.shrink_budget_s(None) is None


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded", "unbounded-control"])
def test_a_slow_shrink_ends_fail_with_its_example_inside_the_limit(project, bounded) -> None:  # noqa: F811
    project.makepyfile(test_slow=SLOW_TO_SHRINK)
    args = [f"--timeout={LIMIT_S}"] + ([] if bounded else ["-p", f"no:{'antman-shrinking'}"])
    _, doc = run(project, *args)
    test = by_id(doc, "tests", "nodeid")["test_slow.py::test_slow_to_shrink"]
    if bounded:
        assert test["outcome"] == "FAIL", test
        assert test["duration_s"] < LIMIT_S, test["duration_s"]
        assert "always false [API-1]" in test["message"]
        shown = test["failures"][0]["message"]      # the example is shown (Hypothesis words it
        assert "Failing test case" in shown or "Falsifying example" in shown, shown  # per version
    else:  # the control: without the bound this shrink outlasts the limit. Where
        # pytest-timeout's signal lands decides the outcome: inside an example Hypothesis takes
        # it for one more failure (over the limit); inside Hypothesis's own bookkeeping it
        # breaks an internal assertion (FAIL, as Hypothesis 6.170 does); else TIMEOUT. The
        # call phase then ends a little under the limit, which counted the setup too: it ran
        # to the limit when it took more than 3/4 of it (unbounded, only the limit ends it).
        assert test["outcome"] == "TIMEOUT" or test["duration_s"] > 0.75 * LIMIT_S, test
