"""The IR's op set: one entry per op with its attribute schema and its shape inference.

The IR keeps ONNX op names and meanings, but in a normalized form: every attribute is
explicit (defaults filled in), inputs that ONNX allows to be computed tensors but that
are really parameters (Reshape's shape, Slice's starts, Pad's pads, Split's sizes,
reduce axes, Clip's bounds) are attributes, negative axes are made non-negative, and
auto_pad is resolved into explicit pads. Flatten, Squeeze and Unsqueeze import as
Reshape; Dropout as Identity.

Conv, Gemm and MatMul carry an optional fused activation (`act`, `act_args`): the
graph optimizer moves a following activation into them (see ACTIVATIONS).

This module is the one source of truth for what an op's attributes are and what its
output types are; the reference interpreter (`hwc.ref`) gives the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwc.ir.types import TensorType

REQUIRED = object()

#: Fused activations: name -> number of float arguments in `act_args`.
#: relu: max(x, 0); clip: [lo, hi]; leakyrelu: [alpha]; hardsigmoid: [alpha, beta];
#: hardswish: x * hardsigmoid(x; 1/6, 1/2); sigmoid; tanh.
ACTIVATIONS: dict[str, int] = {
    "": 0, "relu": 0, "clip": 2, "leakyrelu": 1, "hardsigmoid": 2, "hardswish": 0,
    "sigmoid": 0, "tanh": 0,
}

_KINDS = {"int": int, "float": float, "str": str, "ints": list, "floats": list}


@dataclass(frozen=True)
class OpDef:
    name: str
    attrs: dict[str, tuple[str, Any]]  # attribute -> (kind, default or REQUIRED)
    n_in: tuple[int, int]              # (min, max) inputs; max -1 = variadic
    infer: Callable[[list[TensorType | None], dict[str, Any]], list[TensorType]]
    doc: str = ""


OPS: dict[str, OpDef] = {}


def _op(name, n_in, attrs=None, doc=""):
    def deco(fn):
        OPS[name] = OpDef(name, dict(attrs or {}), n_in, fn, doc)
        return fn
    return deco


def normalize_attrs(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults, coerce kinds, and reject unknown or missing attributes."""
    if op not in OPS:
        raise ValueError(f"unknown IR op {op!r}")
    schema = OPS[op].attrs
    unknown = set(attrs) - set(schema)
    if unknown:
        raise ValueError(f"{op}: unknown attribute(s) {sorted(unknown)}")
    out = {}
    for key, (kind, default) in schema.items():
        if key in attrs:
            val = attrs[key]
        elif default is REQUIRED:
            raise ValueError(f"{op}: missing required attribute {key!r}")
        else:
            val = default
        out[key] = _coerce(op, key, kind, val)
    return out


def _coerce(op, key, kind, val):
    if kind == "int":
        return int(val)
    if kind == "float":
        return float(val)
    if kind == "str":
        return str(val)
    if kind == "ints":
        return [int(v) for v in val]
    if kind == "floats":
        return [float(v) for v in val]
    raise ValueError(f"{op}.{key}: unknown attribute kind {kind}")


def infer_types(graph, node) -> list[TensorType]:
    """Output types of `node` from the types of its inputs in `graph`."""
    d = OPS.get(node.op)
    if d is None:
        raise ValueError(f"unknown IR op {node.op!r} (node {node.name!r})")
    lo, hi = d.n_in
    n = len(node.inputs)
    if n < lo or (hi >= 0 and n > hi):
        raise ValueError(f"{node.op} node {node.name!r}: {n} inputs, expected {lo}..{hi}")
    types = [graph.values[i].type if i else None for i in node.inputs]
    return d.infer(types, node.attrs)


# ---- helpers ------------------------------------------------------------------------
def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


def _same(t: TensorType, shape) -> TensorType:
    return TensorType(t.dtype, tuple(shape))


def conv_out_dim(size, k, stride, dil, pb, pe, ceil_mode=False) -> int:
    """Output length of a sliding window (Conv, pooling) along one axis."""
    span = (k - 1) * dil + 1
    num = size + pb + pe - span
    if num < 0:
        raise ValueError(f"window {span} larger than padded input {size + pb + pe}")
    out = (-(-num // stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pb:
        out -= 1  # the last window must start inside the input or its begin padding
    return out


def _window_out(x: TensorType, kernel, strides, pads, dilations, ceil_mode=False):
    nd = len(kernel)
    spatial = x.shape[2:]
    if len(spatial) != nd:
        raise ValueError(f"input rank {x.rank} does not match a {nd}-d kernel")
    try:
        return tuple(
            conv_out_dim(spatial[i], kernel[i], strides[i], dilations[i], pads[i], pads[i + nd], ceil_mode)
            for i in range(nd)
        )
    except ValueError as e:   # (say which input: it may be an upstream op's output, sized by its own rules)
        raise ValueError(f"{e} (input shape {list(x.shape)}, kernel {list(kernel)}, pads {list(pads)})") from None


def _act_check(attrs):
    act = attrs.get("act", "")
    if act not in ACTIVATIONS:
        raise ValueError(f"unknown fused activation {act!r}")
    if len(attrs.get("act_args", [])) != ACTIVATIONS[act]:
        raise ValueError(f"activation {act!r} takes {ACTIVATIONS[act]} args, got {attrs['act_args']}")


_ACT_ATTRS = {"act": ("str", ""), "act_args": ("floats", [])}


# ---- compute ops --------------------------------------------------------------------
@_op("Conv", (2, 3), {"strides": ("ints", REQUIRED), "pads": ("ints", REQUIRED),
                      "dilations": ("ints", REQUIRED), "group": ("int", 1), **_ACT_ATTRS},
     "Convolution, NC* layout, explicit pads [begin..., end...].")
def _conv(t, a):
    x, w = t[0], t[1]
    _act_check(a)
    if x.shape[1] != w.shape[1] * a["group"]:
        raise ValueError(f"Conv: input channels {x.shape[1]} != {w.shape[1]} x group {a['group']}")
    if w.shape[0] % a["group"]:
        raise ValueError(f"Conv: {w.shape[0]} output channels not divisible by group {a['group']}")
    if len(t) > 2 and t[2] is not None and t[2].shape != (w.shape[0],):
        raise ValueError(f"Conv: bias shape {t[2].shape} != ({w.shape[0]},)")
    sp = _window_out(x, w.shape[2:], a["strides"], a["pads"], a["dilations"])
    return [_same(x, (x.shape[0], w.shape[0]) + sp)]


@_op("Gemm", (2, 3), {"alpha": ("float", 1.0), "beta": ("float", 1.0), "transA": ("int", 0),
                      "transB": ("int", 0), **_ACT_ATTRS},
     "Y = alpha * op(A) @ op(B) + beta * C.")
def _gemm(t, a):
    _act_check(a)
    A, B = t[0], t[1]
    m, k = A.shape[::-1] if a["transA"] else A.shape
    k2, n = B.shape[::-1] if a["transB"] else B.shape
    if k != k2:
        raise ValueError(f"Gemm: inner dims differ ({k} vs {k2})")
    if len(t) > 2 and t[2] is not None:
        broadcast(t[2].shape, (m, n))
    return [_same(A, (m, n))]


@_op("MatMul", (2, 2), dict(_ACT_ATTRS), "numpy.matmul semantics (batched, 1-d promotion).")
def _matmul(t, a):
    _act_check(a)
    A, B = t
    sa, sb = A.shape, B.shape
    if len(sa) == 0 or len(sb) == 0:
        raise ValueError("MatMul: scalar operand")
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    if a2[-1] != b2[-2]:
        raise ValueError(f"MatMul: inner dims differ ({a2[-1]} vs {b2[-2]})")
    out = broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return [_same(A, out)]


# ---- elementwise --------------------------------------------------------------------
BINARY_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "PRelu")
VARIADIC_OPS = ("Max", "Min", "Sum", "Mean")


def _binary(t, a):
    return [_same(t[0], broadcast(t[0].shape, t[1].shape))]


def _variadic(t, a):
    return [_same(t[0], broadcast(*(x.shape for x in t)))]


for _name in BINARY_OPS:
    _op(_name, (2, 2))(_binary)
for _name in VARIADIC_OPS:
    _op(_name, (1, -1))(_variadic)


def _unary(t, a):
    return [t[0]]


#: Unary elementwise ops with their attributes.
UNARY_OPS: dict[str, dict] = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "HardSwish": {}, "Abs": {}, "Neg": {}, "Exp": {},
    "Log": {}, "Sqrt": {}, "Reciprocal": {}, "Floor": {}, "Ceil": {}, "Sign": {},
    "Softplus": {}, "Softsign": {}, "Identity": {},
    "LeakyRelu": {"alpha": ("float", 0.01)},
    "Clip": {"min": ("float", -math.inf), "max": ("float", math.inf)},
    "HardSigmoid": {"alpha": ("float", 0.2), "beta": ("float", 0.5)},
    "Elu": {"alpha": ("float", 1.0)},
    "Celu": {"alpha": ("float", 1.0)},
    "Selu": {"alpha": ("float", 1.6732632423543772), "gamma": ("float", 1.0507009873554805)},
    "ThresholdedRelu": {"alpha": ("float", 1.0)},
}
for _name, _attrs in UNARY_OPS.items():
    _op(_name, (1, 1), _attrs)(_unary)

ELEMENTWISE_OPS = frozenset(BINARY_OPS) | frozenset(VARIADIC_OPS) | frozenset(UNARY_OPS)


@_op("Cast", (1, 1), {"to": ("str", REQUIRED)})
def _cast(t, a):
    return [TensorType(a["to"], t[0].shape)]


@_op("Softmax", (1, 1), {"axis": ("int", REQUIRED)})
def _softmax(t, a):
    if not 0 <= a["axis"] < t[0].rank:
        raise ValueError(f"Softmax: axis {a['axis']} out of range for rank {t[0].rank}")
    return [t[0]]


OPS["LogSoftmax"] = OpDef("LogSoftmax", OPS["Softmax"].attrs, (1, 1), _softmax)


# ---- pooling and normalization ------------------------------------------------------
_POOL = {"kernel_shape": ("ints", REQUIRED), "strides": ("ints", REQUIRED), "pads": ("ints", REQUIRED),
         "dilations": ("ints", REQUIRED), "ceil_mode": ("int", 0)}


@_op("MaxPool", (1, 1), _POOL)
def _maxpool(t, a):
    x = t[0]
    sp = _window_out(x, a["kernel_shape"], a["strides"], a["pads"], a["dilations"], bool(a["ceil_mode"]))
    return [_same(x, x.shape[:2] + sp)]


@_op("AveragePool", (1, 1), {**_POOL, "count_include_pad": ("int", 0)})
def _avgpool(t, a):
    return _maxpool(t, a)


@_op("GlobalAveragePool", (1, 1))
def _gap(t, a):
    x = t[0]
    return [_same(x, x.shape[:2] + (1,) * (x.rank - 2))]


OPS["GlobalMaxPool"] = OpDef("GlobalMaxPool", {}, (1, 1), _gap)


@_op("BatchNormalization", (5, 5), {"epsilon": ("float", 1e-5)},
     "Inference form: scale * (x - mean) / sqrt(var + eps) + B, per channel (axis 1).")
def _bn(t, a):
    x = t[0]
    c = x.shape[1] if x.rank > 1 else 1
    for p in t[1:]:
        if p.shape != (c,):
            raise ValueError(f"BatchNormalization: parameter shape {p.shape} != ({c},)")
    return [x]


# ---- shape ops ----------------------------------------------------------------------
@_op("Reshape", (1, 1), {"shape": ("ints", REQUIRED)}, "Explicit target shape (no 0 or -1).")
def _reshape(t, a):
    if math.prod(a["shape"]) != t[0].size:
        raise ValueError(f"Reshape: {t[0].shape} -> {a['shape']} changes the element count")
    return [_same(t[0], a["shape"])]


@_op("Transpose", (1, 1), {"perm": ("ints", REQUIRED)})
def _transpose(t, a):
    x = t[0]
    if sorted(a["perm"]) != list(range(x.rank)):
        raise ValueError(f"Transpose: perm {a['perm']} is not a permutation of rank {x.rank}")
    return [_same(x, tuple(x.shape[p] for p in a["perm"]))]


@_op("Expand", (1, 1), {"shape": ("ints", REQUIRED)})
def _expand(t, a):
    return [_same(t[0], broadcast(t[0].shape, tuple(a["shape"])))]


@_op("Concat", (1, -1), {"axis": ("int", REQUIRED)})
def _concat(t, a):
    ax = a["axis"]
    base = t[0].shape
    total = 0
    for x in t:
        if x.rank != len(base) or any(x.shape[i] != base[i] for i in range(len(base)) if i != ax):
            raise ValueError(f"Concat: shapes {[x.shape for x in t]} differ off axis {ax}")
        if x.dtype != t[0].dtype:
            raise ValueError("Concat: inputs of different dtypes")
        total += x.shape[ax]
    return [_same(t[0], base[:ax] + (total,) + base[ax + 1:])]


@_op("Split", (1, 1), {"axis": ("int", REQUIRED), "split": ("ints", REQUIRED)})
def _split(t, a):
    x, ax = t[0], a["axis"]
    if sum(a["split"]) != x.shape[ax]:
        raise ValueError(f"Split: sizes {a['split']} do not add up to {x.shape[ax]}")
    return [_same(x, x.shape[:ax] + (s,) + x.shape[ax + 1:]) for s in a["split"]]


@_op("Slice", (1, 1), {"starts": ("ints", REQUIRED), "ends": ("ints", REQUIRED), "steps": ("ints", REQUIRED)},
     "One (start, end, step) per axis, clamped; for a negative step an end of -1 means "
     "'through index 0'.")
def _slice(t, a):
    x = t[0]
    if not (len(a["starts"]) == len(a["ends"]) == len(a["steps"]) == x.rank):
        raise ValueError("Slice: starts/ends/steps must have one entry per axis")
    return [_same(x, tuple(len(r) for r in slice_ranges(a)))]


def slice_ranges(a) -> list[range]:
    """The indices a normalized Slice takes along each axis, as Python ranges."""
    return [range(s, e, st) for s, e, st in zip(a["starts"], a["ends"], a["steps"])]


@_op("Pad", (1, 1), {"pads": ("ints", REQUIRED), "mode": ("str", "constant"), "value": ("float", 0.0)})
def _pad(t, a):
    x = t[0]
    p = a["pads"]
    if len(p) != 2 * x.rank:
        raise ValueError(f"Pad: {len(p)} pads for rank {x.rank}")
    return [_same(x, tuple(x.shape[i] + p[i] + p[i + x.rank] for i in range(x.rank)))]


@_op("Gather", (2, 2), {"axis": ("int", 0)})
def _gather(t, a):
    x, idx, ax = t[0], t[1], a["axis"]
    if idx.dtype not in ("int32", "int64"):
        raise ValueError(f"Gather: indices must be int32/int64, not {idx.dtype}")
    return [_same(x, x.shape[:ax] + idx.shape + x.shape[ax + 1:])]


REDUCE_OPS = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum")


def _reduce(t, a):
    x = t[0]
    axes = set(a["axes"])
    if a["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [_same(x, shape)]


for _name in REDUCE_OPS:
    _op(_name, (1, 1), {"axes": ("ints", REQUIRED), "keepdims": ("int", 1)})(_reduce)


# ---- quantization -------------------------------------------------------------------
@_op("QuantizeLinear", (3, 3), {"axis": ("int", 1)},
     "y = saturate(round_half_even(x / scale) + zero_point); dtype of zero_point.")
def _quantize(t, a):
    _check_qparams("QuantizeLinear", t, a)
    return [TensorType(t[2].dtype, t[0].shape)]


def _check_qparams(op, t, a):
    """Scale and zero point: both per-tensor (one element), or both per-axis (x.shape[axis],)."""
    x, scale, zp = t
    if scale.size == 1 and zp.size == 1 and scale.rank <= 1 and zp.rank <= 1:
        return
    n = x.shape[a["axis"]] if 0 <= a["axis"] < x.rank else None
    if scale.shape != (n,) or zp.shape != (n,):
        raise ValueError(f"{op}: scale {scale.shape} and zero point {zp.shape} must both have one "
                         f"element, or both be ({n},) for axis {a['axis']} of input {x.shape}")


@_op("DequantizeLinear", (3, 3), {"axis": ("int", 1)}, "y = (x - zero_point) * scale (float32).")
def _dequantize(t, a):
    _check_qparams("DequantizeLinear", t, a)
    return [TensorType("float32", t[0].shape)]


# ---- quantized (int8) ops -------------------------------------------------------------
# The int8 graph uses these ops plus the data-movement ops above on int8 tensors
# (Reshape, Transpose, Slice, Split, Concat of equal scales, MaxPool, Identity).
# Integer semantics are hwc/quant/arith.py; the int8 reference is hwc/ref/int8.py.
# Requantization parameters are constant inputs: mult (int32) and shift (int32), one per
# output channel (or one value for the whole tensor). Every int8 value carries its
# QuantParams (scale, zero point) in Value.quant for reports and dequantization.
_QOUT = {"z_out": ("int", 0), "lo": ("int", -128), "hi": ("int", 127)}


def _int8_out(x: TensorType, shape) -> TensorType:
    return TensorType("int8", tuple(shape))


@_op("QConv", (5, 6), {"strides": ("ints", REQUIRED), "pads": ("ints", REQUIRED),
                       "dilations": ("ints", REQUIRED), "group": ("int", 1), "z_in": ("int", 0), **_QOUT},
     "inputs x:int8, w:int8, bias:int32[M], mult:int32[M], shift:int32[M], optional mult_neg:int32[M] (a fused "
     "LeakyReLU/PReLU). acc = conv(x - z_in, w) + bias (padding contributes 0), y = requantize(acc, mult, shift, "
     "z_out, lo, hi, mult_neg).")
def _qconv(t, a):
    x, w = t[0], t[1]
    if x.dtype != "int8" or w.dtype != "int8":
        raise ValueError("QConv: x and w must be int8")
    f = _conv([x, w], {**a, "act": "", "act_args": []})[0]
    return [_int8_out(x, f.shape)]


@_op("QGemm", (5, 6), {"z_in": ("int", 0), **_QOUT},
     "inputs a:int8[M,K], b:int8[N,K] (weights, transposed), bias:int32[N], mult:int32[N], shift:int32[N], "
     "optional mult_neg:int32[N] (a fused LeakyReLU/PReLU). acc = (a - z_in) @ b.T + bias, "
     "y = requantize(acc, ...).")
def _qgemm(t, a):
    A, B = t[0], t[1]
    if A.rank != 2 or B.rank != 2 or A.shape[1] != B.shape[1]:
        raise ValueError(f"QGemm: shapes {A.shape} x {B.shape}^T do not match")
    return [_int8_out(A, (A.shape[0], B.shape[0]))]


@_op("QAdd", (2, 2), {"z_a": ("int", 0), "z_b": ("int", 0), "mult_a": ("int", REQUIRED),
                      "mult_b": ("int", REQUIRED), "shift": ("int", REQUIRED), **_QOUT},
     "y = add_requantize(a, b, ...) (arith.add_requantize); a and b have the same shape.")
def _qadd(t, a):
    if t[0].shape != t[1].shape:
        raise ValueError(f"QAdd: shapes {t[0].shape} and {t[1].shape} differ")
    return [t[0]]


@_op("QAvgPool", (3, 3), {**_POOL, "count_include_pad": ("int", 1), "z_in": ("int", 0), **_QOUT},
     "inputs x:int8, mult:int32[1], shift:int32[1]. acc = sum over the window of (x - z_in) "
     "(padding contributes 0), y = requantize(acc, mult, shift, ...): mult/shift fold 1/window.")
def _qavgpool(t, a):
    return _maxpool([t[0]], a)


@_op("QGlobalAvgPool", (3, 3), {"z_in": ("int", 0), **_QOUT},
     "inputs x:int8, mult, shift. acc = sum over H*W of (x - z_in), y = requantize(acc, ...).")
def _qgap(t, a):
    return _gap([t[0]], a)


@_op("QRequant", (3, 3), {"z_in": ("int", 0), **_QOUT},
     "inputs x:int8, mult:int32[1|C], shift:int32[1|C] (per axis 1). y = requantize(x - z_in, ...): "
     "a change of scale (Concat inputs, scale-changing Identity).")
def _qrequant(t, a):
    return [_int8_out(t[0], t[0].shape)]


@_op("QLut", (2, 2), {}, "inputs x:int8, table:int8[256]. y = table[x + 128] (Sigmoid, Tanh, HardSwish...).")
def _qlut(t, a):
    if t[1].shape != (256,):
        raise ValueError("QLut: table must have 256 entries")
    return [t[0]]


@_op("Quantize", (1, 1), {"scale": ("float", REQUIRED), "zero_point": ("int", 0)},
     "float -> int8: arith.quantize (round half to even, saturate).")
def _quantize_op(t, a):
    return [TensorType("int8", t[0].shape)]


@_op("Dequantize", (1, 1), {"scale": ("float", REQUIRED), "zero_point": ("int", 0)},
     "int8 -> float32: scale * (q - zero_point).")
def _dequantize_op(t, a):
    return [TensorType("float32", t[0].shape)]


QUANT_OPS = frozenset({"QConv", "QGemm", "QAdd", "QAvgPool", "QGlobalAvgPool", "QRequant", "QLut",
                       "Quantize", "Dequantize"})


# ---- fused elementwise (graph optimizer: hwc.passes.elementwise) -----------------------
# A chain of elementwise ops fused into one node that a backend runs as one loop.
# `program` is a straight-line program over registers, instructions separated by ';':
#
#     OP OPERAND... PARAM...        e.g.  "add %0 %1; mul %3 %2; clip %4 0 6"
#
# Registers %0..%(n-1) are the node's inputs; instruction k writes register %(n+k); the
# result is the last register. OP is an elementwise IR op in lower case (FUSED_EW_OPS);
# it takes FUSED_EW_ARITY[OP] operands (a register, or a float literal, a scalar) and then
# the op's float attributes in schema order (clip: min max; leakyrelu: alpha; ...).
# Every instruction means exactly that IR op (broadcasting included) rounded to float32,
# so a fused chain gives the same bits as the chain it replaces.
FUSED_EW_OPS: dict[str, str] = {op.lower(): op for op in (*BINARY_OPS, "Max", "Min", *UNARY_OPS)}
FUSED_EW_ARITY: dict[str, int] = {k: 1 if v in UNARY_OPS else 2 for k, v in FUSED_EW_OPS.items()}


@dataclass(frozen=True)
class EwInstr:
    """One instruction: IR op, operands (int = register, float = literal), float params."""

    op: str
    args: tuple
    params: tuple[float, ...] = ()

    def __str__(self) -> str:
        ops = [f"%{a}" if isinstance(a, int) else repr(float(a)) for a in self.args]
        return " ".join([self.op.lower(), *ops, *(repr(float(p)) for p in self.params)])


def format_program(instrs: list[EwInstr]) -> str:
    return "; ".join(str(i) for i in instrs)


def parse_program(text: str, n_inputs: int) -> list[EwInstr]:
    """Parse and check a FusedElementwise program; raises ValueError saying what is wrong."""
    out: list[EwInstr] = []
    for k, part in enumerate(p.strip() for p in text.split(";")):
        words = part.split()
        if not words or words[0] not in FUSED_EW_OPS:
            raise ValueError(f"FusedElementwise: instruction {k} {part!r}: unknown op "
                             f"(known: {', '.join(sorted(FUSED_EW_OPS))})")
        op = FUSED_EW_OPS[words[0]]
        arity, n_params = FUSED_EW_ARITY[words[0]], len(OPS[op].attrs)
        if len(words) != 1 + arity + n_params:
            raise ValueError(f"FusedElementwise: instruction {k} {part!r}: {words[0]} takes {arity} "
                             f"operand(s) and {n_params} parameter(s)")
        args = tuple(_ew_operand(w, n_inputs + k, part) for w in words[1:1 + arity])
        out.append(EwInstr(op, args, tuple(float(w) for w in words[1 + arity:])))
    return out


def _ew_operand(word: str, n_regs: int, part: str):
    if word.startswith("%"):
        r = int(word[1:])
        if not 0 <= r < n_regs:
            raise ValueError(f"FusedElementwise: {part!r} reads register %{r}, only %0..%{n_regs - 1} exist")
        return r
    return float(word)


@_op("FusedElementwise", (1, -1), {"program": ("str", REQUIRED)},
     "A fused chain of elementwise ops (float32, broadcasting): see `parse_program`.")
def _fused_elementwise(t, a):
    instrs = parse_program(a["program"], len(t))
    if any(x.dtype != "float32" for x in t):
        raise ValueError("FusedElementwise: every input must be float32")
    used = {r for i in instrs for r in i.args if isinstance(r, int)}
    unused = [k for k in range(len(t)) if k not in used]
    if unused:
        raise ValueError(f"FusedElementwise: inputs {unused} are not used by the program")
    return [_same(t[0], broadcast(*(x.shape for x in t)))]
