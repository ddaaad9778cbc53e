"""Fake worker that hangs after its hello record and ignores SIGTERM (expected: TIMEOUT)."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

signal.signal(signal.SIGTERM, signal.SIG_IGN)   # only SIGKILL ends it
_fake.hello()
_fake.sleep_forever()
