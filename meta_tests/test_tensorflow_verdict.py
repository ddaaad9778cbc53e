"""Stock TensorFlow, certified through the TensorFlow worker, is NOT CERTIFIED, clause by clause.

Proves that the suite tells a real third-party runtime that does not conform from the
reference that does: stock TensorFlow has none of AntMan's changes, so the black-box run
through ``conformance.workers.tf_worker`` must fail the WORKER clauses of the behaviour it
lacks (no statistics file, no throttling, no suspension), report the clauses that need a GPU
device as NOT_SUPPORTED on a machine where it builds none (or FAIL where it builds one but
applies no limit), pass the clauses it meets (the protocol, the knobs, termination), and
explain every non-pass.

The certification run is the one of ``tox -e certify-tf`` when ``ANTMAN_TF_REPORT_DIR`` names
its ``--report-dir``; otherwise this module runs it itself in a subprocess. Marked
``tensorflow``: it needs TensorFlow in this interpreter, so the ``tests`` environment
deselects it (``-m "not tensorflow"``) and ``certify-tf`` runs it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from conformance import spec
from meta_tests.tensorflow_runs import latest_run_folder, require_tensorflow
from meta_tests.test_worker_harness import clean_env
from reports.writer import validation_errors

RUN_TIMEOUT_S = 600
# The first test's setup may run the whole certification (RUN_TIMEOUT_S).
pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(RUN_TIMEOUT_S + 60)]

ROOT = spec.ROOT
TOX_ENV = "certify-tf"
REPORT_DIR_ENV = "ANTMAN_TF_REPORT_DIR"
WORKER_CMD = [sys.executable, "-m", "conformance.workers.tf_worker"]
WORKER_RUN_TIMEOUT_S = 120
TRAIN_STEPS = 40

#: What stock TensorFlow does, per WORKER clause: (outcome, text its tests' reasons contain).
#: Clauses that need a GPU device depend on whether the build created one (see ``expected``).
MEETS = {
    "WORKER-1": ("PASS", ""),     # starts with the protocol's environment, hello in time
    "WORKER-2": ("PASS", ""),     # well-formed records, one per step
    "WORKER-3": ("PASS", ""),     # knobs: MAX_STEPS, a step of at least STEP_MS / 4
    "WORKER-4": ("PASS", ""),     # stops on stdin EOF and SIGTERM with status 0
}
LACKS = {
    "WORKER-9": ("FAIL", "GPU_STATUS_FILE"),     # writes no statistics file
    "WORKER-10": ("FAIL", "perfControl="),       # the step period ignores perfControl
    "WORKER-11": ("FAIL", "perfControl=0"),      # perfControl 0 does not suspend
}
NEEDS_DEVICE = ("WORKER-5", "WORKER-6", "WORKER-7", "WORKER-8", "WORKER-12")
NO_DEVICE = ("NOT_SUPPORTED", "no GPU device")
#: Stock TensorFlow with a GPU: no limit is ever applied, and TensorFlow 2 cannot report it.
WITH_DEVICE = ("FAIL", "device_limit")
STOCK_HINT = ("this pins stock TensorFlow's verdict; certify a TensorFlow fork with "
              "`tox -e certify -- --worker-cmd ...` (README)")


def tensorflow_version() -> str | None:
    """The installed TensorFlow distribution's version, without importing TensorFlow."""
    for dist in ("tensorflow-cpu", "tensorflow", "tensorflow-gpu", "tf-nightly"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None




@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the certification run of stock TensorFlow (preceding, or run here)."""
    require_tensorflow(TOX_ENV, REPORT_DIR_ENV)
    given = os.environ.get(REPORT_DIR_ENV)
    if given:
        folder = latest_run_folder(Path(given))
        assert (folder / "certification.json").is_file(), (
            f"{REPORT_DIR_ENV}={given}: no certification.json in {folder}; did the "
            f"certification command of certify-tf run?")
        return folder
    report_dir = tmp_path_factory.mktemp("tf-certification")
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "conformance", "-q",
           "-p", "no:cacheprovider", "-p", "no:randomly",
           "--worker-cmd", shlex.join(WORKER_CMD), "--report-dir", str(report_dir)]
    env = clean_env()       # no ANTMAN_WORKER_*: the report names TensorFlow from its hello
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the certification of stock TensorFlow did not complete within "
                    f"{RUN_TIMEOUT_S} s: {shlex.join(cmd)}\n{str(exc.stdout)[-3000:]}")
    assert proc.returncode == 1, (f"certification of stock TensorFlow: pytest exit status "
                                  f"{proc.returncode}, expected 1 (tests failed):\n"
                                  f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return latest_run_folder(report_dir)


@pytest.fixture(scope="module")
def report(run_folder: Path) -> dict[str, Any]:
    return json.loads((run_folder / "certification.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def hello(report: dict[str, Any]) -> dict[str, Any]:
    """The worker's hello record, as certification.json keeps it (``runtime.worker_hello``)."""
    found = report["runtime"].get("worker_hello")
    assert found, (f"certification.json keeps no worker hello record: did any WORKER test "
                   f"start the worker? {report['runtime']}")
    differing = [w["message"] for w in report["verdict"]["warnings"]
                 if w["code"] == "worker-hello-inconsistent"]
    assert not differing, f"the worker named different runtimes or devices: {differing}"
    return found


@pytest.fixture(scope="module")
def expected(hello: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Per WORKER clause: (outcome, text in its reasons) stock TensorFlow deserves here."""
    device = WITH_DEVICE if hello["devices"] else NO_DEVICE
    return {**MEETS, **LACKS, **{cid: device for cid in NEEDS_DEVICE}}


def worker_clauses(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["clauses"] if c["area"] == "WORKER"}


def clause_tests(report: dict[str, Any], clause: str) -> list[dict[str, Any]]:
    return [t for t in report["tests"] if clause in t["clauses"]]


def test_report_is_about_this_tensorflow(report: dict[str, Any],
                                         hello: dict[str, Any]) -> None:
    version = tensorflow_version()
    rt = report["runtime"]
    assert hello["runtime"] == {"name": "tensorflow", "version": version}, (
        f"the run's worker reported {hello['runtime']}, expected tensorflow {version} (the "
        f"TensorFlow installed here)")
    assert (rt["name"], rt["version"]) == ("tensorflow", version), (
        f"the report names {rt['name']} {rt['version']}, expected the hello record's "
        f"tensorflow {version}")
    assert rt["module"] == "conformance.blackbox", rt
    assert rt["capabilities"] == ["worker"], rt
    assert "conformance.workers.tf_worker" in (rt.get("worker_cmd") or ""), rt


def test_execution_target_is_what_the_worker_reports(report: dict[str, Any],
                                                      hello: dict[str, Any]) -> None:
    target = report["execution_target"]
    assert target["source"] == "worker", target
    assert target["worker_devices"] == [
        {k: d[k] for k in ("name", "pci_bus_id", "memory_limit")} for d in hello["devices"]], target
    if hello["devices"]:   # a GPU when NVML identifies it, else an unidentified device
        assert target["kind"] in ("gpu", "unknown"), target
    else:
        assert (target["kind"], target["model"], target["devices"]) == ("cpu", None, []), target
        assert "lists no GPU device" in target["note"], target


def test_report_is_valid_against_the_schema(report: dict[str, Any]) -> None:
    errors = validation_errors(report)
    assert not errors, "; ".join(errors[:5])


def test_stock_tensorflow_is_not_certified_for_its_worker_clauses(
        report: dict[str, Any], expected: dict[str, tuple[str, str]]) -> None:
    verdict = report["verdict"]
    assert verdict["status"] == "NOT CERTIFIED", f"{verdict}\n{STOCK_HINT}"
    blocking = {cid for cid, (outcome, _) in expected.items() if outcome != "PASS"}
    named = {cid for r in verdict["reasons"] for cid in r["clauses"]}
    assert named == blocking, (
        f"the verdict's reasons name {sorted(named)}, expected exactly the WORKER clauses "
        f"stock TensorFlow does not meet {sorted(blocking)}: {verdict['reasons']}")
    codes = {r["code"] for r in verdict["reasons"]}
    assert codes <= {"mustpass-fail", "mustpass-not-supported"}, (
        f"stock TensorFlow must be rejected for its clauses, not for {codes}: "
        f"{verdict['reasons']}")


def test_worker_clause_outcomes_are_what_stock_tensorflow_does(
        report: dict[str, Any], expected: dict[str, tuple[str, str]]) -> None:
    got = {cid: c["outcome"] for cid, c in worker_clauses(report).items()}
    want = {cid: outcome for cid, (outcome, _) in expected.items()}
    wrong = {cid: f"{got.get(cid)} (expected {want[cid]}): "
             + "; ".join((t.get("message") or "")[:200] for t in clause_tests(report, cid)
                         if t["outcome"] != "PASS")
             for cid in sorted(want, key=lambda c: int(c.split("-")[1]))
             if got.get(cid) != want[cid]}
    assert set(got) == set(want), f"WORKER clauses {sorted(got)} != pinned {sorted(want)}"
    assert not wrong, "\n".join(f"{k}: {v}" for k, v in wrong.items()) + f"\n{STOCK_HINT}"


def test_every_non_pass_names_its_reason(report: dict[str, Any],
                                         expected: dict[str, tuple[str, str]]) -> None:
    for cid, (outcome, text) in expected.items():
        if outcome == "PASS":
            continue
        tests = [t for t in clause_tests(report, cid) if t["outcome"] != "PASS"]
        assert tests, f"{cid} is {outcome} but none of its tests failed"
        for t in tests:
            message = t.get("message") or ""
            assert message.strip(), f"{t['nodeid']} is {t['outcome']} without a reason"
            assert text in message, (f"{t['nodeid']} ({cid}): reason lacks {text!r}: "
                                     f"{message[:500]}")
            assert t["outcome"] in ("FAIL", "NOT_SUPPORTED"), (
                f"{t['nodeid']}: {t['outcome']}: stock TensorFlow's worker hung or crashed, "
                f"which says nothing about the clause: {message[:500]}")


def test_tf_worker_trains_and_speaks_the_protocol(tmp_path: Path) -> None:
    """Run the worker directly: a hello, then TRAIN_STEPS steps whose loss falls, exit 0."""
    require_tensorflow(TOX_ENV, REPORT_DIR_ENV)
    config, status = tmp_path / "sche2pai.json", tmp_path / "pai2sche.json"
    config.write_text('{"name": "antman-conformance", "perfControl": 100}', encoding="utf-8")
    env = clean_env(GPU_CONFIG_FILE=str(config), GPU_STATUS_FILE=str(status),
                    TF_GPU_VMEM="true", TF_CUDA_HOST_MEM_LIMIT_IN_MB="1536",
                    ANTMAN_WORKER_STEP_MS="20", ANTMAN_WORKER_MAX_STEPS=str(TRAIN_STEPS),
                    ANTMAN_WORKER_SEED="0")
    stderr = tmp_path / "worker.stderr"
    with open(stderr, "wb") as err_file:
        # Standard input stays open: its end of file would stop the worker (WORKER-4).
        proc = subprocess.Popen(WORKER_CMD, cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err_file, text=True)
        watchdog = threading.Timer(WORKER_RUN_TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            out = proc.stdout.read()
            rc = proc.wait()
        finally:
            watchdog.cancel()
            proc.kill()
            proc.stdin.close()
            proc.stdout.close()
    err = stderr.read_text(errors="replace")
    assert rc == 0, f"tf_worker exit status {rc}:\n{err[-3000:]}"
    records = [json.loads(line) for line in out.splitlines()]
    hello, steps = records[0], records[1:]
    assert hello["type"] == "hello" and hello["runtime"] == {
        "name": "tensorflow", "version": tensorflow_version()}, hello
    assert hello["workload"]["api"].startswith("tf.compat.v1.Session"), hello["workload"]
    assert [s["step"] for s in steps] == list(range(TRAIN_STEPS)), out[-2000:]
    losses = [s["loss"] for s in steps]
    assert all(isinstance(x, float) and math.isfinite(x) for x in losses), losses
    first, last = losses[:10], losses[-10:]
    assert sum(last) < 0.9 * sum(first), f"the loss does not fall: {losses}"
    if not hello["devices"]:
        assert all(s[k] is None for s in steps for k in
                   ("device_bytes_in_use", "host_bytes_in_use", "device_limit")), steps[0]
    assert not status.exists(), "the worker (or stock TensorFlow) wrote GPU_STATUS_FILE"
