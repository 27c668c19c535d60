"""The elementwise kernel: one loop over the output running a whole fused program.

Operands are read with their own strides along the output's storage dims (broadcasting
is a stride of 0); dims that every array walks contiguously are merged, so a same-shape
chain is one flat loop. The innermost loop is written in explicit vectors of the target's
width (plus one narrower tail vector) when every operand is contiguous or broadcast
along it, and in scalars otherwise.
"""

from __future__ import annotations

import math

import numpy as np

from hwc.backends.cpu.irb import ELEM, F32, vec
from hwc.backends.cpu.kernels.common import collapse, contiguous_strides, eval_program, load_strided, nest, vector_inner
from hwc.backends.cpu.lowering import physical_shape


def operand_sources(ctx, program, out_type, out_layout):
    """Per operand: ("value", float) for a scalar constant, else ("mem", ptr, strides)."""
    srcs = []
    for name in program.operands:
        data = ctx.const_data(name)
        if data is not None and data.size == 1:
            srcs.append(("value", float(data.reshape(()))))
        elif data is not None:
            ptr, strides = ctx.const_operand(data, out_type, out_layout, dtype=data.dtype)
            srcs.append(("mem", ptr, strides))
        else:
            srcs.append(("mem", ctx.ptr(name), ctx.operand_strides(name, out_type, out_layout)))
    return srcs


def emit_ew(ctx) -> None:
    kb, b = ctx.kb, ctx.b
    program = ctx.ins.attrs["ew"]
    out = ctx.ins.writes[0]
    ot, lay = ctx.type(out), ctx.layout(out)
    shape = physical_shape(ot, lay)
    if math.prod(shape) == 0:
        return
    srcs = operand_sources(ctx, program, ot, lay)
    oety = ELEM[ot.dtype]
    dts = [ctx.type(n).dtype for n in program.operands]
    integer = ot.dtype != "float32"
    if integer:
        program = _int_program(program, ot.dtype)
    mem = [s for s in srcs if s[0] == "mem"]
    dims = collapse(shape, [contiguous_strides(shape)] + [s[2] for s in mem])
    outer, (n, inner_strides) = dims[:-1], dims[-1]
    lanes = ctx.lanes if all(s in (0, 1) for s in inner_strides) and inner_strides[0] == 1 else 1
    optr = ctx.ptr(out)

    def body(offs):
        def inner(j, w):
            vals, k = [], 0
            for s, dt in zip(srcs, dts):
                if s[0] == "value":
                    vals.append(kb.const(vec(oety, w), s[1]))
                else:
                    k += 1
                    st = inner_strides[k]
                    v = load_strided(kb, s[1], b.add(offs[k], b.mul(j, kb.i64(st))), st, w, ELEM[dt])
                    if dt != ot.dtype:  # Pow's integer exponent
                        v = b.uitofp(v, vec(F32, w)) if dt == "uint8" else b.sitofp(v, vec(F32, w))
                    vals.append(v)
            y = eval_int_program(kb, program, vals, ot.dtype) if integer else eval_program(kb, program, vals)
            kb.store(y, kb.gep(optr, b.add(offs[0], j), oety))
        vector_inner(kb, n, lanes, inner)
    nest(kb, outer, [0] * (1 + len(mem)), body)


def _int_program(program, dtype: str):
    """Clip bounds of an integer Clip as the reference takes them (ceil/floor, within the dtype)."""
    from hwc.ir.ops import EwInstr

    info = np.iinfo(dtype)
    out = []
    for ins in program.instrs:
        if ins.op == "Clip":
            lo, hi = ins.params
            lo = info.min if lo < info.min else math.ceil(lo)
            hi = info.max if hi > info.max else math.floor(hi)
            ins = EwInstr("Clip", ins.args, (lo, hi))
        out.append(ins)
    return type(program)(list(program.operands), out)


def eval_int_program(kb, program, values, dtype: str):
    """An elementwise program on integer values: numpy's wrap-around arithmetic; Div
    truncates toward zero and gives 0 for a zero divisor (as the reference does)."""
    b = kb.b
    unsigned = dtype == "uint8"
    regs = list(values)
    like = next(v for v in regs if v is not None)
    lt = (lambda x, y: b.icmp_unsigned("<", x, y)) if unsigned else (lambda x, y: b.icmp_signed("<", x, y))
    for ins in program.instrs:
        a = [regs[r] if isinstance(r, int) else kb.const(like.type, int(r)) for r in ins.args]
        x = a[0]
        zero = kb.const(x.type, 0)
        op = ins.op
        if op in ("Add", "Sum"):
            y = b.add(x, a[1])
        elif op == "Sub":
            y = b.sub(x, a[1])
        elif op == "Mul":
            y = b.mul(x, a[1])
        elif op == "Div":
            d = a[1]
            dz = b.icmp_unsigned("==", d, zero)
            safe = b.select(dz, kb.const(x.type, 1), d)
            if unsigned:
                q = b.udiv(x, safe)
            else:  # x / -1 is -x (wrapping), avoiding the INT_MIN / -1 trap
                m1 = b.icmp_signed("==", d, kb.const(x.type, -1))
                q = b.select(m1, b.sub(zero, x), b.sdiv(x, b.select(m1, kb.const(x.type, 1), safe)))
            y = b.select(dz, zero, q)
        elif op == "Max":
            y = b.select(lt(x, a[1]), a[1], x)
        elif op == "Min":
            y = b.select(lt(a[1], x), a[1], x)
        elif op == "Clip":
            lo, hi = (kb.const(x.type, int(p)) for p in ins.params)
            y = b.select(lt(x, lo), lo, x)
            y = b.select(lt(hi, y), hi, y)
        elif op == "Relu":
            y = x if unsigned else b.select(b.icmp_signed("<", x, zero), zero, x)
        elif op == "Neg":
            y = b.sub(zero, x)
        elif op == "Abs":
            y = x if unsigned else b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
        elif op == "Identity":
            y = x
        else:
            raise AssertionError(f"integer {op}")
        regs.append(y)
    return regs[program.result]
