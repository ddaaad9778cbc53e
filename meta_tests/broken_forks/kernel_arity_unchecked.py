"""Breaks EXEC-4 (kernel semantics): ApplyGradientDescent does not check its input count.

The kernel reads inputs 0, 1 and 2 without checking that there are three: with two it fails
with an ``IndexError`` turned into ``UnknownError`` instead of ``InvalidArgumentError``
naming the node, and with four the extra input is ignored and the step succeeds.
"""

import dataclasses as _dataclasses

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import kernels as _kernels

from meta_tests import broken_forks as _forks

NAME = "broken-kernel-arity-unchecked"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "EXEC-4"
MODULES = ("conformance/test_executor.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_registry = _kernels.OpRegistry.global_registry()     # the kernel was registered at import
_checked = _registry.lookup("ApplyGradientDescent")


def _unchecked(ctx, _compute=_checked.compute):
    ctx.require_inputs = lambda n: None               # the fork: the count is not checked
    _compute(ctx)


_registry._kernels["ApplyGradientDescent"] = _dataclasses.replace(_checked, compute=_unchecked)
