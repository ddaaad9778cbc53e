"""Registers the suite's plugins (conformance/plugin.py, reports/plugin.py) and fixture modules."""

pytest_plugins = [
    "conformance.plugin",
    "reports.plugin",
    "fixtures.virtual_clock",
    "fixtures.oom",
    "fixtures.env_toggles",
    "fixtures.threads",
    "fixtures.config_writer",
    "fixtures.status_reader",
    "fixtures.nvml",
    "fixtures.cotenant",
    "fixtures.worker",
]
