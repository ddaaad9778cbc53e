"""``python -m reports``: tools around the certification report.

- ``render DIR``: rewrite certification.md/html (and figures) of a run folder from its JSON.
- ``validate FILE``: check a certification.json against the schema (exit 1 if invalid).
- ``mustpass [--write] [--check]``: the must-pass list generated from SPEC.md and the collected
  conformance tests (print it, write it, or exit 1 when the file differs).
- ``coverage [--tests] [--output FILE]``: clause -> tests (or test -> clauses, capabilities)
  of the collected conformance suite, as JSON.
- ``diff OLD NEW``: clause outcomes that changed between two runs (``certification.json`` or
  run folders), regressions first; exit 1 on a regression (reports/diff.py).
- ``matrix REPORT... -o DIR``: one HTML and Markdown matrix, clause by run (reports/matrix.py).
- ``bundle RUN_DIR [-o FILE]`` and ``verify BUNDLE``: a certification packed with what it was
  judged by, and its verification (reports/bundle.py, reports/verify.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance import spec


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
    """Node ID -> {clauses, capabilities, gpu} of the conformance suite (collection only)."""
    import pytest
    collector = _Collector()
    args = ["--collect-only", "-qq", "-p", "no:randomly", "--no-report",
            *(paths or [str(spec.ROOT / "conformance")])]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("render")
    p.add_argument("run_dir", type=Path)
    p = sub.add_parser("validate")
    p.add_argument("file", type=Path)
    p = sub.add_parser("mustpass")
    p.add_argument("--write", action="store_true")
    p.add_argument("--check", action="store_true")
    p = sub.add_parser("coverage")
    p.add_argument("--tests", action="store_true", help="per test instead of per clause")
    p.add_argument("--output", type=Path, help="write the JSON here instead of stdout")
    p = sub.add_parser("diff", help="clause outcomes that changed between two runs; exit 1 on "
                                    "a regression")
    p.add_argument("old", type=Path, help="certification.json or run folder of the earlier run")
    p.add_argument("new", type=Path, help="certification.json or run folder of the later run")
    from reports import bundle, matrix
    matrix.add_parser(sub)
    bundle.add_parsers(sub)
    args = parser.parse_args(argv)
    if getattr(args, "tool", None) is not None:
        return args.tool(args)

    if args.command == "diff":
        from reports import diff
        return diff.main(args.old, args.new)

    if args.command == "render":
        from reports import writer
        doc = json.loads((args.run_dir / "certification.json").read_text(encoding="utf-8"))
        names = writer.render_all(doc, args.run_dir)
        print(f"wrote {args.run_dir / names['html']}")
        return 0
    if args.command == "validate":
        from reports import writer
        errors = writer.validation_errors(json.loads(args.file.read_text(encoding="utf-8")))
        for e in errors:
            print(e)
        print("valid" if not errors else f"{len(errors)} error(s)")
        return 1 if errors else 0
    if args.command == "coverage":
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
            args.output.write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
        return 0
    # mustpass
    from reports import mustpass as mp
    path = mp.official_path()
    current = mp.load(path) if path.exists() else None
    profiles = current.profiles if current else mp.DEFAULT_PROFILES
    advisory = [c for c, s in current.sections.items() if s.kind == mp.ADVISORY] if current else []
    text = mp.generate(spec.load_clauses(), collect_suite(), profiles, advisory)
    if args.write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if args.check:
        same = current is not None and path.read_text(encoding="utf-8") == text
        print(f"{path} is {'up to date' if same else 'OUT OF DATE'}")
        return 0 if same else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
