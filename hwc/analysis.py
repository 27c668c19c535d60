"""Static figures of a graph: MACs per node, weight bytes, tensor bytes."""

from __future__ import annotations

import math

from hwc.ir.graph import Graph, Node

MAC_OPS = ("Conv", "Gemm", "MatMul", "QConv", "QGemm", "QMatMul")


def node_macs(g: Graph, n: Node) -> int:
    """Multiply-accumulates of one Conv/Gemm/MatMul node, float or int8 (0 for ops that do none)."""
    if n.op not in MAC_OPS:
        return 0
    out = g.type(n.outputs[0])
    if n.op in ("Conv", "QConv"):
        return out.size * math.prod(g.type(n.inputs[1]).shape[1:])
    a = g.type(n.inputs[0])
    k = a.shape[0] if n.attrs.get("transA") else a.shape[-1]
    return out.size * k


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
