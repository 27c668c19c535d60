"""Run a batch-1 graph on N samples at once (calibration and the accuracy search).

The IR has static shapes, usually with a batch dimension of 1. Most ops do not care how
long the leading axis is, so N samples can go through the reference kernels in one call
instead of N: `run_batched` checks that every node is *batch-safe* (its kernel treats
axis 0 as a batch axis; Reshape and Slice, whose attributes spell out the batch-1 axis,
get it rewritten to N) and otherwise falls back to one `run_graph` call per sample. Both
give the same numbers: the float kernels accumulate in float64 per output element and the
int8 kernels are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from hwc.ir.graph import Graph, Node
from hwc.ref.interp import run_graph, run_node

#: Ops whose kernel works on any leading length when every non-constant input has it.
_BATCH_FREE = {
    "Conv", "QConv", "MaxPool", "AveragePool", "QAvgPool", "GlobalAveragePool", "GlobalMaxPool",
    "QGlobalAvgPool", "BatchNormalization", "QLut", "Quantize", "Dequantize", "QRequant", "QAdd",
    "Identity", "Cast", "Clip", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid",
    "Elu", "Celu", "Selu", "Softplus", "Softsign", "ThresholdedRelu", "Abs", "Neg", "Exp", "Log",
    "Sqrt", "Reciprocal", "Floor", "Ceil", "Sign", "Add", "Sub", "Mul", "Div", "Pow", "PRelu",
    "Max", "Min", "Sum", "Mean", "QuantizeLinear", "DequantizeLinear",
}
_AXIS_OPS = {"Concat", "Split", "Softmax", "LogSoftmax", "Gather"}


def _merged_attrs(n: Node, n_samples: int) -> dict | None:
    """The attributes of a batch-safe node that name the batch axis's extent, rewritten for
    n_samples merged on it (None: the node's attributes need no change).

    The importer writes every bound in full (a batch-1 Slice has ends[0] = 1), so the
    kernel would otherwise keep only the first of the merged samples. One sample is the graph
    as declared (whatever its batch): nothing to rewrite.
    """
    if n_samples == 1:
        return None
    if n.op == "Reshape":
        shape = list(n.attrs["shape"])
        return {**n.attrs, "shape": [n_samples * shape[0]] + shape[1:]}
    if n.op == "Expand":   # batch-safe: a full-rank shape with a leading 1
        shape = list(n.attrs["shape"])
        return {**n.attrs, "shape": [n_samples] + shape[1:]}
    if n.op == "Slice":   # batch-safe: starts[0] = 0, steps[0] = 1 and it covers the batch-1 axis
        return {**n.attrs, "ends": [n_samples] + list(n.attrs["ends"][1:])}
    return None


def _batch_safe(g: Graph, n: Node) -> bool:
    ins = [g.values[i] for i in n.inputs if i]
    acts = [v for v in ins if not v.is_const]
    if not acts or any(v.type.rank == 0 or v.type.shape[0] != 1 for v in acts):
        return False
    out_rank = g.type(n.outputs[0]).rank
    if any(g.type(o).shape[:1] != (1,) for o in n.outputs if o):
        return False
    if n.op in ("Conv", "QConv"):   # (its weights, bias and requantization constants do not broadcast)
        return True
    if n.op in _BATCH_FREE:
        if n.op in ("QuantizeLinear", "DequantizeLinear") and n.attrs["axis"] == 0:
            return False
        # Constant operands broadcast from the right; a const with a leading axis > 1 would not.
        return all(v.type.rank < out_rank or v.type.shape[0] == 1 for v in ins)
    if n.op == "Gather":   # np.take puts the indices' shape in place of the axis: constant indices only
        return n.attrs["axis"] != 0 and all(v.is_const for v in ins[1:])
    if n.op in _AXIS_OPS:   # (a constant operand of Concat has a leading 1, not N)
        return n.attrs["axis"] != 0 and all(not v.is_const for v in ins)
    if n.op in ("Gemm", "QGemm"):
        return (n.op == "QGemm" or not n.attrs["transA"]) and all(v.is_const for v in ins[1:])
    if n.op == "MatMul":
        return ins[1].is_const and acts[0].type.rank >= 2
    if n.op == "Transpose":
        return n.attrs["perm"][0] == 0
    if n.op == "Reshape":
        return n.attrs["shape"][0] == 1
    if n.op == "Expand":
        return len(n.attrs["shape"]) == out_rank and n.attrs["shape"][0] == 1
    if n.op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"):
        return 0 not in n.attrs["axes"] and bool(n.attrs["keepdims"])
    if n.op == "Slice":
        return (n.attrs["starts"][0], n.attrs["steps"][0]) == (0, 1) and n.attrs["ends"][0] >= 1
    return False


def batch_safe(g: Graph) -> bool:
    """True when every node of `g` can run with N samples on the leading axis."""
    return all(_batch_safe(g, n) for n in g.nodes) and all(g.type(i).shape[:1] == (1,) for i in g.inputs)


def run_node_merged(g: Graph, n: Node, ins: list, n_samples: int) -> list[np.ndarray]:
    """Run one node on n samples stacked along axis 0 ("merged": [n * shape[0], *shape[1:]])."""
    attrs = _merged_attrs(n, n_samples)
    outs = run_node(n if attrs is None else replace(n, attrs=attrs), ins)
    return [np.asarray(y).astype(g.values[o].type.np_dtype, copy=False) if o else None
            for o, y in zip(n.outputs, outs)]


def merge(x: np.ndarray, shape) -> np.ndarray:
    """[n, *shape] -> [n * shape[0], *shape[1:]]."""
    return x.reshape((-1,) + tuple(shape[1:]))


def _run_nodes(g: Graph, feeds: dict[str, np.ndarray], n_samples: int, keep: bool) -> dict[str, np.ndarray]:
    """Batch-safe evaluation: feeds merged [n, *shape[1:]] (the samples replace the batch-1 axis)."""
    env = {v.name: v.data for v in g.values.values() if v.is_const}
    env.update(feeds)
    for n in g.nodes:
        outs = run_node_merged(g, n, [env[i] if i else None for i in n.inputs], n_samples)
        for o, y in zip(n.outputs, outs):
            if o:
                env[o] = y
    names = [k for k in env if not g.values[k].is_const] if keep else g.outputs
    return {k: env[k].reshape((n_samples,) + g.type(k).shape) for k in names}


def iter_batches(g: Graph, feeds: dict[str, np.ndarray], *, chunk: int = 32, keep: bool = False,
                 ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Yield (n, {name: array [n, *declared shape]}) for consecutive chunks of the samples.

    `feeds` holds one [N, *declared shape] array per graph input (see `stack_samples`).
    With `keep`, every non-constant value of the graph is returned, not just the outputs.
    """
    total = len(next(iter(feeds.values())))
    safe = batch_safe(g)
    for s in range(0, total, chunk):
        part = {k: v[s:s + chunk] for k, v in feeds.items()}
        n = len(next(iter(part.values())))
        if safe:
            flat = {k: v.reshape((n,) + g.type(k).shape[1:]) for k, v in part.items()}
            yield n, _run_nodes(g, flat, n, keep)
            continue
        per = [run_graph(g, {k: v[i] for k, v in part.items()}, keep=keep) for i in range(n)]
        names = [k for k in per[0] if not g.values[k].is_const]
        yield n, {k: np.stack([p[k] for p in per]) for k in names}


def run_batched(g: Graph, feeds: dict[str, np.ndarray], *, chunk: int = 32,
                on_chunk: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """The graph outputs [N, *shape] for feeds of N samples [N, *shape] per input."""
    parts: dict[str, list[np.ndarray]] = {o: [] for o in g.outputs}
    for n, res in iter_batches(g, feeds, chunk=chunk):
        for o in g.outputs:
            parts[o].append(res[o])
        if on_chunk:
            on_chunk(n)
    return {o: np.concatenate(v) for o, v in parts.items()}


def stack_samples(g: Graph, data: dict[str, np.ndarray], what: str = "data") -> dict[str, np.ndarray]:
    """Data in the CLI layout ([N, *declared shape], or one sample) -> {input: [N, *shape]}.

    Raises ValueError naming the input when an array does not fit the declared shape or dtype.
    """
    out = {}
    for name in g.inputs:
        t = g.type(name)
        if name not in data:
            raise ValueError(f"{what} has no array for input {name!r} (it holds {sorted(data)})")
        x = np.asarray(data[name])
        if x.shape == t.shape:
            x = x[None]
        if x.shape[1:] != t.shape:
            raise ValueError(f"{what}: input {name!r} has shape {list(x.shape)}, expected "
                             f"[N, {', '.join(map(str, t.shape))}] (N samples) or {list(t.shape)}")
        if x.dtype != t.np_dtype:
            raise ValueError(f"{what}: input {name!r} has dtype {x.dtype}, the model takes {t.dtype}")
        out[name] = x
    counts = {len(v) for v in out.values()}
    if len(counts) > 1:
        raise ValueError(f"{what}: inputs have different sample counts {sorted(counts)}")
    return out
