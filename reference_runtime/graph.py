"""A small dataflow graph (TensorFlow's ``Graph`` / ``GraphDef``), SPEC.md EXEC clauses.

A node has a name, an op type, data inputs (``"name"`` or ``"name:k"``), control inputs
(``"^name"``), a device placement and attributes. Inputs may name nodes added later;
``validate()`` checks the whole graph (unknown inputs, output indices, cycles).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from .device import parse_device_name

__all__ = ["Graph", "Node", "GraphError", "parse_tensor_name", "canonical_device_name"]

_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.\-/]*$")


class GraphError(ValueError):
    """A malformed graph: bad name, unknown op or input, bad output index, cycle."""


def parse_tensor_name(ref: str) -> tuple[str, int]:
    """``"n"`` -> ``("n", 0)``; ``"n:k"`` -> ``("n", k)``. Every caller has checked that ``ref``
    is a str (``""`` -> ``("", 0)``, which names no node: a fed ``""`` is an unknown feed)."""
    name, sep, index = ref.rpartition(":")
    if sep and index.isascii() and index.isdigit():   # ASCII digits only, as TF scans them
        return name, int(index)
    return ref, 0


def canonical_device_name(device: str) -> str:
    """Any form ``lookup_device`` accepts (the full name, ``"/gpu:0"``, ``"GPU:01"``, ...) ->
    ``"/device:<TYPE>:<index>"`` (EXEC-1); others unchanged (the run names them, EXEC-2)."""
    if not isinstance(device, str) or not device:
        raise GraphError(f"device must be a non-empty string, got {device!r}")
    try:
        device_type, index = parse_device_name(device)
    except ValueError:
        return device
    return f"/device:{device_type}:{index}"


@dataclass(frozen=True)
class Node:
    """One node of a graph (TF ``NodeDef``)."""

    name: str
    op: str
    inputs: tuple[str, ...]            # data inputs, "name" or "name:k"
    control_inputs: tuple[str, ...]    # node names (without the "^")
    device: str
    attrs: dict[str, Any] = field(compare=False)   # add_node's keyword attributes

    def input_refs(self) -> list[tuple[str, int]]:
        return [parse_tensor_name(i) for i in self.inputs]


class Graph:
    """A mutable graph; node order is insertion order."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}

    def add_node(self, name: str, op: str, inputs: Iterable[str] | str = (),
                 device: str = "/device:CPU:0", **attrs: Any) -> str:
        """Add a node and return its name. ``"^x"`` in ``inputs`` is a control input."""
        from .kernels import OpRegistry  # the op must be known

        if not isinstance(name, str) or not _NAME.fullmatch(name):  # "$" allows a last newline
            raise GraphError(f"add_node({name!r}, {op!r}): invalid node name")
        if name in self._nodes:
            raise GraphError(f"add_node({name!r}, {op!r}): a node named {name!r} exists")
        if not isinstance(op, str) or OpRegistry.global_registry().find(op) is None:
            raise GraphError(f"add_node({name!r}, {op!r}): unknown op {op!r}")
        if isinstance(inputs, str):
            inputs = (inputs,)                    # one input, not its characters (EXEC-1)
        try:
            refs = iter(inputs)
        except TypeError:
            raise GraphError(f"add_node({name!r}, {op!r}): inputs must be a str or an "
                             f"iterable of str, got {inputs!r}") from None
        data: list[str] = []
        control: list[str] = []
        for ref in refs:
            if not isinstance(ref, str) or not ref:
                raise GraphError(f"add_node({name!r}, {op!r}): bad input {ref!r}")
            if ref.startswith("^"):
                control.append(ref[1:])
            else:
                if control:
                    raise GraphError(f"add_node({name!r}, {op!r}): data input {ref!r} "
                                     f"after a control input")
                data.append(ref)                  # as given (EXEC-1)
        try:
            placed = canonical_device_name(device)
        except GraphError as exc:
            raise GraphError(f"add_node({name!r}, {op!r}): {exc}") from None
        node = Node(name, op, tuple(data), tuple(control), placed, attrs)   # **attrs: a fresh dict
        self._nodes[name] = node
        return name

    # -- queries ----------------------------------------------------------------------
    def node(self, name: str) -> Node:
        """The node ``name``; its callers know it is in the graph."""
        return self._nodes[name]

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    # -- validation -------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``GraphError`` for unknown inputs, bad output indices or a cycle."""
        from .kernels import OpRegistry

        registry = OpRegistry.global_registry()
        for node in self._nodes.values():
            for src, index in node.input_refs():
                if src not in self._nodes:
                    raise GraphError(f"node {node.name!r} ({node.op}): input {src!r} is not "
                                     f"a node of the graph")
                n_out = registry.lookup(self._nodes[src].op).num_outputs_for(
                    self._nodes[src].attrs)
                if index >= n_out:
                    raise GraphError(f"node {node.name!r} ({node.op}): input '{src}:{index}' "
                                     f"but {src!r} ({self._nodes[src].op}) has {n_out} "
                                     f"output(s)")
            for src in node.control_inputs:
                if src not in self._nodes:
                    raise GraphError(f"node {node.name!r} ({node.op}): control input "
                                     f"'^{src}' is not a node of the graph")
        self._check_acyclic()

    def predecessors(self, name: str) -> list[str]:
        node = self._nodes[name]
        return [src for src, _ in node.input_refs()] + list(node.control_inputs)

    def _check_acyclic(self) -> None:
        """Raise GraphError naming a cycle of the graph, if it has one."""
        white, grey, black = 0, 1, 2
        colour = dict.fromkeys(self._nodes, white)
        for start in self._nodes:
            if colour[start] != white:
                continue
            path: list[str] = []
            stack: list[tuple[str, Iterator[str]]] = [(start, iter(self.predecessors(start)))]
            colour[start] = grey
            path.append(start)
            while stack:
                name, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    colour[name] = black
                    continue
                if colour[nxt] == grey:
                    cyc = path[path.index(nxt):] + [nxt]
                    cyc.reverse()        # the walk follows inputs, the message the data flow
                    raise GraphError("graph has a cycle: " + " -> ".join(cyc))
                if colour[nxt] == white:
                    colour[nxt] = grey
                    path.append(nxt)
                    stack.append((nxt, iter(self.predecessors(nxt))))

    def __repr__(self) -> str:
        return f"Graph({len(self._nodes)} nodes)"
