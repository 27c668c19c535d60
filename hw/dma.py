"""LOAD and STORE DMA engines on the dmem port (protocol: docs/tile.md section 5).

LOAD (external -> ACT / WGT / PARAM): one read request per row (`len = row_beats`), one
request per cycle while `ready`; beats come back in order, one per cycle, `Lm` cycles
after their request. Each beat is registered with its on-chip address and requested as a
write the next cycle (the memory performs it MEM_WRITE_LATENCY cycles later). With an
always-ready memory the unit is busy for `LOAD_OVERHEAD + Lm + rows*row_beats` cycles.

STORE (ACT -> external): the engine reads one ACT line per cycle into a small FIFO
(`STORE_FIFO_DEPTH` entries, with the reads in flight counted, so it never overflows) and
posts one write beat per cycle from the FIFO head while `ready`. Busy for
`STORE_OVERHEAD + rows*row_beats` cycles with an always-ready memory: read requested in
cycle c, data and FIFO write in c + MEM_LATENCY, beat posted the cycle after.

Both engines use the ACT DMA port (port B): LOAD into ACT writes it, STORE reads it, so
the issue stage never runs them at the same time (a STORE waits for an ACT LOAD and vice
versa; LOADs into WGT or PARAM overlap a STORE freely).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from hwc import isa

from .loop import loop2d
from .params import DRAM_ADDR_BITS, LEN_BITS, TileParams, field

ML = isa.MEM_LATENCY
WL = isa.MEM_WRITE_LATENCY
#: ML reads in flight and one beat waiting to be posted fit, with one entry to spare: a read per cycle
STORE_FIFO_DEPTH = ML + 2


class LoadEngine(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        self.sram_bits = max(p.act_bits, p.wgt_bits, p.param_bits)
        super().__init__({
            "start": In(1),
            "word": In(isa.INSN_BITS),
            "busy": Out(1),
            "act_busy": Out(1),           # busy with a LOAD into ACT (excludes STORE)
            "rd_addr": Out(DRAM_ADDR_BITS),
            "rd_len": Out(LEN_BITS),
            "rd_valid": Out(1),
            "rd_ready": In(1),
            "rdata": In(p.beat_bits),
            "rdata_valid": In(1),
            # one write per cycle into the memory selected by `mem`
            "act_we": Out(1), "wgt_we": Out(1), "param_we": Out(1),
            "waddr": Out(self.sram_bits),
            "wdata": Out(p.beat_bits),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        op = isa.Op.LOAD
        w = self.word
        busy = Signal()
        mem = Signal(2)
        # request side: one request per row
        req_active = Signal()
        # the instruction's fields are captured in every idle cycle (an issue only comes then), so the
        # wide enables start from `busy`, a register here, not from the issue decision (hw/tile.py)
        capture = ~busy
        req = loop2d(m, "req", load=capture, step=self.rd_valid & self.rd_ready,
                     n_outer=field(w, op, "rows"), n_inner=Const(1, 1),
                     streams=[(field(w, op, "dram"), field(w, op, "dram_stride"), Const(0, 1), DRAM_ADDR_BITS)])
        row_beats = Signal(LEN_BITS)
        m.d.comb += [self.rd_valid.eq(req_active), self.rd_addr.eq(req.ptrs[0]), self.rd_len.eq(row_beats)]
        # receive side: one beat per rdata_valid, into sram + r*sram_stride + j
        rcv = loop2d(m, "rcv", load=capture, step=self.rdata_valid & busy,
                     n_outer=field(w, op, "rows"), n_inner=field(w, op, "row_beats"),
                     streams=[(field(w, op, "sram"), field(w, op, "sram_stride"), Const(1, 1),
                               self.sram_bits)])
        wv, wlast = Signal(), Signal()
        waddr, wdata = Signal(self.sram_bits, reset_less=True), Signal(p.beat_bits, reset_less=True)
        m.d.sync += [wv.eq(self.rdata_valid & busy), wlast.eq(rcv.last), waddr.eq(rcv.ptrs[0]),
                     wdata.eq(self.rdata)]
        m.d.comb += [self.waddr.eq(waddr), self.wdata.eq(wdata),
                     self.act_we.eq(wv & (mem == isa.Mem.ACT)), self.wgt_we.eq(wv & (mem == isa.Mem.WGT)),
                     self.param_we.eq(wv & (mem == isa.Mem.PARAM))]
        with m.If(self.rd_valid & self.rd_ready & req.last):
            m.d.sync += req_active.eq(0)
        # the last write request is performed by the memory WL cycles later: busy until then
        done = [Signal(name=f"done{i}") for i in range(WL)]
        m.d.sync += [done[i].eq((wv & wlast) if i == 0 else done[i - 1]) for i in range(WL)]
        with m.If(done[-1] if done else (wv & wlast)):
            m.d.sync += busy.eq(0)
        with m.If(capture):
            m.d.sync += [mem.eq(field(w, op, "mem")), row_beats.eq(field(w, op, "row_beats"))]
        with m.If(self.start):
            m.d.sync += [busy.eq(1), req_active.eq(1)]
        m.d.comb += [self.busy.eq(busy), self.act_busy.eq(busy & (mem == isa.Mem.ACT))]
        return m


class StoreEngine(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        super().__init__({
            "start": In(1),
            "word": In(isa.INSN_BITS),
            "busy": Out(1),
            "act_addr": Out(p.act_bits),
            "act_re": Out(1),
            "act_data": In(p.line_bits),
            "wr_addr": Out(DRAM_ADDR_BITS),
            "wr_data": Out(p.beat_bits),
            "wr_valid": Out(1),
            "wr_ready": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.p
        op = isa.Op.STORE
        w = self.word
        m.submodules.fifo = fifo = SyncFIFO(width=p.beat_bits + DRAM_ADDR_BITS, depth=STORE_FIFO_DEPTH)
        active = Signal()
        # reads in flight: ACT data arrives ML cycles after the read request
        pending = [Signal(name=f"pending{i}") for i in range(ML)]
        pend_addr = [Signal(DRAM_ADDR_BITS, name=f"pend_addr{i}", reset_less=True) for i in range(ML)]
        # FIFO entries taken, the reads in flight included (= fifo.level + the pending reads), as a
        # register of its own: `room` is then one compare of flip-flops, not an adder behind the FIFO's
        # level (the routed critical path of tile8x8 ran from `pending` through that adder into ACT
        # port B's address register)
        taken = Signal(range(STORE_FIFO_DEPTH + 1))
        room = taken < STORE_FIFO_DEPTH
        rd = active & room
        pop = fifo.r_en & fifo.r_rdy
        m.d.sync += taken.eq(taken + rd - pop)
        # fields captured in every cycle the read side is idle (see LoadEngine)
        loop = loop2d(m, "st", load=~active, step=rd,
                      n_outer=field(w, op, "rows"), n_inner=field(w, op, "row_beats"),
                      streams=[(field(w, op, "sram"), field(w, op, "sram_stride"), Const(1, 1), p.act_bits),
                               (field(w, op, "dram"), field(w, op, "dram_stride"), Const(1, 1),
                                DRAM_ADDR_BITS)])
        m.d.comb += [self.act_re.eq(rd), self.act_addr.eq(Mux(rd, loop.ptrs[0], 0))]
        m.d.sync += [pending[0].eq(rd), pend_addr[0].eq(loop.ptrs[1])]
        m.d.sync += [pending[i + 1].eq(pending[i]) for i in range(ML - 1)]
        m.d.sync += [pend_addr[i + 1].eq(pend_addr[i]) for i in range(ML - 1)]
        m.d.comb += [fifo.w_en.eq(pending[-1]), fifo.w_data.eq((pend_addr[-1] << p.beat_bits) | self.act_data),
                     self.wr_valid.eq(fifo.r_rdy), self.wr_data.eq(fifo.r_data[:p.beat_bits]),
                     self.wr_addr.eq(fifo.r_data[p.beat_bits:]), fifo.r_en.eq(self.wr_ready)]
        with m.If(rd & loop.last):
            m.d.sync += active.eq(0)
        with m.If(self.start):
            m.d.sync += active.eq(1)
        m.d.comb += self.busy.eq(active | Cat(*pending).any() | (fifo.level != 0))
        return m
