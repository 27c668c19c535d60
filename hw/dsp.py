"""A registered 18x18 multiplier: the unit every multiplication of the tile is built from.

`RegMul`: `p` (36 bits, signed) = `a` * `b` (18 bits each, signed; callers sign- or
zero-extend their operands), `LATENCY` = 2 cycles later: the operands are registered, then
the product. In tile.v every RegMul is an instance of one Verilog module, `hwc_mul18`, whose
plain-RTL definition (`VERILOG`: two registers, a `*`, a register) the generator appends to
tile.v; the simulations run that. The ECP5 synthesis flow (hw/synth.py) reads `ECP5_VERILOG`
over it instead: a MULT18X18D with its input and output registers, the same function and
latency, so the whole multiplier path lies inside the DSP block and a route into or out of a
DSP block starts or ends at a register, however far from its neighbours the placer puts it.
(Inside Amaranth's own simulator, used by the block tests, RegMul is the same RTL directly.)
"""

from __future__ import annotations

import contextlib

from amaranth.hdl import ClockSignal, Instance, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

LATENCY = 2
WIDTH = 18
MODULE = "hwc_mul18"

VERILOG = f"""
module {MODULE} (clk, a, b, p);
  input clk;
  input signed [{WIDTH - 1}:0] a;
  input signed [{WIDTH - 1}:0] b;
  output reg signed [{2 * WIDTH - 1}:0] p = 0;
  reg signed [{WIDTH - 1}:0] ar = 0;
  reg signed [{WIDTH - 1}:0] br = 0;
  always @(posedge clk) begin
    ar <= a;
    br <= b;
    p <= ar * br;
  end
endmodule
"""

_pins = ", ".join([f".A{i}(a[{i}])" for i in range(WIDTH)] + [f".B{i}(b[{i}])" for i in range(WIDTH)]
                  + [f".C{i}(1'b0)" for i in range(WIDTH)] + [f".P{i}(p[{i}])" for i in range(2 * WIDTH)])
_params = ", ".join(f'.{k}("{v}")' for k, v in (
    ("REG_INPUTA_CLK", "CLK0"), ("REG_INPUTA_CE", "CE0"), ("REG_INPUTA_RST", "RST0"),
    ("REG_INPUTB_CLK", "CLK0"), ("REG_INPUTB_CE", "CE0"), ("REG_INPUTB_RST", "RST0"),
    ("REG_INPUTC_CLK", "NONE"), ("REG_PIPELINE_CLK", "NONE"),
    ("REG_OUTPUT_CLK", "CLK0"), ("REG_OUTPUT_CE", "CE0"), ("REG_OUTPUT_RST", "RST0"),
    ("CLK0_DIV", "ENABLED"), ("HIGHSPEED_CLK", "NONE"), ("GSR", "DISABLED"), ("RESETMODE", "SYNC"),
    ("MULT_BYPASS", "DISABLED"), ("CAS_MATCH_REG", "FALSE")))
# SOURCEB_MODE stays at its default (B_SHIFT; with SOURCEB = 0 the B input is used): "B_INPUT" is no
# value of the parameter, and ecppack aborts on it.
#: `hwc_mul18` for ECP5: signed 18x18 -> 36 bits with registered inputs and output, clocked by
#: `clk`, always enabled, never reset (the registers start at 0 as the RTL's do).
ECP5_VERILOG = f"""
module {MODULE} (clk, a, b, p);
  input clk;
  input [{WIDTH - 1}:0] a;
  input [{WIDTH - 1}:0] b;
  output [{2 * WIDTH - 1}:0] p;
  MULT18X18D #({_params}) dsp ({_pins},
    .SIGNEDA(1'b1), .SIGNEDB(1'b1), .SOURCEA(1'b0), .SOURCEB(1'b0),
    .CLK0(clk), .CLK1(1'b0), .CLK2(1'b0), .CLK3(1'b0), .CE0(1'b1), .CE1(1'b0), .CE2(1'b0), .CE3(1'b0),
    .RST0(1'b0), .RST1(1'b0), .RST2(1'b0), .RST3(1'b0));
endmodule
"""

_instances = False


@contextlib.contextmanager
def as_instances():
    """While active, RegMul elaborates to an instance of `hwc_mul18` (for tile.v)."""
    global _instances
    old, _instances = _instances, True
    try:
        yield
    finally:
        _instances = old


class RegMul(wiring.Component):
    def __init__(self):
        super().__init__({"a": In(signed(WIDTH)), "b": In(signed(WIDTH)), "p": Out(signed(2 * WIDTH))})

    def elaborate(self, platform):
        m = Module()
        if _instances:
            m.submodules.mul = Instance(MODULE, i_clk=ClockSignal(), i_a=self.a, i_b=self.b, o_p=self.p)
            return m
        ar = Signal(signed(WIDTH), reset_less=True)
        br = Signal(signed(WIDTH), reset_less=True)
        pr = Signal(signed(2 * WIDTH), reset_less=True)
        m.d.sync += [ar.eq(self.a), br.eq(self.b), pr.eq(ar * br)]
        m.d.comb += self.p.eq(pr)
        return m


def regmul(m: Module, name: str, a, b) -> Signal:
    """a * b through a RegMul submodule `name` (a and b must fit 18 bits signed once extended by
    their own signedness); the 36-bit signed product comes LATENCY cycles later."""
    mul = RegMul()
    m.submodules[name] = mul
    m.d.comb += [mul.a.eq(a), mul.b.eq(b)]
    return mul.p
