"""The mutant population of the runtime and seeded samples of it.

A sample of size ``n`` for seed ``s`` is the ``n`` mutants with the smallest
``sha256(f"{s}:{key}")``: the same seed and population always give the same sample, in the
same order, whatever the order of generation; and because a mutant's rank depends on its own
key only, editing one part of the runtime changes the sample only where mutants were
added or removed. So the sample of a seed drawn again after tests were strengthened (or after
an unrelated change of the runtime) holds the same mutants, which is what a before/after
comparison needs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from typing import Callable

from .mutmut_operators import mutmut_mutants_of_source
from .operators import Mutant, mutants_of_source
from .targets import RUNTIME_DIR, mutated_modules

__all__ = ["GENERATORS", "Population", "population", "draw", "rank"]

#: mutant sources by name: ``suite`` (the suite's own operators, ``operators``) and
#: ``mutmut`` (mutmut's documented operator set, ``mutmut_operators``).
GENERATORS: dict[str, Callable[[str, str], list[Mutant]]] = {
    "suite": mutants_of_source,
    "mutmut": mutmut_mutants_of_source,
}


@dataclass(frozen=True)
class Population:
    mutants: tuple[Mutant, ...]
    sources: dict[str, str]            # module -> its source text

    def by_key(self) -> dict[str, Mutant]:
        return {m.key: m for m in self.mutants}


def population(runtime_dir: Path = RUNTIME_DIR, modules: list[str] | None = None,
               generator: str = "suite") -> Population:
    """Every mutant of every mutated module (``targets.mutated_modules``) made by the
    mutant source ``generator`` (a name of ``GENERATORS``)."""
    make = GENERATORS[generator]
    sources: dict[str, str] = {}
    mutants: list[Mutant] = []
    for module in modules if modules is not None else mutated_modules():
        text = (runtime_dir / module).read_text(encoding="utf-8")
        sources[module] = text
        mutants.extend(make(module, text))
    keys = [m.key for m in mutants]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})[:5]
        raise ValueError(f"mutant keys are not unique: {dup}")
    return Population(tuple(mutants), sources)


def rank(seed: str, mutant: Mutant) -> str:
    return hashlib.sha256(f"{seed}:{mutant.key}".encode("utf-8")).hexdigest()


def draw(mutants: tuple[Mutant, ...] | list[Mutant], seed: str, size: int) -> list[Mutant]:
    """The ``size`` mutants of lowest rank for ``seed`` (all of them when fewer), by rank."""
    if size < 0:
        raise ValueError(f"sample size must be >= 0, got {size}")
    return sorted(mutants, key=lambda m: rank(seed, m))[:size]
