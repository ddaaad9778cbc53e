"""TF 1.15 ``GPUBFCAllocator``: a BFC allocator whose growth and GC follow the environment.

``allow_growth`` is the option unless ``TF_FORCE_GPU_ALLOW_GROWTH`` overrides it (ENV-3);
garbage collection follows ``TF_ENABLE_GPU_GARBAGE_COLLECTION`` (ENV-4, default on). Both
are read once, at construction.
"""

from __future__ import annotations

from .allocator import SubAllocator
from .allocator_retry import DEFAULT_MAX_WAIT_US
from .bfc_allocator import BFCAllocator
from .clock import Clock
from .env import get_allow_growth_value, get_garbage_collection_value

__all__ = ["GPUBFCAllocator"]


class GPUBFCAllocator(BFCAllocator):
    """``GPUBFCAllocator(sub_allocator, total_memory, gpu_options, name)``."""

    def __init__(self, sub_allocator: SubAllocator, total_memory: int, name: str, *,
                 allow_growth: bool = False, clock: Clock | None = None,
                 retry_timeout_us: int = DEFAULT_MAX_WAIT_US) -> None:
        super().__init__(sub_allocator, total_memory, get_allow_growth_value(allow_growth),
                         name, get_garbage_collection_value(), clock=clock,
                         retry_timeout_us=retry_timeout_us)
