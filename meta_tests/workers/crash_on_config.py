"""Fake worker that aborts when GPU_CONFIG_FILE changes, as the original AntMan does on a
config it cannot parse (expected: CRASH for the clauses that rewrite the config, PASS for
the others)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402


def abort() -> None:
    sys.stderr.write("json_value.cpp: Assertion `type() == objectValue' failed.\n")
    sys.stderr.flush()
    os.abort()


_fake.run(on_config_change=abort)
