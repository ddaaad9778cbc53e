"""``python -m conformance new-fork NAME DIR``: see conformance/forking.py."""

import sys

from conformance.forking import main

sys.exit(main())
