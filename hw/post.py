"""Post-processing: the PPU (bias + requantize) and the VEC unit (MAX, ADD), one datapath.

`PostPipe` is the lane-wise arithmetic of hwc/quant/arith.py, bit-exact:
  PPU      y = clamp(((wrap32(acc + bias) * M + 2**(s-1)) >> s) + z_out, lo, hi)     (requantize)
           (PPU.neg, a fused LeakyReLU: M = M_neg where wrap32(acc + bias) < 0)
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
     (PPU.neg: M and M_neg both registered, one chosen by X's sign into S2's operand registers)
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
one per cycle; PPU.neg: NEG_BEATS more, of entry param + 1), prepares the lane parameters in one
cycle, then streams:
  PPU: one ACC line read per cycle; the result is written to ACT PIPE_LATENCY + 1 cycles
       after its read, through the compute ACT port.
  VEC: frames of three cycles on the single compute ACT port: read a, read b, write
       (the result of an earlier frame). MEM_LATENCY + PIPE_LATENCY = 16 = 1 (mod 3) puts every
       result write exactly on a write slot, so reads and writes never collide.
  PPU.dw (features.dw_post, docs/tile-v2.md): three PARAM entries (the last two read while it streams),
       the tile's padded rows one position a cycle (pads read no ACC line), the requantized lines through
       the 3x3 depthwise stage (`_dw_stage`) and a second pipe, whose results are written to ACT. A PPU.dw
       after a PPU.dw may start while the one before drains its second pipe (`dw_drain`; docs/tile-v2.md,
       "PPU.dw after PPU.dw").
"""

from __future__ import annotations

from amaranth.hdl import C, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hwc import isa
from hwc.quant import arith

from . import dsp
from .loop import loop2d
from .params import DUP, TileParams, bits_for, dw_out_rows, field

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
            "mult_neg": In(32 * n),   # PPU.neg (`neg`): the multipliers of lanes whose X is negative
            "neg": In(1),
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
            mult_neg = self.mult_neg[32 * lane:32 * lane + 32].as_signed()
            shm1 = self.shm1[6 * lane:6 * lane + 6]
            # S0: the memory's read data, registered before any arithmetic
            acc = Signal(signed(32), name=f"acc{lane}", reset_less=True)
            a8 = Signal(signed(8), name=f"a{lane}", reset_less=True)
            m.d.sync += [acc.eq(self.acc_in[32 * lane:32 * lane + 32]), a8.eq(self.act_in[8 * lane:8 * lane + 8])]
            # S1: X = wrap32(acc + bias) (PPU) or a - z (VEC, 34 bits), and its multiplier; PPU.neg: the
            # multiplier of a negative X beside it, chosen by X's sign on the way into the multipliers
            x = Signal(signed(34), name=f"x{lane}", reset_less=True)
            mm = Signal(signed(32), name=f"m{lane}", reset_less=True)
            mmn = Signal(signed(32), name=f"mn{lane}", reset_less=True)
            negl = Signal(name=f"neg{lane}", attrs=DUP, reset_less=True)
            ppu_x = Signal(signed(32), name=f"ppux{lane}", reset_less=True)
            m.d.comb += ppu_x.eq(acc + bias)  # wraps to 32 bits (int32 + int32 in numpy)
            m.d.sync += [mmn.eq(mult_neg), negl.eq(self.neg & ~vec)]
            with m.If(vec):
                m.d.sync += [x.eq(a8 - Mux(sec1, self.zb, self.za)), mm.eq(Mux(sec1, self.mb, self.ma))]
            with m.Else():
                m.d.sync += [x.eq(ppu_x), mm.eq(mult)]
            m_eff = Signal(signed(32), name=f"meff{lane}")
            m.d.comb += m_eff.eq(Mux(x[33] & negl, mmn, mm))
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
            ml, mh = m_eff[:16], m_eff[16:].as_signed()
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
            # PPU.dw (features.dw_post): draining a PPU.dw whose positions have all left the depthwise stage, only
            # its second pipe still busy: a next PPU.dw may issue (docs/tile-v2.md, "PPU.dw after PPU.dw")
            "dw_drain": Out(1),
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
        # PPU.dw (features.dw_post): three PARAM entries, the tile's padded rows streamed, the depthwise stage
        dwp = p.dw_post
        nent = isa.DW_POST_ENTRIES if dwp else 1
        w_dw = (field(w, ppu, "dw") & ~w_vec) if dwp else C(0, 1)
        is_dw = Signal()
        # PPU.neg: entry param + 1's first NEG_BEATS beats (the multipliers of negative lanes) read before PREP
        nb = isa.neg_beats(n, p.beat_bytes)
        is_neg = Signal()
        nmax = max(nent * peb, peb + nb)   # the PARAM beats an instruction reads at most

        IDLE, PARAM, PREP, STREAM, DRAIN = range(5)
        state = Signal(range(5))
        is_vec = Signal()
        op_max = Signal()
        pbase = Signal(p.param_bits)
        k = Signal(range(nmax + 1))   # PARAM beats requested
        preg = Signal(nmax * p.beat_bits, reset_less=True)
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
        capture = ~self.busy | self.dw_drain
        # (PPU.dw: n_outer + 1 rows of n_inner + 1 positions, position (i, j) reading ACC line (i, j - 1); no
        # bottom pad row after a context row, PPU.dwc bit 1)
        loop = loop2d(m, "pp", load=capture, step=step,
                      n_outer=sel("n_outer", "n_outer") + (w_dw & ~field(w, ppu, "dwc")[1]) if dwp
                      else sel("n_outer", "n_outer"),
                      n_inner=sel("n_inner", "n_inner") + w_dw if dwp else sel("n_inner", "n_inner"),
                      streams=[(Mux(w_dw, field(w, ppu, "acc") - field(w, ppu, "acc_si"), sel("a", "acc"))
                                if dwp else sel("a", "acc"),
                                sel("in_so", "acc_so"), sel("in_si", "acc_si"), in_w),
                               (field(w, vec, "b"), field(w, vec, "in_so"), field(w, vec, "in_si"), p.act_bits),
                               (sel("out", "out"), sel("out_so", "out_so"), sel("out_si", "out_si"), p.act_bits)])
        in_ptr, b_ptr, out_ptr = loop.ptrs

        # ---- PARAM entry: PEB reads, data one cycle later ----
        nbeats = Mux(is_dw, nent * peb, Mux(is_neg, peb + nb, peb)) if dwp else Mux(is_neg, peb + nb, peb)
        # (PPU.dw: entries param + 1 and param + 2 are read on while the PPU streams. The last tap byte lands
        # 2 PEB - 1 cycles into the stream; the first window with an output (stream position P + 2, P >= 4) reaches
        # the products P + 2 + ML + PIPE_LATENCY + 1 cycles in, and the second pipe's parameters are used later)
        assert not dwp or 2 * peb - 1 <= isa.DWP_MIN_PITCH + 2 + ML + PIPE_LATENCY + 1, "taps would land late"
        # (not while capturing in DRAIN: the draining PPU.dw's reads are done, and the capture restarts k)
        pread = (((state != IDLE) & ~((state == DRAIN) & capture)) if dwp else (state == PARAM)) & (k < nbeats)
        m.d.comb += self.param_addr.eq(Mux(pread, pbase + k, 0))
        with m.If(pread):
            m.d.sync += k.eq(k + 1)
        pvalid = [Signal(name=f"pvalid{i}") for i in range(ML)]
        pidx = [Signal(range(nmax), name=f"pidx{i}", reset_less=True) for i in range(ML)]
        m.d.sync += [pvalid[0].eq(pread), pidx[0].eq(k)]
        m.d.sync += [pvalid[i + 1].eq(pvalid[i]) for i in range(ML - 1)]
        m.d.sync += [pidx[i + 1].eq(pidx[i]) for i in range(ML - 1)]
        with m.If(pvalid[-1]):
            for b in range(nmax):
                with m.If(pidx[-1] == b):
                    m.d.sync += preg[b * p.beat_bits:(b + 1) * p.beat_bits].eq(self.param_data)
        # entry param's last beat lands now (PPU.neg: the last of entry param + 1's NEG_BEATS)
        last_beat = (state == PARAM) & pvalid[-1] & (pidx[-1] == Mux(is_neg, peb + nb - 1, peb - 1))
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
        mult_neg = preg[8 * peb * p.beat_bytes:8 * peb * p.beat_bytes + 32 * n]   # (isa.pack_neg_entry)
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
        if dwp:   # entry param + 1: the depthwise stage's requantization (its shift - 1 prepared the same way)
            e1 = peb * p.beat_bytes
            bias2, mult2 = preg[8 * e1:8 * e1 + 32 * n], preg[8 * e1 + 32 * n:8 * e1 + 64 * n]
            z2, lo2, hi2 = (byte(e1 + 9 * n + i).as_signed() for i in range(3))
            shm2 = Signal(6 * n, reset_less=True)
            sh_sel2 = Signal(8 * n, reset_less=True)
            landed2 = Signal()   # entry param + 1's last beat landed a cycle ago
            last2 = pvalid[-1] & (pidx[-1] == 2 * peb - 1)
            m.d.sync += landed2.eq(last2)
            with m.If(last2):
                m.d.sync += [sh_sel2[8 * lane:8 * lane + 8].eq(byte(e1 + 8 * n + lane)) for lane in range(n)]
            with m.If(landed2):
                m.d.sync += [shm2[6 * lane:6 * lane + 6].eq(clamp_sh(sh_sel2[8 * lane:8 * lane + 8]) - 1)
                             for lane in range(n)]

        # ---- STREAM ----
        streaming = run
        ppu_read = streaming & ~is_vec
        vec_a = streaming & is_vec & slot[0]
        vec_b = streaming & is_vec & slot[1]
        m.d.comb += step.eq(streaming & (~is_vec | slot[1]))
        with m.If(streaming & is_vec):
            m.d.sync += slot.eq(slot.rotate_left(1))
        extra = Signal()   # PPU.dw: the stream's last position (the last output's bottom-right pad), no ACC read
        with m.If(step & loop.last):
            m.d.sync += [state.eq(DRAIN), run.eq(0), extra.eq(is_dw)]
        with m.Elif(extra):
            m.d.sync += extra.eq(0)
        tag, pad = out_ptr, C(0, 1)
        if dwp:
            # position (i, j) of the padded stream: a pad in the bottom row and in column 0 (the left pad, which is
            # also the right pad of the row before); it completes the window of output (i - 1, j - 2) for j >= 2,
            # of output (i - 2, n_inner - 1) for j = 0. The outputs come in row-major order: their own loop.
            # Context rows (PPU.dwc): no bottom pad row after the last (bit 1); the first's outputs (0, x) complete at
            # (1, x + 2) and (2, 0): not written (bit 0)
            dwc = Signal(2)
            self._dwf = dwf = Signal(2)   # (the window's lane shift: `_dw_stage`)
            self._odd2 = Signal()        # (PPU.dwf = 1 with PPU.dws = 3: the window one pixel further)
            pad = Mux(extra, 1, (loop.last_i & ~dwc[1]) | (loop.j == 0))
            outv = Mux(extra, 1, (((loop.i != 0) & (loop.j >= 2)) | ((loop.i >= 2) & (loop.j == 0)))
                       & ~(dwc[0] & Mux(loop.j == 0, loop.i == 2, loop.i == 1)))
            # PPU.dws (stride 2): only the stride-1 outputs (y, x) with y and x of the phase dws[0]; the parity of
            # y (i - 1, i - 2, or n_outer - 1 for the last position) and of x (j - 2, or n_inner - 1)
            dws, no_odd, ni_odd = Signal(2), Signal(), Signal()   # (n - 1) & 1 of the tile's counts
            with m.If(capture):
                m.d.sync += [dws.eq(field(w, ppu, "dws")), dwc.eq(field(w, ppu, "dwc")), dwf.eq(field(w, ppu, "dwf")),
                             self._odd2.eq((field(w, ppu, "dws") == 3) & (field(w, ppu, "dwf") == 1)),
                             no_odd.eq(field(w, ppu, "n_outer")[0] == field(w, ppu, "dwc")[1]),
                             ni_odd.eq(~field(w, ppu, "n_inner")[0])]
            ypar = Mux(extra, no_odd, Mux(loop.j == 0, loop.i[0], ~loop.i[0]))
            xpar = Mux(extra | (loop.j == 0), ni_odd, loop.j[0])
            # (two pixels a line, PPU.dwf = 1: every line has an output pixel)
            outv = outv & (~dws[1] | ((ypar == dws[0]) & ((xpar == dws[0]) | dwf.any())))
            w_dws, w_dwc = field(w, ppu, "dws"), field(w, ppu, "dwc")
            odims = [Mux(w_dws[1] | w_dwc.any(), dw_out_rows(w), field(w, ppu, "n_outer"))[:12],
                     Mux(w_dws[1] & ~field(w, ppu, "dwf").any(), (field(w, ppu, "n_inner") + 1 - w_dws[0]) >> 1,
                         field(w, ppu, "n_inner"))]
            oloop = loop2d(m, "dwo", load=capture, step=is_dw & (step | extra) & outv,
                           n_outer=odims[0], n_inner=odims[1],
                           streams=[(field(w, ppu, "out"), field(w, ppu, "out_so"), field(w, ppu, "out_si"),
                                     p.act_bits)])
            tag = Mux(is_dw, Cat(oloop.ptrs[0], outv, pad), out_ptr)
        m.d.comb += self.acc_raddr.eq(Mux(ppu_read & ~(is_dw & pad), in_ptr[:p.acc_bits], 0))
        # a token enters the pipe ML cycles after its read, with the read data
        tvs = [Signal(name=f"tv{i}") for i in range(ML)]
        tsecs = [Signal(name=f"tsec{i}") for i in range(ML)]
        ttags = [Signal(p.act_bits + 2 * dwp, name=f"ttag{i}", reset_less=True) for i in range(ML)]
        m.d.sync += [tvs[0].eq(step | extra), tsecs[0].eq(vec_b), ttags[0].eq(tag)]
        for i in range(ML - 1):
            m.d.sync += [tvs[i + 1].eq(tvs[i]), tsecs[i + 1].eq(tsecs[i]), ttags[i + 1].eq(ttags[i])]
        tv, tsec, ttag = tvs[-1], tsecs[-1], ttags[-1]
        m.d.comb += [pipe.in_valid.eq(tv), pipe.in_vec.eq(is_vec), pipe.in_second.eq(tsec),
                     pipe.in_tag.eq(ttag), pipe.acc_in.eq(self.acc_rdata), pipe.act_in.eq(self.act_data),
                     pipe.op_max.eq(op_max), pipe.bias.eq(bias), pipe.mult.eq(mult), pipe.shm1.eq(shm1),
                     pipe.mult_neg.eq(mult_neg), pipe.neg.eq(is_neg),
                     pipe.z_out.eq(z_out), pipe.lo.eq(lo), pipe.hi.eq(hi),
                     pipe.za.eq(za), pipe.zb.eq(zb), pipe.ma.eq(ma), pipe.mb.eq(mb)]
        # the ACT compute port: VEC reads in slots 0/1; every result write lands in a slot 2
        assert (ML + PIPE_LATENCY) % 3 == 1, "VEC writes would collide with VEC reads"
        rd_addr = Mux(vec_a, in_ptr[:p.act_bits], b_ptr)
        we, wdata, waddr, stage_busy = pipe.out_valid, pipe.y, pipe.out_tag[:p.act_bits], C(0, 1)
        if dwp:
            we, wdata, waddr, stage_busy = self._dw_stage(m, pipe, is_dw, z_out, preg, bias2, mult2, shm2, z2,
                                                          lo2, hi2)
        m.d.comb += [self.act_we.eq(we), self.act_wdata.eq(Mux(we, wdata, 0)),
                     self.act_addr.eq(Mux(we, waddr, Mux(vec_a | vec_b, rd_addr, 0)))]

        # ---- DRAIN: idle once the last result is written ----
        wpend = [Signal(name=f"wpend{i}") for i in range(WL)]  # write requests not yet performed
        m.d.sync += [wpend[i].eq(we if i == 0 else wpend[i - 1]) for i in range(WL)]
        pipe_busy = Cat(*tvs, *wpend, extra).any() | pipe.busy | stage_busy
        with m.If((state == DRAIN) & ~pipe_busy):
            m.d.sync += state.eq(IDLE)
        m.d.comb += self.busy.eq(((state != IDLE) & (state != DRAIN)) | pipe_busy)
        if dwp:
            # PPU.dw after PPU.dw: once this PPU.dw's last position has left the depthwise stage (its ACC reads and
            # PARAM reads long done), only the second pipe still uses anything of it: its parameters (entry param + 1
            # in `preg`, shm2), which the next PPU.dw's PARAM reads overwrite no sooner than PEB + ML + 1 cycles
            # after its issue, later than the second pipe's last stage reads them (the assert below)
            assert peb + ML + 1 > PIPE_LATENCY - 1, "a next PPU.dw's entry param + 1 would land in the draining pipe"
            reads_done = Signal()   # this instruction's PARAM beats have all landed
            with m.If(pvalid[-1] & (pidx[-1] == nbeats - 1)):
                m.d.sync += reads_done.eq(1)
            with m.If(self.start):
                m.d.sync += reads_done.eq(0)
            m.d.comb += self.dw_drain.eq(is_dw & (state == DRAIN) & reads_done & ~Cat(*tvs, *pvalid, extra).any()
                                         & ~pipe.busy & ~self._stage_fill)

        with m.If(capture):
            m.d.sync += [k.eq(0), is_vec.eq(w_vec), is_dw.eq(w_dw), is_neg.eq(field(w, ppu, "neg") & ~w_vec),
                         op_max.eq(w_vec & (field(w, vec, "op") == isa.VecOp.MAX)),
                         pbase.eq(times_const(Mux(w_vec, field(w, vec, "param"), field(w, ppu, "param")), peb))]
        with m.If(self.start):  # last: wins over the DRAIN -> IDLE transition
            m.d.sync += [state.eq(PARAM), run.eq(0)]
        if dwp:
            with m.If(capture):
                m.d.sync += self._pitch.eq(field(w, ppu, "n_inner") + 1)
        return m

    def _dw_stage(self, m, pipe, is_dw, z0, preg, bias2, mult2, shm2, z2, lo2, hi2):
        """PPU.dw's depthwise stage: the first pipe's lines (pads replaced by z0, entry param's z_out) through a
        delay line of the 3x3 window (two registers a row, two row buffers of the pitch P = n_inner + 1; a delay
        reaching before the stream's first position reads z0), the products with the taps (entry param + 2), two
        adder levels, then a second requantization pipe (entry param + 1) whose results are written to ACT.
        Returns (write enable, data, address, busy)."""
        p, n = self.p, self.p.n
        self._pitch = pitch = Signal(range(p.dw_lines + 2), name="dw_pitch", reset_less=True)
        m.submodules.pipe2 = pipe2 = PostPipe(n)
        a = p.act_bits
        zv = Cat(*[z0] * n)
        # A: the position's line (a pad is z0), its count in the stream (saturating), its tag
        v0, va = pipe.out_valid & is_dw, Signal(name="dwA_v")
        r0 = Signal(8 * n, name="dw_r0", reset_less=True)
        tag_a = Signal(a + 2, name="dwA_tag", reset_less=True)
        cmax = 2 * p.dw_lines + 4
        cnt = Signal(range(cmax + 1), name="dw_cnt")
        pad = pipe.out_tag[a + 1]
        m.d.sync += [va.eq(v0), tag_a.eq(pipe.out_tag[:a + 2]), r0.eq(Mux(pad, zv, pipe.y)),
                     cnt.eq(Mux(va, Mux(cnt == cmax, cmax, cnt + 1), 0))]
        # the delay line: r0 r1 r2 | row buffer 1 (P back) q0 q1 q2 | row buffer 2 (2P back) s0 s1 s2
        r1, r2 = (Signal(8 * n, name=f"dw_r{k}", reset_less=True) for k in (1, 2))
        m.d.sync += [r1.eq(r0), r2.eq(r1)]
        abits = bits_for(p.dw_lines)
        wptr = Signal(abits, name="dw_wptr")
        m.d.sync += wptr.eq(wptr + 1)
        raddr = Signal(abits, name="dw_raddr")
        m.d.comb += raddr.eq(wptr - pitch + 2)   # address, RAM, data register: the line written P cycles before
        rows = [(r0, r1, r2)]
        src = r0
        for k in (1, 2):
            mem = Memory(shape=p.line_bits, depth=1 << abits, init=[], attrs={"no_rw_check": 1})
            m.submodules[f"dw_buf{k}"] = mem
            wp, rp = mem.write_port(), mem.read_port()
            q = [Signal(8 * n, name=f"dw_q{k}_{j}", reset_less=True) for j in range(3)]
            m.d.comb += [wp.addr.eq(wptr), wp.data.eq(src), wp.en.eq(1), rp.addr.eq(raddr)]
            m.d.sync += [q[0].eq(rp.data), q[1].eq(q[0]), q[2].eq(q[1])]
            rows.append(tuple(q))
            src = q[0]
        # delay of rows[k][j]: k * P + j; it is in the stream (else z0) once the count reaches it
        e2 = 2 * p.param_entry_beats * p.beat_bytes
        taps = [preg[8 * (e2 + t * n):8 * (e2 + (t + 1) * n)] for t in range(9)]
        # B: the products (tap (ky, kx) at delay (2 - ky) P + 2 - kx)
        vb, tag_b = Signal(name="dwB_v"), Signal(a + 1, name="dwB_tag", reset_less=True)
        m.d.sync += [vb.eq(va), tag_b.eq(tag_a[:a + 1])]
        # PPU.dwf: a line holds 2**dwf pixels of c = N >> dwf lanes; a pixel's left neighbour is c lanes below in
        # its line, or for the first pixel the last one of the line before (and the right one c lanes above, or the
        # next line's first): each window row's three lines (masked: z0 before the stream) are shifted by c lanes
        prods = [None] * (9 * n)
        for ky in range(3):
            kr = 2 - ky
            masked = []
            for j in range(3):   # j lines back: 0 the right neighbour's line, 1 the centre, 2 the left's
                inside = cnt >= kr * pitch + j if kr else (cnt >= j if j else C(1, 1))
                ml = Signal(8 * n, name=f"dw_m{ky}{j}")
                m.d.comb += ml.eq(Mux(inside, rows[kr][j], zv))
                masked.append([ml[8 * lane:8 * lane + 8].as_signed() for lane in range(n)])
            nxt, cur, prev = masked
            for lane in range(n):
                # the left and right neighbours c = N >> dwf lanes away, for dwf = 0, 1, 2
                left = [cur[lane - c] if lane >= c else prev[lane - c + n] for c in (n, n >> 1, n >> 2)]
                right = [cur[lane + c] if lane + c < n else nxt[lane + c - n] for c in (n, n >> 1, n >> 2)]
                window = [Mux(self._dwf == 2, o[2], Mux(self._dwf == 1, o[1], o[0])) for o in (left, right)]
                # stride 2, two pixels a line, the odd outputs: the window one pixel further (left the centre,
                # centre the right neighbour, right the next line's same lanes)
                xs = [Mux(self._odd2, cur[lane], window[0]), Mux(self._odd2, right[1], cur[lane]),
                      Mux(self._odd2, nxt[lane], window[1])]
                for kx, x in enumerate(xs):
                    pr = Signal(signed(16), name=f"dw_p{ky}{kx}_{lane}", reset_less=True)
                    m.d.sync += pr.eq(x * taps[3 * ky + kx][8 * lane:8 * lane + 8].as_signed())
                    prods[(3 * ky + kx) * n + lane] = pr
        # C: sums of a kernel row; D: the sum of the three
        vc, tag_c = Signal(name="dwC_v"), Signal(a + 1, name="dwC_tag", reset_less=True)
        vd, tag_d = Signal(name="dwD_v"), Signal(a + 1, name="dwD_tag", reset_less=True)
        m.d.sync += [vc.eq(vb), tag_c.eq(tag_b), vd.eq(vc), tag_d.eq(tag_c)]
        tot = []
        for lane in range(n):
            part = []
            for ky in range(3):
                s3 = Signal(signed(18), name=f"dw_s{ky}_{lane}", reset_less=True)
                m.d.sync += s3.eq(sum(prods[(3 * ky + kx) * n + lane] for kx in range(3)))
                part.append(s3)
            t = Signal(signed(20), name=f"dw_t{lane}", reset_less=True)
            m.d.sync += t.eq(part[0] + part[1] + part[2])
            t32 = Signal(signed(32), name=f"dw_t32_{lane}")
            m.d.comb += t32.eq(t)
            tot.append(t32)
        assert isa.DW_POST_STAGES == 4, "A, B, C and D above"
        # every position goes through the second pipe, its output flag in the tag: the PPU ends when the last
        # position has, whichever outputs a stride of 2 keeps (the timing does not depend on PPU.dws)
        m.d.comb += [pipe2.in_valid.eq(vd), pipe2.in_vec.eq(0), pipe2.in_second.eq(0),
                     pipe2.in_tag.eq(tag_d[:a + 1]), pipe2.acc_in.eq(Cat(*tot)),
                     pipe2.op_max.eq(0), pipe2.bias.eq(bias2), pipe2.mult.eq(mult2), pipe2.shm1.eq(shm2),
                     pipe2.z_out.eq(z2), pipe2.lo.eq(lo2), pipe2.hi.eq(hi2)]
        we2 = pipe2.out_valid & pipe2.out_tag[a]
        we = (pipe.out_valid & ~is_dw) | we2
        wdata = Mux(we2, pipe2.y, pipe.y)
        waddr = Mux(we2, pipe2.out_tag[:a], pipe.out_tag[:a])
        # (as a write would: the unit stays busy WL cycles after the last position, written or not)
        tail = [Signal(name=f"dw_tail{i}") for i in range(WL)]
        m.d.sync += [tail[i].eq(pipe2.out_valid if i == 0 else tail[i - 1]) for i in range(WL)]
        self._stage_fill = Cat(va, vb, vc, vd).any()
        return we, wdata, waddr, Cat(va, vb, vc, vd, *tail).any() | pipe2.busy
