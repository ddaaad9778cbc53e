"""``<fork>.workload``: the reference workload, run with the fork's patch in force."""

from reference_runtime.workload import *  # noqa: F401,F403
