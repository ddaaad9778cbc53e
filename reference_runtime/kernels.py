"""Op registry and kernels (TensorFlow's ``OpRegistry`` / ``OpKernel``), SPEC.md EXEC clauses.

Each op has one ``KernelDef``: its compute function, number of outputs and the metadata the
executor schedules by: ``is_expensive`` (TF ``OpKernel::IsExpensive``, true unless a kernel
says otherwise; a kernel placed on a GPU is never expensive, TF 1.15's rule) and
``is_async`` (TF ``AsyncOpKernel``). Kernels compute with the device's array module
(``ctx.xp``: NumPy or CuPy) and allocate every output through the device's allocator
(``ctx.allocate_output``).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from .errors import (FailedPreconditionError, InvalidArgumentError)
from .tensor import (Buffer, StepAllocations, allocate_buffer, copy_from_host,
                                      device_xp, to_host)

__all__ = ["KernelDef", "OpRegistry", "OpKernelContext", "SessionResources", "register_kernel"]


@dataclass(frozen=True)
class KernelDef:
    """One op's kernel and its scheduling metadata."""

    op: str
    compute: Callable[["OpKernelContext"], None]
    num_outputs: int | Callable[[dict], int]
    is_expensive: bool
    is_async: bool
    per_node_metadata: bool  # PyFunc: attrs "is_expensive"/"is_async" override

    def num_outputs_for(self, attrs: dict) -> int:
        n = self.num_outputs(attrs) if callable(self.num_outputs) else self.num_outputs
        return int(n)

    def expensive_for(self, attrs: dict) -> bool:
        if self.per_node_metadata and "is_expensive" in attrs:
            return bool(attrs["is_expensive"])
        return self.is_expensive

    def async_for(self, attrs: dict) -> bool:
        if self.per_node_metadata and "is_async" in attrs:
            return bool(attrs["is_async"])
        return self.is_async


class OpRegistry:
    """Op type -> ``KernelDef`` (TF ``OpRegistry::Global()`` plus the kernel registry)."""

    _global: ClassVar["OpRegistry | None"] = None
    _global_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[str, KernelDef] = {}

    @classmethod
    def global_registry(cls) -> "OpRegistry":
        with cls._global_lock:
            if cls._global is None:
                cls._global = OpRegistry()
            return cls._global

    def register(self, kernel: KernelDef) -> None:
        """Called by ``register_kernel`` alone, once per op when this module is imported."""
        with self._lock:
            self._kernels[kernel.op] = kernel

    def find(self, op: str) -> KernelDef | None:
        with self._lock:
            return self._kernels.get(op)

    def lookup(self, op: str) -> KernelDef:
        kernel = self.find(op)
        if kernel is None:
            from .graph import GraphError
            raise GraphError(f"unknown op {op!r}; registered ops: {', '.join(self.ops())}")
        return kernel

    def ops(self) -> list[str]:
        with self._lock:
            return sorted(self._kernels)


def register_kernel(op: str, *, num_outputs: int | Callable[[dict], int] = 1,
                    is_expensive: bool = True, is_async: bool = False,
                    per_node_metadata: bool = False) -> Callable:
    """Decorator: register ``fn(ctx)`` as the kernel of ``op`` in the global registry."""

    def wrap(fn: Callable[["OpKernelContext"], None]) -> Callable:
        OpRegistry.global_registry().register(KernelDef(
            op, fn, num_outputs, is_expensive, is_async, per_node_metadata))
        return fn

    return wrap


class SessionResources:
    """State that outlives a step: variables and constants (TF ``ResourceMgr``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.buffers: dict[str, Buffer] = {}

    def get_or_create(self, key: str, create: Callable[[], Buffer]) -> Buffer:
        with self.lock:
            buf = self.buffers.get(key)
            if buf is None:
                buf = create()
                self.buffers[key] = buf
            return buf

    def release_all(self) -> None:
        with self.lock:
            bufs, self.buffers = self.buffers, {}
        for buf in bufs.values():
            buf.release()


class OpKernelContext:
    """What a kernel sees: its node, device, inputs, and how to produce outputs."""

    def __init__(self, *, node: Any, device: Any, inputs: list[Buffer],
                 step: StepAllocations, resources: SessionResources, feeds: dict,
                 num_outputs: int) -> None:
        self.node = node
        self.device = device
        self.xp = device_xp(device)
        self._inputs = inputs
        self._step = step
        self.resources = resources
        self.feeds = feeds
        self.outputs: list[Buffer | None] = [None] * num_outputs

    # -- inputs -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.node.name

    @property
    def attrs(self) -> dict:
        return self.node.attrs

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    def input(self, i: int) -> Any:
        return self._inputs[i].array

    def input_buffer(self, i: int) -> Buffer:
        return self._inputs[i]

    def require_inputs(self, n: int) -> None:
        if len(self._inputs) != n:
            raise InvalidArgumentError(
                f"{self.node.op} node {self.name!r} expects {n} input(s), got "
                f"{len(self._inputs)}", node_name=self.name, op=self.node.op,
                device=self.device.name)

    def invalid(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.node.op} node {self.name!r}: {message}",
                                    node_name=self.name, op=self.node.op,
                                    device=self.device.name)

    # -- outputs ----------------------------------------------------------------------
    def allocate_output(self, i: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """Allocate output ``i`` on this node's device and return its array."""
        buf = self._step.allocate(self.device, shape, dtype, node_name=self.name)
        self._set(i, buf)
        return buf.array

    def set_output_value(self, i: int, value: np.ndarray) -> None:
        """Allocate output ``i`` and copy the host array ``value`` into it, straight into the
        output buffer, with no device temporary (a fed value is a NumPy array: the session
        converts every feed; a PyFunc result is converted by its kernel)."""
        out = self.allocate_output(i, value.shape, value.dtype)
        if out.size:
            copy_from_host(out, value)

    def forward_input(self, i_in: int, i_out: int) -> None:
        """Output ``i_out`` is input ``i_in``'s buffer (no allocation, TF ``set_output``)."""
        buf = self._inputs[i_in]
        self._step.ref(buf)
        self._set(i_out, buf)

    def set_output_buffer(self, i: int, buf: Buffer) -> None:
        """Output ``i`` is a persistent buffer (variable or constant): the session owns it,
        so no step reference is taken."""
        self._set(i, buf)

    def persistent_buffer(self, key: str, create: Callable[[], Any]) -> Buffer:
        """The session-owned buffer ``key`` of this node, created from ``create()`` once."""

        def make() -> Buffer:
            value = np.asarray(create())
            buf = allocate_buffer(self.device, value.shape, value.dtype, node_name=self.name,
                                  persistent=True)
            if value.size:
                buf.array[...] = self.xp.asarray(value)
            return buf

        return self.resources.get_or_create(key, make)

    def _set(self, i: int, buf: Buffer) -> None:
        self.outputs[i] = buf     # each kernel sets each of its outputs once


# -- kernels ------------------------------------------------------------------------------
def _axis(attrs: dict) -> Any:
    axis = attrs.get("axis")
    if isinstance(axis, list):
        axis = tuple(axis)
    return axis


@register_kernel("NoOp", num_outputs=0, is_expensive=False)
def _no_op(ctx: OpKernelContext) -> None:
    """Nothing to compute: the node only orders its control inputs."""


@register_kernel("Const", is_expensive=False)
def _const(ctx: OpKernelContext) -> None:
    if "value" not in ctx.attrs:
        raise ctx.invalid("attr 'value' is required")
    dtype = ctx.attrs.get("dtype")
    buf = ctx.persistent_buffer(f"const/{ctx.name}",
                                lambda: np.asarray(ctx.attrs["value"], dtype=dtype))
    ctx.set_output_buffer(0, buf)


def _check_shape(ctx: OpKernelContext, value: np.ndarray, shape: Any) -> None:
    if shape is None:
        return
    ok = len(shape) == value.ndim and all(
        s is None or s == -1 or s == v for s, v in zip(shape, value.shape))
    if not ok:
        raise ctx.invalid(f"fed value has shape {list(value.shape)}, expected "
                          f"{list(shape)}")


@register_kernel("Placeholder", is_expensive=False)
def _placeholder(ctx: OpKernelContext) -> None:
    """Also the kernel of every fed node (TF's ``_Arg``)."""
    if ctx.name not in ctx.feeds:
        dtype = ctx.attrs.get("dtype", "float32")
        raise ctx.invalid(f"You must feed a value for placeholder tensor {ctx.name!r} "
                          f"with dtype {np.dtype(dtype).name}")
    value = ctx.feeds[ctx.name]
    if ctx.node.op == "Placeholder" and ctx.attrs.get("dtype") is not None:
        try:
            value = np.asarray(value, dtype=ctx.attrs["dtype"])
        except (TypeError, ValueError) as exc:
            raise ctx.invalid(f"cannot convert the fed value to "
                              f"{np.dtype(ctx.attrs['dtype']).name}: {exc}") from None
    _check_shape(ctx, value, ctx.attrs.get("shape"))
    ctx.set_output_value(0, value)


@register_kernel("Variable", is_expensive=False)
def _variable(ctx: OpKernelContext) -> None:
    def initial() -> np.ndarray:
        if "initial_value" in ctx.attrs:
            init = ctx.attrs["initial_value"]
            init = init() if callable(init) else init
            return np.asarray(init, dtype=ctx.attrs.get("dtype"))
        raise FailedPreconditionError(
            f"Attempting to use uninitialized value {ctx.name}", node_name=ctx.name,
            op="Variable", device=ctx.device.name)

    ctx.set_output_buffer(0, ctx.persistent_buffer(f"variable/{ctx.name}", initial))


def _variable_input(ctx: OpKernelContext) -> Any:
    buf = ctx.input_buffer(0)
    if not buf.persistent:
        raise ctx.invalid("input 0 must be a variable")
    return buf.array


@register_kernel("Assign")
def _assign(ctx: OpKernelContext) -> None:
    ctx.require_inputs(2)
    ref, value = _variable_input(ctx), ctx.input(1)
    if ref.shape != value.shape:           # shapes are tuples (NumPy and CuPy)
        raise ctx.invalid(f"shapes differ: variable {list(ref.shape)}, value "
                          f"{list(value.shape)}")
    ref[...] = value
    ctx.forward_input(0, 0)


@register_kernel("ApplyGradientDescent")
def _apply_gradient_descent(ctx: OpKernelContext) -> None:
    """var -= alpha * delta (inputs: var, alpha (scalar), delta)."""
    ctx.require_inputs(3)
    var, alpha, delta = _variable_input(ctx), ctx.input(1), ctx.input(2)
    if var.shape != delta.shape:
        raise ctx.invalid(f"var and delta shapes differ: {list(var.shape)} vs "
                          f"{list(delta.shape)}")
    if alpha.ndim != 0:                   # an input is always an array
        raise ctx.invalid(f"alpha is not a scalar: shape {list(alpha.shape)}")
    _subtract_scaled(ctx.xp, var, alpha, delta)
    ctx.forward_input(0, 0)


@functools.cache
def _fused_update_kernel(xp: Any) -> Any:
    """CuPy's one-pass ``var -= alpha * delta`` (compiled once per array module)."""
    return xp.ElementwiseKernel("T delta, S alpha", "T var", "var -= (T)(alpha * delta)",
                                "antman_apply_gradient_descent")


def _subtract_scaled(xp: Any, var: Any, alpha: Any, delta: Any) -> None:
    """``var -= alpha * delta`` in place. On CuPy one fused kernel, as TF's Eigen expression
    is, so no device temporary goes through the allocator; NumPy's temporary is host memory
    the allocator never sees."""
    if hasattr(xp, "ElementwiseKernel"):
        _fused_update_kernel(xp)(delta, alpha, var)
    else:
        var -= (alpha * delta).astype(var.dtype, copy=False)


@register_kernel("Identity", is_expensive=False)
def _identity(ctx: OpKernelContext) -> None:
    ctx.require_inputs(1)
    ctx.forward_input(0, 0)


@register_kernel("MatMul")
def _mat_mul(ctx: OpKernelContext) -> None:
    ctx.require_inputs(2)
    a, b = ctx.input(0), ctx.input(1)
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.invalid(f"In[0] and In[1] must be matrices: {list(a.shape)}, "
                          f"{list(b.shape)}")
    if ctx.attrs.get("transpose_a"):
        a = a.T
    if ctx.attrs.get("transpose_b"):
        b = b.T
    if a.shape[1] != b.shape[0]:
        raise ctx.invalid(f"Matrix size-incompatible: In[0]: {list(a.shape)}, In[1]: "
                          f"{list(b.shape)}")
    out = ctx.allocate_output(0, (a.shape[0], b.shape[1]), np.result_type(a.dtype, b.dtype))
    ctx.xp.matmul(a, b, out=out)


@register_kernel("BiasAdd")
def _bias_add(ctx: OpKernelContext) -> None:
    ctx.require_inputs(2)
    value, bias = ctx.input(0), ctx.input(1)
    if bias.ndim != 1 or value.ndim < 2 or value.shape[-1] != bias.shape[0]:
        raise ctx.invalid(f"Biases must be 1-D and match the last dimension of value: "
                          f"value {list(value.shape)}, bias {list(bias.shape)}")
    out = ctx.allocate_output(0, value.shape, value.dtype)
    ctx.xp.add(value, bias, out=out)


@register_kernel("BiasAddGrad")
def _bias_add_grad(ctx: OpKernelContext) -> None:
    ctx.require_inputs(1)
    g = ctx.input(0)
    if g.ndim < 2:
        raise ctx.invalid(f"out_backprop must be at least 2-D: {list(g.shape)}")
    out = ctx.allocate_output(0, (g.shape[-1],), g.dtype)
    ctx.xp.sum(g, axis=tuple(range(g.ndim - 1)), out=out)


@register_kernel("Add")
def _add(ctx: OpKernelContext) -> None:
    ctx.require_inputs(2)
    x, y = ctx.input(0), ctx.input(1)
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        raise ctx.invalid(f"Incompatible shapes: {list(x.shape)} vs {list(y.shape)}") from None
    out = ctx.allocate_output(0, shape, np.result_type(x.dtype, y.dtype))
    ctx.xp.add(x, y, out=out)


@register_kernel("Relu")
def _relu(ctx: OpKernelContext) -> None:
    ctx.require_inputs(1)
    x = ctx.input(0)
    out = ctx.allocate_output(0, x.shape, x.dtype)
    ctx.xp.maximum(x, 0, out=out)


@register_kernel("ReluGrad")
def _relu_grad(ctx: OpKernelContext) -> None:
    """gradients * (features > 0)."""
    ctx.require_inputs(2)
    g, features = ctx.input(0), ctx.input(1)
    if g.shape != features.shape:                # shapes are tuples (NumPy and CuPy)
        raise ctx.invalid(f"gradients {list(g.shape)} and features {list(features.shape)} "
                          f"differ")
    out = ctx.allocate_output(0, g.shape, g.dtype)
    ctx.xp.greater(features, 0, out=out)        # 1 where features > 0, else 0: no temporary
    ctx.xp.multiply(out, g, out=out)


@register_kernel("SoftmaxCrossEntropyWithLogits", num_outputs=2)
def _softmax_cross_entropy_with_logits(ctx: OpKernelContext) -> None:
    """Outputs: loss [batch], backprop [batch, classes] = softmax(logits) - labels."""
    ctx.require_inputs(2)
    logits, labels = ctx.input(0), ctx.input(1)
    if logits.ndim != 2 or logits.shape != labels.shape:
        raise ctx.invalid(f"logits and labels must be same-shaped matrices: "
                          f"{list(logits.shape)} vs {list(labels.shape)}")
    # As TF's kernel: the outputs are the working space, plus a [batch, 1] scratch (and one
    # [batch, classes] product), so that few temporaries go through the device allocator.
    # loss_i = log(Σ_j exp(s_ij)) · Σ_j labels_ij − Σ_j labels_ij · s_ij, s = logits − max.
    xp = ctx.xp
    loss = ctx.allocate_output(0, (logits.shape[0],), logits.dtype)
    backprop = ctx.allocate_output(1, logits.shape, logits.dtype)
    scratch = xp.max(logits, axis=1, keepdims=True)
    xp.subtract(logits, scratch, out=backprop)               # s
    xp.sum(xp.multiply(labels, backprop), axis=1, out=loss)  # Σ labels · s
    xp.exp(backprop, out=backprop)
    xp.sum(backprop, axis=1, keepdims=True, out=scratch)     # Σ exp(s)
    xp.divide(backprop, scratch, out=backprop)
    xp.subtract(backprop, labels, out=backprop)              # softmax − labels
    xp.log(scratch, out=scratch)
    xp.subtract(scratch[:, 0] * xp.sum(labels, axis=1), loss, out=loss)


def _reduce(ctx: OpKernelContext, fn_name: str) -> None:
    ctx.require_inputs(1)
    x = ctx.input(0)
    axis = _axis(ctx.attrs)
    keep = bool(ctx.attrs.get("keep_dims", False))
    try:
        shape = np.empty(x.shape, dtype=np.bool_).sum(axis=axis, keepdims=keep).shape
    except (ValueError, TypeError) as exc:  # numpy.AxisError is a ValueError
        raise ctx.invalid(f"bad axis {axis!r} for shape {list(x.shape)}: {exc}") from None
    out = ctx.allocate_output(0, shape, x.dtype)
    getattr(ctx.xp, fn_name)(x, axis=axis, keepdims=keep, out=out)


@register_kernel("Sum")
def _sum(ctx: OpKernelContext) -> None:
    _reduce(ctx, "sum")


@register_kernel("Mean")
def _mean(ctx: OpKernelContext) -> None:
    _reduce(ctx, "mean")


def _py_func_outputs(attrs: dict) -> int:
    return int(attrs.get("num_outputs", 1))


@register_kernel("PyFunc", num_outputs=_py_func_outputs, per_node_metadata=True)
def _py_func(ctx: OpKernelContext) -> None:
    """Calls ``attrs["func"](*inputs)`` with host (NumPy) copies of the inputs.

    The result (one array-like, or a tuple or list of ``num_outputs`` of them) is copied into
    outputs allocated on the node's device; any other result is one value (``tf.py_func``).
    """
    func = ctx.attrs.get("func")
    if not callable(func):
        raise ctx.invalid("attr 'func' must be callable")
    args = [to_host(ctx.input(i)) for i in range(ctx.num_inputs)]
    result = func(*args)
    n = len(ctx.outputs)
    if n == 0:
        return
    values = result if n > 1 and isinstance(result, (tuple, list)) else (result,)
    if len(values) != n:
        raise ctx.invalid(f"func returned {len(values)} value(s), expected {n}")
    for i, value in enumerate(values):
        if value is None:
            raise ctx.invalid(f"func returned None for output {i}")
        ctx.set_output_value(i, np.asarray(value))
