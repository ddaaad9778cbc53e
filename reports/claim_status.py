"""The status of a benchmark figure against its target, in the terminal and the report alike.

- ``met`` / ``missed``: a GPU figure (``ANTMAN_DEVICE=cuda``, or the cuda backend, and a GPU
  named by NVML) judged against its target;
- ``invalid``: a GPU figure with a target that could not be judged (no value, or no verdict);
- ``smoke``: a figure measured on the simulated device (a CPU): the targets are GPU targets,
  so it is never compared with its target;
- ``-``: a figure without a target.
"""

from __future__ import annotations

import math
from typing import Any

MET, MISSED, INVALID, SMOKE, NO_TARGET = "met", "missed", "invalid", "smoke", "-"
SIMULATED = "simulated: not a GPU figure"


def card(extra_info: dict[str, Any]) -> str | None:
    """The GPU a benchmark measured on, or None on the simulated device."""
    on_cuda = (str(extra_info.get("device_env", "")).strip().lower() == "cuda"
               or extra_info.get("backend") == "cuda")
    model = extra_info.get("gpu_model")
    return str(model) if on_cuda and model else None


def status(figure: dict[str, Any], extra_info: dict[str, Any]) -> str:
    if not figure.get("target"):
        return NO_TARGET
    if card(extra_info) is None:
        return SMOKE
    if not finite(figure.get("value")) or figure.get("met") is None:
        return INVALID
    return MET if figure["met"] else MISSED


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
