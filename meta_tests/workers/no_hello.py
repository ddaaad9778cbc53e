"""Fake worker that never writes its hello record (expected: TIMEOUT)."""
import sys
import time

sys.stderr.write("loading a very large framework...\n")
sys.stderr.flush()
while True:
    time.sleep(3600)
