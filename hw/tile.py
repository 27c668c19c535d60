"""The tile: memories, fetch, in-order issue, LOAD / COMPUTE / STORE units, status.

Issue (docs/tile.md section 4): the FIFO head issues in the first cycle in which its
wait-mask units are idle and its own unit accepts it; one instruction per cycle, in
program order. Why wait-for-idle masks with in-order issue rather than a scoreboard or
VTA's dependency-token queues: the compiler knows every address statically, so it can
name exactly the units an instruction depends on; with one instruction in flight per unit
(plus the GEMM preload/stream overlap), each instruction's start and end are closed
forms of earlier ones, so the Python model computes cycle counts per instruction and the
scheduler can predict them; the hardware is a handful of gates instead of address
comparators or token FIFOs. The cost is conservatism: waiting for a whole unit can delay
an independent instruction, which the scheduler avoids by ordering.

Errors are computed in pre-decode (hw/fetch.py). A head with an error code halts the tile
in the cycle it reaches the head: `error`, `error_code` and `error_pc` (its instruction
index) are set, nothing of it is issued, fetch stops; instructions issued before it
complete. The ACT DMA port is shared by LOAD-into-ACT and STORE: each waits for the other.

Memories (sizes from the target; inputs registered, then the block RAM, then the read data
registered: read data MEM_LATENCY = 3 cycles after the request, a write performed
MEM_WRITE_LATENCY = 1 cycle after its request; a read of an address written in the same cycle
is unspecified, see below):
  ACT   line_bits x act_lines, two read/write ports: A = compute unit, B = DMA
  ACC   acc_line_bits x acc_lines, one read (GEMM RMW / PPU), one write (GEMM)
  WGT   two banks of line_bits x wgt_bank_blocks*N rows (ping-pong: LOAD writes one bank
        while GEMM preloads from the other; the bank is the top row-address bit); with
        scratchpad.wgt_read_rows R > 1 each bank is R memories (row a in a % R), read R rows at once
  PARAM beat_bits x param_entries*PARAM_ENTRY_BEATS

Tile v2 (docs/tile-v2.md), generated per target: `features.post_unit` moves PPU/VEC/FILL into a
fourth unit, POST (hw/compute.py, PostUnit; wait bit Wait.POST; dbg_unit_busy grows to four bits),
and `features.depthwise` adds GEMM.dw/GEMM.skip to the GEMM engine and the MAC array (hw/gemm.py,
hw/mac.py) and to the pre-decode checks (hw/fetch.py). Each is elaborated only when enabled; with both
off the tile is the v1 tile above. With the POST unit:
  ACT   port A is the GEMM's (reads only); port B is shared by POST, LOAD-into-ACT and STORE: the
        issue stage never runs two of them at the same time (a LOAD into ACT or a STORE waits for
        POST to be idle, a POST instruction for the STORE unit and any LOAD into ACT)
  ACC   duplicated: every GEMM write goes to both copies; the GEMM's read-modify-write reads `acc`,
        the PPU reads `acc_post`, so the two never share a read port (and need no arbitration or
        banking rule in the program). Cost: a second ACC's worth of block RAM.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hwc import isa

from .compute import ComputeUnit, PostUnit
from .dma import LoadEngine, StoreEngine
from .fetch import KINDS, Fetch
from .params import CYCLE_BITS, DRAM_ADDR_BITS, LEN_BITS, PC_BITS, TileParams, bits_for, wait_mask


def tile_signature(p: TileParams) -> dict:
    return {
        # control / status
        "start": In(1), "prog_addr": In(PC_BITS),
        "done": Out(1), "busy": Out(1), "error": Out(1), "error_code": Out(isa.ERROR_CODE_BITS),
        "error_pc": Out(PC_BITS), "cycles": Out(CYCLE_BITS),
        # instruction read port
        "imem_addr": Out(PC_BITS), "imem_valid": Out(1), "imem_ready": In(1),
        "imem_data": In(isa.INSN_BITS), "imem_data_valid": In(1),
        # data port: read requests, read data, posted writes
        "dmem_rd_addr": Out(DRAM_ADDR_BITS), "dmem_rd_len": Out(LEN_BITS), "dmem_rd_valid": Out(1),
        "dmem_rd_ready": In(1), "dmem_rdata": In(p.beat_bits), "dmem_rdata_valid": In(1),
        "dmem_wr_addr": Out(DRAM_ADDR_BITS), "dmem_wr_data": Out(p.beat_bits), "dmem_wr_valid": Out(1),
        "dmem_wr_ready": In(1),
        # observation (testbench monitors, performance counters)
        "dbg_issue": Out(1), "dbg_pc": Out(PC_BITS), "dbg_unit_busy": Out(4 if p.post_unit else 3),
    }


class Tile(wiring.Component):
    def __init__(self, target: dict):
        self.p = TileParams.from_target(target)
        super().__init__(tile_signature(self.p))

    def elaborate(self, platform):
        m = Module()
        p = self.p
        m.submodules.fetch = fetch = Fetch(p)
        m.submodules.load = load = LoadEngine(p)
        m.submodules.store = store = StoreEngine(p)
        m.submodules.compute = cmp = ComputeUnit(p)
        if p.post_unit:
            m.submodules.post = post = PostUnit(p)

        # ---- memories ----
        # A read of an address that is written in the same cycle (by another port, or by the same
        # port) returns an unspecified value on the FPGA (`no_rw_check`: yosys adds no collision
        # logic between the block RAM and its output register); the RTL simulation returns the old
        # value. No engine depends on it: correct programs never read and write a line from two
        # units in the same cycle, and the GEMM's ACC read-modify-write forwards every sum not yet
        # written (hw/gemm.py), the one written in the cycle of the read included.
        # Each memory's depth is rounded up to a power of two (PARAM: 5120 beats -> 8192 for tile8x8), so
        # the block RAMs split it by width only: no multiplexer between block RAMs and the read register.
        rw = {"no_rw_check": 1}

        def memory(width, depth):
            return Memory(shape=width, depth=1 << bits_for(depth), init=[], attrs=rw)

        m.submodules.act = act = memory(p.line_bits, p.act_lines)
        m.submodules.acc = acc = memory(p.acc_line_bits, p.acc_lines)
        if p.post_unit:  # the POST unit's copy of the accumulators: written with acc, read by the PPU only
            m.submodules.acc_post = acc_post = memory(p.acc_line_bits, p.acc_lines)
        m.submodules.param = param = memory(p.beat_bits, p.param_beats)
        # WGT: per bank R = wgt_read_rows memories, row a in memory a % R at a // R, so that the preload reads
        # R consecutive rows (one word) per cycle while a LOAD writes one row per beat
        banks = []
        for b in range(2):
            subs = []
            for k in range(p.wgt_read_rows):
                mem = memory(p.line_bits, p.wgt_bank_rows // p.wgt_read_rows)
                m.submodules[f"wgt{b}_{k}"] = mem
                subs.append(mem)
            banks.append(subs)

        # Every memory input (address, write data, write enable) is registered in front of the block
        # RAM, and every read port's data behind it (MEM_LATENCY = 3): the engines compute addresses with
        # a full cycle to spare, the wide address nets to the many block RAMs of a memory start at
        # flip-flops, and a block RAM's slow output (about 6 ns on ECP5) only reaches a register beside it.
        assert isa.MEM_LATENCY == 3 and isa.MEM_WRITE_LATENCY == 1, "the memories below have three read stages"

        def reg(value, name, reset_less=True):
            r = Signal(len(value), name=name, reset_less=reset_less)
            m.d.sync += r.eq(value)
            return r

        if not p.post_unit:
            # ACT: two read/write ports (A: compute, B: DMA)
            a_w, b_w = act.write_port(), act.write_port()
            a_r, b_r = act.read_port(), act.read_port()
            a_addr = reg(cmp.act_addr, "act_a_addr")
            m.d.comb += [a_r.addr.eq(a_addr), a_w.addr.eq(a_addr), a_w.en.eq(reg(cmp.act_we, "act_a_we", False)),
                         a_w.data.eq(reg(cmp.act_wdata, "act_a_wdata")),
                         cmp.act_rdata.eq(reg(a_r.data, "act_a_rdata"))]
            b_addr = reg(Mux(load.act_we, load.waddr[:p.act_bits], store.act_addr), "act_b_addr")
            m.d.comb += [b_r.addr.eq(b_addr), b_w.addr.eq(b_addr), b_w.en.eq(reg(load.act_we, "act_b_we", False)),
                         b_w.data.eq(reg(load.wdata, "act_b_wdata")), store.act_data.eq(reg(b_r.data, "act_b_rdata"))]
        else:
            # tile v2: ACT port A is the GEMM's (read only); port B is shared by POST, LOAD-into-ACT and
            # STORE, which the issue stage never runs at the same time (POST and STORE address zero when
            # unused); the read data register feeds STORE and POST alike.
            b_w = act.write_port()
            a_r, b_r = act.read_port(), act.read_port()
            m.d.comb += [a_r.addr.eq(reg(cmp.act_addr, "act_a_addr")), cmp.act_rdata.eq(reg(a_r.data, "act_a_rdata"))]
            b_addr = reg(Mux(load.act_we, load.waddr[:p.act_bits], store.act_addr | post.act_addr), "act_b_addr")
            b_rdata = reg(b_r.data, "act_b_rdata")
            m.d.comb += [b_r.addr.eq(b_addr), b_w.addr.eq(b_addr),
                         b_w.en.eq(reg(load.act_we | post.act_we, "act_b_we", False)),
                         b_w.data.eq(reg(Mux(load.act_we, load.wdata, post.act_wdata), "act_b_wdata")),
                         store.act_data.eq(b_rdata), post.act_rdata.eq(b_rdata)]

        c_r, c_w = acc.read_port(), acc.write_port()
        m.d.comb += [c_r.addr.eq(reg(cmp.acc_raddr, "acc_raddr")), cmp.acc_rdata.eq(reg(c_r.data, "acc_rdata")),
                     c_w.addr.eq(reg(cmp.acc_waddr, "acc_waddr")), c_w.data.eq(reg(cmp.acc_wdata, "acc_wdata")),
                     c_w.en.eq(reg(cmp.acc_we, "acc_we", False))]
        if p.post_unit:
            # tile v2: the GEMM's read-modify-write and the PPU's reads never share a read port: the
            # accumulators are duplicated, every GEMM write goes to both copies (each with its own
            # registered inputs, beside its block RAMs), the PPU reads the second one
            d_r, d_w = acc_post.read_port(), acc_post.write_port()
            m.d.comb += [d_r.addr.eq(reg(post.acc_raddr, "accp_raddr")), post.acc_rdata.eq(reg(d_r.data, "accp_rdata")),
                         d_w.addr.eq(reg(cmp.acc_waddr, "accp_waddr")), d_w.data.eq(reg(cmp.acc_wdata, "accp_wdata")),
                         d_w.en.eq(reg(cmp.acc_we, "accp_we", False))]

        bank_bits = p.wgt_bits - 1
        lr = p.log2r   # the GEMM reads word addresses: bank bit, then (row address within the bank) >> lr
        wgt_raddr = reg(cmp.wgt_addr, "wgt_raddr")
        wgt_waddr = reg(load.waddr[:p.wgt_bits], "wgt_waddr")
        wgt_wdata = reg(load.wdata, "wgt_wdata")
        wgt_we = reg(load.wgt_we, "wgt_we", False)
        rbank = reg(reg(wgt_raddr[bank_bits - lr], "wgt_rbank0"), "wgt_rbank")
        rdata = []
        for b, subs in enumerate(banks):
            words = []
            for k, mem in enumerate(subs):
                r, wp = mem.read_port(), mem.write_port()
                sel = wgt_we & (wgt_waddr[bank_bits] == b) & (wgt_waddr[:lr] == k)
                m.d.comb += [r.addr.eq(wgt_raddr[:bank_bits - lr]), wp.addr.eq(wgt_waddr[lr:bank_bits]),
                             wp.data.eq(wgt_wdata), wp.en.eq(sel)]
                words.append(reg(r.data, f"wgt{b}_{k}_rdata"))  # per memory: each register beside its block RAMs
            rdata.append(Cat(*words))
        m.d.comb += cmp.wgt_data.eq(Mux(rbank, rdata[1], rdata[0]))

        pr, pw = param.read_port(), param.write_port()
        puser = post if p.post_unit else cmp  # the PPU/VEC's unit
        m.d.comb += [pr.addr.eq(reg(puser.param_addr, "param_raddr")), puser.param_data.eq(reg(pr.data, "param_rdata")),
                     pw.addr.eq(reg(load.waddr[:p.param_bits], "param_waddr")),
                     pw.data.eq(reg(load.wdata, "param_wdata")), pw.en.eq(reg(load.param_we, "param_we", False))]

        # ---- external ports ----
        m.d.comb += [self.imem_addr.eq(fetch.imem_addr), self.imem_valid.eq(fetch.imem_valid),
                     fetch.imem_ready.eq(self.imem_ready), fetch.imem_data.eq(self.imem_data),
                     fetch.imem_data_valid.eq(self.imem_data_valid),
                     self.dmem_rd_addr.eq(load.rd_addr), self.dmem_rd_len.eq(load.rd_len),
                     self.dmem_rd_valid.eq(load.rd_valid), load.rd_ready.eq(self.dmem_rd_ready),
                     load.rdata.eq(self.dmem_rdata), load.rdata_valid.eq(self.dmem_rdata_valid),
                     self.dmem_wr_addr.eq(store.wr_addr), self.dmem_wr_data.eq(store.wr_data),
                     self.dmem_wr_valid.eq(store.wr_valid), store.wr_ready.eq(self.dmem_wr_ready)]

        # ---- status ----
        running = Signal()
        pc = Signal(PC_BITS)
        busy = running | fetch.busy | load.busy | store.busy | cmp.busy
        if p.post_unit:
            # POST's busy through the issue stage's register (post_busy_q, below): POST's busy is a
            # wide OR of its pipeline's valid bits, placed far from the status logic (routed critical
            # path of tile8x8). Only differs from POST's own busy after a fault, where `busy` falls one
            # cycle later: FINISH waits for POST idle, so `running` covers it otherwise.
            post_busy = Signal(name="post_busy_q")
            busy = busy | post_busy
        # `start` is accepted when the tile was not busy in the previous cycle (nor started in it): a
        # register, so the wide start logic does not wait for the busy signals of every unit
        busy_q = Signal()
        start = self.start & ~busy_q
        m.d.sync += busy_q.eq(busy | start)
        m.d.comb += [self.busy.eq(busy), fetch.start.eq(start), fetch.run.eq(running),
                     fetch.prog_addr.eq(self.prog_addr)]
        with m.If(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)

        # ---- issue ----
        # The issue stage sees the units through registers (IDLE_LAG = 1): a unit's busy signal of the
        # previous cycle, or an instruction issued to it in the previous cycle. So an instruction that
        # waits for a unit (or needs it) issues at the earliest the cycle after the unit's end
        # (docs/tile.md section 4); the issue decision starts from registers near it.
        assert isa.IDLE_LAG == 1
        word = fetch.head_word
        wait = wait_mask(word)
        kind = {k: fetch.head_kind[i] for i, k in enumerate(KINDS)}
        issue = Signal()
        # `go`: the head may issue but for its unit; `rdy`: its unit may take it. The head's kind is one-hot, so a
        # unit starts on `go & kind & rdy` of its own kind (the same as `issue & kind`): through `issue`, the OR of
        # every kind's readiness, each unit's start had a path from every busy register (tile8x8's routed critical
        # path ran from older_busy_q through the GEMM's and the LOAD's flags to POST's state: 89.6 MHz)
        go = Signal()
        rdy = {k: Signal(name=f"rdy_{k}") for k in ("load", "store", "gemm", "compute")}
        to_load, to_store = go & kind["load"] & rdy["load"], go & kind["store"] & rdy["store"]
        v2 = p.post_unit  # tile v2: PPU/VEC/FILL ("compute" kind) go to the POST unit
        to_cmp = go & ((kind["gemm"] & rdy["gemm"]) if v2 else
                       ((kind["gemm"] & rdy["gemm"]) | (kind["compute"] & rdy["compute"])))
        load_busy, load_act_busy, store_busy, cmp_busy = (Signal(name=n) for n in (
            "load_busy_q", "load_act_busy_q", "store_busy_q", "cmp_busy_q"))
        gemm_ok = Signal()
        m.d.sync += [load_busy.eq(load.busy | to_load),
                     load_act_busy.eq(load.act_busy | (to_load & fetch.head_load_act)),
                     store_busy.eq(store.busy | to_store), cmp_busy.eq(cmp.busy | to_cmp),
                     gemm_ok.eq(cmp.accept_gemm & ~to_cmp)]
        idle = {isa.Wait.LOAD: ~load_busy, isa.Wait.COMPUTE: ~cmp_busy, isa.Wait.STORE: ~store_busy}
        if v2:
            to_post = go & kind["compute"] & rdy["compute"]
            m.d.sync += post_busy.eq(post.busy | to_post)
            # a PPU.dw may issue behind a PPU.dw whose second pipe still drains (PostEngine.dw_drain)
            post_dw_ok = Signal(name="post_dw_ok_q")
            if p.dw_post:
                m.d.sync += post_dw_ok.eq(post.dw_drain & ~to_post)
            idle[isa.Wait.POST] = ~post_busy
            # PPU.lag: every GEMM but the latest issued has completed (a GEMM issued while others are in
            # flight makes them older: counted from the next cycle on, as the other busy registers)
            # (lag k: the GEMMs but the k - 1 latest before that issue; k = 1: all of them, i.e. busy)
            older_busy = Signal(isa.PPU_MAX_LAG, name="older_busy_q")
            younger = Cat(cmp.busy, cmp.older_busy[:-1])
            m.d.sync += older_busy.eq(cmp.older_busy | (to_cmp.replicate(isa.PPU_MAX_LAG) & younger))
        wait_ok = 1
        for k, (flag, unit_idle) in enumerate(idle.items()):
            assert flag == 1 << k
            wait_ok = wait_ok & (~wait[k] | unit_idle)
        all_idle = idle[isa.Wait.LOAD] & idle[isa.Wait.COMPUTE] & idle[isa.Wait.STORE]
        if v2:
            all_idle = all_idle & idle[isa.Wait.POST]
        if v2:
            # ACT port B: POST, LOAD-into-ACT and STORE exclude each other (docs/tile-v2.md)
            m.d.comb += [rdy["load"].eq(~load_busy & (~fetch.head_load_act | (~store_busy & ~post_busy))),
                         rdy["store"].eq(~store_busy & ~load_act_busy & ~post_busy),
                         rdy["compute"].eq((~post_busy | (post_dw_ok & (fetch.head_ppu_dw if p.dw_post else 0)))
                                           & ~load_act_busy & ~store_busy
                                           & ~(fetch.head_ppu_lag & older_busy).any())]
        else:
            m.d.comb += [rdy["load"].eq(~load_busy & (~fetch.head_load_act | ~store_busy)),
                         rdy["store"].eq(~store_busy & ~load_act_busy),
                         rdy["compute"].eq(~cmp_busy)]
        m.d.comb += rdy["gemm"].eq(gemm_ok)
        can = (~fetch.head_kind.any()  # NOP
               | (kind["load"] & rdy["load"]) | (kind["store"] & rdy["store"]) | (kind["gemm"] & rdy["gemm"])
               | (kind["compute"] & rdy["compute"]) | (kind["finish"] & all_idle))
        head = running & fetch.head_valid
        fault = head & (fetch.head_err != isa.ErrorCode.NONE)
        m.d.comb += [go.eq(head & ~fault & wait_ok), issue.eq(go & can)]
        m.d.comb += [fetch.pop.eq(issue),
                     load.start.eq(to_load), load.word.eq(word),
                     store.start.eq(to_store), store.word.eq(word),
                     cmp.start.eq(to_cmp), cmp.word.eq(word),
                     self.dbg_issue.eq(issue), self.dbg_pc.eq(pc)]
        # the units' busy signals of the previous cycle (a register: the units sit far apart)
        m.d.sync += self.dbg_unit_busy.eq(Cat(load.busy, cmp.busy, store.busy, *([post.busy] if v2 else [])))
        if v2:
            m.d.comb += [post.start.eq(to_post), post.word.eq(word)]
        with m.If(issue):
            m.d.sync += pc.eq(pc + 1)
            with m.If(kind["finish"]):
                m.d.sync += [running.eq(0), self.done.eq(1)]
        with m.If(fault):
            m.d.sync += [running.eq(0), self.error.eq(1), self.error_code.eq(fetch.head_err),
                         self.error_pc.eq(pc)]
        with m.If(start):
            m.d.sync += [running.eq(1), pc.eq(0), self.cycles.eq(0), self.done.eq(0), self.error.eq(0),
                         self.error_code.eq(0), self.error_pc.eq(0)]
        return m

