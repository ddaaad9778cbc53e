"""The clauses a conformance test is marked with (``@pytest.mark.clause``), read from its
module's source, so that a kill whose message names no clause is blamed as the certification
report blames an untagged failure: on the test's only clause (reports/attribution.py).

A test id is JUnit's ``classname::name`` (``conformance.test_x::test_y[param]``, or
``conformance.test_x.TestZ::test_y`` for a method).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from .targets import ROOT

__all__ = ["marked_clauses", "only_clause"]

_PARAMS = re.compile(r"\[.*\]$", re.S)


@functools.lru_cache(maxsize=64)
def _clauses_by_function(path: Path) -> dict[str, tuple[str, ...]]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            clauses: list[str] = []
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and ast.unparse(deco.func) == "pytest.mark.clause":
                    clauses += [a.value for a in deco.args
                                if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            found.setdefault(node.name, tuple(dict.fromkeys(clauses)))
    return found


def marked_clauses(test: str, root: Path = ROOT) -> tuple[str, ...]:
    """The clauses the test ``test`` (a JUnit id) is marked with; () when it cannot be found."""
    classname, sep, name = test.partition("::")
    if not sep:
        return ()
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):       # the longest prefix that is a module file
        path = root.joinpath(*parts[:n]).with_suffix(".py")
        if path.is_file():
            return _clauses_by_function(path).get(_PARAMS.sub("", name), ())
    return ()


def only_clause(test: str, root: Path = ROOT) -> str | None:
    """The test's clause when it is marked with exactly one, else None."""
    clauses = marked_clauses(test, root)
    return clauses[0] if len(clauses) == 1 else None
