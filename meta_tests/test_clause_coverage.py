"""Every SPEC.md clause is checked by at least one conformance test; every marker is known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conformance import spec

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("clauses") / "clauses.json"
    env = dict(os.environ, ANTMAN_CLAUSE_DUMP=str(out))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "--collect-only", "-q",
         "-p", "meta_tests._clause_dump", "-p", "no:cacheprovider", "--no-report"],
        cwd=spec.ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"collection failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def test_every_clause_has_a_test(collected: list[dict]) -> None:
    covered = {c for row in collected for c in row["clauses"]}
    missing = sorted(cid for cid, clause in spec.load_clauses().items()
                     if not clause.withdrawn and cid not in covered)
    assert not missing, f"SPEC.md clauses without a conformance test: {missing}"


def test_every_conformance_test_names_a_clause(collected: list[dict]) -> None:
    bare = [row["nodeid"] for row in collected if not row["clauses"]]
    assert not bare, f"conformance tests without @pytest.mark.clause: {bare}"


def test_every_marker_names_a_known_clause(collected: list[dict]) -> None:
    known = spec.load_clauses()
    unknown = sorted({c for row in collected for c in row["clauses"] if c not in known})
    assert not unknown, f"markers naming clauses that SPEC.md does not define: {unknown}"


def test_unknown_clause_marker_is_a_usage_error(pytester: pytest.Pytester,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(spec.ROOT))
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
