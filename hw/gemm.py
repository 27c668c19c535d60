"""The GEMM engine: a two-stage pipeline (weight preload, line stream) around the MAC array.

Stage 1 (preload) owns the shadow weights: issued GEMM k reads its block's N WGT rows,
one per cycle, into the array's shadow registers (issue+1 .. issue+N; row data lands one
cycle later). Stage 2 (stream) owns the ACT compute port: it reads one line per cycle for
`n_outer * n_inner` cycles. GEMM k moves from stage 1 to stage 2 at the end of a cycle in
which its last WGT read is issued (or done) and stage 2 is free or issuing its last read;
so `stream_start(k) = max(issue(k) + N + 1, stream_end(k-1))` (GEMM_SETUP = 1), and the
engine accepts the next GEMM from `stream_start(k)` on (stage 1 is empty again).

A line read in cycle c flows through (one register per step):
  c+1   ACT data -> x register; if it is the first line of a GEMM, shadow -> active (swap)
  c+2   N*N multipliers (MacArray), then log2(N) adder-tree levels
  c+1+L ACC read of the line's accumulator address (L = log2 N)
  c+2+L ACC data -> old register; forwarding selects computed against the two newer sums
  c+3+L sum = (reset ? 0 : old) + dot, written to ACC in this cycle
so an accumulator write lands GEMM_LATENCY = L + 3 cycles after its line was read, and the
engine is idle GEMM_LATENCY cycles after its last line read + 1.

Forwarding: the ACC read in cycle a misses the writes of cycles a and a+1, made by the
two items ahead in the pipeline; their sums are kept in two registers and selected when
their address matches (newest first), so consecutive lines may accumulate into the same
ACC line every cycle (global average pooling) with no spacing in the program.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwc import isa

from .loop import loop2d
from .mac import MacArray, dot_bits
from .params import TileParams, bits_for, field

OP = isa.Op.GEMM


class GemmEngine(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1),
            "word": In(isa.INSN_BITS),
            "accept": Out(1),     # stage 1 is free: a GEMM may issue this cycle
            "busy": Out(1),
            "wgt_addr": Out(p.wgt_bits),
            "wgt_data": In(p.line_bits),
            "act_addr": Out(p.act_bits),  # zero when not streaming (OR-muxed with the other engines)
            "act_data": In(p.line_bits),
            "acc_raddr": Out(p.acc_bits),
            "acc_rdata": In(p.acc_line_bits),
            "acc_waddr": Out(p.acc_bits),
            "acc_wdata": Out(p.acc_line_bits),
            "acc_we": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        n, lvl = p.n, p.tree_levels
        m.submodules.mac = mac = MacArray(p)
        w = self.word

        # ---- stage 1: weight preload ----
        pre_active = Signal()
        pre_cnt = Signal(range(n + 1))
        names = ("act", "acc", "n_outer", "n_inner", "act_so", "act_si", "acc_so", "acc_si", "reset")
        pre = {k: Signal(field(w, OP, k).shape(), name=f"pre_{k}") for k in names}
        wblk = Signal(bits_for(p.wgt_blocks))
        with m.If(self.start):
            m.d.sync += [pre_active.eq(1), pre_cnt.eq(0), wblk.eq(field(w, OP, "wblk"))]
            m.d.sync += [pre[k].eq(field(w, OP, k)) for k in names]
        reading = pre_active & (pre_cnt < n)
        with m.If(reading):
            m.d.sync += pre_cnt.eq(pre_cnt + 1)
        m.d.comb += self.wgt_addr.eq((wblk << p.log2n) | pre_cnt[:p.log2n])
        row_we = Signal()
        row_idx = Signal(range(n))
        m.d.sync += [row_we.eq(reading), row_idx.eq(pre_cnt[:p.log2n])]
        m.d.comb += [mac.row_we.eq(row_we), mac.row_idx.eq(row_idx), mac.row_data.eq(self.wgt_data)]

        # ---- stage 2: line stream ----
        st_active = Signal()
        st_first = Signal()
        st_reset = Signal()
        ready = pre_active & (pre_cnt >= n - 1)
        transfer = Signal()
        loop = loop2d(m, "st", load=transfer, step=st_active, n_outer=pre["n_outer"], n_inner=pre["n_inner"],
                      streams=[(pre["act"], pre["act_so"], pre["act_si"], p.act_bits),
                               (pre["acc"], pre["acc_so"], pre["acc_si"], p.acc_bits)])
        m.d.comb += transfer.eq(ready & (~st_active | loop.last))
        act_ptr, acc_ptr = loop.ptrs
        with m.If(transfer):
            m.d.sync += [st_active.eq(1), st_first.eq(1), st_reset.eq(pre["reset"]), pre_active.eq(0)]
        with m.Elif(st_active):
            m.d.sync += st_first.eq(0)
            with m.If(loop.last):
                m.d.sync += st_active.eq(0)
        m.d.comb += [self.accept.eq(~pre_active)]
        m.d.comb += self.act_addr.eq(st_active.replicate(p.act_bits) & act_ptr)

        # ---- token pipeline: (valid, acc address, reset) per stage; index = cycles after the read ----
        depth = 3 + lvl
        tv = [Signal(name=f"t{k}_valid") for k in range(depth + 1)]
        ta = [Signal(p.acc_bits, name=f"t{k}_acc") for k in range(depth + 1)]
        tr = [Signal(name=f"t{k}_reset") for k in range(depth + 1)]
        first1 = Signal()
        m.d.comb += [tv[0].eq(st_active), ta[0].eq(acc_ptr), tr[0].eq(st_reset)]
        m.d.sync += first1.eq(st_active & st_first)
        for k in range(depth):
            m.d.sync += [tv[k + 1].eq(tv[k]), ta[k + 1].eq(ta[k]), tr[k + 1].eq(tr[k])]
        xreg = Signal(p.line_bits)
        m.d.sync += xreg.eq(self.act_data)
        m.d.comb += [mac.x.eq(xreg), mac.swap.eq(tv[1] & first1)]
        assert mac.latency + 2 == depth, "MacArray latency and the token pipeline disagree"

        # ---- accumulator read-modify-write with forwarding ----
        kr, kd, ka = 1 + lvl, 2 + lvl, 3 + lvl
        m.d.comb += self.acc_raddr.eq(tv[kr].replicate(p.acc_bits) & ta[kr])
        old = Signal(p.acc_line_bits)
        fwd1, fwd2 = Signal(), Signal()
        sum1, sum2 = Signal(p.acc_line_bits), Signal(p.acc_line_bits)
        s1v, s1a = Signal(), Signal(p.acc_bits)
        new = Signal(p.acc_line_bits)
        m.d.sync += [old.eq(self.acc_rdata),
                     fwd1.eq(tv[ka] & (ta[ka] == ta[kd])),
                     fwd2.eq(s1v & (s1a == ta[kd])),
                     sum1.eq(new), sum2.eq(sum1), s1v.eq(tv[ka]), s1a.eq(ta[ka])]
        db = dot_bits(p)
        for r in range(n):
            lane = slice(32 * r, 32 * r + 32)
            prev = Signal(signed(32), name=f"prev{r}")
            with m.If(tr[ka]):
                m.d.comb += prev.eq(0)
            with m.Elif(fwd1):
                m.d.comb += prev.eq(sum1[lane])
            with m.Elif(fwd2):
                m.d.comb += prev.eq(sum2[lane])
            with m.Else():
                m.d.comb += prev.eq(old[lane])
            m.d.comb += new[lane].eq(prev + mac.dot[db * r:db * (r + 1)].as_signed())
        m.d.comb += [self.acc_we.eq(tv[ka]), self.acc_waddr.eq(ta[ka]), self.acc_wdata.eq(new)]
        m.d.comb += self.busy.eq(pre_active | st_active | Cat(*tv[1:]).any())
        return m
