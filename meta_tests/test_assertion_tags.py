"""Every check of the conformance suite names the clause it checks (SPEC.md section 7).

The report attributes a failure to the clause in its message's ``[CLAUSE-ID]`` tag
(reports/attribution.py), so every ``assert`` and every ``pytest.fail``/``raise
AssertionError`` of the conformance modules carries exactly one tag: a literal ``[BFC-5]``
naming a clause of SPEC.md, or a formatted ``[{clause}]`` whose expression is a name or an
expression choosing between literal clause IDs (``[{'ADJ-1' if grow else 'ADJ-2'}]``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conformance import spec

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted((ROOT / "conformance").glob("test_*.py")) + [ROOT / "fixtures" / "oom.py"]
LITERAL = re.compile(r"\[([A-Z][A-Z0-9]*-\d+)\]")
ID = re.compile(r"^[A-Z][A-Z0-9]*-\d+$")


def _formatted_tags(node: ast.AST) -> list[ast.expr]:
    """Expressions formatted as ``[{expr}]`` inside the f-strings of ``node``."""
    found = []
    for f in (n for n in ast.walk(node) if isinstance(n, ast.JoinedStr)):
        parts = f.values
        for i, part in enumerate(parts):
            if not isinstance(part, ast.FormattedValue) or i == 0 or i + 1 == len(parts):
                continue
            before, after = parts[i - 1], parts[i + 1]
            if (isinstance(before, ast.Constant) and str(before.value).endswith("[")
                    and isinstance(after, ast.Constant) and str(after.value).startswith("]")):
                found.append(part.value)
    return found


def _is_clause_expression(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return "clause" in expr.id
    literals = [n.value for n in ast.walk(expr) if isinstance(n, ast.Constant)
                and isinstance(n.value, str)]
    return bool(literals) and any(ID.match(v) for v in literals) and not any(
        isinstance(n, ast.Call) for n in ast.walk(expr))


def _text(node: ast.AST) -> str:
    return "".join(str(n.value) for n in ast.walk(node)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str))


def checks(tree: ast.AST) -> list[tuple[int, ast.AST | None]]:
    """(line, message) of every assert, pytest.fail(...) and raise AssertionError(...)."""
    out: list[tuple[int, ast.AST | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            out.append((node.lineno, node.msg))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.fail",
                                                                       "AssertionError"):
            out.append((node.lineno, node.args[0] if node.args else None))
    return out


def problems(path: Path, source: str | None = None) -> list[str]:
    known = spec.load_clauses()
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    found = []
    for line, msg in checks(tree):
        where = f"{path.relative_to(ROOT)}:{line}"
        if msg is None:
            found.append(f"{where}: no message, so no [CLAUSE-ID] tag")
            continue
        literal = LITERAL.findall(_text(msg))
        formatted = [e for e in _formatted_tags(msg) if _is_clause_expression(e)]
        if len(literal) + len(formatted) != 1:
            found.append(f"{where}: {len(literal) + len(formatted)} clause tags, expected 1")
        for cid in literal + [v for e in formatted for v in
                              (n.value for n in ast.walk(e) if isinstance(n, ast.Constant))
                              if isinstance(v, str) and ID.match(v)]:
            if cid not in known:
                found.append(f"{where}: tag [{cid}] names no clause of SPEC.md")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_every_check_names_exactly_one_clause(path: Path) -> None:
    found = problems(path)
    assert not found, "\n".join(found)


def test_the_checker_sees_untagged_and_doubly_tagged_checks() -> None:
    source = '''
def test_x(clause):
    assert a
    assert b, "no tag"
    assert c, "two [BFC-1] tags [BFC-2]"
    assert d, f"dynamic [{clause}]"
    assert e, f"chosen [{'ADJ-1' if grow else 'ADJ-2'}]"
    assert f, f"a list [{[1, 2]}] is no tag"
    assert g, "unknown [BFC-999]"
    pytest.fail("fine [BFC-1]")
    raise AssertionError("untagged")
'''
    path = ROOT / "conformance" / "_example.py"
    tree = ast.parse(source)
    lines = {line for line, _ in checks(tree)}
    assert lines == {3, 4, 5, 6, 7, 8, 9, 10, 11}
    found = problems(path, source)
    bad = sorted(int(p.split(":")[1]) for p in found)
    assert bad == [3, 4, 5, 8, 9, 11], found


#: Harness checks whose failure message carries the clause their caller passes (``clause=``).
HARNESS_CHECKS = ("wait_for_waiters",)
#: Calls that name, as their first argument, a clause the test depends on.
DEPENDENCIES = ("precondition", "precondition_holds", "relies_on")
HELPERS = MODULES + [ROOT / "conformance" / "control_helpers.py",
                     ROOT / "conformance" / "execution_helpers.py"]


def harness_problems(path: Path, source: str | None = None) -> list[str]:
    """Harness checks without ``clause=``, and dependencies that name no clause of SPEC.md."""
    known = spec.load_clauses()
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else \
            node.func.id if isinstance(node.func, ast.Name) else ""
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        if name in HARNESS_CHECKS and not any(k.arg == "clause" for k in node.keywords):
            found.append(f"{where}: {name}(...) without clause=: its failure would be untagged")
        if name in DEPENDENCIES:
            for arg in node.args[: None if name == "relies_on" else 1]:
                if isinstance(arg, ast.Constant) and arg.value not in known:
                    found.append(f"{where}: {name}({arg.value!r}) names no clause of SPEC.md")
    return found


@pytest.mark.parametrize("path", HELPERS, ids=[p.name for p in HELPERS])
def test_harness_checks_carry_the_clause_they_check(path: Path) -> None:
    found = harness_problems(path)
    assert not found, "\n".join(found)


def test_the_harness_checker_sees_untagged_waits_and_unknown_dependencies() -> None:
    source = '''
def test_x(clock):
    clock.wait_for_waiters(1)
    clock.wait_for_waiters(1, clause="RM-12")
    with precondition("BFC-4", "split"):
        pass
    with precondition("BFC-999", "no such clause"):
        pass
    relies_on("RM-4", "XYZ-1")
'''
    found = harness_problems(ROOT / "conformance" / "_example.py", source)
    assert sorted(int(p.split(":")[1]) for p in found) == [3, 7, 9], found
