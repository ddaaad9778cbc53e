"""Start a fork of the reference runtime: ``python -m conformance new-fork NAME DIR``.

The reference runtime is forkable by copying its package: its modules import each other
relatively, name their loggers from ``__name__`` and start their worker and workload as
``python -m <package>...`` (SPEC.md API-1). ``new_fork`` copies ``reference_runtime/`` to
``DIR/NAME/``, names the copy ``NAME`` everywhere the reference names itself (its
``NAME`` attribute, version ``0.1.0``, the package name in docstrings and commands), and
checks that no module of the copy imports the reference. The copy certifies CERTIFIED
unchanged; certify it with::

    PYTHONPATH=DIR tox -e certify -- --runtime NAME

Standard library only: it runs from a fresh clone before anything is installed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import keyword
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

REFERENCE = "reference_runtime"
REFERENCE_DIR = Path(__file__).resolve().parent.parent / REFERENCE
NAME_LINE = re.compile(r'^NAME = "[^"]*"$', re.MULTILINE)
VERSION_LINE = re.compile(r'^VERSION = "[^"]*"$', re.MULTILINE)
FORK_VERSION = "0.1.0"
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


class ForkError(ValueError):
    """The fork cannot be made as asked."""


@dataclass(frozen=True)
class Fork:
    name: str          # the package (import) name, also the runtime's NAME
    path: Path         # DIR/NAME
    root: Path         # DIR, the folder to put on PYTHONPATH

    def certify_command(self) -> str:
        return f"PYTHONPATH={self.root} tox -e certify -- --runtime {self.name}"


def check_name(name: str) -> None:
    if not _IDENTIFIER.match(name) or keyword.iskeyword(name):
        raise ForkError(f"{name!r} is not a lower-case Python package name (letters, digits, "
                        f"underscores; not starting with a digit)")
    if name == REFERENCE:
        raise ForkError(f"{name!r} is the reference runtime's own name")
    if importlib.util.find_spec(name) is not None:
        raise ForkError(f"a module named {name!r} is already importable here; a fork with that "
                        f"name would not be the module the suite imports")


def reference_imports(package: Path) -> list[str]:
    """``file:line`` of every absolute import of the reference inside ``package``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom)
                     and node.level == 0 else [])
            if any(n == REFERENCE or n.startswith(REFERENCE + ".") for n in names):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def new_fork(name: str, directory: Path, *, reference: Path = REFERENCE_DIR) -> Fork:
    """Copy the reference runtime to ``directory/name`` as the runtime ``name``."""
    check_name(name)
    root = directory.resolve()
    target = root / name
    if target.exists():
        raise ForkError(f"{target} exists; choose another folder or name")
    if not (reference / "__init__.py").is_file():
        raise ForkError(f"no reference runtime at {reference}")
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(reference, target,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    try:
        for path in sorted(target.rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            renamed = re.sub(rf"\b{REFERENCE}\b", name, text)
            if renamed != text:
                path.write_text(renamed, encoding="utf-8")
        init = target / "__init__.py"
        text = init.read_text(encoding="utf-8")
        if len(NAME_LINE.findall(text)) != 1 or len(VERSION_LINE.findall(text)) != 1:
            raise ForkError(f"{init}: expected one 'NAME = \"...\"' and one 'VERSION = "
                            f"\"...\"' line to rename")
        text = NAME_LINE.sub(f'NAME = "{name}"', text)
        text = VERSION_LINE.sub(f'VERSION = "{FORK_VERSION}"', text)
        init.write_text(text, encoding="utf-8")
        left = reference_imports(target)
        if left:
            raise ForkError(f"the copy still imports {REFERENCE}: {', '.join(left)}")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return Fork(name, target, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance",
        description="Tools for forks of the runtime under certification.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("new-fork", help="copy the reference runtime as a new runtime package",
                       description="Copy reference_runtime/ to DIR/NAME as the runtime NAME; "
                                   "it certifies CERTIFIED unchanged.")
    p.add_argument("name", help="the fork's package name (also its NAME), e.g. my_runtime")
    p.add_argument("directory", type=Path, help="folder to create the package in (put it on "
                                                "PYTHONPATH to certify)")
    args = parser.parse_args(argv)
    try:
        fork = new_fork(args.name, args.directory)
    except ForkError as exc:
        print(f"new-fork: {exc}", file=sys.stderr)
        return 2
    print(f"created {fork.path}: runtime {fork.name} {FORK_VERSION}, a copy of the reference")
    print("certify it (the report is reports/out/latest/certification.html):")
    print(f"  {fork.certify_command()}")
    return 0
