"""The MAC array: N weight-stationary rows, each an int8 dot product over one broadcast line.

Dataflow (docs/tile.md section 1): the array holds an *active* weight block W[N][N]
(row r = output channel r, column c = input channel c) and a *shadow* block that is
written one word of wgt_read_rows rows per cycle (`row_we`, `row_idx`, `row_data`) while the active block is in
use. `swap` copies shadow -> active at the end of the cycle, so the line presented in the
next cycle already uses the new block (the multipliers register x and the weights together).

Pipeline (all registered, no combinational path from input to output; MAC_PIPE_STAGES = 3):
  cycles c, c+1: x and the active weights into N*N registered 8x8 signed multipliers (hw/dsp.py:
                 operands registered, then the product; on ECP5 both registers are the DSP block's)
  cycle c+2    : the products again (the route away from a DSP block is a stage of its own)
  cycles c+3.. : log2(N) adder-tree levels, one register per level (an 8x8 array: 3 levels)
  cycle c+LATENCY: `dot[r]` = sum_c W[r][c] * x[c] (16 + log2 N bits, signed) is valid.
Depthwise mode (tile v2, `features.depthwise`, docs/tile-v2.md): PE (r, c) takes lane r of the
line streamed c cycles earlier (`sr`, held by the GEMM engine) instead of lane c of x, when the
line's registered per-row mode bit `dw[r]` is set: one 2:1 mux per multiplier input, no added stage.
GEMM.dw9 (`features.dw_ninth_tap`, 8-column arrays): a ninth PE per row multiplies lane r of the line 8
cycles earlier (`sr[8]`, behind row buffer 2's chain: column 8 of the mode over rows) by a ninth weight (its
own shadow and active registers, zero for any GEMM but a dw9 one); its product joins the first tree level.
One register per tree level keeps every stage to one carry chain; the latency only adds a
constant to GEMM_LATENCY (hwc.isa.Timing).
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hwc import isa

from . import dsp
from .params import TileParams

PRODUCT_BITS = 16


def dot_bits(p: TileParams) -> int:
    return PRODUCT_BITS + p.tree_levels


class MacArray(wiring.Component):
    def __init__(self, p: TileParams):
        self.p = p
        self.latency = isa.MAC_PIPE_STAGES + p.tree_levels
        super().__init__({
            "row_we": In(1),
            "row_idx": In(range(p.preload_cycles)),              # a word of wgt_read_rows rows
            "row_data": In(p.wgt_read_rows * p.line_bits),
            "swap": In(1),
            "x": In(p.line_bits),
            "dot": Out(p.n * dot_bits(p)),
            # depthwise mode (features.depthwise): the lines x was 1 .. N-1 cycles earlier (zero before the
            # inner loop's first line), and per row the mode of the current line
            **({"sr": In((p.n - 1 + p.dw9) * p.line_bits), "dw": In(p.n)} if p.depthwise else {}),
            # GEMM.dw9 (features.dw_ninth_tap): a ninth PE per row, lane r of sr[8]; its shadow weights are a
            # row of the preload's extra word, and a swap loads them only for a dw9 GEMM (else zero)
            **({"row9_we": In(1), "swap9": In(1)} if p.dw9 else {}),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.p.n
        shadow = [Signal(self.p.line_bits, name=f"shadow{r}", reset_less=True) for r in range(n)]
        active = [Signal(self.p.line_bits, name=f"active{r}", reset_less=True) for r in range(n)]
        rr, lb = self.p.wgt_read_rows, self.p.line_bits
        for r in range(n):  # word w holds rows w*R .. w*R + R-1: row r takes its slot of word r // R
            with m.If(self.row_we & (self.row_idx == r // rr)):
                m.d.sync += shadow[r].eq(self.row_data[lb * (r % rr):lb * (r % rr + 1)])
        with m.If(self.swap):
            m.d.sync += [a.eq(s) for a, s in zip(active, shadow)]
        if self.p.dw9:
            shadow9 = Signal(lb, name="shadow9", reset_less=True)
            active9 = Signal(lb, name="active9", reset_less=True)
            with m.If(self.row9_we):
                m.d.sync += shadow9.eq(self.row_data[:lb])
            with m.If(self.swap):
                m.d.sync += active9.eq(Mux(self.swap9, shadow9, 0))

        db = dot_bits(self.p)
        assert isa.MAC_PIPE_STAGES == dsp.LATENCY + 1, "MacArray: the registered multiplier, then one register"
        for r in range(n):
            level = []
            for c in range(n):
                w = active[r][8 * c:8 * c + 8].as_signed()
                x = self.x[8 * c:8 * c + 8].as_signed()
                if self.p.depthwise:
                    # PE (r, c) in depthwise mode: lane r of the line c cycles earlier (one 2:1 mux,
                    # selected by a registered per-row mode bit, in front of the multiplier's register)
                    line = self.x if c == 0 else self.sr[(c - 1) * self.p.line_bits:c * self.p.line_bits]
                    x = Mux(self.dw[r], line[8 * r:8 * r + 8].as_signed(), x)
                prod = Signal(signed(PRODUCT_BITS), name=f"q{r}_{c}", reset_less=True)
                m.d.sync += prod.eq(dsp.regmul(m, f"mul{r}_{c}", w, x)[:PRODUCT_BITS])
                level.append(prod)
            ninth = None
            if self.p.dw9:  # the ninth PE: lane r of the line 8 back, weights active9 (zero but for a dw9 GEMM)
                line = self.sr[(n - 1) * lb:n * lb]
                ninth = Signal(signed(PRODUCT_BITS), name=f"q{r}_9", reset_less=True)
                m.d.sync += ninth.eq(dsp.regmul(m, f"mul{r}_9", active9[8 * r:8 * r + 8].as_signed(),
                                                line[8 * r:8 * r + 8].as_signed())[:PRODUCT_BITS])
            depth = 0
            while len(level) > 1:
                depth += 1
                nxt = []
                for k in range(0, len(level), 2):
                    s = Signal(signed(PRODUCT_BITS + depth), name=f"s{r}_{depth}_{k // 2}", reset_less=True)
                    total = level[k] + level[k + 1]
                    if depth == 1 and k == 0 and ninth is not None:
                        total = total + ninth   # 3 x 2**14 at most: the level's 17 bits hold it
                    m.d.sync += s.eq(total)
                    nxt.append(s)
                level = nxt
            m.d.comb += self.dot[db * r:db * (r + 1)].eq(level[0])
        return m
