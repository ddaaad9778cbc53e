"""A real training workload: an MLP classifier on synthetic data (SPEC.md, E2E clauses).

``MLPWorkload`` builds the whole training graph on one device (GPU:0 by default): forward
(MatMul, BiasAdd, Relu), loss (SoftmaxCrossEntropyWithLogits, Mean), backward (MatMul with
transposes, BiasAddGrad, ReluGrad) and SGD updates (ApplyGradientDescent), and trains it on
seeded synthetic data (labels from a random linear teacher), so its loss falls over steps.
Sizes go from kilobytes (the defaults) to gigabytes (``MLPWorkload.sized_for``).

The command line is ``python -m reference_runtime.workload`` (``__main__.py``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

import numpy as np

from ..graph import Graph

__all__ = ["MLPWorkload"]

_COSTED_OPS = frozenset({"MatMul", "BiasAdd", "Relu", "ReluGrad", "BiasAddGrad",
                         "SoftmaxCrossEntropyWithLogits", "Mean", "ApplyGradientDescent"})


class MLPWorkload:
    """An MLP classifier trained by SGD, as one DirectSession graph.

    ``target`` is a runtime context (anything with ``new_session(graph)``) or a device
    manager (a ``DirectSession`` is then built with ``registry`` and ``clock``).
    ``cost_us`` is a simulated compute time per compute node, charged on the session's
    clock (node attribute ``cost_us``, EXEC-12); 0 by default. ``learning_rate`` defaults
    to ``0.1 * min(1, sqrt(64 / hidden))``.
    """

    def __init__(self, target: Any, *, batch: int = 32, input_dim: int = 32, hidden: int = 64,
                 layers: int = 2, classes: int = 10, learning_rate: float | None = None,
                 seed: int = 0, device: str = "/device:GPU:0", cost_us: int = 0,
                 num_batches: int = 4, registry: Any = None, clock: Any = None) -> None:
        for what, value in (("batch", batch), ("input_dim", input_dim), ("hidden", hidden),
                            ("layers", layers), ("classes", classes),
                            ("num_batches", num_batches)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MLPWorkload: {what} must be a positive int, got {value!r}")
        if classes < 2:
            raise ValueError(f"MLPWorkload: classes must be at least 2, got {classes}")
        if not isinstance(cost_us, int) or cost_us < 0:
            raise ValueError(f"MLPWorkload: cost_us must be a non-negative int, got {cost_us!r}")
        if learning_rate is None:       # 0.1, smaller for wide layers (stable SGD at any size)
            learning_rate = 0.1 * min(1.0, math.sqrt(64 / hidden))
        if not (isinstance(learning_rate, (int, float)) and learning_rate > 0):
            raise ValueError(f"MLPWorkload: learning_rate must be positive, got "
                             f"{learning_rate!r}")
        self.batch, self.input_dim, self.hidden = batch, input_dim, hidden
        self.layers, self.classes = layers, classes
        self.learning_rate = float(learning_rate)
        self.seed, self.device, self.cost_us = seed, device, cost_us
        self.num_batches = num_batches
        self._turns = itertools.cycle(range(num_batches))   # the batches, fed in turn
        self._batch = next(self._turns)                      # the next step's
        # One seeded stream, the data first and then the weights: no draw is reused, within
        # a workload or across seeds (another seed's stream is another stream).
        rng = np.random.default_rng(seed)
        self._data = self._make_data(rng)
        self._weights = self._initial_weights(rng)
        self.graph = self.build_graph()
        if hasattr(target, "new_session"):
            self.session = target.new_session(self.graph)
        else:
            from ..direct_session import DirectSession
            self.session = DirectSession(target, self.graph, registry=registry, clock=clock)
        self.session.run([], target_nodes=["init"])

    # -- sizes ---------------------------------------------------------------------------
    @property
    def dims(self) -> list[int]:
        return [self.input_dim] + [self.hidden] * (self.layers - 1) + [self.classes]

    @property
    def param_bytes(self) -> int:
        """Bytes of the variables (weights and biases), float32."""
        d = self.dims
        return 4 * sum(d[i] * d[i + 1] + d[i + 1] for i in range(self.layers))

    @property
    def step_bytes(self) -> int:
        """4 bytes per element of every tensor a step's nodes produce (E2E-1): x and y, the
        forward and backward outputs; an upper bound of a step's peak."""
        b, d = self.batch, self.dims
        total = b * (d[0] + d[-1])                     # fed x and y
        for i in range(self.layers):
            total += 2 * b * d[i + 1]                  # MatMul, BiasAdd
            if i < self.layers - 1:
                total += b * d[i + 1]                  # Relu
        total += b + b * d[-1] + 1                     # loss vector, backprop, mean
        for i in reversed(range(self.layers)):
            total += d[i] * d[i + 1] + d[i + 1]        # dW, db
            if i > 0:
                total += 2 * b * d[i]                  # dh, ReluGrad
        return 4 * total

    @classmethod
    def sized_for(cls, target: Any, device_bytes: int, *, layers: int = 3, batch: int = 256,
                  input_dim: int = 256, classes: int = 10, **kw: Any) -> "MLPWorkload":
        """The widest workload whose variables plus one step's buffers fit ``device_bytes``.

        The width has no bound of its own: a large GPU gets a wide layer. With ``layers=1``
        no tensor has the hidden width, so ``hidden`` is the constructor's default, 64.
        """
        if isinstance(device_bytes, bool) or not isinstance(device_bytes, int):
            raise ValueError(f"device_bytes must be an int, got {device_bytes!r}")

        def need(h: int) -> int:
            probe = cls.__new__(cls)
            probe.batch, probe.input_dim, probe.hidden = batch, input_dim, h
            probe.layers, probe.classes = layers, classes
            return probe.param_bytes + probe.step_bytes

        if need(1) > device_bytes:
            raise ValueError(f"device_bytes {device_bytes} is below what hidden=1 needs "
                             f"({need(1)} bytes)")
        if layers == 1:
            width = 64                          # the constructor's default
        else:
            # The widest fitting width, one bit at a time from above: need(h) grows by at
            # least 4 bytes (a bias) per unit of h, so no width from device_bytes up fits.
            # The loop ends after that many bits whatever need() gives (sizes that the
            # constructor then refuses, naming them, included).
            width, step = 1, 1 << device_bytes.bit_length()
            while step:
                if need(width + step) <= device_bytes:
                    width += step
                step >>= 1
        return cls(target, batch=batch, input_dim=input_dim, hidden=width, layers=layers,
                   classes=classes, **kw)

    # -- data and graph -----------------------------------------------------------------------
    def _make_data(self, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
        teacher = rng.standard_normal((self.input_dim, self.classes)).astype(np.float32)
        data = []
        for _ in range(self.num_batches):
            x = rng.standard_normal((self.batch, self.input_dim)).astype(np.float32)
            labels = np.argmax(x @ teacher, axis=1)
            y = np.zeros((self.batch, self.classes), dtype=np.float32)
            y[np.arange(self.batch), labels] = 1.0
            data.append((x, y))
        return data

    def _initial_weights(self, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
        d = self.dims
        out = []
        for i in range(self.layers):
            scale = math.sqrt(2.0 / d[i]) if i < self.layers - 1 else math.sqrt(1.0 / d[i])
            w = (rng.standard_normal((d[i], d[i + 1])) * scale).astype(np.float32)
            out.append((w, np.zeros(d[i + 1], dtype=np.float32)))
        return out

    def build_graph(self) -> Graph:
        """The training graph: fetch ``"loss"``, target ``"train"``; ``"init"`` initialises."""
        g = Graph()
        dev = self.device

        def node(name: str, op: str, inputs: Sequence[str] = (), **attrs: Any) -> str:
            if self.cost_us and op in _COSTED_OPS:
                attrs["cost_us"] = self.cost_us
            return g.add_node(name, op, inputs, device=dev, **attrs)

        node("x", "Placeholder", dtype="float32", shape=(self.batch, self.input_dim))
        node("y", "Placeholder", dtype="float32", shape=(self.batch, self.classes))
        # Mean loss; its gradient is backprop / batch, folded into the step size.
        node("alpha", "Const", value=np.float32(self.learning_rate / self.batch))
        h = "x"
        pre_relu: list[str] = []
        inputs_of: list[str] = []
        for i, (w0, b0) in enumerate(self._weights):
            node(f"w{i}", "Variable", initial_value=w0)
            node(f"b{i}", "Variable", initial_value=b0)
            inputs_of.append(h)
            node(f"matmul{i}", "MatMul", [h, f"w{i}"])
            z = node(f"bias_add{i}", "BiasAdd", [f"matmul{i}", f"b{i}"])
            if i < self.layers - 1:
                h = node(f"relu{i}", "Relu", [z])
                pre_relu.append(h)
            else:
                h = z
        node("xent", "SoftmaxCrossEntropyWithLogits", [h, "y"])
        node("loss", "Mean", ["xent:0"])
        g_in = "xent:1"
        updates: list[str] = []
        for i in reversed(range(self.layers)):
            node(f"grad_w{i}", "MatMul", [inputs_of[i], g_in], transpose_a=True)
            node(f"grad_b{i}", "BiasAddGrad", [g_in])
            control: list[str] = []
            if i > 0:
                node(f"grad_h{i}", "MatMul", [g_in, f"w{i}"], transpose_b=True)
                g_in = node(f"grad_relu{i - 1}", "ReluGrad", [f"grad_h{i}", pre_relu[i - 1]])
                control = [f"^grad_h{i}"]   # read w_i before it is updated
            updates.append(node(f"update_w{i}", "ApplyGradientDescent",
                                [f"w{i}", "alpha", f"grad_w{i}", *control]))
            updates.append(node(f"update_b{i}", "ApplyGradientDescent",
                                [f"b{i}", "alpha", f"grad_b{i}"]))
        node("train", "NoOp", [f"^{u}" for u in updates])
        # TF's global_variables_initializer: variables first, at the bottom of the pool.
        node("init", "NoOp", ["^alpha"] + [f"^{k}{i}" for i in range(self.layers)
                                            for k in ("w", "b")])
        return g

    # -- running --------------------------------------------------------------------------
    def feed(self, step: int | None = None) -> dict[str, np.ndarray]:
        x, y = self._data[self._batch if step is None else step % self.num_batches]
        return {"x": x, "y": y}

    def step(self) -> float:
        """One training step; returns the mean loss of its batch (before the update)."""
        (loss,) = self.session.run(["loss"], self.feed(), ["train"])
        self._batch = next(self._turns)     # a failed step feeds the same batch again
        return float(loss)

    def evaluate(self) -> float:
        """Mean loss over all batches, without training."""
        losses = [float(self.session.run(["loss"], self.feed(i))[0])
                  for i in range(self.num_batches)]
        return float(np.mean(losses))

    def close(self) -> None:
        """Close this workload's session (not the runtime)."""
        self.session.close()

    def __enter__(self) -> "MLPWorkload":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"MLPWorkload(batch={self.batch}, dims={self.dims}, device={self.device!r}, "
                f"param_bytes={self.param_bytes}, step_bytes={self.step_bytes})")
