"""The benchmark claims in the terminal: one line a figure, after pytest-benchmark's table.

A claim is one ``Figure`` a benchmark recorded (``extra_info["figures"]``, see
``bench_support.record_figures``): its value and interval, its target, and a status
(reports/claim_status.py: met, missed, invalid on a GPU; smoke on the simulated device, never
compared with a GPU target; ``-`` without a target).

The card closes the line: the GPU's model, or ``simulated: not a GPU figure``.

Registered by ``benchmarks/conftest.py`` (``-p benchmarks.claims`` elsewhere); the section is
printed ``trylast``, after pytest-benchmark's nanosecond table, which stays available.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from reports import safe_text
from reports import claim_status
from reports.claim_status import INVALID, MET, MISSED, SIMULATED, SMOKE, card, finite

SECTION = "benchmark claims"
#: ``details`` keys holding a 95 % half-width, in the order they are looked for.
HALF_WIDTH_KEYS = ("ci95_pp", "throughput_ci95_pp", "ci95_us", "ci95")


@dataclass(frozen=True)
class Claim:
    figure: str
    value: float | None
    unit: str
    interval: str
    target: str
    status: str
    card: str

    def line(self) -> str:
        value = "n/a" if self.value is None else f"{self.value:.4g}"
        interval = f" {self.interval}" if self.interval else " (no interval)"
        target = f"target {self.target}" if self.target else "no target"
        return (f"{self.status.upper():7} {self.figure}: {value}{interval} {self.unit}; "
                f"{target}; {self.card}")


def interval(figure: dict[str, Any]) -> str:
    details = figure.get("details") or {}
    bounds = details.get("interval")
    if isinstance(bounds, (list, tuple)) and len(bounds) == 2 \
            and all(finite(b) for b in bounds):
        return f"[{bounds[0]:.4g}, {bounds[1]:.4g}] (95 %)"
    for key in HALF_WIDTH_KEYS:
        if finite(details.get(key)):
            return f"± {details[key]:.3g} (95 %)"
    return ""


def claims(extra_info: dict[str, Any]) -> list[Claim]:
    """The claims of one benchmark's ``extra_info``."""
    gpu = card(extra_info)
    out = []
    for fig in extra_info.get("figures") or []:
        if not isinstance(fig, dict):
            continue
        value = fig.get("value")
        value = float(value) if finite(value) else None
        out.append(Claim(str(fig.get("name", "?")), value, str(fig.get("unit", "")),
                         interval(fig), str(fig.get("target") or ""),
                         claim_status.status(fig, extra_info), gpu or SIMULATED))
    return out


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    session = getattr(terminalreporter.config, "_benchmarksession", None)
    metas = list(getattr(session, "benchmarks", None) or [])
    found = [(m, claims(getattr(m, "extra_info", None) or {})) for m in metas]
    found = [(m, cs) for m, cs in found if cs]
    if not found:
        return
    tr = terminalreporter
    tr.section(SECTION, bold=True)
    tr.write_line("status, figure: value interval unit; target; card (simulated figures are "
                  "smoke: never judged against the GPU targets)")
    for meta, cs in found:
        tr.write_line(safe_text.terminal(f"{getattr(meta, 'name', '?')}:"))
        for c in cs:
            tr.write_line(safe_text.terminal("  " + c.line()), red=c.status in (MISSED, INVALID),
                          green=c.status == MET, yellow=c.status == SMOKE)
