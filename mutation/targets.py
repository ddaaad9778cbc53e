"""What is mutated, and which conformance modules can observe each mutated module.

``OBSERVERS`` is the static map of the reference runtime's modules to the conformance modules
that exercise them, most direct first: a mutant is run against its module's observers only
(stop at the first failure), so that a killed mutant costs little. The map follows the
runtime's data flow (session -> executor -> kernels -> allocators; the actions observe and
adjust through the registry): a module is observed by the tests of its own clauses and by the
tests that drive a component built on it. A mutant that survives its observers is run once
more against every other conformance module (``complement``), so an incomplete map can only
cost time, never a kill: such a kill is reported as a map gap, naming the module to add.

``EXCLUDED`` lists the modules that are not mutated, each with its reason.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RUNTIME_PACKAGE", "RUNTIME_DIR", "CONFORMANCE_DIR", "OBSERVERS", "EXCLUDED",
           "mutated_modules", "observers", "complement", "all_conformance_modules"]

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_PACKAGE = "reference_runtime"
RUNTIME_DIR = ROOT / RUNTIME_PACKAGE
CONFORMANCE_DIR = ROOT / "conformance"

# Groups of conformance modules, named for what they drive.
_MEMORY = ("test_bfc.py", "test_memory_stateful.py", "test_vmem.py", "test_adjustable.py",
           "test_env.py")
_EXECUTION = ("test_executor.py", "test_session.py", "test_gpu_op_manager.py",
              "test_end_to_end.py")
_RUNTIME = ("test_devices.py", "test_resource_management.py", "test_statistics.py",
            "test_clock.py", "test_gpu.py")

#: runtime module (path inside the package) -> conformance modules that observe it.
OBSERVERS: dict[str, tuple[str, ...]] = {
    # The package's exports: NAME, CAPABILITIES, WORKER_COMMAND.
    "__init__.py": ("test_api.py", "test_worker_protocol.py"),
    # Memory: every GPU buffer of a step goes through these allocators (EXEC-5), so the
    # execution modules observe them too.
    "allocator.py": _MEMORY + ("test_devices.py", "test_executor.py"),
    "allocator_retry.py": ("test_bfc.py", "test_vmem.py", "test_memory_stateful.py"),
    "bfc_allocator.py": _MEMORY + ("test_executor.py", "test_resource_management.py",
                                   "test_statistics.py", "test_end_to_end.py", "test_gpu.py"),
    "sim_memory.py": _MEMORY + ("test_devices.py", "test_executor.py", "test_api.py"),
    "env.py": ("test_env.py", "test_vmem.py", "test_devices.py",
               "test_resource_management.py"),
    "gpu_bfc_allocator.py": ("test_env.py", "test_bfc.py", "test_devices.py"),
    "gpu_vmem_allocator.py": ("test_vmem.py", "test_memory_stateful.py", "test_env.py",
                              "test_adjustable.py", "test_devices.py", "test_statistics.py",
                              "test_executor.py", "test_end_to_end.py"),
    "gpu_adjustable_allocator.py": ("test_adjustable.py", "test_memory_stateful.py",
                                    "test_resource_management.py", "test_statistics.py",
                                    "test_end_to_end.py", "test_gpu.py"),
    # Control plane: the clock is everywhere a wait is; the actions run in every session.
    "clock.py": ("test_clock.py", "test_file_listener.py", "test_session_run_actions.py",
                 "test_resource_management.py", "test_session.py", "test_executor.py",
                 "test_end_to_end.py"),
    "session_run_action_registry.py": ("test_session_run_actions.py", "test_session.py",
                                       "test_resource_management.py", "test_devices.py",
                                       "test_clock.py", "test_executor.py",
                                       "test_end_to_end.py"),
    "file_listener.py": ("test_file_listener.py", "test_file_listener_faults.py",
                         "test_resource_management.py",
                         "test_clock.py", "test_devices.py", "test_end_to_end.py"),
    "bounded_json.py": ("test_resource_management.py", "test_resource_management_faults.py"),
    "log_text.py": ("test_resource_management_faults.py", "test_file_listener_faults.py",
                    "test_statistics_faults.py", "test_resource_management.py"),
    "gpu_resource_management.py": ("test_resource_management.py",
                                   "test_resource_management_faults.py", "test_gpu_op_manager.py",
                                   "test_clock.py", "test_session.py", "test_devices.py",
                                   "test_end_to_end.py", "test_gpu.py"),
    "gpu_usage_adjustment.py": ("test_resource_management.py", "test_end_to_end.py",
                                "test_gpu.py"),
    "gpu_statistics.py": ("test_statistics.py", "test_statistics_faults.py", "test_clock.py",
                          "test_devices.py", "test_session_run_actions.py",
                          "test_end_to_end.py"),
    "device.py": _RUNTIME + ("test_executor.py", "test_session.py", "test_end_to_end.py",
                             "test_env.py"),
    "process_state.py": ("test_devices.py", "test_session_run_actions.py", "test_session.py",
                         "test_resource_management.py", "test_resource_management_faults.py",
                         "test_statistics.py",
                         "test_clock.py", "test_executor.py", "test_end_to_end.py",
                         "test_gpu.py"),
    # Execution.
    "direct_session.py": _EXECUTION + ("test_session_run_actions.py",
                                       "test_session_interrupt.py"),
    "executor.py": ("test_executor.py", "test_gpu_op_manager.py", "test_session.py",
                    "test_end_to_end.py", "test_session_interrupt.py"),
    "gpu_op_manager.py": ("test_gpu_op_manager.py", "test_executor.py", "test_end_to_end.py"),
    "graph.py": _EXECUTION,
    "kernels.py": ("test_executor.py", "test_session.py", "test_end_to_end.py",
                   "test_gpu_op_manager.py"),
    "tensor.py": ("test_executor.py", "test_session.py", "test_end_to_end.py"),
    "errors.py": ("test_executor.py", "test_session.py", "test_gpu_op_manager.py"),
    "workload/__init__.py": ("test_end_to_end.py", "test_gpu.py", "test_worker_protocol.py"),
    "workload/__main__.py": ("test_end_to_end.py",),
    # The black-box worker runs in a subprocess; only the worker protocol tests start it.
    "worker.py": ("test_worker_protocol.py",),
}

#: runtime module -> why it is not mutated.
EXCLUDED: dict[str, str] = {
    "cuda_backend.py": "runs only on a real NVIDIA GPU (CuPy): its clauses (GPU) are skipped "
                       "on a machine without one, so none of its mutants can be observed "
                       "there; certify it with tox -e gpu on a GPU runner",
}


def runtime_modules() -> list[str]:
    """Every Python module of the runtime package, as a path inside it."""
    return sorted(p.relative_to(RUNTIME_DIR).as_posix() for p in RUNTIME_DIR.rglob("*.py")
                  if "__pycache__" not in p.parts)


def mutated_modules() -> list[str]:
    return [m for m in runtime_modules() if m not in EXCLUDED]


def all_conformance_modules() -> tuple[str, ...]:
    return tuple(sorted(p.name for p in CONFORMANCE_DIR.glob("test_*.py")))


def observers(module: str) -> tuple[str, ...]:
    """The conformance modules run first against a mutant of ``module`` (paths from the root)."""
    return tuple(f"conformance/{name}" for name in OBSERVERS[module])


def complement(module: str) -> tuple[str, ...]:
    """Every other conformance module: where a survivor of ``observers`` is confirmed."""
    mapped = set(OBSERVERS[module])
    return tuple(f"conformance/{name}" for name in all_conformance_modules()
                 if name not in mapped)
