"""``python -m adapters.antman_1_15``: list the deviation switches and their state."""

from __future__ import annotations

import sys

from .deviations import DEVIATIONS, OFF_ENV_VAR, switches_from_env


def main() -> int:
    try:
        switches = switches_from_env()
    except ValueError as exc:
        print(f"adapters.antman_1_15: {exc}", file=sys.stderr)
        return 2
    for d in DEVIATIONS:
        state = ("not implemented" if d.not_implemented else
                 "on" if switches[d.id] else "off")
        extra = " (unobservable)" if d.unobservable else ""
        print(f"{d.id:11} {state:16} {','.join(d.clauses):22} {d.antman}{extra}")
    print(f"turn switches off with {OFF_ENV_VAR}=ID,ID,... (or all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
