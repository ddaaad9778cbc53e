"""GPU tests hold the host's GPU lock from setup to teardown, whatever the scheduler does
(conformance/gpu_exclusive.py): two processes never run GPU tests at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import gpu_exclusive
from meta_tests.child_env import python_path

ROOT = Path(__file__).resolve().parent.parent


def test_the_lock_excludes_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "gpu.lock"
    with gpu_exclusive.gpu_exclusive("first::test", path=lock, wait_s=1.0):
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            from pathlib import Path
            from conformance import gpu_exclusive
            try:
                with gpu_exclusive.gpu_exclusive("second", path=Path({str(lock)!r}), wait_s=0.3):
                    print("ACQUIRED")
            except gpu_exclusive.GpuLockTimeout as exc:
                print("TIMEOUT", exc)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60).stdout
    assert out.startswith("TIMEOUT"), out
    assert f"pid {os.getpid()}" in out and "first::test" in out, out


def test_the_lock_is_free_again_after_the_holder_leaves(tmp_path: Path) -> None:
    lock = tmp_path / "gpu.lock"
    with gpu_exclusive.gpu_exclusive("a", path=lock, wait_s=1.0):
        pass
    with gpu_exclusive.gpu_exclusive("b", path=lock, wait_s=0.2) as waited:
        assert waited < 0.2


def test_a_planted_symbolic_link_is_refused_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "gpu.lock"
    link.symlink_to(victim)
    with pytest.raises(gpu_exclusive.GpuLockTimeout, match="symbolic link"):
        with gpu_exclusive.gpu_exclusive("t", path=link, wait_s=0.2):
            pass
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("raw, expected", [("", gpu_exclusive.DEFAULT_WAIT_S),
                                           ("5", 5.0), ("0", gpu_exclusive.DEFAULT_WAIT_S),
                                           ("-1", gpu_exclusive.DEFAULT_WAIT_S),
                                           ("nan", gpu_exclusive.DEFAULT_WAIT_S),
                                           ("inf", gpu_exclusive.DEFAULT_WAIT_S),
                                           ("x", gpu_exclusive.DEFAULT_WAIT_S)])
def test_the_wait_bound_is_finite_and_positive(raw: str, expected: float) -> None:
    assert gpu_exclusive.wait_bound_s({gpu_exclusive.WAIT_ENV_VAR: raw}) == expected


GPU_TESTS = textwrap.dedent('''
    import json, os, time
    import pytest

    @pytest.mark.gpu
    @pytest.mark.parametrize("i", range(4))
    def test_gpu(i):
        with open(os.environ["SPANS"], "a") as f:
            start = time.monotonic()
            time.sleep(0.3)
            f.write(json.dumps([start, time.monotonic()]) + "\\n")
''')


def test_gpu_tests_spread_over_workers_never_overlap(tmp_path: Path) -> None:
    """Four GPU tests under ``--dist load`` (no group at all) on four workers: the plugin's
    lock runs them one at a time."""
    (tmp_path / "test_fake_gpu.py").write_text(GPU_TESTS)
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "pytest_plugins = ['conformance.plugin']\n")
    spans = tmp_path / "spans.jsonl"
    env = dict(os.environ, SPANS=str(spans), ANTMAN_GPU_LOCK=str(tmp_path / "gpu.lock"),
               PYTHONPATH=python_path(ROOT))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "4", "--dist", "load",
                           "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    intervals = sorted(json.loads(line) for line in spans.read_text().splitlines())
    assert len(intervals) == 4, intervals
    for (s0, e0), (s1, e1) in zip(intervals, intervals[1:]):
        assert s1 >= e0, f"GPU tests overlapped: {intervals}"


GROUPED_TESTS = textwrap.dedent('''
    import os
    import pytest

    @pytest.mark.xdist_group("gpu")
    @pytest.mark.parametrize("i", range(6))
    def test_grouped(i):
        with open(os.environ["WORKERS"], "a") as f:
            f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
''')


def test_the_installed_pytest_and_xdist_keep_a_group_on_one_worker(tmp_path: Path) -> None:
    """``--dist loadgroup`` keeps the GPU group on one worker with the installed pytest and
    pytest-xdist (the pin in pyproject.toml); the lock alone would serialise the tests, but
    each worker that ran one would keep a CUDA context for the rest of the run."""
    (tmp_path / "test_grouped.py").write_text(GROUPED_TESTS)
    workers = tmp_path / "workers.txt"
    env = dict(os.environ, WORKERS=str(workers))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist",
                           "loadgroup", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-c", os.devnull, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = workers.read_text().split()
    assert len(seen) == 6 and len(set(seen)) == 1, (
        f"the xdist group ran on workers {sorted(set(seen))}: this pytest "
        f"({pytest.__version__}) and pytest-xdist no longer honour --dist loadgroup")
