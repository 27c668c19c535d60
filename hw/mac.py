"""The MAC array: N weight-stationary rows, each an int8 dot product over one broadcast line.

Dataflow (docs/tile.md section 1): the array holds an *active* weight block W[N][N]
(row r = output channel r, column c = input channel c) and a *shadow* block that is
written one row per cycle (`row_we`, `row_idx`, `row_data`) while the active block is in
use. `swap` takes effect at the end of the cycle, so the line presented in the next cycle
already uses the new block (inside, the copy shadow -> active is delayed as x is, by
X_STAGES; the shadow registers may be rewritten from the cycle after `swap`: that write and
the delayed copy happen at the same clock edge, and the copy takes the old value).

Pipeline (all registered, no combinational path from input to output; MAC_PIPE_STAGES = 3):
  cycle c      : x is copied into one register per row (each copy feeds only that row's multipliers)
  cycle c+1    : the row's x copy and the active weights go into N 8x8 signed multipliers -> product regs
  cycle c+2    : the products again (the route from the DSP block is a stage of its own, so the
                 multiplier path is register -> DSP -> register, with both registers beside it)
  cycles c+3.. : log2(N) adder-tree levels, one register per level (an 8x8 array: 3 levels)
  cycle c+LATENCY: `dot[r]` = sum_c W[r][c] * x[c] (16 + log2 N bits, signed) is valid.
One register per tree level keeps every stage to one carry chain; the latency only adds a
constant to GEMM_LATENCY (hwc.isa.Timing).
"""

from __future__ import annotations

from amaranth.hdl import Array, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwc import isa

from .params import DUP, TileParams

PRODUCT_BITS = 16
#: Register stages between `x` and the multipliers (the per-row copy).
X_STAGES = 1


def dot_bits(p: TileParams) -> int:
    return PRODUCT_BITS + p.tree_levels


class MacArray(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        self.latency = isa.MAC_PIPE_STAGES + p.tree_levels
        super().__init__({
            "row_we": In(1),
            "row_idx": In(range(p.n)),
            "row_data": In(p.line_bits),
            "swap": In(1),
            "x": In(p.line_bits),
            "dot": Out(p.n * dot_bits(p)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.p.n
        shadow = [Signal(self.p.line_bits, name=f"shadow{r}", reset_less=True) for r in range(n)]
        active = [Signal(self.p.line_bits, name=f"active{r}", reset_less=True) for r in range(n)]
        with m.If(self.row_we):
            m.d.sync += Array(shadow)[self.row_idx].eq(self.row_data)
        assert X_STAGES == 1
        for r in range(n):  # one delayed swap per row (each enables that row's weights only)
            swap = Signal(name=f"swap{r}", attrs=DUP)
            m.d.sync += swap.eq(self.swap)
            with m.If(swap):
                m.d.sync += active[r].eq(shadow[r])

        db = dot_bits(self.p)
        assert isa.MAC_PIPE_STAGES == 3, "MacArray below is written with three stages before the tree"
        for r in range(n):
            xr = Signal(self.p.line_bits, name=f"x{r}", reset_less=True, attrs=DUP)
            m.d.sync += xr.eq(self.x)
            level = []
            for c in range(n):
                prod = Signal(signed(PRODUCT_BITS), name=f"p{r}_{c}", reset_less=True)
                prod2 = Signal(signed(PRODUCT_BITS), name=f"q{r}_{c}", reset_less=True)
                w = active[r][8 * c:8 * c + 8].as_signed()
                x = xr[8 * c:8 * c + 8].as_signed()
                m.d.sync += [prod.eq(w * x), prod2.eq(prod)]
                level.append(prod2)
            depth = 0
            while len(level) > 1:
                depth += 1
                nxt = []
                for k in range(0, len(level), 2):
                    s = Signal(signed(PRODUCT_BITS + depth), name=f"s{r}_{depth}_{k // 2}", reset_less=True)
                    m.d.sync += s.eq(level[k] + level[k + 1])
                    nxt.append(s)
                level = nxt
            m.d.comb += self.dot[db * r:db * (r + 1)].eq(level[0])
        return m
