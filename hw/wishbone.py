"""Wishbone adapter: the tile's control and status as 32-bit registers (Wishbone B4 classic).

Register map (word addresses, 32-bit data, `sel` ignored: whole-word access):
  0 CTRL       W  bit 0: start (ignored while busy)              R  0
  1 STATUS     R  bit 0 busy, bit 1 done, bit 2 error
  2 PROG_ADDR  RW instruction index of the program (imem beat address)
  3 ERROR_CODE R  hwc.isa.ErrorCode of the halt
  4 ERROR_PC   R  index of the faulting instruction
  5 CYCLES     R  the cycle counter (cycles of the last program)
  6 CONFIG     R  [7:0] N, [15:8] bus bytes, [23:16] read latency, [31:24] FIFO depth
  7 ID         R  0x68776331 ("hwc1")
A cycle is acknowledged one clock after `cyc & stb` (registered ack, no wait states, no
error/retry); `irq` is high while done or error. The imem/dmem ports are passed through
unchanged, for the SoC's memory interconnect.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .params import TileParams
from .tile import Tile, tile_signature

ID = 0x68776331
REGS = ("CTRL", "STATUS", "PROG_ADDR", "ERROR_CODE", "ERROR_PC", "CYCLES", "CONFIG", "ID")


def memory_ports(p: TileParams) -> list[str]:
    return [name for name in tile_signature(p) if name.startswith(("imem_", "dmem_"))]


class WishboneTile(wiring.Component):
    def __init__(self, target: dict):
        self.target = target
        self.p = TileParams.from_target(target)
        sig = {"wb_cyc": In(1), "wb_stb": In(1), "wb_we": In(1), "wb_adr": In(3), "wb_dat_w": In(32),
               "wb_sel": In(4), "wb_dat_r": Out(32), "wb_ack": Out(1), "irq": Out(1)}
        full = tile_signature(self.p)
        sig.update({k: full[k] for k in memory_ports(self.p)})
        super().__init__(sig)

    def elaborate(self, platform):
        m = Module()
        p = self.p
        m.submodules.tile = tile = Tile(self.target)
        for name in memory_ports(p):
            if self.signature.members[name].flow == In:
                m.d.comb += getattr(tile, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(tile, name))
        prog_addr = Signal(len(tile.prog_addr))
        m.d.comb += [tile.prog_addr.eq(prog_addr), self.irq.eq(tile.done | tile.error)]
        req = self.wb_cyc & self.wb_stb & ~self.wb_ack
        m.d.sync += self.wb_ack.eq(req)
        start = Signal()
        m.d.comb += tile.start.eq(start)
        m.d.sync += start.eq(0)
        with m.If(req & self.wb_we):
            with m.Switch(self.wb_adr):
                with m.Case(REGS.index("CTRL")):
                    m.d.sync += start.eq(self.wb_dat_w[0])
                with m.Case(REGS.index("PROG_ADDR")):
                    m.d.sync += prog_addr.eq(self.wb_dat_w)
        config = (p.n & 0xFF) | ((p.beat_bytes & 0xFF) << 8) | ((p.read_latency & 0xFF) << 16) | \
            ((p.fifo_depth & 0xFF) << 24)
        with m.If(req & ~self.wb_we):
            with m.Switch(self.wb_adr):
                values = {"CTRL": 0, "STATUS": Cat(tile.busy, tile.done, tile.error), "PROG_ADDR": prog_addr,
                          "ERROR_CODE": tile.error_code, "ERROR_PC": tile.error_pc, "CYCLES": tile.cycles,
                          "CONFIG": config, "ID": ID}
                for k, name in enumerate(REGS):
                    with m.Case(k):
                        m.d.sync += self.wb_dat_r.eq(values[name])
        return m
