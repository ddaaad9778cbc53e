"""The runtime under test (``--runtime``) beside ``--bench-against MODULE``: ratios with 95 %
intervals from interleaved paired rounds of the comparable benchmarks (benchmarks/against.py).
Selected only by ``--bench-against``; the other benchmarks are then deselected."""

from __future__ import annotations

import pytest

from benchmarks import against
from benchmarks.bench_support import one_shot, record_figures


@pytest.mark.against
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("comparable", list(against.COMPARABLES))
def test_bench_against(rt, bench, tmp_path, request: pytest.FixtureRequest,
                       comparable: str) -> None:
    reference = request.config._antman_bench_reference
    rounds = request.config.getoption(against.ROUNDS_OPTION)
    out: dict[str, against.Comparison] = {}
    one_shot(bench, lambda: out.update(c=against.interleave(
        against.COMPARABLES[comparable], rt, reference, rounds, tmp_path)))
    comparison = out["c"]
    figures = against.ratio_figures(comparison, rt.NAME, reference.NAME)
    record_figures(bench, figures, host_cpu=True, comparable=comparable,
                   order=comparison.order, fork=f"{rt.NAME} {rt.VERSION}",
                   reference=f"{reference.NAME} {reference.VERSION}")
    for f in figures:
        print(f"\n{f.name}: {f.value} {f.details['interval']} ({f.how})")
    assert comparison.order.count("fork") == comparison.order.count("reference") == rounds
