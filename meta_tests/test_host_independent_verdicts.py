"""The verdict does not depend on the host's GPUs: on a host with one GPU (a stand-in CuPy that
the reference runtime selects through ``auto``), the tests that build two or three GPUs run on
the simulated device and pass, as on a host without a GPU (conformance/device_choice.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conformance import spec
from meta_tests.child_env import python_path

ROOT = spec.ROOT

#: A CuPy with one GPU of 256 MiB, importable as ``cupy`` (meta_tests/fake_cupy.py).
ONE_GPU_CUPY = """
import sys
from meta_tests.fake_cupy import make_fake_cupy
_fake = make_fake_cupy(num_gpus=1, gpu_bytes=256 << 20)
sys.modules["cupy"] = _fake
sys.modules["cupy.cuda"] = _fake.cuda
"""

#: Conformance tests that build runtimes of two or three GPUs, or select ``auto``.
SELECTION = (
    "conformance/test_devices.py",
    "conformance/test_resource_management.py::test_adjustment_finds_the_gpu_by_bus_id",
    "conformance/test_statistics.py::test_gpus_are_found_once_by_the_first_check_that_finds_any",
    "conformance/test_statistics.py::test_document_layout",
)


def one_gpu_host(tmp_path: Path) -> dict[str, str]:
    """The environment of a process on a host whose CuPy sees one GPU; ANTMAN_DEVICE unset."""
    (tmp_path / "cupy.py").write_text(ONE_GPU_CUPY)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT", "ANTMAN_", "CUDA_VISIBLE"))}
    env["PYTHONPATH"] = python_path(tmp_path, ROOT)
    return env


def test_the_stand_in_host_has_one_gpu_that_auto_selects(tmp_path: Path) -> None:
    probe = ("import reference_runtime as rt; b = rt.select_backend('auto'); "
             "print(b.name, b.gpu_count(), 'cuda' in rt.CAPABILITIES)")
    done = subprocess.run([sys.executable, "-c", probe], env=one_gpu_host(tmp_path), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["cuda", "1", "True"], done.stdout + done.stderr


def test_tests_of_two_gpus_pass_on_a_one_gpu_host(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *SELECTION, "-p", "no:cacheprovider", "-p",
         "no:randomly", "-n", "0", "-q", "--no-report"],
        env=one_gpu_host(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"certification subset failed on a one-GPU host:\n{out[-4000:]}"
    assert " passed" in out and "failed" not in out and "error" not in out.lower(), out[-3000:]


def test_auto_is_checked_without_a_usable_gpu_even_where_nvml_sees_one(tmp_path: Path) -> None:
    """DEVICE-7 on a host whose NVML sees a GPU: the probe's CuPy that does not import (and
    CUDA_VISIBLE_DEVICES="") must still make ``auto`` select ``sim``."""
    from meta_tests import fake_pynvml
    env = one_gpu_host(tmp_path)
    fake_pynvml.install(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_devices.py", "-k",
         "without_a_usable_gpu", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
         "-q", "--no-report"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "2 passed" in out, out[-4000:]
