"""The benchmark claims in the terminal (benchmarks/claims.py) and the fork-beside-reference
comparison (benchmarks/against.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import against, claims

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
    assert got[2].line().startswith("INVALID share: n/a (no interval) %; target < 1 %;")


def test_simulated_figures_are_smoke_never_met_or_missed() -> None:
    got = claims.claims({"device_env": "", "gpu_model": "NVIDIA H100", "figures": FIGURES})
    assert [c.status for c in got] == ["smoke", "smoke", "smoke", "-"]
    assert {c.card for c in got} == {claims.SIMULATED}
    assert all("MET" not in c.line() and "MISSED" not in c.line() for c in got)


def test_claims_section_follows_the_benchmark_table(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-benchmark disables itself wherever PYTEST_XDIST_WORKER is set (this suite's -n)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
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


# --- --bench-against ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_paired_ratio_is_the_geometric_mean_with_a_t_interval() -> None:
    r = against.paired_ratio([2.0, 4.0, 8.0], [1.0, 2.0, 4.0])
    assert (r.value, r.low, r.high, r.rounds) == (pytest.approx(2.0), pytest.approx(2.0),
                                                  pytest.approx(2.0), 3)
    r = against.paired_ratio([1.1, 0.9, 1.2, None], [1.0, 1.0, 1.0, 1.0])
    assert r.rounds == 3 and r.low < r.value < r.high and "t-interval" in r.method
    mean = sum(math.log(x) for x in (1.1, 0.9, 1.2)) / 3
    assert r.value == pytest.approx(math.exp(mean))


def test_paired_ratio_without_positive_values_bootstraps_or_declines() -> None:
    r = against.paired_ratio([-1.0, 3.0, 4.0], [2.0, 2.0, 2.0])
    assert r.value == pytest.approx(1.0) and "bootstrap" in r.method
    assert r.low is not None and r.low <= r.value <= r.high
    r = against.paired_ratio([1.0, 2.0], [-1.0, 0.5])
    assert r.value is None and "not positive" in r.method


def test_rounds_are_interleaved_and_paired(tmp_path: Path) -> None:
    fork, reference = types.ModuleType("fork"), types.ModuleType("reference")
    seen: list[str] = []

    def measure(r: against.Round) -> dict[str, float]:
        seen.append(r.rt.__name__)
        assert r.tmp.is_dir() and not any(r.tmp.iterdir())
        return {"cost": float(len(seen))}

    c = against.interleave(measure, fork, reference, 4, tmp_path)
    assert c.order == ["reference", "fork", "fork", "reference"] * 2
    assert seen == ["reference", "fork", "fork", "reference"] * 2
    assert c.reference["cost"] == [1.0, 4.0, 5.0, 8.0] and c.fork["cost"] == [2.0, 3.0, 6.0, 7.0]


def _bench(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:randomly",
         "-p", "no:cacheprovider", "benchmarks", "--benchmark-only", "--no-report",
         "--runtime", "reference_runtime", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")},
             "PYTHONDONTWRITEBYTECODE": "1"})   # under xdist pytest-benchmark would disable itself


def test_bench_against_reports_ratios_from_interleaved_rounds(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    run = _bench("--bench-against", "reference_runtime", "--bench-against-rounds", "2",
                 "-k", "allocator_pair", f"--benchmark-json={out}", tmp=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    [b] = json.loads(out.read_text())["benchmarks"]
    info = b["extra_info"]
    assert info["order"] == ["reference", "fork", "fork", "reference"]
    [fig] = info["figures"]
    assert fig["name"] == "allocator pair cost: antman-reference / antman-reference"
    assert fig["unit"] == "× reference" and fig["details"]["rounds"] == 2
    low, high = fig["details"]["interval"]
    assert 0 < low <= fig["value"] <= high
    assert all(v > 0 for v in fig["details"]["fork_values"] + fig["details"]["reference_values"])
    text = run.stdout
    assert text.index("Name (time in") < text.index("benchmark claims")
    assert "allocator pair cost: antman-reference / antman-reference: " in text
    assert "× reference; no target; simulated: not a GPU figure" in text


def test_bench_against_is_deselected_without_the_option_and_checked_with_it(
        tmp_path: Path) -> None:
    run = _bench("--collect-only", "-q", "-k", "against or bfc_allocate", tmp=tmp_path)
    assert run.returncode == 0 and "test_bench_bfc_allocate_free_pair" in run.stdout
    assert "test_bench_against" not in run.stdout
    run = _bench("--collect-only", "-q", "--bench-against", "no_such_runtime_module",
                 tmp=tmp_path)
    assert run.returncode == 4
    assert "--bench-against 'no_such_runtime_module': cannot import it" in run.stderr
    assert "Traceback" not in run.stderr
    run = _bench("--collect-only", "-q", "--bench-against", "reference_runtime",
                 "--bench-against-rounds", "1", tmp=tmp_path)
    assert run.returncode == 4 and "at least 2 paired rounds" in run.stderr


def test_report_marks_simulated_figures_smoke_and_judges_gpu_figures() -> None:
    from reports.render_md import bench_figures
    doc = {"benchmarks": [{"name": "sim", "extra_info": {"figures": FIGURES}},
                          {"name": "gpu", "extra_info": {**GPU_INFO, "figures": FIGURES}}]}
    got = [(r["benchmark"], r["met"]) for r in bench_figures(doc)]
    assert got == [("sim", "smoke")] * 3 + [("sim", "")] + [
        ("gpu", "met"), ("gpu", "missed"), ("gpu", "invalid"), ("gpu", "")]
