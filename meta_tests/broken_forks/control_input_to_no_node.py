"""Breaks EXEC-2 (graph validation): a control input that names no node is accepted.

``Graph.validate`` checks that every data input names a node of the graph, but not the
control inputs (``^name``): a graph whose node waits on ``^ghost`` passes validation, and
the session fails later with an error that is not a ``GraphError`` naming the input.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import graph as _graph

from meta_tests import broken_forks as _forks

NAME = "broken-control-input-to-no-node"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "EXEC-2"
MODULES = ("conformance/test_executor.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_graph.Graph, "validate", (
    "            for src in node.control_inputs:\n"
    "                if src not in self._nodes:\n"
    "                    raise GraphError(f\"node {node.name!r} ({node.op}): control input \"\n"
    "                                     f\"'^{src}' is not a node of the graph\")\n",
    "            pass                                # the fork: control inputs not checked\n"))
