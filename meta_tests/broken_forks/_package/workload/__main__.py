"""``python -m <fork>.workload``: the reference workload's command line, patched by the fork."""

import runpy

runpy.run_module("reference_runtime.workload", run_name="__main__", alter_sys=True)
