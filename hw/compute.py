"""The compute unit: GEMM engine, post-processing engine (PPU/VEC) and FILL behind one
issue slot, sharing the ACT compute port (port A) and the ACC ports (tile v1).

With `features.post_unit` (tile v2, docs/tile-v2.md) the compute unit keeps only the GEMM
engine, and PPU/VEC/FILL form the separate POST unit (`PostUnit`, below) with its own issue
slot: ACT port B (shared with the DMA engines, the issue stage keeps them apart) and its own
copy of the accumulator memory to read (hw/tile.py).

In-order issue with one instruction in flight per unit, except that a GEMM may be
accepted while the previous GEMM streams (the two-stage GEMM pipeline, hw/gemm.py):
  accept GEMM          when the GEMM engine's preload stage is free and no PPU/VEC/FILL runs
  accept PPU/VEC/FILL  when the whole unit is idle (every earlier compute instruction done)
So the engines never use port A or the ACC ports in the same cycle; their port signals are
zero when unused and are OR-combined (cheaper and shallower than a priority mux).

FILL writes `count` ACT lines, one per cycle from the cycle after issue, all bytes `value`:
busy for FILL_OVERHEAD + count cycles (FILL_OVERHEAD = 1 + MEM_WRITE_LATENCY: the last write
request is performed by the memory one cycle later).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwc import isa

from .gemm import GemmEngine
from .loop import loop2d
from .params import TileParams, field, opcode
from .post import PostEngine


class FillEngine(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1), "word": In(isa.INSN_BITS), "busy": Out(1),
            "act_addr": Out(p.act_bits), "act_we": Out(1), "act_wdata": Out(p.line_bits),
        })

    def elaborate(self, platform):
        m = Module()
        p, op, w = self.p, isa.Op.FILL, self.word
        # `rows` runs of `count` lines, `stride` lines apart: the two-level loop of every unit (hw/loop.py).
        # The fields are captured in every cycle the engine is idle (an issue only comes then), so the wide
        # enables start from the engine's own registers; `start` only sets `writing`.
        writing = Signal()
        value = Signal(8)
        loop = loop2d(m, "fl", load=~self.busy, step=writing, n_outer=field(w, op, "rows"),
                      n_inner=field(w, op, "count"),
                      streams=[(field(w, op, "addr"), field(w, op, "stride"), Const(1, 2), p.act_bits)])
        with m.If(~self.busy):
            m.d.sync += value.eq(field(w, op, "value"))
        with m.If(self.start):
            m.d.sync += writing.eq(1)
        with m.Elif(writing & loop.last):
            m.d.sync += writing.eq(0)
        # the last write request is performed MEM_WRITE_LATENCY cycles later
        wpend = [Signal(name=f"wpend{i}") for i in range(isa.MEM_WRITE_LATENCY)]
        m.d.sync += [wpend[i].eq(writing if i == 0 else wpend[i - 1]) for i in range(len(wpend))]
        m.d.comb += [self.busy.eq(writing | Cat(*wpend).any()), self.act_we.eq(writing),
                     self.act_addr.eq(Mux(writing, loop.ptrs[0], 0)),
                     self.act_wdata.eq(Mux(writing, value.replicate(p.n), 0))]
        return m


class PostUnit(wiring.Component):
    """Tile v2: PPU/VEC (PostEngine) and FILL on one issue slot; one instruction at a time, so the
    engines never use the ACT port or the ACC read port in the same cycle (OR-combined ports). (A PPU.dw may
    start while the PPU.dw before it drains its second pipe, `dw_drain`: only that pipe writes ACT until the new
    one's first result, long after the drain.)"""

    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1), "word": In(isa.INSN_BITS), "busy": Out(1),
            "dw_drain": Out(1),   # a PPU.dw may issue though POST is busy (PostEngine.dw_drain)
            "act_addr": Out(p.act_bits), "act_we": Out(1), "act_wdata": Out(p.line_bits),
            "act_rdata": In(p.line_bits),
            "acc_raddr": Out(p.acc_bits), "acc_rdata": In(p.acc_line_bits),
            "param_addr": Out(p.param_bits), "param_data": In(p.beat_bits),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        m.submodules.post = post = PostEngine(p)
        m.submodules.fill = fill = FillEngine(p)
        op = opcode(self.word)
        m.d.comb += [post.start.eq(self.start & ((op == isa.Op.PPU) | (op == isa.Op.VEC))), post.word.eq(self.word),
                     fill.start.eq(self.start & (op == isa.Op.FILL)), fill.word.eq(self.word),
                     self.busy.eq(post.busy | fill.busy), self.dw_drain.eq(post.dw_drain & ~fill.busy),
                     self.act_addr.eq(post.act_addr | fill.act_addr),
                     self.act_we.eq(post.act_we | fill.act_we),
                     self.act_wdata.eq(post.act_wdata | fill.act_wdata),
                     post.act_data.eq(self.act_rdata),
                     self.acc_raddr.eq(post.acc_raddr), post.acc_rdata.eq(self.acc_rdata),
                     self.param_addr.eq(post.param_addr), post.param_data.eq(self.param_data)]
        return m


class ComputeUnit(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        if p.post_unit:  # tile v2: the GEMM engine alone (PPU/VEC/FILL are the PostUnit)
            super().__init__({
                "start": In(1), "word": In(isa.INSN_BITS), "accept_gemm": Out(1), "busy": Out(1),
                "older_busy": Out(isa.PPU_MAX_LAG),  # bit k-1: a GEMM but the k latest is in flight (PPU.lag)
                "act_addr": Out(p.act_bits), "act_rdata": In(p.line_bits),
                "acc_raddr": Out(p.acc_bits), "acc_rdata": In(p.acc_line_bits),
                "acc_waddr": Out(p.acc_bits), "acc_wdata": Out(p.acc_line_bits), "acc_we": Out(1),
                "wgt_addr": Out(p.wgt_bits - p.log2r), "wgt_data": In(p.wgt_read_rows * p.line_bits),
            })
            return
        super().__init__({
            "start": In(1),
            "word": In(isa.INSN_BITS),
            "accept_gemm": Out(1),
            "busy": Out(1),
            # ACT port A (read and write share the address)
            "act_addr": Out(p.act_bits), "act_we": Out(1), "act_wdata": Out(p.line_bits),
            "act_rdata": In(p.line_bits),
            # ACC: one read port, one write port
            "acc_raddr": Out(p.acc_bits), "acc_rdata": In(p.acc_line_bits),
            "acc_waddr": Out(p.acc_bits), "acc_wdata": Out(p.acc_line_bits), "acc_we": Out(1),
            "wgt_addr": Out(p.wgt_bits - p.log2r), "wgt_data": In(p.wgt_read_rows * p.line_bits),
            "param_addr": Out(p.param_bits), "param_data": In(p.beat_bits),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        m.submodules.gemm = gemm = GemmEngine(p)
        if p.post_unit:
            m.d.comb += [gemm.start.eq(self.start), gemm.word.eq(self.word),
                         self.accept_gemm.eq(gemm.accept), self.busy.eq(gemm.busy),
                         self.older_busy.eq(gemm.older_busy),
                         self.act_addr.eq(gemm.act_addr), gemm.act_data.eq(self.act_rdata),
                         self.acc_raddr.eq(gemm.acc_raddr), gemm.acc_rdata.eq(self.acc_rdata),
                         self.acc_waddr.eq(gemm.acc_waddr), self.acc_wdata.eq(gemm.acc_wdata),
                         self.acc_we.eq(gemm.acc_we),
                         self.wgt_addr.eq(gemm.wgt_addr), gemm.wgt_data.eq(self.wgt_data)]
            return m
        # tile v1: PPU/VEC/FILL share the GEMM's issue slot (a GEMM is accepted while they are idle)
        m.submodules.post = post = PostUnit(p)
        op = opcode(self.word)
        m.d.comb += [
            gemm.start.eq(self.start & (op == isa.Op.GEMM)), gemm.word.eq(self.word),
            post.start.eq(self.start & (op != isa.Op.GEMM)), post.word.eq(self.word),
            self.accept_gemm.eq(gemm.accept & ~post.busy),
            self.busy.eq(gemm.busy | post.busy),
            self.act_addr.eq(gemm.act_addr | post.act_addr),
            self.act_we.eq(post.act_we), self.act_wdata.eq(post.act_wdata),
            gemm.act_data.eq(self.act_rdata), post.act_rdata.eq(self.act_rdata),
            self.acc_raddr.eq(gemm.acc_raddr | post.acc_raddr),
            gemm.acc_rdata.eq(self.acc_rdata), post.acc_rdata.eq(self.acc_rdata),
            self.acc_waddr.eq(gemm.acc_waddr), self.acc_wdata.eq(gemm.acc_wdata), self.acc_we.eq(gemm.acc_we),
            self.wgt_addr.eq(gemm.wgt_addr), gemm.wgt_data.eq(self.wgt_data),
            self.param_addr.eq(post.param_addr), post.param_data.eq(self.param_data),
        ]
        return m
