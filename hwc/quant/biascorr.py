"""Empirical bias correction: remove the mean error each quantized layer adds.

Quantizing weights (and the activations feeding a layer) shifts the mean of its output
per channel; a following ReLU turns that shift into a systematic error. For every QConv
and QGemm, the calibration samples run through the float graph and the int8 graph side
by side, and the layer's *pre-activation* output is compared: the float layer on its
float input, and the int8 accumulator (times s_x * s_w) on its int8 input, i.e. with every
upstream error included. The mean difference per output channel, in bias codes
(rint(delta / (s_x * s_w[c]))), is added to the int32 bias. Only the integer bias
constants change: the int8 semantics are untouched.

The correction is sequential, in one pass: the int8 graph is evaluated node by node (all
samples at once), and each layer is corrected just before it runs, so its inputs already
carry the corrected upstream layers. (Correcting every layer from one measurement would
count an upstream error twice: once where it arises and again in every layer it reaches.)
"""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph
from hwc.quant import arith
from hwc.quant.runner import batch_safe, iter_batches, merge, run_node_merged
from hwc.ref.int8 import conv_accumulate, gemm_accumulate
from hwc.ref.interp import KERNELS

#: Samples used (a mean per channel converges fast; this bounds time and memory).
MAX_SAMPLES = 128


def _pairs(src: Graph, q: Graph) -> dict[str, object]:
    """int8 node name -> src node, for every Conv/Gemm/MatMul that became a QConv/QGemm."""
    by_name = {n.name: n for n in src.nodes}
    ops = {n.name: n.op for n in q.nodes}
    return {r["int8_node"]: by_name[r["node"]] for r in q.metadata["quant"]["nodes"]
            if ops.get(r.get("int8_node", "")) in ("QConv", "QGemm")}


def _error(src: Graph, n, ef: dict, q: Graph, d, x8: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, int]:
    """(sum over samples and positions of float - int8 pre-activation, count) per channel."""
    ins = [merge(ef[i], src.type(i).shape) if not src.values[i].is_const else src.const(i) for i in n.inputs if i]
    y_f = np.asarray(KERNELS[n.op]({**n.attrs, "act": "", "act_args": []}, *ins)[0], np.float64)
    w = q.const(d.inputs[1])
    s_b = q.values[d.inputs[2]].quant.scale.astype(np.float64)
    if d.op == "QConv":
        acc = conv_accumulate(x8, w, bias, d.attrs["z_in"], d.attrs)
        err = y_f - acc * s_b.reshape((1, -1) + (1,) * (acc.ndim - 2))
        err = np.moveaxis(err, 1, -1)
    else:
        acc = gemm_accumulate(x8, w, bias, d.attrs["z_in"])
        err = y_f.reshape(acc.shape) - acc * s_b
    err = err.reshape(-1, err.shape[-1])
    return err.sum(axis=0), len(err)


def correct_biases(src: Graph, q: Graph, feeds: dict[str, np.ndarray], chunk: int = 32) -> dict[str, int]:
    """Correct every QConv/QGemm bias of `q` (in place) from the samples `feeds` ({input: [N, *shape]}).

    Returns {int8 node: largest |correction| in bias codes}, also stored in
    q.metadata["quant"]["bias_correction"].
    """
    feeds = {k: v[:MAX_SAMPLES] for k, v in feeds.items()}
    if not (batch_safe(q) and batch_safe(src)):
        chunk = 1
    pairs = _pairs(src, q)
    f_envs = [env for _, env in iter_batches(src, feeds, chunk=chunk, keep=True)]
    consts = {v.name: v.data for v in q.values.values() if v.is_const}
    q_envs = []
    for env in f_envs:
        n = len(next(iter(env.values())))
        q_envs.append((n, {i: merge(env[i], q.type(i).shape) for i in q.inputs}))
    report: dict[str, int] = {}
    for d in q.nodes:
        if d.name in pairs:
            total, count = 0.0, 0
            bias = q.const(d.inputs[2])
            for ef, (_, eq) in zip(f_envs, q_envs):
                s, c = _error(src, pairs[d.name], ef, q, d, eq[d.inputs[0]], bias)
                total, count = total + s, count + c
            v = q.values[d.inputs[2]]
            corr = np.rint(np.asarray(total) / max(count, 1) / v.quant.scale.astype(np.float64))
            new = np.clip(bias.astype(np.int64) + corr, arith.INT32_MIN, arith.INT32_MAX).astype(np.int32)
            new.flags.writeable = False
            v.data = consts[v.name] = new
            report[d.name] = int(np.abs(corr).max()) if corr.size else 0
        for n, eq in q_envs:
            outs = run_node_merged(q, d, [(eq[i] if i in eq else consts[i]) if i else None for i in d.inputs], n)
            for o, y in zip(d.outputs, outs):
                if o:
                    eq[o] = y
    q.metadata["quant"]["bias_correction"] = {"samples": len(next(iter(feeds.values()))), "max_codes": report}
    return report
