"""A second mutant source: the operator set of mutmut, written here from its documentation.

The suite's own generator (``operators``) was designed together with the suite, so its kill
rate could flatter the suite: a family of bugs we did not think of is a family we neither
generate nor test. This generator makes the mutants of another tool's documented operator
list instead (mutmut, https://mutmut.readthedocs.io, "What mutations are performed"; its
code is not used, and it is no dependency), and runs them through the same runner and report
(``python -m mutation run --generator mutmut``). Its mutants are the same exact one-place text
edits (``operators.Mutant``); their operator names differ from the suite generator's, so
their keys never collide with the reviewed list's (``equivalents.toml``), which therefore
leaves none of them out of the rate.

The mutmut operators covered (``MUTMUT_OPERATORS``, the name of each family):

``number``
    an integer literal ``n`` becomes ``n + 1``, a float ``x`` becomes ``x + 1.0``.
``string``
    a string (or bytes) literal ``"s"`` becomes ``"XXsXX"`` (inside its quotes, any prefix
    and quote style kept).
``keyword``
    ``True`` ↔ ``False``, ``None`` → ``""``, ``is`` ↔ ``is not``, ``in`` ↔ ``not in``,
    ``break`` ↔ ``continue``, and each ``and`` ↔ ``or`` of a chain (one operator at a time).
``operator``
    a binary operator swapped: ``+`` ↔ ``-``, ``*`` ↔ ``/``, ``//`` → ``/``, ``%`` → ``/``,
    ``**`` → ``*``, ``<<`` ↔ ``>>``, ``&`` ↔ ``|``, ``^`` → ``&``; the same swaps of an
    augmented assignment (``+=`` ↔ ``-=``, ...).
``comparison``
    ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``.
``assignment``
    ``x = y`` becomes ``x = None`` (and ``x = None`` becomes ``x = ""``), annotated
    assignments too.
``augmented``
    an augmented assignment ``x += y`` becomes the plain assignment ``x = y``.
``decorator``
    a decorator removed (its line left blank, so no line moves).
``lambda``
    the body of a ``lambda`` becomes ``None`` (``0`` when it was ``None``).
``default``
    the default value of an argument mutated: the value operators above (number, string,
    keyword) apply to defaults as to any expression, and a default other than ``None``
    becomes ``None``.

Where mutmut mutates more than this package can certify, the same exclusions as the suite
generator's hold, so that the two populations differ by their operators only: docstrings,
type annotations, f-strings (CPython 3.11 gives no positions inside them), imports,
``__all__`` and ``__slots__``, ``__repr__`` methods, the arguments of a logging call and the
exception of a ``raise`` (their messages: the specification says what a message must name,
never its wording, and ``"XX...XX"`` keeps every name; PIT leaves logging calls out by
default, and mutmut's users skip them with a ``pre_mutation`` hook), and lines marked
``# pragma: no mutate`` (mutmut's own marker). Statements at module level are mutated (mutmut 2 does; the
constants the specification pins live there).
"""

from __future__ import annotations

import ast
import re

from .operators import Mutant, _Generator, _is_docstring, _assigned_names, _SKIPPED_FUNCTIONS
from .operators import _is_logging_call, sub_expressions
from .operators import _SKIPPED_TARGETS

__all__ = ["MUTMUT_OPERATORS", "mutmut_mutants_of_source"]

MUTMUT_OPERATORS = ("number", "string", "keyword", "operator", "comparison", "assignment",
                    "augmented", "decorator", "lambda", "default")

_BINOP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"),
          ast.Div: ("/", "*"), ast.FloorDiv: ("//", "/"), ast.Mod: ("%", "/"),
          ast.Pow: ("**", "*"), ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<"),
          ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&"), ast.BitXor: ("^", "&")}
_COMPARISON = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="),
               ast.GtE: (">=", ">"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "==")}
_KEYWORD_COMPARE = {ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
                    ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
_NO_MUTATE = re.compile(r"#\s*pragma:\s*no mutate")
_STRING_PREFIX = re.compile(r"[rRbBuU]{0,2}")


class _MutmutGenerator(_Generator):
    """The traversal of the suite generator's ``_Generator`` (spans, naming, numbering) with
    mutmut's operators."""

    def run(self) -> list[Mutant]:
        self.body(self.tree.body)
        skipped = {i + 1 for i, line in enumerate(self.src.lines) if _NO_MUTATE.search(line)}
        self.found = [m for m in self.found if m.line not in skipped]
        return self.numbered()

    # -- statements ----------------------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.statement(stmt)

    def definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if node.name in _SKIPPED_FUNCTIONS:
            return
        for decorator in node.decorator_list:
            self.decorator(decorator)
            self.expression(decorator)
        self.scope.append(node.name)
        try:
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    self.expression(base)
            else:
                args = node.args
                for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
                    self.default(default)
                    self.expression(default)
            self.body(node.body)
        finally:
            self.scope.pop()

    def statement(self, stmt: ast.stmt) -> None:
        if _is_docstring(stmt) or isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Global,
                                                    ast.Nonlocal, ast.Pass)):
            return
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.definition(stmt)
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            if stmt.value is None or _assigned_names(stmt) & _SKIPPED_TARGETS:
                return
            self.assignment(stmt)
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                self.expression(target)
            self.expression(stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self.augmented_assignment(stmt)
            self.expression(stmt.target)
            self.expression(stmt.value)
        elif isinstance(stmt, (ast.Break, ast.Continue)):
            word = "break" if isinstance(stmt, ast.Break) else "continue"
            self.add("keyword", self.src.start(stmt), self.src.end(stmt),
                     "continue" if word == "break" else "break")
        elif isinstance(stmt, (ast.If, ast.While)):
            self.expression(stmt.test)
            self.body(stmt.body)
            self.body(stmt.orelse)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expression(stmt.iter)
            self.body(stmt.body)
            self.body(stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.expression(item.context_expr)
            self.body(stmt.body)
        elif isinstance(stmt, ast.Try):
            self.body(stmt.body)
            for handler in stmt.handlers:
                self.body(handler.body)
            self.body(stmt.orelse)
            self.body(stmt.finalbody)
        elif isinstance(stmt, ast.Raise):
            return                   # the exception and its message, as the suite generator
        elif isinstance(stmt, (ast.Expr, ast.Return, ast.Assert, ast.Delete)):
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self.expression(child)

    # -- expressions ---------------------------------------------------------------------
    def expression(self, node: ast.AST | None) -> None:
        if node is None or isinstance(node, ast.JoinedStr) or _is_logging_call(node):
            return
        if isinstance(node, ast.Compare):
            self.compare(node)
        elif isinstance(node, ast.BinOp):
            self.binop(node)
        elif isinstance(node, ast.BoolOp):
            self.boolop(node)
        elif isinstance(node, ast.Constant):
            self.constant(node)
        elif isinstance(node, ast.Lambda):
            self.lambda_body(node)
        for child in sub_expressions(node, defaults=True):
            self.expression(child)

    # -- the operators -------------------------------------------------------------------
    def compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            family, table = (("comparison", _COMPARISON) if type(op) in _COMPARISON
                             else ("keyword", _KEYWORD_COMPARE))
            old, new = table[type(op)]
            span = self.operator_token(left, right, old)
            if span is not None:
                self.add(family, span[0], span[1], new)
            left = right

    def binop(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINOP:
            return
        old, new = _BINOP[type(node.op)]
        span = self.operator_token(node.left, node.right, old)
        if span is not None:
            self.add("operator", span[0], span[1], new)

    def augmented_assignment(self, stmt: ast.AugAssign) -> None:
        old, new = _BINOP[type(stmt.op)]
        span = self.operator_token(stmt.target, stmt.value, old + "=")
        if span is not None:
            self.add("operator", span[0], span[1], new + "=")
            self.add("augmented", span[0], span[1], "=")

    def boolop(self, node: ast.BoolOp) -> None:
        old = "and" if isinstance(node.op, ast.And) else "or"
        new = "or" if old == "and" else "and"
        for a, b in zip(node.values, node.values[1:]):
            span = self.operator_token(a, b, old)
            if span is not None:
                self.add("keyword", span[0], span[1], new)

    def constant(self, node: ast.Constant) -> None:
        value = node.value
        start, end = self.src.start(node), self.src.end(node)
        if isinstance(value, bool):
            self.add("keyword", start, end, "False" if value else "True")
        elif value is None:
            self.add("keyword", start, end, '""')
        elif isinstance(value, int):
            self.add("number", start, end, repr(value + 1))
        elif isinstance(value, float):
            self.add("number", start, end, repr(value + 1.0))
        elif isinstance(value, (str, bytes)):
            literal = self.string_literal(start, end)
            if literal is not None:
                self.add("string", start, end, literal)

    def string_literal(self, start: int, end: int) -> str | None:
        """``"XX" + s + "XX"`` written inside the literal's quotes; None when the span is not
        one literal (implicit concatenation, a string spread over lines by parentheses)."""
        toks = self.src.tokens_between(start, end)
        if len(toks) != 1:
            return None
        text = self.src.segment(start, end)
        prefix = _STRING_PREFIX.match(text).group(0)    # type: ignore[union-attr]
        rest = text[len(prefix):]
        quote = rest[:3] if rest[:3] in ('"""', "'''") else rest[:1]
        if quote not in ('"', "'", '"""', "'''") or not rest.endswith(quote) \
                or len(rest) < 2 * len(quote):
            return None
        inner = rest[len(quote):len(rest) - len(quote)]
        return f"{prefix}{quote}XX{inner}XX{quote}"

    def assignment(self, stmt: ast.Assign | ast.AnnAssign) -> None:
        value = stmt.value
        assert value is not None
        is_none = isinstance(value, ast.Constant) and value.value is None
        self.add("assignment", self.src.start(value), self.src.end(value),
                 '""' if is_none else "None")

    def decorator(self, node: ast.expr) -> None:
        line_start = self.src.line_starts[node.lineno - 1]     # type: ignore[attr-defined]
        at = self.src.text.rfind("@", line_start, self.src.start(node))
        if at < 0:
            return
        self.add("decorator", at, self.src.end(node), "")

    def lambda_body(self, node: ast.Lambda) -> None:
        body = node.body
        is_none = isinstance(body, ast.Constant) and body.value is None
        self.add("lambda", self.src.start(body), self.src.end(body), "0" if is_none else "None")

    def default(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant) and node.value is None:
            return
        self.add("default", self.src.start(node), self.src.end(node), "None")


def mutmut_mutants_of_source(module: str, text: str) -> list[Mutant]:
    """Every mutmut-operator mutant of one module's source, in source order."""
    return _MutmutGenerator(module, text).run()
