"""Hand-built int8 graphs for scheduler tests (independent of the quantizer)."""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph, QuantParams
from hwc.ir.types import TensorType


def _q(g: Graph, name: str, zp: int, scale: float = 0.05) -> None:
    g.values[name].quant = QuantParams(np.array(scale), np.array(zp))


class QBuilder:
    """Builds int8 graphs with random but valid integer parameters."""

    def __init__(self, seed=0, name="q"):
        self.g = Graph(name)
        self.rng = np.random.default_rng(seed)

    def input(self, name, shape, zp=0):
        self.g.add_input(name, TensorType("int8", shape))
        _q(self.g, name, zp)
        return name

    def _requant(self, m):
        mult = self.rng.integers(1 << 30, (1 << 31) - 1, m).astype(np.int32)
        shift = self.rng.integers(36, 42, m).astype(np.int32)
        return mult, shift

    def _neg(self, ins, m, neg):
        """A fused LeakyReLU (QConv / QGemm's 6th input): negative accumulators take a smaller multiplier."""
        if neg:
            ins.append(self.g.add_const(self.rng.integers(1 << 26, 1 << 29, m).astype(np.int32), "mn"))
        return ins

    def conv(self, x, m, k=3, stride=1, pads=None, group=1, zp_out=None, relu=False, dil=1, neg=False):
        g = self.g
        c = g.type(x).shape[1]
        kh, kw = (k, k) if isinstance(k, int) else k   # (k or (kh, kw); stride or (sh, sw))
        pads = pads if pads is not None else [kh // 2, kw // 2] * 2
        w = self.rng.integers(-127, 128, (m, c // group, kh, kw)).astype(np.int8)
        b = self.rng.integers(-5000, 5000, m).astype(np.int32)
        mult, shift = self._requant(m)
        z_in = int(g.values[x].quant.zero_point)
        zo = int(self.rng.integers(-20, 20)) if zp_out is None else zp_out
        ins = [x] + [g.add_const(a, hint) for a, hint in ((w, "w"), (b, "b"), (mult, "m"), (shift, "s"))]
        ins = self._neg(ins, m, neg)
        strides = [stride] * 2 if isinstance(stride, int) else list(stride)
        n = g.make_node("QConv", ins, {"strides": strides, "pads": pads, "dilations": [dil] * 2, "group": group,
                                       "z_in": z_in, "z_out": zo, "lo": zo if relu else -128, "hi": 127})
        _q(g, n.outputs[0], zo)
        return n.outputs[0]

    def gemm(self, x, m, neg=False):
        g = self.g
        k = g.type(x).shape[1]
        w = self.rng.integers(-127, 128, (m, k)).astype(np.int8)
        b = self.rng.integers(-5000, 5000, m).astype(np.int32)
        mult, shift = self._requant(m)
        z_in = int(g.values[x].quant.zero_point)
        zo = int(self.rng.integers(-20, 20))
        ins = [x] + [g.add_const(a, hint) for a, hint in ((w, "w"), (b, "b"), (mult, "m"), (shift, "s"))]
        n = g.make_node("QGemm", self._neg(ins, m, neg), {"z_in": z_in, "z_out": zo})
        _q(g, n.outputs[0], zo)
        return n.outputs[0]

    def flatten(self, x):
        shape = self.g.type(x).shape
        n = self.g.make_node("Reshape", [x], {"shape": [shape[0], int(np.prod(shape[1:]))]})
        _q(self.g, n.outputs[0], int(self.g.values[x].quant.zero_point))
        return n.outputs[0]

    def add(self, a, b, relu=False):
        g = self.g
        zo = int(self.rng.integers(-10, 10))
        n = g.make_node("QAdd", [a, b], {"z_a": int(g.values[a].quant.zero_point),
                                          "z_b": int(g.values[b].quant.zero_point),
                                          "mult_a": int(self.rng.integers(1 << 29, 1 << 30)),
                                          "mult_b": int(self.rng.integers(1 << 29, 1 << 30)), "shift": 31,
                                          "z_out": zo, "lo": zo if relu else -128, "hi": 127})
        _q(g, n.outputs[0], zo)
        return n.outputs[0]

    def maxpool(self, x, k=2, s=2, pads=(0, 0, 0, 0), ceil=False):
        k = [k, k] if isinstance(k, int) else list(k)   # (k or (kh, kw); s or (sh, sw))
        s = [s, s] if isinstance(s, int) else list(s)
        n = self.g.make_node("MaxPool", [x], {"kernel_shape": k, "strides": s, "pads": list(pads),
                                              "dilations": [1, 1], "ceil_mode": int(ceil)})
        _q(self.g, n.outputs[0], int(self.g.values[x].quant.zero_point))
        return n.outputs[0]

    def avgpool(self, x, k=2, s=2, pads=(0, 0, 0, 0)):
        g = self.g
        zo = int(self.rng.integers(-10, 10))
        ins = [x, g.add_const(np.array([1 << 30], np.int32), "m"), g.add_const(np.array([32], np.int32), "s")]
        n = g.make_node("QAvgPool", ins, {"kernel_shape": [k, k], "strides": [s, s], "pads": list(pads),
                                          "dilations": [1, 1], "count_include_pad": 1,
                                          "z_in": int(g.values[x].quant.zero_point), "z_out": zo})
        _q(g, n.outputs[0], zo)
        return n.outputs[0]

    def gap(self, x):
        g = self.g
        hw = int(np.prod(g.type(x).shape[2:]))
        from hwc.quant.arith import quantize_multiplier

        m, s = quantize_multiplier(1.0 / hw)
        zo = int(self.rng.integers(-10, 10))
        ins = [x, g.add_const(np.array([m], np.int32), "m"), g.add_const(np.array([s], np.int32), "s")]
        n = g.make_node("QGlobalAvgPool", ins, {"z_in": int(g.values[x].quant.zero_point), "z_out": zo})
        _q(g, n.outputs[0], zo)
        return n.outputs[0]

    def lut(self, x):
        """A 256-entry table (e.g. a quantized Sigmoid): the tile has no table unit, the host runs it."""
        table = self.rng.integers(-128, 128, 256).astype(np.int8)
        n = self.g.make_node("QLut", [x, self.g.add_const(table, "table")])
        _q(self.g, n.outputs[0], 0)
        return n.outputs[0]

    def concat(self, *xs):
        """Along the channels; the int8 codes as they are (the output takes the first input's zero point)."""
        n = self.g.make_node("Concat", list(xs), {"axis": 1})
        _q(self.g, n.outputs[0], int(self.g.values[xs[0]].quant.zero_point))
        return n.outputs[0]

    def reshape(self, x, shape):
        n = self.g.make_node("Reshape", [x], {"shape": list(shape)})
        _q(self.g, n.outputs[0], int(self.g.values[x].quant.zero_point))
        return n.outputs[0]

    def output(self, *names):
        self.g.outputs = list(names)
        return self.g
