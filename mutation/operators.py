"""Mutation operators: every one-line mutant of a Python module, as an exact text edit.

A mutant replaces one span of the module's source by another text and leaves every other
character, and every line number, as it was, so that its diff is the bug a port or a
refactor could have introduced, and nothing else. The families (``Mutant.operator``):

``compare``
    a comparison moved across its boundary (``<`` ↔ ``<=``, ``>`` ↔ ``>=``) or negated
    (``==`` ↔ ``!=``, ``is`` ↔ ``is not``, ``in`` ↔ ``not in``).
``arith``
    a binary or augmented operator swapped (``+`` ↔ ``-``, ``*`` → ``/``, ``//`` → ``/``,
    ``%`` → ``/``, ``<<`` ↔ ``>>``, ``&`` ↔ ``|``, ``^`` → ``&``, ``**`` → ``*``), or a
    unary ``-``/``~`` dropped.
``const``
    an integer constant off by one (``n + 1`` and ``n - 1``), a float plus one.
``bool``
    ``True`` ↔ ``False``, ``and`` ↔ ``or`` (every operator of one chain), ``not x`` → ``x``.
``clamp``
    ``min`` ↔ ``max``, and a two-argument ``min``/``max`` whose other argument is a constant
    replaced by its non-constant argument (a guard or a clamp dropped).
``unwrap``
    a copy or an ordering dropped: ``list(x)``, ``dict(x)``, ``tuple(x)``, ``set(x)``,
    ``frozenset(x)``, ``sorted(x)`` and ``x.copy()`` become ``x`` (a view of internal state
    handed out, a live collection iterated, an order lost).
``delete``
    a statement dropped (replaced by ``pass``): a call (``notify``, ``join``, ``set``, a log
    line...), an assignment, an augmented assignment (a counter), ``raise``, ``del``,
    ``break``, ``continue``, or an ``if`` without ``else``.
``unlock``
    a lock removed: ``with <lock>:`` becomes ``if True:`` (the block runs unlocked).
``return``
    ``return <value>`` becomes ``return None``.

What is never mutated, because it is no behaviour the specification defines or because the
mutant could only crash the import: docstrings and other string constants, type
annotations, f-strings (CPython 3.11 gives no reliable positions inside them), the
arguments of a logging call (its message; dropping the whole call is a ``delete`` mutant),
the exception of a ``raise`` (its message; dropping the ``raise`` is a mutant), the deletion
of a debug or info log line (no clause reads those levels), ``assert``
statements, ``__repr__`` methods, ``@dataclass(...)`` arguments, ``__all__`` and
``__slots__``, imports, and statements at module level other than the constants they
assign (dropping a module-level definition only makes the import fail).
"""

from __future__ import annotations

import ast
import bisect
import difflib
import hashlib
import io
import re
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

__all__ = ["Mutant", "OPERATORS", "compiles", "mutants_of_source", "mutants_of_file"]

OPERATORS = ("compare", "arith", "const", "bool", "clamp", "unwrap", "delete", "unlock",
             "return")

_COMPARE_SWAP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="),
                 ast.GtE: (">=", ">"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="),
                 ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
                 ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
_BINOP_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"),
               ast.Div: ("/", "*"), ast.FloorDiv: ("//", "/"), ast.Mod: ("%", "/"),
               ast.Pow: ("**", "*"), ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<"),
               ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&"), ast.BitXor: ("^", "&")}
_UNWRAP_CALLS = frozenset({"list", "dict", "tuple", "set", "frozenset", "sorted"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception",
                          "critical", "log"})
_UNSPECIFIED_LOG_METHODS = frozenset({"debug", "info"})   # no clause reads these levels
_LOGGER_NAMES = frozenset({"log", "_log", "logger", "_logger", "logging"})
_LOCK_TEXT = re.compile(r"(lock|_mu|_cv|cond|mutex)$", re.IGNORECASE)
_LAYOUT_TOKENS = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER})
_SKIPPED_FUNCTIONS = frozenset({"__repr__"})
_SKIPPED_TARGETS = frozenset({"__all__", "__slots__"})


@dataclass(frozen=True)
class Mutant:
    """One text edit of one module: ``source[start:end]`` (characters) becomes ``replacement``."""

    module: str            # path inside the runtime package, e.g. "bfc_allocator.py"
    function: str          # dotted def/class path around the edit, "<module>" at top level
    operator: str          # one of OPERATORS
    line: int              # 1-based line where the edit starts
    start: int             # character offsets into the module's source
    end: int
    original: str
    replacement: str
    line_text: str         # the edited line, stripped (names the mutant for a reader)
    occurrence: int = 0    # among mutants with the same key material in the same function
    mutated_text: str = ""  # the edited line after the edit, stripped (tells apart two
    #                         mutants with the same line and change, e.g. f(0, 0) -> f(0, -1))

    @property
    def key(self) -> str:
        """A name that survives edits elsewhere in the module: no line number in it."""
        material = "\0".join((self.line_text, self.original, self.replacement,
                              str(self.occurrence)))
        digest = hashlib.sha1(material.encode("utf-8")).hexdigest()[:8]
        return f"{self.module}:{self.function}:{self.operator}:{digest}"

    def apply(self, source: str) -> str:
        if source[self.start:self.end] != self.original:
            raise ValueError(f"{self.key}: the source no longer holds {self.original!r} at "
                             f"line {self.line}")
        return source[:self.start] + self.replacement + source[self.end:]

    def diff(self, source: str, *, context: int = 2) -> str:
        """A unified diff of the mutant against ``source``."""
        before = source.splitlines(keepends=True)
        after = self.apply(source).splitlines(keepends=True)
        name = f"reference_runtime/{self.module}"
        return "".join(difflib.unified_diff(before, after, name, name, n=context))

    def describe(self) -> str:
        return f"{self.original!r} -> {self.replacement!r}"


class _Source:
    """A module's text with byte-column to character-offset conversion and its tokens."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.line_starts = [0]
        for line in self.lines:
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.tokens: list[tuple[int, str]] = []        # (character offset, token text)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type not in _LAYOUT_TOKENS:
                self.tokens.append((self.offset_chars(tok.start[0], tok.start[1]), tok.string))
        self.token_starts = [t[0] for t in self.tokens]

    def offset_chars(self, lineno: int, char_col: int) -> int:
        return self.line_starts[lineno - 1] + char_col

    def offset(self, lineno: int, byte_col: int) -> int:
        """Character offset of an AST position (``col_offset`` counts UTF-8 bytes)."""
        line = self.lines[lineno - 1]
        return self.line_starts[lineno - 1] + len(line.encode("utf-8")[:byte_col].decode("utf-8"))

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)    # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, start: int, end: int) -> str:
        return self.text[start:end]

    def tokens_between(self, start: int, end: int) -> list[tuple[int, str]]:
        i = bisect.bisect_left(self.token_starts, start)
        out = []
        while i < len(self.tokens) and self.tokens[i][0] < end:
            out.append(self.tokens[i])
            i += 1
        return out

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)


def sub_expressions(node: ast.AST, *, defaults: bool = False) -> Iterator[ast.expr]:
    """The expressions directly inside ``node`` that a generator visits, in order: its child
    expressions, a comprehension's iterable and conditions, a keyword argument's value and,
    with ``defaults``, the default values of a lambda's arguments."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.expr):
            yield child
        elif isinstance(child, ast.comprehension):
            yield child.iter
            yield from child.ifs
        elif isinstance(child, ast.keyword):
            yield child.value
        elif defaults and isinstance(child, ast.arguments):
            yield from child.defaults
            yield from (d for d in child.kw_defaults if d is not None)


def _is_logging_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    owner = node.func.value
    return node.func.attr in _LOG_METHODS and isinstance(owner, ast.Name) \
        and owner.id in _LOGGER_NAMES


def _is_dataclass_decorator(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "dataclass")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "dataclass"))


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _assigned_names(stmt: ast.stmt) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


class _Generator:
    def __init__(self, module: str, text: str) -> None:
        self.module = module
        self.src = _Source(text)
        self.tree = ast.parse(text)
        self.found: list[Mutant] = []
        self.scope: list[str] = []

    # -- traversal ---------------------------------------------------------------------
    def run(self) -> list[Mutant]:
        for stmt in self.tree.body:
            self.module_statement(stmt)
        return self.numbered()

    def module_statement(self, stmt: ast.stmt) -> None:
        """At module level only constants and the bodies of defs are mutated."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.definition(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None \
                and not _assigned_names(stmt) & _SKIPPED_TARGETS:
            self.expression(stmt.value)
        elif isinstance(stmt, ast.If):             # e.g. a platform switch: its branches
            for inner in stmt.body + stmt.orelse:
                self.module_statement(inner)

    def definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if node.name in _SKIPPED_FUNCTIONS:
            return
        for decorator in node.decorator_list:
            if not _is_dataclass_decorator(decorator):
                self.expression(decorator)
        self.scope.append(node.name)
        try:
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    self.expression(base)
                for stmt in node.body:
                    if _is_docstring(stmt):
                        continue
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        self.definition(stmt)
                    elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) \
                            and stmt.value is not None \
                            and not _assigned_names(stmt) & _SKIPPED_TARGETS:
                        self.expression(stmt.value)
                return
            args = node.args
            for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
                self.expression(default)
            self.body(node.body)
        finally:
            self.scope.pop()

    def body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        if _is_docstring(stmt) or isinstance(stmt, (ast.Assert, ast.Import, ast.ImportFrom,
                                                    ast.Global, ast.Nonlocal, ast.Pass)):
            return
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.definition(stmt)
            return
        self.maybe_delete(stmt)
        if isinstance(stmt, ast.Expr):
            if not _is_logging_call(stmt.value):
                self.expression(stmt.value)
        elif isinstance(stmt, ast.Assign):
            if not _assigned_names(stmt) & _SKIPPED_TARGETS:
                for target in stmt.targets:
                    self.expression(target)
                self.expression(stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.expression(stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self.augmented(stmt)
            self.expression(stmt.target)
            self.expression(stmt.value)
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self.return_value(stmt)
                self.expression(stmt.value)
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                self.expression(target)
        elif isinstance(stmt, (ast.If, ast.While)):
            self.expression(stmt.test)
            self.body(stmt.body)
            self.body(stmt.orelse)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expression(stmt.iter)
            self.body(stmt.body)
            self.body(stmt.orelse)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self.maybe_unlock(stmt)
            for item in stmt.items:
                self.expression(item.context_expr)
            self.body(stmt.body)
        elif isinstance(stmt, ast.Try):
            self.body(stmt.body)
            for handler in stmt.handlers:
                self.body(handler.body)
            self.body(stmt.orelse)
            self.body(stmt.finalbody)
        # Raise: the exception (its message) is not mutated; dropping it is (maybe_delete).

    def expression(self, node: ast.AST | None) -> None:
        if node is None:
            return
        if isinstance(node, ast.JoinedStr):
            return
        if _is_logging_call(node):
            return
        if isinstance(node, ast.Compare):
            self.compare(node)
        elif isinstance(node, ast.BinOp):
            self.binop(node)
        elif isinstance(node, ast.BoolOp):
            self.boolop(node)
        elif isinstance(node, ast.UnaryOp):
            self.unaryop(node)
        elif isinstance(node, ast.Constant):
            self.constant(node)
        elif isinstance(node, ast.Call):
            self.call(node)
        for child in sub_expressions(node):
            self.expression(child)

    # -- the operators -----------------------------------------------------------------
    def add(self, operator: str, start: int, end: int, replacement: str) -> None:
        line = self.src.line_of(start)
        original = self.src.segment(start, end)
        if original == replacement:
            return
        lost = original.count("\n") - replacement.count("\n")
        if lost > 0 and operator == "delete":   # a dropped statement: blank lines after it
            replacement += "\n" * lost
        elif lost > 0:          # keep every later line where it was: (value\n...\n)
            replacement = "(" + replacement + "\n" * lost + ")"
        line_start = self.src.line_starts[line - 1]
        after = self.src.text[line_start:start] + replacement + self.src.text[end:]
        self.found.append(Mutant(self.module, ".".join(self.scope) or "<module>", operator,
                                 line, start, end, original, replacement,
                                 self.src.lines[line - 1].strip(),
                                 mutated_text=after.split("\n", 1)[0].strip()))

    def operator_token(self, left: ast.AST, right: ast.AST, text: str) -> tuple[int, int] | None:
        """The span of the operator ``text`` between two operands (first match)."""
        words = text.split()
        toks = self.src.tokens_between(self.src.end(left), self.src.start(right))
        for i in range(len(toks) - len(words) + 1):
            if [t for _, t in toks[i:i + len(words)]] == words:
                last_start, last_text = toks[i + len(words) - 1]
                return toks[i][0], last_start + len(last_text)
        return None

    def compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            old, new = _COMPARE_SWAP[type(op)]
            span = self.operator_token(left, right, old)
            if span is not None:
                self.add("compare", span[0], span[1], new)
            left = right

    def binop(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINOP_SWAP:
            return        # @ (matrix product): no counterpart of the same arity
        old, new = _BINOP_SWAP[type(node.op)]
        span = self.operator_token(node.left, node.right, old)
        if span is not None:
            self.add("arith", span[0], span[1], new)

    def augmented(self, stmt: ast.AugAssign) -> None:
        old, new = _BINOP_SWAP[type(stmt.op)]
        span = self.operator_token(stmt.target, stmt.value, old + "=")
        if span is not None:
            self.add("arith", span[0], span[1], new + "=")

    def boolop(self, node: ast.BoolOp) -> None:
        old = "and" if isinstance(node.op, ast.And) else "or"
        new = "or" if old == "and" else "and"
        spans = [self.operator_token(a, b, old) for a, b in zip(node.values, node.values[1:])]
        if not spans or any(s is None for s in spans):
            return
        start, end = spans[0][0], spans[-1][1]          # type: ignore[index]
        pieces, pos = [], start
        for s in spans:
            assert s is not None
            pieces.append(self.src.segment(pos, s[0]))
            pieces.append(new)
            pos = s[1]
        self.add("bool", start, end, "".join(pieces))

    def unaryop(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.UAdd):
            return
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return       # a negative literal: its constant is mutated instead
        family = "bool" if isinstance(node.op, ast.Not) else "arith"
        toks = self.src.tokens_between(self.src.start(node), self.src.end(node))
        if len(toks) < 2:
            return
        self.add(family, toks[0][0], toks[1][0], "")   # the operator and the space after it

    def constant(self, node: ast.Constant) -> None:
        value = node.value
        start, end = self.src.start(node), self.src.end(node)
        if isinstance(value, bool):
            self.add("bool", start, end, "False" if value else "True")
        elif isinstance(value, int):
            self.add("const", start, end, repr(value + 1))
            self.add("const", start, end, repr(value - 1))
        elif isinstance(value, float):
            self.add("const", start, end, repr(value + 1.0))

    def call(self, node: ast.Call) -> None:
        func = node.func
        start, end = self.src.start(node), self.src.end(node)
        if isinstance(func, ast.Name) and func.id in _UNWRAP_CALLS and len(node.args) == 1 \
                and not node.keywords and not isinstance(node.args[0], ast.Starred):
            arg = node.args[0]
            self.add("unwrap", start, end,
                     "(" + self.src.segment(self.src.start(arg), self.src.end(arg)) + ")")
        elif isinstance(func, ast.Attribute) and func.attr == "copy" and not node.args \
                and not node.keywords:
            self.add("unwrap", start, end,
                     "(" + self.src.segment(self.src.start(func.value),
                                            self.src.end(func.value)) + ")")
        elif isinstance(func, ast.Name) and func.id in ("min", "max") and node.args \
                and not any(isinstance(a, ast.Starred) for a in node.args):
            fstart, fend = self.src.start(func), self.src.end(func)
            self.add("clamp", fstart, fend, "max" if func.id == "min" else "min")
            if len(node.args) == 2 and not node.keywords:
                consts = [isinstance(a, ast.Constant) for a in node.args]
                if consts.count(True) == 1:
                    kept = node.args[consts.index(False)]
                    self.add("clamp", start, end,
                             "(" + self.src.segment(self.src.start(kept),
                                                    self.src.end(kept)) + ")")

    def return_value(self, stmt: ast.Return) -> None:
        value = stmt.value
        assert value is not None
        if isinstance(value, ast.Constant) and (value.value is None
                                                or isinstance(value.value, bool)):
            return
        self.add("return", self.src.start(value), self.src.end(value), "None")

    def maybe_delete(self, stmt: ast.stmt) -> None:
        deletable = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise,
                     ast.Delete, ast.Break, ast.Continue)
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            return
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return
        if isinstance(stmt, ast.Expr) and _is_logging_call(stmt.value) \
                and stmt.value.func.attr in _UNSPECIFIED_LOG_METHODS:  # type: ignore[attr-defined]
            return
        if isinstance(stmt, ast.If) and not stmt.orelse:
            pass
        elif not isinstance(stmt, deletable):
            return
        start, end = self.src.start(stmt), self.src.end(stmt)
        self.add("delete", start, end, "pass")

    def maybe_unlock(self, stmt: ast.With | ast.AsyncWith) -> None:
        if len(stmt.items) != 1 or stmt.items[0].optional_vars is not None:
            return
        expr = stmt.items[0].context_expr
        text = self.src.segment(self.src.start(expr), self.src.end(expr))
        if not _LOCK_TEXT.search(text):
            return
        self.add("unlock", self.src.start(stmt), self.src.end(expr), "if True")

    # -- naming ------------------------------------------------------------------------
    def numbered(self) -> list[Mutant]:
        seen: dict[tuple, int] = {}
        out = []
        for m in sorted(self.found, key=lambda m: (m.start, m.end, m.operator, m.replacement)):
            material = (m.function, m.operator, m.line_text, m.original, m.replacement)
            n = seen.get(material, 0)
            seen[material] = n + 1
            out.append(Mutant(m.module, m.function, m.operator, m.line, m.start, m.end,
                              m.original, m.replacement, m.line_text, n, m.mutated_text))
        return out


def mutants_of_source(module: str, text: str) -> list[Mutant]:
    """Every mutant of one module's source, in source order (each one compiles: checked by
    ``compiles`` before a mutant is run, and over the whole runtime by the meta-tests)."""
    return _Generator(module, text).run()


def compiles(mutant: Mutant, text: str) -> bool:
    try:
        with warnings.catch_warnings():     # e.g. ``x is ""``: a mutant may be odd code
            warnings.simplefilter("ignore", SyntaxWarning)
            compile(mutant.apply(text), mutant.module, "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


def mutants_of_file(path: Path, module: str) -> list[Mutant]:
    return mutants_of_source(module, path.read_text(encoding="utf-8"))


def iter_operator_counts(mutants: list[Mutant]) -> Iterator[tuple[str, int]]:
    for name in OPERATORS:
        yield name, sum(1 for m in mutants if m.operator == name)
