"""Static figures of a graph: MACs per node, weight bytes, tensor bytes."""

from __future__ import annotations

import math

from hwc.ir.graph import Graph, Node


def node_macs(g: Graph, n: Node) -> int:
    """Multiply-accumulates of one node (0 for ops that do none)."""
    if n.op == "Conv":
        w = g.type(n.inputs[1])
        out = g.type(n.outputs[0])
        return out.size * math.prod(w.shape[1:])
    if n.op == "Gemm":
        a = g.type(n.inputs[0])
        k = a.shape[0] if n.attrs["transA"] else a.shape[1]
        return g.type(n.outputs[0]).size * k
    if n.op == "MatMul":
        a = g.type(n.inputs[0])
        return g.type(n.outputs[0]).size * a.shape[-1]
    return 0


def graph_macs(g: Graph) -> int:
    return sum(node_macs(g, n) for n in g.nodes)


def weights_bytes(g: Graph) -> int:
    return sum(v.type.nbytes for v in g.values.values() if v.is_const)


def summary(g: Graph) -> dict:
    return {
        "nodes": len(g.nodes),
        "ops": dict(sorted(g.op_counts().items())),
        "macs": graph_macs(g),
        "weights_bytes": weights_bytes(g),
    }
