"""BatchNormalization: folded into the preceding Conv/Gemm/MatMul, or a per-channel scale+shift.

Inference BN is y = s * x + t per channel (axis 1) with s = gamma / sqrt(var + eps) and
t = beta - mean * s. After a Conv (output channel m) or a Gemm/2-d MatMul (output column
n), s scales that channel's weights and the bias becomes b * s + t. The new weights are
computed in float64 and rounded once to float32, so outputs change only by rounding.
A BN that cannot be folded becomes Mul(x, s) then Add(t) (constants shaped [C, 1, ...]).
"""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph
from hwc.passes.rewrite import (
    Match,
    Rule,
    bypass,
    is_float,
    producer,
    replace_node,
    rules_pass,
    set_const_input,
    set_op,
    sole_use_reason,
)

LINEAR_OPS = ("Conv", "Gemm", "MatMul")


def bn_scale_shift(g: Graph, bn) -> tuple[np.ndarray, np.ndarray]:
    """(s, t) in float64 with BN(x) = s * x + t along axis 1."""
    gamma, beta, mean, var = (g.const(i).astype(np.float64) for i in bn.inputs[1:5])
    s = gamma / np.sqrt(var + bn.attrs["epsilon"])
    return s, beta - mean * s


def _params_reason(g: Graph, bn) -> str | None:
    if not all(g.values[i].is_const for i in bn.inputs[1:5]):
        return "its scale/bias/mean/var are computed at run time, not constants"
    if not is_float(g, bn.inputs[0]):
        return f"input is {g.type(bn.inputs[0]).dtype}, not float32"
    return None


# ---- fold into the producer ----------------------------------------------------------------
def _fold_pattern(g: Graph, n) -> Match | None:
    if n.op != "BatchNormalization":
        return None
    p = producer(g, n.inputs[0])
    return {"p": p} if p is not None and p.op in LINEAR_OPS else None


def _fold_check(g: Graph, m: Match) -> str | None:
    bn, p = m["node"], m["p"]
    reason = _params_reason(g, bn) or sole_use_reason(g, p.outputs[0], f"{p.op} output")
    if reason:
        return reason
    if p.attrs["act"]:
        return f"{p.op} {p.name!r} already applies {p.attrs['act']}: the BN comes after the activation"
    if any(i and not g.values[i].is_const for i in p.inputs[1:]):
        return f"{p.op} weight or bias is computed at run time, not a constant"
    if p.op == "MatMul" and (g.type(p.inputs[0]).rank != 2 or g.type(p.inputs[1]).rank != 2):
        return (f"MatMul output of rank {g.type(p.outputs[0]).rank}: BN's channel axis 1 is not the "
                f"product's column axis")
    return None


def _fold(g: Graph, m: Match) -> None:
    bn, p = m["node"], m["p"]
    s, t = bn_scale_shift(g, bn)
    w = g.const(p.inputs[1]).astype(np.float64)
    bias = g.const(p.inputs[2]).astype(np.float64) if len(p.inputs) > 2 and p.inputs[2] else None
    if p.op == "Conv":
        w = w * s.reshape((-1,) + (1,) * (w.ndim - 1))
        bias = t if bias is None else bias * s + t
    else:
        if p.op == "MatMul":
            set_op(p, "Gemm", {"act": p.attrs["act"], "act_args": p.attrs["act_args"]})
        w = w * (s[:, None] if p.attrs["transB"] else s[None, :])
        bias = t if bias is None else p.attrs["beta"] * bias * s + t
        p.attrs["beta"] = 1.0
    set_const_input(g, p, 1, w.astype(np.float32), f"{p.name}_w_bn")
    set_const_input(g, p, 2, bias.astype(np.float32), f"{p.name}_b_bn")
    bypass(g, bn, p.outputs[0])


fold_batchnorm = rules_pass("fold_batchnorm", [
    Rule("bn_into_linear", _fold_pattern, _fold_check, _fold),
], "BatchNormalization after a Conv/Gemm/MatMul folded into its weights and bias.")


# ---- a lone BN: per-channel scale and shift ----------------------------------------------------
def _lone_pattern(g: Graph, n) -> Match | None:
    return {} if n.op == "BatchNormalization" else None


def _lone_check(g: Graph, m: Match) -> str | None:
    bn = m["node"]
    if g.type(bn.inputs[0]).rank < 2:
        return "input of rank 1 has no channel axis"
    return _params_reason(g, bn)


def _scale_shift(g: Graph, m: Match) -> None:
    bn = m["node"]
    x, y = bn.inputs[0], bn.outputs[0]
    s, t = bn_scale_shift(g, bn)
    shape = (-1,) + (1,) * (g.type(x).rank - 2)
    sc = g.add_const(s.astype(np.float32).reshape(shape), hint=f"{bn.name}_scale")
    sh = g.add_const(t.astype(np.float32).reshape(shape), hint=f"{bn.name}_shift")

    def build(i):
        mul = g.make_node("Mul", [x, sc], name=g.fresh(f"{bn.name}_scale"), index=i)
        g.make_node("Add", [mul.outputs[0], sh], name=g.fresh(f"{bn.name}_shift"), outputs=[y], index=i + 1)

    replace_node(g, bn, build)


batchnorm_to_scale_shift = rules_pass("batchnorm_to_scale_shift", [
    Rule("bn_to_mul_add", _lone_pattern, _lone_check, _scale_shift),
], "A BatchNormalization that could not be folded becomes Mul + Add per channel.")
