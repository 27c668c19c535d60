"""Depthwise convolution (group == channels): its own kernel, vectorized along channels.

Channels-last makes every tap a contiguous vector of channels, so for a block of MR
output pixels x CB channel vectors the kernel loads, per tap, CB weight vectors and
MR*CB input vectors and does MR*CB FMAs, with the accumulators in registers across all
kh*kw taps (unrolled: the window is a constant). Strides and dilations only change
addresses. The epilogue (bias, folded BatchNorm, activation, ...) is the same program
as the GEMM kernels'.
"""

from __future__ import annotations

import math

import numpy as np

from hwc.backends.cpu.irb import F32, I8, I32, vec
from hwc.backends.cpu.kernels.common import eval_program, load_strided


def _widths(cols: int, lanes: int) -> list[int]:
    return [lanes] * (cols // lanes) + ([cols % lanes] if cols % lanes else [])


def emit_depthwise_int8(ctx, x, out, w, bias, in_shape, out_sp, ks, st, dl, rq) -> None:
    """The int8 variant: int32 accumulators (z_in folded into the bias), requantized per channel."""
    emit_depthwise(ctx, x, out, w, bias, in_shape, out_sp, ks, st, dl, None, [None], rq=rq)


def emit_depthwise(ctx, x, out, w, bias, in_shape, out_sp, ks, st, dl, program, srcs, rq=None) -> None:
    kb, b = ctx.kb, ctx.b
    int8 = rq is not None
    at, et = (I32, I8) if int8 else (F32, F32)
    N, C, Hp, Wp = in_shape
    OH, OW = out_sp
    kh, kw = ks
    lanes = ctx.lanes
    regs = ctx.target.vector_registers
    nv = math.ceil(C / lanes)
    # registers: MR*CB accumulators + kw*CB weights of a kernel row + CB input vectors
    best = None
    for cb in range(1, min(nv, 4) + 1):
        mr = max(1, min(OW, (regs - 2) // cb - kw - 1, 8))
        if best is None or mr * cb > best[0] * best[1] or (mr * cb == best[0] * best[1] and cb > best[1]):
            best = (mr, cb)
    MR, CB = best
    NRc = CB * lanes
    wp = ctx.weight(np.ascontiguousarray(w.reshape(C, kh * kw).T, np.int8 if int8 else np.float32))  # [taps][C]
    bp = ctx.weight(bias.astype(np.int32 if int8 else np.float32))
    xp = ctx.ptr(x)
    op, ost = ctx.out_view(out)
    o_pix = ost[3] if len(ost) == 4 else ost[2]  # out stride of one pixel (C, or the padded row's)
    o_n, o_h = ost[0], (ost[2] if len(ost) == 4 else 0)
    if int8:
        from hwc.backends.cpu.kernels.gemm import requant_ptrs, requantize

        rq_ptrs = requant_ptrs(ctx, rq)
    else:
        used = {a for i in program.instrs for a in i.args if isinstance(a, int)} | {program.result}

    def ld(ptr, off, t, wd):
        v = kb.load(kb.gep(ptr, off, t), t, wd)
        return b.sext(v, vec(I32, wd)) if int8 else v

    def micro(x_off, o, c0, mr, widths):
        res_off, o_off = o
        accs = []
        for _ in range(mr):
            for j, wd in enumerate(widths):
                accs.append(kb.load(kb.gep(bp, b.add(c0, kb.i64(j * lanes)), at), at, wd))
        for i in range(kh):
            wv = [[ld(wp, b.add(c0, kb.i64((i * kw + jj) * C + j * lanes)), et, wd) for j, wd in enumerate(widths)]
                  for jj in range(kw)]
            # each input column of this kernel row is loaded once and used by every output it reaches
            uses: dict[int, list[tuple[int, int]]] = {}
            for r in range(mr):
                for jj in range(kw):
                    uses.setdefault(r * st[1] + jj * dl[1], []).append((r, jj))
            for pos in sorted(uses):
                base = (i * dl[0] * Wp + pos) * C
                xv = [ld(xp, b.add(x_off, kb.i64(base + j * lanes)), et, wd) for j, wd in enumerate(widths)]
                for r, jj in uses[pos]:
                    for j in range(len(widths)):
                        k = r * len(widths) + j
                        accs[k] = b.add(accs[k], b.mul(xv[j], wv[jj][j])) if int8 else kb.fma(xv[j], wv[jj][j],
                                                                                                  accs[k])
        for r in range(mr):
            for j, wd in enumerate(widths):
                off = b.add(o_off, kb.i64(r * o_pix + j * lanes))
                roff = b.add(res_off, kb.i64(r * C + j * lanes))
                if int8:
                    y = requantize(kb, accs[r * len(widths) + j], rq_ptrs, b.add(c0, kb.i64(j * lanes)), rq)
                    kb.store(y, kb.gep(op, off, I8))
                    continue
                vals = []
                for idx, src in enumerate(srcs):
                    if idx == 0:
                        vals.append(accs[r * len(widths) + j])
                    elif idx not in used or src is None:
                        vals.append(None)
                    elif src[0] == "value":
                        vals.append(kb.const(vec(F32, wd), src[1]))
                    elif src[0] == "same":
                        vals.append(load_strided(kb, src[1], roff, 1, wd, F32))
                    elif src[0] == "col":
                        vals.append(kb.load(kb.gep(src[1], b.add(c0, kb.i64(j * lanes))), F32, wd))
                    else:
                        vals.append(kb.splat(kb.load(src[1], F32), wd))
                kb.store(eval_program(kb, program, vals), kb.gep(op, off))

    def channels(x_off, o, mr):
        full, tail = divmod(C, NRc)
        if full:
            def cb(ci, _):
                c0 = b.mul(ci, kb.i64(NRc))
                micro(b.add(x_off, c0), (b.add(o[0], c0), b.add(o[1], c0)), c0, mr, [lanes] * CB)
            kb.loop(full, cb, name="cb")
        if tail:
            c0 = kb.i64(full * NRc)
            micro(b.add(x_off, c0), (b.add(o[0], c0), b.add(o[1], c0)), c0, mr, _widths(tail, lanes))

    def row(n, oh):
        x_row = b.add(b.mul(n, kb.i64(Hp * Wp * C)), b.mul(oh, kb.i64(st[0] * Wp * C)))
        r_row = b.add(b.mul(n, kb.i64(OH * OW * C)), b.mul(oh, kb.i64(OW * C)))
        o_row = b.add(b.mul(n, kb.i64(o_n)), b.mul(oh, kb.i64(o_h)))
        full, tail = divmod(OW, MR)
        if full:
            def pb(pi, _):
                o = (b.add(r_row, b.mul(pi, kb.i64(MR * C))), b.add(o_row, b.mul(pi, kb.i64(MR * o_pix))))
                channels(b.add(x_row, b.mul(pi, kb.i64(MR * st[1] * C))), o, MR)
            kb.loop(full, pb, name="pb")
        if tail:
            o = (b.add(r_row, kb.i64(full * MR * C)), b.add(o_row, kb.i64(full * MR * o_pix)))
            channels(b.add(x_row, kb.i64(full * MR * st[1] * C)), o, tail)

    kb.loop(N, lambda n, _: kb.loop(OH, lambda oh, __: row(n, oh), name="oh"), name="n")
