"""The int8 kernels other than QConv/QGemm (gemm.py) and depthwise (dwconv.py): QAdd,
QRequant, QLut, Quantize/Dequantize (and ONNX QuantizeLinear/DequantizeLinear), QAvgPool,
QGlobalAvgPool.

Integer semantics are exactly hwc/quant/arith.py (int64 products, rounding half toward
+infinity by adding 2**(shift-1) before an arithmetic shift, saturation), so the results
are bit-identical to the int8 reference. Quantize divides in float32 and rounds half to
even (numpy's rint) without libm: adding and subtracting 1.5 * 2**23 rounds a float32 of
magnitude below 2**22 to the nearest even integer; anything larger saturates anyway.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from hwc.backends.cpu.irb import ELEM, F32, I8, I32, I64, lanes_of, vec
from hwc.backends.cpu.kernels.common import collapse, contiguous_strides, load_strided, nest, vector_inner
from hwc.backends.cpu.kernels.gemm import clamp_to_int8
from hwc.backends.cpu.lowering import physical_shape


def _wide(kb, v, t=I64):
    return kb.b.sext(v, vec(t, lanes_of(v)))


def _rshift_round(kb, p, shift):
    """(p + 2**(shift-1)) >> shift on int64 values (`shift` a Python int or a value)."""
    b = kb.b
    if isinstance(shift, int):
        return b.ashr(b.add(p, kb.const(p.type, 1 << (shift - 1))), kb.const(p.type, shift))
    one = kb.const(p.type, 1)
    return b.ashr(b.add(p, b.shl(one, b.sub(shift, one))), shift)


def ew_loop(ctx, out: str, sources: list, compute, lanes: int | None = None) -> None:
    """out[i] = compute(values, width) over the output's storage order; sources are
    (ptr, strides along the output's storage dims, element type)."""
    kb, b = ctx.kb, ctx.b
    ot, lay = ctx.type(out), ctx.layout(out)
    shape = physical_shape(ot, lay)
    if math.prod(shape) == 0:
        return
    oty = ELEM[ot.dtype]
    dims = collapse(shape, [contiguous_strides(shape)] + [s[1] for s in sources])
    outer, (n, inner) = dims[:-1], dims[-1]
    if lanes is None:
        lanes = ctx.lanes
    if not all(s in (0, 1) for s in inner):
        lanes = 1
    optr = ctx.ptr(out)

    def body(offs):
        def vec_(j, w):
            vals = [load_strided(kb, s[0], b.add(offs[k + 1], b.mul(j, kb.i64(inner[k + 1]))), inner[k + 1], w, s[2])
                    for k, s in enumerate(sources)]
            kb.store(compute(vals, w), kb.gep(optr, b.add(offs[0], j), oty))
        vector_inner(kb, n, lanes, vec_)
    nest(kb, outer, [0] * (1 + len(sources)), body)


def _act_source(ctx, name, out):
    return (ctx.ptr(name), ctx.operand_strides(name, ctx.type(out), ctx.layout(out)), ELEM[ctx.type(name).dtype])


def _param_source(ctx, data, out, axis: int, dtype, name: str | None = None):
    """A per-tensor or per-`axis` parameter array as a source broadcast to the output
    (`data` None: the run-time tensor `name`)."""
    ot = ctx.type(out)
    if data is None:
        t = ctx.type(name)
        strides = [0] * ot.rank
        if t.size > 1:
            strides[axis] = 1
        from hwc.backends.cpu.lowering import CL, cl_perm

        perm = cl_perm(ot.rank) if ctx.layout(out) == CL else list(range(ot.rank))
        return (ctx.ptr(name), [strides[p] for p in perm], ELEM[t.dtype])
    d = np.asarray(data).reshape(-1)
    shape = [1] * ot.rank
    if d.size > 1:
        shape[axis] = d.size
    ptr, st = ctx.const_operand(d.reshape(shape), ot, ctx.layout(out), dtype=dtype)
    return (ptr, st, ELEM[np.dtype(dtype).name])


def emit_qadd(ctx) -> None:
    a = ctx.ins.attrs
    out = ctx.ins.writes[0]
    x, y = ctx.ins.reads[:2]

    def compute(vals, w):
        b = ctx.b
        t = vec(I64, w)
        pa = b.mul(b.sub(_wide(ctx.kb, vals[0]), ctx.kb.const(t, a["z_a"])), ctx.kb.const(t, a["mult_a"]))
        pb = b.mul(b.sub(_wide(ctx.kb, vals[1]), ctx.kb.const(t, a["z_b"])), ctx.kb.const(t, a["mult_b"]))
        r = _rshift_round(ctx.kb, b.add(pa, pb), a["shift"])
        return clamp_to_int8(ctx.kb, b.add(r, ctx.kb.const(t, a["z_out"])), a["lo"], a["hi"])
    ew_loop(ctx, out, [_act_source(ctx, x, out), _act_source(ctx, y, out)], compute)


def emit_qrequant(ctx) -> None:
    a = ctx.ins.attrs
    out = ctx.ins.writes[0]
    x = ctx.ins.reads[0]
    mult, shift = (ctx.const_data(n).astype(np.int64) for n in ctx.ins.reads[1:3])
    srcs = [_act_source(ctx, x, out), _param_source(ctx, mult, out, 1, np.int64),
            _param_source(ctx, shift, out, 1, np.int64)]

    def compute(vals, w):
        b, kb = ctx.b, ctx.kb
        t = vec(I64, w)
        p = b.mul(b.sub(_wide(kb, vals[0]), kb.const(t, a["z_in"])), vals[1])
        r = _rshift_round(kb, p, vals[2])
        return clamp_to_int8(kb, b.add(r, kb.const(t, a["z_out"])), a["lo"], a["hi"])
    ew_loop(ctx, out, srcs, compute)


def emit_qlut(ctx) -> None:
    out = ctx.ins.writes[0]
    x = ctx.ins.reads[0]
    table = ctx.weight(np.asarray(ctx.const_data(ctx.ins.reads[1]), np.int8))

    def compute(vals, w):
        b, kb = ctx.b, ctx.kb
        idx = b.add(b.sext(vals[0], I64), kb.i64(128))
        return kb.load(kb.gep(table, idx, I8), I8)
    ew_loop(ctx, out, [_act_source(ctx, x, out)], compute, lanes=1)


def round_half_even_f32(kb, v):
    b = kb.b
    magic = kb.const(v.type, 12582912.0)  # 1.5 * 2**23
    r = b.fsub(b.fadd(v, magic), magic)
    big = b.fcmp_ordered(">=", _fabs(kb, v), kb.const(v.type, 4194304.0))
    return b.select(big, v, r)


def _fabs(kb, v):
    from hwc.backends.cpu.kernels.ewmath import fabs

    return fabs(kb, v)


def _quantize(kb, x, scale, zp, lo, hi):
    """saturate(rint(x / scale) + zp) as int32 (NaN -> lo); scale, zp: values or numbers."""
    b = kb.b
    s = kb.const(x.type, float(np.float32(scale))) if not isinstance(scale, ir.Value) else scale
    q = round_half_even_f32(kb, b.fdiv(x, s))
    z = kb.const(x.type, float(zp)) if not isinstance(zp, ir.Value) else b.sitofp(zp, x.type)
    q = b.fadd(q, z)
    q = b.select(b.fcmp_ordered("<", q, kb.const(x.type, lo)), kb.const(x.type, lo), q)
    q = b.select(b.fcmp_ordered(">", q, kb.const(x.type, hi)), kb.const(x.type, hi), q)
    q = b.select(b.fcmp_unordered("uno", q, q), kb.const(x.type, lo), q)
    return b.fptosi(q, vec(I32, lanes_of(x)))


def emit_quantize(ctx) -> None:
    a = ctx.ins.attrs
    out = ctx.ins.writes[0]
    x = ctx.ins.reads[0]

    def compute(vals, w):
        return ctx.b.trunc(_quantize(ctx.kb, vals[0], a["scale"], a["zero_point"], -128, 127), vec(I8, w))
    ew_loop(ctx, out, [_act_source(ctx, x, out)], compute)


def emit_dequantize(ctx) -> None:
    a = ctx.ins.attrs
    out = ctx.ins.writes[0]
    x = ctx.ins.reads[0]

    def compute(vals, w):
        b, kb = ctx.b, ctx.kb
        d = b.sub(b.sext(vals[0], vec(I32, w)), kb.const(vec(I32, w), a["zero_point"]))
        return b.fmul(b.sitofp(d, vec(F32, w)), kb.const(vec(F32, w), float(np.float32(a["scale"]))))
    ew_loop(ctx, out, [_act_source(ctx, x, out)], compute)


def emit_quantizelinear(ctx) -> None:
    """ONNX QuantizeLinear: per-tensor or per-axis scale and zero point; int8 or uint8 output."""
    ins = ctx.ins
    out = ins.writes[0]
    x = ins.reads[0]
    sname, zname = ins.reads[1], ins.reads[2]
    scale, zp = ctx.const_data(sname), ctx.const_data(zname)
    odt = ctx.type(out).dtype
    lo, hi = (0, 255) if odt == "uint8" else (-128, 127)
    ax = ins.attrs["axis"]
    srcs = [_act_source(ctx, x, out),
            _param_source(ctx, None if scale is None else scale.astype(np.float32), out, ax, np.float32, sname),
            _param_source(ctx, None if zp is None else zp.astype(np.int32), out, ax, np.int32, zname)]
    zdt = ctx.type(zname).dtype

    def compute(vals, w):
        b = ctx.b
        z = vals[2]
        z = b.zext(z, vec(I32, w)) if zdt == "uint8" else (b.sext(z, vec(I32, w)) if zdt == "int8" else z)
        q = _quantize(ctx.kb, vals[0], vals[1], z, lo, hi)
        return ctx.b.trunc(q, vec(I8, w))
    ew_loop(ctx, out, srcs, compute)


def emit_dequantizelinear(ctx) -> None:
    ins = ctx.ins
    out = ins.writes[0]
    x = ins.reads[0]
    sname, zname = ins.reads[1], ins.reads[2]
    scale, zp = ctx.const_data(sname), ctx.const_data(zname)
    xdt, zdt = ctx.type(x).dtype, ctx.type(zname).dtype
    ax = ins.attrs["axis"]
    srcs = [_act_source(ctx, x, out),
            _param_source(ctx, None if scale is None else scale.astype(np.float32), out, ax, np.float32, sname),
            _param_source(ctx, None if zp is None else zp.astype(np.int64), out, ax, np.int64, zname)]

    def compute(vals, w):
        b = ctx.b
        t = vec(I64, w)
        xv = b.zext(vals[0], t) if xdt == "uint8" else b.sext(vals[0], t)
        z = vals[2] if zp is not None else (b.zext(vals[2], t) if zdt == "uint8" else b.sext(vals[2], t))
        return b.fmul(b.sitofp(b.sub(xv, z), vec(F32, w)), vals[1])
    ew_loop(ctx, out, srcs, compute)


def _requant_scalar(ctx, acc, rq):
    """Requantize int32 accumulators with one multiplier and shift (pooling)."""
    b, kb = ctx.b, ctx.kb
    t = vec(I64, lanes_of(acc))
    p = b.mul(b.sext(acc, t), kb.const(t, rq["mult"]))
    r = _rshift_round(kb, p, rq["shift"])
    return clamp_to_int8(kb, b.add(r, kb.const(t, rq["z_out"])), rq["lo"], rq["hi"])


def emit_qavgpool(ctx) -> None:
    """Sum of (x - z_in) over each window of the padded (z_in-filled) input, requantized."""
    kb, b = ctx.kb, ctx.b
    a = ctx.ins.attrs
    x, out = ctx.ins.reads[0], ctx.ins.writes[0]
    xt, ot = ctx.type(x), ctx.type(out)
    nd = xt.rank - 2
    N, C = xt.shape[:2]
    if nd == 1:
        Hp, Wp, OH, OW = 1, xt.shape[2], 1, ot.shape[2]
        kh, kw, sh, sw, dh, dw = 1, a["kernel_shape"][0], 1, a["strides"][0], 1, a["dilations"][0]
    else:
        (Hp, Wp), (OH, OW) = xt.shape[2:], ot.shape[2:]
        (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
    rq = _rq(ctx, a)
    T = kh * kw
    xp, op = ctx.ptr(x), ctx.ptr(out)
    lanes = ctx.lanes

    def pixel(n, oh, ow):
        x0 = b.add(b.add(b.mul(n, kb.i64(Hp * Wp * C)), b.mul(oh, kb.i64(sh * Wp * C))), b.mul(ow, kb.i64(sw * C)))
        o0 = b.add(b.add(b.mul(n, kb.i64(OH * OW * C)), b.mul(oh, kb.i64(OW * C))), b.mul(ow, kb.i64(C)))

        def vec_(c, w):
            def ibody(i, cur):
                def jbody(j, cur2):
                    off = b.add(b.add(x0, c), b.add(b.mul(i, kb.i64(dh * Wp * C)), b.mul(j, kb.i64(dw * C))))
                    v = b.sext(kb.load(kb.gep(xp, off, I8), I8, w), vec(I32, w))
                    return [b.add(cur2[0], v)]
                return kb.loop(kw, jbody, cur, name="tj")
            acc = kb.loop(kh, ibody, [kb.const(vec(I32, w), -T * a["z_in"])], name="ti")[0]
            kb.store(_requant_scalar(ctx, acc, rq), kb.gep(op, b.add(o0, c), I8))
        vector_inner(kb, C, lanes, vec_)
    kb.loop(N, lambda n, _: kb.loop(OH, lambda oh, __: kb.loop(OW, lambda ow, ___: pixel(n, oh, ow), name="ow"),
                                    name="oh"), name="n")


def _rq(ctx, a):
    mult = int(np.asarray(ctx.const_data(ctx.ins.reads[1])).reshape(-1)[0])
    shift = int(np.asarray(ctx.const_data(ctx.ins.reads[2])).reshape(-1)[0])
    return {"mult": mult, "shift": shift, "z_out": a["z_out"], "lo": a["lo"], "hi": a["hi"]}


def emit_qgap(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    a = ctx.ins.attrs
    x, out = ctx.ins.reads[0], ctx.ins.writes[0]
    xt = ctx.type(x)
    N, C = xt.shape[:2]
    P = math.prod(xt.shape[2:])
    rq = _rq(ctx, a)
    xp, op = ctx.ptr(x), ctx.ptr(out)

    def per_n(n, _):
        def vec_(c, w):
            base = b.add(b.mul(n, kb.i64(P * C)), c)

            def pbody(p, cur):
                v = kb.load(kb.gep(xp, b.add(base, b.mul(p, kb.i64(C))), I8), I8, w)
                return [b.add(cur[0], b.sext(v, vec(I32, w)))]
            acc = kb.loop(P, pbody, [kb.const(vec(I32, w), -P * a["z_in"])], name="px")[0]
            kb.store(_requant_scalar(ctx, acc, rq), kb.gep(op, b.add(b.mul(n, kb.i64(C)), c), I8))
        vector_inner(kb, C, ctx.lanes, vec_)
    kb.loop(N, per_n, name="n")


def emit_cast(ctx) -> None:
    """Cast between float32, int8, uint8, int32, int64 and bool, as numpy's astype does for
    values that fit (float to int truncates toward zero; out of range saturates here)."""
    x, out = ctx.ins.reads[0], ctx.ins.writes[0]
    src, dst = ctx.type(x).dtype, ctx.type(out).dtype
    unsigned = ("uint8", "bool")

    def compute(vals, w):
        b, kb = ctx.b, ctx.kb
        v = vals[0]
        to = vec(ELEM[dst], w)
        if dst == "bool":
            nz = b.fcmp_unordered("!=", v, kb.const(v.type, 0.0)) if src == "float32" else \
                b.icmp_unsigned("!=", v, kb.const(v.type, 0))
            return b.zext(nz, to)
        if src == dst:
            return v
        if dst == "float32":
            return b.uitofp(v, to) if src in unsigned else b.sitofp(v, to)
        if src == "float32":
            wide = vec(I64 if dst == "int64" else I32, w)
            i = kb.intrinsic("fptosi.sat", [v], ret=wide, types=[wide, v.type])
            return i if i.type == to else b.trunc(i, to)
        sw = (v.type.element if hasattr(v.type, "element") else v.type).width
        dw = (to.element if hasattr(to, "element") else to).width
        if dw < sw:
            return b.trunc(v, to)
        if dw == sw:
            return v
        return b.zext(v, to) if src in unsigned else b.sext(v, to)
    ew_loop(ctx, out, [_act_source(ctx, x, out)], compute)


INT8_EMITTERS = {
    "cast": emit_cast,
    "qadd": emit_qadd,
    "qrequant": emit_qrequant,
    "qlut": emit_qlut,
    "quantize": emit_quantize,
    "dequantize": emit_dequantize,
    "quantizelinear": emit_quantizelinear,
    "dequantizelinear": emit_dequantizelinear,
    "qavgpool": emit_qavgpool,
    "qglobalavgpool": emit_qgap,
}
