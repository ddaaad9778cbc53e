"""Fake worker whose child moves to a new session and keeps standard output open for ever.

The child outlives a process-group kill and keeps the pipe open, so end of file never comes:
the harness must still end the test, kill the child and report normally (expected: PASS for
the tests it runs, no process left)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

_fake.spawn_descendant(new_session=True, hold_stdout=True)
_fake.run()
