"""Softmax, LogSoftmax and the Reduce ops (logical layout).

Softmax follows the reference's numbers: max in float32, exponentials and their sum in
float64 (the polynomial exp of ewmath), one rounding at the end. Mean and Sum
accumulate in float64 like the reference; Max and Min in the input type. Loops run
over the kept dims outside and the reduced dims inside; the innermost kept dim is
vectorized when the input walks it contiguously.
"""

from __future__ import annotations

import math

import numpy as np

from hwc.backends.cpu.irb import ELEM, F32, F64, vec
from hwc.backends.cpu.kernels.common import collapse, contiguous_strides, nest, vector_inner
from hwc.backends.cpu.kernels.ewmath import exp64, log64, maximum, minimum, to32, to64


def emit_softmax(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    x, out = ctx.ins.reads[0], ctx.ins.writes[0]
    shape = ctx.type(x).shape
    ax = ctx.ins.attrs["axis"]
    outer, A, inner = math.prod(shape[:ax]), shape[ax], math.prod(shape[ax + 1:])
    if A == 0 or outer * inner == 0:
        return
    xp, op = ctx.ptr(x), ctx.ptr(out)
    log = ctx.ins.op == "LogSoftmax"
    lanes = ctx.lanes if inner > 1 else 1

    def per(o, _):
        def vec_(i, w):
            base = b.add(b.mul(o, kb.i64(A * inner)), i)

            def at(k):
                return b.add(base, b.mul(k, kb.i64(inner)))
            first = kb.load(kb.gep(xp, base), F32, w)
            m = kb.loop(A - 1, lambda k, c: [maximum(kb, c[0], kb.load(kb.gep(xp, at(b.add(k, kb.i64(1)))), F32, w))],
                        [first], name="mx")[0] if A > 1 else first
            m64 = to64(kb, m)

            def sbody(k, c):
                e = exp64(kb, b.fsub(to64(kb, kb.load(kb.gep(xp, at(k)), F32, w)), m64))
                return [b.fadd(c[0], e)]
            s = kb.loop(A, sbody, [kb.const(vec(F64, w), 0.0)], name="sum")[0]
            ls = log64(kb, s) if log else None

            def wbody(k, _):
                d = b.fsub(to64(kb, kb.load(kb.gep(xp, at(k)), F32, w)), m64)
                y = b.fsub(d, ls) if log else b.fdiv(exp64(kb, d), s)
                kb.store(to32(kb, y), kb.gep(op, at(k)))
            kb.loop(A, wbody, name="wr")
        vector_inner(kb, inner, lanes, vec_)
    kb.loop(outer, per, name="o")


def emit_reduce(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    x, out = ctx.ins.reads[0], ctx.ins.writes[0]
    xt = ctx.type(x)
    axes = set(ctx.ins.attrs["axes"])
    op = ctx.ins.op
    xs = contiguous_strides(xt.shape)
    kept = [i for i in range(xt.rank) if i not in axes]
    red = [i for i in range(xt.rank) if i in axes]
    kshape = [xt.shape[i] for i in kept]
    os_ = contiguous_strides(kshape)
    kdims = collapse(kshape, [os_, [xs[i] for i in kept]])
    rdims = collapse([xt.shape[i] for i in red], [[xs[i] for i in red]])
    count = math.prod(xt.shape[i] for i in red)
    if math.prod(kshape) == 0:
        return
    xp, op_ = ctx.ptr(x), ctx.ptr(out)
    wide = op in ("ReduceMean", "ReduceSum")
    integer = xt.dtype != "float32"
    et = F64 if wide else (ELEM[xt.dtype] if integer else F32)
    if integer:  # Max/Min of integers or booleans
        info = np.iinfo(np.uint8 if xt.dtype == "bool" else xt.dtype)
        init = info.min if op == "ReduceMax" else info.max
        unsigned = xt.dtype in ("bool", "uint8")
        lt = (lambda p, q: b.icmp_unsigned("<", p, q)) if unsigned else (lambda p, q: b.icmp_signed("<", p, q))
    else:
        init = {"ReduceSum": 0.0, "ReduceMean": 0.0, "ReduceMax": -math.inf, "ReduceMin": math.inf}[op]
    outer, (n, (o_in, x_in)) = kdims[:-1], kdims[-1]
    lanes = ctx.lanes if x_in == 1 and o_in == 1 else 1

    def body(offs):
        o0, x0 = offs

        def vec_(j, w):
            acc0 = kb.const(vec(et, w), init)
            xb = b.add(x0, b.mul(j, kb.i64(x_in)))

            def step(roffs):
                v = _load(kb, xp, b.add(xb, roffs[0]), w, x_in, et if integer else F32)
                v = to64(kb, v) if wide else v
                cur = state[0]
                if integer:
                    state[0] = b.select(lt(cur, v), v, cur) if op == "ReduceMax" else b.select(lt(v, cur), v, cur)
                elif op in ("ReduceSum", "ReduceMean"):
                    state[0] = b.fadd(cur, v)
                elif op == "ReduceMax":
                    state[0] = maximum(kb, cur, v)
                else:
                    state[0] = minimum(kb, cur, v)
            state = [acc0]
            if count:
                _carry_nest(kb, rdims, state, step)
            y = state[0]
            if op == "ReduceMean":
                y = b.fdiv(y, kb.const(y.type, float(count) if count else 0.0))
            y = to32(kb, y) if wide else y
            _store(kb, y, op_, b.add(o0, b.mul(j, kb.i64(o_in))), o_in, et if integer else F32)
        vector_inner(kb, n, lanes, vec_)
    nest(kb, outer, [0, 0], body)


def _load(kb, ptr, off, w, stride, ety=F32):
    from hwc.backends.cpu.kernels.common import load_strided

    return load_strided(kb, ptr, off, stride, w, ety)


def _store(kb, v, ptr, off, stride, ety=F32):
    from hwc.backends.cpu.kernels.common import store_strided

    store_strided(kb, v, ptr, off, stride, ety)


def _carry_nest(kb, dims, state, step):
    """Nested loops over reduction dims carrying state[0] through phi nodes."""
    def rec(level, off, cur):
        if level == len(dims):
            state[0] = cur
            step([off])
            return state[0]
        cnt, (s,) = dims[level]

        def body(i, c):
            return [rec(level + 1, kb.b.add(off, kb.b.mul(i, kb.i64(s))), c[0])]
        return kb.loop(cnt, body, [cur], name=f"red{level}")[0]
    state[0] = rec(0, kb.i64(0), state[0])

