"""Post-processing: the PPU (bias + requantize) and the VEC unit (MAX, ADD), one datapath.

`PostPipe` is the lane-wise arithmetic of hwc/quant/arith.py, bit-exact:
  PPU      y = clamp(((wrap32(acc + bias) * M + 2**(s-1)) >> s) + z_out, lo, hi)     (requantize)
  VEC ADD  y = clamp((((a - z_a)*Ma + (b - z_b)*Mb + 2**(s-1)) >> s) + z_out, lo, hi) (add_requantize)
  VEC MAX  y = max(a, b)
with 64-bit two's-complement intermediates (numpy's int64), `s = clamp(shift, 1, 62)` (the
range arith.quantize_multiplier produces; the clamp makes every PARAM byte well defined)
and rounding half toward +inf (the arithmetic shift floors). VEC ADD feeds the two
operands as consecutive tokens through the same multiplier and sums the products, so
each lane has one 34x32 multiplier, built from four 17x16 partial products (each fits an
18x18 DSP) with registers between the partial products and every 64-bit adder.

Pipe stages (input in cycle c, one register each; y valid in cycle c + PIPE_LATENCY):
  S1 X = operand + addend (34 bit), M select     S2 four partial products
  S3 two partial sums                            S4 p = sum (64 bit)
  S5 v = p (+ v of the previous token: VEC ADD)  S6 q = v + 2**(s-1)
  S7 r = q >> s (arithmetic)                     S8 r saturated to 10 bits (|z_out|, lo, hi fit)
  S9 y = clamp(r + z_out, lo, hi), or max(a, b)

`PostEngine` sequences an instruction: it reads the PARAM entry (PARAM_ENTRY_BEATS beats,
one per cycle), prepares the lane parameters in one cycle, then streams:
  PPU: one ACC line read per cycle; the result is written to ACT PIPE_LATENCY + 1 cycles
       after its read, through the compute ACT port.
  VEC: frames of three cycles on the single compute ACT port: read a, read b, write
       (the result of an earlier frame). PIPE_LATENCY + 1 = 10 = 1 (mod 3) puts every
       result write exactly on a write slot, so reads and writes never collide.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwc import isa
from hwc.quant import arith

from .loop import loop2d
from .params import TileParams, field

PIPE_LATENCY = isa.POST_PIPE_STAGES
assert PIPE_LATENCY == 9, "PostPipe below is written with nine register stages"
SAT_BITS = 10  # r is saturated to 10 bits before + z_out: any |r| > 511 clamps the same way


class PostPipe(wiring.Component):
    """Lane-wise requantization pipeline (see the module docstring). Parameters are held
    by the caller for the whole instruction; tokens enter every cycle."""

    def __init__(self, n: int):
        self.n = n
        super().__init__({
            "in_valid": In(1),     # token carries a result (PPU line, or VEC b operand)
            "in_vec": In(1),       # 1: VEC operands (int8 lines in `act_in`), 0: PPU (`acc_in`)
            "in_second": In(1),    # VEC: this token is the b operand (a came in the previous cycle)
            "in_tag": In(32),      # carried to out_tag (the ACT write address)
            "acc_in": In(32 * n),
            "act_in": In(8 * n),
            "op_max": In(1),       # VEC MAX instead of ADD
            # per-lane parameters (PPU) / broadcast (VEC)
            "bias": In(32 * n),
            "mult": In(32 * n),
            "shift": In(6 * n),    # already clamped to [1, 62]
            "z_out": In(signed(8)),
            "lo": In(signed(8)),
            "hi": In(signed(8)),
            # VEC ADD: a uses (za, ma), b uses (zb, mb)
            "za": In(signed(32)), "zb": In(signed(32)), "ma": In(signed(32)), "mb": In(signed(32)),
            "out_valid": Out(1),
            "busy": Out(1),        # a result token is in the pipe
            "out_tag": Out(32),
            "y": Out(8 * n),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n
        # token pipeline: valid and tag for S1..S9
        v = [Signal(name=f"v{k}") for k in range(PIPE_LATENCY + 1)]
        tag = [Signal(32, name=f"tag{k}") for k in range(PIPE_LATENCY + 1)]
        m.d.comb += [v[0].eq(self.in_valid), tag[0].eq(self.in_tag)]
        for k in range(PIPE_LATENCY):
            m.d.sync += [v[k + 1].eq(v[k]), tag[k + 1].eq(tag[k])]
        m.d.comb += [self.out_valid.eq(v[PIPE_LATENCY]), self.out_tag.eq(tag[PIPE_LATENCY]),
                     self.busy.eq(Cat(*v[1:]).any())]
        # the "second" flag reaches S5 with its token
        sec = [Signal(name=f"sec{k}") for k in range(5)]
        m.d.comb += sec[0].eq(self.in_vec & self.in_second)
        for k in range(4):
            m.d.sync += sec[k + 1].eq(sec[k])

        for lane in range(n):
            acc = self.acc_in[32 * lane:32 * lane + 32].as_signed()
            a8 = self.act_in[8 * lane:8 * lane + 8].as_signed()
            bias = self.bias[32 * lane:32 * lane + 32].as_signed()
            mult = self.mult[32 * lane:32 * lane + 32].as_signed()
            sh = self.shift[6 * lane:6 * lane + 6]
            # S1
            x = Signal(signed(34), name=f"x{lane}")
            mm = Signal(signed(32), name=f"m{lane}")
            ppu_x = Signal(signed(32), name=f"ppux{lane}")
            m.d.comb += ppu_x.eq(acc + bias)  # wraps to 32 bits (int32 + int32 in numpy)
            with m.If(self.in_vec):
                m.d.sync += [x.eq(a8 - Mux(self.in_second, self.zb, self.za)),
                             mm.eq(Mux(self.in_second, self.mb, self.ma))]
            with m.Else():
                m.d.sync += [x.eq(ppu_x), mm.eq(mult)]
            # VEC MAX: a is held for one cycle, max formed with b, delayed to S9
            a_hold = Signal(signed(8), name=f"ahold{lane}")
            m.d.sync += a_hold.eq(a8)
            mx = [Signal(signed(8), name=f"mx{lane}_{k}") for k in range(PIPE_LATENCY - 1)]
            m.d.sync += mx[0].eq(Mux(a_hold > a8, a_hold, a8))
            for k in range(PIPE_LATENCY - 2):
                m.d.sync += mx[k + 1].eq(mx[k])
            # S2: partial products of X = xh*2**17 + xl (xl unsigned) and M = mh*2**16 + ml (ml unsigned)
            xl, xh = x[:17], x[17:].as_signed()
            ml, mh = mm[:16], mm[16:].as_signed()
            pll = Signal(unsigned(33), name=f"pll{lane}")
            plh = Signal(signed(34), name=f"plh{lane}")
            phl = Signal(signed(34), name=f"phl{lane}")
            phh = Signal(signed(33), name=f"phh{lane}")
            m.d.sync += [pll.eq(xl * ml), plh.eq(xl * mh), phl.eq(xh * ml), phh.eq(xh * mh)]
            # S3
            sa = Signal(signed(64), name=f"sa{lane}")
            sb = Signal(signed(64), name=f"sb{lane}")
            m.d.sync += [sa.eq(pll + (plh << 16)), sb.eq((phl + (phh << 16)) << 17)]
            # S4
            p = Signal(signed(64), name=f"p{lane}")
            m.d.sync += p.eq(sa + sb)
            # S5
            vv = Signal(signed(64), name=f"vv{lane}")
            m.d.sync += vv.eq(p + Mux(sec[4], vv, 0))
            # S6: + 2**(s-1) (sh >= 1); the shift amount is stable for the whole instruction
            q = Signal(signed(64), name=f"q{lane}")
            rnd = Signal(64, name=f"rnd{lane}")
            m.d.comb += rnd.eq(Const(1, 64) << (sh - 1)[:6])
            m.d.sync += q.eq(vv + rnd)
            # S7
            r = Signal(signed(64), name=f"r{lane}")
            m.d.sync += r.eq(q >> sh)
            # S8
            rs = Signal(signed(SAT_BITS), name=f"rs{lane}")
            top = r[SAT_BITS - 1:]
            smax, smin = (1 << (SAT_BITS - 1)) - 1, -(1 << (SAT_BITS - 1))
            with m.If((top == 0) | (top == (1 << len(top)) - 1)):
                m.d.sync += rs.eq(r[:SAT_BITS])
            with m.Elif(r[63]):
                m.d.sync += rs.eq(smin)
            with m.Else():
                m.d.sync += rs.eq(smax)
            # S9
            t = Signal(signed(SAT_BITS + 1), name=f"t{lane}")
            t_lo = Signal(signed(SAT_BITS + 1), name=f"tlo{lane}")
            y = Signal(signed(8), name=f"y{lane}")
            m.d.comb += [t.eq(rs + self.z_out), t_lo.eq(Mux(t < self.lo, self.lo, t))]
            with m.If(self.op_max):
                m.d.sync += y.eq(mx[PIPE_LATENCY - 2])
            with m.Else():
                m.d.sync += y.eq(Mux(t_lo > self.hi, self.hi, t_lo))
            m.d.comb += self.y[8 * lane:8 * lane + 8].eq(y)
        return m


def clamp_shift(shift: int) -> int:
    """The shift the PPU applies for a PARAM shift byte (the Python model uses the same)."""
    return min(max(shift, arith.SHIFT_MIN), arith.SHIFT_MAX)


class PostEngine(wiring.Component):
    """Sequencer of PPU and VEC instructions (see the module docstring)."""

    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1),
            "word": In(isa.INSN_BITS),
            "busy": Out(1),
            "param_addr": Out(p.param_bits),
            "param_data": In(p.beat_bits),
            "acc_raddr": Out(p.acc_bits),      # zero when unused (OR-muxed with the GEMM engine)
            "acc_rdata": In(p.acc_line_bits),
            "act_addr": Out(p.act_bits),       # zero when unused
            "act_data": In(p.line_bits),
            "act_we": Out(1),
            "act_wdata": Out(p.line_bits),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        n, peb = p.n, p.param_entry_beats
        m.submodules.pipe = pipe = PostPipe(n)
        w = self.word
        ppu, vec = isa.Op.PPU, isa.Op.VEC
        w_vec = w[isa.OPCODE_LSB:isa.OPCODE_LSB + isa.OPCODE_BITS] == vec

        IDLE, PARAM, PREP, STREAM, DRAIN = range(5)
        state = Signal(range(5))
        is_vec = Signal()
        op_max = Signal()
        pbase = Signal(p.param_bits)
        k = Signal(range(peb + 1))   # PARAM beats requested
        preg = Signal(peb * p.beat_bits)
        slot = Signal(range(3))      # VEC frame slot: 0 read a, 1 read b, 2 write

        # one loop, three address streams: PPU (ACC in, -, ACT out); VEC (a, b, out)
        def sel(name_vec, name_ppu):
            return Mux(w_vec, field(w, vec, name_vec), field(w, ppu, name_ppu))

        step = Signal()
        in_w = max(p.acc_bits, p.act_bits)
        loop = loop2d(m, "pp", load=self.start, step=step,
                      n_outer=sel("n_outer", "n_outer"), n_inner=sel("n_inner", "n_inner"),
                      streams=[(sel("a", "acc"), sel("in_so", "acc_so"), sel("in_si", "acc_si"), in_w),
                               (field(w, vec, "b"), field(w, vec, "in_so"), field(w, vec, "in_si"), p.act_bits),
                               (sel("out", "out"), sel("out_so", "out_so"), sel("out_si", "out_si"), p.act_bits)])
        in_ptr, b_ptr, out_ptr = loop.ptrs

        # ---- PARAM entry: PEB reads, data one cycle later ----
        pread = (state == PARAM) & (k < peb)
        m.d.comb += self.param_addr.eq(Mux(pread, pbase + k, 0))
        with m.If(pread):
            m.d.sync += k.eq(k + 1)
        pvalid = Signal()
        pidx = Signal(range(peb))
        m.d.sync += [pvalid.eq(pread), pidx.eq(k)]
        with m.If(pvalid):
            for b in range(peb):
                with m.If(pidx == b):
                    m.d.sync += preg[b * p.beat_bits:(b + 1) * p.beat_bits].eq(self.param_data)
        with m.If((state == PARAM) & (k == peb)):  # the last beat is written at the end of this cycle
            m.d.sync += state.eq(PREP)

        # ---- PREP: lane parameters from the entry (layout: hwc.isa.pack_param_entry) ----
        def byte(i):
            return preg[8 * i:8 * i + 8]

        def i32(i):
            return preg[8 * i:8 * i + 32].as_signed()

        def clamp_sh(s):
            return Mux(s < arith.SHIFT_MIN, arith.SHIFT_MIN, Mux(s > arith.SHIFT_MAX, arith.SHIFT_MAX, s))[:6]

        bias, mult, shift = Signal(32 * n), Signal(32 * n), Signal(6 * n)
        z_out, lo, hi = Signal(signed(8)), Signal(signed(8)), Signal(signed(8))
        za, zb, ma, mb = (Signal(signed(32), name=nm) for nm in ("za", "zb", "ma", "mb"))
        with m.If(state == PREP):
            m.d.sync += [state.eq(STREAM), slot.eq(0)]
            for lane in range(n):
                m.d.sync += [bias[32 * lane:32 * lane + 32].eq(i32(4 * lane)),
                             mult[32 * lane:32 * lane + 32].eq(i32(4 * n + 4 * lane)),
                             shift[6 * lane:6 * lane + 6].eq(clamp_sh(Mux(is_vec, byte(8 * n), byte(8 * n + lane))))]
            m.d.sync += [z_out.eq(byte(9 * n).as_signed()), lo.eq(byte(9 * n + 1).as_signed()),
                         hi.eq(byte(9 * n + 2).as_signed()),
                         za.eq(i32(0)), zb.eq(i32(4)), ma.eq(i32(4 * n)), mb.eq(i32(4 * n + 4))]

        # ---- STREAM ----
        streaming = state == STREAM
        ppu_read = streaming & ~is_vec
        vec_a = streaming & is_vec & (slot == 0)
        vec_b = streaming & is_vec & (slot == 1)
        m.d.comb += step.eq(ppu_read | vec_b)
        with m.If(streaming & is_vec):
            m.d.sync += slot.eq(Mux(slot == 2, 0, slot + 1))
        with m.If(step & loop.last):
            m.d.sync += state.eq(DRAIN)
        m.d.comb += self.acc_raddr.eq(Mux(ppu_read, in_ptr[:p.acc_bits], 0))
        # a token enters the pipe one cycle after its read, with the read data
        tv, tsec, ttag = Signal(), Signal(), Signal(p.act_bits)
        m.d.sync += [tv.eq(step), tsec.eq(vec_b), ttag.eq(out_ptr)]
        m.d.comb += [pipe.in_valid.eq(tv), pipe.in_vec.eq(is_vec), pipe.in_second.eq(tsec),
                     pipe.in_tag.eq(ttag), pipe.acc_in.eq(self.acc_rdata), pipe.act_in.eq(self.act_data),
                     pipe.op_max.eq(op_max), pipe.bias.eq(bias), pipe.mult.eq(mult), pipe.shift.eq(shift),
                     pipe.z_out.eq(z_out), pipe.lo.eq(lo), pipe.hi.eq(hi),
                     pipe.za.eq(za), pipe.zb.eq(zb), pipe.ma.eq(ma), pipe.mb.eq(mb)]
        # the ACT compute port: VEC reads in slots 0/1; every result write lands in a slot 2
        assert (PIPE_LATENCY + 1) % 3 == 1, "VEC writes would collide with VEC reads"
        rd_addr = Mux(vec_a, in_ptr[:p.act_bits], b_ptr)
        m.d.comb += [self.act_we.eq(pipe.out_valid), self.act_wdata.eq(Mux(pipe.out_valid, pipe.y, 0)),
                     self.act_addr.eq(Mux(pipe.out_valid, pipe.out_tag[:p.act_bits],
                                          Mux(vec_a | vec_b, rd_addr, 0)))]

        # ---- DRAIN: idle once the last result is written ----
        pipe_busy = tv | pipe.busy
        with m.If((state == DRAIN) & ~pipe_busy):
            m.d.sync += state.eq(IDLE)
        m.d.comb += self.busy.eq(((state != IDLE) & (state != DRAIN)) | pipe_busy)

        with m.If(self.start):  # last: wins over the DRAIN -> IDLE transition
            m.d.sync += [state.eq(PARAM), k.eq(0), is_vec.eq(w_vec),
                         op_max.eq(w_vec & (field(w, vec, "op") == isa.VecOp.MAX)),
                         pbase.eq(Mux(w_vec, field(w, vec, "param"), field(w, ppu, "param")) * peb)]
        return m
