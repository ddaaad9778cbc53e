"""``python -m conformance verify [--repeat N] [PYTEST ARGS...]``: the stability gate.

Runs the conformance suite (or the paths given) N times as N whole passes (``--repeat N``,
reports/stability.py, default 3) with ``--require-certified``, so that a FLAKY test fails the
command (for the reference runtime every FLAKY test is NOT CERTIFIED: a defect of the suite).
Other arguments go to pytest unchanged; the exit status is pytest's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from conformance import spec

DEFAULT_REPEAT = 3


def command(argv: list[str]) -> list[str]:
    parser = argparse.ArgumentParser(prog="python -m conformance verify",
                                     description=__doc__.splitlines()[2])
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, metavar="N",
                        help=f"runs of every test (default {DEFAULT_REPEAT})")
    args, rest = parser.parse_known_args(argv)
    if args.repeat < 2:
        parser.error("--repeat must be at least 2 to tell a flaky test from a stable one")
    given = [a for a in rest if not a.startswith("-") and ("::" in a or Path(a).exists())]
    paths = [] if given else [str(spec.ROOT / "conformance")]
    return [sys.executable, "-m", "pytest", *paths, "--repeat", str(args.repeat),
            "--require-certified", *rest]


def main(argv: list[str] | None = None) -> int:
    return subprocess.call(command(sys.argv[1:] if argv is None else argv))
