"""Fake worker whose step records lack device_limit (expected: FAIL)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _fake  # noqa: E402


def drop_limit(record: dict) -> dict:
    record.pop("device_limit")
    return record


_fake.run(mangle=drop_limit)
