"""Instruction fetch, pre-decode (all error checks) and the prefetch FIFO.

Fetch: one imem request (one 128-bit instruction) per cycle while the FIFO has a free
slot, counting requests in flight: a slot is taken at the request and freed by the issue
of the instruction in it, so the FIFO can never overflow and instruction k is requested
at `max(start + k, issue(k - fifo_depth) + 1)` (docs/tile.md section 4).

Pre-decode (PREDECODE_STAGES = 3 register stages between the imem data and the FIFO
write) computes the instruction's error code once, so the issue stage only looks at two
bits: every address an instruction will touch lies in a 2-D range
`base + i*so + j*si` (i < n_o, j < n_i), whose extremes are at its corners:
  stage 1: per opcode, up to three ranges (base, n_o - 1, so, n_i - 1, si, base - limit),
           zero counts, bad LOAD.mem / VEC.op, GEMM.wblk and PPU/VEC.param limits
  stage 2: the two products (n_o - 1)*so and (n_i - 1)*si per range
  stage 3: base + min(0, po) and base - limit + max(0, po)
  write  : lowest = .. + min(0, pi) < 0 or highest - limit = .. + max(0, pi) >= 0 -> OUT_OF_RANGE
An instruction arrives (may issue) FETCH_LATENCY = Lm + 1 + PREDECODE_STAGES cycles after
its request. The error code has priority ILLEGAL_OPCODE > BAD_FIELD > OUT_OF_RANGE.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, ResetInserter, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from hwc import isa

from .params import DRAM_ADDR_BITS, PC_BITS, TileParams, field, opcode

PREDECODE_STAGES = isa.PREDECODE_STAGES
assert PREDECODE_STAGES == 3, "Fetch below is written with three pre-decode register stages"
N_RANGES = 3
BASE_W, COUNT_W, STRIDE_W = DRAM_ADDR_BITS + 1, 16, 26
PROD_W = COUNT_W + STRIDE_W
SUM_W = PROD_W + 3


def _ranges(w, p: TileParams) -> dict:
    """op -> list of (base, n_outer, outer stride, n_inner, inner stride, limit) for every address stream."""
    O = isa.Op
    ext = 1 << DRAM_ADDR_BITS
    one, zero = Const(1, 2), Const(0, 2)

    def f(op, name):
        return field(w, op, name)

    mem = f(O.LOAD, "mem")
    load_limit = Mux(mem == isa.Mem.ACT, p.act_lines, Mux(mem == isa.Mem.WGT, p.wgt_rows, p.param_beats))
    rows = {o: (f(o, "rows"), f(o, "row_beats")) for o in (O.LOAD, O.STORE)}
    loops = {o: (f(o, "n_outer"), f(o, "n_inner")) for o in (O.GEMM, O.PPU, O.VEC)}
    return {
        O.LOAD: [(f(O.LOAD, "dram"), rows[O.LOAD][0], f(O.LOAD, "dram_stride"), rows[O.LOAD][1], one, ext),
                 (f(O.LOAD, "sram"), rows[O.LOAD][0], f(O.LOAD, "sram_stride"), rows[O.LOAD][1], one, load_limit)],
        O.STORE: [(f(O.STORE, "dram"), rows[O.STORE][0], f(O.STORE, "dram_stride"), rows[O.STORE][1], one, ext),
                  (f(O.STORE, "sram"), rows[O.STORE][0], f(O.STORE, "sram_stride"), rows[O.STORE][1], one,
                   p.act_lines)],
        O.GEMM: [(f(O.GEMM, "act"), loops[O.GEMM][0], f(O.GEMM, "act_so"), loops[O.GEMM][1], f(O.GEMM, "act_si"),
                  p.act_lines),
                 (f(O.GEMM, "acc"), loops[O.GEMM][0], f(O.GEMM, "acc_so"), loops[O.GEMM][1], f(O.GEMM, "acc_si"),
                  p.acc_lines)],
        O.PPU: [(f(O.PPU, "acc"), loops[O.PPU][0], f(O.PPU, "acc_so"), loops[O.PPU][1], f(O.PPU, "acc_si"),
                 p.acc_lines),
                (f(O.PPU, "out"), loops[O.PPU][0], f(O.PPU, "out_so"), loops[O.PPU][1], f(O.PPU, "out_si"),
                 p.act_lines)],
        O.VEC: [(f(O.VEC, "a"), loops[O.VEC][0], f(O.VEC, "in_so"), loops[O.VEC][1], f(O.VEC, "in_si"), p.act_lines),
                (f(O.VEC, "b"), loops[O.VEC][0], f(O.VEC, "in_so"), loops[O.VEC][1], f(O.VEC, "in_si"), p.act_lines),
                (f(O.VEC, "out"), loops[O.VEC][0], f(O.VEC, "out_so"), loops[O.VEC][1], f(O.VEC, "out_si"),
                 p.act_lines)],
        O.FILL: [(f(O.FILL, "addr"), one, zero, f(O.FILL, "count"), one, p.act_lines)],
    }


def _flags(w, p: TileParams) -> dict:
    """op -> (bad_field, scalar_out_of_range) as Values."""
    O = isa.Op

    def f(op, name):
        return field(w, op, name)

    def zero(op, *names):
        out = Const(0, 1)
        for nm in names:
            out = out | (f(op, nm) == 0)
        return out

    return {
        O.LOAD: (zero(O.LOAD, "rows", "row_beats") | (f(O.LOAD, "mem") > max(isa.Mem)), Const(0, 1)),
        O.STORE: (zero(O.STORE, "rows", "row_beats"), Const(0, 1)),
        O.GEMM: (zero(O.GEMM, "n_outer", "n_inner"), f(O.GEMM, "wblk") >= p.wgt_blocks),
        O.PPU: (zero(O.PPU, "n_outer", "n_inner"), f(O.PPU, "param") >= p.param_entries),
        O.VEC: (zero(O.VEC, "n_outer", "n_inner") | (f(O.VEC, "op") > max(isa.VecOp)),
                f(O.VEC, "param") >= p.param_entries),
        O.FILL: (zero(O.FILL, "count"), Const(0, 1)),
    }


class Fetch(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1),        # reset the fetch state (program start)
            "run": In(1),          # request instructions while high
            "prog_addr": In(PC_BITS),
            "imem_addr": Out(PC_BITS),
            "imem_valid": Out(1),
            "imem_ready": In(1),
            "imem_data": In(isa.INSN_BITS),
            "imem_data_valid": In(1),
            "head_valid": Out(1),
            "head_word": Out(isa.INSN_BITS),
            "head_err": Out(isa.ERROR_CODE_BITS),
            "pop": In(1),
            "busy": Out(1),        # requests outstanding or instructions in pre-decode
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        depth = p.fifo_depth
        fifo = SyncFIFO(width=isa.INSN_BITS + isa.ERROR_CODE_BITS, depth=depth)
        m.submodules.fifo = ResetInserter(self.start)(fifo)

        # ---- requests ----
        base = Signal(PC_BITS)
        next_k = Signal(PC_BITS)
        credits = Signal(range(depth + 1))
        outstanding = Signal(range(depth + 1))
        accepted = self.imem_valid & self.imem_ready
        m.d.comb += [self.imem_valid.eq(self.run & (credits != 0)), self.imem_addr.eq(base + next_k)]
        m.d.sync += [credits.eq(credits - accepted + self.pop),
                     outstanding.eq(outstanding + accepted - self.imem_data_valid)]
        with m.If(accepted):
            m.d.sync += next_k.eq(next_k + 1)
        with m.If(self.start):
            m.d.sync += [base.eq(self.prog_addr), next_k.eq(0), credits.eq(depth)]

        # ---- pre-decode ----
        w = self.imem_data
        op = opcode(w)
        ranges, flags = _ranges(w, p), _flags(w, p)
        legal = Const(0, 1)
        for o in isa.Op:
            legal = legal | (op == o)
        v1, v2, v3 = Signal(), Signal(), Signal()
        w1, w2, w3 = Signal(isa.INSN_BITS), Signal(isa.INSN_BITS), Signal(isa.INSN_BITS)
        ill1, bad1, sc1 = Signal(), Signal(), Signal()
        ill2, bad2, sc2 = Signal(), Signal(), Signal()
        ill3, bad3, sc3 = Signal(), Signal(), Signal()
        m.d.sync += [v1.eq(self.imem_data_valid), v2.eq(v1), v3.eq(v2), w1.eq(w), w2.eq(w1), w3.eq(w2),
                     ill1.eq(~legal), ill2.eq(ill1), ill3.eq(ill2), bad2.eq(bad1), bad3.eq(bad2),
                     sc2.eq(sc1), sc3.eq(sc2)]
        with m.If(self.start):
            m.d.sync += [v1.eq(0), v2.eq(0), v3.eq(0)]
        with m.Switch(op):
            for o, (bad, sc) in flags.items():
                with m.Case(o):
                    m.d.sync += [bad1.eq(bad), sc1.eq(sc)]
            with m.Default():
                m.d.sync += [bad1.eq(0), sc1.eq(0)]

        oor = Const(0, 1)
        for r in range(N_RANGES):
            act = Signal(name=f"r{r}_act")
            base1 = Signal(BASE_W, name=f"r{r}_base")
            bml1 = Signal(signed(BASE_W + 2), name=f"r{r}_bml")
            nom1 = Signal(signed(COUNT_W), name=f"r{r}_nom1")
            nim1 = Signal(signed(COUNT_W), name=f"r{r}_nim1")
            so1 = Signal(signed(STRIDE_W), name=f"r{r}_so")
            si1 = Signal(signed(STRIDE_W), name=f"r{r}_si")
            with m.Switch(op):
                for o, rl in ranges.items():
                    with m.Case(o):
                        if r < len(rl):
                            b, no, so, ni, si, limit = rl[r]
                            m.d.sync += [act.eq(1), base1.eq(b), bml1.eq(b - limit), nom1.eq(no - 1),
                                         nim1.eq(ni - 1), so1.eq(so), si1.eq(si)]
                        else:
                            m.d.sync += act.eq(0)
                with m.Default():
                    m.d.sync += act.eq(0)
            act2, act3 = Signal(name=f"r{r}_act2"), Signal(name=f"r{r}_act3")
            base2, bml2 = Signal(BASE_W, name=f"r{r}_base2"), Signal(signed(BASE_W + 2), name=f"r{r}_bml2")
            po2, pi2, pi3 = (Signal(signed(PROD_W), name=f"r{r}_{nm}") for nm in ("po2", "pi2", "pi3"))
            lo3, hi3 = Signal(signed(SUM_W), name=f"r{r}_lo3"), Signal(signed(SUM_W), name=f"r{r}_hi3")
            m.d.sync += [act2.eq(act), act3.eq(act2), base2.eq(base1), bml2.eq(bml1),
                         po2.eq(nom1 * so1), pi2.eq(nim1 * si1), pi3.eq(pi2),
                         lo3.eq(base2 + Mux(po2 < 0, po2, 0)), hi3.eq(bml2 + Mux(po2 > 0, po2, 0))]
            lo = lo3 + Mux(pi3 < 0, pi3, 0)
            hi = hi3 + Mux(pi3 > 0, pi3, 0)
            oor = oor | (act3 & ((lo < 0) | (hi >= 0)))

        E = isa.ErrorCode
        err = Signal(isa.ERROR_CODE_BITS)
        m.d.comb += err.eq(Mux(ill3, E.ILLEGAL_OPCODE, Mux(bad3, E.BAD_FIELD,
                                                            Mux(oor | sc3, E.OUT_OF_RANGE, E.NONE))))
        m.d.comb += [fifo.w_en.eq(v3), fifo.w_data.eq((err << isa.INSN_BITS) | w3),
                     self.head_valid.eq(fifo.r_rdy), self.head_word.eq(fifo.r_data[:isa.INSN_BITS]),
                     self.head_err.eq(fifo.r_data[isa.INSN_BITS:]), fifo.r_en.eq(self.pop),
                     self.busy.eq((outstanding != 0) | v1 | v2 | v3)]
        return m
