"""Pooling on channels-last tensors, vectorized along channels.

MaxPool/AveragePool read a padded copy (padding -inf for max, 0 for average) so windows
need no bounds checks; an average divides by the count of the window's cells that count
(count_include_pad decides about declared padding; ceil_mode overhang never counts),
a constant when every window agrees, else a per-position table computed here.
Global pooling sums (or maxes) every pixel of a channel vector.
"""

from __future__ import annotations

import math

import numpy as np

from hwc.backends.cpu.irb import ELEM, F32
from hwc.backends.cpu.kernels.common import elem_lanes, vector_inner
from hwc.backends.cpu.kernels.ewmath import maximum


def _counts(in_sp, out_sp, a, ks) -> np.ndarray:
    """Cells of every window that count toward an average, [OH, OW]."""
    nd = len(ks)
    masks = []
    for i in range(nd):
        lo, hi = -a["pads"][i], in_sp[i] + a["pads"][nd + i]
        if not a["count_include_pad"]:
            lo, hi = 0, in_sp[i]
        cnt = []
        for o in range(out_sp[i]):
            taps = [o * a["strides"][i] - a["pads"][i] + t * a["dilations"][i] for t in range(ks[i])]
            cnt.append(sum(lo <= p < hi for p in taps))
        masks.append(np.array(cnt, np.float64))
    out = masks[0]
    for m in masks[1:]:
        out = np.multiply.outer(out, m)
    return out


def emit_pool(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    ins = ctx.ins
    a = ins.attrs
    x, out = ins.reads[0], ctx.output()
    xt, ot = ctx.type(x), ctx.type(out)
    is_max = ins.op in ("MaxPool", "GlobalMaxPool")   # (an integer GlobalMaxPool is one window)
    nd = xt.rank - 2
    N, C = xt.shape[:2]
    if nd == 1:
        Hp, Wp, OH, OW = 1, xt.shape[2], 1, ot.shape[2]
        kh, kw, sh, sw, dh, dw = 1, a["kernel_shape"][0], 1, a["strides"][0], 1, a["dilations"][0]
    else:
        (Hp, Wp), (OH, OW) = xt.shape[2:], ot.shape[2:]
        (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
    ety = ELEM[xt.dtype]
    lanes = elem_lanes(kb, ety)
    xp = ctx.ptr(x)
    op, ost = ctx.out_view(out)
    o_n, o_h, o_w = (ost[0], ost[2], ost[3]) if nd == 2 else (ost[0], 0, ost[2])
    recip = None
    if not is_max:
        orig_in = ctx.type(ins.node.inputs[0]).shape[2:]
        cnt = _counts(orig_in if nd == 2 else (1,) + tuple(orig_in), (OH, OW), _attrs2d(a, nd), (kh, kw))
        if np.all(cnt == cnt.flat[0]):
            recip = ("value", float(cnt.flat[0]))
        else:
            recip = ("table", ctx.weight(cnt.astype(np.float32).reshape(-1)))
    taps = [(i, j) for i in range(kh) for j in range(kw)]

    def pixel(n, oh, ow):
        x0 = b.add(b.add(b.mul(n, kb.i64(Hp * Wp * C)), b.mul(oh, kb.i64(sh * Wp * C))), b.mul(ow, kb.i64(sw * C)))
        o0 = b.add(b.add(b.mul(n, kb.i64(o_n)), b.mul(oh, kb.i64(o_h))), b.mul(ow, kb.i64(o_w)))

        def vec_(c, w):
            def tap_val(off):
                return kb.load(kb.gep(xp, b.add(b.add(x0, c), off), ety), ety, w)

            def comb(acc, v):
                if is_max:
                    if ety == F32:
                        return maximum(kb, acc, v)
                    if xt.dtype == "uint8":
                        return b.select(b.icmp_unsigned(">", v, acc), v, acc)
                    return b.select(b.icmp_signed(">", v, acc), v, acc)
                return b.fadd(acc, v)
            if len(taps) <= 16:
                acc = None
                for i, j in taps:
                    v = tap_val(kb.i64((i * dh * Wp + j * dw) * C))
                    acc = v if acc is None else comb(acc, v)
            else:
                acc = tap_val(kb.i64(0))

                def ibody(i, cur):
                    def jbody(j, cur2):
                        first = b.and_(b.icmp_unsigned("==", i, kb.i64(0)), b.icmp_unsigned("==", j, kb.i64(0)))
                        off = b.add(b.mul(i, kb.i64(dh * Wp * C)), b.mul(j, kb.i64(dw * C)))
                        v = tap_val(off)
                        return [b.select(first, cur2[0], comb(cur2[0], v))]
                    return kb.loop(kw, jbody, cur, name="tj")
                acc = kb.loop(kh, ibody, [acc], name="ti")[0]
            if not is_max:
                if recip[0] == "value":
                    acc = b.fdiv(acc, kb.const(acc.type, recip[1]))
                else:
                    d = kb.load(kb.gep(recip[1], b.add(b.mul(oh, kb.i64(OW)), ow)), F32)
                    acc = b.fdiv(acc, kb.splat(d, w))
            kb.store(acc, kb.gep(op, b.add(o0, c), ety))
        vector_inner(kb, C, lanes, vec_)

    kb.loop(N, lambda n, _: kb.loop(OH, lambda oh, __: kb.loop(OW, lambda ow, ___: pixel(n, oh, ow), name="ow"),
                                    name="oh"), name="n")


def _attrs2d(a, nd):
    if nd == 2:
        return a
    return {"pads": [0, a["pads"][0], 0, a["pads"][1]], "strides": [1, a["strides"][0]],
            "dilations": [1, a["dilations"][0]], "count_include_pad": a.get("count_include_pad", 0)}


def emit_gpool(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    x, out = ctx.ins.reads[0], ctx.output()
    xt = ctx.type(x)
    N, C = xt.shape[:2]
    P = math.prod(xt.shape[2:])
    is_max = ctx.ins.op == "GlobalMaxPool"
    xp, op = ctx.ptr(x), ctx.ptr(out)
    lanes = ctx.lanes
    CB = 4

    def per_n(n, _):
        x0 = b.mul(n, kb.i64(P * C))
        o0 = b.mul(n, kb.i64(C))

        def block(c0, widths):
            init = [kb.load(kb.gep(xp, b.add(x0, b.add(c0, kb.i64(j * lanes)))), F32, w) for j, w in enumerate(widths)]

            def pbody(p, acc):
                base = b.add(x0, b.add(c0, b.mul(b.add(p, kb.i64(1)), kb.i64(C))))
                outv = []
                for j, w in enumerate(widths):
                    v = kb.load(kb.gep(xp, b.add(base, kb.i64(j * lanes))), F32, w)
                    outv.append(maximum(kb, acc[j], v) if is_max else b.fadd(acc[j], v))
                return outv
            acc = kb.loop(P - 1, pbody, init, name="px") if P > 1 else init
            for j, v in enumerate(acc):
                if not is_max:
                    v = b.fdiv(v, kb.const(v.type, float(P)))
                kb.store(v, kb.gep(op, b.add(o0, b.add(c0, kb.i64(j * lanes)))))
        full, tail = divmod(C, CB * lanes)
        if full:
            kb.loop(full, lambda ci, _: block(b.mul(ci, kb.i64(CB * lanes)), [lanes] * CB), name="cb")
        if tail:
            widths = [lanes] * (tail // lanes) + ([tail % lanes] if tail % lanes else [])
            block(kb.i64(full * CB * lanes), widths)
    kb.loop(N, per_n, name="n")
