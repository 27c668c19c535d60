"""Magnitude pruning (`--prune FRACTION`, off by default).

Zeroes the smallest-magnitude FRACTION of every Conv/Gemm/MatMul weight (per tensor) and
reports the resulting sparsity and the output error it causes on random inputs (relative
L2 and max abs against the graph before pruning). That error only says how much the
outputs move; the accuracy effect is measured by the quantization search on real data.
The figures also go to `graph.metadata["prune"]`.
"""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph
from hwc.passes.manager import PassContext, PassResult, graph_pass
from hwc.ref.interp import run_graph

LINEAR_OPS = ("Conv", "Gemm", "MatMul")
#: Random inputs used to measure the output error (seeded: the report is reproducible).
ERROR_SAMPLES, ERROR_SEED = 4, 0


def prune_array(w: np.ndarray, fraction: float) -> np.ndarray:
    """A copy of `w` with its int(fraction * size) smallest-magnitude entries set to zero."""
    k = int(fraction * w.size)
    out = np.array(w, copy=True).reshape(-1)
    if k:
        out[np.argpartition(np.abs(out), k - 1)[:k]] = 0
    return out.reshape(w.shape)


def output_error(before: Graph, after: Graph) -> tuple[float, float]:
    """(relative L2, max abs) difference of the outputs on seeded standard-normal inputs."""
    rng = np.random.default_rng(ERROR_SEED)
    num = den = 0.0
    worst = 0.0
    for _ in range(ERROR_SAMPLES):
        feeds = {}
        for name in before.inputs:
            t = before.type(name)
            x = rng.standard_normal(t.shape) if t.dtype == "float32" else np.zeros(t.shape)
            feeds[name] = x.astype(t.np_dtype)
        ya, yb = run_graph(before, feeds), run_graph(after, feeds)
        for o in before.outputs:
            d = yb[o].astype(np.float64) - ya[o].astype(np.float64)
            num += float(np.sum(d * d))
            den += float(np.sum(ya[o].astype(np.float64) ** 2))
            worst = max(worst, float(np.max(np.abs(d), initial=0.0)))
    return (np.sqrt(num / den) if den else float(np.sqrt(num))), worst


@graph_pass("prune")
def prune(g: Graph, ctx: PassContext) -> PassResult:
    """Magnitude pruning: zero the smallest |w| of every Conv/Gemm/MatMul weight (--prune)."""
    res = PassResult()
    if ctx.prune <= 0:
        return res
    before = g.copy()
    done: dict[str, str] = {}
    total = zeros = 0
    for n in g.nodes:
        w_name = n.inputs[1] if n.op in LINEAR_OPS else None
        if w_name is None or not g.values[w_name].is_const or g.type(w_name).dtype != "float32":
            continue
        if w_name not in done:
            w = g.const(w_name)
            if int(ctx.prune * w.size) == 0:
                res.decline(n.name, f"weight of {w.size} entries: {ctx.prune:g} of it is less than one entry")
                continue
            pruned = prune_array(w, ctx.prune)
            done[w_name] = g.add_const(pruned, hint=f"{w_name}_pruned")
            total += w.size
            zeros += int(np.count_nonzero(pruned == 0))
        n.inputs[1] = done[w_name]
    if not done:
        return res
    rel, worst = output_error(before, g)
    g.metadata["prune"] = {"fraction": ctx.prune, "weights": total, "zeros": zeros, "sparsity": zeros / total,
                           "rel_l2_error": rel, "max_abs_error": worst}
    res.notes.append(f"zeroed the smallest {ctx.prune:.1%} of {len(done)} weight tensors: {zeros:,} of {total:,} "
                     f"weights are zero (sparsity {zeros / total:.1%})")
    res.notes.append(f"output error on {ERROR_SAMPLES} random inputs: relative L2 {rel:.3g}, max abs {worst:.3g} "
                     f"(the accuracy effect is measured by the quantization search)")
    res.changed = True
    return res
