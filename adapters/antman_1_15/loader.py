"""Build the modules of ``adapters.antman_1_15`` from the reference runtime's source.

Each module ``adapters.antman_1_15.<m>`` is the reference module ``reference_runtime/<m>.py``
compiled under the adapter's name, with the text patches of every deviation switched on
applied to its source (``deviations.py``). The reference package itself is never imported
nor changed: the adapter is a copy made at import time, so both can live in one process.
Tracebacks show the patched source (it is registered with ``linecache``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Sequence

__all__ = ["PatchError", "ReferenceCopyFinder", "REFERENCE_DIR", "reference_source"]

REFERENCE_DIR = Path(__file__).resolve().parent.parent.parent / "reference_runtime"


class PatchError(RuntimeError):
    """A deviation's patch no longer applies to the reference source."""


def reference_source(relative: str) -> tuple[Path, bool] | None:
    """``(path, is_package)`` of the reference module ``relative`` (``a/b``), or None."""
    base = REFERENCE_DIR / relative
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    return None


def apply_patches(module: str, text: str,
                  patches: Sequence[tuple[str, str, str, str]]) -> str:
    """Apply ``(deviation, module, old, new)`` patches of ``module``; each ``old`` must occur
    exactly once in the text as patched so far."""
    for deviation, target, old, new in patches:
        if target != module:
            continue
        found = text.count(old)
        if found != 1:
            raise PatchError(f"{deviation}: reference_runtime/{module.replace('.', '/')}.py "
                             f"holds {found} copies of {old[:80]!r}, expected exactly 1; "
                             f"update the deviation")
        text = text.replace(old, new)
    return text


class _CopyLoader(importlib.abc.InspectLoader):
    def __init__(self, finder: "ReferenceCopyFinder", relative: str, path: Path,
                 package: bool) -> None:
        self._finder = finder
        self._relative = relative
        self._path = path
        self._package = package

    def is_package(self, fullname: str) -> bool:
        return self._package

    def get_source(self, fullname: str) -> str:
        text = self._path.read_text(encoding="utf-8")
        return apply_patches(self._relative.replace("/", "."), text, self._finder.patches())

    def get_code(self, fullname: str):
        source = self.get_source(fullname)
        filename = f"<{self._finder.package} copy of reference_runtime/" \
                   f"{self._path.relative_to(REFERENCE_DIR)}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        return compile(source, filename, "exec", dont_inherit=True)

    def exec_module(self, module: ModuleType) -> None:
        module.__file__ = str(self._path)        # data files (schemas/) are the reference's
        exec(self.get_code(module.__name__), module.__dict__)  # noqa: S102


class ReferenceCopyFinder(importlib.abc.MetaPathFinder):
    """Finds ``<package>.<m>`` for every reference module ``m`` that the adapter's own
    folder does not hold."""

    def __init__(self, package: str, own_dir: Path,
                 patches: Callable[[], Sequence[tuple[str, str, str, str]]]) -> None:
        self.package = package
        self.own_dir = own_dir
        self.patches = patches

    def find_spec(self, fullname: str, path=None, target=None):
        prefix = self.package + "."
        if not fullname.startswith(prefix):
            return None
        relative = fullname[len(prefix):].replace(".", "/")
        if "/" not in relative and ((self.own_dir / f"{relative}.py").is_file()
                                    or (self.own_dir / relative).is_dir()):
            return None                          # the adapter's own module
        found = reference_source(relative)
        if found is None:
            return None
        path_, package = found
        loader = _CopyLoader(self, relative, path_, package)
        spec = importlib.machinery.ModuleSpec(fullname, loader, origin=str(path_),
                                              is_package=package)
        if package:
            spec.submodule_search_locations = []
        return spec

    def install(self) -> None:
        if not any(isinstance(f, ReferenceCopyFinder) and f.package == self.package
                   for f in sys.meta_path):
            sys.meta_path.insert(0, self)
