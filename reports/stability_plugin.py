"""pytest plugin of the stability gate (reports/stability.py): ``--repeat N`` and the
parametrization and order that make N whole passes."""

from __future__ import annotations

import argparse

import pytest

from reports.stability import run_id, split

OPTION = "--repeat"
FIXTURE = "antman_repeat"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("antman-report")
    group.addoption(OPTION, type=_count, default=1, metavar="N",
                    help="run the selected tests N times, as N whole passes; a test that both "
                         "passes and fails is FLAKY (default 1)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--repeat needs a whole number, got {text!r}")
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"--repeat must be 1 to 1000, got {value}")
    return value


def repeat_count(config: pytest.Config) -> int:
    return int(config.getoption(OPTION, default=1) or 1)


@pytest.fixture
def antman_repeat(request: pytest.FixtureRequest) -> int:
    """Which run of the test this is (1-based), under ``--repeat``."""
    return int(getattr(request, "param", 1))


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    count = repeat_count(metafunc.config)
    if count <= 1:
        return
    metafunc.fixturenames.append(FIXTURE)
    metafunc.parametrize(FIXTURE, range(1, count + 1), indirect=True,
                         ids=[run_id(i, count) for i in range(1, count + 1)])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """N whole passes: run 1 of every test, in the order the other plugins left, then run 2,
    ... (last, so that a plugin reordering the tests reorders every pass alike)."""
    if repeat_count(config) <= 1:
        return
    items[:] = sorted(items, key=lambda item: split(item.nodeid)[1] or 1)  # stable
