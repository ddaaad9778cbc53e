"""EXEC clauses: graph, kernels, buffers through the allocator, errors, scheduling, leaks."""

from __future__ import annotations

import logging
import random
import threading
import time

import numpy as np
import pytest

from conformance.checks import names_identifier, raises
from conformance.control_helpers import JOIN_TIMEOUT_S as JOIN_S
from conformance.control_helpers import carries, joined, run_in_thread, runtime_records
from conformance.execution_helpers import (CPU, GPU, INTER_OP_PREFIX, Log, RecordingBackend,
                                           antman_threads, py_func, sim_runtime)
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("executor")


@pytest.fixture
def ctx(rt):
    with sim_runtime(rt, gpu_memory_bytes=64 << 20) as c:
        yield c


def allocator_of(ctx, device):
    return ctx.device_mgr.lookup_device(device).get_allocator()


# -- EXEC-1, EXEC-2 -------------------------------------------------------------------------

@pytest.mark.clause("EXEC-1")
def test_add_node_returns_the_name_and_rejects_bad_nodes(rt) -> None:
    g = rt.Graph()
    assert g.add_node("a", "Placeholder", dtype="float32") == "a", "add_node('a') [EXEC-1]"
    assert g.add_node("later", "Identity", ["b:0"]) == "later", \
        "add_node with an input added later must be accepted [EXEC-1]"
    assert issubclass(rt.GraphError, ValueError), "GraphError must be a ValueError [EXEC-1]"
    bad = [
        (("a", "Identity", ["later"]), "duplicate name"),
        (("c", "NoSuchOp"), "unknown op"),
        (("", "NoOp"), "empty name"),
        (("bad name", "NoOp"), "space in name"),
        (("d", "Add", ["^a", "a"]), "data input after a control input"),
        (("e", "Identity", [""]), "empty input"),
        (("f", "Identity", [3]), "non-str input"),
    ]
    for args, why in bad:
        with pytest.raises(rt.GraphError):
            g.add_node(*args)
            pytest.fail(f"add_node{args} accepted ({why}) [EXEC-1]")


@pytest.mark.clause("EXEC-1")
def test_inputs_given_as_one_str_are_one_input(rt, ctx) -> None:
    g = rt.Graph()
    g.add_node("src", "Const", value=[1.0, 2.0])
    g.add_node("out", "Identity", "src")
    g.add_node("after", "NoOp", "^out")
    seen = {n.name: (list(n.inputs), list(n.control_inputs)) for n in g.nodes}
    assert seen["out"] == (["src"], []) and seen["after"] == ([], ["out"]), (
        f"add_node(..., 'src') and add_node(..., '^out') recorded (inputs, control inputs) "
        f"{seen['out']} and {seen['after']}, expected one input each [EXEC-1]")
    s = ctx.new_session(g)
    (value,) = s.run(["out"], target_nodes=["after"])
    assert np.array_equal(value, [1.0, 2.0]), f"Identity of 'src' returned {value!r} [EXEC-1]"


@pytest.mark.clause("EXEC-1")
@pytest.mark.parametrize("inputs", [5, None, 1.5, object()], ids=["int", "None", "float",
                                                                   "object"])
def test_inputs_that_are_no_iterable_are_a_graph_error(rt, inputs) -> None:
    g = rt.Graph()
    with raises(rt.GraphError, "EXEC-1", f"add_node('n', 'NoOp', {inputs!r}) (inputs neither "
                                         f"a str nor an iterable)") as refused:
        g.add_node("n", "NoOp", inputs)
    assert names_identifier(refused.value, "n"), \
        f"the GraphError {refused.value} does not name 'n' [EXEC-1]"
    assert g.nodes == [], f"a refused add_node('n', 'NoOp', {inputs!r}) left a node [EXEC-1]"


@pytest.mark.clause("EXEC-1")
def test_graph_nodes_is_a_copy(rt) -> None:
    g = rt.Graph()
    g.add_node("a", "Placeholder", dtype="float32")
    g.add_node("b", "Identity", ["a"])
    nodes = g.nodes
    assert isinstance(nodes, list), \
        f"Graph.nodes returned a {type(nodes).__name__}, not a new list [EXEC-1]"
    nodes.pop()
    nodes.clear()
    assert [n.name for n in g.nodes] == ["a", "b"], \
        "changing the list Graph.nodes returned changed the graph [EXEC-1]"


@pytest.mark.clause("EXEC-1")
def test_graph_nodes_are_hashable_and_setting_them_changes_no_graph(rt) -> None:
    g = rt.Graph()
    g.add_node("a", "Placeholder", dtype="float32")
    g.add_node("b", "Identity", ["a"], device="/device:CPU:0", cost_us=1)
    try:
        by_node = {n: n.name for n in g.nodes}
    except TypeError as exc:
        pytest.fail(f"a node of Graph.nodes cannot key a dict: {exc} [EXEC-1]")
    assert sorted(by_node.values()) == ["a", "b"], f"{by_node} [EXEC-1]"
    for node in g.nodes:
        for attr, value in (("name", "z"), ("op", "NoOp"), ("inputs", ("z",)),
                            ("device", "/device:GPU:0")):
            try:
                setattr(node, attr, value)
            except AttributeError:
                pass                       # a read-only node: nothing to change
    seen = [(n.name, n.op, list(n.inputs), n.device) for n in g.nodes]
    assert seen == [("a", "Placeholder", [], "/device:CPU:0"),
                    ("b", "Identity", ["a"], "/device:CPU:0")], (
        f"setting the attributes of the nodes Graph.nodes returned changed the graph: {seen} "
        f"[EXEC-1]")


@pytest.mark.clause("EXEC-1")
@pytest.mark.parametrize("given,placed", [
    ("/job:localhost/replica:0/task:0/device:GPU:0", "/device:GPU:0"),
    ("/device:GPU:0", "/device:GPU:0"), ("device:GPU:0", "/device:GPU:0"),
    ("GPU:0", "/device:GPU:0"), ("/gpu:0", "/device:GPU:0"), ("GPU:01", "/device:GPU:1"),
    ("cpu:0", "/device:CPU:0"), ("/job:localhost/replica:0/task:0/device:cpu:00",
                                 "/device:CPU:0"), ("no-such-device", "no-such-device")])
def test_a_node_s_device_is_in_the_device_form_whatever_form_was_given(rt, given,
                                                                        placed) -> None:
    g = rt.Graph()
    g.add_node("c", "Const", device=given, value=1.0)
    (node,) = g.nodes
    assert node.device == placed, \
        f"add_node(device={given!r}) recorded device {node.device!r}, expected {placed!r} [EXEC-1]"


@pytest.mark.clause("EXEC-1")
@pytest.mark.parametrize("ref", ["a:\u00b2", "a:\uff11", "a: 1"])
def test_non_ascii_output_index_is_part_of_the_name(rt, ref) -> None:
    g = rt.Graph()
    g.add_node("a", "Placeholder", dtype="float32")
    g.add_node("b", "Identity", [ref])
    (node,) = [n for n in g.nodes if n.name == "b"]
    assert list(node.inputs) == [ref], f"input {ref!r} recorded as {node.inputs} [EXEC-1]"
    with pytest.raises(rt.GraphError):
        g.validate()
        pytest.fail(f"input {ref!r} validated: it names no node [EXEC-1]")

@pytest.mark.clause("EXEC-1")
@pytest.mark.parametrize("name", ["a\n", "\na", "a\t", "a b", "\u00e9", "\uff41", "-a", "/a",
                                  "a:0", "^a"])
def test_node_names_outside_the_pattern_are_refused(rt, name) -> None:
    g = rt.Graph()
    with pytest.raises(rt.GraphError):
        g.add_node(name, "NoOp")
        pytest.fail(f"add_node({name!r}) accepted a name outside "
                    f"[A-Za-z0-9_.][A-Za-z0-9_./-]* [EXEC-1]")
    assert g.nodes == [], f"a refused add_node({name!r}) left a node [EXEC-1]"


@pytest.mark.clause("EXEC-2")
def test_validation_rejects_unknown_inputs_bad_indices_and_cycles(rt, ctx) -> None:
    g = rt.Graph()
    g.add_node("a", "Placeholder", dtype="float32")
    g.add_node("b", "Identity", ["nowhere"])
    with pytest.raises(rt.GraphError, match="nowhere"):
        g.validate()
    with pytest.raises(rt.GraphError):
        ctx.new_session(g)

    g = rt.Graph()
    g.add_node("a", "Placeholder", dtype="float32")
    g.add_node("b", "Identity", ["a:1"])
    with pytest.raises(rt.GraphError, match="a:1"):
        g.validate()

    g = rt.Graph()
    g.add_node("a", "Identity", ["c"])
    g.add_node("b", "Identity", ["a"])
    g.add_node("c", "Identity", ["^b", ])
    with pytest.raises(rt.GraphError) as info:
        g.validate()
    msg = str(info.value)
    assert "->" in msg and all(n in msg for n in "abc"), \
        f"cycle error {msg!r} must list the cycle a -> b -> c [EXEC-2]"


@pytest.mark.clause("EXEC-2")
def test_a_control_input_that_names_no_node_is_a_graph_error(rt, ctx) -> None:
    g = rt.Graph()
    g.add_node("a", "Placeholder", dtype="float32")
    g.add_node("b", "Identity", ["a", "^ghost"])
    for what, call in (("validate()", g.validate), ("new_session", lambda: ctx.new_session(g))):
        with raises(rt.GraphError, "EXEC-2", f"{what} of a graph whose control input '^ghost' "
                                             f"names no node") as refused:
            call()
        assert names_identifier(refused.value, "ghost"), (
            f"{what}: the GraphError {refused.value} does not name the control input 'ghost' "
            f"[EXEC-2]")


def cycle_in(message: str) -> list[str]:
    return message.split("cycle:", 1)[1].strip().split(" -> ")


@pytest.mark.clause("EXEC-2")
@pytest.mark.parametrize("edges,members", [
    ({"a": ["c"], "b": ["a"], "c": ["^b"]}, {"a", "b", "c"}),
    ({"s": ["s"]}, {"s"}),
    ({"x": [], "a": ["^x", "^d"], "b": ["^a"], "c": ["^b"], "d": ["^c"], "e": ["^d"]},
     {"a", "b", "c", "d"}),
    ({"x": [], "y": ["^x"], "p": ["q"], "q": ["p"]}, {"p", "q"}),
    ({"a": ["^n", "^c"], "n": [], "b": ["^a"], "c": ["^b"]}, {"a", "b", "c"}),
    ({"e": ["^d"], "a": ["^x", "^d"], "x": [], "b": ["^a"], "c": ["^b"], "d": ["^c"]},
     {"a", "b", "c", "d"}),
    ({"y": ["^x"], "x": [], "p": ["q"], "q": ["p"]}, {"p", "q"}),
], ids=["three", "self", "behind-a-root", "apart", "beside-a-finished-branch",
        "entered-from-outside", "after-a-node-already-walked"])
def test_cycle_message_follows_the_data_flow(rt, edges, members) -> None:
    g = rt.Graph()
    for name, inputs in edges.items():
        g.add_node(name, "NoOp" if not inputs else "Identity", inputs)
    with pytest.raises(rt.GraphError) as info:
        g.validate()
        pytest.fail(f"a graph with the cycle {sorted(members)} validated [EXEC-2]")
    names = cycle_in(str(info.value))
    takes = {n: {i.lstrip("^") for i in ins} for n, ins in edges.items()}
    assert names[0] == names[-1] and set(names) == members \
        and len(names) == len(members) + 1, (
            f"cycle listed as {names}, expected the nodes {sorted(members)} once each, the "
            f"first repeated last [EXEC-2]")
    bad = [(a, b) for a, b in zip(names, names[1:]) if a not in takes[b]]
    assert not bad, (f"cycle {' -> '.join(names)}: {bad} are not producer -> consumer pairs "
                     f"(each node must be followed by one that takes it as input) [EXEC-2]")


@pytest.mark.clause("EXEC-2")
def test_validation_ends_on_a_deep_graph_of_diamonds(rt) -> None:
    """64 diamonds in a chain: 2^64 paths from the first node to the last. A search that
    walks every path (re-entering finished nodes) never ends."""
    g = rt.Graph()
    g.add_node("a0", "NoOp")
    for i in range(64):
        g.add_node(f"b{i}", "Identity", [f"^a{i}"])
        g.add_node(f"c{i}", "Identity", [f"^a{i}"])
        g.add_node(f"a{i + 1}", "Identity", [f"^b{i}", f"^c{i}"])
    g.validate()
    assert len(g.nodes) == 193, f"{len(g.nodes)} nodes [EXEC-2]"


@pytest.mark.clause("EXEC-10")
def test_a_run_of_a_deep_graph_of_diamonds_ends(rt, ctx) -> None:
    """Pruning to what a target needs walks each node once, not each of its 2^64 paths: every
    needed node runs once, whatever the number of paths to it (EXEC-10)."""
    g = rt.Graph()
    g.add_node("a0", "NoOp")
    for i in range(64):
        g.add_node(f"b{i}", "NoOp", [f"^a{i}"])
        g.add_node(f"c{i}", "NoOp", [f"^a{i}"])
        g.add_node(f"a{i + 1}", "NoOp", [f"^b{i}", f"^c{i}"])
    assert ctx.new_session(g).run([], target_nodes=["a64"]) == [], \
        "a target-only run returned values [EXEC-10]"

@pytest.mark.clause("EXEC-2")
@pytest.mark.parametrize("device,named", [("/device:GPU:7", "GPU:7"),
                                          ("no-such-device", "no-such-device")])
def test_unknown_device_fails_the_run_naming_node_and_device(rt, ctx, device, named) -> None:
    g = rt.Graph()
    g.add_node("c", "Const", device=device, value=1.0)
    s = ctx.new_session(g)
    with pytest.raises(rt.InvalidArgumentError) as info:
        s.run(["c"])
    assert names_identifier(info.value, "c") and named in str(info.value), \
        f"run(['c']) on {device!r} raised {info.value!r} [EXEC-2]"


# -- EXEC-3 ----------------------------------------------------------------------------------

METADATA = {
    "NoOp": (0, False), "Const": (1, False), "Placeholder": (1, False),
    "Variable": (1, False), "Identity": (1, False), "Assign": (1, True),
    "ApplyGradientDescent": (1, True), "MatMul": (1, True), "BiasAdd": (1, True),
    "BiasAddGrad": (1, True), "Add": (1, True), "Relu": (1, True), "ReluGrad": (1, True),
    "Sum": (1, True), "Mean": (1, True), "SoftmaxCrossEntropyWithLogits": (2, True),
    "PyFunc": (1, True),
}


@pytest.mark.clause("EXEC-3")
@pytest.mark.parametrize("op", sorted(METADATA))
def test_kernel_metadata(rt, op: str) -> None:
    kernel = rt.OpRegistry.global_registry().lookup(op)
    n, expensive = METADATA[op]
    assert kernel.num_outputs_for({}) == n, f"lookup({op!r}).num_outputs_for({{}}) [EXEC-3]"
    assert kernel.is_expensive is expensive, f"lookup({op!r}).is_expensive [EXEC-3]"
    assert kernel.is_async is False, f"lookup({op!r}).is_async [EXEC-3]"


@pytest.mark.clause("EXEC-3")
def test_unknown_op_lookup_and_pyfunc_outputs(rt) -> None:
    with pytest.raises(rt.GraphError):
        rt.OpRegistry.global_registry().lookup("NoSuchOp")
    kernel = rt.OpRegistry.global_registry().lookup("PyFunc")
    assert kernel.num_outputs_for({"num_outputs": 3}) == 3, "PyFunc num_outputs attr [EXEC-3]"


@pytest.mark.clause("EXEC-3")
@pytest.mark.parametrize("field,value", [("is_expensive", True), ("is_async", True),
                                         ("op", "Relu"), ("num_outputs", 5)])
def test_a_kernel_def_is_read_only(rt, field, value) -> None:
    """Setting an attribute of the KernelDef that lookup returned raises AttributeError and
    changes no later lookup (a registry whose KernelDef could be changed would make every
    Identity expensive, or give it five outputs, in every graph of the process)."""
    registry = rt.OpRegistry.global_registry()
    kernel = registry.lookup("Identity")
    before = getattr(kernel, field)
    try:
        with pytest.raises(AttributeError):
            setattr(kernel, field, value)
            pytest.fail(f"setting lookup('Identity').{field} = {value!r} raised nothing "
                        f"[EXEC-3]")
        again = registry.lookup("Identity")
        assert getattr(again, field) == before and again.num_outputs_for({}) == 1 \
            and again.is_expensive is False, (
                f"setting lookup('Identity').{field} changed the registry: {field} "
                f"{getattr(again, field)!r} [EXEC-3]")
    finally:
        if getattr(kernel, field) != before:      # undo a change the runtime let through
            object.__setattr__(kernel, field, before)


# -- EXEC-4 ----------------------------------------------------------------------------------

def _softmax_xent(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    log_sm = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    return -(labels * log_sm).sum(axis=1), np.exp(log_sm) - labels


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_kernel_values(rt, ctx, device: str) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    labels = np.eye(5, dtype=np.float32)[[0, 3, 1, 4]]
    g = rt.Graph()

    def add(name, op, inputs=(), **attrs):
        return g.add_node(name, op, inputs, device=device, **attrs)

    add("a", "Placeholder", dtype="float32", shape=(4, 3))
    add("b", "Placeholder", dtype="float32", shape=(None, 5))
    add("bias", "Const", value=bias)
    add("mm", "MatMul", ["a", "b"])
    add("mm_ta", "MatMul", ["a", "a"], transpose_a=True)
    add("mm_tb", "MatMul", ["a", "a"], transpose_b=True)
    add("ba", "BiasAdd", ["mm", "bias"])
    add("bag", "BiasAddGrad", ["ba"])
    add("sum_all", "Sum", ["ba"])
    add("mean0", "Mean", ["ba"], axis=0)
    add("sum1k", "Sum", ["ba"], axis=1, keep_dims=True)
    add("sum_list", "Sum", ["ba"], axis=[0, 1])           # a list is the tuple of its ints
    add("mean_list", "Mean", ["ba"], axis=[1], keep_dims=True)
    add("add", "Add", ["ba", "bias"])
    add("relu", "Relu", ["ba"])
    add("relu_grad", "ReluGrad", ["mm", "ba"])
    add("labels", "Placeholder", dtype="float32")
    add("xent", "SoftmaxCrossEntropyWithLogits", ["ba", "labels"])
    add("ident", "Identity", ["relu"])
    s = ctx.new_session(g)
    names = ["mm", "mm_ta", "mm_tb", "ba", "bag", "sum_all", "mean0", "sum1k", "sum_list",
             "mean_list", "add", "relu", "relu_grad", "xent:0", "xent:1", "ident", "bias"]
    try:
        out = dict(zip(names, s.run(names, {"a": a, "b": b, "labels": labels})))
    except rt.OpError as exc:
        pytest.fail(f"a step of valid kernel inputs on {device} failed: {exc} [EXEC-4]")
    mm = a.astype(np.float64) @ b
    ba = mm + bias
    loss, backprop = _softmax_xent(ba.astype(np.float32), labels)
    expected = {
        "mm": mm, "mm_ta": a.T.astype(np.float64) @ a, "mm_tb": a.astype(np.float64) @ a.T,
        "ba": ba, "bag": ba.sum(axis=0), "sum_all": ba.sum(), "mean0": ba.mean(axis=0),
        "sum1k": ba.sum(axis=1, keepdims=True), "sum_list": ba.sum(axis=(0, 1)),
        "mean_list": ba.mean(axis=1, keepdims=True), "add": ba + bias, "relu": np.maximum(ba, 0),
        "relu_grad": mm * (ba > 0), "xent:0": loss, "xent:1": backprop,
        "ident": np.maximum(ba, 0), "bias": bias,
    }
    for name in names:
        got = out[name]
        assert isinstance(got, np.ndarray), f"run({name!r}) returned {type(got)} [SESS-2]"
        assert got.dtype == np.float32, f"{name}: dtype {got.dtype}, expected float32 [EXEC-4]"
        np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-5,
                                   err_msg=f"run({name!r}) on {device} [EXEC-4]")


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_softmax_xent_of_labels_not_summing_to_one(rt, ctx, device: str) -> None:
    """loss[i] = -Σ_j labels[i,j] * log_softmax(logits)[i,j] whatever the labels sum to:
    rows of labels summing to 2, 0.5 and 0 (soft or partial labels), and to 1."""
    logits = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [4.0, 0.0, -2.0], [0.0, 0.0, 1.0]],
                      np.float32)
    labels = np.array([[1.0, 1.0, 0.0], [0.0, 0.25, 0.25], [0.0, 0.0, 0.0], [0.2, 0.3, 0.5]],
                      np.float32)
    g = rt.Graph()
    g.add_node("logits", "Placeholder", device=device, dtype="float32")
    g.add_node("labels", "Placeholder", device=device, dtype="float32")
    g.add_node("xent", "SoftmaxCrossEntropyWithLogits", ["logits", "labels"], device=device)
    loss, backprop = ctx.new_session(g).run(["xent:0", "xent:1"],
                                            {"logits": logits, "labels": labels})
    want_loss, want_backprop = _softmax_xent(logits, labels)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-5,
                               err_msg=f"loss of labels summing to 2, 0.5, 0, 1 on {device} "
                                       f"[EXEC-4]")
    np.testing.assert_allclose(backprop, want_backprop, rtol=1e-5, atol=1e-5,
                               err_msg=f"backprop of labels summing to 2, 0.5, 0, 1 on "
                                       f"{device} [EXEC-4]")


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_variables_assign_and_gradient_descent(rt, ctx, device: str) -> None:
    g = rt.Graph()
    g.add_node("v", "Variable", device=device, initial_value=np.array([1.0, 2.0], np.float32))
    g.add_node("alpha", "Const", device=device, value=np.float32(0.5))
    g.add_node("delta", "Placeholder", device=device, dtype="float32")
    g.add_node("step", "ApplyGradientDescent", ["v", "alpha", "delta"], device=device)
    g.add_node("value", "Placeholder", device=device, dtype="float32")
    g.add_node("assign", "Assign", ["v", "value"], device=device)
    s = ctx.new_session(g)
    (v0,) = s.run(["v"])
    np.testing.assert_array_equal(v0, [1.0, 2.0], err_msg="initial_value [EXEC-4]")
    (v1,) = s.run(["step"], {"delta": np.array([2.0, -4.0], np.float32)})
    np.testing.assert_allclose(v1, [0.0, 4.0], err_msg="ApplyGradientDescent [EXEC-4]")
    np.testing.assert_allclose(s.run(["v"])[0], [0.0, 4.0],
                               err_msg="the update must persist across runs [EXEC-4]")
    s.run([], {"value": np.array([7.0, 8.0], np.float32)}, ["assign"])
    np.testing.assert_allclose(s.run(["v"])[0], [7.0, 8.0], err_msg="Assign [EXEC-4]")
    with pytest.raises(rt.InvalidArgumentError):
        s.run(["assign"], {"value": np.zeros(3, np.float32)})


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_a_variable_without_initial_value_fails_the_step(rt, ctx, device: str) -> None:
    """TensorFlow's read of an uninitialised variable: FailedPreconditionError naming the
    node, on every step that runs it (a failed initialisation leaves nothing behind), both
    when it is fetched and when an update reads it."""
    g = rt.Graph()
    g.add_node("v", "Variable", device=device, dtype="float32")
    g.add_node("value", "Placeholder", device=device, dtype="float32")
    g.add_node("assign", "Assign", ["v", "value"], device=device)
    s = ctx.new_session(g)
    for attempt, (fetches, feeds) in enumerate([(["v"], None), (["v"], None),
                                                (["assign"], {"value": np.zeros(2, np.float32)})]):
        with pytest.raises(rt.FailedPreconditionError) as info:
            out = s.run(fetches, feeds)
            pytest.fail(f"run {attempt} of {fetches} with an uninitialised Variable on {device} "
                        f"returned {out!r} [EXEC-4]")
        assert info.value.node_name == "v", (
            f"run {attempt}: the error names node {info.value.node_name!r}, expected 'v' "
            f"[EXEC-4]")


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_a_variable_takes_its_dtype_attribute(rt, ctx, device: str) -> None:
    """``Variable(initial_value, dtype)``: the variable is its initial value converted to
    ``dtype``, whether that value is given or returned by a callable."""
    g = rt.Graph()
    g.add_node("ints", "Variable", device=device, initial_value=[1, 2], dtype="float32")
    g.add_node("wide", "Variable", device=device, dtype="float32",
               initial_value=lambda: np.array([0.5, 3.0], np.float64))
    ints, wide = ctx.new_session(g).run(["ints", "wide"])
    for name, got, want in (("ints", ints, [1.0, 2.0]), ("wide", wide, [0.5, 3.0])):
        assert got.dtype == np.float32, (
            f"Variable {name!r} of dtype='float32' on {device} has dtype {got.dtype} [EXEC-4]")
        np.testing.assert_array_equal(got, want, err_msg=f"Variable {name!r} on {device} "
                                                         f"[EXEC-4]")


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_const_takes_its_dtype_attribute(rt, ctx, device: str) -> None:
    """``Const(value, dtype)``: the constant is ``value`` converted to ``dtype``."""
    g = rt.Graph()
    g.add_node("c", "Const", device=device, value=[1, 2], dtype="float32")
    (c,) = ctx.new_session(g).run(["c"])
    assert c.dtype == np.float32, (
        f"Const(value=[1, 2], dtype='float32') on {device} has dtype {c.dtype} [EXEC-4]")
    np.testing.assert_array_equal(c, [1.0, 2.0], err_msg=f"Const on {device} [EXEC-4]")


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_a_pyfunc_without_outputs_runs_for_its_effect(rt, ctx, device: str) -> None:
    """``PyFunc`` with ``num_outputs=0`` (``tf.py_func`` with ``Tout=[]``): ``func`` runs
    and whatever it returns, ``None`` included, is dropped."""
    calls: list[int] = []
    g = rt.Graph()
    g.add_node("effect", "PyFunc", device=device, num_outputs=0,
               func=lambda: calls.append(1))          # returns None
    s = ctx.new_session(g)
    try:
        out = s.run([], None, ["effect"])
    except rt.OpError as exc:
        pytest.fail(f"a PyFunc of num_outputs=0 whose func returns None failed the step on "
                    f"{device}: {exc} [EXEC-4]")
    assert out == [] and calls == [1], (
        f"run([], target_nodes=['effect']) returned {out!r} and called func {len(calls)} "
        f"time(s), expected [] and once [EXEC-4]")


@pytest.mark.clause("EXEC-5")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_forwarded_outputs_are_the_variable(rt, ctx, device: str) -> None:
    """Assign, ApplyGradientDescent and Identity forward their input 0: their output is the
    variable itself, so it can be the variable of the next update."""
    g = rt.Graph()
    g.add_node("v", "Variable", device=device, initial_value=np.array([1.0, 2.0], np.float32))
    g.add_node("alpha", "Const", device=device, value=np.float32(0.5))
    g.add_node("value", "Placeholder", device=device, dtype="float32")
    g.add_node("delta", "Placeholder", device=device, dtype="float32")
    g.add_node("assign", "Assign", ["v", "value"], device=device)
    g.add_node("step1", "ApplyGradientDescent", ["assign", "alpha", "delta"], device=device)
    g.add_node("ident", "Identity", ["step1"], device=device)
    g.add_node("step2", "ApplyGradientDescent", ["ident", "alpha", "delta"], device=device)
    s = ctx.new_session(g)
    (out,) = s.run(["step2"], {"value": np.array([10.0, 20.0], np.float32),
                               "delta": np.array([2.0, 4.0], np.float32)})
    (v,) = s.run(["v"])
    np.testing.assert_allclose(v, [8.0, 16.0], err_msg=(
        "v after Assign(10, 20) then two updates of 0.5 * (2, 4) through Assign's and "
        "Identity's outputs: those outputs must be the variable itself [EXEC-5]"))
    np.testing.assert_allclose(out, v, err_msg="step2's output is the variable [EXEC-5]")


F32 = np.float32
BAD_KERNEL_INPUTS = {
    # id: (op, {input: ("ph" | "var", value)}, inputs of the node, attrs)
    "matmul-vector": ("MatMul", {"a": ("ph", np.ones(3, F32)), "b": ("ph", np.ones((3, 2), F32))},
                      ["a", "b"], {}),
    "matmul-inner": ("MatMul", {"a": ("ph", np.ones((2, 3), F32)),
                                "b": ("ph", np.ones((2, 3), F32))}, ["a", "b"], {}),
    "matmul-transposed": ("MatMul", {"a": ("ph", np.ones((2, 3), F32)),
                                     "b": ("ph", np.ones((3, 2), F32))}, ["a", "b"],
                          {"transpose_a": True}),
    "biasadd-2d-bias": ("BiasAdd", {"v": ("ph", np.ones((2, 3), F32)),
                                    "b": ("ph", np.ones((1, 3), F32))}, ["v", "b"], {}),
    "biasadd-1d-value": ("BiasAdd", {"v": ("ph", np.ones(3, F32)), "b": ("ph", np.ones(3, F32))},
                         ["v", "b"], {}),
    "biasadd-mismatch": ("BiasAdd", {"v": ("ph", np.ones((2, 3), F32)),
                                     "b": ("ph", np.ones(2, F32))}, ["v", "b"], {}),
    "biasaddgrad-1d": ("BiasAddGrad", {"g": ("ph", np.ones(3, F32))}, ["g"], {}),
    "add-no-broadcast": ("Add", {"x": ("ph", np.ones(3, F32)), "y": ("ph", np.ones(4, F32))},
                         ["x", "y"], {}),
    "add-one-input": ("Add", {"x": ("ph", np.ones(3, F32))}, ["x"], {}),
    "relugrad-mismatch": ("ReluGrad", {"g": ("ph", np.ones(3, F32)),
                                       "f": ("ph", np.ones(4, F32))}, ["g", "f"], {}),
    "xent-vector": ("SoftmaxCrossEntropyWithLogits", {"l": ("ph", np.ones(3, F32)),
                                                      "y": ("ph", np.ones(3, F32))},
                    ["l", "y"], {}),
    "xent-mismatch": ("SoftmaxCrossEntropyWithLogits", {"l": ("ph", np.ones((2, 3), F32)),
                                                        "y": ("ph", np.ones((2, 4), F32))},
                      ["l", "y"], {}),
    "sum-axis": ("Sum", {"x": ("ph", np.ones((2, 3), F32))}, ["x"], {"axis": 2}),
    "mean-axis": ("Mean", {"x": ("ph", np.ones((2, 3), F32))}, ["x"], {"axis": -3}),
    "identity-two-inputs": ("Identity", {"x": ("ph", np.ones(3, F32)),
                                         "y": ("ph", np.ones(3, F32))}, ["x", "y"], {}),
    "assign-shape": ("Assign", {"v": ("var", np.ones(3, F32)), "x": ("ph", np.ones(4, F32))},
                     ["v", "x"], {}),
    "assign-not-a-variable": ("Assign", {"v": ("ph", np.ones(3, F32)),
                                         "x": ("ph", np.ones(3, F32))}, ["v", "x"], {}),
    "sgd-shape": ("ApplyGradientDescent", {"v": ("var", np.ones(3, F32)),
                                           "a": ("ph", np.float32(0.5)),
                                           "d": ("ph", np.ones(4, F32))}, ["v", "a", "d"], {}),
    "sgd-alpha-vector": ("ApplyGradientDescent", {"v": ("var", np.ones(3, F32)),
                                                  "a": ("ph", np.ones(1, F32)),
                                                  "d": ("ph", np.ones(3, F32))},
                         ["v", "a", "d"], {}),
    "sgd-not-a-variable": ("ApplyGradientDescent", {"v": ("ph", np.ones(3, F32)),
                                                    "a": ("ph", np.float32(0.5)),
                                                    "d": ("ph", np.ones(3, F32))},
                           ["v", "a", "d"], {}),
    "const-without-value": ("Const", {}, [], {}),
    "pyfunc-not-callable": ("PyFunc", {}, [], {"func": 3}),
    "pyfunc-too-few": ("PyFunc", {}, [], {"num_outputs": 2, "func": lambda: (np.ones(1),)}),
    "pyfunc-too-many": ("PyFunc", {}, [], {"num_outputs": 2,
                                           "func": lambda: (np.ones(1), np.ones(1), np.ones(1))}),
    "pyfunc-none": ("PyFunc", {}, [], {"func": lambda: None}),
    # with num_outputs >= 2 only a tuple or list is several values: anything else is one
    "pyfunc-generator": ("PyFunc", {}, [], {"num_outputs": 2,
                                            "func": lambda: (v for v in (np.ones(1),
                                                                         np.ones(1)))}),
    "pyfunc-two-row-array": ("PyFunc", {}, [], {"num_outputs": 2,
                                                "func": lambda: np.ones((2, 3), F32)}),
    "pyfunc-scalar": ("PyFunc", {}, [], {"num_outputs": 2, "func": lambda: 5.0}),
}


@pytest.mark.clause("EXEC-1")
@pytest.mark.parametrize("device", ["", 3, None, b"/device:CPU:0"])
def test_a_device_that_is_no_device_name_is_a_graph_error(rt, device) -> None:
    g = rt.Graph()
    with pytest.raises(rt.GraphError) as info:
        g.add_node("placed_nowhere", "NoOp", device=device)
        pytest.fail(f"add_node(device={device!r}) was accepted [EXEC-1]")
    assert names_identifier(info.value, "placed_nowhere"), (
        f"the error {info.value} does not name the node [EXEC-1]")


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("case", sorted(BAD_KERNEL_INPUTS))
@pytest.mark.parametrize("device", [CPU, GPU])
def test_bad_kernel_inputs_are_invalid_arguments(rt, ctx, case: str, device: str) -> None:
    op, inputs, refs, attrs = BAD_KERNEL_INPUTS[case]
    g = rt.Graph()
    feeds = {}
    for name, (kind, value) in inputs.items():
        if kind == "var":
            g.add_node(name, "Variable", device=device, initial_value=value)
        else:
            g.add_node(name, "Placeholder", device=device, dtype="float32")
            feeds[name] = value
    g.add_node("bad", op, refs, device=device, **attrs)
    n_out = rt.OpRegistry.global_registry().lookup(op).num_outputs_for(attrs)
    s = ctx.new_session(g)
    with pytest.raises(rt.OpError) as info:
        s.run([f"bad:{i}" for i in range(max(n_out, 1))] if n_out else [], feeds,
              [] if n_out else ["bad"])
        pytest.fail(f"{case}: the step succeeded [EXEC-4]")
    e = info.value
    assert isinstance(e, rt.InvalidArgumentError) and e.node_name == "bad", (
        f"{case} on {device}: the step raised {type(e).__name__}({e}) with node_name "
        f"{e.node_name!r}, expected InvalidArgumentError naming 'bad' [EXEC-4]")


# Well-shaped inputs of each fixed-arity op, in order ("var": a Variable, "ph": a fed
# Placeholder). A wrong-number case drops the last input or repeats it, so the number of
# inputs is the only fault.
ARITY_INPUTS = {
    "Identity": [("ph", np.ones(3, F32))],
    "Assign": [("var", np.ones(3, F32)), ("ph", np.ones(3, F32))],
    "ApplyGradientDescent": [("var", np.ones(3, F32)), ("ph", np.float32(0.5)),
                             ("ph", np.ones(3, F32))],
    "MatMul": [("ph", np.ones((3, 3), F32)), ("ph", np.ones((3, 3), F32))],
    "BiasAdd": [("ph", np.ones((2, 3), F32)), ("ph", np.ones(3, F32))],
    "BiasAddGrad": [("ph", np.ones((2, 3), F32))],
    "Add": [("ph", np.ones(3, F32)), ("ph", np.ones(3, F32))],
    "Relu": [("ph", np.ones(3, F32))],
    "ReluGrad": [("ph", np.ones(3, F32)), ("ph", np.ones(3, F32))],
    "SoftmaxCrossEntropyWithLogits": [("ph", np.ones((2, 3), F32)),
                                      ("ph", np.ones((2, 3), F32))],
    "Sum": [("ph", np.ones((2, 3), F32))],
    "Mean": [("ph", np.ones((2, 3), F32))],
}


@pytest.mark.clause("EXEC-4")
@pytest.mark.parametrize("delta", [-1, 1], ids=["one-fewer", "one-more"])
@pytest.mark.parametrize("op", sorted(ARITY_INPUTS))
@pytest.mark.parametrize("device", [CPU, GPU])
def test_wrong_number_of_inputs_is_an_invalid_argument(rt, ctx, device: str, op: str,
                                                       delta: int) -> None:
    arity = len(ARITY_INPUTS[op])
    inputs = ARITY_INPUTS[op] + ARITY_INPUTS[op][-1:]
    g = rt.Graph()
    feeds = {}
    for i, (kind, value) in enumerate(inputs):
        if kind == "var":
            g.add_node(f"in{i}", "Variable", device=device, initial_value=value)
        else:
            g.add_node(f"in{i}", "Placeholder", device=device, dtype="float32")
            feeds[f"in{i}"] = value
    g.add_node("good", op, [f"in{i}" for i in range(arity)], device=device)
    g.add_node("bad", op, [f"in{i}" for i in range(arity + delta)], device=device)
    n_out = rt.OpRegistry.global_registry().lookup(op).num_outputs_for({})
    s = ctx.new_session(g)
    s.run([f"good:{i}" for i in range(n_out)], feeds)
    with pytest.raises(rt.OpError) as info:
        s.run([f"bad:{i}" for i in range(n_out)], feeds)
        pytest.fail(f"{op} with {arity + delta} inputs (it takes {arity}) on {device}: the "
                    f"step succeeded [EXEC-4]")
    e = info.value
    assert isinstance(e, rt.InvalidArgumentError) and e.node_name == "bad", (
        f"{op} with {arity + delta} inputs (it takes {arity}) on {device}: the step raised "
        f"{type(e).__name__}({e}) with node_name {e.node_name!r}, expected "
        f"InvalidArgumentError naming 'bad' [EXEC-4]")


@pytest.mark.clause("EXEC-4")
def test_pyfunc_outputs_and_shape_errors(rt, ctx) -> None:
    g = rt.Graph()
    g.add_node("x", "Placeholder", device=GPU, dtype="float32")
    g.add_node("two", "PyFunc", ["x"], device=GPU, num_outputs=2,
               func=lambda x: (x * 2, x.sum()))
    g.add_node("bad_mm", "MatMul", ["x", "x"], device=GPU)
    s = ctx.new_session(g)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    d, total = s.run(["two:0", "two:1"], {"x": x})
    np.testing.assert_array_equal(d, x * 2, err_msg="PyFunc output 0 [EXEC-4]")
    assert float(total) == 15.0, f"PyFunc output 1 = {total} [EXEC-4]"
    g.add_node("as_list", "PyFunc", ["x"], device=GPU, num_outputs=2,
               func=lambda x: [x[0], x[1] * 3])
    g.add_node("one_tuple", "PyFunc", ["x"], device=GPU, func=lambda x: (x[0], x[1]))
    s = ctx.new_session(g)
    first, tripled, pair = s.run(["as_list:0", "as_list:1", "one_tuple"], {"x": x})
    np.testing.assert_array_equal(first, x[0], err_msg="PyFunc list result, output 0 [EXEC-4]")
    np.testing.assert_array_equal(tripled, x[1] * 3,
                                  err_msg="PyFunc list result, output 1 [EXEC-4]")
    np.testing.assert_array_equal(pair, x, err_msg="the tuple result of a PyFunc of one "
                                                   "output is that output [EXEC-4]")
    with pytest.raises(rt.InvalidArgumentError) as info:
        s.run(["bad_mm"], {"x": x})
    assert info.value.node_name == "bad_mm" and names_identifier(info.value, "bad_mm"), \
        f"MatMul of [2,3]x[2,3] raised {info.value!r} [EXEC-4]"


# -- EXEC-5, EXEC-6 --------------------------------------------------------------------------

ALLOCATING_GRAPHS = [
    # (op, inputs fed, attrs, number of allocations, largest allocation in bytes)
    ("Relu", {"x": np.ones((3, 5), np.float32)}, {}, 2, 60),
    ("MatMul", {"x": np.ones((2, 3), np.float32), "y": np.ones((3, 7), np.float32)}, {}, 3,
     84),
    ("Identity", {"x": np.ones((4, 4), np.float32)}, {}, 1, 64),
    ("Sum", {"x": np.ones((8,), np.float32)}, {}, 2, 32),
    ("SoftmaxCrossEntropyWithLogits",
     {"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)}, {}, 4, 24),
]


@pytest.mark.clause("EXEC-5", "EXEC-6")
@pytest.mark.parametrize("op,feeds,attrs,count,largest", ALLOCATING_GRAPHS,
                         ids=[g[0] for g in ALLOCATING_GRAPHS])
def test_each_output_is_one_exact_allocation(rt, ctx, op, feeds, attrs, count,
                                             largest) -> None:
    g = rt.Graph()
    for name in feeds:
        g.add_node(name, "Placeholder", device=CPU, dtype="float32")
    g.add_node("op", op, list(feeds), device=CPU, **attrs)
    s = ctx.new_session(g)
    alloc = allocator_of(ctx, CPU)
    fetches = [f"op:{i}" for i in range(rt.OpRegistry.global_registry().lookup(op)
                                        .num_outputs_for(attrs))]
    s.run(fetches, feeds)                 # the executor exists; the CPU pool has started
    alloc.clear_stats()
    before = alloc.get_stats()
    s.run(fetches, feeds)
    after = alloc.get_stats()
    assert after.num_allocs - before.num_allocs == count, (
        f"run({fetches}) of {op} made {after.num_allocs - before.num_allocs} allocations, "
        f"expected {count} [EXEC-5]")
    assert after.largest_alloc_size == largest, (
        f"run({fetches}) of {op}: largest allocation {after.largest_alloc_size} bytes, "
        f"expected {largest} [EXEC-5]")
    assert after.bytes_in_use == before.bytes_in_use, (
        f"after run({fetches}) of {op}: {after.bytes_in_use} bytes in use, expected "
        f"{before.bytes_in_use} [EXEC-6]")


def bytes_of_the_step_while_the_probe_runs(rt, ctx, chain: list[tuple[str, str]]
                                           ) -> tuple[int, int]:
    """Run a -> chain -> c (Relu) -> p (PyFunc) on the CPU twice, feeding 1000 float32s;
    (bytes of the second step in use while p ran, bytes left after it)."""
    alloc = allocator_of(ctx, CPU)
    seen: list[int] = []

    def probe(x):
        seen.append(alloc.get_stats().bytes_in_use)
        return x[:1]

    g = rt.Graph()
    g.add_node("a", "Placeholder", device=CPU, dtype="float32")
    previous = "a"
    for name, op in chain:
        g.add_node(name, op, [previous], device=CPU)
        previous = name
    g.add_node("c", "Relu", [previous], device=CPU)
    g.add_node("p", "PyFunc", ["c"], device=CPU, func=probe)
    s = ctx.new_session(g)
    feed = {"a": np.ones(1000, np.float32)}
    s.run(["p"], feed)
    base = alloc.get_stats().bytes_in_use
    s.run(["p"], feed)
    return seen[-1] - base, alloc.get_stats().bytes_in_use - base


@pytest.mark.clause("EXEC-6")
def test_a_buffer_is_freed_when_its_last_consumer_has_run(rt, ctx) -> None:
    during, left = bytes_of_the_step_while_the_probe_runs(rt, ctx, [("b", "Relu")])
    assert during == 4000, (
        f"while 'p' ran, {during} bytes of the step were in use; only its input "
        f"'c' (4000 bytes) may be: 'a' and 'b' had no consumer left [EXEC-6]")
    assert left == 0, "step buffers left after run [EXEC-6]"


@pytest.mark.clause("EXEC-6")
def test_a_forwarded_buffer_is_freed_when_the_forwards_last_consumer_has_run(rt, ctx) -> None:
    """Identity forwards its input's buffer (EXEC-5): the buffer then has the consumers of
    both nodes, and is freed once the last of them has run, not at the end of the step."""
    during, left = bytes_of_the_step_while_the_probe_runs(
        rt, ctx, [("b", "Relu"), ("i", "Identity")])
    assert during == 4000, (
        f"while 'p' ran, {during} bytes of the step were in use; only its input "
        f"'c' (4000 bytes) may be: the buffer of 'b', forwarded by 'i', had no consumer left "
        f"[EXEC-6]")
    assert left == 0, "step buffers left after run [EXEC-6]"


@pytest.mark.clause("EXEC-5")
@pytest.mark.parametrize("value,count,largest", [
    (np.bool_(True), 1, 1), (np.uint8(7), 1, 1), (np.zeros(0, np.float32), 0, 0),
    (np.zeros((3, 0), np.float32), 0, 0), (np.float32(1), 1, 4)],
    ids=["bool", "uint8", "empty", "empty-2d", "float32"])
def test_one_byte_outputs_are_allocated_and_empty_ones_are_not(rt, ctx, value, count,
                                                               largest) -> None:
    g = rt.Graph()
    g.add_node("v", "PyFunc", device=CPU, func=lambda: value)
    s = ctx.new_session(g)
    alloc = allocator_of(ctx, CPU)
    s.run(["v"])
    alloc.clear_stats()
    (out,) = s.run(["v"])
    stats = alloc.get_stats()
    assert (stats.num_allocs, stats.largest_alloc_size) == (count, largest), (
        f"an output of {np.asarray(value).nbytes} bytes made {stats.num_allocs} allocations "
        f"(largest {stats.largest_alloc_size}), expected {count} ({largest}): every non-empty "
        f"output is allocated, an empty one is not [EXEC-5]")
    np.testing.assert_array_equal(out, value, err_msg="the fetched value [EXEC-5]")


@pytest.mark.clause("EXEC-5")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_kernel_outputs_are_placed_with_alignment_64_and_their_exact_size(rt, ctx, device,
                                                                          monkeypatch) -> None:
    """Every allocation a step makes for a 3 x 5 float32 output is ``allocate_raw(64, 60,
    ...)``: TF's kAllocatorAlignment, and the output's bytes."""
    alloc = allocator_of(ctx, device)
    g = rt.Graph()
    g.add_node("a", "Placeholder", device=device, dtype="float32")
    g.add_node("r", "Relu", ["a"], device=device)
    g.add_node("n", "Add", ["r", "r"], device=device)
    s = ctx.new_session(g)
    calls: list[tuple] = []
    allocate = alloc.allocate_raw

    def recording(*args, **kwargs):
        calls.append(args[:2] + tuple(kwargs.get(k) for k in ("alignment", "num_bytes")
                                      if k in kwargs))
        return allocate(*args, **kwargs)

    monkeypatch.setattr(alloc, "allocate_raw", recording)
    try:
        (out,) = s.run(["n"], {"a": np.ones((3, 5), np.float32)})
    finally:
        monkeypatch.undo()
    assert calls and all(c == (64, 60) for c in calls), (
        f"the kernels' allocations on {device} were {calls}, expected (alignment, num_bytes) = "
        f"(64, 60) for each 3 x 5 float32 output [EXEC-5]")
    np.testing.assert_array_equal(out, np.full((3, 5), 2, np.float32),
                                  err_msg="the fetched value [EXEC-5]")
    s.close()


@pytest.mark.clause("EXEC-5", "EXEC-6")
def test_variables_and_constants_are_session_owned(rt, ctx) -> None:
    alloc = allocator_of(ctx, GPU)
    start = alloc.get_stats().bytes_in_use
    g = rt.Graph()
    g.add_node("v", "Variable", device=GPU, initial_value=np.zeros((64, 64), np.float32))
    g.add_node("c", "Const", device=GPU, value=np.ones((64, 64), np.float32))
    g.add_node("s", "Add", ["v", "c"], device=GPU)
    s = ctx.new_session(g)
    s.run(["s"])
    held = alloc.get_stats().bytes_in_use
    assert held > start, "the variable and the constant must stay allocated [EXEC-5]"
    for _ in range(3):
        s.run(["s"])
        assert alloc.get_stats().bytes_in_use == held, "run(['s']) leaked [EXEC-6]"
    s.close()
    assert alloc.get_stats().bytes_in_use == start, \
        "close() must deallocate variables and constants [EXEC-5]"


@pytest.mark.clause("EXEC-5")
def test_host_fallback_buffers_compute_correctly(rt, tf_env) -> None:
    tf_env.set("TF_GPU_VMEM", "true")
    tf_env.set("TF_RO_PLANNED_GPU", "10000")   # room for host fallback (VMEM-5, VMEM-6)
    with sim_runtime(rt, gpu_memory_bytes=256 << 10) as c:
        a = np.random.default_rng(1).standard_normal((300, 300)).astype(np.float32)
        g = rt.Graph()
        g.add_node("a", "Placeholder", device=GPU, dtype="float32")
        g.add_node("aa", "MatMul", ["a", "a"], device=GPU)
        g.add_node("r", "Relu", ["aa"], device=GPU)
        g.add_node("s", "Sum", ["r"], device=GPU, axis=1)
        (out,) = c.new_session(g).run(["s"], {"a": a})
        alloc = allocator_of(c, GPU)
        assert alloc.host_allocator.get_stats().peak_bytes_in_use > 0, \
            "360 KB tensors on a 256 KiB GPU must use host fallback [EXEC-5]"
        np.testing.assert_allclose(out, np.maximum(a.astype(np.float64) @ a, 0).sum(axis=1),
                                   rtol=1e-4, err_msg="host-fallback MatMul [EXEC-5]")
        assert alloc.get_stats().bytes_in_use == 0, "[EXEC-5]"


@pytest.mark.clause("EXEC-5")
def test_kernel_allocations_pass_attributes_so_the_planned_check_applies(rt, tf_env,
                                                                         monkeypatch) -> None:
    """Kernels allocate with the three-argument call: with TF_RO_PLANNED_GPU=1 the host
    fallback of the second 360 000-byte tensor the 256 KiB GPU cannot hold (the first one in
    host memory already puts the peak beyond the planned 2 621 bytes) is refused by the
    planned-memory check (VMEM-5, VMEM-6) and the step fails with an OOM; the two-argument
    call (VMEM-4) would skip the check and place it in host memory too."""
    tf_env.set("TF_GPU_VMEM", "true")
    tf_env.set("TF_RO_PLANNED_GPU", "1")
    with sim_runtime(rt, gpu_memory_bytes=256 << 10) as c:
        alloc = allocator_of(c, GPU)
        calls: list[tuple[tuple, dict]] = []
        allocate = alloc.allocate_raw

        def recording(*args, **kwargs):
            calls.append((args, kwargs))
            return allocate(*args, **kwargs)

        monkeypatch.setattr(alloc, "allocate_raw", recording)
        g = rt.Graph()
        g.add_node("a", "Placeholder", device=GPU, dtype="float32")
        g.add_node("r", "Relu", ["a"], device=GPU)
        s = c.new_session(g)
        two_argument = lambda: [a for a, k in calls  # noqa: E731
                                if len(a) + len(k) < 3 or (a[2:] or [k.get("attributes")])[0]
                                is None]
        try:
            s.run(["r"], {"a": np.ones(90_000, np.float32)})      # 360 000 bytes each
        except rt.ResourceExhaustedError:
            pass
        else:
            pytest.fail(f"a 360 000-byte tensor on a 256 KiB GPU with TF_RO_PLANNED_GPU=1 was "
                        f"placed in host memory: the planned-memory check of the three-argument "
                        f"call did not apply ({len(two_argument())} of {len(calls)} kernel "
                        f"allocations were two-argument calls) [EXEC-5]")
        finally:
            monkeypatch.undo()
        assert not two_argument(), (f"{len(two_argument())} of {len(calls)} kernel allocations "
                                    f"were two-argument calls: {two_argument()[:3]} [EXEC-5]")
        s.close()


# -- EXEC-7, EXEC-8, EXEC-9 ------------------------------------------------------------------

@pytest.mark.clause("EXEC-7", "EXEC-9", "EXEC-6")
def test_allocation_failure_names_device_node_and_bytes(rt, tf_env, auto_clock) -> None:
    tf_env.set("TF_GPU_VMEM", "false")
    with sim_runtime(rt, gpu_memory_bytes=1 << 20, clock=auto_clock) as c:
        log = Log()
        g = rt.Graph()
        g.add_node("small", "Placeholder", device=GPU, dtype="float32")
        g.add_node("r", "Relu", ["small"], device=GPU)
        g.add_node("big", "Placeholder", device=GPU, dtype="float32")
        g.add_node("after", "PyFunc", ["big"], device=GPU, func=py_func(log, "after"))
        s = c.new_session(g)
        feeds = {"small": np.ones(16, np.float32), "big": np.ones(1 << 19, np.float32)}
        with pytest.raises(rt.ResourceExhaustedError) as info:
            s.run(["r", "after"], feeds)
        e = info.value
        assert isinstance(e, rt.OpError), "[EXEC-7]"
        assert e.node_name == "big" and e.num_bytes == 1 << 21 and "GPU:0" in e.device, (
            f"OOM error fields node_name={e.node_name!r} num_bytes={e.num_bytes} "
            f"device={e.device!r} [EXEC-7]")
        for part in ("big", str(1 << 21), "GPU:0"):
            assert part in str(e), f"OOM message {str(e)!r} lacks {part!r} [EXEC-7]"
        assert log.snapshot() == [], "the consumer of the failed node ran [EXEC-9]"
        assert allocator_of(c, GPU).get_stats().bytes_in_use == 0, \
            "a failed step must free every buffer it allocated [EXEC-6]"
        (ok,) = s.run(["r"], {"small": -np.ones(16, np.float32)})
        assert ok.sum() == 0, "the session must stay usable after an OOM [SESS-5]"


HELD_S = 2.0   # real time a running kernel waits for a run() that ends too early (only a
               # runtime ending the step while the kernel runs returns within it)


@pytest.mark.clause("EXEC-9")
def test_a_failure_outside_the_kernels_ends_the_step_after_its_running_kernels(
        rt, ctx, monkeypatch) -> None:
    """The CPU allocator raises as it frees the output of ``leaf`` (a target: its output is
    freed as it ends), a failure of the step outside every kernel, while ``held``, started
    beside it (leaf's kernel waits for it), is still in its kernel: the step fails with
    UnknownError, but only once ``held`` has returned. ``held`` waits up to HELD_S for run()
    to return, and the test reads what it saw once it has returned."""
    allocator = allocator_of(ctx, CPU)
    free = allocator.deallocate_raw
    started, failed = threading.Event(), threading.Event()
    returned, held_done = threading.Event(), threading.Event()
    seen: dict = {}

    def deallocate_raw(ptr):
        free(ptr)
        if not failed.is_set():
            failed.set()
            raise RuntimeError("planned failure after a free")

    def held():
        started.set()
        try:
            seen["leaf freed"] = failed.wait(JOIN_S)
            seen["run returned"] = returned.wait(HELD_S)
        finally:
            held_done.set()
        return np.float32(1.0)

    g = rt.Graph()
    g.add_node("held", "PyFunc", device=CPU, func=held)
    g.add_node("leaf", "PyFunc", device=CPU,      # ends once held is in its kernel
               func=lambda: started.wait(JOIN_S) and np.ones(4, np.float32))
    s = ctx.new_session(g)

    def run():
        try:
            return s.run([], target_nodes=["held", "leaf"])
        finally:
            returned.set()

    with monkeypatch.context() as faults:
        faults.setattr(allocator, "deallocate_raw", deallocate_raw)
        runner, out = run_in_thread(run)
        assert joined(runner, JOIN_S + HELD_S + JOIN_S), \
            "the step never ended after a failure outside its kernels [EXEC-9]"
    assert held_done.wait(JOIN_S + HELD_S), f"'held' never ran: {seen} {out} [EXEC-9]"
    assert seen.get("leaf freed"), f"leaf's output was never freed: {seen} {out} [EXEC-9]"
    assert not seen.get("run returned"), (
        "run() returned while the kernel of 'held' was still running: a failure outside the "
        "kernels (the allocator raising as it freed leaf's output) ended the step before its "
        "running kernels had returned [EXEC-9]")
    assert isinstance(out.get("error"), rt.UnknownError) \
        and "planned failure after a free" in str(out["error"]), \
        f"run() must fail with an UnknownError naming the failure, got {out} [EXEC-9]"


@pytest.mark.clause("EXEC-8", "EXEC-9", "EXEC-6")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_kernel_error_fails_the_step(rt, ctx, device: str) -> None:
    log = Log()
    boom = ValueError("boom")

    def fail(x):
        raise boom

    g = rt.Graph()
    g.add_node("x", "Placeholder", device=device, dtype="float32")
    g.add_node("bad", "PyFunc", ["x"], device=device, func=fail)
    g.add_node("consumer", "PyFunc", ["bad"], device=device, func=py_func(log, "consumer"))
    s = ctx.new_session(g)
    before = allocator_of(ctx, device).get_stats().bytes_in_use
    with pytest.raises(rt.OpError) as info:
        s.run(["consumer"], {"x": np.ones(4, np.float32)})
    e = info.value
    assert isinstance(e, rt.UnknownError), f"a ValueError in a kernel gave {e!r} [EXEC-8]"
    assert e.__cause__ is boom, "the kernel's exception must be the __cause__ [EXEC-8]"
    assert e.node_name == "bad" and names_identifier(e, "bad"), f"error {e!r} must name 'bad' [EXEC-8]"
    assert log.snapshot() == [], "the consumer of the failed node ran [EXEC-9]"
    assert allocator_of(ctx, device).get_stats().bytes_in_use == before, \
        f"the failed step left buffers allocated on {device} [EXEC-6]"


@pytest.mark.clause("EXEC-6", "EXEC-8")
def test_an_output_whose_array_cannot_be_made_is_freed(rt, ctx, monkeypatch) -> None:
    """The GPU's array module (``xp``, API-6) refuses the array of a buffer the allocator
    has just placed (host memory exhausted, say): the step fails with that error as a
    kernel's (EXEC-8), and the bytes placed for that buffer are given back like every other
    of the step."""
    gpu = ctx.device_mgr.lookup_device(GPU)
    xp = getattr(gpu, "xp", None)
    if xp is None:
        pytest.skip("the GPU device has no array module (xp) in which to inject the failure")
    refused = (3001,)
    no_memory = MemoryError(f"injected: no memory for an array of shape {refused}")

    class RefusingArrays:
        def __getattr__(self, name):
            return getattr(xp, name)

        def empty(self, shape, *args, **kwargs):
            if tuple(np.atleast_1d(shape)) == refused:
                raise no_memory
            return xp.empty(shape, *args, **kwargs)

    g = rt.Graph()
    g.add_node("x", "Placeholder", device=GPU, dtype="float32")
    g.add_node("y", "Relu", ["x"], device=GPU)
    s = ctx.new_session(g)
    allocator = allocator_of(ctx, GPU)
    before = allocator.get_stats().bytes_in_use
    monkeypatch.setattr(gpu, "xp", RefusingArrays())
    with pytest.raises(Exception) as info:
        s.run(["y"], {"x": np.ones(refused, np.float32)})
    monkeypatch.undo()
    e = info.value
    assert isinstance(e, rt.UnknownError) and e.__cause__ is no_memory, (
        f"the step failed with {e!r} caused by {e.__cause__!r}, expected an UnknownError "
        f"caused by the array module's MemoryError [EXEC-8]")
    assert allocator.get_stats().bytes_in_use == before, (
        f"a step whose array could not be made left {allocator.get_stats().bytes_in_use - before}"
        f" bytes allocated on {GPU} [EXEC-6]")


@pytest.mark.clause("EXEC-6", "EXEC-9")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_a_failed_step_frees_buffers_whose_consumers_never_ran(rt, ctx, device: str) -> None:
    """'a' feeds 'bad', which raises, and 'later', which also needs 'bad': 'later' never runs,
    so a's buffer still waits for it when the step ends; the step must free it anyway."""
    log = Log()

    def fail(x):
        raise ValueError("planned")

    g = rt.Graph()
    g.add_node("a", "PyFunc", device=device, func=lambda: np.ones(1000, np.float32))
    g.add_node("bad", "PyFunc", ["a"], device=device, func=fail)
    g.add_node("later", "PyFunc", ["a", "bad"], device=device, func=py_func(log, "later"))
    s = ctx.new_session(g)
    alloc = allocator_of(ctx, device)
    before = alloc.get_stats().bytes_in_use
    for _ in range(3):
        with pytest.raises(rt.OpError):
            s.run(["later"])
            pytest.fail("a step whose node raised succeeded [EXEC-6]")
        assert alloc.get_stats().bytes_in_use == before, (
            f"after the failed step {alloc.get_stats().bytes_in_use - before} bytes are still "
            f"in use on {device}: a's buffer, held for 'later' which never ran [EXEC-6]")
    assert log.snapshot() == [], "the consumer of a failed node ran [EXEC-6]"


FREED_WITHIN_S = 10.0   # real time, generous for a loaded machine: only a runtime that keeps
                        # the buffer until the step ends waits it out


class PlacedThenFreed:
    """The body of 'busy', a PyFunc that watches an allocator from when it starts until one
    allocation more than ``before`` has been placed and freed again, or FREED_WITHIN_S of real
    time passed; ``seen`` holds (allocations, bytes in use) over ``before`` at each look."""

    def __init__(self, alloc) -> None:
        self.alloc, self.started, self.before = alloc, threading.Event(), None
        self.seen: list[tuple[int, int]] = []

    def __call__(self) -> np.float32:
        self.started.set()
        limit = time.monotonic() + FREED_WITHIN_S
        while True:
            stats = self.alloc.get_stats()
            self.seen.append((stats.num_allocs - self.before.num_allocs,
                              stats.bytes_in_use - self.before.bytes_in_use))
            if self.seen[-1] == (1, 0) or time.monotonic() > limit:   # placed, then freed
                return np.float32(0)
            time.sleep(0.001)


@pytest.mark.clause("EXEC-6")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_a_failed_kernels_outputs_are_freed_when_it_fails(rt, ctx, device: str) -> None:
    """'bad', a PyFunc of two outputs, places output 0 (4 000 bytes) and fails: its func
    returns None for output 1 (EXEC-4). 'busy', running since before, goes on while the step
    aborts (EXEC-9) and watches the allocator: bad's buffer must be freed when bad fails, not
    when the step ends after busy has returned."""
    alloc = allocator_of(ctx, device)
    busy = PlacedThenFreed(alloc)
    seen = busy.seen

    def bad():
        busy.started.wait(FREED_WITHIN_S)
        return np.ones(1000, np.float32), None

    g = rt.Graph()
    g.add_node("bad", "PyFunc", device=device, num_outputs=2, func=bad)
    g.add_node("busy", "PyFunc", device=device, func=busy)
    s = ctx.new_session(g)
    before = busy.before = alloc.get_stats()
    with pytest.raises(rt.OpError):
        s.run(["busy"], target_nodes=["bad"])
        pytest.fail("a step whose node returned None for an output succeeded [EXEC-4]")
    assert seen and seen[-1] == (1, 0), (
        f"while 'busy' ran, {seen[-1][1] if seen else '?'} bytes of bad's output were still "
        f"in use {FREED_WITHIN_S:.0f} s after bad had placed it ({seen[-1][0] if seen else '?'} "
        f"allocations): a failed kernel's outputs must be freed when it fails [EXEC-6]")
    assert alloc.get_stats().bytes_in_use == before.bytes_in_use, (
        "the failed step left buffers allocated [EXEC-6]")


@pytest.mark.clause("EXEC-6")
@pytest.mark.parametrize("device", [CPU, GPU])
def test_a_skipped_nodes_inputs_are_freed_when_it_is_passed_over(rt, ctx, device: str) -> None:
    """'a' (4 000 bytes) feeds 'bad' and 'c', inexpensive, run after it on its thread in that
    order (EXEC-11): bad raises, so c, ready once the step aborts, never runs (EXEC-9). 'busy',
    running since before, goes on and watches the allocator: a's buffer, whose consumers have
    all run or been passed over, must be freed then, not when the step ends after busy."""
    alloc = allocator_of(ctx, device)
    busy = PlacedThenFreed(alloc)
    seen = busy.seen
    ran = Log()

    def a():
        busy.started.wait(FREED_WITHIN_S)
        return np.ones(1000, np.float32)

    def fail(x):
        raise ValueError("planned")

    g = rt.Graph()
    g.add_node("a", "PyFunc", device=device, func=a)
    g.add_node("busy", "PyFunc", device=device, func=busy)
    g.add_node("bad", "PyFunc", ["a"], device=device, func=fail, is_expensive=False)
    g.add_node("c", "PyFunc", ["a"], device=device, func=py_func(ran, "c"), is_expensive=False)
    s = ctx.new_session(g)
    before = busy.before = alloc.get_stats()
    with pytest.raises(rt.OpError):
        s.run(["busy"], target_nodes=["bad", "c"])
        pytest.fail("a step whose node raised succeeded [EXEC-9]")
    assert ran.snapshot() == [], "'c', made ready after the step's error, ran [EXEC-9]"
    assert seen and seen[-1] == (1, 0), (
        f"while 'busy' ran, {seen[-1][1] if seen else '?'} bytes of a's output were still "
        f"in use {FREED_WITHIN_S:.0f} s after a had placed it ({seen[-1][0] if seen else '?'} "
        f"allocations): bad had failed and c had been passed over, so it must be freed "
        f"[EXEC-6]")
    assert alloc.get_stats().bytes_in_use == before.bytes_in_use, (
        "the failed step left buffers allocated [EXEC-6]")
@pytest.mark.clause("EXEC-8")
def test_every_op_error_carries_its_message(rt, tf_env, auto_clock) -> None:
    tf_env.set("TF_GPU_VMEM", "false")

    def fail():
        raise ValueError("boom")

    def custom():
        raise rt.InvalidArgumentError("custom reason")

    with sim_runtime(rt, gpu_memory_bytes=1 << 20, clock=auto_clock) as c:
        g = rt.Graph()
        g.add_node("unknown", "PyFunc", device=GPU, func=fail)
        g.add_node("custom", "PyFunc", device=GPU, func=custom)
        g.add_node("big", "PyFunc", device=GPU, func=lambda: np.ones(1 << 19, np.float32))
        s = c.new_session(g)
        errors = []
        for fetch in (["unknown"], ["custom"], ["big"], ["nowhere"]):
            with pytest.raises(rt.OpError) as info:
                s.run(fetch)
                pytest.fail(f"run({fetch}) succeeded [EXEC-8]")
            errors.append(info.value)
    for e in errors:
        assert isinstance(e.message, str) and e.message == str(e) and e.message, (
            f"{type(e).__name__}: message attribute {getattr(e, 'message', None)!r}, "
            f"text {str(e)!r}: the message attribute must be the error's text [EXEC-8]")


@pytest.mark.clause("EXEC-8")
def test_op_error_from_a_kernel_is_the_step_error(rt, ctx) -> None:
    def fail():
        raise rt.InvalidArgumentError("custom reason")

    g = rt.Graph()
    g.add_node("bad", "PyFunc", device=GPU, func=fail)
    with pytest.raises(rt.InvalidArgumentError, match="custom reason") as info:
        ctx.new_session(g).run(["bad"])
    assert info.value.node_name == "bad" and info.value.op == "PyFunc", \
        f"node_name/op not filled in: {info.value.node_name!r}/{info.value.op!r} [EXEC-8]"


# -- EXEC-10, EXEC-11 ------------------------------------------------------------------------

def _random_dag(rt, rng: random.Random, n: int, log: Log):
    g = rt.Graph()
    deps: dict[str, list[str]] = {}
    for i in range(n):
        name = f"n{i}"
        preds = rng.sample([f"n{j}" for j in range(i)], k=min(i, rng.randint(0, 3)))
        data, control = preds[: len(preds) // 2 + 1], preds[len(preds) // 2 + 1:]
        device = rng.choice([CPU, GPU])
        g.add_node(name, "PyFunc", data + [f"^{c}" for c in control], device=device,
                   func=py_func(log, name), is_expensive=rng.random() < 0.5)
        deps[name] = preds
    return g, deps


@pytest.mark.clause("EXEC-10")
@pytest.mark.parametrize("seed", range(4))
def test_every_node_runs_once_after_its_inputs(rt, ctx, seed: int) -> None:
    rng = random.Random(seed)
    log = Log()
    g, deps = _random_dag(rt, rng, 24, log)
    fetch = [f"n{i}" for i in rng.sample(range(24), 3)]
    needed: set[str] = set()
    stack = list(fetch)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(deps[n])
    s = ctx.new_session(g)
    for step in range(10):
        log.clear()
        s.run(fetch)
        order = log.snapshot()
        assert sorted(order) == sorted(needed), (
            f"step {step} of run({fetch}) ran {sorted(order)}, expected exactly the needed "
            f"nodes {sorted(needed)}, once each [EXEC-10]")
        pos = {n: i for i, n in enumerate(order)}
        for n in order:
            late = [d for d in deps[n] if pos[d] > pos[n]]
            assert not late, f"{n} ran before its inputs {late} (order {order}) [EXEC-10]"


def _thread_graph(rt, log: Log, children: list[tuple[str, bool]], device: str = CPU,
                  before: dict | None = None):
    g = rt.Graph()
    g.add_node("root", "PyFunc", device=device, is_expensive=False,
               func=py_func(log, "root", record="thread"))
    for name, expensive in children:
        g.add_node(name, "PyFunc", ["root"], device=device, is_expensive=expensive,
                   func=py_func(log, name, record="thread",
                                before=(before or {}).get(name)))
    return g


def _threads(log: Log) -> dict[str, tuple[int, int]]:
    """name -> (thread ident, position in the log)."""
    return {tag: (ident, i) for i, (tag, _, ident) in enumerate(log.snapshot())}


@pytest.mark.clause("EXEC-11")
def test_inexpensive_consumers_run_inline_in_edge_order(rt, ctx) -> None:
    log = Log()
    a_started = threading.Event()

    def c_waits_for_a():
        assert a_started.wait(10), "expensive 'a' was not dispatched: it never started " \
                                   "while 'c' ran [EXEC-11]"

    g = rt.Graph()
    g.add_node("root", "PyFunc", device=CPU, is_expensive=False,
               func=py_func(log, "root", record="thread"))
    g.add_node("a", "PyFunc", ["root"], device=CPU, is_expensive=True,
               func=py_func(log, "a", record="thread", before=a_started.set))
    g.add_node("c", "PyFunc", ["root"], device=CPU, is_expensive=False,
               func=py_func(log, "c", record="thread", before=c_waits_for_a))
    g.add_node("b", "PyFunc", ["root"], device=CPU, is_expensive=True,
               func=py_func(log, "b", record="thread"))
    g.add_node("d", "PyFunc", ["root"], device=CPU, is_expensive=False,
               func=py_func(log, "d", record="thread"))
    s = ctx.new_session(g)
    for _ in range(5):
        log.clear()
        a_started.clear()
        s.run(["a", "b", "c", "d"])
        t = _threads(log)
        assert t["c"][0] == t["root"][0] and t["d"][0] == t["root"][0], \
            f"inexpensive c, d must run on root's thread: {log.snapshot()} [EXEC-11]"
        assert t["c"][1] < t["d"][1], f"c must run before d (edge order) [EXEC-11]"
        assert t["a"][0] != t["root"][0], f"expensive a ran inline: {log.snapshot()} [EXEC-11]"


@pytest.mark.clause("EXEC-11")
def test_last_expensive_consumer_stays_inline(rt, ctx) -> None:
    log = Log()
    a_started = threading.Event()

    def b_waits_for_a():
        assert a_started.wait(10), "'a' was not dispatched to the runner [EXEC-11]"

    g = _thread_graph(rt, log, [("a", True), ("b", True)],
                      before={"a": a_started.set, "b": b_waits_for_a})
    g.add_node("solo", "PyFunc", ["b"], device=CPU, is_expensive=True,
               func=py_func(log, "solo", record="thread"))
    s = ctx.new_session(g)
    for _ in range(5):
        log.clear()
        a_started.clear()
        s.run(["a", "solo"])
        t = _threads(log)
        assert t["b"][0] == t["root"][0], \
            f"the last expensive consumer 'b' must stay on root's thread: {log.snapshot()} " \
            f"[EXEC-11]"
        assert t["a"][0] != t["root"][0], f"'a' must be dispatched: {log.snapshot()} [EXEC-11]"
        assert t["solo"][0] == t["b"][0], \
            f"a sole expensive consumer stays inline: {log.snapshot()} [EXEC-11]"


@pytest.mark.clause("EXEC-11", "EXEC-3")
def test_gpu_nodes_are_never_expensive(rt, ctx) -> None:
    log = Log()
    g = _thread_graph(rt, log, [("g1", True), ("g2", True), ("g3", True)], device=GPU)
    s = ctx.new_session(g)
    log.clear()
    s.run(["g1", "g2", "g3"])
    order = [tag for tag, _, _ in log.snapshot()]
    idents = {ident for _, _, ident in log.snapshot()}
    assert order == ["root", "g1", "g2", "g3"] and len(idents) == 1, (
        f"GPU nodes (expensive kernels) must all run inline on one thread in edge order: "
        f"{log.snapshot()} [EXEC-11]")


@pytest.mark.clause("EXEC-11", "SESS-7")
def test_roots_are_handed_to_the_runner(rt, ctx) -> None:
    log = Log()
    x_started, y_started = threading.Event(), threading.Event()

    def x_first():
        x_started.set()
        assert y_started.wait(10), "root y did not start while root x ran [EXEC-11]"

    def y_first():
        y_started.set()
        assert x_started.wait(10), "root x did not start while root y ran [EXEC-11]"

    g = rt.Graph()
    g.add_node("x", "PyFunc", device=CPU, is_expensive=False,
               func=py_func(log, "x", record="thread", before=x_first))
    g.add_node("y", "PyFunc", device=GPU, func=py_func(log, "y", record="thread",
                                                        before=y_first))
    ctx.new_session(g).run(["x", "y"])
    names = {tag: name for tag, name, _ in log.snapshot()}
    assert all(n.startswith(INTER_OP_PREFIX) for n in names.values()), \
        f"nodes ran on {names}, expected the session's inter-op pool [SESS-7]"


@pytest.mark.clause("EXEC-3")
def test_async_pyfunc_runs(rt, ctx) -> None:
    g = rt.Graph()
    g.add_node("x", "Placeholder", device=GPU, dtype="float32")
    g.add_node("a", "PyFunc", ["x"], device=GPU, is_async=True, func=lambda x: x + 1)
    g.add_node("b", "Relu", ["a"], device=GPU)
    (out,) = ctx.new_session(g).run(["b"], {"x": np.array([-3.0, 1.0], np.float32)})
    np.testing.assert_array_equal(out, [0.0, 2.0], err_msg="async PyFunc [EXEC-3]")


@pytest.mark.clause("EXEC-3", "EXEC-11")
def test_async_attribute_hands_every_consumer_to_the_runner(rt, ctx) -> None:
    """is_async=True on a PyFunc makes it asynchronous: its consumers, inexpensive ones
    included, go to the runner (so they can run at the same time), not inline one after
    the other on the kernel's thread."""
    log = Log()
    c2_started = threading.Event()

    def c1_waits_for_c2():
        assert c2_started.wait(10), ("the consumers of an async node ran one after the other on "
                                     "one thread: is_async=True was not honoured [EXEC-3]")

    g = rt.Graph()
    g.add_node("a", "PyFunc", device=CPU, is_async=True, is_expensive=False,
               func=py_func(log, "a", record="thread"))
    g.add_node("c1", "PyFunc", ["a"], device=CPU, is_expensive=False,
               func=py_func(log, "c1", record="thread", before=c1_waits_for_c2))
    g.add_node("c2", "PyFunc", ["a"], device=CPU, is_expensive=False,
               func=py_func(log, "c2", record="thread", before=c2_started.set))
    s = ctx.new_session(g)
    for _ in range(3):
        log.clear()
        c2_started.clear()
        s.run(["c1", "c2"])
        t = _threads(log)
        assert t["c1"][0] != t["c2"][0], (
            f"the two consumers of an async node ran on one thread: {log.snapshot()} "
            f"[EXEC-11]")


def started_elsewhere(p: str, j: str):
    """(an event ``p``'s body sets as it starts, a body for ``j`` that waits for it): ``j``
    returns only once ``p`` has started on another thread (EXEC-3, EXEC-11)."""
    p_started = threading.Event()

    def j_waits_for_p():
        assert p_started.wait(10), (
            f"{p!r} was not dispatched to the runner while {j!r} ran [EXEC-3]")

    return p_started, j_waits_for_p


@pytest.mark.clause("EXEC-3")
def test_a_pyfunc_node_without_the_attribute_is_expensive(rt, ctx) -> None:
    """``PyFunc`` is an expensive kernel: a CPU ``PyFunc`` node given no ``is_expensive``
    attribute is expensive. root's consumers are that node ``p`` and the inexpensive ``j``:
    ``j`` runs inline on root's thread, so ``p`` is handed to the runner (EXEC-11); were
    ``p`` inexpensive, it would run inline on root's thread too."""
    log = Log()
    p_started, j_waits_for_p = started_elsewhere("p", "j")
    g = rt.Graph()
    g.add_node("root", "PyFunc", device=CPU, is_expensive=False,
               func=py_func(log, "root", record="thread"))
    g.add_node("p", "PyFunc", ["root"], device=CPU,
               func=py_func(log, "p", record="thread", before=p_started.set))
    g.add_node("j", "PyFunc", ["root"], device=CPU, is_expensive=False,
               func=py_func(log, "j", record="thread", before=j_waits_for_p))
    s = ctx.new_session(g)
    for _ in range(3):
        log.clear()
        p_started.clear()
        s.run(["j", "p"])
        t = _threads(log)
        assert t["p"][0] != t["root"][0], (
            f"the PyFunc node 'p' without an is_expensive attribute ran inline on root's "
            f"thread as an inexpensive node: {log.snapshot()}; PyFunc is expensive unless "
            f"the node says otherwise [EXEC-3]")


@pytest.mark.clause("EXEC-3")
def test_an_async_root_that_completes_first_neither_ends_nor_fails_the_step(
        rt, virtual_clock) -> None:
    """``a``, an asynchronous root, completes while the other root ``slow`` is in its compute
    time (EXEC-12) on a clock only the test moves: the step goes on until ``slow`` is done
    and returns both values. Skipped, not required, for a runtime without the virtual clock
    (EXEC-3's other tests hold it to the clause: a capability mark here would make the whole
    clause require the clock)."""
    if "virtual_clock" not in rt.CAPABILITIES:
        pytest.skip("this check holds a compute time on the virtual clock, which this "
                    "runtime does not declare (API-2)")
    clock = virtual_clock
    a_done = threading.Event()

    def a():
        clock.wait_for_waiters(1, clause="EXEC-12")        # 'slow' is in its compute time
        a_done.set()
        return np.float32(1.0)

    with sim_runtime(rt, clock=clock) as c:
        g = rt.Graph()
        g.add_node("slow", "Const", device=CPU, value=np.float32(2.0), cost_us=500)
        g.add_node("a", "PyFunc", device=CPU, is_async=True, func=a)
        s = c.new_session(g)
        # 20 steps: what the executor does right after a's completion races with the test's
        # advance of the clock, so one step may not show a mishandled completion
        for _ in range(20):
            a_done.clear()
            runner, out = run_in_thread(lambda: s.run(["a", "slow"]), name="test-async-root")
            try:
                assert a_done.wait(10), "the asynchronous root did not run [EXEC-3]"
            finally:
                clock.advance(500)                          # 'slow' has its compute time
            assert joined(runner), (
                "the step did not end once 'slow' had its 500 us of compute time [EXEC-3]")
            assert "error" not in out, (
                f"the step of an asynchronous root and a root in its compute time failed: "
                f"{out.get('error')!r} [EXEC-3]")
            assert [float(v) for v in out["result"]] == [1.0, 2.0], (
                f"run(['a', 'slow']) returned {out['result']} [EXEC-3]")


@pytest.mark.clause("EXEC-3")
def test_only_pyfunc_nodes_override_their_kernels_metadata(rt, ctx) -> None:
    """An ``Identity`` node given ``is_expensive=True`` stays inexpensive: the attribute
    overrides the metadata of PyFunc nodes only. root's consumers are that Identity ``i`` and
    the expensive PyFunc ``p``: ``i`` runs inline on root's thread, so ``p`` is handed to the
    runner, and ``j`` (inexpensive, after ``i``) waits there until ``p`` has started elsewhere.
    Were ``i`` expensive, ``p`` would be the last expensive consumer and stay on root's thread
    (EXEC-11)."""
    log = Log()
    p_started, j_waits_for_p = started_elsewhere("p", "j")
    g = rt.Graph()
    g.add_node("root", "PyFunc", device=CPU, is_expensive=False,
               func=py_func(log, "root", record="thread"))
    g.add_node("i", "Identity", ["root"], device=CPU, is_expensive=True)
    g.add_node("p", "PyFunc", ["root"], device=CPU, is_expensive=True,
               func=py_func(log, "p", record="thread", before=p_started.set))
    g.add_node("j", "PyFunc", ["i"], device=CPU, is_expensive=False,
               func=py_func(log, "j", record="thread", before=j_waits_for_p))
    s = ctx.new_session(g)
    for _ in range(3):
        log.clear()
        p_started.clear()
        s.run(["j", "p"])
        t = _threads(log)
        assert t["p"][0] != t["root"][0] and t["j"][0] == t["root"][0], (
            f"the Identity node 'i' given is_expensive=True was scheduled as an expensive "
            f"node ('p' ran on root's thread, 'j' did not): {log.snapshot()}; only a PyFunc "
            f"node's is_expensive attribute overrides its kernel's metadata [EXEC-3]")


# -- EXEC-12, EXEC-13 ------------------------------------------------------------------------

@pytest.mark.clause("EXEC-12")
def test_cost_us_waits_on_the_clock_before_the_kernel(rt, auto_clock) -> None:
    with sim_runtime(rt, clock=auto_clock) as c:
        seen: list[int] = []
        g = rt.Graph()
        g.add_node("a", "PyFunc", device=GPU, cost_us=100,
                   func=lambda: seen.append(auto_clock.now_us()) or np.float32(0))
        g.add_node("b", "PyFunc", ["a"], device=GPU, cost_us=250,
                   func=lambda x: seen.append(auto_clock.now_us()) or x)
        g.add_node("c", "PyFunc", ["b"], device=CPU, cost_us=0,
                   func=lambda x: seen.append(auto_clock.now_us()) or x)
        s = c.new_session(g)
        t0 = auto_clock.now_us()
        s.run(["c"])
        assert [t - t0 for t in seen] == [100, 350, 350], (
            f"kernels ran at {[t - t0 for t in seen]} µs, expected [100, 350, 350] "
            f"(cost_us waited before each kernel) [EXEC-12]")
        g.add_node("bad", "PyFunc", device=GPU, cost_us=-1, func=lambda: np.float32(0))
        with pytest.raises(rt.GraphError):
            s.run(["bad"])


@pytest.mark.clause("EXEC-12")
def test_an_aborting_step_cancels_the_compute_time_of_its_running_nodes(rt) -> None:
    """'slow' computes for 10 virtual seconds on the GPU; 'bad' fails on the CPU once that
    wait began: the step aborts, the wait ends at once without the clock moving, and the
    kernel of 'slow' does not compute."""
    clock = VirtualClock()
    computed: list[int] = []

    def fail_once_slow_waits():
        clock.wait_for_waiters(1, clause="EXEC-12")
        raise ValueError("boom")

    with sim_runtime(rt, clock=clock) as c:
        g = rt.Graph()
        g.add_node("slow", "PyFunc", device=GPU, cost_us=10_000_000,
                   func=lambda: computed.append(clock.now_us()) or np.float32(0))
        g.add_node("bad", "PyFunc", device=CPU, func=fail_once_slow_waits)
        s = c.new_session(g)
        out: list = []

        def run() -> None:
            try:
                s.run(["slow", "bad"])
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - reported below
                out.append(exc)

        runner = threading.Thread(target=run, name="test-aborting-step", daemon=True)
        runner.start()
        try:
            runner.join(10)                  # real time, generous: nothing needs to wait
            assert not runner.is_alive(), (
                "a failed node did not cancel the 10 s compute time of a running node: the "
                "step waits for it [EXEC-12]")
            assert out and isinstance(out[0], rt.OpError), \
                f"the aborted step gave {out} [EXEC-12]"
            assert clock.now_us() == 0, "the cancelled compute time needed the clock [EXEC-12]"
            assert computed == [], (
                f"the kernel of 'slow' computed (at {computed} us) after the step's abort "
                f"cancelled its compute time [EXEC-12]")
        finally:
            clock.advance(10_000_000)
            runner.join(10)


@pytest.mark.clause("EXEC-12")
@pytest.mark.parametrize("bad", [True, 1.5, "5", -1, None])
def test_cost_us_must_be_a_non_negative_int(rt, ctx, bad) -> None:
    g = rt.Graph()
    g.add_node("ok", "PyFunc", device=GPU, cost_us=0, func=lambda: np.float32(0))
    g.add_node("bad", "PyFunc", device=GPU, cost_us=bad, func=lambda: np.float32(0))
    s = ctx.new_session(g)
    (ok,) = s.run(["ok"])
    with pytest.raises(rt.GraphError):
        s.run(["bad"])
        pytest.fail(f"cost_us={bad!r} was accepted [EXEC-12]")


@pytest.mark.clause("EXEC-13", "EXEC-6")
def test_no_allocator_or_thread_leak_over_1000_steps(rt, ctx) -> None:
    g = rt.Graph()
    g.add_node("x", "Placeholder", device=GPU, dtype="float32")
    g.add_node("w", "Variable", device=GPU, initial_value=np.eye(4, dtype=np.float32))
    g.add_node("alpha", "Const", device=GPU, value=np.float32(0.0))
    g.add_node("y", "MatMul", ["x", "w"], device=GPU)
    g.add_node("r", "Relu", ["y"], device=GPU)
    g.add_node("s", "Sum", ["r"], device=GPU)
    g.add_node("upd", "ApplyGradientDescent", ["w", "alpha", "w"], device=CPU)
    g.add_node("maybe_fail", "PyFunc", ["s"], device=CPU,
               func=lambda v: (_ for _ in ()).throw(ValueError("planned")) if v <= 0 else v)
    s = ctx.new_session(g)
    gpu = allocator_of(ctx, GPU)
    x = np.ones((2, 4), np.float32)
    s.run(["maybe_fail"], {"x": x}, ["upd"])
    base_bytes = gpu.get_stats().bytes_in_use
    base_threads = antman_threads()
    failures = 0
    for i in range(1000):
        if i % 100 == 99:
            with pytest.raises(rt.OpError):
                s.run(["maybe_fail"], {"x": -x})
            failures += 1
        else:
            s.run(["maybe_fail"], {"x": x}, ["upd"])
    assert failures == 10, "[EXEC-13]"
    assert gpu.get_stats().bytes_in_use == base_bytes, (
        f"after 1000 steps {gpu.get_stats().bytes_in_use} bytes in use on GPU:0, "
        f"{base_bytes} after the first [EXEC-13]")
    extra = antman_threads() - base_threads
    assert all(n.startswith(INTER_OP_PREFIX) for n in extra), \
        f"threads started by steps and left alive: {sorted(extra)} [EXEC-13]"
    pool = {n for n in antman_threads() if n.startswith(INTER_OP_PREFIX)}
    s.close()
    left = pool & antman_threads()
    assert not left, f"session.close() left its threads {sorted(left)} [SESS-8]"


# -- EXEC-14 --------------------------------------------------------------------------------

@pytest.mark.clause("EXEC-14")
@pytest.mark.capability("executor", "session_run_actions")
def test_a_successful_step_waits_for_its_gpus_before_post_actions(rt) -> None:
    log = Log()
    backend = RecordingBackend(rt.select_backend("sim", num_gpus=2, gpu_memory_bytes=1 << 26),
                                log)

    class Post(rt.SessionRunAction):
        name = "Recorder"

        def run_action(self, options) -> None:
            log.add("post")

    registry = rt.SessionRunActionRegistry()
    registry.register(rt.Grouping.POST_SESSION_RUN, 5, Post())
    with rt.create_runtime(num_gpus=2, gpu_memory_bytes=1 << 26, backend=backend,
                           registry=registry, config_file=None, status_file=None) as ctx:
        g = rt.Graph()
        g.add_node("a", "PyFunc", device="/device:GPU:1", func=lambda: log.add("kernel a") or
                   np.ones(2, np.float32))
        g.add_node("b", "PyFunc", ["a"], device=CPU, func=lambda x: log.add("kernel b") or x)
        s = ctx.new_session(g)
        s.run(["b"])
        assert log.snapshot() == ["kernel a", "kernel b", ("synchronize", 1), "post"], (
            f"run(['b']) with a node on GPU:1 logged {log.snapshot()}; expected the kernels, "
            f"then synchronize(1) once, then the POST actions [EXEC-14]")
        log.clear()
        g2 = rt.Graph()
        g2.add_node("bad", "PyFunc", device="/device:GPU:0",
                    func=lambda: (_ for _ in ()).throw(ValueError("boom")))
        with pytest.raises(rt.OpError):
            ctx.new_session(g2).run(["bad"])
        assert ("synchronize", 0) not in log.snapshot(), \
            f"a failed step synchronized its GPU: {log.snapshot()} [EXEC-14]"


# -- argument edges: the error classes ----------------------------------------------------------

ERROR_CODES = {"OpError": "UNKNOWN", "InvalidArgumentError": "INVALID_ARGUMENT",
               "ResourceExhaustedError": "RESOURCE_EXHAUSTED",
               "FailedPreconditionError": "FAILED_PRECONDITION", "CancelledError": "CANCELLED",
               "UnknownError": "UNKNOWN"}


@pytest.mark.clause("EXEC-8")
@pytest.mark.parametrize("name", sorted(ERROR_CODES))
def test_error_attributes_default_to_unset(rt, name: str) -> None:
    cls = getattr(rt, name)
    assert issubclass(cls, rt.OpError) and issubclass(rt.OpError, RuntimeError), \
        f"{name} must be an OpError, itself a RuntimeError [EXEC-8]"
    err = cls("the text")
    got = (err.message, str(err), err.node_name, err.op, err.device, err.code)
    assert got == ("the text", "the text", None, None, None, ERROR_CODES[name]), (
        f"{name}('the text'): (message, str, node_name, op, device, code) = {got}, expected "
        f"the text twice, three None and {ERROR_CODES[name]!r} [EXEC-8]")
    if name == "ResourceExhaustedError":
        assert err.num_bytes == 0, f"num_bytes not given is {err.num_bytes!r}, expected 0 [EXEC-8]"
    by_keyword = cls(message="the text")
    assert (by_keyword.message, str(by_keyword)) == ("the text", "the text"), (
        f"{name}(message='the text'): (message, str) = "
        f"{(by_keyword.message, str(by_keyword))}, expected the text twice [EXEC-8]")
    full = cls("t", node_name="n", op="Relu", device="/device:GPU:0")
    assert (full.node_name, full.op, full.device) == ("n", "Relu", "/device:GPU:0"), \
        f"{name}: keyword attributes not kept: {(full.node_name, full.op, full.device)} [EXEC-8]"
    with pytest.raises(TypeError):
        cls("t", "n")                                # the attributes are keyword-only


@pytest.mark.clause("EXEC-8")
def test_kernel_error_with_unset_attributes_is_filled_in(rt) -> None:
    def fail(*_):
        raise rt.FailedPreconditionError("not ready")

    g = rt.Graph()
    g.add_node("bad", "PyFunc", device=CPU, func=fail)
    with sim_runtime(rt) as ctx:
        s = ctx.new_session(g)
        with pytest.raises(rt.FailedPreconditionError) as info:
            s.run(["bad"])
    err = info.value
    assert err.node_name == "bad" and err.op == "PyFunc" and err.device and "CPU:0" in err.device, (
        f"an OpError raised with its attributes unset: node_name={err.node_name!r}, "
        f"op={err.op!r}, device={err.device!r}, expected them filled in [EXEC-8]")
    assert err.message == "not ready" == str(err), \
        f"message {err.message!r} / str {str(err)!r}, expected the kernel's text [EXEC-8]"


# -- the state a step shares between threads changes under its lock (forced, not hoped for) --

# (module, class, its lock, function, a field the function changes, what a concurrent change
# can do without the lock, the clause). Each line of the function that touches the field must
# run, on whichever thread runs it, with the lock of that object held by that thread. Only
# critical sections another thread can interleave with under the GIL are listed: a thread
# switch happens at a call or a backward jump, so a block without either (a flag checked and
# set, an int incremented) is atomic as it stands.
SHARED_STATE_FIELDS = [
    ("executor", "ExecutorState", "_lock", "_propagate", "_pending",
     "two producers finishing at once can lose a decrement of a consumer's pending count: "
     "the consumer never runs or runs twice", "EXEC-10"),
    ("executor", "ExecutorState", "_lock", "_node_done", "_outstanding",
     "two nodes finishing at once can lose a change of the outstanding count: the step "
     "never ends or ends while nodes still run", "EXEC-9"),
    ("executor", "ExecutorState", "_lock", "_finish", "_status",
     "an error while finishing the step can replace the step's first error, recorded at "
     "the same time by another thread", "EXEC-8"),
    ("executor", "ExecutorState", "_lock", "process", "_outstanding",
     "a node failing outside its kernel while another node finishes can lose a change of "
     "the outstanding count: the step never ends", "EXEC-9"),
    ("tensor", "StepAllocations", "_lock", "allocate", "_live",
     "a buffer allocated while the step's buffers are freed can be missed and leak",
     "EXEC-6"),
    ("tensor", "StepAllocations", "_lock", "free_all", "_live",
     "a buffer allocated while the step frees its buffers can be missed and leak",
     "EXEC-6"),
    ("kernels", "SessionResources", "lock", "get_or_create", "buffers",
     "two first runs at once can each create the variable: one run's value is lost and "
     "its buffer leaks", "EXEC-5"),
    ("kernels", "SessionResources", "lock", "release_all", "buffers",
     "a variable created while the session closes can be left allocated", "EXEC-5"),
]


def _graph_of_every_kind_of_step_state(rt, device: str):
    """Roots feeding several consumers, a variable and a constant, a kernel error on a
    branch: runs propagation, node completion with and without an error, the step's end,
    buffers dropped by their last consumer and the session's resources."""
    def fail(*_):
        raise ValueError("planned")

    g = rt.Graph()
    g.add_node("v", "Variable", device=device, initial_value=np.zeros(4, np.float32))
    g.add_node("k", "Const", device=device, value=np.ones(4, np.float32))
    g.add_node("vk", "Add", ["v", "k"], device=device)
    for r in ("r0", "r1"):
        g.add_node(r, "PyFunc", ["vk"], device=device, func=py_func(None, r))
    for i in range(4):
        g.add_node(f"c{i}", "PyFunc", ["r0", "r1"], device=device, func=py_func(None, f"c{i}"),
                   is_expensive=i % 2 == 0)
    g.add_node("sum", "PyFunc", ["c0", "c1", "c2", "c3"], device=device,
               func=py_func(None, "sum"))
    g.add_node("bad", "PyFunc", ["r0"], device=device, func=fail)
    g.add_node("after_bad", "PyFunc", ["bad", "r1"], device=device,
               func=py_func(None, "after_bad"))
    return g


@pytest.mark.parametrize("module,cls,lock,function,field,consequence,clause", [
    pytest.param(*row, marks=pytest.mark.clause(row[6]), id=f"{row[1]}.{row[3]}-{row[4]}")
    for row in SHARED_STATE_FIELDS])
@pytest.mark.parametrize("device", [CPU, GPU])
def test_the_state_a_step_shares_changes_under_its_lock(rt, monkeypatch, device, module, cls,
                                                        lock, function, field, consequence,
                                                        clause) -> None:
    """A step's nodes finish on several threads at once (the inter-op pool, EXEC-11), and a
    session's runs share its variables (SESS-6): pending counts, the outstanding count, the
    finished flag, the step's live buffers and the session's resources are read and changed
    by each of them. Forced, not hoped for: the lock of every such object made during the
    test is watched (fixtures/interleave.py) and each line of the function that touches the
    field records, on the thread running it, whether that thread held the object's lock.
    The steps run: one that succeeds, one whose kernel fails (EXEC-9), and one whose
    allocator fails after each free (the executor's own error paths: a failure outside a
    kernel, a failure while the step's buffers are freed at its end)."""
    from fixtures.interleave import lines_run_in, self_holds, watch_new_locks
    watched = watch_new_locks(monkeypatch, getattr(getattr(rt, module, None), cls, None), lock,
                              f"the lock of {cls}")

    def failing_free(allocator):
        """The allocator's deallocate_raw, raising after each free: the executor's own
        error paths (a failure outside a kernel, a failure while finishing the step)."""
        free = allocator.deallocate_raw

        def deallocate_raw(ptr):
            free(ptr)
            raise RuntimeError("planned failure after a free")
        return deallocate_raw

    def steps() -> None:
        with sim_runtime(rt, gpu_memory_bytes=64 << 20) as c:
            s = c.new_session(_graph_of_every_kind_of_step_state(rt, device))
            s.run(["sum"])
            with pytest.raises(rt.OpError):
                s.run(["after_bad", "sum"])
            allocator = allocator_of(c, device)
            with monkeypatch.context() as faults:
                faults.setattr(allocator, "deallocate_raw", failing_free(allocator))
                with pytest.raises(rt.OpError):
                    s.run(["after_bad", "sum"])
            s.close()

    _, lines = lines_run_in(steps, f"{cls}.{function}", self_holds(lock))
    touching = [held for text, held in lines if field in text]
    if not watched or not touching:
        pytest.skip(f"the check follows the reference's design ({cls}.{function} changing "
                    f"{field}); this runtime ran no such line")
    assert all(touching), (
        f"{touching.count(False)} of {len(touching)} line(s) of {cls}.{function} touching "
        f"{field} ran without its lock: {consequence} [{clause}]")


@pytest.mark.clause("EXEC-3")
def test_the_global_registry_is_made_under_its_lock(rt, monkeypatch) -> None:
    """The first call of ``OpRegistry.global_registry()`` makes the registry: without the
    class's lock, two first calls at once (kernels registered from two threads) can each
    make one, and the kernels registered in the one replaced are lost. Forced, not hoped
    for: the class's lock is watched (fixtures/interleave.py) and each line of
    global_registry touching the registry records whether the calling thread held it."""
    from fixtures.interleave import lines_run_in, watch_lock
    registry = rt.OpRegistry
    watched = watch_lock(monkeypatch, registry, "_global_lock", "the global registry's lock")
    monkeypatch.setattr(registry, "_global", None)       # the first call, made again
    _, lines = lines_run_in(registry.global_registry, "global_registry",
                            lambda frame: watched.held_by_caller())
    touching = [held for text, held in lines
                if "_global" in text and "_global_lock" not in text]
    if not touching:
        pytest.skip("the check follows the reference's design (a class attribute _global "
                    "made by global_registry); this runtime ran no such line")
    assert all(touching), (
        f"{touching.count(False)} of {len(touching)} line(s) of global_registry touching the "
        f"registry ran without its lock: two first calls at once can each make a registry, "
        f"and the kernels registered in the one replaced are lost [EXEC-3]")


# -- EXEC-2: executor creation validates; EXEC-9: a failure outside the kernels is logged -----

@pytest.mark.clause("EXEC-2")
@pytest.mark.parametrize("added,fetch,named", [
    ({"late": ["ghost"]}, "late", "ghost"),
    ({"p": ["q"], "q": ["p"]}, "src", "p"),
], ids=["unknown-input", "cycle-beside-the-fetch"])
def test_executor_creation_validates_nodes_added_after_the_session(rt, ctx, added, fetch,
                                                                   named) -> None:
    """The graph is valid when the session is made; nodes added to it afterwards are checked
    when a signature's executor is created, at its first run: an input that names no node, or
    a cycle the run does not even need, makes that run raise GraphError naming it."""
    g = rt.Graph()
    g.add_node("src", "Const", value=[1.0, 2.0])
    s = ctx.new_session(g)
    for name, inputs in added.items():
        g.add_node(name, "Identity", inputs)
    with raises(rt.GraphError, "EXEC-2", f"the first run fetching {fetch!r} after {added} "
                                         f"was added to the session's graph") as refused:
        s.run([fetch])
    assert names_identifier(refused.value, named), (
        f"the GraphError {refused.value} does not name {named!r} [EXEC-2]")


FREE_FAILURE = "planned failure as a buffer is freed"


@pytest.mark.clause("EXEC-9")
def test_a_failure_outside_the_kernels_is_logged(rt, ctx, monkeypatch, caplog) -> None:
    """The CPU allocator raises, once, as it frees the output of ``leaf`` (a target): the run
    fails with an UnknownError containing the text, and an error record of the runtime
    carries the exception, whose traceback the step's error does not keep."""
    allocator = allocator_of(ctx, CPU)
    free = allocator.deallocate_raw
    raised = threading.Event()

    def deallocate_raw(ptr):
        free(ptr)
        if not raised.is_set():
            raised.set()
            raise RuntimeError(FREE_FAILURE)

    g = rt.Graph()
    g.add_node("leaf", "PyFunc", device=CPU, func=lambda: np.ones(4, np.float32))
    s = ctx.new_session(g)
    caplog.set_level(logging.ERROR)
    caplog.clear()
    with monkeypatch.context() as faults:
        faults.setattr(allocator, "deallocate_raw", deallocate_raw)
        runner, out = run_in_thread(lambda: s.run([], target_nodes=["leaf"]))
        assert joined(runner, JOIN_S), \
            "the step never ended after a failure outside its kernels [EXEC-9]"
    assert isinstance(out.get("error"), rt.UnknownError) and FREE_FAILURE in str(out["error"]), \
        f"run() must fail with an UnknownError containing {FREE_FAILURE!r}, got {out} [EXEC-9]"
    logged = [r for r in runtime_records(caplog, rt, logging.ERROR)
              if carries(r, FREE_FAILURE)]
    assert logged, (
        f"the allocator raised RuntimeError({FREE_FAILURE!r}) as the step freed leaf's output; "
        f"no error record of the runtime carries it: "
        f"{runtime_records(caplog, rt, logging.ERROR)} [EXEC-9]")
