"""GPU clocks in every report: read through NVML when a run starts and when it ends."""

from __future__ import annotations

import sys
import types

from reports import environment
from reports.render_md import target_text


def fake_pynvml(sm: list[int]) -> types.ModuleType:
    """An NVML with one GPU whose SM clock reads the values of ``sm`` in turn."""
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 0, 1
    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"gpu{i}"
    nv.nvmlDeviceGetClockInfo = lambda h, kind: sm.pop(0) if kind == 0 else 2619
    nv.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    return nv


def test_clocks_are_read_per_gpu(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([345, 1980]))
    start, end = environment.gpu_clocks(), environment.gpu_clocks()
    assert start == [{"index": 0, "sm_mhz": 345, "memory_mhz": 2619, "sm_max_mhz": 1980}]
    assert end[0]["sm_mhz"] == 1980


def test_no_nvml_no_clocks(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)      # import fails
    assert environment.gpu_clocks() is None


def test_the_target_line_shows_the_clocks_at_start_and_end() -> None:
    target = {"kind": "gpu", "devices": [{}], "model": "NVIDIA H100", "driver_version": "580",
              "cuda_version": "13.0", "note": None,
              "extras": {"gpu_clocks": {
                  "start": [{"index": 0, "sm_mhz": 345, "memory_mhz": 2619, "sm_max_mhz": 1980}],
                  "end": [{"index": 0, "sm_mhz": 1755, "memory_mhz": 2619, "sm_max_mhz": 1980}]}}}
    text = target_text(target)
    assert "SM 345/1755 MHz (max 1980)" in text and "memory 2619/2619 MHz" in text, text
    assert "clocks" not in target_text(target, short=True)
    target["extras"] = {}
    assert "clocks" not in target_text(target)
