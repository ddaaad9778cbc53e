"""Fake worker that leaves processes the harness must find: a child in a new session that
does not hold standard output, and a double-forked daemon whose parent has exited
(expected: PASS for the tests it runs, no process left)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402

_fake.spawn_descendant(new_session=True, hold_stdout=False)
_fake.spawn_descendant(new_session=True, hold_stdout=False, double_fork=True)
_fake.run()
