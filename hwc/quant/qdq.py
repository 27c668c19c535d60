"""QDQ import: a model that is already quantized becomes an hwc int8 graph, as it is.

QDQ models (onnxruntime's `quantize_static(quant_format=QDQ)`, PyTorch/TensorFlow QAT
exports) are float graphs with QuantizeLinear -> DequantizeLinear pairs on activations
and DequantizeLinear on integer constants (weights int8, biases int32). The importer
reads them as IR QuantizeLinear/DequantizeLinear nodes; `strip_qdq` turns them back into
a float graph plus what the pairs say:

- an activation pair x -> Q(s, z) -> DQ(s, z) gives x the encoding (s, z); uint8
  encodings become int8 ones (q - 128, z - 128: the same real values);
- DQ of an int8 constant with zero point 0 gives the weight's codes and scales (per
  tensor or per axis); DQ of an int32 constant gives the bias codes (scale s_x * s_w);
- DQ of other constants (uint8 or asymmetric weights) is folded to float and re-quantized
  symmetric per channel -- recorded in the notes.

`import_qdq` then runs the quantizer with those encodings and codes instead of
calibration (no calibration data needed). Tensors without a pair stay float, exactly as
the model says: a Softmax after the last DQ runs in float on the host.

How it compares with onnxruntime's own int8 execution of the same file: the integers
(weights, biases, zero points) are identical; the requantization differs in two
documented ways -- onnxruntime multiplies the int32 accumulator by the float32 factor
s_x * s_w / s_y and rounds half to even, hwc uses a 31-bit fixed-point multiplier and
rounds half toward +infinity (hwc.quant.arith). An output code can therefore differ by
1 when the exact product lies within about 2**-23 of a rounding boundary (float32
factor error) or exactly on a tie.
"""

from __future__ import annotations

import numpy as np

from hwc.errors import UnsupportedError
from hwc.ir.graph import Graph
from hwc.ir.verify import verify
from hwc.quant.config import QuantConfig, as_config
from hwc.quant.quantize import BiasQ, TensorQ, WeightQ, quantize_graph
from hwc.ref.interp import run_node

Q_OPS = ("QuantizeLinear", "DequantizeLinear")


def is_qdq(g: Graph) -> bool:
    """Does the graph carry QuantizeLinear/DequantizeLinear nodes (a pre-quantized model)?"""
    return any(n.op in Q_OPS for n in g.nodes)


def _params(g: Graph, n) -> tuple[np.ndarray, np.ndarray]:
    s, z = g.const(n.inputs[1]), g.const(n.inputs[2])
    if s is None or z is None:
        raise UnsupportedError(f"{n.op} {n.name!r}: scale and zero point must be constants", [n.name])
    return s, z


def _as_int8_zp(z: np.ndarray) -> np.ndarray:
    """A uint8 zero point as the int8 zero point of the same real values."""
    return z.astype(np.int32) - (128 if z.dtype == np.uint8 else 0)


def _encoding(scale: np.ndarray, zp: np.ndarray, where: str) -> TensorQ:
    if scale.size != 1 or zp.size != 1:
        raise UnsupportedError(f"{where}: per-axis activation quantization is not supported "
                               f"(hwc activations are per tensor)", [where])
    s, z = float(scale.reshape(-1)[0]), int(_as_int8_zp(zp).reshape(-1)[0])
    if not s > 0:
        raise UnsupportedError(f"{where}: scale {s} is not positive", [where])
    return TensorQ(s, z, s * (-128 - z), s * (127 - z), "qdq")


def strip_qdq(g: Graph) -> tuple[Graph, dict[str, TensorQ], dict[str, WeightQ], dict[str, BiasQ], list[str]]:
    """(float graph, activation encodings, weight codes, bias codes, notes) of a QDQ graph."""
    g = g.copy()
    tq: dict[str, TensorQ] = {}
    weights: dict[str, WeightQ] = {}
    biases: dict[str, BiasQ] = {}
    notes: list[str] = []
    # Q of a constant (weights quantized at run time): fold to the integer constant.
    for n in [n for n in g.nodes if n.op == "QuantizeLinear" and g.const(n.inputs[0]) is not None]:
        data = run_node(n, [g.const(i) for i in n.inputs])[0]
        g.remove_node(n)
        _set_const(g, n.outputs[0], data)
    # DQ of a constant: a float constant, with the integer codes remembered.
    for n in [n for n in g.nodes if n.op == "DequantizeLinear" and g.const(n.inputs[0]) is not None]:
        codes = g.const(n.inputs[0])
        s, z = _params(g, n)
        real = run_node(n, [codes, s, z])[0]
        g.remove_node(n)
        out = n.outputs[0]
        _set_const(g, out, real)
        axis = n.attrs["axis"] if s.size > 1 else None
        if codes.dtype == np.int8 and not np.any(z):
            weights[out] = WeightQ(codes, s.astype(np.float32), axis)
        elif codes.dtype == np.int32 and not np.any(z) and codes.ndim == 1:
            biases[out] = BiasQ(codes, s.astype(np.float32))
        else:
            notes.append(f"{out!r}: {codes.dtype} codes with zero point(s) {np.unique(z)[:4].tolist()} "
                         f"have no hwc form; used as float (re-quantized if it is a weight)")
    # Activation pairs.
    cons = g.consumers()
    for q in [n for n in g.nodes if n.op == "QuantizeLinear"]:
        x = q.inputs[0]
        s, z = _params(g, q)
        enc = _encoding(s, z, f"QuantizeLinear {q.name!r}")
        users = cons.get(q.outputs[0], [])
        if q.outputs[0] in g.outputs or any(u.op != "DequantizeLinear" for u in users):
            others = sorted({u.op for u in users if u.op != "DequantizeLinear"})
            raise UnsupportedError(
                f"QuantizeLinear {q.name!r}: its int8 output is used directly "
                f"({'a graph output' if q.outputs[0] in g.outputs else 'by ' + ', '.join(others)}); hwc "
                f"imports QuantizeLinear -> DequantizeLinear pairs only", [q.name])
        for d in users:
            ds, dz = _params(g, d)
            if not (np.array_equal(ds, s) and np.array_equal(dz, z)):
                raise UnsupportedError(f"DequantizeLinear {d.name!r} uses other parameters than the "
                                       f"QuantizeLinear {q.name!r} feeding it", [d.name])
        if x in tq and not tq[x].same_encoding(enc):
            raise UnsupportedError(f"tensor {x!r} is quantized twice with different parameters", [q.name])
        tq[x] = enc
        g.remove_node(q)
        for d in users:
            g.remove_node(d)
            g.replace_uses(d.outputs[0], x)
            if x not in g.values:  # x was renamed to the graph output name d.outputs[0]
                tq[d.outputs[0]] = tq.pop(x)
                x = d.outputs[0]
    left = [n for n in g.nodes if n.op in Q_OPS]
    if left:
        items = [f"{n.op} {n.name!r}" for n in left]
        raise UnsupportedError("QDQ import: these quantization nodes are not part of a QuantizeLinear -> "
                               "DequantizeLinear pair or an integer constant: " + ", ".join(items[:8]), items)
    g.prune_values()
    verify(g, "QDQ strip")
    return g, tq, weights, biases, notes


def _set_const(g: Graph, name: str, data: np.ndarray) -> None:
    v = g.values[name]
    data = np.asarray(data).astype(v.type.np_dtype)
    data.flags.writeable = False
    v.data = data


def import_qdq(g: Graph, cfg: QuantConfig | dict | None = None) -> Graph:
    """The hwc int8 graph of an imported QDQ graph, with the model's own encodings."""
    cfg = as_config(cfg).with_(bias_correction=False, prune=0.0)
    fg, tq, weights, biases, notes = strip_qdq(g)
    q = quantize_graph(fg, tq, cfg, mode="qdq", weights=weights, biases=biases)
    q.metadata["quant"]["notes"] = notes + q.metadata["quant"]["notes"]
    return q
