"""Build the shim (``shim/*.cc``) against the installed TensorFlow wheel, and load it.

The shim is compiled with the machine's C++ compiler (``$CXX``, default ``g++``), with the
flags ``tf.sysconfig`` gives (the wheel's headers, its C++ ABI, its standard), the pybind11
headers the wheel ships (``include/external/pybind11/include``) and Python's headers, and
linked against the wheel's ``libtensorflow_framework.so.2`` (with an rpath to it). Nothing is
downloaded and TensorFlow's Python package is never imported by the runtime: only the build
asks ``tf.sysconfig`` for its flags, in a subprocess.

Cache. A build lives in ``<cache>/<key>/`` (``$ANTMAN_TF_BFC_CACHE``, default
``$XDG_CACHE_HOME/antman-conformance/tensorflow_bfc``). The key is a hash of the TensorFlow
version, TensorFlow's compile and link flags, the shim's own flags, the compiler (its path,
size and mtime), the Python ABI and the text of every shim source and header, so a new
TensorFlow, another compiler or an edited source builds anew and a stale build is never
loaded. TensorFlow's flags come from its installation: they are asked once per installation
(its version, directory and the size and mtime of its framework library) and remembered
beside the builds. Concurrent builds of one key (pytest-xdist workers) wait on a file lock;
the finished module is moved into place atomically, with ``build-info.json`` beside it.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ShimUnavailable", "TensorFlowInstall", "BuildResult", "find_tensorflow",
           "cache_root", "plan", "cache_key", "build", "load"]

MODULE_NAME = "_tf_bfc_shim"
SHIM_DIR = Path(__file__).resolve().with_name("shim")
CACHE_ENV = "ANTMAN_TF_BFC_CACHE"
#: The shim's own flags, beside TensorFlow's. -O2: the per-call cost is part of what is
#: reported; -fvisibility=hidden: only PyInit is exported.
SHIM_FLAGS = ("-O2", "-fPIC", "-fvisibility=hidden", "-Wno-deprecated-declarations")
TF_DISTRIBUTIONS = ("tensorflow-cpu", "tensorflow", "tensorflow-gpu", "tf-nightly",
                    "tf-nightly-cpu", "tensorflow-intel")
FLAGS_TIMEOUT_S = 300
COMPILE_TIMEOUT_S = 900


class ShimUnavailable(ImportError):
    """The shim cannot be built or loaded here (no TensorFlow, no compiler, a build error)."""


@dataclass(frozen=True)
class TensorFlowInstall:
    version: str
    package_dir: Path
    framework_library: Path

    @property
    def include_dir(self) -> Path:
        return self.package_dir / "include"

    def fingerprint(self) -> str:
        """Identifies this installation: a reinstall or an upgrade changes it."""
        stat = self.framework_library.stat()
        return _digest({"version": self.version, "dir": str(self.package_dir),
                        "library": [stat.st_size, stat.st_mtime_ns]})


@dataclass(frozen=True)
class BuildResult:
    path: Path
    key: str
    seconds: float | None  # None: taken from the cache
    info: dict


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def find_tensorflow() -> TensorFlowInstall:
    """The installed TensorFlow wheel, found without importing it."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise ShimUnavailable(
            f"TensorFlow is not installed for {sys.executable}: the tensorflow_bfc adapter "
            f"builds against its wheel (pip install 'antman-conformance[tensorflow]', or "
            f"tox -e certify-tf-bfc)")
    package_dir = Path(next(iter(spec.submodule_search_locations))).resolve()
    version = None
    for dist in TF_DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    library = package_dir / "libtensorflow_framework.so.2"
    if version is None or not library.is_file() or not (package_dir / "include").is_dir():
        raise ShimUnavailable(
            f"{package_dir} is not a TensorFlow wheel with its C++ headers and "
            f"libtensorflow_framework.so.2 (version {version})")
    return TensorFlowInstall(version, package_dir, library)


def cache_root() -> Path:
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "antman-conformance" / "tensorflow_bfc"


def _compiler() -> tuple[str, dict]:
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise ShimUnavailable(f"no C++ compiler: {cxx!r} is not on PATH (set CXX)")
    stat = Path(path).resolve().stat()
    return path, {"path": str(Path(path).resolve()), "size": stat.st_size,
                  "mtime_ns": stat.st_mtime_ns}


def _tensorflow_flags(install: TensorFlowInstall, root: Path) -> dict[str, list[str]]:
    """``tf.sysconfig``'s compile and link flags, asked once per installation."""
    remembered = root / f"tf-flags-{install.fingerprint()[:20]}.json"
    if remembered.is_file():
        return json.loads(remembered.read_text(encoding="utf-8"))
    code = ("import json, tensorflow as tf; print(json.dumps({'compile': "
            "tf.sysconfig.get_compile_flags(), 'link': tf.sysconfig.get_link_flags()}))")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=FLAGS_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ShimUnavailable(f"asking tf.sysconfig for its flags took over "
                              f"{FLAGS_TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        raise ShimUnavailable(f"tf.sysconfig failed (exit {proc.returncode}): "
                              f"{proc.stderr[-2000:]}")
    flags = json.loads(proc.stdout.strip().splitlines()[-1])
    root.mkdir(parents=True, exist_ok=True)
    _write_atomically(remembered, json.dumps(flags, indent=2))
    return flags


def _sources() -> tuple[list[Path], dict[str, str]]:
    files = sorted(SHIM_DIR.glob("*.cc")) + sorted(SHIM_DIR.glob("*.h"))
    if not files:
        raise ShimUnavailable(f"no shim sources in {SHIM_DIR}")
    return ([f for f in files if f.suffix == ".cc"],
            {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files})


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, path)


def plan() -> tuple[TensorFlowInstall, dict, list[Path], str, dict]:
    """What a build of the installed TensorFlow compiles, and the components of its key."""
    install = find_tensorflow()
    root = cache_root()
    compiler, compiler_id = _compiler()
    flags = _tensorflow_flags(install, root)
    sources, hashes = _sources()
    components = {
        "tensorflow_version": install.version,
        "tensorflow_flags": flags,
        "shim_flags": list(SHIM_FLAGS),
        "compiler": compiler_id,
        "python": {"ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
                   "include": sysconfig.get_paths()["include"]},
        "sources": hashes,
    }
    return install, flags, sources, compiler, components


def _compile(install: TensorFlowInstall, flags: dict, sources: list[Path], compiler: str,
             out_dir: Path) -> Path:
    includes = [f"-I{SHIM_DIR}", f"-I{install.include_dir / 'external' / 'pybind11' / 'include'}",
                f"-I{sysconfig.get_paths()['include']}"]
    compile_flags = [*flags["compile"], *SHIM_FLAGS, *includes]

    def compile_one(source: Path) -> Path:
        obj = out_dir / f"{source.stem}.o"
        cmd = [compiler, *compile_flags, "-c", str(source), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                              check=False)
        if proc.returncode != 0:
            raise ShimUnavailable(f"compiling {source.name} failed:\n{' '.join(cmd)}\n"
                                  f"{proc.stderr[-6000:]}")
        return obj

    workers = max(1, min(len(sources), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        objects = list(pool.map(compile_one, sources))
    target = out_dir / f"{MODULE_NAME}{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = [compiler, "-shared", *SHIM_FLAGS, *map(str, objects), "-o", str(target),
           *flags["link"], f"-Wl,-rpath,{install.package_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                          check=False)
    if proc.returncode != 0:
        raise ShimUnavailable(f"linking the shim failed:\n{' '.join(cmd)}\n{proc.stderr[-6000:]}")
    return target


def cache_key(components: dict) -> str:
    """The build's directory name: a hash of everything the build depends on."""
    return _digest(components)[:24]


def build(force: bool = False) -> BuildResult:
    """The shim for the installed TensorFlow: from the cache, or built now."""
    install, flags, sources, compiler, components = plan()
    key = cache_key(components)
    root = cache_root()
    final_dir = root / key
    target = final_dir / f"{MODULE_NAME}{sysconfig.get_config_var('EXT_SUFFIX')}"
    info_path = final_dir / "build-info.json"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file() and info_path.is_file() and not force:
            return BuildResult(target, key, None, json.loads(info_path.read_text("utf-8")))
        started = time.perf_counter()
        work = Path(tempfile.mkdtemp(dir=root, prefix=f".build-{key}-"))
        try:
            built = _compile(install, flags, sources, compiler, work)
            seconds = time.perf_counter() - started
            version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                     check=False).stdout.splitlines()[:1]
            info = {**components, "key": key, "compiler_version": version[0] if version else "",
                    "build_seconds": round(seconds, 2), "built_at": time.time(),
                    "jobs": min(len(sources), os.cpu_count() or 1)}
            final_dir.mkdir(exist_ok=True)
            _write_atomically(info_path, json.dumps(info, indent=2))
            os.replace(built, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return BuildResult(target, key, seconds, info)


def load() -> types.ModuleType:
    """Import the shim, building it first when the cache has no build for this key."""
    result = build()
    name = f"{__package__}.{MODULE_NAME}"
    loader = importlib.machinery.ExtensionFileLoader(name, str(result.path))
    spec = importlib.util.spec_from_file_location(name, result.path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    module.BUILD = result
    module.TENSORFLOW_VERSION = result.info["tensorflow_version"]
    return module
