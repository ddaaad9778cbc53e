"""The benchmark claims in the terminal: one line a figure, after pytest-benchmark's table.

A claim is one ``Figure`` a benchmark recorded (``extra_info["figures"]``, see
``bench_support.record_figures``): its value and interval, its target, and a status:

- ``met`` / ``missed``: a GPU figure (``ANTMAN_DEVICE=cuda`` and a GPU named by NVML) judged
  against its target;
- ``invalid``: a GPU figure with a target that could not be judged (no value, or no verdict);
- ``smoke``: a figure measured on the simulated device (a CPU); the targets are GPU targets,
  so it is never compared with its target (no met/missed), only shown;
- ``-``: a figure without a target.

The card closes the line: the GPU's model, or ``simulated: not a GPU figure``.

Registered by ``benchmarks/conftest.py`` (``-p benchmarks.claims`` elsewhere); the section is
printed ``trylast``, after pytest-benchmark's nanosecond table, which stays available.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from reports import safe_text

SIMULATED = "simulated: not a GPU figure"
SECTION = "benchmark claims"
#: ``details`` keys holding a 95 % half-width, in the order they are looked for.
HALF_WIDTH_KEYS = ("ci95_pp", "throughput_ci95_pp", "ci95_us", "ci95")

MET, MISSED, INVALID, SMOKE, NO_TARGET = "met", "missed", "invalid", "smoke", "-"


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
        interval = f" {self.interval}" if self.interval else ""
        target = f"target {self.target}" if self.target else "no target"
        return (f"{self.status.upper():7} {self.figure}: {value}{interval} {self.unit}; "
                f"{target}; {self.card}")


def card(extra_info: dict[str, Any]) -> str | None:
    """The GPU a benchmark measured on, or None on the simulated device."""
    on_cuda = (str(extra_info.get("device_env", "")).strip().lower() == "cuda"
               or extra_info.get("backend") == "cuda")
    model = extra_info.get("gpu_model")
    return str(model) if on_cuda and model else None


def interval(figure: dict[str, Any]) -> str:
    details = figure.get("details") or {}
    bounds = details.get("interval")
    if isinstance(bounds, (list, tuple)) and len(bounds) == 2 \
            and all(_finite(b) for b in bounds):
        return f"[{bounds[0]:.4g}, {bounds[1]:.4g}] (95 %)"
    for key in HALF_WIDTH_KEYS:
        if _finite(details.get(key)):
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
        value = float(value) if _finite(value) else None
        target = str(fig.get("target") or "")
        if not target:
            status = NO_TARGET
        elif gpu is None:
            status = SMOKE
        elif value is None or fig.get("met") is None:
            status = INVALID
        else:
            status = MET if fig["met"] else MISSED
        out.append(Claim(str(fig.get("name", "?")), value, str(fig.get("unit", "")),
                         interval(fig), target, status, gpu or SIMULATED))
    return out


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
