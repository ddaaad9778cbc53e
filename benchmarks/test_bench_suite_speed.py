"""Suite speed: wall time of the whole CPU conformance suite, with and without xdist.

Runs ``python -m pytest conformance -q --no-report -p no:randomly`` in a subprocess, once with
``-n 2`` (pytest-xdist, two workers: the CI machine has 2 cores) and once with
``-p no:xdist``, on the simulated device (``ANTMAN_DEVICE=sim``), and records each wall time.
Target: under 60 s with xdist on the 2-core machine.

It takes minutes, so it carries the ``suite_speed`` marker and is deselected unless selected
explicitly: ``tox -e bench-suite``, ``pytest -p no:xdist benchmarks -m suite_speed
--benchmark-only``, or ``ANTMAN_BENCH_SUITE=1``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.bench_support import Figure, one_shot, record_figures

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 60.0
TIMEOUT_S = 1800

pytestmark = [pytest.mark.suite_speed, pytest.mark.timeout(2 * TIMEOUT_S + 60)]

MODES = {"xdist -n 2": ["-n", "2"], "no xdist": ["-p", "no:xdist"]}


def run_suite(extra: list[str]) -> dict:
    env = dict(os.environ, ANTMAN_DEVICE="sim", PYTHONDONTWRITEBYTECODE="1")
    for name in ("GPU_CONFIG_FILE", "GPU_STATUS_FILE", "TF_FORCE_GPU_ALLOW_GROWTH",
                 "TF_GPU_VMEM"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "--no-report",
           "-p", "no:randomly", *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    wall = time.perf_counter() - start
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|"
                                                r"xfailed|deselected)", tail)}
    return {"command": " ".join(cmd[2:]), "wall_s": wall, "returncode": done.returncode,
            "summary": tail, "counts": counts, "output_tail": done.stdout[-1500:]}


def test_bench_conformance_suite_wall_time(bench, report_artifacts) -> None:
    results: dict[str, dict] = {}
    one_shot(bench, lambda: results.update({m: run_suite(a) for m, a in MODES.items()}))
    xd, serial = results["xdist -n 2"], results["no xdist"]
    figures = [
        Figure("CPU conformance suite wall time, xdist -n 2", xd["wall_s"], "s",
               f"< {TARGET_S:.0f} s", xd["wall_s"] < TARGET_S,
               f"subprocess `{xd['command']}`, ANTMAN_DEVICE=sim; {xd['summary']}",
               {"returncode": xd["returncode"], "counts": xd["counts"]}),
        Figure("CPU conformance suite wall time, without xdist", serial["wall_s"], "s", "",
               None, f"subprocess `{serial['command']}`; {serial['summary']}",
               {"returncode": serial["returncode"], "counts": serial["counts"],
                "speedup": serial["wall_s"] / xd["wall_s"]}),
    ]
    record_figures(bench, figures, host_cpu=True)
    report_artifacts.add("suite_speed", {
        "categories": list(results), "series": {"wall time (s)": [
            round(r["wall_s"], 2) for r in results.values()]},
        "targets": [TARGET_S, None], "ylabel": "s",
        "title": f"CPU conformance suite wall time ({os.cpu_count()} CPUs)"})
    print("\n" + "; ".join(f"{m}: {r['wall_s']:.1f} s ({r['summary']})"
                           for m, r in results.items()))
    for mode, r in results.items():
        # Failing conformance tests still give a wall time; a run that never got to run
        # its tests (usage error, internal error, collection failure) does not.
        assert r["returncode"] in (0, 1) and r["counts"].get("passed", 0) > 0, (
            f"{mode}: the suite did not run: exit {r['returncode']}\n{r['output_tail']}")
