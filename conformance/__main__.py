"""``python -m conformance new-fork NAME DIR`` (conformance/forking.py) and
``python -m conformance verify [--repeat N] [PYTEST ARGS...]`` (conformance/verify.py)."""

import sys

if sys.argv[1:2] == ["verify"]:
    from conformance.verify import main as verify
    sys.exit(verify(sys.argv[2:]))

from conformance.forking import main

sys.exit(main())
