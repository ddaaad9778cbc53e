"""Re-emit the log records of TensorFlow (and of the AntMan layer's C++) on Python loggers.

TensorFlow 2.21 logs through absl to stderr. The shim keeps a copy of every record of WARNING
and above in the process (shim/tf_log.h); ``forward_tf_log`` drains them onto
``adapters.tensorflow_bfc.tensorflow`` (TensorFlow's own) and ``adapters.tensorflow_bfc.antman``
(the AntMan layer, shim/gpu_*.cc and shim/antman_env.cc), keeping their file, line, text and
severity. The adapter calls it after every call that may have logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .loader import shim

__all__ = ["TF_LOGGER", "ANTMAN_LOGGER", "forward_tf_log"]

TF_LOGGER = logging.getLogger("adapters.tensorflow_bfc.tensorflow")
ANTMAN_LOGGER = logging.getLogger("adapters.tensorflow_bfc.antman")
ANTMAN_SOURCES = ("antman_env.cc", "gpu_vmem_allocator.cc", "gpu_adjustable_allocator.cc")
_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}

#: (severity, verbosity, file, line, message) as shim.drain_log() gives them.
Record = tuple[int, int, str, int, str]


def forward_tf_log(drop: Callable[[Record], bool] | None = None) -> None:
    """Emit the records kept since the last drain; ``drop`` leaves some out."""
    if not shim.log_pending():
        return
    for record in shim.drain_log():
        if drop is not None and drop(record):
            continue
        severity, verbosity, path, line, message = record
        level = logging.DEBUG if verbosity >= 0 else _LEVELS.get(severity, logging.ERROR)
        logger = ANTMAN_LOGGER if path.rsplit("/", 1)[-1] in ANTMAN_SOURCES else TF_LOGGER
        if logger.isEnabledFor(level):
            logger.handle(logger.makeRecord(logger.name, level, path, line, message, None,
                                            None))
