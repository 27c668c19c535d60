"""The elementwise kernel: one loop over the output running a whole fused program.

Operands are read with their own strides along the output's storage dims (broadcasting
is a stride of 0); dims that every array walks contiguously are merged, so a same-shape
chain is one flat loop. The innermost loop is written in explicit vectors of the target's
width (plus one narrower tail vector) when every operand is contiguous or broadcast
along it, and in scalars otherwise.
"""

from __future__ import annotations

from hwc.backends.cpu.irb import F32
from hwc.backends.cpu.kernels.common import collapse, contiguous_strides, eval_program, load_strided, nest, \
    vector_inner
from hwc.backends.cpu.lowering import physical_shape


def operand_sources(ctx, program, out_type, out_layout):
    """Per operand: ("value", float) for a scalar constant, else ("mem", ptr, strides)."""
    srcs = []
    for name in program.operands:
        data = ctx.const_data(name)
        if data is not None and data.size == 1:
            srcs.append(("value", float(data.reshape(()))))
        elif data is not None:
            ptr, strides = ctx.const_operand(data, out_type, out_layout)
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
    srcs = operand_sources(ctx, program, ot, lay)
    mem = [s for s in srcs if s[0] == "mem"]
    dims = collapse(shape, [contiguous_strides(shape)] + [s[2] for s in mem])
    outer, (n, inner_strides) = dims[:-1], dims[-1]
    lanes = ctx.lanes if all(s in (0, 1) for s in inner_strides) and inner_strides[0] == 1 else 1
    optr = ctx.ptr(out)

    def body(offs):
        def inner(j, w):
            vals, k = [], 0
            for s in srcs:
                if s[0] == "value":
                    vals.append(kb.const(_vt(w), s[1]))
                else:
                    k += 1
                    st = inner_strides[k]
                    vals.append(load_strided(kb, s[1], b.add(offs[k], b.mul(j, kb.i64(st))), st, w, F32))
            y = eval_program(kb, program, vals)
            kb.store(y, kb.gep(optr, b.add(offs[0], j)))
        vector_inner(kb, n, lanes, inner)
    nest(kb, outer, [0] * (1 + len(mem)), body)


def _vt(w):
    from hwc.backends.cpu.irb import vec

    return vec(F32, w)
