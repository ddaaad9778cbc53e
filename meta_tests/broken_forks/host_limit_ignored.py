"""Breaks VMEM-2 (host memory limit): TF_CUDA_HOST_MEM_LIMIT_IN_MB is ignored.

``host_mem_limit_bytes`` always uses the default 64 GiB, as a fork that hard-codes
``1LL << 16`` MiB instead of reading the variable would: the host fallback allocator's
limit no longer follows the environment.
"""

from reference_runtime import *  # noqa: F401,F403 - the runtime's public API
from reference_runtime import CAPABILITIES, SPEC_VERSION, VERSION  # noqa: F401
from reference_runtime import gpu_vmem_allocator as _vmem

from meta_tests import broken_forks as _forks

NAME = "broken-host-limit-ignored"
WORKER_COMMAND = _forks.as_package(__name__)
BREAKS = "VMEM-2"
MODULES = ("conformance/test_vmem.py",)
OUTCOMES = ("FAIL",)

_forks.log_as(__name__)
_forks.patch_source(_vmem, "host_mem_limit_bytes", (
    'mb = read_int64_from_env_var("TF_CUDA_HOST_MEM_LIMIT_IN_MB",\n'
    "                                 DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB)",
    "mb = DEFAULT_CUDA_HOST_MEM_LIMIT_IN_MB"))                     # the fork: never read
