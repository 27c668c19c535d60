"""Convolution, Gemm and MatMul as register-blocked GEMM micro-kernels.

Every one of them is   out[p, c] = epilogue( sum_k A[p, k] * B[k, c] + bias[c] )
where p runs over output pixels (or rows), c over output channels (or columns) and k
over the reduction (for a convolution: the kernel taps and input channels). Nothing is
materialized: A is read in place with strides (a convolution's A is its padded
channels-last input, so "im2col" is only an address computation), B is the weight
panel repacked at compile time, and the epilogue (bias, folded BatchNorm, residual add,
activation, any fused elementwise program) runs on registers before the one store.

The micro-kernel computes MR pixels x NR channels: MR*NR/lanes vector accumulators live
in registers through the whole k loop; each k step loads NR/lanes vectors of B, and
broadcasts one scalar of A per pixel into an FMA with each. MR and NR are chosen per
layer from the target's vector width and register count by a small cost model
(`blocking`); the last column block and the last pixel block of a row get their own,
narrower instances. Packed B panels are [K][NR] per column block, so the k loop streams
them contiguously; column blocks are the outer loop, so one panel stays in L1 while
every pixel of the layer passes by.

Accumulation order: k ascending, one FMA per k (no reassociation, no fast-math).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from hwc.backends.cpu.irb import F32, I8, I32, I64, vec
from hwc.backends.cpu.kernels.common import eval_program, load_strided, store_strided
from hwc.backends.cpu.lowering import CL, EwProgram, merge_programs
from hwc.ir.ops import EwInstr


@dataclass
class Dim:
    count: int
    strides: dict[str, int]  # array key -> element stride along this dim
    # keys walked as two dims folded into this one: key -> (inner count, outer stride, inner stride);
    # element i is at (i // inner count) * outer stride + (i % inner count) * inner stride
    wrap: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class GemmSpec:
    n_cols: int                     # columns (output channels) per group
    k_dims: list[tuple[int, int]]   # (count, A stride), outermost first
    rows: list[Dim]                 # pixel dims, outermost first; the last one is blocked by MR
    groups: Dim | None              # group loop (strides of a, out, b, bias, ops; col offset in "col")
    a: ir.Value = None
    out: ir.Value = None
    out_col: int = 1                # element stride of out along columns
    b_packed: np.ndarray | None = None   # [groups, K, n_cols] float32 (constant B)
    b_ptr: ir.Value = None          # runtime B
    b_k: int = 0                    # runtime B strides along k and columns
    b_col: int = 1
    bias: np.ndarray | None = None  # [groups, n_cols]
    program: EwProgram = None       # epilogue; operand 0 (None) is the accumulator
    operands: list = field(default_factory=list)  # per program operand (see epilogue_operands)
    requant: dict | None = None     # int8: A, B int8, int32 accumulators, requantized int8 output


# ---- blocking ------------------------------------------------------------------------------------
def blocking(n_cols: int, row_len: int, k: int, lanes: int, regs: int) -> tuple[int, int]:
    """(MR pixels, NR columns) minimizing estimated cycles of the layer (per k step:
    max(FMAs, loads) / 2 issue slots, at least the FMA latency when few accumulators)."""
    nv = math.ceil(n_cols / lanes)
    best, best_cost = (1, lanes), None
    for nrv in range(1, min(nv, 8) + 1):
        mr_max = (regs - nrv - 2) // nrv
        if mr_max < 1:
            break
        for mr in sorted({min(row_len, mr_max, 16), min(row_len, max(1, mr_max // 2))}):
            cost = 0.0
            col_blocks = [(nrv, n_cols // (nrv * lanes))]
            rest = n_cols % (nrv * lanes)
            if rest:
                col_blocks.append((math.ceil(rest / lanes), 1))
            row_blocks = [(mr, row_len // mr)] + ([(row_len % mr, 1)] if row_len % mr else [])
            for cv, cn in col_blocks:
                for rm, rn in row_blocks:
                    step = max(rm * cv / 2, (rm + cv) / 2, 4.0 if rm * cv < 8 else 0.0) + 0.5
                    cost += cn * rn * (k * step + rm * cv)
            if best_cost is None or cost < best_cost - 1e-9:
                best, best_cost = (mr, nrv * lanes), cost
    return best


def _widths(cols: int, lanes: int) -> list[int]:
    return [lanes] * (cols // lanes) + ([cols % lanes] if cols % lanes else [])


# ---- epilogue folding ------------------------------------------------------------------------------
def fold_affine_prefix(program: EwProgram, col_const, n_cols: int) -> tuple[np.ndarray, np.ndarray, EwProgram]:
    """Leading multiplies/adds of the accumulator by per-column constants fold into the
    weights and bias: returns (scale[n_cols], shift[n_cols], the remaining program).
    `col_const(operand index)` gives an operand's per-column values, or None."""
    scale, shift = np.ones(n_cols, np.float64), np.zeros(n_cols, np.float64)
    n = len(program.operands)
    cur, folded = 0, 0
    for ins in program.instrs:
        if ins.op not in ("Add", "Sub", "Mul", "Div") or cur not in ins.args or len(ins.args) != 2:
            break
        left = ins.args[0] == cur
        other = ins.args[1] if left else ins.args[0]
        if other == cur:
            break
        c = np.full(n_cols, float(np.float32(other))) if not isinstance(other, int) else \
            (col_const(other) if other < n else None)
        if c is None or (ins.op == "Div" and not left):
            break
        if ins.op == "Add":
            shift = shift + c
        elif ins.op == "Mul":
            scale, shift = scale * c, shift * c
        elif ins.op == "Sub":
            scale, shift = (scale, shift - c) if left else (-scale, c - shift)
        else:
            scale, shift = scale / c, shift / c
        cur = n + folded
        folded += 1
    if not folded:
        return scale, shift, program
    used = {a for i in program.instrs[folded:] for a in i.args if isinstance(a, int)}
    if any(r in used for r in [0, *range(n, n + folded - 1)]):
        return np.ones(n_cols), np.zeros(n_cols), program

    def remap(r):
        if not isinstance(r, int):
            return r
        if r == n + folded - 1:
            return 0
        return r - folded if r >= n + folded else r
    rest = [EwInstr(i.op, tuple(remap(a) for a in i.args), i.params) for i in program.instrs[folded:]]
    return scale, shift, EwProgram(list(program.operands), rest)


# ---- emission --------------------------------------------------------------------------------------
class _Emitter:
    def __init__(self, ctx, spec: GemmSpec):
        self.ctx, self.kb, self.b, self.spec = ctx, ctx.kb, ctx.b, spec
        self.lanes = ctx.lanes
        spec.k_dims = [(c, s) for c, s in spec.k_dims if c > 1] or [(1, 0)]
        self.K = math.prod(c for c, _ in spec.k_dims)
        if spec.rows and spec.rows[-1].strides.get("b", 0):
            spec.rows.append(Dim(1, {}))  # pixels of one block must share B: block a dim of its own
        row_len = spec.rows[-1].count if spec.rows else 1
        self.MR, self.NR = blocking(spec.n_cols, row_len, self.K, self.lanes, ctx.target.vector_registers)
        self.col_blocks = self._col_blocks()
        if spec.b_packed is not None:
            self.b_base, self.b_group_stride, self.b_block_off = self._pack_b()
        self.int8 = spec.requant is not None
        self.acc_t = I32 if self.int8 else F32
        self.ab_t = I8 if self.int8 else F32
        if spec.bias is not None:
            self.bias_ptr = ctx.weight(spec.bias.astype(np.int32 if self.int8 else np.float32))
        if self.int8:
            self.rq_ptrs = requant_ptrs(ctx, spec.requant)

    def _col_blocks(self) -> list[tuple[int, int, int]]:
        """(first column, columns, count): full NR blocks, then the tail."""
        n, NR = self.spec.n_cols, self.NR
        out = []
        if n // NR:
            out.append((0, NR, n // NR))
        if n % NR:
            out.append((n // NR * NR, n % NR, 1))
        return out

    def _pack_b(self):
        """Panels [K][cols] per column block, blocks of a group contiguous, groups aligned."""
        bp = self.spec.b_packed
        groups, K, n = bp.shape
        parts, offs = [], {}
        for g in range(groups):
            pos = sum(p.size for p in parts)
            for c0, cols, count in self.col_blocks:
                for i in range(count):
                    offs.setdefault((c0, i), sum(p.size for p in parts) - pos)
                    parts.append(bp[g, :, c0 + i * cols:c0 + (i + 1) * cols].reshape(-1))
            pad = (-sum(p.size for p in parts)) % (self.ctx.target.alignment // bp.itemsize)
            if pad:
                parts.append(np.zeros(pad, bp.dtype))
            if g == 0:
                stride = sum(p.size for p in parts)
        return self.ctx.weight(np.concatenate(parts).astype(bp.dtype)), stride, offs

    # -- loops --
    def run(self):
        spec, kb = self.spec, self.kb
        keys = self._keys()
        base = {k: kb.i64(0) for k in keys}
        if spec.groups is not None and spec.groups.count > 1:
            def gbody(gi, _):
                offs = {k: self._add(base[k], gi, spec.groups.strides.get(k, 0)) for k in keys}
                self._columns(offs, gi)
            kb.loop(spec.groups.count, gbody, name="g")
        else:
            self._columns(base, kb.i64(0))

    def _keys(self):
        return ["a", "out", "res", "bias", "b", "col"] + [f"op{i}" for i, s in enumerate(self.spec.operands)
                                                   if s is not None and s[0] == "strided"]

    def _add(self, v, i, s):
        return v if s == 0 else self.b.add(v, self.b.mul(i, self.kb.i64(s)))

    def _columns(self, offs, gi):
        spec, kb = self.spec, self.kb
        for c0, cols, count in self.col_blocks:
            def cbody(ci, _, c0=c0, cols=cols):
                col = self.b.add(self.b.mul(ci, kb.i64(cols)), kb.i64(c0))
                o = dict(offs)
                o["col"] = self.b.add(offs["col"], col)
                o["out"] = self.b.add(offs["out"], self.b.mul(col, kb.i64(spec.out_col)))
                o["bias"] = self.b.add(offs["bias"], col)
                o["res"] = self.b.add(offs["res"], col)
                for i, src in enumerate(spec.operands):
                    if src is not None and src[0] == "strided":
                        o[f"op{i}"] = self._add(offs[f"op{i}"], col, src[2])
                if spec.b_packed is not None:
                    blk = self.b.add(self.b.mul(ci, kb.i64(self.K * cols)), kb.i64(self.b_block_off[(c0, 0)]))
                    o["b"] = self.b.add(self.b.mul(gi, kb.i64(self.b_group_stride)), blk)
                else:
                    o["b"] = self.b.add(offs["b"], self.b.mul(col, kb.i64(spec.b_col)))
                self._rows(o, cols)
            kb.loop(count, cbody, name="nb")

    def _rows(self, offs, cols):
        spec, kb = self.spec, self.kb
        rows = spec.rows or [Dim(1, {})]
        outer, last = rows[:-1], rows[-1]

        def rec(level, o):
            if level == len(outer):
                self._pixels(o, last, cols)
                return
            d = outer[level]

            def body(i, _):
                rec(level + 1, {k: self._add(v, i, d.strides.get(k, 0)) for k, v in o.items()})
            kb.loop(d.count, body, name=f"r{level}")
        rec(0, offs)

    def _pixels(self, offs, dim: Dim, cols):
        kb = self.kb
        MR = self.MR
        full, tail = divmod(dim.count, MR)
        if full:
            def body(i, _):
                o = {k: self._add(v, i, dim.strides.get(k, 0) * MR) for k, v in offs.items()}
                o["p0"] = self.b.mul(i, kb.i64(MR))
                self._micro(o, MR, cols, dim)
            kb.loop(full, body, name="p")
        if tail:
            o = {k: self._add(v, kb.i64(full), dim.strides.get(k, 0) * MR) for k, v in offs.items()}
            o["p0"] = kb.i64(full * MR)
            self._micro(o, tail, cols, dim)

    def _pix_off(self, offs, dim: Dim, key: str, r: int):
        """Offset of pixel r of the block in array `key` (a wrapped key: by division)."""
        kb, b = self.kb, self.b
        if key not in dim.wrap:
            return b.add(offs[key], kb.i64(r * dim.strides.get(key, 0)))
        w, so, si = dim.wrap[key]
        p = b.add(offs["p0"], kb.i64(r))
        return b.add(offs[key], b.add(b.mul(b.udiv(p, kb.i64(w)), kb.i64(so)), b.mul(b.urem(p, kb.i64(w)), kb.i64(si))))

    # -- the micro-kernel --
    def _micro(self, offs, mr: int, cols: int, dim: Dim):
        spec, kb, b = self.spec, self.kb, self.b
        widths = _widths(cols, self.lanes)
        a_ps = dim.strides.get("a", 0)
        accs = []
        for j, w in enumerate(widths):
            if spec.bias is not None:
                init = kb.load(kb.gep(self.bias_ptr, b.add(offs["bias"], kb.i64(j * self.lanes)), self.acc_t),
                               self.acc_t, w)
            else:
                init = kb.const(vec(self.acc_t, w), 0)
            accs.append(init)
        accs = [accs[j] for _ in range(mr) for j in range(len(widths))]
        packed = spec.b_packed is not None
        # B strides along each k dim: packed panels are [k_lin][cols]
        if packed:
            inner = 1
            b_strides = []
            for c, _ in reversed(spec.k_dims):
                b_strides.append(inner * cols)
                inner *= c
            b_strides.reverse()
        else:
            b_strides = [spec.b_k * math.prod(c for c, _ in spec.k_dims[i + 1:]) for i in range(len(spec.k_dims))]
        a_ptr = spec.a
        b_ptr = self.b_base if packed else spec.b_ptr
        esize = 1 if self.int8 else 4
        align_b = min(64, self.lanes * esize) if packed and cols % self.lanes == 0 else esize
        ab_t, int8 = self.ab_t, self.int8

        def step(a_off, b_off, acc):
            bv = []
            for j, w in enumerate(widths):
                off = b.add(b_off, kb.i64(j * self.lanes))
                if packed or spec.b_col == 1:
                    v = kb.load(kb.gep(b_ptr, off, ab_t), ab_t, w, align=align_b if w == self.lanes else esize)
                else:
                    v = load_strided(kb, b_ptr, b.add(b_off, kb.i64(j * self.lanes * spec.b_col)), spec.b_col, w, F32)
                bv.append(b.sext(v, vec(I32, w)) if int8 else v)
            out = list(acc)
            for r in range(mr):
                av = kb.load(kb.gep(a_ptr, b.add(a_off, kb.i64(r * a_ps)), ab_t), ab_t)
                if int8:
                    av = b.sext(av, I32)
                for j, w in enumerate(widths):
                    k = r * len(widths) + j
                    if int8:
                        out[k] = b.add(out[k], b.mul(kb.splat(av, w), bv[j]))
                    else:
                        out[k] = kb.fma(kb.splat(av, w), bv[j], out[k])
            return out

        def kloop(level, a_off, b_off, acc):
            if level == len(spec.k_dims):
                return step(a_off, b_off, acc)
            c, a_s = spec.k_dims[level]
            b_s = b_strides[level]
            return kb.loop(c, lambda i, cur: kloop(level + 1, self._add(a_off, i, a_s), self._add(b_off, i, b_s), cur),
                           acc, name=f"k{level}")
        accs = kloop(0, offs["a"], offs["b"], accs)
        self._store(offs, accs, mr, widths, dim)

    def _store(self, offs, accs, mr, widths, dim: Dim):
        spec, kb, b = self.spec, self.kb, self.b
        if self.int8:
            for r in range(mr):
                out_off = self._pix_off(offs, dim, "out", r)
                for j in range(len(widths)):
                    col = b.add(offs["col"], kb.i64(j * self.lanes))
                    y = requantize(kb, accs[r * len(widths) + j], self.rq_ptrs, col, spec.requant)
                    kb.store(y, kb.gep(spec.out, b.add(out_off, kb.i64(j * self.lanes)), I8))
            return
        used = {a for i in spec.program.instrs for a in i.args if isinstance(a, int)} | {spec.program.result}
        for r in range(mr):
            out_off = self._pix_off(offs, dim, "out", r)
            res_off = self._pix_off(offs, dim, "res", r)
            for j, w in enumerate(widths):
                vals = []
                col_off = j * self.lanes
                o_off = b.add(out_off, kb.i64(col_off * spec.out_col))
                for i, src in enumerate(spec.operands):
                    if i == 0:
                        vals.append(accs[r * len(widths) + j])
                    elif i not in used or src is None:
                        vals.append(None)
                    elif src[0] == "value":
                        vals.append(kb.const(vec(F32, w), src[1]))
                    elif src[0] == "same":
                        r_off = b.add(res_off, kb.i64(col_off))
                        vals.append(kb.load(kb.gep(src[1], r_off), F32, w))
                    elif src[0] == "col":
                        vals.append(kb.load(kb.gep(src[1], b.add(offs["col"], kb.i64(col_off))), F32, w))
                    elif src[0] == "strided":
                        key = f"op{i}"
                        off = b.add(offs[key], kb.i64(r * dim.strides.get(key, 0) + col_off * src[2]))
                        vals.append(load_strided(kb, src[1], off, src[2], w, F32))
                    else:  # scalar in memory
                        vals.append(kb.splat(kb.load(src[1], F32), w))
                y = eval_program(kb, spec.program, vals)
                store_strided(kb, y, spec.out, o_off, spec.out_col, F32)


def requant_ptrs(ctx, rq: dict) -> tuple:
    """The per-column int64 constants `requantize` reads: M, 2**(shift-1), shift (and M_neg with a fused
    LeakyReLU, rq["mult_neg"])."""
    sh = np.asarray(rq["shift"], np.int64)
    ptrs = (ctx.weight(np.asarray(rq["mult"], np.int64)), ctx.weight(np.left_shift(1, sh - 1)), ctx.weight(sh))
    if rq.get("mult_neg") is not None:
        ptrs += (ctx.weight(np.asarray(rq["mult_neg"], np.int64)),)
    return ptrs


def requantize(kb, acc, ptrs, col, rq: dict):
    """int32 accumulators -> int8 (hwc.quant.arith.requantize): p = acc * M (int64; M_neg where acc < 0 with a
    fused LeakyReLU), r = (p + 2**(shift-1)) >> shift (arithmetic), y = clamp(r + z_out, lo, hi).
    `ptrs` point at per-column int64 M, 2**(shift-1), shift [and M_neg] (`requant_ptrs`); `col` is the column."""
    b = kb.b
    w = acc.type.count if hasattr(acc.type, "count") else 1
    t64 = vec(I64, w)
    m, rnd, sh = (kb.load(kb.gep(p, col, I64), I64, w) for p in ptrs[:3])
    if len(ptrs) > 3:
        neg = b.icmp_signed("<", acc, kb.const(acc.type, 0))
        m = b.select(neg, kb.load(kb.gep(ptrs[3], col, I64), I64, w), m)
    r = b.ashr(b.add(b.mul(b.sext(acc, t64), m), rnd), sh)
    return clamp_to_int8(kb, b.add(r, kb.const(t64, rq["z_out"])), rq["lo"], rq["hi"])


def clamp_to_int8(kb, v, lo: int, hi: int):
    b = kb.b
    t = v.type
    v = b.select(b.icmp_signed("<", v, kb.const(t, lo)), kb.const(t, lo), v)
    v = b.select(b.icmp_signed(">", v, kb.const(t, hi)), kb.const(t, hi), v)
    return b.trunc(v, vec(I8, v.type.count if hasattr(v.type, "count") else 1))


def run_gemm(ctx, spec: GemmSpec) -> None:
    _Emitter(ctx, spec).run()


# ---- building specs from instructions ------------------------------------------------------------
def epilogue_operands(ctx, program: EwProgram, out_name: str, col_axis: int, n_cols_total: int):
    """Sources of an epilogue's operands: None (the accumulator), ("value", x), ("same", ptr)
    (an activation shaped like the output, read in its layout), ("col", ptr) (a constant per
    output column), ("scalar", ptr) (a one-element activation)."""
    ot = ctx.type(out_name)
    srcs = []
    for name in program.operands:
        if name is None:
            srcs.append(None)
            continue
        data = ctx.const_data(name)
        t = ctx.type(name)
        if data is not None and data.size == 1:
            srcs.append(("value", float(data.reshape(()))))
        elif t.size == 1:
            srcs.append(("scalar", ctx.ptr(name)))
        elif t.shape == ot.shape and data is None:
            srcs.append(("same", ctx.ptr(name)))
        elif data is not None and _per_column(t.shape, ot.rank, col_axis):
            srcs.append(("col", ctx.weight(np.ascontiguousarray(data, np.float32).reshape(-1))))
        elif data is not None and t.shape == ot.shape:
            srcs.append(("same", ctx.weight(_in_layout(ctx, data, out_name))))
        elif ot.rank == 2 and data is None:  # a Gemm's C input: broadcast [M, N] in any way
            st = ctx.operand_strides(name, ot, "")
            srcs.append(("strided", ctx.ptr(name), st[1], st[0]))
        elif ot.rank == 2:
            ptr, st = ctx.const_operand(data, ot, "")
            srcs.append(("strided", ptr, st[1], st[0]))
        else:
            raise AssertionError(f"epilogue operand {name} {t} of {out_name} {ot}")
    return srcs


def _per_column(shape, rank: int, col_axis: int) -> bool:
    shape = (1,) * (rank - len(shape)) + tuple(shape)
    return all(d == 1 for i, d in enumerate(shape) if i != col_axis)


def _in_layout(ctx, data, out_name):
    from hwc.backends.cpu.lowering import cl_perm

    d = np.asarray(data, np.float32)
    return np.ascontiguousarray(np.transpose(d, cl_perm(d.ndim))) if ctx.layout(out_name) == CL else d


def _col_const_fn(srcs, program, ctx, n_cols, groups=1):
    def col_const(i):
        src = srcs[i]
        if src is None or src[0] not in ("value", "col"):
            return None
        if src[0] == "value":
            return np.full(n_cols * groups, src[1])
        data = ctx.const_data(program.operands[i])
        return np.asarray(data, np.float64).reshape(-1)
    return col_const


def emit_conv(ctx) -> None:
    ins = ctx.ins
    a = ins.attrs
    x, out = ins.reads[0], ctx.output()
    if a.get("runtime_weights"):
        return _conv_runtime_weights(ctx)
    wdata = ctx.graph.const(ins.node.inputs[1])
    bname = ins.node.inputs[2] if len(ins.node.inputs) > 2 and ins.node.inputs[2] else None
    bdata = ctx.graph.const(bname) if bname else None
    xt, ot = ctx.type(x), ctx.type(out)
    nd = xt.rank - 2
    N, C = xt.shape[:2]
    M = ot.shape[1]
    G = a["group"]
    Cg, Mg = C // G, M // G
    if nd == 1:  # a 1-d convolution is a 2-d one of height 1
        (Hp, Wp), (OH, OW), (kh, kw) = (1, xt.shape[2]), (1, ot.shape[2]), (1, wdata.shape[2])
        st, dl = (1, a["strides"][0]), (1, a["dilations"][0])
    else:
        (Hp, Wp), (OH, OW), (kh, kw) = xt.shape[2:], ot.shape[2:], wdata.shape[2:]
        st, dl = tuple(a["strides"]), tuple(a["dilations"])
    program = ins.attrs["ew"]
    srcs = epilogue_operands(ctx, program, out, 1, M)
    scale, shift, program = fold_affine_prefix(program, _col_const_fn(srcs, ins.attrs["ew"], ctx, M), M)
    bias = (np.zeros(M) if bdata is None else bdata.astype(np.float64)) * scale + shift
    if G == C == M:
        from hwc.backends.cpu.kernels.dwconv import emit_depthwise

        w = wdata.reshape(M, kh, kw).astype(np.float64) * scale[:, None, None]
        return emit_depthwise(ctx, x, out, w, bias, (N, C, Hp, Wp), (OH, OW), (kh, kw), st, dl, program, srcs)
    # B: [G, K, Mg] with k = (kh, kw, ci) in the order A is walked
    wg = (wdata.astype(np.float64) * scale[:, None, None, None] if nd == 2 else
          wdata.astype(np.float64)[:, :, None, :] * scale[:, None, None, None]).reshape(G, Mg, Cg, kh, kw)
    bmat = wg.transpose(0, 3, 4, 2, 1).reshape(G, kh * kw * Cg, Mg)
    optr, ost = ctx.out_view(out)
    dims = _conv_rows(N, OH, OW, M, Hp, Wp, C, st, ost, nd, ctx.layout(x))
    spec = GemmSpec(
        n_cols=Mg,
        k_dims=_merge_k(_conv_k(kh, kw, Cg, Hp, Wp, C, dl, ctx.layout(x))),
        rows=_merge_rows(dims),
        groups=Dim(G, {"a": Cg * _chan_stride(Hp, Wp, ctx.layout(x)), "out": Mg, "res": Mg, "col": Mg, "bias": Mg}),
        a=ctx.ptr(x), out=optr, b_packed=bmat.astype(np.float32), bias=bias.reshape(G, Mg),
        program=program, operands=srcs)
    run_gemm(ctx, spec)


def _conv_runtime_weights(ctx) -> None:
    """A Conv whose weights (and bias) are run-time tensors: B is the WPack copy
    [G, kh, kw, Cg, Mg], read in place; the bias is the epilogue's first add."""
    ins = ctx.ins
    a = ins.attrs
    x, wp, out = ins.reads[0], ins.reads[1], ctx.output()
    xt, ot, pt = ctx.type(x), ctx.type(out), ctx.type(wp)
    nd = xt.rank - 2
    G, kh, kw, Cg, Mg = pt.shape
    N, C = xt.shape[:2]
    M = ot.shape[1]
    if nd == 1:
        (Hp, Wp), (OH, OW) = (1, xt.shape[2]), (1, ot.shape[2])
        st, dl = (1, a["strides"][0]), (1, a["dilations"][0])
    else:
        (Hp, Wp), (OH, OW) = xt.shape[2:], ot.shape[2:]
        st, dl = tuple(a["strides"]), tuple(a["dilations"])
    program = ins.attrs["ew"]
    bname = ins.node.inputs[2] if len(ins.node.inputs) > 2 and ins.node.inputs[2] else None
    if bname:
        program = merge_programs(EwProgram([None, bname], [EwInstr("Add", (0, 1))]), program, None)
    srcs = []
    for name in program.operands:
        if name == bname and name is not None:
            data = ctx.const_data(name)
            srcs.append(("col", ctx.weight(data.astype(np.float32)) if data is not None else ctx.ptr(name)))
        else:
            srcs.extend(epilogue_operands(ctx, EwProgram([name]), out, 1, M) if name is not None else [None])
    K = kh * kw * Cg
    optr, ost = ctx.out_view(out)
    dims = _conv_rows(N, OH, OW, M, Hp, Wp, C, st, ost, nd, ctx.layout(x))
    spec = GemmSpec(
        n_cols=Mg, k_dims=_conv_k(kh, kw, Cg, Hp, Wp, C, dl, ctx.layout(x)), rows=_merge_rows(dims),
        groups=Dim(G, {"a": Cg * _chan_stride(Hp, Wp, ctx.layout(x)), "out": Mg, "res": Mg, "col": Mg,
                       "b": K * Mg}), a=ctx.ptr(x), out=optr,
        b_ptr=ctx.ptr(wp), b_k=Mg, b_col=1, program=program, operands=srcs)
    spec.k_dims = [(c, s_) for c, s_ in spec.k_dims if c > 1] or [(1, 0)]
    run_gemm(ctx, spec)


def _chan_stride(Hp, Wp, layout) -> int:
    """Element stride between input channels: 1 channels-last, a whole plane in NCHW."""
    return 1 if layout == CL else Hp * Wp


def _conv_rows(N, OH, OW, M, Hp, Wp, C, st, ost, nd, layout=CL) -> list[Dim]:
    """Row dims of a convolution: A walks the (padded) input, channels-last or NCHW; "out"
    the output (possibly the interior of a padded buffer: strides `ost` of its logical
    axes); "res" the unpadded output order (operands shaped like the output)."""
    sn, sh, sw = (ost[0], 0, ost[2]) if nd == 1 else (ost[0], ost[2], ost[3])
    px = C if layout == CL else 1  # element stride of one input pixel
    return [Dim(N, {"a": Hp * Wp * C, "out": sn, "res": OH * OW * M}),
            Dim(OH, {"a": st[0] * Wp * px, "out": sh, "res": OW * M}),
            Dim(OW, {"a": st[1] * px, "out": sw, "res": M})]


def _conv_k(kh, kw, Cg, Hp, Wp, C, dl, layout=CL):
    """The reduction dims (kh, kw, input channel) with their A strides."""
    px = C if layout == CL else 1
    return [(kh, dl[0] * Wp * px), (kw, dl[1] * px), (Cg, _chan_stride(Hp, Wp, layout))]


def _merge_k(dims):
    out = []
    for c, s in dims:
        if c == 1:
            continue
        if out and out[-1][1] == s * c:
            out[-1] = (out[-1][0] * c, s)
        else:
            out.append((c, s))
    return out or [(1, 0)]


#: Arrays whose rows may be folded by division (only the stores use them, once per pixel).
WRAPPABLE = ("out", "res")


def _merge_rows(dims: list[Dim]) -> list[Dim]:
    """Drop size-1 dims; merge a dim into the next when every array walks them contiguously,
    or when only the output does not (a padded output's rows): then its offsets wrap."""
    dims = [d for d in dims if d.count > 1] or [Dim(1, {})]
    out = [dims[0]]
    for d in dims[1:]:
        p = out[-1]
        keys = set(p.strides) | set(d.strides)
        if all(p.strides.get(k, 0) == d.strides.get(k, 0) * d.count for k in keys):
            out[-1] = Dim(p.count * d.count, dict(d.strides))
        else:
            out.append(d)
    if len(out) >= 2:  # the blocked (last) dim may absorb the one before it, wrapping the output only
        p, d = out[-2], out[-1]
        keys = set(p.strides) | set(d.strides)
        bad = [k for k in keys if p.strides.get(k, 0) != d.strides.get(k, 0) * d.count]
        if all(k in WRAPPABLE for k in bad) and d.count < 64:
            wrap = {k: (d.count, p.strides.get(k, 0), d.strides.get(k, 0)) for k in bad}
            out[-2:] = [Dim(p.count * d.count, {k: v for k, v in d.strides.items() if k not in bad}, wrap)]
    return out


def emit_gemm(ctx) -> None:
    """Gemm and MatMul. A constant B (MatMul: with no batch dims) is repacked into panels;
    otherwise B is read in place (per batch, with broadcasting)."""
    ins = ctx.ins
    node = ins.node
    out = ins.writes[0]
    ot = ctx.type(out)
    program = ins.attrs["ew"]
    batch: list[tuple[int, int, int, int]] = []  # (count, A stride, B stride, out stride)
    bias = None
    if ins.op == "Gemm":
        A = ins.reads[0]
        at = ctx.type(A)
        alpha, beta = ins.attrs["alpha"], ins.attrs["beta"]
        ta, tb = ins.attrs["transA"], ins.attrs["transB"]
        M, K = (at.shape[1], at.shape[0]) if ta else at.shape
        Nc = ot.shape[1]
        a_row, a_k = (1, M) if ta else (K, 1)
        bconst = ctx.const_data(node.inputs[1])
        c_name = ins.reads[2] if len(node.inputs) > 2 and node.inputs[2] else None   # (maybe a logical copy)
        if c_name is not None:
            cdata = ctx.const_data(c_name)
            # a per-column C is the kernel's bias, added before the epilogue: only where alpha
            # is folded into B's panels (a B read in place gets alpha from the epilogue)
            if cdata is not None and _per_column(cdata.shape, 2, 1) and (bconst is not None or alpha == 1):
                bias = np.broadcast_to(cdata.astype(np.float64).reshape(-1), (Nc,)) * beta
            else:
                pre = EwProgram([None, c_name], [EwInstr("Mul", (1, float(beta))), EwInstr("Add", (0, 2))])
                program = merge_programs(pre, program, None)
        if bconst is not None:
            bmat = (bconst.T if tb else bconst).astype(np.float64) * alpha
        else:
            bmat = None
            b_ptr, b_k, b_col = ctx.ptr(ins.reads[1]), (1 if tb else Nc), (K if tb else 1)
            if alpha != 1:
                program = merge_programs(EwProgram([None], [EwInstr("Mul", (0, float(alpha)))]), program, None)
        rows = M
    else:  # MatMul
        A, B = ins.reads[0], ins.reads[1]
        sa, sb = ctx.type(A).shape, ctx.type(B).shape
        a2 = (1,) + sa if len(sa) == 1 else sa
        b2 = sb + (1,) if len(sb) == 1 else sb
        M, K, Nc = a2[-2], a2[-1], b2[-1]
        a_row, a_k = K, 1
        bconst = ctx.const_data(B)
        out_batch = tuple(np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
        if bconst is not None and all(d == 1 for d in b2[:-2]):
            bmat = bconst.reshape(b2[-2:]).astype(np.float64)
            rows = math.prod(out_batch) * M
        else:
            bmat = None
            b_ptr, b_k, b_col = ctx.ptr(B), Nc, 1
            batch = _batch_dims(a2, b2, out_batch, M, K, Nc)
            rows = M
    srcs = epilogue_operands(ctx, program, out, ot.rank - 1, Nc)
    if bmat is not None:
        scale, shift, program = fold_affine_prefix(program, _col_const_fn(srcs, program, ctx, Nc), Nc)
        bmat = bmat * scale[None, :]
        bias = (np.zeros(Nc) if bias is None else bias) * scale + shift
    dims = [Dim(c, {"a": sa_, "b": sb_, "out": so, "res": so}) for c, sa_, sb_, so in batch]
    dims.append(Dim(rows, {"a": a_row, "out": Nc, "res": Nc, **{f"op{i}": src[3] for i, src in enumerate(srcs)
                                                     if src is not None and src[0] == "strided"}}))
    spec = GemmSpec(n_cols=Nc, k_dims=[(K, a_k)], rows=_merge_rows(dims), groups=None,
                    a=ctx.ptr(A), out=ctx.ptr(out), program=program, operands=srcs)
    if bmat is not None:
        spec.b_packed = bmat.astype(np.float32)[None]
        spec.bias = bias.reshape(1, Nc) if np.any(bias) else None
    else:
        spec.b_ptr, spec.b_k, spec.b_col = b_ptr, b_k, b_col
        spec.bias = None if bias is None else bias.reshape(1, Nc)
    run_gemm(ctx, spec)


def _batch_dims(a2, b2, ob, M, K, N):
    """(count, A stride, B stride, out stride) per output batch dim (0 where broadcast)."""
    r = len(ob)
    pa = (1,) * (r - len(a2[:-2])) + tuple(a2[:-2])
    pb = (1,) * (r - len(b2[:-2])) + tuple(b2[:-2])
    sa, sb, so = M * K, K * N, M * N
    out = [None] * r
    for i in reversed(range(r)):
        out[i] = (ob[i], sa if pa[i] != 1 else 0, sb if pb[i] != 1 else 0, so)
        sa *= pa[i]
        sb *= pb[i]
        so *= ob[i]
    return out


# ---- int8 ------------------------------------------------------------------------------------------
def _requant_cols(ins_reads, ctx, n: int) -> dict:
    mult = np.broadcast_to(ctx.const_data(ins_reads[3]).astype(np.int64).reshape(-1), (n,))
    shift = np.broadcast_to(ctx.const_data(ins_reads[4]).astype(np.int64).reshape(-1), (n,))
    out = {"mult": np.ascontiguousarray(mult), "shift": np.ascontiguousarray(shift)}
    if len(ins_reads) > 5 and ins_reads[5]:   # (a fused LeakyReLU: the multiplier of negative accumulators)
        out["mult_neg"] = np.ascontiguousarray(
            np.broadcast_to(ctx.const_data(ins_reads[5]).astype(np.int64).reshape(-1), (n,)))
    return out


def emit_qconv(ctx) -> None:
    """QConv: int8 x int8 -> int32, requantized per channel. z_in is folded into the bias
    (the padded input is filled with z_in, so padding still contributes 0)."""
    ins = ctx.ins
    a = ins.attrs
    x, out = ins.reads[0], ctx.output()
    wdata = ctx.const_data(ins.reads[1]).astype(np.int64)
    bias = ctx.const_data(ins.reads[2]).astype(np.int64)
    xt, ot = ctx.type(x), ctx.type(out)
    nd = xt.rank - 2
    N, C = xt.shape[:2]
    M = ot.shape[1]
    G = a["group"]
    Cg, Mg = C // G, M // G
    if nd == 1:
        wdata = wdata[:, :, None, :]
        (Hp, Wp), (OH, OW) = (1, xt.shape[2]), (1, ot.shape[2])
        st, dl = (1, a["strides"][0]), (1, a["dilations"][0])
    else:
        (Hp, Wp), (OH, OW) = xt.shape[2:], ot.shape[2:]
        st, dl = tuple(a["strides"]), tuple(a["dilations"])
    kh, kw = wdata.shape[2:]
    bias = bias - a["z_in"] * wdata.reshape(M, -1).sum(axis=1)
    rq = {**_requant_cols(ins.reads, ctx, M), "z_out": a["z_out"], "lo": a["lo"], "hi": a["hi"]}
    if G == C == M:
        from hwc.backends.cpu.kernels.dwconv import emit_depthwise_int8

        return emit_depthwise_int8(ctx, x, out, wdata.reshape(M, kh, kw), bias, (N, C, Hp, Wp), (OH, OW),
                                   (kh, kw), st, dl, rq)
    bmat = wdata.reshape(G, Mg, Cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(G, kh * kw * Cg, Mg)
    optr, ost = ctx.out_view(out)
    dims = _conv_rows(N, OH, OW, M, Hp, Wp, C, st, ost, nd, ctx.layout(x))
    spec = GemmSpec(
        n_cols=Mg, k_dims=_merge_k(_conv_k(kh, kw, Cg, Hp, Wp, C, dl, ctx.layout(x))), rows=_merge_rows(dims),
        groups=Dim(G, {"a": Cg * _chan_stride(Hp, Wp, ctx.layout(x)), "out": Mg, "res": Mg, "col": Mg, "bias": Mg}),
        a=ctx.ptr(x), out=optr,
        b_packed=bmat.astype(np.int8), bias=bias.astype(np.int32).reshape(G, Mg),
        program=EwProgram([None]), operands=[None], requant=rq)
    run_gemm(ctx, spec)


def emit_qgemm(ctx) -> None:
    """QGemm: a int8 [M, K] times w int8 [N, K] transposed, int32 accumulators, requantized."""
    ins = ctx.ins
    a = ins.attrs
    A, out = ins.reads[0], ins.writes[0]
    w = ctx.const_data(ins.reads[1]).astype(np.int64)
    bias = ctx.const_data(ins.reads[2]).astype(np.int64) - a["z_in"] * w.sum(axis=1)
    M, K = ctx.type(A).shape
    Nc = w.shape[0]
    rq = {**_requant_cols(ins.reads, ctx, Nc), "z_out": a["z_out"], "lo": a["lo"], "hi": a["hi"]}
    spec = GemmSpec(n_cols=Nc, k_dims=[(K, 1)], rows=[Dim(M, {"a": K, "out": Nc})], groups=None,
                    a=ctx.ptr(A), out=ctx.ptr(out), b_packed=w.T.astype(np.int8)[None],
                    bias=bias.astype(np.int32).reshape(1, Nc), program=EwProgram([None]), operands=[None],
                    requant=rq)
    run_gemm(ctx, spec)
