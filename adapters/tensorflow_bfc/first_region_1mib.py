"""Diagnostic runtime: the tensorflow_bfc adapter with TensorFlow 1.15's first growth region.

Not a certification of TensorFlow as shipped (that is ``adapters.tensorflow_bfc``). TensorFlow
2.21 starts growth with a 2 MiB region where 1.15 started with 1 MiB (SPEC.md BFC-7), and
nearly every VMEM and ADJ scenario of the suite is laid out from the 1 MiB region, so on
TensorFlow as shipped they fail before they reach the AntMan layer. This runtime changes that
one thing, the way a port of AntMan to TensorFlow 2.21 could: right after TensorFlow builds a
BFC allocator with growth, its next region size is set to RoundedBytes(min(total, 1 MiB))
through the friend class. Everything else, TensorFlow's allocator and the C++ AntMan layer,
is the same code as the adapter's. Its run says how far the AntMan layer gets once the
regions are TensorFlow 1.15's (``tox -e certify-tf-bfc`` runs both; README).

Use: ``pytest conformance --runtime adapters.tensorflow_bfc.first_region_1mib``.
"""

from __future__ import annotations

from typing import Any

from . import *  # noqa: F401,F403 - the adapter's names; the allocators below replace its own
from . import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from . import antman as _antman
from . import bfc as _bfc
from .api import Allocator

MiB = 1 << 20

NAME = "tensorflow-bfc+first-region-1mib"


class BFCAllocator(_bfc.BFCAllocator):
    __slots__ = ()
    FIRST_GROWTH_REGION = MiB


class GPUBFCAllocator(_bfc.GPUBFCAllocator, BFCAllocator):
    __slots__ = ()
    FIRST_GROWTH_REGION = MiB


def maybe_create_gpu_vmem_allocator(gpu_allocator: Allocator, *, host_sub_allocator: Any,
                                    tf_gpu_id: int = 0, physical_total_memory: int = 0,
                                    clock: Any = None,
                                    retry_timeout_us: int = _bfc.DEFAULT_RETRY_TIMEOUT_US
                                    ) -> Allocator:
    return _antman.create_vmem(BFCAllocator, _antman.GPUVMemAllocator, gpu_allocator,
                               host_sub_allocator, tf_gpu_id, physical_total_memory,
                               retry_timeout_us)
