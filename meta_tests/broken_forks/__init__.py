"""Broken forks of the reference runtime: each breaks exactly one SPEC.md clause.

A fork is a module usable as ``--runtime meta_tests.broken_forks.<name>``. It imports
``reference_runtime``, replaces one behaviour of one reference module (usually a copy of
the original function with one line changed, the way a real fork goes wrong), and
re-exports the runtime's public API under its own ``NAME``. Because a conformance run of a
fork happens in its own pytest process, patching the reference module there is enough.
(A fork of your own is a copy of the whole package: ``python -m conformance new-fork``.)

``patch_source(owner, name, (old, new), ...)`` makes the change: it recompiles the reference
function from its current source with each ``old`` text (which must occur exactly once)
replaced by ``new``, so a fork differs from the reference by exactly the lines it names,
and stops applying, loudly, when the reference changes those lines. Two more helpers make
the wrapper look like a fork shipped as its own package, the shape SPEC.md API-1 asks for:
``as_package(__name__)`` gives the fork the submodules ``worker`` and ``workload``
(``_package/``: the reference's, run with the patch applied; it returns the fork's
``WORKER_COMMAND``, ``python -m <fork>.worker``) and ``log_as(__name__)`` (log records carry
the fork's module name).

Each fork declares, as module-level literals read without importing it (importing applies
the patch):

- ``BREAKS``: the clause it breaks;
- ``MODULES``: the conformance modules (or test node IDs) that exercise that clause (what
  ``meta_tests/test_broken_forks.py`` runs against it);
- ``OUTCOMES``: the clause outcomes that count as caught (``("FAIL",)`` unless the
  breakage is a hang, which the suite reports as TIMEOUT, or a failure the suite reports
  as ERROR);
- ``KNOWN_GAP`` (optional): why the current suite does not catch the fork; the meta-test
  then reports it XFAIL, and fails once the suite catches it (so that the declaration is
  removed);
- ``ALSO_BREAKS`` (optional): ``{clause: reason}`` for each further must-pass clause the
  one bug truly breaks (the meta-test accepts those failures and lists them with their
  reasons; any other failing clause is a misattribution).

Importing this package patches nothing.
"""

from __future__ import annotations

import __future__

import ast
import inspect
import linecache
import logging
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ForkDeclaration", "ForkOutOfDate", "as_package", "declarations", "log_as",
           "patch_source"]

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_PARTS = PACKAGE_DIR / "_package"
REQUIRED = ("BREAKS", "MODULES", "OUTCOMES")
OPTIONAL = ("KNOWN_GAP", "ALSO_BREAKS")


@dataclass(frozen=True)
class ForkDeclaration:
    name: str                      # module name inside this package
    module: str                    # importable name, for --runtime
    breaks: str                    # the clause it breaks
    modules: tuple[str, ...]       # conformance modules to run
    outcomes: tuple[str, ...]      # clause outcomes that count as caught
    summary: str                   # first line of the module docstring
    known_gap: str | None = None   # why the suite does not catch it yet (expected failure)
    also_breaks: tuple[tuple[str, str], ...] = ()   # (clause, reason): truly broken too


def _literals(path: Path) -> tuple[dict[str, object], str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in REQUIRED + OPTIONAL:
            values[node.targets[0].id] = ast.literal_eval(node.value)
    doc = ast.get_docstring(tree) or ""
    return values, doc


def declarations() -> list[ForkDeclaration]:
    """Every fork of this package, in name order, read from its source (no import)."""
    forks = []
    for path in sorted(PACKAGE_DIR.glob("[a-z]*.py")):
        values, doc = _literals(path)
        missing = [k for k in REQUIRED if k not in values]
        if missing:
            raise ValueError(f"{path.name}: missing module-level literal(s) {missing}")
        forks.append(ForkDeclaration(
            name=path.stem, module=f"{__name__}.{path.stem}", breaks=str(values["BREAKS"]),
            modules=tuple(values["MODULES"]), outcomes=tuple(values["OUTCOMES"]),
            summary=doc.splitlines()[0] if doc else "",
            known_gap=values.get("KNOWN_GAP"),  # type: ignore[arg-type]
            also_breaks=tuple(sorted(dict(values.get("ALSO_BREAKS") or {}).items()))))
    return forks


class ForkOutOfDate(RuntimeError):
    """The reference source no longer contains the text a fork replaces."""


def patch_source(owner: Any, name: str, *replacements: tuple[str, str]) -> None:
    """Replace ``owner.<name>`` by its reference source with each ``(old, new)`` applied.

    ``owner`` is a class or a module of ``reference_runtime``; ``old`` is copied from the
    reference source with its indentation and must occur exactly once. The new function
    runs in the reference module's globals, keeps ``staticmethod``/``classmethod``, and its
    source is registered with ``linecache`` so that tracebacks show the fork's lines.
    """
    raw = inspect.getattr_static(owner, name)
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    where = f"{func.__module__}.{func.__qualname__}"
    source = inspect.getsource(func)
    for old, new in replacements:
        found = source.count(old)
        if found != 1:
            raise ForkOutOfDate(f"{where}: the reference source holds {found} copies of "
                                f"{old!r}, expected exactly 1; update the fork")
        source = source.replace(old, new)
    source = textwrap.dedent(source)
    filename = f"<broken fork of {where}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec", dont_inherit=True,
                   flags=__future__.annotations.compiler_flag)
    namespace: dict[str, Any] = {}
    exec(code, func.__globals__, namespace)  # noqa: S102 - the reference's own source
    new = namespace[func.__name__]
    if isinstance(raw, (staticmethod, classmethod)) and not isinstance(new, type(raw)):
        new = type(raw)(new)
    inner = new.__func__ if isinstance(new, (staticmethod, classmethod)) else new
    inner.__qualname__ = func.__qualname__
    setattr(owner, name, new)


def as_package(module: str) -> list[str]:
    """Give the fork ``module`` the submodules of a runtime package (API-1): ``worker`` and
    ``workload``, the reference's run with the fork's patch applied. Returns its
    ``WORKER_COMMAND`` (``python -m <module>.worker``, single-threaded BLAS as the
    reference's)."""
    sys.modules[module].__path__ = [str(PACKAGE_PARTS)]  # type: ignore[attr-defined]
    return ["env", "OPENBLAS_NUM_THREADS=1", sys.executable, "-m", f"{module}.worker"]


def log_as(module: str, *, prefix: str = "reference_runtime") -> None:
    """Log under ``module``'s name, as a fork shipped as its own package would.

    SPEC.md section 3 checks a runtime's log lines by logger name (the implementation's module
    name first); the reference logs as ``reference_runtime.<module>``, so records of those
    loggers are renamed ``<module>.<module of the reference>`` in this process.
    """
    previous = logging.getLogRecordFactory()

    def factory(name: str, *args, **kwargs) -> logging.LogRecord:
        if name == prefix or name.startswith(prefix + "."):
            name = module + name[len(prefix):]
        return previous(name, *args, **kwargs)

    logging.setLogRecordFactory(factory)
