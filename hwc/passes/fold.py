"""Constant folding: nodes whose inputs are all constants, and weight transposes.

`fold_weight_transposes` runs first so that a transposed weight is reported as such:
a Transpose of a constant becomes the transposed constant, and a 2-d Transpose feeding a
Gemm's A or B becomes that Gemm's transA/transB flag. `fold_constants` evaluates any
other all-constant node with the reference kernel (the same numbers the interpreter
gives), which covers shape arithmetic left after import (Shape/Gather/Concat chains)
and weight preprocessing (Mul of two constants, QuantizeLinear of a weight, ...).
"""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph
from hwc.passes.manager import PassContext, PassResult, graph_pass
from hwc.passes.rewrite import consumers, drop_if_dead, make_const
from hwc.ref.interp import run_node

#: A folded result up to this size is always kept as a constant.
FOLD_MIN_BYTES = 1 << 16
#: Above FOLD_MIN_BYTES, fold only when the result is at most this many times its inputs
#: (folding an Expand of a scalar into a megabyte weight trades run time for memory).
FOLD_GROWTH = 4


@graph_pass("fold_weight_transposes")
def fold_weight_transposes(g: Graph, ctx: PassContext) -> PassResult:
    """Transpose(constant) -> transposed constant; 2-d Transpose -> Gemm transA/transB."""
    res = PassResult()
    for n in [n for n in g.nodes if n.op == "Transpose"]:
        x, y, perm = n.inputs[0], n.outputs[0], n.attrs["perm"]
        if g.values[x].is_const:
            g.remove_node(n)
            make_const(g, y, np.transpose(g.const(x), perm))
            res.changed = True
            continue
        if perm != [1, 0]:
            res.decline(n.name, f"input {x!r} is computed at run time, not a weight")
            continue
        for c in consumers(g, y):
            if c.op != "Gemm":
                continue
            for slot, flag in ((0, "transA"), (1, "transB")):
                if c.inputs[slot] == y:
                    c.inputs[slot] = x
                    c.attrs[flag] ^= 1
                    res.changed = True
        drop_if_dead(g, n)
        if any(m is n for m in g.nodes):
            res.decline(n.name, f"input {x!r} is computed at run time, not a weight, and a reader is no Gemm "
                                f"(whose transA/transB could absorb it)")
    return res


@graph_pass("fold_constants")
def fold_constants(g: Graph, ctx: PassContext) -> PassResult:
    """Evaluate every node whose inputs are all constants (shape arithmetic included)."""
    res = PassResult()
    for n in list(g.nodes):
        ins = [i for i in n.inputs if i]
        if not ins or not all(g.values[i].is_const for i in ins):
            continue
        out_bytes = sum(g.type(o).nbytes for o in n.outputs if o)
        in_bytes = sum(g.type(i).nbytes for i in set(ins))
        if out_bytes > max(FOLD_GROWTH * in_bytes, FOLD_MIN_BYTES):
            res.decline(n.name, f"the result ({out_bytes} bytes) is more than {FOLD_GROWTH}x its constant "
                                f"inputs ({in_bytes} bytes): left to run time to save memory")
            continue
        results = run_node(n, [g.const(i) if i else None for i in n.inputs])
        g.remove_node(n)
        for o, r in zip(n.outputs, results):
            if o:
                make_const(g, o, r)
        res.changed = True
    return res
