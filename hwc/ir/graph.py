"""The graph IR: values (typed tensors, some constant), nodes (op + typed attributes),
graph inputs and outputs, kept in topological order.

Values are referred to by name, as in ONNX. Constant data is immutable: a pass that
changes a weight makes a new array (`Graph.add_const`), it never writes into one.
The op set, attribute schemas and shape inference live in `hwc.ir.ops`; the verifier
in `hwc.ir.verify`.
"""

from __future__ import annotations

import copy as _copy
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwc.ir.types import TensorType


@dataclass(eq=False)
class QuantParams:
    """Affine quantization of a tensor: real = scale * (q - zero_point).

    `axis` is None for per-tensor parameters (scale and zero_point of shape ()),
    else the axis along which they vary (shape (n,)).
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    def __post_init__(self):
        self.scale = np.asarray(self.scale, dtype=np.float32)
        self.zero_point = np.asarray(self.zero_point, dtype=np.int32)


@dataclass(eq=False)
class Value:
    """A tensor in the graph. `data` is set for constants (weights, folded shapes)."""

    name: str
    type: TensorType
    data: np.ndarray | None = None
    quant: QuantParams | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None


@dataclass(eq=False)
class Node:
    """One operation. `attrs` holds every attribute of the op's schema, normalized."""

    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Node({self.op} {self.name!r}: {self.inputs} -> {self.outputs})"


class Graph:
    def __init__(self, name: str = "graph"):
        self.name = name
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.metadata: dict[str, Any] = {}

    # ---- naming -------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A value or node name not used yet, derived from `hint`."""
        base = re.sub(r"[^A-Za-z0-9_.:/-]", "_", hint) or "v"
        used = self._used_names()
        if base not in used:
            return base
        i = 1
        while f"{base}_{i}" in used:
            i += 1
        return f"{base}_{i}"

    def _used_names(self) -> set[str]:
        used = set(self.values)
        used.update(n.name for n in self.nodes)
        return used

    # ---- building -----------------------------------------------------------------
    def add_value(self, name: str, type: TensorType, data: np.ndarray | None = None) -> Value:
        if name in self.values:
            raise ValueError(f"value {name!r} already exists")
        if data is not None:
            data = np.asarray(data)
            if TensorType.of(data) != type:
                raise ValueError(f"constant {name!r}: data {TensorType.of(data)} != type {type}")
            data = data.copy() if data.flags.writeable else data
            data.flags.writeable = False
        v = Value(name, type, data)
        self.values[name] = v
        return v

    def add_input(self, name: str, type: TensorType) -> Value:
        v = self.add_value(name, type)
        self.inputs.append(name)
        return v

    def add_const(self, data: np.ndarray, hint: str = "const", name: str | None = None) -> str:
        """Add a constant value; returns its name (a fresh one unless `name` is given)."""
        data = np.asarray(data)
        name = name or self.fresh(hint)
        self.add_value(name, TensorType.of(data), data)
        return name

    def make_node(
        self,
        op: str,
        inputs: list[str],
        attrs: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        outputs: list[str] | None = None,
        n_outputs: int = 1,
        index: int | None = None,
    ) -> Node:
        """Create a node, normalize its attributes, infer and create its output values.

        The node is inserted at `index` in the node list (appended when None).
        """
        from hwc.ir.ops import infer_types, normalize_attrs

        attrs = normalize_attrs(op, dict(attrs or {}))
        name = name or self.fresh(op.lower())
        if outputs is None:
            outputs = [self.fresh(f"{name}_out" if n_outputs > 1 else name) for _ in range(n_outputs)]
            # fresh() does not see names handed out in this loop yet: make them unique.
            outputs = [o if i == 0 else f"{outputs[0]}_{i}" for i, o in enumerate(outputs)]
        node = Node(op, name, list(inputs), list(outputs), attrs)
        types = infer_types(self, node)
        for o, t in zip(outputs, types):
            if o:
                if o in self.values:
                    raise ValueError(f"value {o!r} already exists")
                self.add_value(o, t)
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    # ---- queries ------------------------------------------------------------------
    def type(self, name: str) -> TensorType:
        return self.values[name].type

    def const(self, name: str) -> np.ndarray | None:
        """The data of a constant value, or None when `name` is not a constant."""
        v = self.values.get(name)
        return None if v is None else v.data

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        uses: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    uses.setdefault(i, []).append(n)
        return uses

    def node_index(self, node: Node) -> int:
        for i, n in enumerate(self.nodes):
            if n is node:
                return i
        raise ValueError(f"{node!r} is not in graph {self.name!r}")

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    # ---- editing ------------------------------------------------------------------
    def remove_node(self, node: Node) -> None:
        del self.nodes[self.node_index(node)]

    def replace_uses(self, old: str, new: str) -> None:
        """Make every consumer of `old` read `new` instead (graph outputs included).

        When `old` is a graph output its name is part of the user's contract: then the
        producer of `new` is renamed to `old` when that is possible, otherwise the
        output is kept through an Identity node.
        """
        if old == new:
            return
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        if old in self.outputs:
            v = self.values[new]
            movable = (
                not v.is_const and new not in self.inputs and new not in self.outputs
                and new in self.producers()
            )
            if movable:
                self._rename(new, old)
            else:
                self.values.pop(old, None)
                self.make_node("Identity", [new], outputs=[old], name=self.fresh(f"{old}_keep"))

    def _rename(self, src: str, dst: str) -> None:
        """Rename value `src` to `dst`, dropping the old value `dst` (which must be dead)."""
        v = self.values.pop(src)
        self.values.pop(dst, None)
        v.name = dst
        self.values[dst] = v
        for n in self.nodes:
            n.inputs = [dst if i == src else i for i in n.inputs]
            n.outputs = [dst if o == src else o for o in n.outputs]
        self.inputs = [dst if i == src else i for i in self.inputs]
        self.outputs = [dst if o == src else o for o in self.outputs]

    def prune_values(self) -> int:
        """Drop values nobody produces, reads or exposes; returns how many were dropped."""
        live = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            live.update(i for i in n.inputs if i)
            live.update(o for o in n.outputs if o)
        dead = [k for k in self.values if k not in live]
        for k in dead:
            del self.values[k]
        return len(dead)

    def toposort(self) -> None:
        """Reorder nodes topologically, keeping the current order where it is free.

        Raises ValueError naming the nodes of a cycle.
        """
        prod = self.producers()
        index = {id(n): i for i, n in enumerate(self.nodes)}
        indeg = {}
        users: dict[int, list[Node]] = {}
        for n in self.nodes:
            deps = {id(prod[i]) for i in n.inputs if i in prod}
            indeg[id(n)] = len(deps)
            for d in deps:
                users.setdefault(d, []).append(n)
        import heapq

        ready = [(index[id(n)], n) for n in self.nodes if indeg[id(n)] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            _, n = heapq.heappop(ready)
            order.append(n)
            for u in users.get(id(n), []):
                indeg[id(u)] -= 1
                if indeg[id(u)] == 0:
                    heapq.heappush(ready, (index[id(u)], u))
        if len(order) != len(self.nodes):
            stuck = [n.name for n in self.nodes if indeg[id(n)] > 0]
            raise ValueError(f"graph {self.name!r} has a cycle through nodes {stuck[:8]}")
        self.nodes = order

    def copy(self) -> Graph:
        """A structural copy; constant arrays are shared (they are immutable)."""
        g = Graph(self.name)
        g.values = {k: Value(v.name, v.type, v.data, _copy.deepcopy(v.quant))
                    for k, v in self.values.items()}
        g.nodes = [Node(n.op, n.name, list(n.inputs), list(n.outputs), _copy.deepcopy(n.attrs))
                   for n in self.nodes]
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.metadata = _copy.deepcopy(self.metadata)
        return g

    # ---- printing -----------------------------------------------------------------
    def __str__(self) -> str:
        from hwc.ir.printer import format_graph

        return format_graph(self)
