"""pytest plugin: choose the implementation under test, mark clauses and capabilities.

- ``--runtime MODULE`` / ``ANTMAN_RUNTIME`` picks the implementation (default
  ``reference_runtime``); the ``rt`` fixture is that module.
- ``@pytest.mark.clause("BFC-4", ...)`` names the SPEC.md clauses a test checks.
- ``@pytest.mark.capability("vmem", ...)`` names the capabilities a test needs; a test whose
  capability the runtime does not declare is reported NOT_SUPPORTED (a skip whose reason
  starts with ``NOT_SUPPORTED``), never as a failure.
- The report header shows the runtime, its version and capabilities, the spec version and
  the AntMan and TensorFlow variables the runtime reads, so a misconfigured run is visible.

What a run relies on is checked before any test runs, each problem one short usage error
(exit status 4, no report written): the runtime module imports and has the shape of API-1
(``NAME``, ``VERSION``, ``SPEC_VERSION``, ``CAPABILITIES`` from API-2's vocabulary, the names
of every declared capability, a ``workload`` submodule for ``workload``); the worker command
(``--worker-cmd`` or the runtime's ``WORKER_COMMAND``) names an executable that exists; and
a run that collects conformance tests has pytest-timeout active with a per-test limit
(``REQUIRED_PLUGINS``), so that no test can hang the certification.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shlex
import shutil
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from conformance import gpu_exclusive, shrinking, spec

#: --clause, --rerun, --lf from the report (conformance/selection.py)
pytest_plugins = ["conformance.selection"]

NOT_SUPPORTED = "NOT_SUPPORTED"
DEFAULT_RUNTIME = "reference_runtime"
SHRINKING_PLUGIN = "antman-shrinking"    # conformance/shrinking.py: FAIL, never TIMEOUT
#: pytest plugins a certification relies on: plugin name -> what it guarantees.
REQUIRED_PLUGINS = {"timeout": "pytest-timeout (every test ends: a hang is TIMEOUT, not a "
                               "stalled run)"}

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
                    help="the GPU clauses are must-pass; a run without a usable GPU stops "
                         "before any test (exit status 4)")


def runtime_module_name(config: pytest.Config) -> str:
    explicit = config.getoption("--runtime") or os.environ.get("ANTMAN_RUNTIME")
    if not explicit and config.getoption("--worker-cmd", default=None):
        return "conformance.blackbox"  # a worker command alone: certify it as a black box
    return explicit or DEFAULT_RUNTIME


def load_runtime(config: pytest.Config) -> types.ModuleType:
    """The runtime module under test, checked against API-1 and API-2 (``runtime_problem``);
    a problem is a ``pytest.UsageError``."""
    cached = getattr(config, "_antman_runtime", None)
    if cached is not None:
        return cached
    name = runtime_module_name(config)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise pytest.UsageError(
                f"cannot import runtime module {name!r} ({type(exc).__name__}: {exc}); "
                f"install it or put its folder on PYTHONPATH (SPEC.md API-1)") from None
        raise pytest.UsageError(f"cannot import runtime module {name!r}: importing it raised "
                                f"{_where(exc)}") from None
    except Exception as exc:  # any error the module raises while importing (SyntaxError, ...)
        raise pytest.UsageError(f"cannot import runtime module {name!r}: importing it raised "
                                f"{_where(exc)}") from None
    problem = runtime_problem(module)
    if problem:
        raise pytest.UsageError(problem)
    config._antman_runtime = module  # type: ignore[attr-defined]
    return module


def _where(exc: BaseException) -> str:
    """``Type: message (file:line)`` of the innermost frame an exception was raised in."""
    import traceback
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        text += f" ({frames[-1].filename}:{frames[-1].lineno})"
    return text


def runtime_problem(module: types.ModuleType) -> str | None:
    """Why ``module`` does not have the shape of a runtime (API-1, API-2), or None."""
    name = module.__name__
    missing = [a for a in ("NAME", "VERSION", "SPEC_VERSION", "CAPABILITIES")
               if not hasattr(module, a)]
    if missing:
        return f"runtime module {name!r} lacks {', '.join(missing)} (SPEC.md API-1)"
    bad = [a for a in ("NAME", "VERSION", "SPEC_VERSION")
           if not (isinstance(getattr(module, a), str) and getattr(module, a))]
    if bad:
        return f"runtime module {name!r}: {', '.join(bad)} must be non-empty str (SPEC.md API-1)"
    caps = module.CAPABILITIES
    if not isinstance(caps, (set, frozenset)) or not all(isinstance(c, str) for c in caps):
        return (f"runtime module {name!r}: CAPABILITIES must be a frozenset of str, got "
                f"{caps!r} (SPEC.md API-2)")
    unknown = sorted(set(caps) - spec.CAPABILITIES)
    if unknown:
        return (f"runtime {name!r} declares unknown capabilities {unknown} (SPEC.md API-2); "
                f"known: {', '.join(sorted(spec.CAPABILITIES))}")
    # Every missing name at once: a fork learns all it lacks from one run, not one a run.
    problems = []
    for cap in sorted(caps):
        lacking = [n for n in spec.CAPABILITY_NAMES.get(cap, ()) if not hasattr(module, n)]
        if lacking:
            problems.append(f"declares capability {cap!r} but lacks {', '.join(lacking)} "
                            f"(SPEC.md API-1, API-3 to API-7)")
    for cap, sub in spec.CAPABILITY_SUBMODULES.items():
        if cap in caps and not _has_submodule(module, sub):
            problems.append(f"declares capability {cap!r} but has no submodule {name}.{sub}: "
                            f"a runtime is a package, and E2E-1 runs 'python -m {name}.{sub}' "
                            f"(SPEC.md API-1)")
    return f"runtime {name!r} " + "; ".join(problems) if problems else None


def _has_submodule(module: types.ModuleType, sub: str) -> bool:
    if not hasattr(module, "__path__"):
        return False
    try:
        return importlib.util.find_spec(f"{module.__name__}.{sub}") is not None
    except (ImportError, ValueError):
        return False


def worker_command_problem(argv: list[str], cwd: Path, origin: str) -> str | None:
    """Why the worker command ``argv`` cannot be started from ``cwd``, or None (WORKER-1).

    The executable is ``argv[0]``, or, when that is ``env``, the first word after its
    ``NAME=value`` assignments and options.
    """
    if not argv:
        return f"{origin} is empty (SPEC.md WORKER-1)"
    words = list(argv)
    if Path(words[0]).name == "env":
        rest = words[1:]
        while rest and ("=" in rest[0] or rest[0].startswith("-")):
            rest = rest[1:]
        words = rest or words
    program = words[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program) if Path(program).is_absolute() else cwd / program
        found = path.is_file() and os.access(path, os.X_OK)
    else:
        found = shutil.which(program) is not None
    if not found:
        return (f"{origin}: executable {program!r} not found"
                f"{'' if os.sep in program else ' on PATH'} (command: {shlex.join(argv)}; "
                f"SPEC.md WORKER-1)")
    return None


def check_setup(config: pytest.Config) -> types.ModuleType:
    """Everything a run relies on that can be checked before it starts; the runtime module.

    Raises ``pytest.UsageError`` (exit status 4, before any test and any report) for a
    runtime that does not import or lacks its API-1 shape, for a worker command whose
    executable cannot be found, and for an ``ANTMAN_SUITE_COMMIT`` that names no commit.
    """
    from reports import environment
    problem = environment.commit_variable_problem()
    if problem:
        raise pytest.UsageError(problem)
    rt = load_runtime(config)
    cwd = Path(config.invocation_params.dir)
    cmd = config.getoption("--worker-cmd", default=None)
    if cmd is not None:
        try:
            argv = shlex.split(cmd)
        except ValueError as exc:
            raise pytest.UsageError(f"--worker-cmd {cmd!r} cannot be split: {exc}") from None
        problem = worker_command_problem(argv, cwd, "--worker-cmd")
    elif "worker" in rt.CAPABILITIES and not environment_is_black_box(rt):
        argv = rt.WORKER_COMMAND
        if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
            raise pytest.UsageError(f"{rt.__name__}.WORKER_COMMAND must be a list of str, got "
                                    f"{argv!r} (SPEC.md WORKER-1)")
        problem = worker_command_problem(list(argv), cwd, f"{rt.__name__}.WORKER_COMMAND")
    else:
        problem = None
    if problem:
        raise pytest.UsageError(problem)
    if config.getoption("--require-gpu", default=False):
        from conformance import gpu_gate
        problem = gpu_gate.gpu_problem()
        if problem:
            raise pytest.UsageError(gpu_gate.require_gpu_error(problem))
    return rt


def environment_is_black_box(rt: types.ModuleType) -> bool:
    """The black-box stand-in takes its command from ``--worker-cmd`` only."""
    return bool(getattr(rt, "BLACK_BOX", False))


def skip_setup_checks(config: pytest.Config) -> bool:
    opt = config.option
    return bool(getattr(opt, "help", False) or getattr(opt, "version", False)
                or hasattr(config, "workerinput"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not skip_setup_checks(config):
        check_setup(config)
    if not config.pluginmanager.has_plugin(SHRINKING_PLUGIN):
        config.pluginmanager.register(shrinking, SHRINKING_PLUGIN)
    config.addinivalue_line("markers", "clause(*ids): SPEC.md clauses this test checks")
    config.addinivalue_line("markers", "capability(*names): runtime capabilities required")
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU")
    config.addinivalue_line("markers",
                            "tensorflow: needs TensorFlow installed (tox -e certify-tf)")
    config.addinivalue_line("markers", "antman_full: certifies adapters.antman_1_15 again, "
                                       "minutes on 2 cores (tox -e antman)")
    config.addinivalue_line("markers", "fork_catalogue: a broken fork outside CI's sample of "
                                       "one fork per area (tox -e forks runs them all)")
    if not config.getoption("--hypothesis-profile", default=None):
        settings.load_profile("ci")


#: The TensorFlow and AntMan variables the header shows: those SPEC.md names and those
#: TensorFlow reads to configure a run. Nothing else of ``TF_*`` (``TF_VAR_*`` are Terraform
#: inputs, often secrets) and nothing of the rest of the environment.
RUNTIME_VARIABLES = frozenset({
    "GPU_CONFIG_FILE", "GPU_STATUS_FILE", "TF_GPU_VMEM", "TF_CUDA_HOST_MEM_LIMIT_IN_MB",
    "TF_FORCE_GPU_ALLOW_GROWTH", "TF_RO_PLANNED_GPU", "TF_ENABLE_GPU_GARBAGE_COLLECTION",
    "TF_GPU_ALLOCATOR", "TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE",
    "TF_XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS", "TF_GPU_THREAD_MODE", "TF_GPU_THREAD_COUNT",
    "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_DETERMINISTIC_OPS",
    "TF_CUDNN_DETERMINISTIC", "TF_FORCE_UNIFIED_MEMORY", "TF_USE_LEGACY_KERAS",
})


def shown_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` the header shows: ``ANTMAN_*`` and ``RUNTIME_VARIABLES``."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env)
            if k.startswith("ANTMAN_") or k in RUNTIME_VARIABLES}


def environment_lines() -> list[str]:
    shown = shown_variables()
    return [f"  {k}={v!r}" for k, v in shown.items()] or ["  (none set)"]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What runs, in the header; the runtime's names shown safely (reports/safe_text.py)."""
    from reports.safe_text import terminal
    return [terminal(line) for line in _report_header(config)]


def _report_header(config: pytest.Config) -> list[str]:
    try:
        rt = load_runtime(config)
    except pytest.UsageError as exc:
        return [f"antman runtime: ERROR {exc}"]
    if environment_is_black_box(rt):
        cmd = config.getoption("--worker-cmd", default=None)
        who = (f"{rt.NAME} {rt.VERSION}" if (rt.NAME, rt.VERSION) != (rt.DEFAULT_NAME,
                                                                       rt.DEFAULT_VERSION)
               else "named by its hello record")
        runtime = [f"antman runtime: black box through the worker command `{cmd}` ({who}; "
                   f"module {rt.__name__}, WORKER clauses only)"]
    else:
        runtime = [f"antman runtime: {rt.NAME} {rt.VERSION} (module {rt.__name__}, "
                   f"targets spec {rt.SPEC_VERSION})"]
    return [
        *runtime,
        f"antman capabilities: {', '.join(sorted(rt.CAPABILITIES)) or '(none)'}",
        f"antman spec version: {spec.spec_version()} "
        f"({len(spec.load_clauses())} clauses)",
        "antman environment:",
        *environment_lines(),
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    known = spec.load_clauses()
    certifying = False
    for item in items:
        for mark in item.iter_markers("clause"):
            certifying = True
            unknown = [c for c in mark.args if c not in known]
            if unknown:
                raise pytest.UsageError(
                    f"{item.nodeid} names unknown clause(s) {unknown}; see SPEC.md")
    if certifying and not config.option.collectonly:
        problem = missing_guarantee(config)
        if problem:
            raise pytest.UsageError(problem)


def missing_guarantee(config: pytest.Config) -> str | None:
    """Why a certification cannot keep its guarantees with this pytest setup, or None."""
    for name, what in REQUIRED_PLUGINS.items():
        if not config.pluginmanager.has_plugin(name):
            return (f"certification needs the pytest plugin {what}; it is not active "
                    f"(not installed, or disabled with -p no:{name})")
    timeout = getattr(config.option, "timeout", None)
    if timeout is None:
        try:
            timeout = config.getini("timeout")
        except (ValueError, KeyError):
            timeout = None
    try:
        limit = float(timeout) if timeout not in (None, "") else 0.0
    except (TypeError, ValueError):
        limit = 0.0
    if limit <= 0:
        return ("certification needs a per-test time limit (pytest-timeout): the limit is "
                f"{timeout!r}; give --timeout SECONDS > 0 or leave the suite's default")
    return None


_KEEP_TIMER = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_exception_interact(node: pytest.Item | pytest.Collector, call: pytest.CallInfo,
                              report: pytest.TestReport | pytest.CollectReport):
    """A failed test's per-test limit still bounds its teardown.

    pytest-timeout 2.4 cancels a test's timer as soon as the test fails, so a fixture's
    teardown that never returns after a failure (``close()`` waiting for a step that a broken
    fork never ends) would stall the whole run (pytest-dev/pytest-timeout#196; fixed
    upstream by #197, not yet released). While pytest reports the failure, the cancel is
    skipped (``pytest_timeout_cancel_timer`` below), unless pytest enters the debugger
    (``--pdb``), as upstream now does; the timer ends with the test, as it always did."""
    node.config.stash[_KEEP_TIMER] = not node.config.getoption("usepdb", False)
    try:
        yield
    finally:
        node.config.stash[_KEEP_TIMER] = False


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    """Handled (the timer kept armed) while a failure is reported; else pytest-timeout's own."""
    return True if item.config.stash.get(_KEEP_TIMER, False) else None


_GPU_LOCK_ERROR = pytest.StashKey[str]()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A test marked ``gpu`` holds the host's GPU lock from setup to teardown
    (conformance/gpu_exclusive.py); the wait is outside the per-test limit."""
    if item.get_closest_marker("gpu") is None:
        yield
        return
    hold = gpu_exclusive.gpu_exclusive(item.nodeid)
    try:
        hold.__enter__()
    except (gpu_exclusive.GpuLockTimeout, OSError) as exc:
        item.stash[_GPU_LOCK_ERROR] = f"the GPU could not be had for this test: {exc}"
        yield
        return
    try:
        yield
    finally:
        hold.__exit__(None, None, None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    lock_error = item.stash.get(_GPU_LOCK_ERROR, None)
    if lock_error is not None:
        pytest.fail(lock_error, pytrace=False)
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
