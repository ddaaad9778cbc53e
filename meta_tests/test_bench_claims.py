"""The benchmark claims in the terminal (benchmarks/claims.py) and the fork-beside-reference
comparison (benchmarks/against.py)."""

from __future__ import annotations

import pytest

from benchmarks import claims

pytest_plugins = ["pytester"]

GPU_INFO = {"device_env": "cuda", "gpu_model": "NVIDIA H100 80GB HBM3"}
FIGURES = [
    {"name": "delivered throughput at perfControl 50", "value": 50.4, "unit": "%",
     "target": "50 ± 5 pp", "met": True, "details": {"throughput_ci95_pp": 1.2}},
    {"name": "overhead", "value": 0.9, "unit": "%", "target": "within ±0.5 %", "met": False,
     "details": {"ci95_pp": 0.1}},
    {"name": "share", "value": None, "unit": "%", "target": "< 1 %", "met": None},
    {"name": "op manager cost", "value": 12.0, "unit": "µs/op", "target": "", "met": None,
     "details": {"interval": [10.0, 14.0]}},
]


def test_gpu_figures_are_judged_and_name_the_card() -> None:
    got = claims.claims({**GPU_INFO, "figures": FIGURES})
    assert [c.status for c in got] == ["met", "missed", "invalid", "-"]
    assert {c.card for c in got} == {"NVIDIA H100 80GB HBM3"}
    assert got[0].interval == "± 1.2 (95 %)" and got[3].interval == "[10, 14] (95 %)"
    line = got[1].line()
    assert line.startswith("MISSED ") and "target within ±0.5 %" in line
    assert "0.9 ± 0.1 (95 %) %" in line and line.endswith("NVIDIA H100 80GB HBM3")


def test_simulated_figures_are_smoke_never_met_or_missed() -> None:
    got = claims.claims({"device_env": "", "gpu_model": "NVIDIA H100", "figures": FIGURES})
    assert [c.status for c in got] == ["smoke", "smoke", "smoke", "-"]
    assert {c.card for c in got} == {claims.SIMULATED}
    assert all("MET" not in c.line() and "MISSED" not in c.line() for c in got)


def test_claims_section_follows_the_benchmark_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench_fig='''
        def test_share(benchmark):
            benchmark.extra_info["figures"] = [
                {"name": "delivered share", "value": 49.0, "unit": "%", "target": "50 ± 5 pp",
                 "met": True, "details": {"ci95_pp": 2.0}}]
            benchmark.pedantic(sum, args=(range(10),), rounds=2, iterations=1)
    ''')
    result = pytester.runpytest("-p", "benchmarks.claims", "-p", "no:cacheprovider",
                                "-p", "no:randomly", "-p", "no:xdist", "--benchmark-only")
    assert result.ret == 0
    out = result.stdout.str()
    assert "benchmark claims" in out and out.index("Name (time in") < out.index(
        "benchmark claims"), out
    result.stdout.fnmatch_lines([
        "*benchmark claims*", "*", "test_share:",
        "  SMOKE   delivered share: 49 ± 2 (95 %) %; target 50 ± 5 pp; "
        "simulated: not a GPU figure"])
