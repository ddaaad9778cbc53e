"""pytest plugin: the device every conformance test runs on, whatever GPUs the host has.

A conformance test (one naming a clause) that is not marked ``gpu`` checks the runtime's
logic: it runs on the simulated device with the GPUs it asks for (``num_gpus=2`` builds two
simulated GPUs on a machine with one real GPU or none). While such a test runs, from its
setup to its teardown, ``ANTMAN_DEVICE`` is ``sim`` in the test process, and every process
it starts (a worker, the workload's command line) inherits it, so a runtime that selects its
backend by the variable or by ``auto`` (DEVICE-7) never reaches a real GPU. The variable is
restored afterwards. A test marked ``gpu`` keeps the environment it was given: it names the
real backend itself (``backend="cuda"``) and runs in the GPU group (fixtures/gpu_isolation.py).

Where a test needs more real GPUs than the runner has, ``need_real_gpus`` reports it
NOT_SUPPORTED with what it needs, never ERROR or FAIL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

DEVICE_VARIABLE = "ANTMAN_DEVICE"
SIMULATED = "sim"


def is_conformance_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("clause") is not None


def is_gpu_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("gpu") is not None


def device_for(item: pytest.Item) -> str | None:
    """The value of ``ANTMAN_DEVICE`` while ``item`` runs; None: the environment as given."""
    if is_conformance_test(item) and not is_gpu_test(item):
        return SIMULATED
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    value = device_for(item)
    if value is None:
        return (yield)
    before = os.environ.get(DEVICE_VARIABLE)
    os.environ[DEVICE_VARIABLE] = value
    try:
        return (yield)
    finally:
        if before is None:
            os.environ.pop(DEVICE_VARIABLE, None)
        else:
            os.environ[DEVICE_VARIABLE] = before


def need_real_gpus(needed: int, available: int, what: str) -> None:
    """Skip as NOT_SUPPORTED when the runner has fewer than ``needed`` real GPUs."""
    if available < needed:
        pytest.skip(f"NOT_SUPPORTED: {what} needs {needed} real GPUs; this runner has "
                    f"{available}")
