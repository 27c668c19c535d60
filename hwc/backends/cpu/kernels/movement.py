"""Data movement kernels (any dtype): layout changes, padding, copies, Transpose, Slice,
Concat, Split, Expand, Pad, Gather.

All of them are strided copies in the logical index space: each buffer contributes its
element strides (from its storage layout), the loop runs in the destination's storage
order, and dims that both sides walk contiguously are merged into one vectorized loop.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from hwc.backends.cpu.irb import ELEM, I64
from hwc.backends.cpu.kernels.common import elem_lanes, strided_copy, strided_fill, vector_inner
from hwc.backends.cpu.lowering import CL, cl_perm, logical_strides
from hwc.ir.ops import slice_ranges


def _strides(ctx, name) -> tuple[int, ...]:
    return logical_strides(ctx.type(name), ctx.layout(name))


def _order(ctx, name) -> list[int]:
    t = ctx.type(name)
    return cl_perm(t.rank) if ctx.layout(name) == CL else list(range(t.rank))


def copy_region(ctx, dst: str, src: str, shape, dst_start=None, src_start=None, src_strides=None,
                src_base: int = 0) -> None:
    """dst[dst_start + i] = src[src_start + i] over logical index box `shape`
    (src_strides: the source's logical strides, e.g. permuted for a Transpose)."""
    if any(d == 0 for d in shape):
        return
    r = len(shape)
    ds = _strides(ctx, dst)
    ss = src_strides if src_strides is not None else _strides(ctx, src)
    d0 = sum(a * s for a, s in zip(dst_start or [0] * r, ds))
    s0 = src_base + sum(a * s for a, s in zip(src_start or [0] * r, ss))
    order = _order(ctx, dst)
    ety = ELEM[ctx.type(dst).dtype]
    strided_copy(ctx.kb, ctx.ptr(dst), [ds[p] for p in order], ctx.ptr(src), [ss[p] for p in order],
                 [shape[p] for p in order], ety, d0, s0)


def fill_region(ctx, dst: str, shape, start, value) -> None:
    if any(d == 0 for d in shape):
        return
    ds = _strides(ctx, dst)
    order = _order(ctx, dst)
    ety = ELEM[ctx.type(dst).dtype]
    c = ir.Constant(ety, float(value) if isinstance(ety, (ir.FloatType, ir.DoubleType)) else int(value))
    strided_fill(ctx.kb, ctx.ptr(dst), [ds[p] for p in order], [shape[p] for p in order], c,
                 sum(a * s for a, s in zip(start, ds)))


def emit_relayout(ctx) -> None:
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    copy_region(ctx, dst, src, ctx.type(dst).shape)


def _pad_boxes(ctx, dst: str, begin, end_sizes, inner_counts, value) -> None:
    """Fill what lies outside the copied box [begin, begin + inner_counts) of `dst`."""
    shape = ctx.type(dst).shape
    r = len(shape)
    for ax in range(r):
        lo, cnt = begin[ax], inner_counts[ax]
        if lo > 0:
            box = list(shape)
            box[ax] = lo
            start = [0] * r
            fill_region(ctx, dst, _clip_box(box, start, begin, inner_counts, ax), start, value)
        hi = shape[ax] - lo - cnt
        if hi > 0:
            box = list(shape)
            box[ax] = hi
            start = [0] * r
            start[ax] = lo + cnt
            fill_region(ctx, dst, _clip_box(box, start, begin, inner_counts, ax), start, value)


def _clip_box(box, start, begin, counts, ax):
    """Restrict the axes before `ax` to the copied range, so corners are written once."""
    box = list(box)
    for a in range(ax):
        box[a] = counts[a]
        start[a] = begin[a]
    return box


def emit_padcl(ctx) -> None:
    """Padded channels-last copy of a Conv/pool input (begin/end per spatial axis)."""
    a = ctx.ins.attrs
    dst = ctx.ins.writes[0]
    ps = ctx.type(dst).shape
    nd = len(a["begin"])
    begin = [0, 0] + list(a["begin"])
    counts = list(ps[:2]) + [ps[2 + i] - a["begin"][i] - max(0, a["end"][i]) for i in range(nd)]
    if not a.get("border_only"):  # else the producer stores the interior itself (write_into_pads)
        copy_region(ctx, dst, ctx.ins.reads[0], counts, dst_start=begin)
    _pad_boxes(ctx, dst, begin, None, counts, a["value"])


def emit_copy(ctx) -> None:
    """Identity/Reshape between regions: the same bytes, another buffer."""
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    n = ctx.type(dst).size
    ety = ELEM[ctx.type(dst).dtype]
    strided_copy(ctx.kb, ctx.ptr(dst), [1], ctx.ptr(src), [1], [n], ety)


def emit_transpose(ctx) -> None:
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    perm = ctx.ins.attrs["perm"]
    ss = _strides(ctx, src)
    copy_region(ctx, dst, src, ctx.type(dst).shape, src_strides=[ss[p] for p in perm])


def emit_slice(ctx) -> None:
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    shape = ctx.type(dst).shape
    if any(d == 0 for d in shape):
        return
    ranges = slice_ranges(ctx.ins.attrs)
    ss = _strides(ctx, src)
    start = sum(rg.start * s for rg, s in zip(ranges, ss))
    copy_region(ctx, dst, src, shape, src_strides=[rg.step * s for rg, s in zip(ranges, ss)], src_base=start)


def _full_strides(shape):
    out, s = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        out[i] = s
        s *= shape[i]
    return out


def emit_expand(ctx) -> None:
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    t, out = ctx.type(src), ctx.type(dst)
    ss = (0,) * (out.rank - t.rank) + _strides(ctx, src)
    copy_region(ctx, dst, src, out.shape, src_strides=list(ss))


def emit_concat(ctx) -> None:
    dst = ctx.ins.writes[0]
    ax = ctx.ins.attrs["axis"]
    pos = 0
    for src in ctx.ins.reads:
        shape = ctx.type(src).shape
        start = [0] * len(shape)
        start[ax] = pos
        copy_region(ctx, dst, src, shape, dst_start=start)
        pos += shape[ax]


def emit_split(ctx) -> None:
    src = ctx.ins.reads[0]
    ax = ctx.ins.attrs["axis"]
    pos = 0
    for dst in ctx.ins.writes:
        shape = ctx.type(dst).shape
        start = [0] * len(shape)
        start[ax] = pos
        copy_region(ctx, dst, src, shape, src_start=start)
        pos += shape[ax]


def emit_pad(ctx) -> None:
    a = ctx.ins.attrs
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    xs, ys = ctx.type(src).shape, ctx.type(dst).shape
    r = len(xs)
    p = a["pads"]
    if a["mode"] == "constant":
        crop_lo = [max(0, -p[i]) for i in range(r)]
        counts = [xs[i] - crop_lo[i] - max(0, -p[i + r]) for i in range(r)]
        begin = [max(0, p[i]) for i in range(r)]
        copy_region(ctx, dst, src, counts, dst_start=begin, src_start=crop_lo)
        _pad_boxes(ctx, dst, begin, None, counts, a["value"] if ctx.type(dst).dtype == "float32"
                   else _int_fill(a["value"], ctx.type(dst).dtype))
        return
    # reflect / edge / wrap: a table of source offsets, one per output element
    idx = _pad_index(xs, ys, p, a["mode"])
    _gather_table(ctx, dst, src, idx)


def _int_fill(v, dtype):
    return int(np.array(v).astype(np.dtype(dtype if dtype != "bool" else "bool")))


def _pad_index(xs, ys, p, mode) -> np.ndarray:
    r = len(xs)
    axes = []
    for i in range(r):
        j = np.arange(ys[i]) - p[i]
        n = xs[i]
        if mode == "edge":
            j = np.clip(j, 0, n - 1)
        elif mode == "wrap":
            j = np.mod(j, n)
        else:  # reflect
            if n == 1:
                j = np.zeros_like(j)
            else:
                period = 2 * (n - 1)
                j = np.mod(j, period)
                j = np.where(j >= n, period - j, j)
        axes.append(j)
    full = _full_strides(xs)
    grids = np.meshgrid(*axes, indexing="ij")
    return sum(g * s for g, s in zip(grids, full)).astype(np.int32).reshape(-1)


def _gather_table(ctx, dst: str, src: str, table: np.ndarray) -> None:
    """dst[i] = src[table[i]] for contiguous (logical) dst and src."""
    kb, b = ctx.kb, ctx.b
    ety = ELEM[ctx.type(dst).dtype]
    tp = ctx.weight(table.astype(np.int32))
    sp, dp = ctx.ptr(src), ctx.ptr(dst)
    i32 = ir.IntType(32)

    def body(i, _):
        j = b.sext(kb.load(kb.gep(tp, i, i32), i32), I64)
        kb.store(kb.load(kb.gep(sp, j, ety), ety), kb.gep(dp, i, ety))
    kb.loop(int(table.size), body, name="g")


def emit_gather(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    src, idx_name = ctx.ins.reads[0], ctx.ins.reads[1]
    dst = ctx.ins.writes[0]
    ax = ctx.ins.attrs["axis"]
    xs = ctx.type(src).shape
    n_ax = xs[ax]
    outer, inner = math.prod(xs[:ax]), math.prod(xs[ax + 1:])
    n_idx = ctx.type(idx_name).size
    ety = ELEM[ctx.type(dst).dtype]
    sp, dp = ctx.ptr(src), ctx.ptr(dst)
    const = ctx.const_data(idx_name)
    if const is not None:
        table = np.where(const < 0, const + n_ax, const).astype(np.int64).reshape(-1)
        if (table < 0).any() or (table >= n_ax).any():
            from hwc.errors import UnsupportedError

            raise UnsupportedError(f"Gather node {ctx.ins.name!r}: constant indices outside [-{n_ax}, {n_ax}).")
        ip, ity = ctx.weight(table), I64
    else:
        ip, ity = ctx.ptr(idx_name), ELEM[ctx.type(idx_name).dtype]
    lanes = elem_lanes(kb, ety)

    def body(o, _):
        def per_index(j, _):
            k = kb.load(kb.gep(ip, j, ity), ity)
            k = b.sext(k, I64) if ity.width < 64 else k
            if const is None:  # normalize negatives, clamp to stay inside the buffer
                k = b.select(b.icmp_signed("<", k, kb.i64(0)), b.add(k, kb.i64(n_ax)), k)
                k = b.select(b.icmp_signed("<", k, kb.i64(0)), kb.i64(0), k)
                k = b.select(b.icmp_signed(">", k, kb.i64(n_ax - 1)), kb.i64(n_ax - 1), k)
            s0 = b.add(b.mul(o, kb.i64(n_ax * inner)), b.mul(k, kb.i64(inner)))
            d0 = b.add(b.mul(o, kb.i64(n_idx * inner)), b.mul(j, kb.i64(inner)))
            _copy_run(kb, dp, d0, sp, s0, inner, ety, lanes)
        kb.loop(n_idx, per_index, name="j")
    kb.loop(outer, body, name="o")


def _copy_run(kb, dp, d0, sp, s0, n, ety, lanes):
    def inner(j, w):
        v = kb.load(kb.gep(sp, kb.b.add(s0, j), ety), ety, w)
        kb.store(v, kb.gep(dp, kb.b.add(d0, j), ety))
    vector_inner(kb, n, lanes, inner)


def emit_wpack(ctx) -> None:
    """Run-time conv weights [M, Cg, kh, kw] -> [G, kh, kw, Cg, M/G] (the GEMM's k order)."""
    src, dst = ctx.ins.reads[0], ctx.ins.writes[0]
    G, kh, kw, Cg, Mg = ctx.type(dst).shape
    ss = [Mg * Cg * kh * kw, kw, 1, kh * kw, Cg * kh * kw]
    shape = [G, kh, kw, Cg, Mg]
    strided_copy(ctx.kb, ctx.ptr(dst), _full_strides(shape), ctx.ptr(src), ss, shape, ELEM[ctx.type(dst).dtype])


MOVE_EMITTERS = {
    "wpack": emit_wpack,
    "relayout": emit_relayout,
    "padcl": emit_padcl,
    "identity": emit_copy,
    "reshape": emit_copy,
    "transpose": emit_transpose,
    "slice": emit_slice,
    "expand": emit_expand,
    "concat": emit_concat,
    "split": emit_split,
    "pad": emit_pad,
    "gather": emit_gather,
}
