"""TensorFlow worker: ``python -m conformance.workers.tf_worker`` (SPEC.md, WORKER clauses).

Trains a small MLP with the TensorFlow build of this interpreter, in graph mode through
``tf.compat.v1`` sessions (placeholders, variables, ``GradientDescentOptimizer``), one
``Session.run`` per step, so that the session-run hooks of an AntMan-style build run once
per step (WORKER-3). It speaks the worker protocol: a hello record, then one JSON record per
step on standard output; everything TensorFlow or Python prints goes to standard error.

The worker only trains and reports what TensorFlow lets it observe. It implements none of
the runtime's behaviour: it never reads ``GPU_CONFIG_FILE``, writes no statistics file,
applies no limit and never sleeps or suspends. Limits, throttling, suspension and
statistics must come from the TensorFlow build itself, which reads the protocol's
environment variables (inherited unchanged, before ``import tensorflow``) and files, so
the verdict is the build's own.

What TensorFlow exposes, and so what the records carry:

- ``devices``: the GPUs of ``device_lib.list_local_devices()``, with ``pci_bus_id`` parsed
  from ``physical_device_desc`` ("pci bus id: 0000:3b:00.0" gives "3b:00.0") and
  ``memory_limit`` the allocator's limit at start; no GPU gives an empty list and the step
  runs on ``/device:CPU:0``.
- ``device_bytes_in_use``: ``tf.config.experimental.get_memory_info("GPU:0")["current"]``
  (TensorFlow 2.5 and later), else the ``memory_stats`` ``BytesInUse`` op fetched in the step's
  own ``Session.run`` (TensorFlow 1.x ``tf.contrib.memory_stats``), else ``null``.
- ``device_limit``: the ``BytesLimit`` op fetched in the step's ``Session.run`` where the build
  has it (TensorFlow 1.x contrib), else ``null``: TensorFlow 2 has no public API for the
  allocator's current limit.
- ``host_bytes_in_use``: ``null``; TensorFlow has no API for a host-fallback allocator.
- ``device_peak_bytes_in_use`` (an extra member): the ``peak`` of ``get_memory_info``.

Without a GPU every figure is ``null``. ``poll_interval_s`` is 1.0, the interval of
AntMan's FileListener, unless ``--poll-interval-s`` states the build's own. The step is
sized by calibration before the hello record: the batch (and, past the largest batch,
forward-and-backward passes repeated inside the one run) so that a step takes about
``ANTMAN_WORKER_STEP_MS``. Standard input at end of file or SIGTERM stops it at the next step
boundary with status 0; a step that does not return (a suspended build) is abandoned after
``STOP_JOIN_S``. Written for Python 3.7+ and TensorFlow 1.15 or 2.x; runs as a module or as a
file (``python /path/to/tf_worker.py``) under the interpreter of the build.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time
import traceback

PROTOCOL_VERSION = 1
RUNTIME_NAME = "tensorflow"
ANTMAN_POLL_INTERVAL_S = 1.0    # AntMan's FileListener sleeps 1 s between scans
STOP_JOIN_S = 2.0               # wait this long for the step boundary, then exit anyway
MODEL = {"input_dim": 64, "hidden": 512, "layers": 2, "classes": 10}
LEARNING_RATE = 0.05
DATASET_SIZE = 16384
MAX_BATCH = 16384
MAX_REPEATS = 64
MAX_STEP_MS = 3600000.0         # a step of an hour; above it STEP_MS is invalid (WORKER-3)
CALIBRATION_BATCHES = (64, 1024)
CALIBRATION_RUNS = 3
PCI_BUS_ID = re.compile(
    r"pci bus id:\s*(?:[0-9a-fA-F]+:)?([0-9a-fA-F]+:[0-9a-fA-F]+\.[0-9a-fA-F]+)")
SPEC_VERSION_LINE = re.compile(r"^Spec version: `([^`]+)`", re.MULTILINE)
KNOB_DEFAULTS = {"ANTMAN_WORKER_STEP_MS": 50.0, "ANTMAN_WORKER_MAX_STEPS": 0,
                 "ANTMAN_WORKER_POLL_INTERVAL_S": ANTMAN_POLL_INTERVAL_S,
                 "ANTMAN_WORKER_SEED": 0}


def log(message: str) -> None:
    sys.stderr.write("tf_worker: %s\n" % message)
    sys.stderr.flush()


def now_us() -> int:
    return int(time.monotonic() * 1e6)


# -- knobs and options ------------------------------------------------------------------
def _knob(name: str, parse, ok):
    default = KNOB_DEFAULTS[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        log("%s=%r is invalid; using the default %r (WORKER-3)" % (name, text, default))
        return default
    return value


def read_knobs() -> dict:
    """The ``ANTMAN_WORKER_*`` knobs (WORKER-3); an invalid value falls back to its default."""
    positive = lambda v: math.isfinite(v) and v > 0  # noqa: E731
    return {
        "step_ms": _knob("ANTMAN_WORKER_STEP_MS", float,
                         lambda v: positive(v) and v <= MAX_STEP_MS),
        "max_steps": _knob("ANTMAN_WORKER_MAX_STEPS", int, lambda v: v >= 0),
        "requested_poll_interval_s": _knob("ANTMAN_WORKER_POLL_INTERVAL_S", float, positive),
        "seed": _knob("ANTMAN_WORKER_SEED", int, lambda v: v >= 0),
    }


def default_spec_version() -> str:
    """The spec version of the suite this worker ships with."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(root, "SPEC.md"), encoding="utf-8") as f:
            m = SPEC_VERSION_LINE.search(f.read())
        if m:
            return m.group(1)
    except OSError:
        pass
    return "unknown"


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m conformance.workers.tf_worker",
        description="Worker of the AntMan conformance suite for a TensorFlow build: trains "
                    "a small MLP through tf.compat.v1 sessions and writes the worker "
                    "protocol's records on standard output (SPEC.md, WORKER clauses). "
                    "Configured by the protocol's environment variables.")
    p.add_argument("--poll-interval-s", type=float, default=ANTMAN_POLL_INTERVAL_S,
                   help="the interval at which the build checks GPU_CONFIG_FILE, stated in "
                        "the hello record (default 1.0, AntMan's FileListener)")
    p.add_argument("--runtime-name", default=RUNTIME_NAME,
                   help="runtime name in the hello record (default 'tensorflow')")
    p.add_argument("--spec-version", default=None,
                   help="spec version the build targets (default: the suite's SPEC.md)")
    args = p.parse_args(argv)
    if not (math.isfinite(args.poll_interval_s) and args.poll_interval_s > 0):
        p.error("--poll-interval-s must be a positive number")
    if args.spec_version is None:
        args.spec_version = default_spec_version()
    return args


# -- the record stream ------------------------------------------------------------------
class Output:
    """The protocol's record stream on the original standard output.

    Descriptor 1 is pointed at standard error, so that whatever TensorFlow's C++ code or
    Python prints can never break a record; records go to a duplicate of the original.
    """

    def __init__(self) -> None:
        sys.stdout.flush()
        fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._stream = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        self.lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, allow_nan=False, separators=(",", ":"))
        with self.lock:
            self._stream.write(line + "\n")
            self._stream.flush()


# -- TensorFlow ---------------------------------------------------------------------------
def import_tensorflow():
    try:
        import numpy as np
        import tensorflow as tf
    except ImportError as exc:
        log("cannot import TensorFlow into %s (%s). Install the build under test into this "
            "interpreter (pip install tensorflow-cpu, or the fork's wheel), or run this file "
            "with the fork's python: --worker-cmd \"/path/to/python %s\""
            % (sys.executable, exc, os.path.abspath(__file__)))
        return None, None
    return tf, np


def list_gpus(tf) -> list:
    """The GPUs the build created, in the protocol's form (hello ``devices``)."""
    try:
        from tensorflow.python.client import device_lib
        local = device_lib.list_local_devices()
    except Exception as exc:  # noqa: BLE001 - a build without device_lib lists no device
        log("device_lib.list_local_devices() failed (%s: %s); reporting no device"
            % (type(exc).__name__, exc))
        return []
    devices = []
    for dev in local:
        if dev.device_type != "GPU":
            continue
        m = PCI_BUS_ID.search(dev.physical_device_desc or "")
        if not m:
            log("no PCI bus id in %s's description %r; device left out"
                % (dev.name, dev.physical_device_desc))
            continue
        devices.append({"name": dev.name, "pci_bus_id": m.group(1).lower(),
                        "memory_limit": int(dev.memory_limit)})
    devices.sort(key=lambda d: (not d["name"].endswith("GPU:0"), d["name"]))
    return devices


def memory_stats_ops(tf):
    """(BytesInUse, BytesLimit) op constructors of the build, or (None, None)."""
    module = None
    try:
        module = tf.contrib.memory_stats       # TensorFlow 1.x
    except Exception:  # noqa: BLE001 - no contrib in TensorFlow 2
        pass
    if module is None:
        return None, None
    return getattr(module, "BytesInUse", None), getattr(module, "BytesLimit", None)


class Trainer:
    """The MLP, its session and one training step per ``Session.run``."""

    def __init__(self, tf, np, knobs: dict, device: str | None) -> None:
        self.tf, self.np = tf, np
        self.knobs = knobs
        self.device = device or "/device:CPU:0"
        self.on_gpu = device is not None
        rng = np.random.RandomState(knobs["seed"])
        d, h, c = MODEL["input_dim"], MODEL["hidden"], MODEL["classes"]
        self.x_data = rng.standard_normal((DATASET_SIZE, d)).astype(np.float32)
        teacher = rng.standard_normal((d, c)).astype(np.float32)
        self.y_data = np.argmax(self.x_data @ teacher, axis=1).astype(np.int32)
        dims = [d] + [h] * MODEL["layers"] + [c]
        self.init = [(rng.standard_normal((a, b)) * math.sqrt(2.0 / a)).astype(np.float32)
                     for a, b in zip(dims, dims[1:])]
        self.batch = CALIBRATION_BATCHES[0]
        self.repeats = 1
        self.offset = 0
        self.session = None
        self.memory_source = "none"
        self.step_ms_calibrated = None
        self._build()

    def _build(self) -> None:
        tf, tf1 = self.tf, self.tf.compat.v1
        if self.session is not None:
            self.session.close()
        graph = tf.Graph()
        with graph.as_default():
            self.x = tf1.placeholder(tf.float32, [None, MODEL["input_dim"]], name="x")
            self.y = tf1.placeholder(tf.int32, [None], name="y")
            with tf1.device(self.device):
                weights = [tf1.Variable(w, name="w%d" % i) for i, w in enumerate(self.init)]
                biases = [tf1.Variable(self.np.zeros(w.shape[1], self.np.float32),
                                       name="b%d" % i) for i, w in enumerate(self.init)]
                opt = tf1.train.GradientDescentOptimizer(LEARNING_RATE)
                train, loss = None, None
                for _ in range(self.repeats):   # chained passes inside the one run
                    with tf1.control_dependencies([train] if train is not None else []):
                        act = self.x
                        for i, (w, b) in enumerate(zip(weights, biases)):
                            act = tf.matmul(act, w) + b
                            if i < len(weights) - 1:
                                act = tf.nn.relu(act)
                        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                            labels=self.y, logits=act))
                        train = opt.minimize(loss)
            self.fetches = {"train": train, "loss": loss}
            in_use_op, limit_op = memory_stats_ops(tf) if self.on_gpu else (None, None)
            if in_use_op is not None or limit_op is not None:
                with tf1.device(self.device), tf1.control_dependencies([train]):
                    if in_use_op is not None:
                        self.fetches["in_use"] = in_use_op()
                    if limit_op is not None:
                        self.fetches["limit"] = limit_op()
            init = tf1.global_variables_initializer()
        config = tf1.ConfigProto(allow_soft_placement=True, intra_op_parallelism_threads=1,
                                 inter_op_parallelism_threads=1)
        self.session = tf1.Session(graph=graph, config=config)
        self.session.run(init)
        graph.finalize()

    def run(self) -> dict:
        """One training step: exactly one ``Session.run``."""
        start = self.offset
        if start + self.batch > DATASET_SIZE:
            start = 0
        self.offset = start + self.batch
        feed = {self.x: self.x_data[start:self.offset], self.y: self.y_data[start:self.offset]}
        return self.session.run(self.fetches, feed)

    def _timed(self, n: int) -> float:
        """The shortest of ``n`` step times: the step's cost on an unloaded machine, so that
        load during calibration cannot make the steps too short later (WORKER-3)."""
        times = []
        for _ in range(n):
            t0 = time.monotonic()
            self.run()
            times.append(time.monotonic() - t0)
        return min(times)

    def calibrate(self, stop: threading.Event) -> None:
        """Size the step to about ``ANTMAN_WORKER_STEP_MS`` (WORKER-3)."""
        target = self.knobs["step_ms"] / 1000.0
        self._timed(2)                                              # warm-up
        (b1, b2), times = CALIBRATION_BATCHES, []
        for b in (b1, b2):
            if stop.is_set():
                return
            self.batch = b
            times.append(self._timed(CALIBRATION_RUNS))
        per_sample = max((times[1] - times[0]) / (b2 - b1), 1e-9)
        fixed = max(times[0] - per_sample * b1, 0.0)
        batch = int(round((target - fixed) / per_sample))
        self.batch = min(max(batch, 1), MAX_BATCH)
        if batch > MAX_BATCH:
            predicted = fixed + per_sample * MAX_BATCH
            self.repeats = min(MAX_REPEATS, max(1, int(math.ceil(target / predicted))))
            if self.repeats > 1:
                self._build()
                self._timed(1)
        self.step_ms_calibrated = round(self._timed(CALIBRATION_RUNS) * 1000.0, 3)

    def memory(self, result: dict) -> dict:
        """The protocol's memory figures after the step call returned (WORKER-2)."""
        figures = {"device_bytes_in_use": None, "host_bytes_in_use": None,
                   "device_limit": None}
        if not self.on_gpu:
            return figures
        if "limit" in result:
            figures["device_limit"] = int(result["limit"])
        info = None
        get_info = getattr(getattr(self.tf.config, "experimental", None),
                           "get_memory_info", None)
        if get_info is not None:
            try:
                info = get_info("GPU:0")
            except Exception:  # noqa: BLE001 - not available for this device/build
                info = None
        if info is not None:
            self.memory_source = "tf.config.experimental.get_memory_info"
            figures["device_bytes_in_use"] = int(info["current"])
            if "peak" in info:
                figures["device_peak_bytes_in_use"] = int(info["peak"])
        elif "in_use" in result:
            self.memory_source = "memory_stats.BytesInUse"
            figures["device_bytes_in_use"] = int(result["in_use"])
        return figures


# -- main ---------------------------------------------------------------------------------
def hello_record(args, tf, knobs: dict, devices: list, trainer: Trainer) -> dict:
    return {
        "type": "hello", "protocol": PROTOCOL_VERSION,
        "runtime": {"name": args.runtime_name, "version": str(tf.__version__)},
        "spec_version": args.spec_version, "pid": os.getpid(), "t_us": now_us(),
        "poll_interval_s": args.poll_interval_s, "devices": devices,
        "workload": {
            "model": "mlp", "framework": "tensorflow",
            "api": "tf.compat.v1.Session, graph mode, one Session.run per step",
            "tf_git_version": str(getattr(getattr(tf, "version", None), "GIT_VERSION", "")),
            "built_with_cuda": bool(tf.test.is_built_with_cuda()),
            "device": trainer.device, "layers": [MODEL["input_dim"]]
            + [MODEL["hidden"]] * MODEL["layers"] + [MODEL["classes"]],
            "optimizer": "GradientDescentOptimizer", "learning_rate": LEARNING_RATE,
            "batch": trainer.batch, "repeats": trainer.repeats,
            "calibrated_step_ms": trainer.step_ms_calibrated, **knobs},
    }


def train(trainer: Trainer, out: Output, knobs: dict, stop: threading.Event,
          failure: list) -> None:
    step = 0
    try:
        while not stop.is_set() and (knobs["max_steps"] == 0 or step < knobs["max_steps"]):
            start = now_us()
            result = trainer.run()
            end = now_us()
            loss = float(result["loss"])
            if not math.isfinite(loss):
                log("step %d: the loss is %r, not finite; reported as null" % (step, loss))
                loss = None
            out.write({"type": "step", "step": step, "t_us": end, "duration_us": end - start,
                       "loss": loss, **trainer.memory(result)})
            step += 1
    except BaseException:  # noqa: BLE001 - reported by the main thread
        failure.append(traceback.format_exc())


def watch_stdin(stop: threading.Event) -> None:
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    stop.set()


def finish(out: Output | None, code: int) -> None:
    """Exit now: TensorFlow's teardown can block, and a suspended step never returns."""
    if out is not None:
        out.lock.acquire(timeout=1.0)          # never cut a record in half
    sys.stderr.flush()
    os._exit(code)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    knobs = read_knobs()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=watch_stdin, args=(stop,), daemon=True,
                     name="tf-worker-stdin").start()
    out = Output()
    tf, np = import_tensorflow()
    if tf is None:
        finish(out, 2)
    tf.compat.v1.disable_eager_execution()
    devices = list_gpus(tf)
    trainer = Trainer(tf, np, knobs, devices[0]["name"] if devices else None)
    trainer.calibrate(stop)
    if stop.is_set():
        finish(out, 0)
    out.write(hello_record(args, tf, knobs, devices, trainer))
    failure: list = []
    trainer_thread = threading.Thread(target=train, name="tf-worker-train",
                                      args=(trainer, out, knobs, stop, failure), daemon=True)
    trainer_thread.start()
    while trainer_thread.is_alive() and not stop.wait(0.05):
        pass
    stop.set()
    trainer_thread.join(STOP_JOIN_S)           # the next step boundary
    if failure:
        log("training failed:\n" + failure[0])
        finish(out, 1)
    if trainer_thread.is_alive():
        log("the step did not return within %.1f s of the stop request (suspended?); "
            "exiting" % STOP_JOIN_S)
    finish(out, 0)
    return 0


if __name__ == "__main__":
    main()
