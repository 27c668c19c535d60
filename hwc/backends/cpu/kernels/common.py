"""Building blocks shared by the kernels: dimension collapsing, loop nests over several
strided arrays, vector-or-scalar strided copies and fills, and the evaluation of an
elementwise program on loaded values."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from llvmlite import ir

from hwc.backends.cpu.irb import F32, KB, lanes_of, vec
from hwc.backends.cpu.kernels.ewmath import emit_op

Dim = tuple[int, list[int]]  # (count, stride of every array along it, in elements)


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> list[Dim]:
    """Drop size-1 dims and merge neighbours that every array walks contiguously."""
    out: list[Dim] = []
    for i, d in enumerate(shape):
        if d == 1:
            continue
        ss = [s[i] for s in strides]
        if out:
            pd, pss = out[-1]
            if all(ps == s * d for ps, s in zip(pss, ss)):
                out[-1] = (pd * d, ss)
                continue
        out.append((d, ss))
    return out or [(1, [0] * len(strides))]


def nest(kb: KB, dims: Sequence[Dim], base: Sequence[ir.Value | int], body: Callable[[list], None]) -> None:
    """Loop over `dims` (outermost first); body(offsets) gets every array's element offset
    (i64 values) = base + sum(index * stride)."""
    base = [kb.i64(o) if isinstance(o, int) else o for o in base]

    def rec(level, offs):
        if level == len(dims):
            body(offs)
            return
        count, strides = dims[level]

        def step(i, _):
            rec(level + 1, [o if s == 0 else kb.b.add(o, kb.b.mul(i, kb.i64(s))) for o, s in zip(offs, strides)])
        kb.loop(count, step, name=f"d{level}")
    rec(0, list(base))


def vector_inner(kb: KB, count: int, lanes: int, body: Callable[[ir.Value, int], None]) -> None:
    """for j in range(0, count, lanes): body(j, width): full vectors, then one narrower tail."""
    full, tail = divmod(count, lanes)
    if full:
        kb.loop(full, lambda i, _: body(kb.b.mul(i, kb.i64(lanes)), lanes), name="v")
    if tail:
        body(kb.i64(full * lanes), tail)


def load_strided(kb: KB, ptr, off, stride: int, width: int, ety) -> ir.Value:
    """`width` elements at ptr[off + k*stride]: a vector load (stride 1), a splat (stride 0),
    or a gather of scalars."""
    b = kb.b
    if stride == 1:
        return kb.load(kb.gep(ptr, off, ety), ety, width)
    if stride == 0 or width == 1:
        return kb.splat(kb.load(kb.gep(ptr, off, ety), ety), width)
    v = ir.Constant(vec(ety, width), ir.Undefined)
    for k in range(width):
        x = kb.load(kb.gep(ptr, b.add(off, kb.i64(k * stride)), ety), ety)
        v = b.insert_element(v, x, ir.Constant(ir.IntType(32), k))
    return v


def store_strided(kb: KB, value, ptr, off, stride: int, ety) -> None:
    width = lanes_of(value)
    if stride == 1 or width == 1:
        kb.store(value, kb.gep(ptr, off, ety))
        return
    for k in range(width):
        kb.store(kb.b.extract_element(value, ir.Constant(ir.IntType(32), k)),
                 kb.gep(ptr, kb.b.add(off, kb.i64(k * stride)), ety))


def elem_lanes(kb: KB, ety) -> int:
    """Lanes of one vector register for elements of type `ety`."""
    size = {8: 1, 16: 2, 32: 4, 64: 8}[ety.width] if isinstance(ety, ir.IntType) else (4 if ety == F32 else 8)
    return max(1, kb.lanes * 4 // size)


def strided_copy(kb: KB, dst, dst_strides, src, src_strides, shape, ety, dst_off=0, src_off=0) -> None:
    """dst[dst_off + i.dst_strides] = src[src_off + i.src_strides] for every index i of `shape`."""
    dims = collapse(shape, [dst_strides, src_strides])
    outer, (n, (ds, ss)) = dims[:-1], dims[-1]
    lanes = elem_lanes(kb, ety) if ds == 1 and ss in (0, 1) else 1

    def body(offs):
        d0, s0 = offs

        def inner(j, w):
            v = load_strided(kb, src, kb.b.add(s0, kb.b.mul(j, kb.i64(ss))), ss, w, ety)
            store_strided(kb, v, dst, kb.b.add(d0, kb.b.mul(j, kb.i64(ds))), ds, ety)
        vector_inner(kb, n, lanes, inner)
    nest(kb, outer, [dst_off, src_off], body)


def strided_fill(kb: KB, dst, dst_strides, shape, value: ir.Constant, dst_off=0) -> None:
    if any(d == 0 for d in shape):
        return
    ety = value.type
    dims = collapse(shape, [dst_strides])
    outer, (n, (ds,)) = dims[:-1], dims[-1]
    lanes = elem_lanes(kb, ety) if ds == 1 else 1

    def body(offs):
        def inner(j, w):
            v = kb.splat(value, w)
            store_strided(kb, v, dst, kb.b.add(offs[0], kb.b.mul(j, kb.i64(ds))), ds, ety)
        vector_inner(kb, n, lanes, inner)
    nest(kb, outer, [dst_off], body)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    out, s = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        out[i] = s
        s *= shape[i]
    return out


def eval_program(kb: KB, program, values: list[ir.Value]) -> ir.Value:
    """Run an EwProgram's instructions on loaded operand values (all of one type)."""
    regs = list(values)
    like = next(v for v in regs if v is not None)
    for ins in program.instrs:
        args = [regs[a] if isinstance(a, int) else kb.const(like.type, float(np.float32(a))) for a in ins.args]
        regs.append(emit_op(kb, ins.op, args, ins.params))
    return regs[program.result]
