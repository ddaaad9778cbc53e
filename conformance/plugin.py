"""pytest plugin: choose the implementation under test, mark clauses and capabilities.

- ``--runtime MODULE`` / ``ANTMAN_RUNTIME`` picks the implementation (default
  ``reference_runtime``); the ``rt`` fixture is that module.
- ``@pytest.mark.clause("BFC-4", ...)`` names the SPEC.md clauses a test checks.
- ``@pytest.mark.capability("vmem", ...)`` names the capabilities a test needs; a test whose
  capability the runtime does not declare is reported NOT_SUPPORTED (a skip whose reason
  starts with ``NOT_SUPPORTED``), never as a failure.
- The report header shows the runtime, its version and capabilities, the spec version and
  every ``ANTMAN_*`` / ``TF_*`` / ``GPU_*`` variable, so a misconfigured run is visible.
"""

from __future__ import annotations

import importlib
import os
import types

import pytest
from hypothesis import HealthCheck, settings

from conformance import spec

NOT_SUPPORTED = "NOT_SUPPORTED"
DEFAULT_RUNTIME = "reference_runtime"

# Hypothesis loads its own derandomized "ci" profile when it detects a CI service (the CI
# variable), and a registered profile inherits from the loaded one: say derandomize explicitly,
# so the suite's "ci" profile draws fresh, recorded seeds on CI runners as well.
settings.register_profile(
    "ci", max_examples=50, stateful_step_count=30, deadline=None, derandomize=False,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "certify", max_examples=300, stateful_step_count=60, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow])


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("antman", "AntMan runtime conformance")
    group.addoption("--runtime", default=None, metavar="MODULE",
                    help="implementation to certify (default: $ANTMAN_RUNTIME or "
                         "reference_runtime)")
    group.addoption("--require-gpu", action="store_true", default=False,
                    help="a missing GPU fails the gpu tests instead of skipping them")


def runtime_module_name(config: pytest.Config) -> str:
    explicit = config.getoption("--runtime") or os.environ.get("ANTMAN_RUNTIME")
    if not explicit and config.getoption("--worker-cmd", default=None):
        return "conformance.blackbox"  # a worker command alone: certify it as a black box
    return explicit or DEFAULT_RUNTIME


def load_runtime(config: pytest.Config) -> types.ModuleType:
    cached = getattr(config, "_antman_runtime", None)
    if cached is not None:
        return cached
    name = runtime_module_name(config)
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise pytest.UsageError(f"cannot import runtime module {name!r}: {exc}") from exc
    missing = [a for a in ("NAME", "VERSION", "SPEC_VERSION", "CAPABILITIES")
               if not hasattr(module, a)]
    if missing:
        raise pytest.UsageError(f"runtime module {name!r} lacks {', '.join(missing)} (API-1)")
    unknown = set(module.CAPABILITIES) - spec.CAPABILITIES
    if unknown:
        raise pytest.UsageError(
            f"runtime {name!r} declares unknown capabilities {sorted(unknown)} (API-2); "
            f"known: {sorted(spec.CAPABILITIES)}")
    config._antman_runtime = module  # type: ignore[attr-defined]
    return module


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): SPEC.md clauses this test checks")
    config.addinivalue_line("markers", "capability(*names): runtime capabilities required")
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU")
    config.addinivalue_line("markers",
                            "tensorflow: needs TensorFlow installed (tox -e certify-tf)")
    if not config.getoption("--hypothesis-profile", default=None):
        settings.load_profile("ci")


def environment_lines() -> list[str]:
    keys = sorted(k for k in os.environ
                  if k.startswith(("ANTMAN_", "TF_", "GPU_CONFIG", "GPU_STATUS")))
    return [f"  {k}={os.environ[k]!r}" for k in keys] or ["  (none set)"]


def pytest_report_header(config: pytest.Config) -> list[str]:
    try:
        rt = load_runtime(config)
    except pytest.UsageError as exc:
        return [f"antman runtime: ERROR {exc}"]
    return [
        f"antman runtime: {rt.NAME} {rt.VERSION} (module {rt.__name__}, "
        f"targets spec {rt.SPEC_VERSION})",
        f"antman capabilities: {', '.join(sorted(rt.CAPABILITIES)) or '(none)'}",
        f"antman spec version: {spec.spec_version()} "
        f"({len(spec.load_clauses())} clauses)",
        "antman environment:",
        *environment_lines(),
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    known = spec.load_clauses()
    for item in items:
        for mark in item.iter_markers("clause"):
            unknown = [c for c in mark.args if c not in known]
            if unknown:
                raise pytest.UsageError(
                    f"{item.nodeid} names unknown clause(s) {unknown}; see SPEC.md")


def pytest_runtest_setup(item: pytest.Item) -> None:
    needed = [c for m in item.iter_markers("capability") for c in m.args]
    if not needed:
        return
    rt = load_runtime(item.config)
    for cap in needed:
        if cap not in spec.CAPABILITIES:
            raise pytest.UsageError(f"{item.nodeid}: unknown capability {cap!r}")
        if cap not in rt.CAPABILITIES:
            pytest.skip(f"{NOT_SUPPORTED}: runtime {rt.NAME} does not declare capability "
                        f"{cap!r}")


@pytest.fixture(scope="session")
def rt(request: pytest.FixtureRequest) -> types.ModuleType:
    """The runtime module under test."""
    return load_runtime(request.config)
