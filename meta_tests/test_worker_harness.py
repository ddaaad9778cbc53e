"""The worker harness reports a hang, a crash and garbage as TIMEOUT, CRASH and FAIL.

Runs the WORKER conformance module against each fake worker of ``meta_tests/workers`` as a
black box (``--worker-cmd`` without ``--runtime``), in subprocesses a few at a time, and
checks that every run completes with a certification report giving each test the outcome
the fake deserves, and that no process any fake started is left in the process table. Also
checks the black-box wiring with the reference worker and the NOT_SUPPORTED outcome when no
worker command exists. ``test_worker_harness_attacks.py`` measures the same attacks on the
harness in this process.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import reference_runtime
from conformance import spec

ROOT = spec.ROOT
WORKERS = ROOT / "meta_tests" / "workers"
MODULE = "conformance/test_worker_protocol.py"
RUN_TIMEOUT_S = 240          # a run that takes longer has hung: the harness failed
#: The fakes that hang are given a short silence limit (their every test waits it out); the
#: others a long one, so that a loaded machine's slow start-up is never taken for a hang.
HANG_TIMEOUT_S = 1.0
WORKER_TIMEOUT_S = 30.0
HANGING_FAKES = {"no_hello", "hang_after_hello"}
#: Conformance runs at once (each a pytest process and its workers); ANTMAN_META_HARNESS_RUNS.
CONCURRENT_RUNS = max(1, int(os.environ.get("ANTMAN_META_HARNESS_RUNS", "3")))

HELLO = "test_hello_then_one_record_per_step"
MAX_STEPS = "test_max_steps_writes_exactly_n_steps_then_exits_0"
STDIN = "test_stdin_eof_stops_the_worker_with_status_0"
STATS = "test_statistics_file_is_valid_and_updated"
KNOBS = "test_invalid_knobs_fall_back_to_their_defaults"
VALID_KNOBS = "test_valid_and_empty_knobs_write_no_line"
READER_GONE = "test_a_worker_whose_reader_went_away_exits_with_a_failure_status"
BLOCKED_WRITE = "test_sigterm_stops_a_worker_blocked_writing_a_record_with_status_0"
SAYS_WHY = "test_a_worker_whose_reader_went_away_says_why_on_stderr"
NO_VMEM = "test_a_worker_without_vmem_reports_no_host_bytes"
MID_STEP_STOP = "test_stdin_eof_during_a_step_writes_that_steps_record"
#: Read the hello record and two steps only: a fake that fails later passes them.
POLL = "test_poll_interval_knob_beyond_60_s_is_not_in_force"
STATED = "test_hello_states_the_knobs_in_effect"
POLL_60 = "test_poll_interval_knob_up_to_60_s_is_valid_and_stated_as_requested"
STEP_BOUND = "test_a_step_ms_beyond_an_hour_falls_back_to_the_default"

#: fake -> (outcome of every test, {test: other outcome}, text every non-PASS message has)
EXPECTED: dict[str, tuple[str, dict[str, str], str]] = {
    "no_hello": ("TIMEOUT", {}, "--worker-timeout"),
    "hang_after_hello": ("TIMEOUT", {}, "--worker-timeout"),
    "crash_mid_run": ("CRASH", {POLL: "PASS", STATED: "PASS", POLL_60: "PASS",
                                STEP_BOUND: "PASS"},
                      "killed by signal"),
    "garbage": ("FAIL", {POLL: "PASS", STATED: "PASS", POLL_60: "PASS", STEP_BOUND: "PASS"},
                "not JSON"),
    "missing_field": ("FAIL", {}, "device_limit"),
    "crash_on_config": ("CRASH", {HELLO: "PASS", MAX_STEPS: "PASS", STDIN: "PASS",
                                  STATS: "FAIL", KNOBS: "PASS", VALID_KNOBS: "PASS",
                                  READER_GONE: "PASS", SAYS_WHY: "PASS", NO_VMEM: "PASS",
                                  MID_STEP_STOP: "PASS", POLL: "PASS", STATED: "PASS",
                                  POLL_60: "PASS", STEP_BOUND: "PASS",
                                  BLOCKED_WRITE: "FAIL"}, ""),   # a blocked write hangs it
}
SUBSET = f"{HELLO} or {MAX_STEPS} or {STDIN}"

#: Fakes that attack the harness itself: run name -> (fake, its arguments, -k selection or
#: None, outcome of every test, text every non-PASS message has).
HARNESS_ATTACKS: dict[str, tuple[str, list[str], str | None, str, str]] = {
    "setsid_child_holds_stdout": ("setsid_child_holds_stdout", [], SUBSET, "PASS", ""),
    "setsid_orphans": ("setsid_orphans", [], SUBSET, "PASS", ""),
    "flood": ("flood", ["64"], None, "FAIL", "longer than"),
    "float_step": ("odd_numbers", ["float_step"], None, "FAIL", "not of type 'integer'"),
    "memory_limit_1e30": ("odd_numbers", ["memory_limit_1e30"], None, "FAIL",
                          "not of type 'integer'"),
    "stderr_flood": ("stderr_flood", ["16"], SUBSET, "CRASH", "exit status 3"),
}
#: Put in the command line of every process a fake starts (``FAKE_WORKER_TAG``).
TAG = f"antman-fake-descendant-{uuid.uuid4().hex}"

#: One xdist worker runs the module (its runs are started once); its first test waits for
#: every run, each bounded by RUN_TIMEOUT_S.
pytestmark = [pytest.mark.xdist_group("worker_harness"),
              pytest.mark.timeout(RUN_TIMEOUT_S * 5)]


@dataclass
class Run:
    name: str
    args: list[str]
    report_dir: Path
    output: str = ""
    returncode: int | None = None

    def report(self) -> dict:
        found = sorted(self.report_dir.glob("*/certification.json"))
        assert found, (f"{self.name}: no certification.json under {self.report_dir}; "
                       f"pytest said:\n{self.output[-3000:]}")
        return json.loads(found[-1].read_text(encoding="utf-8"))

    def outcomes(self) -> dict[str, tuple[str, str]]:
        return {t["nodeid"].rsplit("::", 1)[-1]: (t["outcome"], t.get("message") or "")
                for t in self.report()["tests"]}


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without pytest's, the suite's and the protocol's variables,
    plus ``extra``: a conformance run or worker started with it sees only what it is given."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "ANTMAN_", "GPU_CONFIG", "GPU_STATUS"))}
    env.update(extra)
    return env


def _certify(run: Run, env: dict[str, str]) -> None:
    """Run one conformance subprocess to its end, or kill its session after RUN_TIMEOUT_S."""
    cmd = [sys.executable, "-m", "pytest", *run.args, "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", "--report-dir", str(run.report_dir)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        run.output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        run.output, _ = proc.communicate()
        run.output += f"\n[the conformance run did not complete within {RUN_TIMEOUT_S} s]"
    run.returncode = proc.returncode


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Every conformance run of this module, CONCURRENT_RUNS at a time, finished."""
    base = tmp_path_factory.mktemp("worker-runs")
    out: dict[str, tuple[Run, dict[str, str]]] = {}
    for fake in EXPECTED:
        cmd = shlex.join([sys.executable, str(WORKERS / f"{fake}.py")])
        timeout = HANG_TIMEOUT_S if fake in HANGING_FAKES else WORKER_TIMEOUT_S
        out[fake] = (Run(fake, [MODULE, "--worker-cmd", cmd, "--worker-timeout", str(timeout)],
                         base / fake), clean_env(FAKE_WORKER_TAG=TAG))
    for name, (fake, args, selection, _, _) in HARNESS_ATTACKS.items():
        cmd = shlex.join([sys.executable, str(WORKERS / f"{fake}.py"), *args])
        out[name] = (Run(name, [MODULE, "--worker-cmd", cmd, "--worker-timeout",
                                str(WORKER_TIMEOUT_S),
                                *(["-k", selection] if selection else [])], base / name),
                     clean_env(FAKE_WORKER_TAG=TAG))
    reference = shlex.join(["env", "OPENBLAS_NUM_THREADS=1", sys.executable, "-m",
                            "reference_runtime.worker"])
    out["reference"] = (Run("reference", [MODULE, "--worker-cmd", reference, "-k",
                                          f"{HELLO} or {STDIN} or {MAX_STEPS}"],
                            base / "reference"),
                        clean_env(ANTMAN_WORKER_NAME="reference via worker"))
    out["no_command"] = (Run("no_command", [MODULE], base / "no_command"),
                         clean_env(ANTMAN_RUNTIME="conformance.blackbox"))
    try:
        with concurrent.futures.ThreadPoolExecutor(CONCURRENT_RUNS) as pool:
            for future in [pool.submit(_certify, run, env) for run, env in out.values()]:
                future.result()
        yield {name: run for name, (run, _) in out.items()}
    finally:
        for pid in _tagged_processes(TAG):        # leave the machine clean whatever failed
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def survivors(runs: dict[str, Run]) -> list[int]:
    """Processes started by the fakes that are still alive once every run has completed."""
    return _tagged_processes(TAG)


def _tagged_processes(tag: str) -> list[int]:
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if tag.encode() in f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("fake", sorted(EXPECTED))
def test_fake_worker_outcomes(runs: dict[str, Run], fake: str) -> None:
    run = runs[fake]
    default, overrides, text = EXPECTED[fake]
    got = run.outcomes()
    assert len(got) >= 11, f"{fake}: only {sorted(got)} reported:\n{run.output[-2000:]}"
    wrong = {name: outcome for name, (outcome, _) in got.items()
             if outcome != overrides.get(name, overrides.get(name.split("[")[0], default))}
    assert not wrong, (f"{fake}: unexpected outcomes {wrong} (expected {default} except "
                       f"{overrides})\n{run.output[-3000:]}")
    for name, (outcome, message) in got.items():
        if outcome != "PASS":
            assert text in message, f"{fake}: {name} message lacks {text!r}: {message[:500]}"
    assert run.returncode == 1, f"{fake}: pytest exit status {run.returncode}"


@pytest.mark.parametrize("name", sorted(HARNESS_ATTACKS))
def test_harness_attack_outcomes(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    _, _, selection, default, text = HARNESS_ATTACKS[name]
    got = run.outcomes()
    assert len(got) >= (3 if selection else 11), \
        f"{name}: only {sorted(got)} reported:\n{run.output[-2000:]}"
    wrong = {test: outcome for test, (outcome, _) in got.items() if outcome != default}
    assert not wrong, f"{name}: unexpected outcomes {wrong} (expected {default})\n" \
                      f"{run.output[-3000:]}"
    for test, (outcome, message) in got.items():
        if outcome != "PASS":
            assert text in message, f"{name}: {test} message lacks {text!r}: {message[:500]}"
            assert len(message) < 20_000, f"{name}: {test} message is {len(message)} long"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to read the process table")
def test_no_process_of_any_fake_survives(survivors: list[int]) -> None:
    assert survivors == [], f"processes started by fake workers outlived their runs: {survivors}"


def test_black_box_identity_and_target_come_from_the_hello_record(runs: dict[str, Run]) -> None:
    fake = runs["crash_mid_run"].report()      # hello read; no ANTMAN_WORKER_* variable set
    assert (fake["runtime"]["name"], fake["runtime"]["version"]) == ("fake-worker", "0")
    assert fake["execution_target"]["worker_devices"][0]["pci_bus_id"] == "3b:00.0"
    for name in ("no_hello", "no_command"):     # no hello record: nothing is known
        report = runs[name].report()
        assert report["runtime"]["worker_hello"] is None, report["runtime"]
        assert (report["runtime"]["name"], report["runtime"]["version"]) == (
            "black-box worker", "unknown"), report["runtime"]
        assert report["execution_target"]["kind"] == "unknown", report["execution_target"]


def test_garbage_failure_quotes_the_offending_line(runs: dict[str, Run]) -> None:
    for outcome, message in runs["garbage"].outcomes().values():
        if outcome != "PASS":
            assert "I tensorflow: step done, loss=0.5" in message, message[:500]


def test_reference_worker_passes_as_a_black_box(runs: dict[str, Run]) -> None:
    run = runs["reference"]
    report = run.report()
    rt, target = report["runtime"], report["execution_target"]
    # The name from ANTMAN_WORKER_NAME; the version and spec version from the hello record.
    assert rt["name"] == "reference via worker", rt
    hello = rt["worker_hello"]
    assert hello["runtime"] == {"name": reference_runtime.NAME,
                                "version": reference_runtime.VERSION}, rt
    assert (rt["version"], rt["spec_version"]) == (reference_runtime.VERSION,
                                                   reference_runtime.SPEC_VERSION), rt
    assert sorted(rt["capabilities"]) == ["worker"], rt
    # the reference worker says its GPU is the simulated device (an extra hello member)
    assert (target["source"], target["kind"]) == ("worker", "simulated"), target
    assert target["worker_devices"] == [
        {k: d[k] for k in ("name", "pci_bus_id", "memory_limit")} for d in hello["devices"]], target
    got = run.outcomes()
    assert set(got.values()) and all(o == "PASS" for o, _ in got.values()), \
        f"{got}\n{run.output[-3000:]}"
    assert run.returncode == 0, run.output[-3000:]


def test_no_worker_command_is_not_supported(runs: dict[str, Run]) -> None:
    got = runs["no_command"].outcomes()
    assert got and all(o == "NOT_SUPPORTED" for o, _ in got.values()), got
    assert all("WORKER_COMMAND" in m for _, m in got.values()), got
