"""Registers the suite's plugins (conformance/plugin.py, reports/plugin.py) and fixture modules."""

import os

# One BLAS thread per process: the suite runs several processes (xdist, workers, co-tenants)
# on small machines, where multithreaded BLAS makes small steps many times slower.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

pytest_plugins = [
    "conformance.plugin",
    "conformance.device_choice",
    "reports.plugin",
    "fixtures.virtual_clock",
    "fixtures.oom",
    "fixtures.env_toggles",
    "fixtures.threads",
    "fixtures.config_writer",
    "fixtures.status_reader",
    "fixtures.nvml",
    "fixtures.cotenant",
    "fixtures.gpu_isolation",
    "fixtures.worker",
]
