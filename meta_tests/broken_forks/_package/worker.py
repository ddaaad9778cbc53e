"""``python -m <fork>.worker``: the reference worker with the fork's patch; its hello names
the fork."""

import runpy
import sys

import reference_runtime

fork = sys.modules[__spec__.parent]        # imported (patched) before this submodule ran
reference_runtime.NAME = fork.NAME
runpy.run_module("reference_runtime.worker", run_name="__main__", alter_sys=True)
