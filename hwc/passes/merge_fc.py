"""Merging fully-connected products so one engine pass does the work of several.

Two kinds of sharing, both between Gemm (transA=0) / MatMul nodes with constant weights:
- shared input: products of the same input x with weights W1, W2, ... become one
  product x @ [W1 W2 ...] (weights and biases concatenated along the output axis) and
  a Split. The input is read once, and narrow weight matrices share blocks.
- shared weight: thin inputs x1, x2, ... (few rows) multiplied by the same W (and bias)
  are stacked: Concat([x1; x2; ...]) @ W, then a Split along rows. The weights are
  loaded once for all of them.

Whether it pays is the target's call (`merge_pays`, `stack_pays`): a tile target counts
the weight blocks of its array (rows x cols from its YAML); cpu/ref merge thin products
(narrower than two of the target's vectors; THIN by default). Every decision, taken or
declined, is recorded with its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwc.ir.graph import Graph, Node
from hwc.passes.manager import PassContext, PassResult, graph_pass

#: cpu/ref: a product with fewer output columns (or input rows) than this is thin: it
#: fills less than two 16-float (512-bit) vectors, and merging it with its neighbours pays.
#: A cpu target with a numeric `simd_bits` uses two of its own vectors instead.
THIN = 32


@dataclass
class FC:
    node: Node
    a: str            # the input (M x K, or batched for MatMul)
    b: str            # the constant weight
    c: str | None     # the constant bias (Gemm)
    k: int            # inner dimension
    n: int            # output columns
    m: int            # input rows (product of the leading dims)


def _fc(g: Graph, n: Node) -> FC | None:
    """The node as a fully-connected product with constant weights, or None."""
    if n.op == "Gemm" and n.attrs["transA"] == 0:
        c = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        if c is not None and not g.values[c].is_const:
            return None
    elif n.op == "MatMul" and g.type(n.inputs[0]).rank >= 2:
        c = None
    else:
        return None
    if not g.values[n.inputs[1]].is_const or g.type(n.inputs[1]).rank != 2:
        return None
    w = g.type(n.inputs[1]).shape
    k, width = (w[1], w[0]) if n.op == "Gemm" and n.attrs["transB"] else w
    a = g.type(n.inputs[0]).shape
    return FC(n, n.inputs[0], n.inputs[1], c, k, width, math.prod(a[:-1]))


# ---- the target's rule ---------------------------------------------------------------------
def _block(ctx: PassContext) -> tuple[int, int] | None:
    return (ctx.target["array"]["rows"], ctx.target["array"]["cols"]) if ctx.kind == "tile" else None


def thin_limit(ctx: PassContext) -> int:
    """cpu/ref: the width below which a product is thin (two float32 vectors of the target)."""
    bits = ctx.target.get("simd_bits")
    return 2 * bits // 32 if isinstance(bits, int) and not isinstance(bits, bool) else THIN


def merge_pays(ctx: PassContext, widths: list[int], k: int) -> tuple[bool, str]:
    """Do products of output widths `widths` over one input of depth k pay to merge? (yes?, why)"""
    name, block = ctx.target["name"], _block(ctx)
    if block is None:
        thin = thin_limit(ctx)
        if max(widths) < thin:
            return True, f"thin products (widths {widths} < {thin}): the input is read once, not {len(widths)} times"
        return False, f"widths {widths} are not all thin (< {thin}): separate products already use the vector units"
    r, c = block
    kb = -(-k // c)
    sep = sum(-(-w // r) for w in widths) * kb
    merged = -(-sum(widths) // r) * kb
    if merged < sep:
        return True, f"widths {widths}: {merged} weight block(s) of {r}x{c} merged instead of {sep} ({name})"
    return False, f"widths {widths} already fill {r}-row blocks: {sep} weight block(s) merged or not ({name})"


def stack_pays(ctx: PassContext, rows: list[int], fc: FC) -> tuple[bool, str]:
    """Do inputs of `rows` rows sharing one weight pay to stack? (yes?, why)"""
    name, block = ctx.target["name"], _block(ctx)
    limit = thin_limit(ctx) if block is None else block[0]
    if max(rows) >= limit:
        return False, f"inputs of rows {rows} are not all thin (< {limit}{', ' + name if block else ''})"
    if block is None:
        return True, f"thin inputs (rows {rows} < {limit}): weight {fc.b!r} is read once, not {len(rows)} times"
    blocks = -(-fc.n // block[0]) * -(-fc.k // block[1])
    return True, (f"thin inputs (rows {rows} < {block[0]}): the {blocks} block(s) of weight {fc.b!r} are "
                  f"loaded once, not {len(rows)} times ({name})")


# ---- grouping ----------------------------------------------------------------------------------
def _input_key(g: Graph, f: FC) -> tuple:
    a = f.node.attrs
    return (f.a, f.node.op, a.get("alpha"), a["act"], tuple(a["act_args"]))


def _weight_key(g: Graph, f: FC) -> tuple:
    return (f.b, f.c, f.node.op, repr(sorted(f.node.attrs.items())))


def _groups(g: Graph, key) -> list[list[FC]]:
    groups: dict[tuple, list[FC]] = {}
    for n in g.nodes:
        f = _fc(g, n)
        if f is not None:
            groups.setdefault(key(g, f), []).append(f)
    return [fs for fs in groups.values() if len(fs) > 1]


def _descendants(g: Graph, nodes: list[Node]) -> set[str]:
    """Every value computed from the outputs of `nodes`."""
    reach = {o for n in nodes for o in n.outputs}
    for n in g.nodes:
        if any(i in reach for i in n.inputs):
            reach.update(n.outputs)
    return reach


def _names(fs: list[FC]) -> str:
    return ", ".join(repr(f.node.name) for f in fs)


# ---- rewriting ------------------------------------------------------------------------------------
def _detach(g: Graph, fs: list[FC]) -> tuple[int, list[str]]:
    """Remove the group's nodes; returns (index of the first, their output names)."""
    idx = min(g.node_index(f.node) for f in fs)
    outs = [f.node.outputs[0] for f in fs]
    for f in fs:
        g.remove_node(f.node)
    for o in outs:
        g.values.pop(o)
    return idx, outs


def _merged_bias(g: Graph, fs: list[FC], rows: int) -> np.ndarray | None:
    if all(f.c is None for f in fs):
        return None
    full = [np.broadcast_to(f.node.attrs["beta"] * g.const(f.c).astype(np.float64), (rows, f.n))
            if f.c else np.zeros((rows, f.n)) for f in fs]
    full = np.concatenate(full, axis=1)
    return (full[0] if np.all(full == full[:1]) else full).astype(np.float32)


def _merge_shared_input(g: Graph, fs: list[FC]) -> None:
    first = fs[0].node
    trans_b = first.op == "Gemm" and first.attrs["transB"]
    ws = []
    for f in fs:
        w = g.const(f.b)
        if f.node.op == "Gemm" and f.node.attrs["transB"] != trans_b:
            w = w.T
        ws.append(w)
    w = np.concatenate(ws, axis=0 if trans_b else 1)
    bias = _merged_bias(g, fs, g.type(fs[0].a).shape[0]) if first.op == "Gemm" else None
    idx, outs = _detach(g, fs)
    ins = [fs[0].a, g.add_const(np.ascontiguousarray(w), hint=f"{first.name}_merged_w")]
    attrs = dict(first.attrs)
    if first.op == "Gemm":
        attrs["beta"] = 1.0
        if bias is not None:
            ins.append(g.add_const(bias, hint=f"{first.name}_merged_b"))
    prod = g.make_node(first.op, ins, attrs, name=g.fresh(f"{first.name}_merged"), index=idx)
    axis = g.type(prod.outputs[0]).rank - 1
    g.make_node("Split", [prod.outputs[0]], {"axis": axis, "split": [f.n for f in fs]}, outputs=outs,
                name=g.fresh(f"{first.name}_split"), index=idx + 1)
    g.toposort()


def _stack_shared_weight(g: Graph, fs: list[FC]) -> None:
    first = fs[0].node
    rows = [g.type(f.a).shape[0] for f in fs]
    extra = list(first.inputs[1:])
    idx, outs = _detach(g, fs)
    cat = g.make_node("Concat", [f.a for f in fs], {"axis": 0}, name=g.fresh(f"{first.name}_stack"), index=idx)
    prod = g.make_node(first.op, [cat.outputs[0], *extra], dict(first.attrs), name=g.fresh(f"{first.name}_stacked"),
                       index=idx + 1)
    g.make_node("Split", [prod.outputs[0]], {"axis": 0, "split": rows}, outputs=outs,
                name=g.fresh(f"{first.name}_unstack"), index=idx + 2)
    g.toposort()


def _stackable_reason(g: Graph, fs: list[FC]) -> str | None:
    for f in fs:
        if g.type(f.a).rank != 2:
            return f"input {f.a!r} of rank {g.type(f.a).rank}: only 2-d inputs stack along rows"
        if f.c is not None and g.type(f.c).rank == 2 and g.type(f.c).shape[0] != 1:
            return f"bias {f.c!r} differs per row"
    reach = _descendants(g, [f.node for f in fs])
    for f in fs:
        if f.a in reach:
            return f"input {f.a!r} of {f.node.name!r} is computed from another candidate's output"
    return None


@graph_pass("merge_fc")
def merge_fc(g: Graph, ctx: PassContext) -> PassResult:
    """Gemm/MatMul sharing an input merged (concatenated weights + Split); thin inputs sharing
    a weight stacked (Concat + one product + Split) - when the target says it pays."""
    res = PassResult()
    grouped: set[str] = set()
    before = {n.name for n in g.nodes}
    for fs in _groups(g, _input_key):
        grouped.update(f.node.name for f in fs)
        pays, why = merge_pays(ctx, [f.n for f in fs], fs[0].k)
        if not pays:
            for f in fs:
                res.decline(f.node.name, f"shares input {fs[0].a!r} with {_names(fs)}, but {why}")
            continue
        res.notes.append(f"merged {_names(fs)} (shared input {fs[0].a!r}): {why}")
        _merge_shared_input(g, fs)
        res.changed = True
    for fs in _groups(g, _weight_key):
        grouped.update(f.node.name for f in fs)
        reason = _stackable_reason(g, fs)
        pays, why = (False, reason) if reason else stack_pays(ctx, [g.type(f.a).shape[0] for f in fs], fs[0])
        if not pays:
            for f in fs:
                res.decline(f.node.name, f"shares weight {fs[0].b!r} with {_names(fs)}, but {why}")
            continue
        res.notes.append(f"stacked {_names(fs)} (shared weight {fs[0].b!r}): {why}")
        _stack_shared_weight(g, fs)
        res.changed = True
    for n in g.nodes:
        if n.name in before and n.name not in grouped and _fc(g, n) is not None:
            res.decline(n.name, "no other Gemm/MatMul with constant weights shares its input or its weight")
    return res
