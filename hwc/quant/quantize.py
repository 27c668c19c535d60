"""Float graph -> int8 graph, using the quantized ops of hwc.ir.ops.

Input: the *optimized* float graph (BatchNorm folded, bias and activation fused into
Conv/Gemm/MatMul), and quantization parameters for its float tensors -- from calibration
(`quantize`) or from a QDQ model's own Q/DQ pairs (`hwc.quant.qdq`). Output: a graph
whose interface is the float model's (float32 inputs -> `Quantize`, `Dequantize` ->
float32 outputs) and whose body is int8 wherever it can be:

    Conv (+relu/clip)            -> QConv     weights int8 [M, C/g, kh, kw] (per output channel
                                              or per tensor), bias int32 [M] *unfolded*: the
                                              input zero point is the node's z_in (a backend
                                              folds bias' = bias - z_in * sum(w) if it likes),
                                              mult/shift int32 [M], fused clamp as lo/hi
    Conv / Gemm (+leakyrelu)     -> QConv / QGemm with a sixth input mult_neg int32 [M]: the
                                              multiplier of negative accumulators (one rounding,
                                              `arith.leaky_params`), no table
    Gemm / MatMul (const weights)-> QGemm     weights int8 stored [N, K] (transposed); a MatMul
                                              on rank > 2 goes through int8 Reshapes
    Add (same shapes)            -> QAdd      both inputs rescaled to the output scale, one rounding
    AveragePool / GlobalAvgPool  -> QAvgPool / QGlobalAvgPool (1/window folded into mult)
    Concat                       -> Concat of int8, each input with other parameters than
                                              the output goes through a QRequant first
    Sigmoid, Tanh, HardSwish, LeakyRelu, HardSigmoid, Elu, ... -> QLut (256-entry table);
                                              fused ones (but a LeakyReLU) are split off the
                                              Conv/Gemm first
    Relu / Clip after a requantizing op (single use) -> dropped: the producer's output takes
                                              the Relu's range (starting at 0) and its clamp
    MaxPool, Reshape, Transpose, Identity, Slice, Split -> the same op on int8 (same parameters)
    anything else (Softmax, ...)  -> stays float after a Dequantize, the reason recorded

Every node's decision is recorded in `graph.metadata["quant"]["nodes"]`, every int8
tensor's scale, zero point, range, method and clipped fraction in ["tensors"], and every
int8 value carries `Value.quant`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwc.errors import UserError, VerifyError
from hwc.ir.graph import Graph, Node, QuantParams
from hwc.ir.ops import conv_out_dim
from hwc.ir.verify import verify
from hwc.quant import arith
from hwc.quant.config import QuantConfig, as_config
from hwc.ref.interp import KERNELS

#: Fused activations that are a clamp of the output.
CLAMP_ACTS = ("", "relu", "clip")
#: Fused activations that are a second multiplier for the negative accumulators (`arith.leaky_params`); the
#: others become a QLut.
SLOPE_ACTS = ("leakyrelu",)
#: Standalone op for each fused activation that needs a lookup table: (op, attribute names).
LUT_ACT_OPS = {"sigmoid": ("Sigmoid", ()), "tanh": ("Tanh", ()), "hardswish": ("HardSwish", ()),
               "leakyrelu": ("LeakyRelu", ("alpha",)), "hardsigmoid": ("HardSigmoid", ("alpha", "beta"))}
#: Unary elementwise ops quantized as a 256-entry table (finite on every real input).
LUT_OPS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Elu", "Celu",
           "Selu", "Softplus", "Softsign", "ThresholdedRelu", "Abs", "Neg")
#: Ops that move int8 data without changing it (the output keeps the input's parameters).
MOVE_OPS = ("Reshape", "Transpose", "Identity", "MaxPool", "GlobalMaxPool", "Slice", "Split", "Expand")
#: Ops whose int8 form ends in a requantization with a clamp (a following Relu/Clip folds in).
CLAMPING_OPS = ("Conv", "Gemm", "MatMul", "Add", "AveragePool", "GlobalAveragePool")
COMPUTE_OPS = ("Conv", "Gemm", "MatMul")


@dataclass
class TensorQ:
    """The int8 encoding chosen for one float tensor, and how it was chosen."""

    scale: float
    zero_point: int
    lo: float                 # the chosen real range (before widening to contain 0)
    hi: float
    method: str               # range method, "qdq" (from the model), "inherited", "const" or "concat"
                              # (`share_concat_encodings`)
    min: float | None = None  # observed during calibration
    max: float | None = None
    clipped: float = 0.0      # share of calibration values outside [lo, hi]

    @classmethod
    def from_range(cls, lo: float, hi: float, method: str, **kw) -> TensorQ:
        s, z = arith.choose_qparams(lo, hi)
        return cls(s, z, float(lo), float(hi), method, **kw)

    def same_encoding(self, other: TensorQ) -> bool:
        return np.float32(self.scale) == np.float32(other.scale) and self.zero_point == other.zero_point

    def to_json(self) -> dict:
        d = {"scale": float(np.float32(self.scale)), "zero_point": int(self.zero_point),
             "range": [self.lo, self.hi], "method": self.method, "clipped": round(self.clipped, 8)}
        if self.min is not None:
            d["min"], d["max"] = self.min, self.max
        return d


@dataclass
class WeightQ:
    """Given int8 codes of a weight (QDQ import): real = scales[c] * codes, c along `axis`."""

    codes: np.ndarray
    scales: np.ndarray        # float32, shape () per tensor or (n,) per channel
    axis: int | None


@dataclass
class BiasQ:
    """Given int32 codes of a bias (QDQ import): real = scales[c] * codes[c]."""

    codes: np.ndarray
    scales: np.ndarray


class Decline(Exception):
    """A node cannot be quantized; the message is the reason recorded."""


# ---- preparation: what calibration and quantization both see -----------------------------
def split_lut_activations(g: Graph) -> int:
    """Move fused activations that are not a clamp out of Conv/Gemm/MatMul into their own node.

    Conv(act=sigmoid) -> y becomes Conv -> y_preact -> Sigmoid -> y, so calibration sees the
    pre-activation tensor and the activation becomes a QLut. Returns how many were split.
    """
    count = 0
    for n in list(g.nodes):
        act = n.attrs.get("act", "")
        if n.op not in COMPUTE_OPS or act in CLAMP_ACTS + SLOPE_ACTS:
            continue
        op, names = LUT_ACT_OPS[act]
        attrs = dict(zip(names, n.attrs["act_args"]))
        y = n.outputs[0]
        t = g.values.pop(y).type
        pre = g.fresh(f"{y}_preact")
        g.add_value(pre, t)
        n.outputs[0] = pre
        n.attrs["act"], n.attrs["act_args"] = "", []
        g.make_node(op, [pre], attrs, name=g.fresh(f"{n.name}_{act}"), outputs=[y], index=g.node_index(n) + 1)
        count += 1
    return count


def prune_weights(g: Graph, fraction: float) -> dict[str, float]:
    """Magnitude pruning (hwc.passes.prune.prune_array): zero the `fraction` smallest |w| of
    each Conv/Gemm/MatMul weight. Returns {weight name: share of zeros after pruning}.

    Constants are immutable: pruned weights are new constants.
    """
    from hwc.passes.prune import prune_array

    done: dict[str, str] = {}
    out = {}
    for n in g.nodes:
        if n.op not in COMPUTE_OPS or len(n.inputs) < 2 or g.const(n.inputs[1]) is None:
            continue
        w_name = n.inputs[1]
        if w_name not in done:
            pruned = prune_array(g.const(w_name), fraction)
            done[w_name] = g.add_const(pruned, hint=f"{w_name}_pruned")
            out[w_name] = float(np.mean(pruned == 0))
        n.inputs[1] = done[w_name]
    g.prune_values()
    return out


def prepare(g: Graph, cfg: QuantConfig) -> Graph:
    """The float graph calibration runs on and the quantizer reads: a copy, LUT activations
    split off, weights pruned by the config."""
    g = g.copy()
    split_lut_activations(g)
    if cfg.prune:
        g.metadata["pruned"] = prune_weights(g, cfg.prune)
    verify(g, "quantization prepare")
    return g


# ---- the quantizer ---------------------------------------------------------------------------
class _Quantizer:
    def __init__(self, src: Graph, tq: dict[str, TensorQ], cfg: QuantConfig, mode: str,
                 weights: dict[str, WeightQ] | None, biases: dict[str, BiasQ] | None):
        self.src, self.tq, self.cfg, self.mode = src, tq, cfg, mode
        self.weights, self.biases = weights or {}, biases or {}
        self.dst = Graph(src.name)
        self.dst.metadata = {k: v for k, v in src.metadata.items()}
        self.i8: dict[str, str] = {}        # src tensor -> dst int8 value
        self.qp: dict[str, TensorQ] = {}    # src tensor -> encoding of that int8 value
        self.f32: dict[str, str] = {}       # src tensor -> dst float value
        self.folded: dict[str, str] = {}    # folded Relu/Clip node -> node it folded into
        self.decisions: list[dict] = []
        self.tensors: dict[str, dict] = {}
        self.notes: list[str] = []
        self.cons = src.consumers()
        self.prod = src.producers()

    # ---- names and values ----------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A value name used neither in src nor in dst."""
        name, i = hint, 0
        while name in self.dst.values or name in self.src.values:
            i += 1
            name = f"{hint}_{i}"
        return name

    def node_name(self, hint: str) -> str:
        """A node name not used in dst yet (the int8 node of src node n is named n when free)."""
        used = {n.name for n in self.dst.nodes}
        name, i = hint, 0
        while name in used:
            i += 1
            name = f"{hint}_{i}"
        return name

    def out_name(self, t: str) -> str:
        """The dst name of the int8 version of src tensor t (graph outputs stay float: t_q)."""
        return self.fresh(f"{t}_q") if t in self.src.outputs or t in self.dst.values else t

    def set_i8(self, t: str, name: str, q: TensorQ) -> None:
        self.i8[t], self.qp[t] = name, q
        self.dst.values[name].quant = QuantParams(np.float32(q.scale), np.int32(q.zero_point))
        self.tensors[name] = {"source": t, **q.to_json()}

    def const(self, data: np.ndarray, hint: str, quant: QuantParams | None = None) -> str:
        name = self.dst.add_const(np.asarray(data), name=self.fresh(hint))
        self.dst.values[name].quant = quant
        return name

    def float_(self, t: str) -> str:
        """The float version of src tensor t in dst (a Dequantize of its int8 version if needed)."""
        if t in self.f32:
            return self.f32[t]
        v = self.src.values[t]
        if v.is_const:
            name = t if t not in self.dst.values else self.fresh(t)
            self.dst.add_value(name, v.type, v.data)
        elif t in self.i8:
            q = self.qp[t]
            name = t if t in self.src.outputs and t not in self.dst.values else self.fresh(f"{t}_f")
            self.dst.make_node("Dequantize", [self.i8[t]], {"scale": q.scale, "zero_point": q.zero_point},
                               name=self.node_name(f"{t}_dequantize"), outputs=[name])
        else:
            raise AssertionError(f"tensor {t!r} has no value yet")
        self.f32[t] = name
        return name

    def encoding(self, t: str) -> TensorQ:
        """The encoding src tensor t has, or would get, as an int8 value."""
        if t in self.qp:
            return self.qp[t]
        v = self.src.values[t]
        if v.is_const:
            d = v.data.astype(np.float64)
            return TensorQ.from_range(float(d.min()), float(d.max()), "const")
        if t not in self.tq:
            raise Decline(f"tensor {t!r} has no quantization parameters")
        return self.tq[t]

    def int8(self, t: str) -> str:
        """The int8 version of src tensor t (a Quantize of its float version if needed)."""
        if t in self.i8:
            return self.i8[t]
        q = self.encoding(t)
        v = self.src.values[t]
        if v.is_const:
            codes = arith.quantize(v.data, q.scale, q.zero_point)
            name = self.const(codes, f"{t}_q", QuantParams(np.float32(q.scale), np.int32(q.zero_point)))
        else:
            name = self.fresh(f"{t}_q")
            self.dst.make_node("Quantize", [self.float_(t)], {"scale": q.scale, "zero_point": q.zero_point},
                               name=self.node_name(f"{t}_quantize"), outputs=[name])
        self.set_i8(t, name, q)
        return name

    # ---- folding of a following Relu/Clip ----------------------------------------------
    def fold_chain(self, n: Node, a: float, b: float) -> tuple[str, float, float, list[Node]]:
        """(final tensor, clamp [a, b], folded nodes): standalone Relu/Clip after n's output,
        each the only consumer of its input, merge into n's clamp."""
        t, folded = n.outputs[0], []
        while t not in self.src.outputs:
            users = self.cons.get(t, [])
            if len(users) != 1 or users[0].op not in ("Relu", "Clip") or users[0].name in self.cfg.float_nodes:
                break
            r = users[0]
            if r.outputs[0] not in self.tq and self.mode == "qdq":
                break
            ra, rb = (0.0, math.inf) if r.op == "Relu" else (r.attrs["min"], r.attrs["max"])
            a, b = max(a, ra), min(b, rb)
            folded.append(r)
            t = r.outputs[0]
        return t, a, b, folded

    def output(self, n: Node, act: str = "", act_args=()) -> tuple[str, TensorQ, int, int, list[Node]]:
        """(final src tensor, its encoding, lo, hi, folded nodes) of a requantizing node."""
        if act not in CLAMP_ACTS + SLOPE_ACTS:
            raise Decline(f"fused activation {act!r} is not a clamp (run prepare() to split it off)")
        a, b = {"": (-math.inf, math.inf), "relu": (0.0, math.inf), "leakyrelu": (-math.inf, math.inf)}.get(
            act, tuple(act_args) or (0, 0))
        t, a, b, folded = self.fold_chain(n, a, b)
        if t not in self.tq:
            raise Decline(f"output {t!r} has no quantization parameters")
        q = self.tq[t]
        try:
            lo, hi = arith.clamp_codes(a, b, q.scale, q.zero_point)
        except ValueError as e:
            raise Decline(str(e)) from None
        return t, q, lo, hi, folded

    def finish(self, n: Node, op: str, inputs: list[str], attrs: dict, t: str, q: TensorQ,
               folded: list[Node]) -> None:
        y = self.out_name(t)
        self.main = self.dst.make_node(op, inputs, attrs, name=self.node_name(n.name), outputs=[y]).name
        self.set_i8(t, y, q)
        for r in folded:
            self.folded[r.name] = n.name

    def factors(self, *fs: float) -> tuple[np.ndarray, np.ndarray]:
        try:
            return arith.requant_params(np.array(fs, dtype=np.float64).reshape(-1))
        except ValueError as e:
            raise Decline(str(e)) from None

    # ---- weights ---------------------------------------------------------------------
    def weight_codes(self, name: str, w: np.ndarray, s_x: float, s_y: float, out_axis: int
                     ) -> tuple[np.ndarray, np.ndarray]:
        """(int8 codes with output channels on axis 0, float32 scales [M]) of a float weight.

        `out_axis` is the output-channel axis of `w` as stored in the float graph.
        """
        given = self.weights.get(name)
        m = w.shape[out_axis]
        if given is not None and given.axis in (None, out_axis) and given.codes.dtype == np.int8:
            codes = np.moveaxis(given.codes, out_axis, 0)
            scales = np.broadcast_to(np.asarray(given.scales, np.float32).reshape(-1), (m,)).astype(np.float32)
            return np.ascontiguousarray(codes), scales
        if given is not None:
            self.notes.append(f"weight {name!r}: the model's encoding (axis {given.axis}, "
                              f"{given.codes.dtype}) has no QConv/QGemm form; re-quantized symmetric per channel")
        wt = np.moveaxis(w, out_axis, 0)
        scales = arith.weight_scales(wt, self.cfg.per_channel)
        # keep s_x * s_w / s_y inside the multiplier's domain (a near-zero channel)
        floor = np.float32(2.0 ** -30 * s_y / s_x)
        scales = np.maximum(scales, floor).astype(np.float32)
        return arith.quantize_weights(wt, scales), scales

    def bias_codes(self, name: str | None, b: np.ndarray | None, m: int, s_b: np.ndarray, node: str) -> np.ndarray:
        given = self.biases.get(name) if name else None
        if given is not None and given.codes.shape == (m,) and np.allclose(
                np.broadcast_to(given.scales, (m,)), s_b, rtol=1e-6, atol=0):
            return given.codes.astype(np.int32)
        if b is None:
            return np.zeros(m, np.int32)
        codes, n_sat = arith.quantize_bias(np.broadcast_to(b, (m,)), s_b)
        if n_sat:
            self.notes.append(f"node {node!r}: {n_sat} bias value(s) saturated to the int32 range")
        return codes

    def emit_weighted(self, n: Node, op: str, x8: str, sx: float, zx: int, w_name: str, w: np.ndarray,
                      out_axis: int, b_name: str | None, b: np.ndarray | None, attrs: dict,
                      reshape_to: tuple[int, ...] | None = None) -> None:
        t, q, lo, hi, folded = self.output(n, n.attrs.get("act", ""), n.attrs.get("act_args", []))
        codes, s_w = self.weight_codes(w_name, w, sx, q.scale, out_axis)
        m = codes.shape[0]
        s_b = (np.float64(sx) * s_w.astype(np.float64))
        bias = self.bias_codes(b_name, b, m, s_b, n.name)
        if n.attrs.get("act") in SLOPE_ACTS:   # (a LeakyReLU: its slope a second multiplier on the same shift)
            try:
                mult, mult_neg, shift = arith.leaky_params(s_b / np.float64(q.scale), n.attrs["act_args"][0])
            except ValueError as e:
                raise Decline(str(e)) from None
        else:
            (mult, shift), mult_neg = self.factors(*(s_b / np.float64(q.scale))), None
        zeros = np.zeros(m, np.int32)
        w8 = self.const(codes, f"{n.name}_w", QuantParams(s_w, zeros, axis=0))
        b32 = self.const(bias, f"{n.name}_bias", QuantParams(s_b.astype(np.float32), zeros, axis=0))
        ins = [x8, w8, b32, self.const(mult, f"{n.name}_mult"), self.const(shift, f"{n.name}_shift")]
        if mult_neg is not None:
            ins.append(self.const(mult_neg, f"{n.name}_mult_neg"))
        attrs = {**attrs, "z_in": zx, "z_out": q.zero_point, "lo": lo, "hi": hi}
        if reshape_to is None:
            self.finish(n, op, ins, attrs, t, q, folded)
            return
        flat = self.fresh(f"{n.name}_2d")
        self.main = self.dst.make_node(op, ins, attrs, name=self.node_name(n.name), outputs=[flat]).name
        self.dst.values[flat].quant = QuantParams(np.float32(q.scale), np.int32(q.zero_point))
        y = self.out_name(t)
        self.dst.make_node("Reshape", [flat], {"shape": list(reshape_to)}, name=self.node_name(f"{n.name}_unflat"),
                           outputs=[y])
        self.set_i8(t, y, q)
        for r in folded:
            self.folded[r.name] = n.name

    # ---- op handlers (raise Decline before emitting anything that matters) ---------------
    def q_conv(self, n: Node) -> str:
        w = self.src.const(n.inputs[1])
        if w is None:
            raise Decline("the weights are computed at run time (QConv needs constant weights)")
        b_name = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        b = self.src.const(b_name) if b_name else None
        if b_name and b is None:
            raise Decline("the bias is computed at run time")
        xq = self.encoding(n.inputs[0])
        self.output(n, n.attrs["act"], n.attrs["act_args"])   # declines before emitting
        x8 = self.int8(n.inputs[0])
        attrs = {k: n.attrs[k] for k in ("strides", "pads", "dilations", "group")}
        self.emit_weighted(n, "QConv", x8, xq.scale, xq.zero_point, n.inputs[1], w, 0, b_name, b, attrs)
        return "QConv"

    def q_gemm(self, n: Node) -> str:
        a = n.attrs
        B = self.src.const(n.inputs[1])
        if B is None:
            raise Decline("the weights (B) are computed at run time (QGemm needs constant weights)")
        if a["transA"]:
            raise Decline("transA=1 (QGemm takes the activations untransposed)")
        if self.src.type(n.inputs[0]).rank != 2:
            raise Decline("A is not 2-d")
        n_out = B.shape[0] if a["transB"] else B.shape[1]
        c_name = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        C = self.src.const(c_name) if c_name else None
        if c_name and C is None:
            raise Decline("C is computed at run time")
        if C is not None and C.size not in (1, n_out) or (C is not None and C.ndim == 2 and C.shape[0] != 1):
            raise Decline(f"C of shape {list(C.shape)} is not a per-output bias")
        if a["alpha"] <= 0:
            raise Decline(f"alpha={a['alpha']} (only a positive alpha folds into the weights)")
        xq = self.encoding(n.inputs[0])
        self.output(n, a["act"], a["act_args"])
        x8 = self.int8(n.inputs[0])
        w = B.astype(np.float64) * a["alpha"]
        if a["alpha"] != 1.0:
            self.weights.pop(n.inputs[1], None)
        bias = None if C is None else np.broadcast_to(C.astype(np.float64).reshape(-1) * a["beta"], (n_out,))
        if C is not None and a["beta"] != 1.0:
            self.biases.pop(c_name, None)
        self.emit_weighted(n, "QGemm", x8, xq.scale, xq.zero_point, n.inputs[1], w, 0 if a["transB"] else 1,
                           c_name, bias, {})
        return "QGemm"

    def q_matmul(self, n: Node) -> str:
        B = self.src.const(n.inputs[1])
        if B is None or B.ndim != 2:
            raise Decline("the second operand is not a constant matrix")
        at = self.src.type(n.inputs[0])
        if at.rank < 2:
            raise Decline("the first operand is a vector")
        xq = self.encoding(n.inputs[0])
        self.output(n, n.attrs["act"], n.attrs["act_args"])
        x8 = self.int8(n.inputs[0])
        out_shape = self.src.type(n.outputs[0]).shape
        reshape_to = None
        if at.rank > 2:
            flat = self.fresh(f"{n.name}_in2d")
            self.dst.make_node("Reshape", [x8], {"shape": [math.prod(at.shape[:-1]), at.shape[-1]]},
                               name=self.node_name(f"{n.name}_flat"), outputs=[flat])
            self.dst.values[flat].quant = QuantParams(np.float32(xq.scale), np.int32(xq.zero_point))
            x8, reshape_to = flat, out_shape
        self.emit_weighted(n, "QGemm", x8, xq.scale, xq.zero_point, n.inputs[1], B.astype(np.float64), 1,
                           None, None, {}, reshape_to)
        return "QGemm"

    def q_add(self, n: Node) -> str:
        ta, tb = (self.src.type(i) for i in n.inputs)
        if ta.shape != tb.shape:
            raise Decline(f"the operands have different shapes {list(ta.shape)} and {list(tb.shape)} "
                          f"(QAdd does not broadcast)")
        qa, qb = self.encoding(n.inputs[0]), self.encoding(n.inputs[1])
        t, q, lo, hi, folded = self.output(n)
        try:
            ma, mb, shift = arith.quantize_multiplier_pair(qa.scale / q.scale, qb.scale / q.scale)
        except ValueError as e:
            raise Decline(str(e)) from None
        ins = [self.int8(i) for i in n.inputs]
        self.finish(n, "QAdd", ins, {"z_a": qa.zero_point, "z_b": qb.zero_point, "mult_a": ma, "mult_b": mb,
                                     "shift": shift, "z_out": q.zero_point, "lo": lo, "hi": hi}, t, q, folded)
        return "QAdd"

    def q_avgpool(self, n: Node) -> str:
        a = n.attrs
        x = self.src.type(n.inputs[0])
        k, nd = a["kernel_shape"], len(a["kernel_shape"])
        if a["ceil_mode"]:
            for i in range(nd):
                args = (x.shape[2 + i], k[i], a["strides"][i], a["dilations"][i], a["pads"][i], a["pads"][i + nd])
                if conv_out_dim(*args, True) != conv_out_dim(*args, False):
                    raise Decline("ceil_mode windows run past the input (their divisor varies)")
        if any(a["pads"]) and not a["count_include_pad"]:
            raise Decline("padding with count_include_pad=0 (the divisor varies near the border)")
        if a["dilations"] != [1] * nd:
            raise Decline("dilated average pooling")
        xq = self.encoding(n.inputs[0])
        t, q, lo, hi, folded = self.output(n)
        mult, shift = self.factors(xq.scale / (q.scale * math.prod(k)))
        x8 = self.int8(n.inputs[0])
        attrs = {kk: a[kk] for kk in ("kernel_shape", "strides", "pads", "dilations", "ceil_mode")}
        attrs.update(count_include_pad=1, z_in=xq.zero_point, z_out=q.zero_point, lo=lo, hi=hi)
        self.finish(n, "QAvgPool", [x8, self.const(mult, f"{n.name}_mult"), self.const(shift, f"{n.name}_shift")],
                    attrs, t, q, folded)
        return "QAvgPool"

    def q_gap(self, n: Node) -> str:
        x = self.src.type(n.inputs[0])
        xq = self.encoding(n.inputs[0])
        t, q, lo, hi, folded = self.output(n)
        mult, shift = self.factors(xq.scale / (q.scale * math.prod(x.shape[2:])))
        x8 = self.int8(n.inputs[0])
        self.finish(n, "QGlobalAvgPool", [x8, self.const(mult, f"{n.name}_mult"),
                                          self.const(shift, f"{n.name}_shift")],
                    {"z_in": xq.zero_point, "z_out": q.zero_point, "lo": lo, "hi": hi}, t, q, folded)
        return "QGlobalAvgPool"

    def requant(self, t: str, q: TensorQ, hint: str) -> str:
        """The int8 value of src tensor t re-encoded as q (QRequant, or as is when equal)."""
        src_q = self.encoding(t)
        x8 = self.int8(t)
        if src_q.same_encoding(q):
            return x8
        mult, shift = self.factors(src_q.scale / q.scale)
        y = self.fresh(hint)
        self.dst.make_node("QRequant", [x8, self.const(mult, f"{hint}_mult"), self.const(shift, f"{hint}_shift")],
                           {"z_in": src_q.zero_point, "z_out": q.zero_point}, name=self.node_name(f"{hint}_requant"),
                           outputs=[y])
        self.dst.values[y].quant = QuantParams(np.float32(q.scale), np.int32(q.zero_point))
        return y

    def q_concat(self, n: Node) -> str:
        encs = [self.encoding(i) for i in n.inputs]
        t = n.outputs[0]
        if all(e.same_encoding(encs[0]) for e in encs):
            q = TensorQ(encs[0].scale, encs[0].zero_point, encs[0].lo, encs[0].hi, "inherited")
        elif t in self.tq:
            q = self.tq[t]
            for e in encs:
                self.factors(e.scale / q.scale)
        else:
            raise Decline(f"output {t!r} has no quantization parameters")
        ins = [self.requant(i, q, f"{i}_to_{t}") for i in n.inputs]
        self.finish(n, "Concat", ins, dict(n.attrs), t, q, [])
        return "Concat"

    def q_lut(self, n: Node) -> str:
        x = n.inputs[0]
        if x not in self.i8:
            raise Decline("its input is float (a lookup table only pays after an int8 producer)")
        t = n.outputs[0]
        if t not in self.tq:
            raise Decline(f"output {t!r} has no quantization parameters")
        xq, q = self.qp[x], self.tq[t]
        fn = lambda v: KERNELS[n.op](n.attrs, v.astype(np.float32))[0]
        table = arith.make_lut(fn, xq.scale, xq.zero_point, q.scale, q.zero_point)
        tab = self.const(table, f"{n.name}_table", QuantParams(np.float32(q.scale), np.int32(q.zero_point)))
        self.finish(n, "QLut", [self.i8[x], tab], {}, t, q, [])
        return "QLut"

    def q_move(self, n: Node) -> str:
        x = n.inputs[0]
        if x not in self.i8:
            raise Decline("its input is float")
        xq = self.qp[x]
        outs = [self.out_name(o) for o in n.outputs]
        self.dst.make_node(n.op, [self.i8[x]], dict(n.attrs), name=self.node_name(n.name), outputs=outs)
        for o, y in zip(n.outputs, outs):
            inherited = TensorQ(xq.scale, xq.zero_point, xq.lo, xq.hi, "inherited", clipped=0.0)
            self.set_i8(o, y, inherited)
            want = self.tq.get(o) if self.mode == "qdq" else None
            if want is not None and not want.same_encoding(inherited):  # the model re-encodes here
                z = self.requant(o, want, f"{o}_requant")
                self.set_i8(o, z, want)
        return n.op

    # ---- driver ------------------------------------------------------------------------
    def emit_float(self, n: Node) -> None:
        ins = [self.float_(i) if i else "" for i in n.inputs]
        outs = [o if o not in self.dst.values else self.fresh(o) for o in n.outputs]
        self.dst.make_node(n.op, ins, dict(n.attrs), name=self.node_name(n.name), outputs=outs)
        for o, y in zip(n.outputs, outs):
            if o:
                self.f32[o] = y

    def run(self) -> Graph:
        for name in self.src.inputs:
            self.dst.add_input(name, self.src.type(name))
            self.f32[name] = name
        for n in self.src.nodes:
            rec = {"node": n.name, "op": n.op}
            if n.name in self.folded:
                rec.update(mode="folded", reason=f"its clamp is part of {self.folded[n.name]!r}'s requantization")
                self.decisions.append(rec)
                continue
            handler = HANDLERS.get(n.op)
            reason = None
            if n.name in self.cfg.float_nodes:
                reason = "kept float by the quant config (float_nodes)"
            elif handler is None:
                reason = f"{n.op} has no int8 form in hwc (it runs in float between a Dequantize and a Quantize)"
            else:
                try:
                    self.main = None
                    as_op = handler(self, n)
                except Decline as e:
                    reason = str(e)
            if reason is None:
                rec.update(mode="int8", as_=as_op)
                if self.main:
                    rec["int8_node"] = self.main
            else:
                self.emit_float(n)
                rec.update(mode="float", reason=reason)
            self.decisions.append(rec)
        for o in self.src.outputs:
            self.float_(o)
        self.dst.outputs = list(self.src.outputs)
        missing = [o for o in self.dst.outputs if o not in self.dst.values]
        if missing:
            raise AssertionError(f"outputs {missing} were not produced")
        remove_dead_nodes(self.dst)
        live = set(self.dst.values)
        self.dst.metadata["quant"] = {
            "format": "hwc-int8-1",
            "mode": self.mode,
            "config": self.cfg.to_json(),
            "tensors": {k: v for k, v in self.tensors.items() if k in live},
            "nodes": [{("as" if k == "as_" else k): v for k, v in r.items()} for r in self.decisions],
            "notes": self.notes,
        }
        verify(self.dst, "quantization")
        check_int8_graph(self.dst)
        return self.dst


#: Op -> handler: emits the int8 form and returns the op it became, or raises Decline.
HANDLERS = {"Conv": _Quantizer.q_conv, "Gemm": _Quantizer.q_gemm, "MatMul": _Quantizer.q_matmul,
            "Add": _Quantizer.q_add, "AveragePool": _Quantizer.q_avgpool, "GlobalAveragePool": _Quantizer.q_gap,
            "Concat": _Quantizer.q_concat, **dict.fromkeys(LUT_OPS, _Quantizer.q_lut),
            **dict.fromkeys(MOVE_OPS, _Quantizer.q_move)}


def remove_dead_nodes(g: Graph) -> int:
    """Drop nodes none of whose outputs is used (helper Quantize nodes of declined ops)."""
    removed = 0
    while True:
        used = {i for n in g.nodes for i in n.inputs if i} | set(g.outputs)
        dead = [n for n in g.nodes if not any(o in used for o in n.outputs if o)]
        if not dead:
            break
        for n in dead:
            g.remove_node(n)
        removed += len(dead)
    g.prune_values()
    return removed


def check_int8_graph(g: Graph) -> None:
    """Every int8 value carries its quantization parameters (raises VerifyError otherwise)."""
    bad = [v.name for v in g.values.values() if v.type.dtype == "int8" and v.quant is None]
    if bad:
        raise VerifyError(f"int8 graph {g.name!r}: value(s) without quantization parameters: {bad[:10]}")


def quantize_graph(src: Graph, tq: dict[str, TensorQ], cfg: QuantConfig | None = None, *, mode: str = "calibration",
                   weights: dict[str, WeightQ] | None = None, biases: dict[str, BiasQ] | None = None) -> Graph:
    """The int8 graph of the prepared float graph `src`, given the encodings `tq` of its tensors.

    `weights`/`biases` give integer codes to use as they are (QDQ import); other weights
    are quantized by the config. Tensors without an encoding keep their nodes float.
    """
    return _Quantizer(src, tq, as_config(cfg), mode, dict(weights or {}), dict(biases or {})).run()


# ---- from calibration -------------------------------------------------------------------------
def encodings(stats: dict, cfg: QuantConfig) -> dict[str, TensorQ]:
    """Each calibrated tensor's encoding under the config's range method."""
    from hwc.quant.calibrate import choose_range, clipped_fraction

    out = {}
    for t, st in stats.items():
        lo, hi = (x * (1.0 + cfg.headroom) for x in choose_range(st, cfg.method, cfg.percentile))
        out[t] = TensorQ.from_range(lo, hi, cfg.method, min=st.min, max=st.max,
                                    clipped=clipped_fraction(st, min(lo, 0.0), max(hi, 0.0)))
    return out


def share_concat_encodings(g: Graph, tq: dict[str, TensorQ]) -> int:
    """Give a Concat's inputs its encoding where that costs nothing: an input only the Concat reads, made by an op
    whose int8 form ends in a requantization (a convolution, an add, ...), requantizes straight to the Concat's
    scale and zero point. Otherwise the quantizer would requantize the input a second time (`q_concat`: a QRequant,
    on the tile a pass over the array per input). Returns how many inputs changed."""
    cons, prod, changed = g.consumers(), g.producers(), 0
    for n in g.nodes:
        out = n.outputs[0]
        if n.op != "Concat" or out not in tq:
            continue
        for i in dict.fromkeys(n.inputs):
            p = prod.get(i)
            if p is not None and p.op in ("Relu", "Clip") and len(cons.get(p.inputs[0], [])) == 1:
                p = prod.get(p.inputs[0])   # (a ReLU or clip the quantizer folds into its producer's clamp)
            if (i in tq and p is not None and p.op in CLAMPING_OPS and [c.name for c in cons.get(i, [])] == [n.name]
                    and i not in g.outputs and not tq[i].same_encoding(tq[out])):
                q = tq[out]
                tq[i] = TensorQ(q.scale, q.zero_point, q.lo, q.hi, "concat", min=tq[i].min, max=tq[i].max)
                changed += 1
    return changed


def quantize(g: Graph, calib: dict[str, np.ndarray], cfg: QuantConfig | dict | str | None = None, *,
             progress: bool = False, stats: dict | None = None, prepared: Graph | None = None) -> Graph:
    """Calibrate the optimized float graph `g` on `calib` ({input: [N, *shape]}) and quantize it.

    `prepared`/`stats` let a caller (the search) reuse `prepare(g, cfg)` and its calibration.
    """
    from hwc.quant.calibrate import collect_stats
    from hwc.quant.runner import stack_samples

    cfg = as_config(cfg)
    p = prepared if prepared is not None else prepare(g, cfg)
    try:
        feeds = stack_samples(p, calib, "calibration data")
    except ValueError as e:
        raise UserError(f"{e}. Calibration data are an .npz keyed by the model's input names, with the "
                        f"samples on a leading axis.") from None
    if stats is None:
        stats = collect_stats(p, feeds, bins=cfg.bins, progress=progress)
    tq = encodings(stats, cfg)
    share_concat_encodings(p, tq)
    q = quantize_graph(p, tq, cfg)
    if cfg.bias_correction:
        from hwc.quant.biascorr import correct_biases

        correct_biases(p, q, feeds)
    meta = q.metadata["quant"]
    meta["calibration_samples"] = len(next(iter(feeds.values())))
    meta["histograms"] = {t: st.to_json() for t, st in stats.items()
                          if any(e["source"] == t for e in meta["tensors"].values())}
    return q
