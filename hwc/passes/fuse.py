"""Bias and activation fusion: Conv/Gemm/MatMul carry their bias and activation.

`matmul_to_gemm`: a MatMul of a 2-d input with a 2-d constant is a fully-connected layer;
as a Gemm it has a bias input, so bias, BN and FC-merge rules see one op.
`fuse_bias`: Add (or Sub) of a per-channel constant after Conv/Gemm/2-d MatMul -> bias.
`fuse_activation`: Relu, Clip, LeakyRelu, HardSigmoid, HardSwish, Sigmoid, Tanh after
Conv/Gemm/MatMul -> the node's `act`/`act_args` (ops.ACTIVATIONS). A Relu or Clip after
a node that already applies relu/clip merges into one clip.
"""

from __future__ import annotations

import math

import numpy as np

from hwc.ir.graph import Graph
from hwc.passes.rewrite import (
    Match,
    Rule,
    bypass,
    is_float,
    producer,
    rules_pass,
    set_const_input,
    set_op,
    sole_use_reason,
)

LINEAR_OPS = ("Conv", "Gemm", "MatMul")


def _keep_act(p) -> dict:
    return {"act": p.attrs["act"], "act_args": p.attrs["act_args"]}


# ---- MatMul -> Gemm ----------------------------------------------------------------------------
def _mm_pattern(g: Graph, n) -> Match | None:
    return {} if n.op == "MatMul" and g.values[n.inputs[1]].is_const else None


def _mm_check(g: Graph, m: Match) -> str | None:
    n = m["node"]
    ra, rb = g.type(n.inputs[0]).rank, g.type(n.inputs[1]).rank
    return None if ra == rb == 2 else f"operands of rank {ra} and {rb}: Gemm takes 2-d operands"


matmul_to_gemm = rules_pass("matmul_to_gemm", [
    Rule("matmul_2d_const", _mm_pattern, _mm_check, lambda g, m: set_op(m["node"], "Gemm", _keep_act(m["node"]))),
], "MatMul of a 2-d input and a 2-d constant -> Gemm (the fully-connected node).")


# ---- bias ------------------------------------------------------------------------------------------
def _bias_pattern(g: Graph, n) -> Match | None:
    if n.op not in ("Add", "Sub"):
        return None
    for k in (0, 1) if n.op == "Add" else (0,):
        p, c = producer(g, n.inputs[k]), n.inputs[1 - k]
        if p is not None and p.op in LINEAR_OPS and g.values[c].is_const:
            return {"p": p, "c": g.const(c), "sign": -1.0 if n.op == "Sub" else 1.0}
    return None


def _bias_check(g: Graph, m: Match) -> str | None:
    n, p, c = m["node"], m["p"], m["c"]
    reason = sole_use_reason(g, p.outputs[0], f"{p.op} output")
    if reason:
        return reason
    if p.attrs["act"]:
        return f"{p.op} {p.name!r} already applies {p.attrs['act']}: an Add after the activation is no bias"
    if not is_float(g, n.outputs[0]):
        return "not float32"
    if g.type(n.outputs[0]) != g.type(p.outputs[0]):
        return f"the {n.op} broadcasts the product to a larger shape {g.type(n.outputs[0]).shape}"
    if any(i and not g.values[i].is_const for i in p.inputs[2:]):
        return f"{p.op} bias is computed at run time"
    rank = g.type(p.outputs[0]).rank
    if p.op == "Conv":
        full = c.reshape((1,) * (rank - c.ndim) + c.shape)
        if any(d != 1 for i, d in enumerate(full.shape) if i != 1):
            return f"constant of shape {c.shape} varies along axes other than the channel axis"
    if p.op == "MatMul" and (rank != 2 or g.type(p.inputs[0]).rank != 2):
        return f"MatMul of rank {rank} has no bias input (a Gemm takes 2-d operands)"
    return None


def _fuse_bias(g: Graph, m: Match) -> None:
    n, p, c, sign = m["node"], m["p"], m["c"].astype(np.float64), m["sign"]
    old = g.const(p.inputs[2]).astype(np.float64) if len(p.inputs) > 2 and p.inputs[2] else None
    if p.op == "Conv":
        m_out = g.type(p.outputs[0]).shape[1]
        b = np.broadcast_to(sign * c.reshape(-1), (m_out,))
        b = b if old is None else old + b
    else:
        if p.op == "MatMul":
            set_op(p, "Gemm", _keep_act(p))
        b = sign * c if old is None else p.attrs["beta"] * old + sign * c
        if b.ndim == 2 and b.shape[0] == 1:
            b = b.reshape(-1)
        p.attrs["beta"] = 1.0
    set_const_input(g, p, 2, b.astype(np.float32), f"{p.name}_bias")
    bypass(g, n, p.outputs[0])


fuse_bias = rules_pass("fuse_bias", [
    Rule("add_const_into_bias", _bias_pattern, _bias_check, _fuse_bias),
], "Add/Sub of a per-channel constant after Conv/Gemm/MatMul -> the node's bias.")


# ---- activation ------------------------------------------------------------------------------------
def activation_of(n) -> tuple[str, list[float]] | None:
    """The fused-activation form (ops.ACTIVATIONS) of an activation node, or None."""
    a = n.attrs
    return {
        "Relu": lambda: ("relu", []),
        "Clip": lambda: ("clip", [a["min"], a["max"]]),
        "LeakyRelu": lambda: ("leakyrelu", [a["alpha"]]),
        "HardSigmoid": lambda: ("hardsigmoid", [a["alpha"], a["beta"]]),
        "HardSwish": lambda: ("hardswish", []),
        "Sigmoid": lambda: ("sigmoid", []),
        "Tanh": lambda: ("tanh", []),
    }.get(n.op, lambda: None)()


def _interval(act: str, args: list[float]) -> tuple[float, float] | None:
    return {"relu": (0.0, math.inf), "clip": tuple(args) if args else None}.get(act)


def _act_pattern(g: Graph, n) -> Match | None:
    if activation_of(n) is None:
        return None
    p = producer(g, n.inputs[0])
    return {"p": p} if p is not None and p.op in LINEAR_OPS else None


def _act_check(g: Graph, m: Match) -> str | None:
    n, p = m["node"], m["p"]
    reason = sole_use_reason(g, p.outputs[0], f"{p.op} output")
    if reason:
        return reason
    if not is_float(g, n.outputs[0]):
        return "not float32"
    if p.attrs["act"]:
        a, b = _interval(p.attrs["act"], p.attrs["act_args"]), _interval(*activation_of(n))
        if a is None or b is None:
            return f"{p.op} {p.name!r} already applies {p.attrs['act']}; {n.op} after it does not merge"
        if max(a[0], b[0]) > min(a[1], b[1]):
            return f"ranges {list(a)} and {list(b)} do not overlap (the result is a constant)"
    return None


def _fuse_act(g: Graph, m: Match) -> None:
    n, p = m["node"], m["p"]
    act, args = activation_of(n)
    if p.attrs["act"]:
        a, b = _interval(p.attrs["act"], p.attrs["act_args"]), _interval(act, args)
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        act, args = ("relu", []) if (lo, hi) == (0.0, math.inf) else ("clip", [lo, hi])
    p.attrs["act"], p.attrs["act_args"] = act, [float(v) for v in args]
    bypass(g, n, p.outputs[0])


fuse_activation = rules_pass("fuse_activation", [
    Rule("activation_into_linear", _act_pattern, _act_check, _fuse_act),
], "Relu/Clip/LeakyRelu/HardSigmoid/HardSwish/Sigmoid/Tanh after Conv/Gemm/MatMul -> its fused act.")
