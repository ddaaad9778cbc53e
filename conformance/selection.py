"""pytest plugin: run part of the suite by clause or by an earlier report, and say so.

- ``--clause ID`` (repeatable) keeps the tests that name clause ``ID`` (``@pytest.mark.clause``);
  an area (``BFC``, or ``BFC-``) keeps the tests of every clause of that area. An ID that is
  neither a clause of SPEC.md nor an area is a usage error (exit status 4) before any test.
- ``--rerun REPORT`` keeps the tests that did not pass in the run ``REPORT`` (its
  ``certification.json`` or run folder): FAIL, ERROR, TIMEOUT, CRASH, WAIVED (it failed; a
  waiver only excused it) and NOT_RUN. SKIPPED and NOT_SUPPORTED tests are not rerun: they
  are skipped again on the same setup. ``python -m reports rerun REPORT`` builds the command.
- ``--lf`` (``--last-failed``): the suite keeps pytest's cache provider off (the report is
  the record of a run, and a checkout stays clean), so ``--lf`` means ``--rerun`` of the
  newest complete run under the report folder (``<report-dir>/latest``). Without such a
  report, ``--lfnf all`` (pytest's default) runs every test, as a complete run, and
  ``--lfnf none`` runs none. With the cache provider enabled, pytest's own ``--lf`` applies.

A run that kept part of the suite is INCOMPLETE, and its report names the selection
(``selection_reasons``); it moves the ``latest-partial`` pointer, never ``latest``
(reports/writer.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance import spec
from reports.reading import NOT_PASSED  # noqa: F401  (the outcomes rerun)

_KEY = pytest.StashKey["Selection"]()


@dataclass
class Selection:
    clauses: frozenset[str] | None = None       # keep tests naming one of these
    nodeids: frozenset[str] | None = None       # keep these tests (from a report)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.clauses is not None or self.nodeids is not None

    def keeps(self, item: pytest.Item) -> bool:
        if self.nodeids is not None and item.nodeid not in self.nodeids:
            return False
        if self.clauses is not None:
            named = {c for m in item.iter_markers("clause") for c in m.args}
            return bool(named & self.clauses)
        return True


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("antman-selection", "AntMan: run part of the suite")
    group.addoption("--clause", action="append", dest="antman_clauses", default=None,
                    metavar="ID",
                    help="run the tests of this SPEC.md clause, or of every clause of an area "
                         "(BFC); repeatable. The verdict is then INCOMPLETE")
    group.addoption("--rerun", dest="antman_rerun", default=None, metavar="REPORT",
                    help="run the tests that did not pass in REPORT (a certification.json or "
                         "run folder); see python -m reports rerun")


def selected_clauses(ids: list[str], known: dict[str, spec.Clause]) -> frozenset[str]:
    """The clause IDs ``ids`` name (a clause, or an area: all its clauses); an unknown ID is
    a ``pytest.UsageError``."""
    areas: dict[str, list[str]] = {}
    for cid in known:
        areas.setdefault(cid.rsplit("-", 1)[0], []).append(cid)
    chosen: set[str] = set()
    unknown = []
    for given in ids:
        text = given.strip()
        if text in known:
            chosen.add(text)
        elif text.rstrip("-").upper() in areas:
            chosen.update(areas[text.rstrip("-").upper()])
        else:
            unknown.append(given)
    if unknown:
        raise pytest.UsageError(
            f"--clause {', '.join(map(repr, unknown))}: no such clause or area in SPEC.md "
            f"(areas: {', '.join(sorted(areas))})")
    return frozenset(chosen)


def not_passed(doc: dict) -> list[str]:
    """Node IDs of the tests of a certification document that did not pass (``NOT_PASSED``)."""
    from reports.reading import tests_not_passed
    return tests_not_passed(doc)


def report_base(config: pytest.Config) -> Path:
    """The folder run folders go to (``--report-dir``, default ``reports/out``)."""
    base = config.getoption("--report-dir", default=None)
    path = Path(base) if base else config.rootpath / "reports" / "out"
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def _from_report(path: Path, option: str) -> tuple[frozenset[str], str]:
    from reports.reading import read_report
    from reports.untrusted import report_file
    try:
        doc = read_report(path)
        ids = not_passed(doc)
    except ValueError as exc:                    # ReportError too
        raise pytest.UsageError(f"{option} {path}: {exc}") from None
    run = str(doc.get("run_id") or report_file(path))
    return frozenset(ids), f"{option}: the {len(ids)} test(s) that did not pass in {run}"


def build(config: pytest.Config) -> Selection:
    sel = Selection()
    ids = config.getoption("antman_clauses", default=None)
    if ids:
        sel.clauses = selected_clauses(ids, spec.load_clauses())
        sel.reasons.append(f"--clause {' '.join(ids)} ({len(sel.clauses)} clause(s))")
    rerun = config.getoption("antman_rerun", default=None)
    if rerun:
        path = Path(rerun)
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        sel.nodeids, reason = _from_report(path, "--rerun")
        sel.reasons.append(reason)
    elif getattr(config.option, "lf", False):
        if config.pluginmanager.has_plugin("cacheprovider"):
            sel.reasons.append("--last-failed")            # pytest's own, from its cache
        else:
            latest = report_base(config) / "latest"
            if latest.exists():
                ids, reason = _from_report(latest, "--last-failed")
                if ids or getattr(config.option, "last_failed_no_failures", "all") == "none":
                    sel.nodeids = ids
                    sel.reasons.append(reason)
                else:
                    sel.notes.append(f"--last-failed: every test of {latest} passed; "
                                     f"running every test")
            elif getattr(config.option, "last_failed_no_failures", "all") == "none":
                sel.nodeids = frozenset()
                sel.reasons.append(f"--last-failed --lfnf none: no complete run in "
                                   f"{latest.parent}")
            else:
                sel.notes.append(f"--last-failed: no complete run in {latest.parent} to "
                                 f"rerun from; running every test")
    return sel


def selection(config: pytest.Config) -> Selection:
    """The run's selection (computed at configuration)."""
    return config.stash.get(_KEY, Selection())


def reasons(config: pytest.Config) -> list[str]:
    """What this plugin's options selected, for the report's ``selection_reasons``."""
    return list(selection(config).reasons)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    opt = config.option
    if getattr(opt, "help", False) or getattr(opt, "version", False):
        return
    config.stash[_KEY] = build(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sel = selection(config)
    if not sel.active:
        return
    kept = [i for i in items if sel.keeps(i)]
    if len(kept) != len(items):
        dropped = [i for i in items if not sel.keeps(i)]
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> list[str]:
    sel = selection(config)
    return [f"antman selection: {line}" for line in (*sel.reasons, *sel.notes)]
