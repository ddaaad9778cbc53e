"""A submission bundle: one certification packed with what it was judged by, so that anyone
can check it (``python -m reports bundle RUN_DIR [-o FILE]``; checked by reports/verify.py).

The bundle is a ``.tar.gz`` (default) or a ``.zip`` written with the standard library. Its
members, all regular files at fixed places:

- ``report/``: the run folder's files (certification.json, .md, .html, junit.xml, figures);
- ``mustpass/<spec-version>.txt``: the must-pass list the run was judged by (the file whose
  sha256 the report records);
- ``expectations/<name>.toml``: the expectations file (waivers) of the run, if it had one;
- ``environment.json``: where it ran, as the report recorded it (CPU, GPU model, driver, CUDA),
  and what NVML tells on the host that made the bundle (GPU name, SM count, MIG mode, MPS);
- ``source.json``: the suite commit, and the certified implementation's source identity: the
  sha256 of every file of its package, its git commit, and whether it had uncommitted changes;
- ``source.diff``: ``git diff HEAD`` of the package, when it is a git checkout with changes;
- ``manifest.json``: the size and sha256 of every other member.

The archive is written aside and renamed into place. Problems are one-line errors, exit 2.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from conformance import spec
from reports import environment
from reports import mustpass as mp
from reports.untrusted import (REPORT_NAME, ReportError, one_line, parse_report,
                               read_regular)

FORMAT = "antman-certification-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
REPORT_PREFIX = "report/"
ENVIRONMENT = "environment.json"
SOURCE = "source.json"
SOURCE_DIFF = "source.diff"
#: Every member name a bundle may hold; ``..``, absolute paths and folders cannot match.
_PART = r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}"
MEMBER_NAME = re.compile(rf"^(report/{_PART}|mustpass/{_PART}\.txt|expectations/{_PART}\.toml"
                         rf"|{re.escape(ENVIRONMENT)}|{re.escape(SOURCE)}"
                         rf"|{re.escape(SOURCE_DIFF)}|{re.escape(MANIFEST)})$")
VERSION = re.compile(rf"^{_PART}$")

#: Bounds of what a bundle holds (the published GPU run's files are about 2.4 MB).
MAX_MEMBER_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
MAX_MEMBERS = 256
MAX_DIFF_BYTES = 8 * 1024 * 1024
MAX_SOURCE_FILES = 5000
MAX_SOURCE_BYTES = 512 * 1024 * 1024
_SKIP_DIRS = {"__pycache__", ".git", ".tox", ".pytest_cache", ".hypothesis", ".mypy_cache"}


class BundleError(ValueError):
    """A bundle cannot be made; the message is one line."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- what goes in

def report_members(run_dir: Path) -> dict[str, bytes]:
    """``report/<name>``: the regular files directly in the run folder (bounded)."""
    out: dict[str, bytes] = {}
    for f in sorted(run_dir.iterdir()):
        if f.is_symlink() or not f.is_file():
            continue
        name = REPORT_PREFIX + f.name
        if not MEMBER_NAME.match(name) or f.name.startswith("."):
            continue
        out[name] = read_regular(f, MAX_MEMBER_BYTES)
    if REPORT_PREFIX + REPORT_NAME not in out:
        raise BundleError(f"{run_dir}: no {REPORT_NAME}")
    return out


def judged_by(recorded: str | None, digest: str | None, fallbacks: list[Path],
              what: str) -> tuple[Path, bytes]:
    """The file the run recorded (path and sha256), or one of ``fallbacks`` with that hash."""
    candidates = ([Path(recorded)] if recorded else []) + fallbacks
    for path in candidates:
        try:
            raw = read_regular(path, MAX_MEMBER_BYTES)
        except ReportError:
            continue
        if sha256(raw) == digest:
            return path, raw
    raise BundleError(f"the {what} the run was judged by (sha256 {digest}) is not at "
                      f"{recorded or 'a recorded path'}"
                      + (f" nor at {', '.join(map(str, fallbacks))}" if fallbacks else ""))


def source_dir(doc: dict[str, Any]) -> tuple[Path | None, str | None]:
    """The certified implementation's package folder, or (None, why not)."""
    rt = doc["runtime"]
    if rt.get("worker_cmd"):
        return None, (f"black-box run (worker command {rt['worker_cmd']!r}): the "
                      "implementation's source is outside the suite; give it with --source")
    path = rt.get("path")
    if not path:
        return None, "the report records no path for the runtime module"
    p = Path(path)
    folder = p.parent
    if not folder.is_dir():
        return None, f"the runtime's folder {folder} is not on this host"
    return folder, None


def file_hashes(folder: Path) -> dict[str, Any]:
    """sha256 of every regular file under ``folder`` (caches and VCS folders skipped),
    and one digest over the sorted list."""
    files: dict[str, str] = {}
    links: list[str] = []
    total = 0
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            f = Path(root) / name
            rel = f.relative_to(folder).as_posix()
            if f.is_symlink():
                links.append(rel)
                continue
            if name.endswith((".pyc", ".pyo")) or not f.is_file():
                continue
            if len(files) >= MAX_SOURCE_FILES:
                raise BundleError(f"{folder}: more than {MAX_SOURCE_FILES} files")
            raw = read_regular(f, MAX_MEMBER_BYTES)
            total += len(raw)
            if total > MAX_SOURCE_BYTES:
                raise BundleError(f"{folder}: more than {MAX_SOURCE_BYTES} bytes of source")
            files[rel] = sha256(raw)
    listing = "".join(f"{h}  {n}\n" for n, h in sorted(files.items()))
    return {"files": files, "symlinks_skipped": links,
            "tree_sha256": sha256(listing.encode("utf-8"))}


def _git(folder: Path, *args: str, limit: int = MAX_DIFF_BYTES) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    if len(done.stdout) > limit:
        raise BundleError(f"git {' '.join(args)} in {folder}: more than {limit} bytes")
    return done.stdout


def source_identity(doc: dict[str, Any], given: Path | None) -> tuple[dict[str, Any],
                                                                      bytes | None]:
    """``source.json``'s content and the diff of uncommitted changes, if any."""
    suite_now = environment.suite_git()
    info: dict[str, Any] = {
        "suite": {"recorded": doc["suite"], "bundled_from": suite_now},
        "runtime": {"module": doc["runtime"]["module"], "name": doc["runtime"]["name"],
                    "version": doc["runtime"]["version"], "path": doc["runtime"]["path"],
                    "worker_cmd": doc["runtime"]["worker_cmd"],
                    "recorded_git": doc["runtime"]["git"]},
    }
    folder, why = (given, None) if given else source_dir(doc)
    rt = info["runtime"]
    if folder is None:
        rt.update(source_dir=None, note=why)
        return info, None
    if not folder.is_dir():
        raise BundleError(f"--source {folder}: not a folder")
    rt["source_dir"] = str(folder.resolve())
    rt.update(file_hashes(folder))
    git = environment.git_info(folder)
    rt["git"] = git
    diff = None
    if git["commit"]:
        diff = _git(folder, "diff", "--binary", "HEAD", "--", ".") or None
        untracked = _git(folder, "ls-files", "--others", "--exclude-standard", "--", ".")
        rt["untracked"] = (untracked or b"").decode("utf-8", "replace").splitlines()[:500]
        recorded = (doc["runtime"].get("git") or {}).get("commit")
        if recorded and recorded != git["commit"]:
            rt["note"] = (f"the run recorded commit {recorded}; the source bundled is at "
                          f"{git['commit']}")
    rt["diff"] = SOURCE_DIFF if diff else None
    return info, diff


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: ``CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`` of the CUDA driver API.
_CU_SM_COUNT = 16


def cuda_sm_counts() -> dict[str, int]:
    """PCI bus id (config-key form) -> SM count of each GPU the CUDA driver shows this
    process, through the driver library itself (NVML gives SM counts of MIG instances only);
    empty without a CUDA driver."""
    import ctypes
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        if cu.cuInit(0) != 0:
            return {}
        count = ctypes.c_int()
        if cu.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return {}
        out: dict[str, int] = {}
        for i in range(min(count.value, 64)):
            dev, sms = ctypes.c_int(), ctypes.c_int()
            bus = ctypes.create_string_buffer(64)
            if (cu.cuDeviceGet(ctypes.byref(dev), i) == 0
                    and cu.cuDeviceGetAttribute(ctypes.byref(sms), _CU_SM_COUNT, dev) == 0
                    and cu.cuDeviceGetPCIBusId(bus, 64, dev) == 0):
                out[environment.bus_key(bus.value.decode("ascii", "replace"))] = sms.value
        return out
    except (OSError, AttributeError):
        return {}


def nvml_facts() -> dict[str, Any]:
    """What NVML tells of this host's GPUs: name, MIG mode, compute mode; and each one's SM
    count (the CUDA driver's, by PCI bus id; NVML's for a MIG instance)."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return {"available": False, "note": "pynvml (nvidia-ml-py) not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "note": f"NVML unavailable: {one_line(exc, 200)}"}

    def ask(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            return {"error": one_line(exc, 120)}

    try:
        cuda = ask(pynvml.nvmlSystemGetCudaDriverVersion_v2)
        sm_counts = cuda_sm_counts()
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            attrs = ask(pynvml.nvmlDeviceGetAttributes_v2, h)
            mig = ask(pynvml.nvmlDeviceGetMigMode, h)
            bus = ask(lambda: environment.bus_key(_text(pynvml.nvmlDeviceGetPciInfo(h).busId)))
            sms = sm_counts.get(bus) if isinstance(bus, str) else None
            devices.append({
                "index": i, "name": _text(pynvml.nvmlDeviceGetName(h)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                "pci_bus_id": bus if isinstance(bus, str) else None,
                "sm_count": sms if sms is not None else getattr(attrs, "multiprocessorCount",
                                                                None),
                "sm_count_source": ("cuda-driver" if sms is not None else "nvml"
                                    if hasattr(attrs, "multiprocessorCount") else None),
                "mig_mode": ({"current": mig[0], "pending": mig[1]}
                             if isinstance(mig, (list, tuple)) else mig),
                "compute_mode": ask(pynvml.nvmlDeviceGetComputeMode, h),
                "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            })
        return {"available": True,
                "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
                "cuda_version": (f"{cuda // 1000}.{cuda % 1000 // 10}"
                                 if isinstance(cuda, int) else cuda),
                "devices": devices}
    except Exception as exc:
        return {"available": False, "note": f"NVML query failed: {one_line(exc, 200)}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def mps_facts() -> dict[str, Any]:
    """Whether a CUDA MPS daemon runs on this host (NVML does not say): its processes by
    name, and the pipe folder the CUDA driver would use."""
    names: set[str] = set()
    proc = Path("/proc")
    try:
        pids = [p for p in proc.iterdir() if p.name.isdigit()][:100_000]
    except OSError:
        pids = []
    for p in pids:
        try:
            names.add((p / "comm").read_text(encoding="utf-8", errors="replace").strip())
        except OSError:
            continue
    return {"control_daemon_running": "nvidia-cuda-mps" in names
            or "nvidia-cuda-mps-control" in names,
            "server_running": "nvidia-cuda-mps-server" in names or "nvidia-cuda-mps" in names,
            "pipe_directory": os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"),
            "pipe_directory_exists": Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY",
                                                         "/tmp/nvidia-mps")).exists()}


def environment_facts(doc: dict[str, Any]) -> dict[str, Any]:
    """``environment.json``: the run's environment as its report recorded it, and this host's
    (the one that made the bundle: the same machine only when the bundle is made where the
    run ran)."""
    target = doc["execution_target"]
    return {
        "run": {"platform": doc["platform"], "python": doc["python"],
                "execution_target": {k: target.get(k) for k in
                                     ("kind", "source", "model", "driver_version",
                                      "cuda_version", "devices", "worker_devices", "note")},
                "gpu_clocks": (target.get("extras") or {}).get("gpu_clocks")},
        "bundling_host": {"platform": environment.platform_info(),
                          "python": environment.python_info(),
                          "nvml": nvml_facts(), "mps": mps_facts(),
                          "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
    }


def contents(run_dir: Path, doc: dict[str, Any], source: Path | None = None,
             expectations: Path | None = None) -> dict[str, bytes]:
    """The members of the bundle of ``run_dir`` (whose report is ``doc``) besides its report
    files and the manifest."""
    members: dict[str, bytes] = {}
    version = doc["spec"]["version"]
    if not VERSION.match(version):
        raise BundleError(f"spec version {version!r} cannot name a file")
    must = doc["mustpass"]
    if not must["sha256"]:
        raise BundleError(f"the run was judged by no must-pass list ({must['error']})")
    _, raw = judged_by(must["path"], must["sha256"], [mp.official_path(version)],
                       "must-pass list")
    members[f"mustpass/{version}.txt"] = raw
    ex = doc["expectations"]
    if ex["sha256"]:
        path, raw = judged_by(ex["path"], ex["sha256"], [expectations] if expectations else [],
                              "expectations file")
        stem = re.sub(r"[^A-Za-z0-9_-]+", "-", path.stem).strip("-") or "expectations"
        members[f"expectations/{stem[:100]}.toml"] = raw
    ident, diff = source_identity(doc, source)
    members[SOURCE] = (json.dumps(ident, indent=1, sort_keys=True) + "\n").encode("utf-8")
    if diff:
        members[SOURCE_DIFF] = diff
    members[ENVIRONMENT] = (json.dumps(environment_facts(doc), indent=1, default=str)
                            + "\n").encode("utf-8")
    return members


def manifest(members: dict[str, bytes], doc: dict[str, Any]) -> bytes:
    """``manifest.json``: what the bundle certifies, and every member's size and sha256."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rt = doc["runtime"]
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "created_at": now,
            "run_id": doc["run_id"], "runtime": f"{rt['name']} {rt['version']}",
            "spec_version": doc["spec"]["version"], "verdict": doc["verdict"]["status"],
            "members": [{"name": n, "size": len(b), "sha256": sha256(b)}
                        for n, b in sorted(members.items())]}
    return (json.dumps(body, indent=1) + "\n").encode("utf-8")


def write_archive(members: dict[str, bytes], out: Path) -> None:
    """``out`` as a zip (``.zip``) or gzip-compressed tar, written aside then renamed."""
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if out.suffix == ".zip":
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for name, data in members.items():
                    info = zipfile.ZipInfo(name, time.gmtime()[:6])
                    info.external_attr = 0o100644 << 16
                    info.compress_type = zipfile.ZIP_DEFLATED
                    zf.writestr(info, data)
        else:
            with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tf:
                now = int(time.time())
                for name, data in members.items():
                    info = tarfile.TarInfo(name)
                    info.size, info.mode, info.mtime = len(data), 0o644, now
                    tf.addfile(info, io.BytesIO(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make(run_dir: Path, out: Path | None = None, source: Path | None = None,
         expectations: Path | None = None) -> tuple[Path, str]:
    """Writes the bundle of ``run_dir``; returns its path and the manifest's sha256."""
    if not run_dir.is_dir():
        raise BundleError(f"{run_dir}: not a run folder")
    members = report_members(run_dir)
    doc = parse_report(members[REPORT_PREFIX + REPORT_NAME], str(run_dir / REPORT_NAME))
    members.update(contents(run_dir, doc, source, expectations))
    if len(members) + 1 > MAX_MEMBERS:
        raise BundleError(f"{len(members)} files, more than the {MAX_MEMBERS} a bundle holds")
    if sum(len(b) for b in members.values()) > MAX_TOTAL_BYTES:
        raise BundleError(f"the files add up to more than {MAX_TOTAL_BYTES} bytes")
    man = manifest(members, doc)
    members[MANIFEST] = man
    if out is None:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", doc["run_id"]).strip("-.") or "certification"
        out = Path.cwd() / f"{safe}.bundle.tar.gz"
    if not out.parent.is_dir():
        raise BundleError(f"{out.parent}: no such folder")
    write_archive(members, out)
    return out, sha256(man)


def main(run_dir: Path, out: Path | None, source: Path | None,
         expectations: Path | None) -> int:
    try:
        path, digest = make(run_dir, out, source, expectations)
    except (BundleError, ReportError, OSError) as exc:
        print(f"bundle: {one_line(exc)}", file=sys.stderr)
        return 2
    print(f"wrote {path} (manifest sha256 {digest}); check it with: python -m reports verify "
          f"{path}")
    return 0


def add_parsers(sub: Any) -> None:
    """``bundle`` and ``verify`` under ``python -m reports``."""
    p = sub.add_parser("bundle", help="pack one certification with what it was judged by")
    p.add_argument("run_dir", type=Path, help="the run folder (holding certification.json)")
    p.add_argument("-o", "--output", type=Path,
                   help="the bundle (.tar.gz, or .zip); default ./<run id>.bundle.tar.gz")
    p.add_argument("--source", type=Path,
                   help="the implementation's source folder to identify (default: the "
                        "runtime package's folder, when the report names one on this host)")
    p.add_argument("--expectations", type=Path,
                   help="where the run's expectations file is now, if it moved")
    p.set_defaults(func=lambda a: main(a.run_dir, a.output, a.source, a.expectations))
    p = sub.add_parser("verify", help="check a bundle: hashes, schema, and its verdict "
                                      "re-judged against the official must-pass list")
    p.add_argument("bundle", type=Path)
    p.add_argument("--suite-tests", type=Path,
                   help="JSON of the suite's tests (python -m reports coverage --tests) to "
                        "check the results against; default: this checkout's, collected "
                        "when it is at the bundle's suite commit")

    def run_verify(a: Any) -> int:
        from reports import verify
        return verify.main(a.bundle, a.suite_tests)
    p.set_defaults(func=run_verify)
