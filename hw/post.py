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

Pipe stages (input in cycle c, one register each, every stage at most one carry chain or
a few LUT levels; y valid in cycle c + PIPE_LATENCY = c + 13):
  S0 the block RAM's read data                   S1 X = operand + addend (34 bit), M select
  S2/S3 four partial products, each a registered multiplier (hw/dsp.py: the operands registered
     in S2, the product in S3; on ECP5 both are the DSP block's own registers)
  S4 the products again (the route away from the DSP block is a stage of its own)
  S5 two partial sums                            S6 p = sum (64 bit)
  S7 v = p (+ v of the previous token: VEC ADD)
  S8/S9 a = v >> (s-1) (arithmetic, by 8s, then by 1s)   S10 a saturated to 11 bits
  S11 t = ((a + 1) >> 1) + z_out (the rounding: floor((v + 2**(s-1)) / 2**s) == (a + 1) >> 1),
      and the clamp's comparisons on a (against bounds derived from lo, hi, z_out)
  S12 y = clamp(t, lo, hi) by those flags, or max(a, b)
The parameters (bias ... hi) are constant while tokens are in the pipe and at least one cycle
before a token enters (the engine holds them from the PARAM read on).
The per-token controls (VEC or PPU, a or b operand) travel with the token in every lane, so no
control net fans out to all lanes.

`PostEngine` sequences an instruction: it reads the PARAM entry (PARAM_ENTRY_BEATS beats,
one per cycle), prepares the lane parameters in one cycle, then streams:
  PPU: one ACC line read per cycle; the result is written to ACT PIPE_LATENCY + 1 cycles
       after its read, through the compute ACT port.
  VEC: frames of three cycles on the single compute ACT port: read a, read b, write
       (the result of an earlier frame). MEM_LATENCY + PIPE_LATENCY = 16 = 1 (mod 3) puts every
       result write exactly on a write slot, so reads and writes never collide.
"""

from __future__ import annotations

from amaranth.hdl import C, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwc import isa
from hwc.quant import arith

from . import dsp
from .loop import loop2d
from .params import DUP, TileParams, field

PIPE_LATENCY = isa.POST_PIPE_STAGES
assert PIPE_LATENCY == 13 and dsp.LATENCY == 2, "PostPipe below is written with thirteen register stages"
ML = isa.MEM_LATENCY
WL = isa.MEM_WRITE_LATENCY
SAT_BITS = 10  # r saturated to about 10 bits before + z_out: any |r| > 511 clamps the same way


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
            "shm1": In(6 * n),     # shift - 1, the shift already clamped to [1, 62]
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
        L = PIPE_LATENCY
        # token pipeline: valid and tag, v[k] is the token k cycles after it entered
        v = [Signal(name=f"v{k}") for k in range(L + 1)]
        tag = [Signal(32, name=f"tag{k}", reset_less=True) for k in range(L + 1)]
        m.d.comb += [v[0].eq(self.in_valid), tag[0].eq(self.in_tag)]
        for k in range(L):
            m.d.sync += [v[k + 1].eq(v[k]), tag[k + 1].eq(tag[k])]
        m.d.comb += [self.out_valid.eq(v[L]), self.out_tag.eq(tag[L]), self.busy.eq(Cat(*v[1:]).any())]
        for lane in range(n):
            # the token's controls, per lane: VEC (used in S1) and the "second" flag (S1 and S7)
            vec = Signal(name=f"vec{lane}", attrs=DUP)
            m.d.sync += vec.eq(self.in_vec)
            sec = [Signal(name=f"sec{lane}_{k}", attrs=DUP) for k in range(8)]
            m.d.comb += sec[0].eq(self.in_vec & self.in_second)
            m.d.sync += [sec[k + 1].eq(sec[k]) for k in range(7)]
            sec1 = sec[1]
            bias = self.bias[32 * lane:32 * lane + 32].as_signed()
            mult = self.mult[32 * lane:32 * lane + 32].as_signed()
            shm1 = self.shm1[6 * lane:6 * lane + 6]
            # S0: the memory's read data, registered before any arithmetic
            acc = Signal(signed(32), name=f"acc{lane}", reset_less=True)
            a8 = Signal(signed(8), name=f"a{lane}", reset_less=True)
            m.d.sync += [acc.eq(self.acc_in[32 * lane:32 * lane + 32]), a8.eq(self.act_in[8 * lane:8 * lane + 8])]
            # S1: X = wrap32(acc + bias) (PPU) or a - z (VEC, 34 bits), and its multiplier
            x = Signal(signed(34), name=f"x{lane}", reset_less=True)
            mm = Signal(signed(32), name=f"m{lane}", reset_less=True)
            ppu_x = Signal(signed(32), name=f"ppux{lane}", reset_less=True)
            m.d.comb += ppu_x.eq(acc + bias)  # wraps to 32 bits (int32 + int32 in numpy)
            with m.If(vec):
                m.d.sync += [x.eq(a8 - Mux(sec1, self.zb, self.za)), mm.eq(Mux(sec1, self.mb, self.ma))]
            with m.Else():
                m.d.sync += [x.eq(ppu_x), mm.eq(mult)]
            # VEC MAX: a is held for one cycle, max formed with b in S1, delayed to the output
            a_hold = Signal(signed(8), name=f"ahold{lane}", reset_less=True)
            m.d.sync += a_hold.eq(a8)
            mx = [Signal(signed(8), name=f"mx{lane}_{k}", reset_less=True) for k in range(L - 2)]
            m.d.sync += mx[0].eq(Mux(a_hold > a8, a_hold, a8))
            for k in range(L - 3):
                m.d.sync += mx[k + 1].eq(mx[k])
            # S2/S3: partial products of X = xh*2**17 + xl (xl unsigned) and M = mh*2**16 + ml (ml unsigned),
            # each a registered multiplier (operands registered in S2, the product in S3; hw/dsp.py)
            xl, xh = x[:17], x[17:].as_signed()
            ml, mh = mm[:16], mm[16:].as_signed()
            pp = []
            for nm, a, b, shape in (("ll", xl, ml, unsigned(33)), ("lh", xl, mh, signed(34)),
                                    ("hl", xh, ml, signed(34)), ("hh", xh, mh, signed(33))):
                p1 = Signal(shape, name=f"p{nm}{lane}", reset_less=True)  # S4
                m.d.sync += p1.eq(dsp.regmul(m, f"mul{nm}{lane}", a, b)[:len(p1)])
                pp.append(p1)
            pll, plh, phl, phh = pp
            # S5
            sa = Signal(signed(64), name=f"sa{lane}", reset_less=True)
            sb = Signal(signed(64), name=f"sb{lane}", reset_less=True)
            m.d.sync += [sa.eq(pll + (plh << 16)), sb.eq((phl + (phh << 16)) << 17)]
            # S6
            p = Signal(signed(64), name=f"p{lane}", reset_less=True)
            m.d.sync += p.eq(sa + sb)
            # S7: VEC ADD sums the two operands' products (a's token came one cycle earlier)
            vv = Signal(signed(64), name=f"vv{lane}", reset_less=True)
            m.d.sync += vv.eq(p + Mux(sec[7], vv, 0))
            # S8/S9: a = v >> (s - 1) (arithmetic: by the multiple-of-8 part, then the rest). Rounding:
            # floor((v + 2**(s-1)) / 2**s) == (a + 1) >> 1, so no 64-bit rounding adder is needed.
            a1 = Signal(signed(64), name=f"a1_{lane}", reset_less=True)
            av = Signal(signed(64), name=f"a{lane}_", reset_less=True)
            m.d.sync += [a1.eq(vv >> Cat(C(0, 3), shm1[3:])), av.eq(a1 >> shm1[:3])]
            # S10: a saturated to SAT_BITS + 1 bits (r = (a + 1) >> 1 then fits SAT_BITS + 1, and any
            # r beyond +-2**(SAT_BITS-1) clamps to lo/hi exactly as the exact r does)
            asat = Signal(signed(SAT_BITS + 1), name=f"asat{lane}", reset_less=True)
            top = av[SAT_BITS:]
            smax, smin = (1 << SAT_BITS) - 1, -(1 << SAT_BITS)
            with m.If((top == 0) | (top == (1 << len(top)) - 1)):
                m.d.sync += asat.eq(av[:SAT_BITS + 1])
            with m.Elif(av[63]):
                m.d.sync += asat.eq(smin)
            with m.Else():
                m.d.sync += asat.eq(smax)
            # S11: t = r + z_out with r = (a + 1) >> 1; beside it, the clamp's comparisons on a itself:
            # t > hi iff r > hi - z_out iff a > 2*(hi - z_out), and t < lo iff a < 2*(lo - z_out) - 1
            # (bounds a register computes per lane from the instruction's constant parameters)
            t = Signal(signed(SAT_BITS + 2), name=f"t{lane}", reset_less=True)
            a_hi = Signal(signed(SAT_BITS), name=f"a_hi{lane}", attrs=DUP, reset_less=True)
            a_lo = Signal(signed(SAT_BITS), name=f"a_lo{lane}", attrs=DUP, reset_less=True)
            lo_hi = Signal(name=f"lo_hi{lane}", attrs=DUP, reset_less=True)
            m.d.sync += [a_hi.eq((self.hi - self.z_out) << 1), a_lo.eq(((self.lo - self.z_out) << 1) - 1),
                         lo_hi.eq(self.lo > self.hi)]
            above, below = Signal(name=f"above{lane}"), Signal(name=f"below{lane}")
            m.d.sync += [t.eq(((asat + 1) >> 1) + self.z_out), above.eq((asat > a_hi) | lo_hi),
                         below.eq(asat < a_lo)]
            # S12: clamp to [lo, hi] as numpy's clip (max with lo, then min with hi), or the max:
            # max(t, lo) > hi exactly when t > hi or lo > hi
            y = Signal(signed(8), name=f"y{lane}", reset_less=True)
            with m.If(self.op_max):
                m.d.sync += y.eq(mx[-1])
            with m.Elif(above):
                m.d.sync += y.eq(self.hi)
            with m.Elif(below):
                m.d.sync += y.eq(self.lo)
            with m.Else():
                m.d.sync += y.eq(t)
            m.d.comb += self.y[8 * lane:8 * lane + 8].eq(y)
        return m


def times_const(v, c: int):
    """v * c as shifts and adds (a `*` by a constant would be mapped to a distant DSP block)."""
    out = 0
    for bit in range(c.bit_length()):
        if c >> bit & 1:
            out = out + (v << bit)
    return out


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
        preg = Signal(peb * p.beat_bits, reset_less=True)
        slot = Signal(3)             # VEC frame slot, one-hot: 0 read a, 1 read b, 2 write
        run = Signal()               # state == STREAM, as a register of its own: `step` is one LUT from flip-flops

        # one loop, three address streams: PPU (ACC in, -, ACT out); VEC (a, b, out)
        def sel(name_vec, name_ppu):
            return Mux(w_vec, field(w, vec, name_vec), field(w, ppu, name_ppu))

        step = Signal()
        in_w = max(p.acc_bits, p.act_bits)
        # the instruction's fields are captured in every cycle the engine is idle (an issue only comes
        # then), not on `start`: the wide enables start from the engine's own registers, not from the
        # issue decision (hw/tile.py), which only sets the state
        capture = ~self.busy
        loop = loop2d(m, "pp", load=capture, step=step,
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
        pvalid = [Signal(name=f"pvalid{i}") for i in range(ML)]
        pidx = [Signal(range(peb), name=f"pidx{i}", reset_less=True) for i in range(ML)]
        m.d.sync += [pvalid[0].eq(pread), pidx[0].eq(k)]
        m.d.sync += [pvalid[i + 1].eq(pvalid[i]) for i in range(ML - 1)]
        m.d.sync += [pidx[i + 1].eq(pidx[i]) for i in range(ML - 1)]
        with m.If(pvalid[-1]):
            for b in range(peb):
                with m.If(pidx[-1] == b):
                    m.d.sync += preg[b * p.beat_bits:(b + 1) * p.beat_bits].eq(self.param_data)
        last_beat = (state == PARAM) & pvalid[-1] & (pidx[-1] == peb - 1)   # the last beat lands now
        with m.If(last_beat):
            m.d.sync += state.eq(PREP)

        # ---- PREP: lane parameters from the entry (layout: hwc.isa.pack_param_entry) ----
        def byte(i):
            return preg[8 * i:8 * i + 8]

        def i32(i):
            return preg[8 * i:8 * i + 32].as_signed()

        def clamp_sh(s):
            return Mux(s < arith.SHIFT_MIN, arith.SHIFT_MIN, Mux(s > arith.SHIFT_MAX, arith.SHIFT_MAX, s))[:6]

        # the entry's fields are read straight from the beat registers; only shift - 1 is prepared
        bias, mult = preg[:32 * n], preg[32 * n:64 * n]
        shm1 = Signal(6 * n, reset_less=True)
        z_out, lo, hi = byte(9 * n).as_signed(), byte(9 * n + 1).as_signed(), byte(9 * n + 2).as_signed()
        za, zb, ma, mb = i32(0), i32(4), i32(4 * n), i32(4 * n + 4)
        # shift - 1 in two steps: the lane's shift byte (the VEC's is lane 0's) is selected when the last beat
        # lands (the shift bytes are in an earlier beat), then clamped and decremented in PREP
        assert (9 * n - 1) // p.beat_bytes < peb - 1, "the shift bytes must land before the entry's last beat"
        sh_sel = Signal(8 * n, reset_less=True)
        with m.If(last_beat):
            m.d.sync += [sh_sel[8 * lane:8 * lane + 8].eq(Mux(is_vec, byte(8 * n), byte(8 * n + lane)))
                         for lane in range(n)]
        with m.If(state == PREP):
            m.d.sync += [state.eq(STREAM), run.eq(1), slot.eq(1)]
            for lane in range(n):
                sh = clamp_sh(sh_sel[8 * lane:8 * lane + 8])
                m.d.sync += shm1[6 * lane:6 * lane + 6].eq(sh - 1)

        # ---- STREAM ----
        streaming = run
        ppu_read = streaming & ~is_vec
        vec_a = streaming & is_vec & slot[0]
        vec_b = streaming & is_vec & slot[1]
        m.d.comb += step.eq(streaming & (~is_vec | slot[1]))
        with m.If(streaming & is_vec):
            m.d.sync += slot.eq(slot.rotate_left(1))
        with m.If(step & loop.last):
            m.d.sync += [state.eq(DRAIN), run.eq(0)]
        m.d.comb += self.acc_raddr.eq(Mux(ppu_read, in_ptr[:p.acc_bits], 0))
        # a token enters the pipe ML cycles after its read, with the read data
        tvs = [Signal(name=f"tv{i}") for i in range(ML)]
        tsecs = [Signal(name=f"tsec{i}") for i in range(ML)]
        ttags = [Signal(p.act_bits, name=f"ttag{i}", reset_less=True) for i in range(ML)]
        m.d.sync += [tvs[0].eq(step), tsecs[0].eq(vec_b), ttags[0].eq(out_ptr)]
        for i in range(ML - 1):
            m.d.sync += [tvs[i + 1].eq(tvs[i]), tsecs[i + 1].eq(tsecs[i]), ttags[i + 1].eq(ttags[i])]
        tv, tsec, ttag = tvs[-1], tsecs[-1], ttags[-1]
        m.d.comb += [pipe.in_valid.eq(tv), pipe.in_vec.eq(is_vec), pipe.in_second.eq(tsec),
                     pipe.in_tag.eq(ttag), pipe.acc_in.eq(self.acc_rdata), pipe.act_in.eq(self.act_data),
                     pipe.op_max.eq(op_max), pipe.bias.eq(bias), pipe.mult.eq(mult), pipe.shm1.eq(shm1),
                     pipe.z_out.eq(z_out), pipe.lo.eq(lo), pipe.hi.eq(hi),
                     pipe.za.eq(za), pipe.zb.eq(zb), pipe.ma.eq(ma), pipe.mb.eq(mb)]
        # the ACT compute port: VEC reads in slots 0/1; every result write lands in a slot 2
        assert (ML + PIPE_LATENCY) % 3 == 1, "VEC writes would collide with VEC reads"
        rd_addr = Mux(vec_a, in_ptr[:p.act_bits], b_ptr)
        m.d.comb += [self.act_we.eq(pipe.out_valid), self.act_wdata.eq(Mux(pipe.out_valid, pipe.y, 0)),
                     self.act_addr.eq(Mux(pipe.out_valid, pipe.out_tag[:p.act_bits],
                                          Mux(vec_a | vec_b, rd_addr, 0)))]

        # ---- DRAIN: idle once the last result is written ----
        wpend = [Signal(name=f"wpend{i}") for i in range(WL)]  # write requests not yet performed
        m.d.sync += [wpend[i].eq(pipe.out_valid if i == 0 else wpend[i - 1]) for i in range(WL)]
        pipe_busy = Cat(*tvs, *wpend).any() | pipe.busy
        with m.If((state == DRAIN) & ~pipe_busy):
            m.d.sync += state.eq(IDLE)
        m.d.comb += self.busy.eq(((state != IDLE) & (state != DRAIN)) | pipe_busy)

        with m.If(capture):
            m.d.sync += [k.eq(0), is_vec.eq(w_vec), op_max.eq(w_vec & (field(w, vec, "op") == isa.VecOp.MAX)),
                         pbase.eq(times_const(Mux(w_vec, field(w, vec, "param"), field(w, ppu, "param")), peb))]
        with m.If(self.start):  # last: wins over the DRAIN -> IDLE transition
            m.d.sync += [state.eq(PARAM), run.eq(0)]
        return m
