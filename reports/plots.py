"""Figures of the report as SVG text (matplotlib, Agg backend); only what the run produced.

Artifact shapes (``report_artifacts.add(name, data)``): the named ones of ``RENDERERS``; any
data with ``categories`` (list of labels) and ``series`` (``{label: [value or None per
category]}``), optional ``targets`` (a target per category, or None) or ``target`` (one value,
drawn as a line labelled ``target_label``), ``ylabel`` and ``title``: a grouped bar chart
(the benchmarks' overhead, co-location and latency figures); any data with ``x`` and
``series``: a line plot.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

MIB = 1024 * 1024
MAX_PER_NAME = 6


def _pyplot():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    plt.rcParams.update({"svg.fonttype": "none", "font.size": 10, "axes.grid": True,
                         "grid.alpha": 0.3, "axes.spines.top": False,
                         "axes.spines.right": False, "svg.hashsalt": "antman"})
    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _nums(values: Any) -> list[float]:
    """Numbers of a series; ``None`` (a figure not reported) becomes NaN, which matplotlib
    leaves out of a line (a gap), never 0."""
    if not isinstance(values, Sequence) or isinstance(values, str):
        return []
    return [math.nan if v is None else float(v) for v in values]


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _missing_note(ys: list[float]) -> str:
    missing = sum(1 for y in ys if not math.isfinite(y))
    return f" (not reported at {missing} step{'s' if missing != 1 else ''})" if missing else ""


def _span(values: list[float], low: float, high: float) -> tuple[float, float]:
    """Axis limits covering [low, high] and every finite value, with a margin: no point is
    drawn off the axes."""
    finite = _finite(values)
    lo, hi = min([low, *finite]), max([high, *finite])
    pad = 0.05 * (hi - lo or 1)
    return lo - (pad if lo < low else 0), hi + pad


def e2e_timeline(data: dict[str, Any]) -> str | None:
    steps = _nums(data.get("steps", []))
    if not steps:
        return None
    plt = _pyplot()
    period = _nums(data.get("period_us", []))
    fig, axes = plt.subplots(2 if period else 1, 1, sharex=True, squeeze=False,
                             figsize=(8, 5.2 if period else 3.2))
    mem = axes[0][0]
    for key, label, style in (("device_bytes", "device in use", "-"),
                              ("host_bytes", "host (fallback) in use", "-"),
                              ("limit", "memory limit", "--")):
        ys = _nums(data.get(key, []))
        if len(ys) == len(steps) and _finite(ys):
            mem.step(steps, [y / MIB for y in ys], style, where="post",
                     label=label + _missing_note(ys))
        elif len(ys) == len(steps):
            mem.plot([], [], style, label=f"{label}: not reported")
    mem.set_ylabel("MiB")
    mem.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, fontsize=8, frameon=False)
    if period and len(period) == len(steps):
        ax = axes[1][0]
        ax.plot(steps, [p / 1000 for p in period], ".-", color="#6a1b9a", label="step period")
        ax.set_ylabel("step period (ms)")
    axes[-1][0].set_xlabel("training step")
    for ev in data.get("events", []) or []:
        if isinstance(ev, dict) and "step" in ev:
            for row in axes:
                row[0].axvline(float(ev["step"]), color="#555", lw=0.8, ls=":")
            mem.annotate(str(ev.get("label", "")), (float(ev["step"]), 0.5),
                         xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                         va="center", ha="right", color="#333",
                         bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none",
                               "alpha": 0.8})
    return _svg(fig)


def idle_slots(data: dict[str, Any]) -> str | None:
    slots = _finite(_nums(data.get("slots_us", [])))
    if not slots:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.hist([s / 1000 for s in slots], bins=min(40, max(5, len(set(slots)))), color="#1565c0")
    if data.get("expected_us") is not None:
        ax.axvline(float(data["expected_us"]) / 1000, color="#c62828", ls="--",
                   label="expected")
        ax.legend(frameon=False, fontsize=8)
    ax.set_xlabel("idle slot (ms)")
    ax.set_ylabel("count")
    return _svg(fig)


def throttle_accuracy(data: dict[str, Any]) -> str | None:
    target = _nums(data.get("target_percent", []))
    measured = _nums(data.get("measured_percent", []))
    if not target or len(target) != len(measured):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.6))
    ax.plot([0, 100], [0, 100], color="#999", lw=1, label="ideal")
    tol = data.get("tolerance_percent")
    if tol is not None:
        ax.fill_between([0, 100], [-float(tol), 100 - float(tol)],
                        [float(tol), 100 + float(tol)], color="#2e7d32", alpha=0.12,
                        label=f"±{tol} %")
    ax.scatter(target, measured, color="#1565c0", zorder=3, label="measured")
    extra = data.get("extra")
    for (label, ys), marker in zip(extra.items() if isinstance(extra, dict) else (),
                                   ("o", "s", "^", "D")):
        ys = _nums(ys)
        if len(ys) == len(target):
            ax.scatter(target, ys, facecolors="none", edgecolors="#ef6c00", marker=marker,
                       zorder=3, label=str(label))
    ax.set_xlabel("perfControl (%)")
    ax.set_ylabel("measured compute share (%)")
    ax.set_xlim(*_span(target, 0, 105))
    ax.set_ylim(*_span(measured + [y for ys in (extra.values() if isinstance(extra, dict)
                                                 else ()) for y in _nums(ys)], 0, 105))
    ax.legend(frameon=False, fontsize=8)
    return _svg(fig)


def delivered_share(data: dict[str, Any]) -> str | None:
    """Several measures of what a throttled job got (``series``: {label: [% or None per
    target]}) against the requested ``target_percent``, the ideal line and a tolerance band.
    A missing value is left out, never drawn as 0; the axes grow to show every point."""
    target = _nums(data.get("target_percent", []))
    lines = data.get("series")
    if not target or not isinstance(lines, dict):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 4.0))
    ax.plot([0, 100], [0, 100], color="#999", lw=1, label="ideal")
    tol = data.get("tolerance_percent")
    if tol is not None:
        ax.fill_between([0, 100], [-float(tol), 100 - float(tol)],
                        [float(tol), 100 + float(tol)], color="#2e7d32", alpha=0.12,
                        label=f"±{tol} pp")
    top = 105.0
    for (label, ys), marker in zip(lines.items(), ("o", "s", "^", "D", "v")):
        pts = [(x, float(y)) for x, y in zip(target, ys if isinstance(ys, list) else [])
               if y is not None]
        if pts:
            top = max(top, max(y for _, y in pts) + 5)
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker=marker, ls=":", lw=0.8,
                    label=str(label), zorder=3)
    ax.set_xlabel("perfControl (%)")
    ax.set_ylabel("delivered, % of the job at perfControl 100")
    ax.set_xlim(0, 105)
    ax.set_ylim(0, top)
    ax.legend(frameon=False, fontsize=7)
    return _svg(fig)


def series(data: dict[str, Any]) -> str | None:
    xs = _nums(data.get("x", []))
    lines = data.get("series")
    if not xs or not isinstance(lines, dict):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for label, ys in lines.items():
        ys = _nums(ys)
        if len(ys) == len(xs):
            ax.plot(xs, ys, ".-", label=str(label))
    ax.set_xlabel(str(data.get("xlabel", "")))
    ax.set_ylabel(str(data.get("ylabel", "")))
    ax.legend(frameon=False, fontsize=8)
    return _svg(fig)


def _num_or_none(values: Any) -> list[float | None]:
    if not isinstance(values, Sequence) or isinstance(values, str):
        return []
    return [None if v is None else float(v) for v in values]


def bars(data: dict[str, Any]) -> str | None:
    """Grouped bars: ``categories`` × ``series``, with optional targets (see the module doc)."""
    cats = [str(c) for c in data.get("categories", []) or []]
    groups = data.get("series")
    if not cats or not isinstance(groups, dict):
        return None
    rows = [(str(k), _num_or_none(v)) for k, v in groups.items()]
    rows = [(k, v) for k, v in rows if len(v) == len(cats)]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.1 * len(cats) * max(1, len(rows)) ** 0.5 + 2),
                                    3.6))
    width = 0.8 / len(rows)
    colours = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a")
    for j, (label, ys) in enumerate(rows):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(cats))]
        shown = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if shown:
            ax.bar([x for x, _ in shown], [y for _, y in shown], width=width * 0.92,
                   color=colours[j % len(colours)], label=label)
            for x, y in shown:
                ax.annotate(f"{y:.3g}", (x, y), ha="center", va="bottom", fontsize=7,
                            xytext=(0, 2), textcoords="offset points")
    targets = _num_or_none(data.get("targets", []))
    if len(targets) == len(cats):
        drawn = False
        for i, t in enumerate(targets):
            if t is not None:
                ax.hlines(t, i - 0.45, i + 0.45, colors="#c62828", linestyles="--", lw=1.2,
                          label=None if drawn else "target")
                drawn = True
    if data.get("target") is not None:
        ax.axhline(float(data["target"]), color="#c62828", ls="--", lw=1,
                   label=str(data.get("target_label") or "target"))
    ax.axhline(0, color="#555", lw=0.6)
    ax.set_xticks(range(len(cats)), cats, fontsize=8)
    ax.set_ylabel(str(data.get("ylabel", "")))
    ax.legend(frameon=False, fontsize=8)
    return _svg(fig)


def benchmarks(results: list[dict[str, Any]]) -> str | None:
    # One-round experiments that report their own figures (extra_info["figures"]) are
    # tabulated, not drawn: their time is the whole experiment's, not a call's.
    rows = [r for r in results if r.get("stats", {}).get("mean") is not None
            and not (r["stats"].get("rounds") == 1
                     and (r.get("extra_info") or {}).get("figures"))]
    if not rows:
        return None
    plt = _pyplot()
    rows = rows[:40]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.0))
    names = [str(r["name"]) for r in rows]
    mean = [r["stats"]["mean"] * 1e6 for r in rows]
    lo = [m - r["stats"]["min"] * 1e6 for m, r in zip(mean, rows)]
    hi = [r["stats"]["max"] * 1e6 - m for m, r in zip(mean, rows)]
    ax.barh(range(len(rows)), mean, height=0.6, xerr=[lo, hi], color="#1565c0", ecolor="#555",
            capsize=2)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.set_xlabel("time per call (µs): mean, bars min-max")
    if max(mean) / max(min(mean), 1e-9) > 100:
        ax.set_xscale("log")
    return _svg(fig)


RENDERERS = {"e2e_timeline": e2e_timeline, "idle_slots": idle_slots,
             "throttle_accuracy": throttle_accuracy, "delivered_share": delivered_share}
TITLES = {"e2e_timeline": "Memory and step period across the mid-run config change",
          "idle_slots": "Idle-slot distribution",
          "throttle_accuracy": "Throttle accuracy",
          "delivered_share": "Delivered share, measured from outside"}


def figures(doc: dict[str, Any]) -> list[dict[str, str]]:
    """``[{"name", "title", "nodeid", "svg"}]`` for the artifacts and benchmarks present."""
    out: list[dict[str, str]] = []
    counts: dict[str, int] = {}
    for art in doc.get("artifacts", []):
        name = art["name"]
        if counts.get(name, 0) >= MAX_PER_NAME:
            continue
        fn = RENDERERS.get(name) or (bars if isinstance(art["data"], dict)
                                     and "categories" in art["data"] else series)
        given = art["data"].get("title") if isinstance(art["data"], dict) else None
        title = TITLES.get(name) or str(given or name.replace("_", " "))
        machine = art["data"].get("machine") if isinstance(art["data"], dict) else None
        if machine:
            title = f"{title}: {machine}"
        try:
            svg = fn(art["data"]) if isinstance(art["data"], dict) else None
        except Exception as exc:  # bad data from a test: say so instead of failing the report
            svg = None
            out.append({"name": name, "title": title, "nodeid": art["nodeid"], "svg": "",
                        "error": f"cannot plot: {exc}"})
        if svg:
            counts[name] = counts.get(name, 0) + 1
            out.append({"name": name, "title": title, "nodeid": art["nodeid"], "svg": svg})
    if doc.get("benchmarks"):
        try:
            svg = benchmarks(doc["benchmarks"])
        except Exception as exc:  # matplotlib missing, or bad figures: said, not dropped
            out.append({"name": "benchmarks", "title": "Benchmarks", "nodeid": "", "svg": "",
                        "error": f"cannot plot: {exc}"})
            svg = None
        if svg:
            out.append({"name": "benchmarks", "title": "Benchmarks", "nodeid": "", "svg": svg})
    return out
