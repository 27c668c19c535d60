"""Instruction fetch, pre-decode (all error checks) and the prefetch FIFO.

Fetch: one imem request (one 128-bit instruction) per cycle while the FIFO has a free
slot, counting requests in flight: a slot is taken at the request and freed by the issue
of the instruction in it, so the FIFO can never overflow and instruction k is requested
at `max(start + k, issue(k - fifo_depth) + 1)` (docs/tile.md section 4).

Pre-decode (PREDECODE_STAGES = 9 register stages between the imem data and the FIFO write)
computes the instruction's error code once, so the issue stage only looks at two bits: every
address an instruction will touch lies in a 2-D range `base + i*so + j*si` (i < n_o, j < n_i),
whose extremes are at its corners (stage k is the k-th register after the imem data):
  stage 1: the instruction word, registered as it arrives (with the depthwise mode, also a
           GEMM's n_inner - skip)
  stage 2: per opcode, up to three ranges (base, n_o - 1, so, n_i - 1, si, limit),
           zero counts, bad LOAD.mem / VEC.op, GEMM.dw/skip (set without the depthwise mode;
           with it, skip >= n_inner or skip without dw), GEMM.wblk and PPU/VEC.param limits
  stages 3, 4: (n_o - 1)*so and (n_i - 1)*si per range, as two 18x18-sized partial products each
           (registered multipliers, hw/dsp.py: the operands in stage 3, the products in stage 4);
           base - limit in stage 3
  stage 5: the partial products again (the route away from the DSP block is a stage of its own)
  stage 6: the products
  stage 7: base + min(0, po) and base - limit + max(0, po)
  stage 8: per range, lowest = .. + min(0, pi) < 0 or highest - limit = .. + max(0, pi) >= 0
  stage 9: the error code
  write  : into the FIFO
The FIFO's head moves into a head register (with its unit decoded one-hot), from which the
issue stage decides, so the issue decision starts from flip-flops. An instruction arrives
(may issue) FETCH_LATENCY = Lm + PREDECODE_STAGES + 2 cycles after its request (the FIFO
write and the head register are the 2). The error code has priority ILLEGAL_OPCODE > BAD_FIELD > OUT_OF_RANGE.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from hwc import isa

from . import dsp
from .params import DRAM_ADDR_BITS, PC_BITS, TileParams, dw_out_rows, field, opcode

PREDECODE_STAGES = isa.PREDECODE_STAGES
#: the head instruction's unit, one-hot in this order (NOP sets none)
KINDS = {"load": (isa.Op.LOAD,), "store": (isa.Op.STORE,), "gemm": (isa.Op.GEMM,),
         "compute": (isa.Op.PPU, isa.Op.VEC, isa.Op.FILL), "finish": (isa.Op.FINISH,)}
assert PREDECODE_STAGES == 9 and dsp.LATENCY == 2, "Fetch below is written with nine pre-decode stages"
N_RANGES = 3
BASE_W, COUNT_W, STRIDE_W = DRAM_ADDR_BITS + 1, 16, 26
PROD_W = COUNT_W + STRIDE_W
LO_BITS = 17  # the stride's low part in a partial product (unsigned, fits an 18x18 signed multiplier)
SUM_W = PROD_W + 3


def _ranges(w, p: TileParams, ni_dw=None) -> dict:
    """op -> list of (base, n_outer, outer stride, n_inner, inner stride, limit) for every address stream."""
    O = isa.Op
    ext = 1 << DRAM_ADDR_BITS
    one = Const(1, 2)

    def f(op, name):
        return field(w, op, name)

    mem = f(O.LOAD, "mem")
    load_limit = Mux(mem == isa.Mem.ACT, p.act_lines, Mux(mem == isa.Mem.WGT, p.wgt_rows, p.param_beats))
    rows = {o: (f(o, "rows"), f(o, "row_beats")) for o in (O.LOAD, O.STORE)}
    loops = {o: (f(o, "n_outer"), f(o, "n_inner")) for o in (O.GEMM, O.PPU, O.VEC)}
    out_dims = loops[O.PPU]
    if p.dw_post:   # PPU.dw with stride 2 writes every other row and column, not its context rows (isa.ppu_out_dims)
        dws, dwc = f(O.PPU, "dws"), f(O.PPU, "dwc")
        no, ni = loops[O.PPU]
        out_dims = (Mux(dws[1] | dwc.any(), dw_out_rows(w), no)[:len(no)],
                    Mux(dws[1] & ~f(O.PPU, "dwf").any(), (ni + 1 - dws[0]) >> 1, ni))
    return {
        O.LOAD: [(f(O.LOAD, "dram"), rows[O.LOAD][0], f(O.LOAD, "dram_stride"), rows[O.LOAD][1], one, ext),
                 (f(O.LOAD, "sram"), rows[O.LOAD][0], f(O.LOAD, "sram_stride"), rows[O.LOAD][1], one, load_limit)],
        O.STORE: [(f(O.STORE, "dram"), rows[O.STORE][0], f(O.STORE, "dram_stride"), rows[O.STORE][1], one, ext),
                  (f(O.STORE, "sram"), rows[O.STORE][0], f(O.STORE, "sram_stride"), rows[O.STORE][1], one,
                   p.act_lines)],
        O.GEMM: [(f(O.GEMM, "act"), loops[O.GEMM][0], f(O.GEMM, "act_so"), loops[O.GEMM][1], f(O.GEMM, "act_si"),
                  p.act_lines),
                 # depthwise mode: n_inner - skip accumulator writes per row (skip < n_inner, or BAD_FIELD)
                 (f(O.GEMM, "acc"), loops[O.GEMM][0], f(O.GEMM, "acc_so"),
                  ni_dw if p.depthwise else loops[O.GEMM][1],
                  f(O.GEMM, "acc_si"), p.acc_lines)],
        O.PPU: [(f(O.PPU, "acc"), loops[O.PPU][0], f(O.PPU, "acc_so"), loops[O.PPU][1], f(O.PPU, "acc_si"),
                 p.acc_lines),
                (f(O.PPU, "out"), out_dims[0], f(O.PPU, "out_so"), out_dims[1], f(O.PPU, "out_si"),
                 p.act_lines)],
        O.VEC: [(f(O.VEC, "a"), loops[O.VEC][0], f(O.VEC, "in_so"), loops[O.VEC][1], f(O.VEC, "in_si"), p.act_lines),
                (f(O.VEC, "b"), loops[O.VEC][0], f(O.VEC, "in_so"), loops[O.VEC][1], f(O.VEC, "in_si"), p.act_lines),
                (f(O.VEC, "out"), loops[O.VEC][0], f(O.VEC, "out_so"), loops[O.VEC][1], f(O.VEC, "out_si"),
                 p.act_lines)],
        O.FILL: [(f(O.FILL, "addr"), f(O.FILL, "rows"), f(O.FILL, "stride"), f(O.FILL, "count"), one, p.act_lines)],
    }


def _flags(w, p: TileParams, ni_dw=None) -> dict:
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
        # GEMM.dw / GEMM.skip (tile v2, docs/tile-v2.md): without the depthwise mode both must be 0; with
        # it, skip < n_inner when dw = 1, and skip = 0 when dw = 0
        # GEMM.dwp (scratchpad.dw_line_buffer): only with dw = 1 and a row pitch (n_inner) the row buffers hold
        # GEMM.dw9 (features.dw_ninth_tap): only with dwp = 1
        O.GEMM: ((zero(O.GEMM, "n_outer", "n_inner")
                  | (f(O.GEMM, "dw") & (ni_dw[-1] | (ni_dw == 0)))  # skip >= n_inner
                  | (~f(O.GEMM, "dw") & f(O.GEMM, "skip").any())
                  | (f(O.GEMM, "dwp") & (~f(O.GEMM, "dw") | (f(O.GEMM, "n_inner") < isa.DWP_MIN_PITCH)
                                         | (f(O.GEMM, "n_inner") > p.dw_lines)))
                  | (f(O.GEMM, "dw9") & ~f(O.GEMM, "dwp") if p.dw9 else f(O.GEMM, "dw9"))) if p.depthwise
                 else zero(O.GEMM, "n_outer", "n_inner") | f(O.GEMM, "dw").any() | f(O.GEMM, "skip").any()
                 | f(O.GEMM, "dwp").any() | f(O.GEMM, "dw9"),
                 # GEMM.dw9 reads the next block's first row too
                 (f(O.GEMM, "wblk") >= p.wgt_blocks) | (f(O.GEMM, "dw9") & (f(O.GEMM, "wblk") == p.wgt_blocks - 1))),
        # PPU.dw (features.dw_post): a row pitch (n_inner + 1) the row buffers hold; it reads three PARAM entries;
        # PPU.neg not with it
        O.PPU: ((zero(O.PPU, "n_outer", "n_inner") | (f(O.PPU, "dw") & ((f(O.PPU, "n_inner") + 1 < isa.DWP_MIN_PITCH)
                                                                       | (f(O.PPU, "n_inner") + 1 > p.dw_lines)))
                  | (f(O.PPU, "dws").any() & (~f(O.PPU, "dw") | (f(O.PPU, "dws") == 1)))
                  | (f(O.PPU, "dwc").any() & (~f(O.PPU, "dw") | (dw_out_rows(w) <= 0)))
                  | (f(O.PPU, "dwf").any() & (~f(O.PPU, "dw") | (f(O.PPU, "dwf") == 3)
                                              | (f(O.PPU, "dws").any() & (f(O.PPU, "dwf") != 1))))
                  | (f(O.PPU, "neg") & f(O.PPU, "dw")))
                 if p.dw_post else zero(O.PPU, "n_outer", "n_inner") | f(O.PPU, "dw") | f(O.PPU, "dws").any()
                 | f(O.PPU, "dwc").any() | f(O.PPU, "dwf").any(),
                 # (PPU.neg reads two entries)
                 f(O.PPU, "param") + (Mux(f(O.PPU, "dw"), isa.DW_POST_ENTRIES - 1, f(O.PPU, "neg")) if p.dw_post
                                      else f(O.PPU, "neg")) >= p.param_entries),
        O.VEC: (zero(O.VEC, "n_outer", "n_inner") | (f(O.VEC, "op") > max(isa.VecOp)),
                f(O.VEC, "param") >= p.param_entries),
        O.FILL: (zero(O.FILL, "count", "rows"), Const(0, 1)),
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
            "head_kind": Out(len(KINDS)),   # one-hot: which unit the head instruction needs (NOP: none)
            "head_load_act": Out(1),        # the head is a LOAD into ACT
            "pop": In(1),
            "busy": Out(1),        # requests outstanding or instructions in pre-decode
        } | ({"head_ppu_lag": Out(isa.PPU_MAX_LAG)} if p.post_unit else {})   # bit k-1: the head is a PPU, lag = k
          | ({"head_ppu_dw": Out(1)} if p.dw_post else {}))   # the head is a PPU.dw

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
        # stage 1 registers the instruction as it arrives; the checks start from that register
        w = Signal(isa.INSN_BITS, name="w_in", reset_less=True)
        m.d.sync += w.eq(self.imem_data)
        ni_dw = None
        if p.depthwise:  # beside it, a GEMM's n_inner - skip (ACC writes per row), so stage 2 has one adder
            ni_dw = Signal(signed(COUNT_W + 1), name="w_in_ni_dw", reset_less=True)
            m.d.sync += ni_dw.eq(field(self.imem_data, isa.Op.GEMM, "n_inner")
                                 - field(self.imem_data, isa.Op.GEMM, "skip"))
        op = opcode(w)
        ranges, flags = _ranges(w, p, ni_dw), _flags(w, p, ni_dw)
        legal = Const(0, 1)
        for o in isa.Op:
            legal = legal | (op == o)
        S = PREDECODE_STAGES

        def delayed(sig, name, k, reset_less=True):
            """[sig delayed by 1 .. k cycles]; index i is the value i+1 cycles later."""
            out = []
            for i in range(k):
                r = Signal(sig.shape(), name=f"{name}{i + 1}", reset_less=reset_less)
                m.d.sync += r.eq(sig if i == 0 else out[-1])
                out.append(r)
            return out

        vs = delayed(self.imem_data_valid, "v", S, reset_less=False)
        ws = delayed(self.imem_data, "w", S)
        with m.If(self.start):
            m.d.sync += [v.eq(0) for v in vs]
        ill1, bad1, sc1 = Signal(), Signal(), Signal()
        m.d.sync += ill1.eq(~legal)
        with m.Switch(op):
            for o, (bad, sc) in flags.items():
                with m.Case(o):
                    m.d.sync += [bad1.eq(bad), sc1.eq(sc)]
            with m.Default():
                m.d.sync += [bad1.eq(0), sc1.eq(0)]
        ill8, bad8, sc8 = (delayed(f, nm, 6)[-1] for f, nm in ((ill1, "ill"), (bad1, "bad"), (sc1, "sc")))

        oor = Const(0, 1)
        for r in range(N_RANGES):
            # stage 2: the range's descriptor, selected by opcode
            act = Signal(name=f"r{r}_act")
            base1 = Signal(BASE_W, name=f"r{r}_base", reset_less=True)
            lim1 = Signal(BASE_W, name=f"r{r}_lim", reset_less=True)
            nom1 = Signal(signed(COUNT_W), name=f"r{r}_nom1", reset_less=True)
            nim1 = Signal(signed(COUNT_W), name=f"r{r}_nim1", reset_less=True)
            so1 = Signal(signed(STRIDE_W), name=f"r{r}_so", reset_less=True)
            si1 = Signal(signed(STRIDE_W), name=f"r{r}_si", reset_less=True)
            with m.Switch(op):
                for o, rl in ranges.items():
                    with m.Case(o):
                        if r < len(rl):
                            b, no, so, ni, si, limit = rl[r]
                            m.d.sync += [act.eq(1), base1.eq(b), lim1.eq(limit), nom1.eq(no - 1),
                                         nim1.eq(ni - 1), so1.eq(so), si1.eq(si)]
                        else:
                            m.d.sync += act.eq(0)
                with m.Default():
                    m.d.sync += act.eq(0)
            act6 = delayed(act, f"r{r}_act", 5)[-1]
            base5 = delayed(base1, f"r{r}_base", 4)[-1]
            bml2 = Signal(signed(BASE_W + 2), name=f"r{r}_bml", reset_less=True)  # base - limit, a stage later
            m.d.sync += bml2.eq(base1 - lim1)
            bml5 = delayed(bml2, f"r{r}_bml", 3)[-1]
            # stages 3 to 6: (n - 1) * stride, as two 18x18-sized partial products (registered multipliers,
            # hw/dsp.py: operands in stage 3, products in stage 4), the products again, their sum
            prods = []
            for nm, cnt, stride in (("o", nom1, so1), ("i", nim1, si1)):
                lo_p = Signal(signed(COUNT_W + LO_BITS + 1), name=f"r{r}_p{nm}lo", reset_less=True)
                hi_p = Signal(signed(COUNT_W + STRIDE_W - LO_BITS), name=f"r{r}_p{nm}hi", reset_less=True)
                prod = Signal(signed(PROD_W), name=f"r{r}_p{nm}", reset_less=True)
                m.d.sync += [lo_p.eq(dsp.regmul(m, f"mul{r}{nm}lo", cnt, stride[:LO_BITS])[:len(lo_p)]),
                             hi_p.eq(dsp.regmul(m, f"mul{r}{nm}hi", cnt, stride[LO_BITS:].as_signed())[:len(hi_p)]),
                             prod.eq(lo_p + (hi_p << LO_BITS))]
                prods.append(prod)
            po5, pi5 = prods
            # stage 7: base + the outer extreme; stage 8: + the inner extreme, compared; stage 9: the code
            lo6 = Signal(signed(SUM_W), name=f"r{r}_lo6", reset_less=True)
            hi6 = Signal(signed(SUM_W), name=f"r{r}_hi6", reset_less=True)
            pi6 = Signal(signed(PROD_W), name=f"r{r}_pi6", reset_less=True)
            m.d.sync += [lo6.eq(base5 + Mux(po5 < 0, po5, 0)), hi6.eq(bml5 + Mux(po5 > 0, po5, 0)), pi6.eq(pi5)]
            lo = lo6 + Mux(pi6 < 0, pi6, 0)
            hi = hi6 + Mux(pi6 > 0, pi6, 0)
            oor8 = Signal(name=f"r{r}_oor")  # stage 8: this range leaves its memory
            m.d.sync += oor8.eq(act6 & ((lo < 0) | (hi >= 0)))
            oor = oor | oor8

        E = isa.ErrorCode
        err9 = Signal(isa.ERROR_CODE_BITS)
        m.d.sync += err9.eq(Mux(ill8, E.ILLEGAL_OPCODE, Mux(bad8, E.BAD_FIELD, Mux(oor | sc8, E.OUT_OF_RANGE,
                                                                                     E.NONE))))
        m.d.comb += [fifo.w_en.eq(vs[-1]), fifo.w_data.eq((err9 << isa.INSN_BITS) | ws[-1]),
                     self.busy.eq((outstanding != 0) | Cat(*vs).any())]

        # ---- head register: the issue stage decides from registers only ----
        head_v = Signal()
        head_w = Signal(isa.INSN_BITS, reset_less=True)
        head_e = Signal(isa.ERROR_CODE_BITS, reset_less=True)
        kind = Signal(len(KINDS), reset_less=True)
        load_act = Signal(reset_less=True)
        take = fifo.r_rdy & (~head_v | self.pop)
        nw = fifo.r_data[:isa.INSN_BITS]
        nop = opcode(nw)
        m.d.comb += fifo.r_en.eq(take)
        with m.If(take):
            m.d.sync += [head_v.eq(1), head_w.eq(nw), head_e.eq(fifo.r_data[isa.INSN_BITS:]),
                         load_act.eq((nop == isa.Op.LOAD) & (field(nw, isa.Op.LOAD, "mem") == isa.Mem.ACT))]
            m.d.sync += [kind[k].eq(Cat(*[nop == o for o in ops]).any()) for k, ops in enumerate(KINDS.values())]
        with m.Elif(self.pop):
            m.d.sync += head_v.eq(0)
        with m.If(self.start):
            m.d.sync += head_v.eq(0)
        m.d.comb += [self.head_valid.eq(head_v), self.head_word.eq(head_w), self.head_err.eq(head_e),
                     self.head_kind.eq(kind), self.head_load_act.eq(load_act)]
        if self.p.post_unit:
            ppu_lag = Signal(isa.PPU_MAX_LAG, reset_less=True)   # one-hot (or zero), pre-decoded
            with m.If(take):
                lag = field(nw, isa.Op.PPU, "lag")
                m.d.sync += ppu_lag.eq(Cat(*[(nop == isa.Op.PPU) & (lag == k) for k in range(1, isa.PPU_MAX_LAG + 1)]))
            m.d.comb += self.head_ppu_lag.eq(ppu_lag)
        if self.p.dw_post:
            ppu_dw = Signal(reset_less=True)
            with m.If(take):
                m.d.sync += ppu_dw.eq((nop == isa.Op.PPU) & field(nw, isa.Op.PPU, "dw"))
            m.d.comb += self.head_ppu_dw.eq(ppu_dw)
        return m
