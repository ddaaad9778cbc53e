"""``python -m reports``: tools around the certification report.

- ``render DIR``: rewrite certification.md/html (and figures) of a run folder from its JSON;
  exit 1 when a figure could not be drawn (each says why on stderr).
- ``validate FILE|DIR``: check a certification.json (or a run folder's) against the schema
  (exit 1 if invalid).
- ``mustpass [--write] [--check]``: the must-pass list generated from SPEC.md and the collected
  conformance tests (print it, write it, or exit 1 when the file differs).
- ``coverage [--tests] [--output FILE]``: clause -> tests (or test -> clauses, capabilities)
  of the collected conformance suite, as JSON (only the JSON on stdout).
- ``rerun REPORT [--print] [-- PYTEST ARGS]``: run again the tests that did not pass in a
  run (``--rerun REPORT``, conformance/selection.py), against the runtime it certified.
- ``diff OLD NEW``: clause outcomes that changed between two runs (``certification.json`` or
  run folders), regressions first; exit 1 on a regression (reports/diff.py).
- ``matrix REPORT... -o DIR``: one HTML and Markdown matrix, clause by run (reports/matrix.py).
- ``bundle RUN_DIR [-o FILE]`` and ``verify BUNDLE``: a certification packed with what it was
  judged by, and its verification (reports/bundle.py, reports/verify.py).

Files given are read as regular files of bounded size (reports/untrusted.py). A file that
cannot be read, a folder that cannot be written or a missing dependency is one line on
stderr and exit status 2 (``diff`` keeps its own rules).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance import spec
from reports import reading
from reports.untrusted import ReportError, report_file


class CommandError(Exception):
    """What stops a subcommand, in one line (exit status 2)."""


#: What each dependency is for, and where it comes from.
DEPENDENCIES = {"jsonschema": "the schema check",
                "pytest": "collecting and running the conformance suite",
                "matplotlib": "the report's figures"}


def require(module: str) -> None:
    """A ``CommandError`` naming ``module`` when it cannot be imported."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise CommandError(f"needs {module} for {DEPENDENCIES.get(module, 'this command')}, "
                           f"which is not installed (pip install {module})")


class _Collector:
    def __init__(self) -> None:
        self.tests: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.errors.append(report.nodeid)

    def pytest_collection_finish(self, session) -> None:
        from reports.plugin import item_meta
        self.tests = {item.nodeid: item_meta(item) for item in session.items}


def collect_suite(paths: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Node ID -> {clauses, capabilities, gpu} of the conformance suite (collection only).
    pytest's own output goes to stderr, so stdout carries only what a command prints."""
    require("pytest")
    import pytest
    collector = _Collector()
    args = ["--collect-only", "-qq", "-p", "no:randomly", "--no-report",
            *(paths or [str(spec.ROOT / "conformance")])]
    with contextlib.redirect_stdout(sys.stderr):
        code = pytest.main(args, plugins=[collector])
    if collector.errors or code not in (0, 5):
        raise SystemExit(f"collection failed (exit {code}): {collector.errors}")
    return collector.tests


def collect_suite_subprocess() -> dict[str, dict[str, Any]]:
    """``collect_suite`` in a fresh interpreter (safe to call from inside a pytest run)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tests.json"
        done = subprocess.run([sys.executable, "-m", "reports", "coverage", "--tests",
                               "--output", str(out)],
                              cwd=spec.ROOT, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"collection failed:\n{done.stdout[-3000:]}\n"
                               f"{done.stderr[-3000:]}")
        return json.loads(out.read_text(encoding="utf-8"))


def write_text(path: Path, text: str) -> None:
    from reports import writer
    try:
        writer.atomic_write(path, text)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None


def rerun_command(report: Path, doc: dict[str, Any], extra: list[str]) -> list[str]:
    """The pytest command that runs again the tests of ``doc`` (read from ``report``) that
    did not pass, against the runtime it certified, writing beside it."""
    path = report_file(report).resolve()
    rt = doc.get("runtime") if isinstance(doc.get("runtime"), dict) else {}
    inv = doc.get("invocation") if isinstance(doc.get("invocation"), dict) else {}
    exp = doc.get("expectations") if isinstance(doc.get("expectations"), dict) else {}
    cmd = [sys.executable, "-m", "pytest", "conformance", "--rerun", str(path),
           "--report-dir", str(path.parent.parent)]
    module, worker = rt.get("module"), rt.get("worker_cmd")
    if isinstance(module, str) and module and module != "conformance.blackbox":
        cmd += ["--runtime", module]
    if isinstance(worker, str) and worker:
        cmd += ["--worker-cmd", worker]
    if isinstance(exp.get("path"), str):
        cmd += ["--expectations", exp["path"]]
    if isinstance(inv.get("hypothesis_profile"), str):
        cmd += [f"--hypothesis-profile={inv['hypothesis_profile']}"]
    return [*cmd, *extra]


def cmd_rerun(args: argparse.Namespace) -> int:
    doc = reading.read_report(args.report)
    try:
        ids = reading.tests_not_passed(doc)
    except ValueError as exc:
        raise CommandError(f"{report_file(args.report)}: {exc}") from None
    extra = list(args.pytest_args)
    if not ids:
        print(f"nothing to rerun: every test of {report_file(args.report)} passed "
              f"(or was skipped)")
        return 0
    if not args.print_only:
        require("pytest")
    cmd = rerun_command(args.report, doc, extra)
    print(f"{len(ids)} test(s) did not pass; rerunning them:", file=sys.stderr, flush=True)
    print(shlex.join(cmd), flush=True)
    if args.print_only:
        return 0
    return subprocess.run(cmd, cwd=spec.ROOT).returncode


def cmd_render(args: argparse.Namespace) -> int:
    from reports import writer
    doc = reading.read_report(args.run_dir)
    if not args.run_dir.is_dir():
        raise CommandError(f"{args.run_dir} is not a run folder")
    if (doc.get("artifacts") or doc.get("benchmarks")) \
            and importlib.util.find_spec("matplotlib") is None:
        print("render: matplotlib is not installed: the report is written without its "
              "figures (pip install matplotlib)", file=sys.stderr)
    try:
        names, failed = writer.render_all(doc, args.run_dir), []
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CommandError(f"{report_file(args.run_dir)} is not a certification "
                           f"report this version can render ({type(exc).__name__}: {exc})"
                           ) from None
    except OSError as exc:
        raise CommandError(f"cannot write into {args.run_dir}: {exc.strerror or exc}") from None
    failed = names.get("failed_figures") or []
    for line in failed:
        print(f"render: figure not drawn: {line}", file=sys.stderr)
    print(f"wrote {args.run_dir / names['html']}")
    return 1 if failed else 0


def cmd_validate(args: argparse.Namespace) -> int:
    require("jsonschema")
    from reports import writer
    doc = reading.read_json(report_file(args.file))
    try:
        errors = writer.validation_errors(doc)
    except RecursionError:
        raise CommandError(f"{args.file} is nested too deeply to be a report") from None
    for e in errors:
        print(e)
    print("valid" if not errors else f"{len(errors)} error(s)")
    return 1 if errors else 0


def cmd_coverage(args: argparse.Namespace) -> int:
    tests = collect_suite()
    if args.tests:
        out: Any = tests
    else:
        out = {cid: [] for cid in spec.load_clauses()}
        for nodeid, meta in tests.items():
            for cid in meta["clauses"]:
                out.setdefault(cid, []).append(nodeid)
    text = json.dumps(out, indent=1) + "\n"
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_mustpass(args: argparse.Namespace) -> int:
    from reports import mustpass as mp
    path = mp.official_path()
    try:
        current = mp.load(path) if path.exists() else None
    except (OSError, mp.MustPassError) as exc:
        raise CommandError(f"{path}: {exc}") from None
    profiles = current.profiles if current else mp.DEFAULT_PROFILES
    advisory = [c for c, s in current.sections.items() if s.kind == mp.ADVISORY] if current else []
    text = mp.generate(spec.load_clauses(), collect_suite(), profiles, advisory)
    if args.write:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        print(f"wrote {path}")
        return 0
    if args.check:
        same = current is not None and reading.read_text(path) == text
        print(f"{path} is {'up to date' if same else 'OUT OF DATE'}")
        return 0 if same else 1
    sys.stdout.write(text)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m reports",
                                  description="Tools around the certification report.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("render", help="rewrite a run folder's Markdown, HTML and figures",
                       description="Rewrite certification.md, certification.html and the "
                                   "figures of a run folder from its certification.json; "
                                   "exit 1 when a figure could not be drawn.")
    p.add_argument("run_dir", type=Path, help="the run folder (reports/out/latest, ...)")
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("validate", help="check a certification.json against its schema",
                       description="Check a certification.json, or a run folder's, against "
                                   "reports/schema/certification.schema.json; exit 1 if "
                                   "invalid.")
    p.add_argument("file", type=Path, help="certification.json or a run folder")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("mustpass", help="the must-pass list generated from SPEC.md and the tests",
                       description="Print the must-pass list generated from SPEC.md and the "
                                   "collected conformance tests, write it, or check it.")
    p.add_argument("--write", action="store_true", help="write conformance/mustpass/<spec>.txt")
    p.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    p.set_defaults(func=cmd_mustpass)
    p = sub.add_parser("coverage", help="clause -> tests of the conformance suite, as JSON",
                       description="Clause -> tests (or test -> clauses and capabilities) of "
                                   "the collected conformance suite, as JSON on stdout.")
    p.add_argument("--tests", action="store_true", help="per test instead of per clause")
    p.add_argument("--output", type=Path, help="write the JSON here instead of stdout")
    p.set_defaults(func=cmd_coverage)
    p = sub.add_parser("rerun", help="run again the tests that did not pass in a run",
                       description="Print and run the pytest command that runs again the "
                                   "tests that did not pass in REPORT (FAIL, ERROR, TIMEOUT, "
                                   "CRASH, WAIVED, NOT_RUN), against the runtime it certified; "
                                   "its report goes beside REPORT (latest-partial). Arguments "
                                   "after -- go to pytest.",
                       usage="python -m reports rerun [-h] [--print] REPORT [-- PYTEST ARGS]")
    p.add_argument("report", type=Path, help="certification.json or a run folder")
    p.add_argument("--print", dest="print_only", action="store_true",
                   help="print the command, do not run it")
    p.set_defaults(func=cmd_rerun)
    p = sub.add_parser("diff", help="clause outcomes that changed between two runs; exit 1 on "
                                    "a regression")
    p.add_argument("old", type=Path, help="certification.json or run folder of the earlier run")
    p.add_argument("new", type=Path, help="certification.json or run folder of the later run")
    from reports import bundle, matrix
    matrix.add_parser(sub)
    bundle.add_parsers(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:                            # pytest's arguments, for rerun
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    top = parser()
    args = top.parse_args(argv)
    if extra and args.command != "rerun":
        top.error(f"{args.command} takes no arguments after --")
    args.pytest_args = extra
    if args.command == "diff":
        from reports import diff
        return diff.main(args.old, args.new)
    try:
        return args.func(args)
    except (CommandError, ReportError) as exc:
        print(f"python -m reports {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
