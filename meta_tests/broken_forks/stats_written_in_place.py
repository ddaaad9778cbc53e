"""Breaks STAT-8 (atomic replacement): the statistics file is rewritten in place.

``GPUStatistics.dump_gpu_statistics`` truncates the status file and writes the new
document into it (``open(path, "w")``), as the original's ``std::ofstream`` does
(D-STAT-2), instead of writing a temporary file, fsyncing it and renaming it over the
path: a concurrent reader can see an empty or partial file.

The suite's concurrent reader fails the test and, again, the teardown of its fixture, so
the clause is reported ERROR.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_statistics as _stat

from meta_tests import broken_forks as _forks

NAME = "broken-stats-written-in-place"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "STAT-8"
MODULES = ("conformance/test_statistics.py",)
OUTCOMES = ("ERROR",)

_forks.log_as(__name__)
_forks.patch_source(_stat.GPUStatistics, "dump_gpu_statistics", (
    "            _replace_atomically(target, text.encode(\"utf-8\"))\n",
    "            with open(target, \"w\", encoding=\"utf-8\") as f:   # the fork: in place\n"
    "                f.write(text)\n"))
