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
import errno
import importlib.util
import keyword
import os
import re
import secrets
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

REFERENCE = "reference_runtime"
SUITE_ROOT = Path(__file__).resolve().parent.parent
REFERENCE_DIR = SUITE_ROOT / REFERENCE
NAME_LINE = re.compile(r'^NAME = "[^"]*"$', re.MULTILINE)
VERSION_LINE = re.compile(r'^VERSION = "[^"]*"$', re.MULTILINE)
FORK_VERSION = "0.1.0"
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")      # matched whole (fullmatch): no newline
MAX_NAME = 64
#: Top-level names a fork must not take even when nothing of that name is importable here:
#: modules Python imports on its own at start-up, the standard library's names (present on
#: other platforms or builds) and the suite's own packages.
RESERVED_NAMES = frozenset({"sitecustomize", "usercustomize", "site", "__main__", "builtins",
                            "conformance", "reports", "fixtures", "mutation", "meta_tests",
                            "benchmarks", "adapters", "conftest", "test", "tests"}
                           | set(sys.stdlib_module_names) | set(sys.builtin_module_names))


class ForkError(ValueError):
    """The fork cannot be made as asked."""


@dataclass(frozen=True)
class Fork:
    name: str          # the package (import) name, also the runtime's NAME
    path: Path         # DIR/NAME
    root: Path         # DIR, the folder to put on PYTHONPATH

    def certify_command(self) -> str:
        return f"PYTHONPATH={shlex.quote(str(self.root))} tox -e certify -- --runtime {self.name}"


def check_name(name: str) -> None:
    if (not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name)
            or len(name) > MAX_NAME):
        raise ForkError(f"{name!r} is not a lower-case Python package name (letters, digits, "
                        f"underscores; not starting with a digit; at most {MAX_NAME} "
                        f"characters)")
    if name == REFERENCE:
        raise ForkError(f"{name!r} is the reference runtime's own name")
    if name in RESERVED_NAMES or name.startswith("__"):
        raise ForkError(f"{name!r} would shadow a module of Python or of the suite; choose "
                        f"another name")
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = True
    if found:
        raise ForkError(f"a module named {name!r} is already importable here; a fork with that "
                        f"name would not be the module the suite imports")


def check_directory(directory: Path) -> Path:
    """``directory`` resolved, when a fork can be made in it (it may not exist yet)."""
    if directory.is_symlink() and not directory.exists():
        raise ForkError(f"{directory} is a symbolic link to {os.readlink(directory)}, which "
                        f"does not exist")
    root = directory.resolve()
    for inside, what in ((REFERENCE_DIR.resolve(), "the reference runtime"),
                         (SUITE_ROOT.resolve(), "the suite's checkout")):
        if root.is_relative_to(inside):
            raise ForkError(f"{directory} is inside {what} ({inside}); make the fork in a "
                            f"folder outside it")
    existing = root
    while not existing.exists():
        if existing.is_symlink():
            raise ForkError(f"{existing} is a symbolic link to {os.readlink(existing)}, "
                            f"which does not exist")
        existing = existing.parent
    if not existing.is_dir():
        raise ForkError(f"{existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ForkError(f"{existing} is not writable")
    return root


def reference_imports(package: Path, shown_as: str | None = None) -> list[str]:
    """``file:line`` of every absolute import of the reference inside ``package`` (named
    ``shown_as/...`` instead of the folder's own name when given)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom)
                     and node.level == 0 else [])
            if any(n == REFERENCE or n.startswith(REFERENCE + ".") for n in names):
                where = path.relative_to(package)
                found.append(f"{shown_as or package.name}/{where.as_posix()}:{node.lineno}")
    return found


def new_fork(name: str, directory: Path, *, reference: Path = REFERENCE_DIR) -> Fork:
    """Copy the reference runtime to ``directory/name`` as the runtime ``name``.

    The copy is made and renamed in a hidden folder beside the target, which is renamed into
    place only when complete: whatever fails (a full disk included), no partial fork and no
    folder this call created is left behind.
    """
    check_name(name)
    root = check_directory(directory)
    target = root / name
    if target.exists() or target.is_symlink():
        raise ForkError(f"{target} exists; choose another folder or name")
    if not (reference / "__init__.py").is_file():
        raise ForkError(f"no reference runtime at {reference}")
    created = _make_folders(root)
    staging = root / f".{name}.new-fork-{secrets.token_hex(4)}"
    try:
        shutil.copytree(reference, staging, symlinks=True, copy_function=_copy_file,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        _rename_copy(staging, name)
        left = reference_imports(staging, shown_as=name)
        if left:
            raise ForkError(f"the copy still imports {REFERENCE}: {', '.join(left)}")
        if target.exists() or target.is_symlink():
            raise ForkError(f"{target} appeared while the fork was made; nothing was changed")
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return Fork(name, target, root)


def _copy_file(source: str, destination: str) -> str:
    return shutil.copy2(source, destination)


def _make_folders(root: Path) -> list[Path]:
    """Creates ``root`` and its missing parents; the folders created, outermost first."""
    missing = []
    folder = root
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    created = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            created.append(folder)
    except BaseException:
        for folder in reversed(created):
            folder.rmdir()
        raise
    return created


def _rename_copy(package: Path, name: str) -> None:
    """Names the copy at ``package`` ``name`` wherever the reference names itself."""
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        renamed = re.sub(rf"\b{REFERENCE}\b", name, text)
        if renamed != text:
            path.write_text(renamed, encoding="utf-8")
    init = package / "__init__.py"
    text = init.read_text(encoding="utf-8")
    if len(NAME_LINE.findall(text)) != 1 or len(VERSION_LINE.findall(text)) != 1:
        raise ForkError(f"{init}: expected one 'NAME = \"...\"' and one 'VERSION = "
                        f"\"...\"' line to rename")
    text = NAME_LINE.sub(f'NAME = "{name}"', text)
    text = VERSION_LINE.sub(f'VERSION = "{FORK_VERSION}"', text)
    init.write_text(text, encoding="utf-8")


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
    except OSError as exc:
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"new-fork: cannot make the fork: {reason}{where}; nothing was left behind",
              file=sys.stderr)
        return 2
    print(f"created {fork.path}: runtime {fork.name} {FORK_VERSION}, a copy of the reference")
    print("certify it (the report is reports/out/latest/certification.html):")
    print(f"  {fork.certify_command()}")
    return 0
