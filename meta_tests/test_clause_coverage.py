"""Every SPEC.md clause is checked by at least one conformance test; every marker is known."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from conformance import spec
from meta_tests.child_env import python_path
from reports.__main__ import collect_suite_subprocess

pytest_plugins = ["pytester"]


#: One xdist worker runs this module: its module-scoped run is made once.
pytestmark = pytest.mark.xdist_group("clause_coverage")


@pytest.fixture(scope="module")
def collected() -> dict[str, dict[str, Any]]:
    """Node ID -> {clauses, capabilities, gpu} of every collected conformance test."""
    tests = collect_suite_subprocess()
    assert tests, "collecting the conformance suite found no test"
    return tests


def test_every_clause_has_a_test(collected: dict[str, dict[str, Any]]) -> None:
    covered = {c for meta in collected.values() for c in meta["clauses"]}
    missing = sorted(cid for cid, clause in spec.load_clauses().items()
                     if not clause.withdrawn and cid not in covered)
    assert not missing, f"SPEC.md clauses without a conformance test: {missing}"


def test_every_conformance_test_names_a_clause(collected: dict[str, dict[str, Any]]) -> None:
    bare = [nodeid for nodeid, meta in collected.items() if not meta["clauses"]]
    assert not bare, f"conformance tests without @pytest.mark.clause: {bare}"


def test_every_marker_names_a_known_clause(collected: dict[str, dict[str, Any]]) -> None:
    known = spec.load_clauses()
    unknown = sorted({c for meta in collected.values() for c in meta["clauses"]
                      if c not in known})
    assert not unknown, f"markers naming clauses that SPEC.md does not define: {unknown}"


def test_unknown_clause_marker_is_a_usage_error(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", python_path(spec.ROOT))
    pytester.makeconftest('pytest_plugins = ["conformance.plugin"]')
    pytester.makepyfile(test_bad=textwrap.dedent("""
        import pytest

        @pytest.mark.clause("NOPE-999")
        def test_x():
            pass
    """))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown clause*NOPE-999*"])


def test_spec_clause_ids_are_well_formed_and_unique() -> None:
    clauses = spec.load_clauses()
    assert clauses, "SPEC.md defines no clauses"
    for cid, clause in clauses.items():
        area, _, number = cid.partition("-")
        assert area.isupper() and number.isdigit() and not number.startswith("0"), cid
        assert clause.title, f"{cid} has no title"


def test_every_capability_lists_the_names_it_requires() -> None:
    """conformance/test_api.py checks a declared capability's public names; every capability
    but ``cuda`` (whose API is GPU-1's backend name) must have its list there."""
    from conformance import spec
    from conformance.test_api import NAMES_BY_CAPABILITY
    listed, expected = set(NAMES_BY_CAPABILITY), spec.CAPABILITIES - {"cuda"}
    assert listed == expected, (f"capabilities without a name list: {sorted(expected - listed)}; "
                                f"lists for unknown capabilities: {sorted(listed - expected)}")
