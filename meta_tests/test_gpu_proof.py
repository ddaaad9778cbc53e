"""``.ci/gpu-proof``: each line of its summary is the run's own report, never one an earlier
run left at ``reports/out/latest``; an env named twice runs twice, each with its folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from conformance import spec

# A stand-in tox: `-e good` writes a CERTIFIED report and points `latest` at it; any other env
# writes nothing (a run that stopped before its report).
FAKE_TOX = """#!/usr/bin/env bash
env=$2
[ "$env" = good ] || exit 3
dir=reports/out/run-$RANDOM$RANDOM
mkdir -p "$dir"
printf '{"verdict": {"status": "CERTIFIED"}, "clauses": [], "tests": [],
 "execution_target": {"devices": [], "model": "sim"}}' > "$dir/certification.json"
ln -sfn "$(basename "$dir")" reports/out/latest.tmp && mv -T reports/out/latest.tmp reports/out/latest
"""


def proof(tmp_path: Path, *envs: str) -> tuple[int, list[list[str]], Path]:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(spec.ROOT / ".ci" / "gpu-proof", repo / ".ci" / "gpu-proof")
    stale = repo / "reports" / "out" / "stale"
    stale.mkdir(parents=True)
    (stale / "certification.json").write_text(json.dumps(
        {"verdict": {"status": "CERTIFIED"}, "clauses": [], "tests": [],
         "execution_target": {"devices": [], "model": "stale"}}))
    (repo / "reports" / "out" / "latest").symlink_to("stale")
    tox = tmp_path / "tox"
    tox.write_text(FAKE_TOX)
    tox.chmod(0o755)
    out = tmp_path / "proof"
    done = subprocess.run(["bash", str(repo / ".ci" / "gpu-proof"), str(out), "1", *envs],
                          env={**os.environ, "TOX": str(tox)}, cwd=repo,
                          capture_output=True, text=True, timeout=120)
    rows = [line.split("\t") for line in (out / "summary.tsv").read_text().splitlines()[1:]]
    return done.returncode, rows, out


def test_a_run_that_wrote_no_report_is_not_given_the_previous_one(tmp_path: Path) -> None:
    rc, rows, out = proof(tmp_path)                      # `-e gpu`: the stand-in writes none
    assert rows[0][:4] == ["gpu", "1", "3", "NO REPORT (FileNotFoundError)"], rows
    assert not (out / "gpu-1" / "certification.json").exists()
    assert rc == 1, "a proof whose run wrote no report exited 0"


def test_an_env_named_twice_runs_twice_with_its_own_folders(tmp_path: Path) -> None:
    rc, rows, out = proof(tmp_path, "good", "good")
    assert [r[:4] for r in rows[1:]] == [["good", "1", "0", "CERTIFIED"],
                                         ["good", "2", "0", "CERTIFIED"]], rows
    assert (out / "good-1" / "certification.json").exists()
    assert (out / "good-2" / "certification.json").exists()
    assert rc == 1, "the gpu run wrote no report, yet the proof exited 0"
