"""The certification report of a conformance run."""
