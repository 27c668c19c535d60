"""Transposes: chains collapsed into one (or none), transposes sunk through elementwise ops.

`collapse_transposes`: Transpose(Transpose(x, p1), p2) is Transpose(x, p1[p2]); when that
is the identity permutation the pair disappears.
`sink_transposes`: an elementwise op of Transpose(x, p) (and constants, or other
Transposes with the same p) equals Transpose(op(x, ...), p). Moving the Transpose below
the op only pays when it then meets another Transpose to collapse with, so the rule
follows the op's single-consumer chain of elementwise ops and declines otherwise.
"""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph
from hwc.ir.ops import BINARY_OPS, UNARY_OPS
from hwc.ir.types import TensorType
from hwc.passes.rewrite import (
    Match,
    Rule,
    bypass,
    bypass_reason,
    consumers,
    drop_if_dead,
    n_uses,
    producer,
    rules_pass,
    set_op,
)

#: Elementwise ops a Transpose can move through (unary, binary; Max/Min of two).
SINKABLE = frozenset(UNARY_OPS) | frozenset(BINARY_OPS) | {"Max", "Min"}


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# ---- collapse ----------------------------------------------------------------------------
def _pair(g: Graph, n) -> Match | None:
    if n.op != "Transpose":
        return None
    inner = producer(g, n.inputs[0])
    return {"inner": inner} if inner is not None and inner.op == "Transpose" else None


def _collapse(g: Graph, m: Match) -> None:
    outer, inner = m["node"], m["inner"]
    x = inner.inputs[0]
    perm = [inner.attrs["perm"][i] for i in outer.attrs["perm"]]
    outer.inputs[0] = x
    if perm != list(range(len(perm))):
        outer.attrs["perm"] = perm
    elif bypass_reason(g, outer.outputs[0], x) is None:
        bypass(g, outer, x)
    else:  # the graph output keeps its name through an Identity
        set_op(outer, "Identity", {})
    drop_if_dead(g, inner)


collapse_transposes = rules_pass("collapse_transposes", [
    Rule("transpose_pair", _pair, lambda g, m: None, _collapse),
], "Transpose(Transpose(x)) -> one Transpose, or none when they compose to the identity.")


# ---- sink ----------------------------------------------------------------------------------
def _sink_pattern(g: Graph, n) -> Match | None:
    if n.op not in SINKABLE:
        return None
    for x in n.inputs:
        t = producer(g, x)
        if t is not None and t.op == "Transpose":
            return {"t": t, "perm": t.attrs["perm"]}
    return None


def _meets_transpose(g: Graph, value: str) -> bool:
    """Does `value` flow, through single-consumer elementwise ops, into a Transpose?"""
    while value not in g.outputs and n_uses(g, value) == 1:
        (c,) = consumers(g, value)
        if c.op == "Transpose":
            return True
        if c.op not in SINKABLE:
            return False
        value = c.outputs[0]
    return False


def _sink_check(g: Graph, m: Match) -> str | None:
    n, perm = m["node"], m["perm"]
    y = g.type(n.outputs[0])
    if y.rank != len(perm):
        return f"an operand raises the rank to {y.rank} (the Transpose is rank {len(perm)})"
    for x in dict.fromkeys(n.inputs):
        if g.values[x].is_const:
            continue
        t = producer(g, x)
        if t is None or t.op != "Transpose" or t.attrs["perm"] != perm:
            return f"operand {x!r} is neither a constant nor a Transpose with perm {perm}"
        if x in g.outputs or n_uses(g, x) != n.inputs.count(x):
            return f"Transpose output {x!r} has other consumers (it would stay and be duplicated)"
    if not _meets_transpose(g, n.outputs[0]):
        return "no Transpose below to cancel with: sinking would only move it"
    return None


def _sink(g: Graph, m: Match) -> None:
    n, perm = m["node"], m["perm"]
    inv = _inverse(perm)
    r = len(perm)
    transposes = []
    for k, x in enumerate(n.inputs):
        if g.values[x].is_const:
            c = g.const(x)
            c = np.transpose(c.reshape((1,) * (r - c.ndim) + c.shape), inv)
            n.inputs[k] = g.add_const(np.ascontiguousarray(c), hint=f"{x}_t")
        else:
            t = producer(g, x)
            transposes.append(t)
            n.inputs[k] = t.inputs[0]
    y = n.outputs[0]
    yt = g.type(y)
    z = g.fresh(f"{y}_pre")
    g.add_value(z, TensorType(yt.dtype, tuple(yt.shape[inv[j]] for j in range(r))))
    n.outputs = [z]
    g.values.pop(y)
    g.make_node("Transpose", [z], {"perm": perm}, outputs=[y], name=g.fresh(f"{n.name}_t"),
                index=g.node_index(n) + 1)
    for t in transposes:
        drop_if_dead(g, t)


sink_transposes = rules_pass("sink_transposes", [
    Rule("sink_through_elementwise", _sink_pattern, _sink_check, _sink),
], "Move a Transpose below an elementwise op when it then meets another Transpose.")
