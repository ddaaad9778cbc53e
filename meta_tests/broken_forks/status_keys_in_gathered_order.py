"""Breaks STAT-7 (document): the status file's objects keep the order the statistics were
gathered in.

``GPUStatistics.dump_gpu_statistics`` serialises the document without sorting its keys, so
a graph stored before another lists first whatever its name (``graph_2`` before
``graph_10``), and a GPU's figures keep their build order: the document parses the same, but
equal statistics no longer give equal text, and it is not what jsoncpp writes.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_statistics as _stat

from meta_tests import broken_forks as _forks

NAME = "broken-status-keys-in-gathered-order"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "STAT-7"
MODULES = ("conformance/test_statistics.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_stat.GPUStatistics, "dump_gpu_statistics", (
    "json.dumps(self.statistics(), indent=\"\\t\", sort_keys=True)",
    "json.dumps(self.statistics(), indent=\"\\t\")  # the fork: keys as gathered"))
