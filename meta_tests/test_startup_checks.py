"""What a run relies on is checked before it starts (SPEC.md API-1, section 7): one short
usage error (exit status 4), no report written and ``latest`` untouched; and a run that
requires a GPU cannot certify without one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import spec
from meta_tests.test_reports import PASSED, _build, _data, _record
from reports import model
from meta_tests.child_env import python_path

ROOT = spec.ROOT
SPEC_VERSION = spec.spec_version()
USAGE_ERROR = int(pytest.ExitCode.USAGE_ERROR)


def certify(tmp_path: Path, *args: str, modules: tuple[str, ...] = ("conformance/test_api.py",)
            ) -> subprocess.CompletedProcess[str]:
    """A conformance run in a subprocess with ``tmp_path`` on PYTHONPATH and as report dir."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    env["PYTHONPATH"] = python_path(tmp_path, ROOT)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp_path / "tmp")          # what the run leaves in the temp folder
    return subprocess.run([sys.executable, "-m", "pytest", *modules, "-p", "no:cacheprovider",
                           "-q", "--report-dir", str(tmp_path / "out"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def runtime_source(caps: str = '"bfc"', *, names: bool = True, extra: str = "") -> str:
    return textwrap.dedent(f"""
        from conformance.spec import CAPABILITY_NAMES
        NAME, VERSION, SPEC_VERSION = "fake", "1", {SPEC_VERSION!r}
        CAPABILITIES = frozenset({{{caps}}})
        if {names}:
            globals().update({{n: object() for c in CAPABILITIES
                              for n in CAPABILITY_NAMES.get(c, ())}})
        {extra}
    """)


@pytest.fixture
def earlier_run(tmp_path: Path) -> Path:
    """A report folder and ``latest`` from an earlier run, which a refused run must keep."""
    old = tmp_path / "out" / "20260101T000000Z-earlier-1"
    old.mkdir(parents=True)
    (old / "certification.json").write_text("{}")
    (tmp_path / "out" / "latest").symlink_to(old.name)
    return old


def assert_refused(done: subprocess.CompletedProcess[str], tmp_path: Path, *needles: str
                   ) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == USAGE_ERROR, f"exit {done.returncode}, expected 4:\n{out[-3000:]}"
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, f"a usage error is one line, got {len(errors)}:\n{out[-3000:]}"
    assert len(done.stdout.splitlines()) <= 20, f"the run printed:\n{out[-3000:]}"
    for needle in needles:
        assert needle in done.stderr, f"{needle!r} not in the error:\n{done.stderr}"
    folders = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert folders == ["20260101T000000Z-earlier-1", "latest"], folders
    assert os.readlink(tmp_path / "out" / "latest") == "20260101T000000Z-earlier-1"
    left = sorted(p.name for p in (tmp_path / "tmp").iterdir())
    assert left == [], f"a run stopped at start-up left temporary files: {left}"


@pytest.mark.parametrize("module, source, needles", [
    ("does_not_exist", None, ["cannot import runtime module 'does_not_exist'",
                              "ModuleNotFoundError"]),
    ("fake_syntax", "NAME = (", ["cannot import runtime module 'fake_syntax': importing it "
                                 "raised SyntaxError"]),
    ("fake_import_error", "import no_such_dependency_here",
     ["importing it raised ModuleNotFoundError: No module named 'no_such_dependency_here'"]),
    ("fake_no_caps", 'NAME, VERSION, SPEC_VERSION = "f", "1", "x"', ["lacks CAPABILITIES"]),
    ("fake_unknown_cap", runtime_source('"bfc", "teleport"'), ["unknown capabilities",
                                                               "teleport"]),
    ("fake_missing_names", runtime_source('"bfc"', names=False),
     ["declares capability 'bfc' but lacks", "BFCAllocator"]),
    ("fake_missing_many", runtime_source('"bfc", "vmem", "workload"', names=False),
     ["declares capability 'bfc' but lacks", "BFCAllocator",
      "declares capability 'vmem' but lacks GPUVMemAllocator, maybe_create_gpu_vmem_allocator",
      "declares capability 'workload' but lacks MLPWorkload",
      "no submodule fake_missing_many.workload"]),
    ("fake_module_workload", runtime_source('"workload"'),
     ["no submodule fake_module_workload.workload", "python -m fake_module_workload.workload"]),
    ("fake_bad_worker", runtime_source('"worker"', extra='WORKER_COMMAND = ["/nonexistent/w"]'),
     ["WORKER_COMMAND: executable '/nonexistent/w' not found"]),
])
def test_a_runtime_that_cannot_be_certified_is_refused_before_any_test(
        tmp_path: Path, earlier_run: Path, module: str, source: str | None,
        needles: list[str]) -> None:
    if source is not None:
        (tmp_path / f"{module}.py").write_text(source)
    assert_refused(certify(tmp_path, "--runtime", module), tmp_path, *needles)


@pytest.mark.parametrize("args, needles", [
    (["--worker-cmd", "/nonexistent/worker --flag"],
     ["--worker-cmd: executable '/nonexistent/worker' not found"]),
    (["--worker-cmd", "no-such-program-on-path"], ["'no-such-program-on-path' not found on PATH"]),
    (["--expectations", "missing.toml"], ["cannot read expectations file"]),
    (["-p", "no:timeout"], ["pytest-timeout", "-p no:timeout"]),
    (["--timeout", "0"], ["per-test time limit"]),
])
def test_a_setup_that_cannot_keep_its_guarantees_is_refused(
        tmp_path: Path, earlier_run: Path, args: list[str], needles: list[str]) -> None:
    assert_refused(certify(tmp_path, *args), tmp_path, *needles)


def test_a_suite_commit_that_names_no_commit_is_refused(
        tmp_path: Path, earlier_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An abbreviated hash would be ignored and the checkout's commit named instead."""
    monkeypatch.setenv("ANTMAN_SUITE_COMMIT", "b58c0ef")
    assert_refused(certify(tmp_path), tmp_path, "ANTMAN_SUITE_COMMIT must be a full commit "
                                                "hash", "'b58c0ef'")


def test_a_valid_setup_still_runs_and_reports(tmp_path: Path) -> None:
    (tmp_path / "fake_ok").mkdir()
    (tmp_path / "fake_ok" / "__init__.py").write_text(runtime_source('"worker"', extra=(
        f'WORKER_COMMAND = [{sys.executable!r}, "-m", "fake_ok.worker"]')))
    done = certify(tmp_path, "--runtime", "fake_ok")
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "out" / "latest-partial" / "certification.json").is_file()
    assert not (tmp_path / "out" / "latest").exists(), "one module is not a complete run"


# --- the GPU gate ------------------------------------------------------------------------

def test_require_gpu_makes_the_gpu_clauses_required_whatever_the_target(tmp_path: Path) -> None:
    ok = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED)]
    doc = _build(_data(tmp_path, ok))
    assert doc["verdict"]["status"] == model.CERTIFIED       # the GPU clause API-7 not required
    doc = _build(_data(tmp_path, ok, require_gpu=True))
    v = doc["verdict"]
    assert v["status"] == model.NOT_CERTIFIED
    assert [r["code"] for r in v["reasons"]][:2] == ["gpu-required", "gpu-required"]
    assert "no usable NVIDIA GPU" in v["reasons"][0]["message"]
    assert "does not declare the cuda capability" in v["reasons"][1]["message"]
    assert "API-7" in doc["mustpass"]["required"]
    # On a GPU runner, with a runtime that declares cuda, the gate itself says nothing.
    gpu = [*ok, _record("t::g", ["API-7"], PASSED)]
    doc = _build(_data(tmp_path, gpu, gpu="NVIDIA H200", caps=("bfc", "cuda"), require_gpu=True))
    assert doc["verdict"]["status"] == model.CERTIFIED, doc["verdict"]


#: Hosts without a usable GPU: (pynvml state or None for no pynvml, CuPy present, needles).
NO_GPU_HOSTS = {
    "no pynvml": (None, False, ["no usable NVIDIA GPU", "pynvml"]),
    "NVML without a driver": ({"init_error": "Driver Not Loaded"}, True,
                              ["no usable NVIDIA GPU", "nvmlInit failed: Driver Not Loaded"]),
    "NVML sees no GPU": ({"gpus": 0}, True, ["no usable NVIDIA GPU", "NVML reports no GPU"]),
    "no CuPy": ({}, False, ["no usable NVIDIA GPU", "import cupy failed", "no CuPy"]),
}


def gpu_host(tmp_path: Path, nvml: dict | None, cupy: bool) -> dict[str, str]:
    """PYTHONPATH entries and variables of a host with a stand-in NVML (or none) and CuPy (a
    stand-in with one GPU, or one whose import fails)."""
    from meta_tests import fake_pynvml
    from meta_tests.test_host_independent_verdicts import ONE_GPU_CUPY
    host = tmp_path / "host"
    host.mkdir()
    if nvml is None:
        (host / "pynvml.py").write_text("raise ImportError('no nvidia-ml-py here')\n")
    else:
        fake_pynvml.install(host)
        fake_pynvml.write_state(tmp_path / "nvml.json", **nvml)
    (host / "cupy.py").write_text(ONE_GPU_CUPY if cupy else "raise ImportError('no CuPy')\n")
    return {"host": str(host), "FAKE_NVML_STATE": str(tmp_path / "nvml.json")}


def certify_on(tmp_path: Path, host: dict[str, str], *args: str,
               modules: tuple[str, ...] = ("conformance/test_api.py",)
               ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    env["PYTHONPATH"] = python_path(host["host"], tmp_path, ROOT)
    env["FAKE_NVML_STATE"] = host["FAKE_NVML_STATE"]
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp_path / "tmp")          # what the run leaves in the temp folder
    return subprocess.run([sys.executable, "-m", "pytest", *modules, "-p", "no:cacheprovider",
                           "-q", "--report-dir", str(tmp_path / "out"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("host", sorted(NO_GPU_HOSTS))
def test_require_gpu_without_a_usable_gpu_stops_before_any_test(tmp_path: Path, earlier_run: Path,
                                                               host: str) -> None:
    nvml, cupy, needles = NO_GPU_HOSTS[host]
    done = certify_on(tmp_path, gpu_host(tmp_path, nvml, cupy), "--require-gpu",
                      "--require-certified",
                      modules=("conformance/test_gpu.py", "conformance/test_api.py"))
    assert_refused(done, tmp_path, *needles)
    assert "passed" not in done.stdout and "error" not in done.stdout.lower(), done.stdout


def test_require_gpu_with_a_usable_gpu_runs_and_counts_the_gpu_clauses_as_must_pass(
        tmp_path: Path) -> None:
    done = certify_on(tmp_path, gpu_host(tmp_path, {}, True), "--require-gpu")
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1), out[-3000:]
    import json
    doc = json.loads((tmp_path / "out" / "latest-partial" / "certification.json").read_text())
    required = set(doc["mustpass"]["required"])
    gpu_clauses = {f"GPU-{i}" for i in range(1, 13)}
    assert gpu_clauses <= required, sorted(required)
    assert doc["summary"]["must_pass"]["total"] == len(required), doc["summary"]["must_pass"]
    line = next(x for x in done.stdout.splitlines() if x.startswith("must-pass clauses: "))
    assert line.startswith(f"must-pass clauses: {len(required)} "), line


def test_require_gpu_counts_the_gpu_clauses_whatever_the_capabilities(tmp_path: Path) -> None:
    listing = "profile minimal: bfc\n[all]\nAPI-1\nAPI-2\n[requires cuda gpu-target]\nAPI-7\n"
    ok = [_record("t::a", ["API-1"], PASSED), _record("t::b", ["API-2"], PASSED)]
    for gpu in (None, "NVIDIA H100"):
        doc = _build(_data(tmp_path, ok, gpu=gpu, caps=("bfc",), listing=listing,
                           require_gpu=True))
        flags = {c["id"]: c["must_pass"] for c in doc["clauses"]}
        assert flags["API-7"] is True, (gpu, flags)
        assert "API-7" in doc["mustpass"]["required"]
        assert doc["summary"]["must_pass"]["total"] == 3, doc["summary"]["must_pass"]
        from reports import writer
        props = dict(writer.junit_properties(doc))
        assert props["antman:mustpass_clauses"].startswith("3 ("), props
        assert doc["verdict"]["status"] == model.NOT_CERTIFIED, props
    doc = _build(_data(tmp_path, ok, caps=("bfc",), listing=listing))
    assert {c["id"]: c["must_pass"] for c in doc["clauses"]}["API-7"] is False


def test_a_report_folder_outside_the_suite_as_a_separate_argument_under_xdist_is_refused(
        tmp_path: Path) -> None:
    """Under xdist every worker would take the folder for a test path and stop: said at once."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_RUNTIME"))}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pytest", "-o", "testpaths=conformance",
                           "-n", "1", "-p", "no:cacheprovider", "-q", "-k", "x" * 5000,
                           "--report-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--report-dir={out}" in lines[0], done.stderr
    assert not out.exists(), "a refused run wrote into its report folder"
    # a test path of the suite among the arguments: the workers find the suite, it runs
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_clock.py", "-n", "1",
                           "-p", "no:cacheprovider", "-q", "--report-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and (out / "latest-partial" / "junit.xml").is_file(), \
        done.stdout[-2000:] + done.stderr[-2000:]
