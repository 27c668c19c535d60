"""ONNX importer: an ONNX model (opsets 7-28, tested on 11-21) becomes a verified graph IR.

Every shape is static after import: symbolic input dims are bound by `input_shapes`,
and shape arithmetic (Shape -> Gather -> Concat -> Reshape chains, ConstantOfShape,
Range, ...) is evaluated at import time, so parameters such as Reshape's target shape
become attributes. Every error names the operator, opset and node, Glow-style:
``[Operator-'Conv', opset 13, node 'conv1']: ...``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hwc.errors import ModelError, UnsupportedError, UserError
from hwc.ir.graph import Graph
from hwc.ir.ops import REQUIRED
from hwc.ir.types import TensorType
from hwc.ir.verify import verify
from hwc.ref.interp import run_node

MIN_OPSET, MAX_OPSET = 7, 28

#: ONNX TensorProto element types the IR accepts.
ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.BOOL: "bool",
}
IR_TO_ONNX = {v: k for k, v in ONNX_DTYPES.items()}

#: How `problems` marks a node skipped because an input comes from a failed node.
UNCHECKED = "not checked"

#: Largest integer constant folded at import (shape arithmetic is small).
FOLD_LIMIT = 1 << 16


def onnx_dtype_name(elem_type: int) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "undefined"


# ---- loading ---------------------------------------------------------------------------
def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and check an ONNX file, with a clear error for every way it can be wrong."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"Cannot read model {path!r}: no such file. Check the path, or run "
                         f"`hwc check` on the .onnx file you exported.")
    if os.path.isdir(path):
        raise ModelError(f"Cannot read model {path!r}: it is a directory, not an .onnx file. "
                         f"Pass the path of the model file itself.")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise ModelError(f"Cannot read model {path!r}: the file is empty. Re-export the model.")
    try:
        model = onnx.load_from_string(data)
    except Exception as e:  # protobuf raises DecodeError (and sometimes others) on bad bytes
        raise ModelError(
            f"Cannot read model {path!r}: it is not a valid ONNX file (protobuf decoding failed: "
            f"{str(e).strip() or type(e).__name__}). The file may be truncated or corrupt, or not "
            f"an ONNX model at all; re-export it, or check the download finished.") from None
    if model.ir_version == 0 or not model.HasField("graph") or not model.opset_import:
        raise ModelError(
            f"Cannot read model {path!r}: the file decodes but is not an ONNX model (no "
            f"ir_version, graph or opset_import). Pass a model exported to ONNX (.onnx).")
    if os.path.dirname(path):
        try:
            onnx.load_external_data_for_model(model, os.path.dirname(path))
        except Exception as e:
            raise ModelError(f"Cannot read model {path!r}: its external weight data could not be "
                             f"loaded ({e}). Keep the data files next to the model.") from None
    check_model(model, path)
    return model


def check_model(model: onnx.ModelProto, where: str = "model") -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
        raise ModelError(
            f"Model {where!r} fails onnx.checker: {first}. The file is not a valid ONNX model; "
            f"fix the exporter or the graph (onnx.checker.check_model shows the full report).") from None


# ---- the conversion context -------------------------------------------------------------
class Ctx:
    """What a converter sees: the ONNX node, its attributes, its inputs as IR values."""

    def __init__(self, g: Graph, node: onnx.NodeProto, opset: int, consumers: set[str]):
        self.g, self.node, self.opset, self.consumers = g, node, opset, consumers
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.used_attrs: set[str] = set()

    @property
    def where(self) -> str:
        return f"[Operator-'{self.node.op_type}', opset {self.opset}, node '{self.node.name}']"

    def fail(self, msg: str, unsupported: bool = True) -> UserError:
        text = f"{self.where}: {msg}"
        return UnsupportedError(text, [text]) if unsupported else ModelError(text)

    def attr(self, name: str, default: Any = REQUIRED) -> Any:
        self.used_attrs.add(name)
        if name in self.attrs:
            v = self.attrs[name]
            if isinstance(v, bytes):
                v = v.decode()
            return v
        if default is REQUIRED:
            raise self.fail(f"missing required attribute {name!r}", unsupported=False)
        return default

    def allow(self, *names: str) -> None:
        """Reject attributes this converter does not understand, rather than ignore them."""
        extra = sorted(set(self.attrs) - set(names))
        if extra:
            raise self.fail(f"attribute(s) {extra} not supported")

    def n_in(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def inp(self, i: int) -> str:
        return self.node.input[i] if self.has(i) else ""

    def type(self, i: int) -> TensorType:
        return self.g.type(self.inp(i))

    def const(self, i: int) -> np.ndarray | None:
        return self.g.const(self.inp(i)) if self.has(i) else None

    def need_const(self, i: int, what: str) -> np.ndarray:
        v = self.const(i)
        if v is None:
            raise self.fail(
                f"{what} (input {i}, {self.node.input[i]!r}) is computed at run time; hwc needs it to "
                f"be a constant known at build time (an initializer, or shape arithmetic that folds)")
        return v

    def emit(self, op: str, inputs: list[str], attrs: dict | None = None, out: int | str = 0) -> str:
        """Add an IR node writing ONNX output `out` (an index) or a fresh temporary (a hint)."""
        if isinstance(out, int):
            outputs = [self.node.output[out]]
            name = self.node.name or self.g.fresh(self.node.op_type.lower())
            if name in {n.name for n in self.g.nodes}:
                name = self.g.fresh(name)
        else:
            outputs = [self.g.fresh(out)]
            name = self.g.fresh(out)
        try:
            n = self.g.make_node(op, inputs, attrs, name=name, outputs=outputs)
        except ValueError as e:
            raise self.fail(str(e), unsupported=False) from None
        _fold_if_constant(self.g, n)
        return outputs[0]

    def set_const(self, data: np.ndarray, out: int = 0) -> None:
        data = np.asarray(data)
        self.g.add_value(self.node.output[out], _ir_type(self, data), data)

    def axis(self, a: int, rank: int) -> int:
        if not -rank <= a < max(rank, 1):
            raise self.fail(f"axis {a} out of range for rank {rank}", unsupported=False)
        return a + rank if a < 0 else a

    def unused_outputs_from(self, k: int, consumers: set[str]) -> None:
        for o in self.node.output[k:]:
            if o and o in consumers:
                raise self.fail(f"output {o!r} is used, but hwc only supports inference "
                                f"(the first output)")


def _ir_type(ctx: Ctx, data: np.ndarray) -> TensorType:
    try:
        return TensorType.of(data)
    except KeyError:
        raise ctx.fail(f"dtype {data.dtype} is not supported (hwc supports float32, int8, uint8, "
                       f"int32, int64, bool)") from None


def _fold_if_constant(g: Graph, n) -> None:
    """Evaluate shape arithmetic at import: integer nodes whose inputs are all constant."""
    if not all(g.const(i) is not None for i in n.inputs if i):
        return
    outs = [g.values[o].type for o in n.outputs]
    if not all(t.dtype in ("int64", "int32", "bool") and t.size <= FOLD_LIMIT for t in outs):
        return
    results = run_node(n, [g.const(i) if i else None for i in n.inputs])
    g.remove_node(n)
    for o, t, r in zip(n.outputs, outs, results):
        g.values[o].data = np.asarray(r).astype(t.np_dtype)
        g.values[o].data.flags.writeable = False


# ---- converters ----------------------------------------------------------------------------
CONVERTERS: dict[str, Callable[[Ctx], None]] = {}


def converter(*names):
    def deco(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return deco


def _ints(v) -> list[int]:
    return [int(x) for x in v]


def _spatial_params(ctx: Ctx, x: TensorType, kernel: list[int], dilated: bool = True, ceil: bool = False):
    """strides, pads, dilations with auto_pad resolved, for Conv and pooling."""
    nd = len(kernel)
    strides = _ints(ctx.attr("strides", [1] * nd))
    dil = _ints(ctx.attr("dilations", [1] * nd)) if dilated else [1] * nd
    pads = _ints(ctx.attr("pads", [0] * (2 * nd)))
    auto = ctx.attr("auto_pad", "NOTSET")
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise ctx.fail("strides/dilations/pads do not match the kernel rank", unsupported=False)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - size)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nd] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    elif auto != "NOTSET":
        raise ctx.fail(f"auto_pad {auto!r} is not supported")
    return strides, pads, dil


@converter("Conv")
def _conv(ctx: Ctx):
    ctx.allow("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
    x, w = ctx.type(0), ctx.type(1)
    if x.rank < 3:
        raise ctx.fail(f"input of rank {x.rank}: Conv needs N, C and at least one spatial axis")
    kernel = _ints(ctx.attr("kernel_shape", list(w.shape[2:])))
    if kernel != list(w.shape[2:]):
        raise ctx.fail(f"kernel_shape {kernel} != weight shape {list(w.shape[2:])}", unsupported=False)
    strides, pads, dil = _spatial_params(ctx, x, kernel)
    ins = [ctx.inp(0), ctx.inp(1)] + ([ctx.inp(2)] if ctx.has(2) else [])
    ctx.emit("Conv", ins, {"strides": strides, "pads": pads, "dilations": dil, "group": ctx.attr("group", 1)})


@converter("Gemm")
def _gemm(ctx: Ctx):
    ctx.allow("alpha", "beta", "transA", "transB")
    ins = [ctx.inp(0), ctx.inp(1)] + ([ctx.inp(2)] if ctx.has(2) else [])
    ctx.emit("Gemm", ins, {"alpha": ctx.attr("alpha", 1.0), "beta": ctx.attr("beta", 1.0),
                           "transA": ctx.attr("transA", 0), "transB": ctx.attr("transB", 0)})


@converter("MatMul")
def _matmul(ctx: Ctx):
    ctx.allow()
    ctx.emit("MatMul", [ctx.inp(0), ctx.inp(1)])


@converter("Add", "Sub", "Mul", "Div", "Pow", "PRelu")
def _binary(ctx: Ctx):
    ctx.allow()
    a, b = ctx.type(0), ctx.type(1)
    op = ctx.node.op_type
    if op != "Pow" and a.dtype != b.dtype:
        raise ctx.fail(f"operand dtypes differ ({a.dtype} vs {b.dtype})", unsupported=False)
    if op == "PRelu" and ctx.opset < 7:
        raise ctx.fail("PRelu before opset 7 is not supported")
    ctx.emit(op, [ctx.inp(0), ctx.inp(1)])


@converter("Max", "Min", "Sum", "Mean")
def _variadic(ctx: Ctx):
    ctx.allow()
    ctx.emit(ctx.node.op_type, [ctx.inp(i) for i in range(ctx.n_in())])


_UNARY_ATTRS = {
    "Relu": [], "Sigmoid": [], "Tanh": [], "HardSwish": [], "Abs": [], "Neg": [], "Exp": [],
    "Log": [], "Sqrt": [], "Reciprocal": [], "Floor": [], "Ceil": [], "Sign": [], "Softplus": [],
    "Softsign": [], "Identity": [], "LeakyRelu": ["alpha"], "HardSigmoid": ["alpha", "beta"],
    "Elu": ["alpha"], "Celu": ["alpha"], "Selu": ["alpha", "gamma"], "ThresholdedRelu": ["alpha"],
}


@converter(*_UNARY_ATTRS)
def _unary(ctx: Ctx):
    op = ctx.node.op_type
    names = _UNARY_ATTRS[op]
    ctx.allow(*names)
    ctx.emit(op, [ctx.inp(0)], {k: ctx.attr(k) for k in names if k in ctx.attrs})


@converter("Clip")
def _clip(ctx: Ctx):
    if ctx.opset < 11:
        ctx.allow("min", "max")
        lo, hi = ctx.attr("min", -math.inf), ctx.attr("max", math.inf)
    else:
        ctx.allow()
        lo = float(ctx.need_const(1, "min")) if ctx.has(1) else -math.inf
        hi = float(ctx.need_const(2, "max")) if ctx.has(2) else math.inf
    ctx.emit("Clip", [ctx.inp(0)], {"min": lo, "max": hi})


@converter("Softmax", "LogSoftmax")
def _softmax(ctx: Ctx):
    ctx.allow("axis")
    x = ctx.type(0)
    axis = ctx.axis(ctx.attr("axis", -1 if ctx.opset >= 13 else 1), x.rank)
    op = ctx.node.op_type
    if ctx.opset >= 13 or axis == x.rank - 1:
        ctx.emit(op, [ctx.inp(0)], {"axis": axis})
        return
    # Before opset 13 the input is coerced to 2-d [prod(:axis), prod(axis:)].
    flat = [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])]
    t = ctx.emit("Reshape", [ctx.inp(0)], {"shape": flat}, out=f"{ctx.node.output[0]}_2d")
    s = ctx.emit(op, [t], {"axis": 1}, out=f"{ctx.node.output[0]}_sm")
    ctx.emit("Reshape", [s], {"shape": list(x.shape)})


@converter("MaxPool", "AveragePool")
def _pool(ctx: Ctx):
    op = ctx.node.op_type
    names = ["auto_pad", "ceil_mode", "kernel_shape", "pads", "strides", "dilations"]
    if op == "MaxPool":
        names.append("storage_order")
    else:
        names.append("count_include_pad")
    ctx.allow(*names)
    x = ctx.type(0)
    kernel = _ints(ctx.attr("kernel_shape"))
    strides, pads, dil = _spatial_params(ctx, x, kernel)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dil,
             "ceil_mode": ctx.attr("ceil_mode", 0)}
    if op == "AveragePool":
        attrs["count_include_pad"] = ctx.attr("count_include_pad", 0)
    ctx.unused_outputs_from(1, ctx.consumers)
    ctx.emit(op, [ctx.inp(0)], attrs)


@converter("GlobalAveragePool", "GlobalMaxPool")
def _gpool(ctx: Ctx):
    ctx.allow()
    ctx.emit(ctx.node.op_type, [ctx.inp(0)])


@converter("BatchNormalization")
def _bn(ctx: Ctx):
    ctx.allow("epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs")
    if ctx.attr("training_mode", 0):
        raise ctx.fail("training_mode=1 is not supported (hwc compiles inference graphs)")
    if not ctx.attr("spatial", 1):
        raise ctx.fail("spatial=0 is not supported")
    if ctx.opset < 14 and any(ctx.node.output[1:]):
        # Before opset 14 the number of outputs selects the mode: Y alone is test mode,
        # Y plus the statistics outputs is training mode (Y from the batch statistics).
        raise ctx.fail(f"{sum(map(bool, ctx.node.output))} outputs select training mode before "
                       f"opset 14, which is not supported (hwc compiles inference graphs: keep "
                       f"only output Y)")
    ctx.unused_outputs_from(1, ctx.consumers)
    ctx.emit("BatchNormalization", [ctx.inp(i) for i in range(5)], {"epsilon": ctx.attr("epsilon", 1e-5)})


def _reshape_to(ctx: Ctx, shape: list[int]) -> None:
    ctx.emit("Reshape", [ctx.inp(0)], {"shape": [int(d) for d in shape]})


@converter("Flatten")
def _flatten(ctx: Ctx):
    ctx.allow("axis")
    x = ctx.type(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.rank if axis < 0 else axis
    if not 0 <= axis <= x.rank:
        raise ctx.fail(f"axis {axis} out of range for rank {x.rank}", unsupported=False)
    _reshape_to(ctx, [math.prod(x.shape[:axis]), math.prod(x.shape[axis:])])


@converter("Reshape")
def _reshape(ctx: Ctx):
    x = ctx.type(0)
    if ctx.opset < 5:
        raise ctx.fail("Reshape before opset 5 is not supported")
    ctx.allow("allowzero")
    shape = _ints(ctx.need_const(1, "the target shape"))
    allowzero = ctx.attr("allowzero", 0)
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= x.rank:
                raise ctx.fail(f"shape {shape}: 0 at axis {i} copies a dim the input lacks", False)
            d = x.shape[i]
        out.append(d)
    if out.count(-1) > 1:
        raise ctx.fail(f"shape {shape} has more than one -1", unsupported=False)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or x.size % known:
            raise ctx.fail(f"cannot reshape {list(x.shape)} to {shape}", unsupported=False)
        out[out.index(-1)] = x.size // known
    if math.prod(out) != x.size:
        raise ctx.fail(f"cannot reshape {list(x.shape)} ({x.size} elements) to {shape}", unsupported=False)
    _reshape_to(ctx, out)


@converter("Squeeze")
def _squeeze(ctx: Ctx):
    x = ctx.type(0)
    if ctx.opset < 13:
        ctx.allow("axes")
        axes = ctx.attr("axes", None)
    else:
        ctx.allow()
        axes = ctx.need_const(1, "axes") if ctx.has(1) else None
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    axes = {ctx.axis(int(a), x.rank) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise ctx.fail(f"cannot squeeze axis {a} of size {x.shape[a]}", unsupported=False)
    _reshape_to(ctx, [d for i, d in enumerate(x.shape) if i not in axes])


@converter("Unsqueeze")
def _unsqueeze(ctx: Ctx):
    x = ctx.type(0)
    if ctx.opset < 13:
        ctx.allow("axes")
        axes = ctx.attr("axes")
    else:
        ctx.allow()
        axes = ctx.need_const(1, "axes")
    rank = x.rank + len(axes)
    axes = sorted(ctx.axis(int(a), rank) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    _reshape_to(ctx, shape)


@converter("Transpose")
def _transpose(ctx: Ctx):
    ctx.allow("perm")
    x = ctx.type(0)
    perm = _ints(ctx.attr("perm", list(range(x.rank))[::-1]))
    ctx.emit("Transpose", [ctx.inp(0)], {"perm": [ctx.axis(p, x.rank) for p in perm]})


@converter("Concat")
def _concat(ctx: Ctx):
    ctx.allow("axis")
    x = ctx.type(0)
    ctx.emit("Concat", [ctx.inp(i) for i in range(ctx.n_in())], {"axis": ctx.axis(ctx.attr("axis"), x.rank)})


@converter("Split")
def _split(ctx: Ctx):
    x = ctx.type(0)
    n = len(ctx.node.output)
    if ctx.opset < 13:
        ctx.allow("axis", "split")
        sizes = ctx.attr("split", None)
    else:
        ctx.allow("axis", "num_outputs")
        sizes = ctx.need_const(1, "split sizes") if ctx.has(1) else None
        ctx.attr("num_outputs", None)
    axis = ctx.axis(ctx.attr("axis", 0), x.rank)
    dim = x.shape[axis]
    if sizes is None:
        chunk = -(-dim // n)
        if ctx.opset < 18 and dim % n:
            raise ctx.fail(f"cannot split {dim} evenly into {n}", unsupported=False)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    sizes = _ints(sizes)
    if len(sizes) != n or sum(sizes) != dim:
        raise ctx.fail(f"split sizes {sizes} do not cover {dim} with {n} outputs", unsupported=False)
    name = ctx.node.name or ctx.g.fresh("split")
    try:
        nd = ctx.g.make_node("Split", [ctx.inp(0)], {"axis": axis, "split": sizes},
                             name=ctx.g.fresh(name), outputs=list(ctx.node.output))
    except ValueError as e:
        raise ctx.fail(str(e), unsupported=False) from None
    _fold_if_constant(ctx.g, nd)


@converter("Slice")
def _slice(ctx: Ctx):
    x = ctx.type(0)
    if ctx.opset < 10:
        ctx.allow("starts", "ends", "axes")
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        ctx.allow()
        starts, ends = ctx.need_const(1, "starts"), ctx.need_const(2, "ends")
        axes = ctx.need_const(3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = ctx.need_const(4, "steps") if ctx.has(4) else [1] * len(starts)
    full_s, full_e, full_st = [0] * x.rank, list(x.shape), [1] * x.rank
    for s, e, a, st in zip(_ints(starts), _ints(ends), _ints(axes), _ints(steps)):
        a = ctx.axis(a, x.rank)
        dim = x.shape[a]
        if st == 0:
            raise ctx.fail("slice step 0", unsupported=False)
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        full_s[a], full_e[a], full_st[a] = s, e, st
    ctx.emit("Slice", [ctx.inp(0)], {"starts": full_s, "ends": full_e, "steps": full_st})


@converter("Pad")
def _pad(ctx: Ctx):
    x = ctx.type(0)
    if ctx.opset < 11:
        ctx.allow("mode", "pads", "value", "paddings")
        pads = _ints(ctx.attr("pads"))
        value = ctx.attr("value", 0.0)
    else:
        ctx.allow("mode")
        pads = _ints(ctx.need_const(1, "pads"))
        value = ctx.need_const(2, "constant_value") if ctx.has(2) else 0
        value = float(np.asarray(value).reshape(-1)[0]) if np.asarray(value).size else 0.0
        if ctx.has(3):
            axes = [ctx.axis(int(a), x.rank) for a in ctx.need_const(3, "axes")]
            full = [0] * (2 * x.rank)
            for k, a in enumerate(axes):
                full[a], full[a + x.rank] = pads[k], pads[k + len(axes)]
            pads = full
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.fail(f"mode {mode!r} is not supported")
    if len(pads) != 2 * x.rank:
        raise ctx.fail(f"{len(pads)} pads for an input of rank {x.rank}", unsupported=False)
    ctx.emit("Pad", [ctx.inp(0)], {"pads": pads, "mode": mode, "value": value})


#: Resize's coordinate_transformation_mode values hwc computes (all but tf_crop_and_resize, which needs roi and an
#: extrapolation value), and its nearest_mode values.
_RESIZE_CTM = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn")
_RESIZE_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def resize_nearest_index(n_in: int, n_out: int, scale: float, ctm: str, rounding: str) -> np.ndarray:
    """The input index each of the n_out outputs of a nearest-neighbour Resize reads along one axis (ONNX's
    formulas, in float64 as its reference implementation: the source coordinate of output x, rounded as
    `rounding` says where it falls between two pixels, then clamped into the input)."""
    x = np.arange(n_out, dtype=np.float64)
    length = scale * n_in
    if ctm == "align_corners":
        src = np.zeros_like(x) if length == 1 else x * (n_in - 1) / (length - 1)
    elif ctm == "asymmetric":
        src = x / scale
    elif ctm == "pytorch_half_pixel":
        src = np.full_like(x, -0.5) if length == 1 else (x + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        src = (x + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        src = n_in / 2 * (1 - n_out / length) + (x + 0.5) / scale - 0.5
    else:   # tf_half_pixel_for_nn
        src = (x + 0.5) / scale
    lo = np.floor(src)
    frac = src - lo
    up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5, "floor": np.zeros_like(frac, bool),
          "ceil": frac > 0}[rounding]
    return np.clip(lo + up, 0, n_in - 1).astype(np.int64)


@converter("Resize", "Upsample")
def _resize(ctx: Ctx):
    """Nearest-neighbour Resize (and the older Upsample) as moves every backend has, in int8 too (at the input's
    scale): by whole factors under which output i reads input i // s (the U-Net / YOLO-neck / decoder kind)
    Reshape -> Expand -> Reshape, [.., H, W] -> [.., H, 1, W, 1] -> [.., H, s, W, t] -> [.., H s, W t]; any other
    nearest resize (down, fractional, align_corners, ...) a Gather of constant indices per resized axis.
    Linear and cubic modes, antialias and tf_crop_and_resize: a clear error."""
    x = ctx.type(0)
    op = ctx.node.op_type
    if op == "Upsample":
        ctx.allow("mode", "scales")
        scales = ctx.attr("scales") if ctx.opset < 9 else ctx.need_const(1, "scales")
        sizes, ctm, rounding, policy = None, "asymmetric", "floor", "stretch"
    else:
        ctx.allow("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                  "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy")
        ctm = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 11 else "asymmetric")
        # (Resize-10 has neither attribute: its nearest reads input floor(i / scale), as Upsample's)
        rounding = ctx.attr("nearest_mode", "round_prefer_floor" if ctx.opset >= 11 else "floor")
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        scales = sizes = None
        if ctx.opset < 11:   # Resize-10: (X, scales)
            scales = ctx.need_const(1, "scales")
        elif ctx.has(3):     # Resize-11+: (X, roi, scales, sizes)
            sizes = np.asarray(ctx.need_const(3, "sizes"), dtype=np.int64).reshape(-1)
        elif ctx.has(2) and np.asarray(ctx.need_const(2, "scales")).size:
            scales = ctx.need_const(2, "scales")
        else:
            raise ctx.fail("neither scales nor sizes is given", unsupported=False)
        if ctx.attr("antialias", 0):
            raise ctx.fail("antialias=1 is not supported (only nearest-neighbour resizing)")
    mode, ctm, rounding, policy = (v.decode() if isinstance(v, bytes) else v for v in (ctx.attr("mode", "nearest"),
                                                                                         ctm, rounding, policy))
    if mode != "nearest":
        raise ctx.fail(f"mode {mode!r} is not supported: hwc computes nearest-neighbour resizing only; export the "
                       f"model with mode 'nearest' (PyTorch: nn.Upsample(mode='nearest'), F.interpolate(..., "
                       f"mode='nearest'))")
    if ctm not in _RESIZE_CTM:
        raise ctx.fail(f"coordinate_transformation_mode {ctm!r} is not supported (supported: {', '.join(_RESIZE_CTM)})")
    if rounding not in _RESIZE_ROUNDING:
        raise ctx.fail(f"nearest_mode {rounding!r} is not valid", unsupported=False)
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.fail(f"keep_aspect_ratio_policy {policy!r} is not valid", unsupported=False)
    axes = list(range(x.rank)) if op == "Upsample" or ctx.opset < 18 else \
        [ctx.axis(int(a), x.rank) for a in ctx.attr("axes", list(range(x.rank)))]
    given = np.asarray(sizes if sizes is not None else scales, dtype=np.float64).reshape(-1)
    if len(given) != len(axes):
        raise ctx.fail(f"{len(given)} {'sizes' if sizes is not None else 'scales'} for {len(axes)} axes",
                       unsupported=False)
    shape = list(x.shape)
    out_shape, scale = list(shape), [1.0] * x.rank
    for a, v in zip(axes, given):
        if v <= 0:
            raise ctx.fail(f"{'size' if sizes is not None else 'scale'} {v:g} of axis {a} is not positive",
                           unsupported=False)
        out_shape[a], scale[a] = (int(v), v / shape[a]) if sizes is not None else (int(v * shape[a]), float(v))
    if sizes is not None and policy != "stretch":   # one scale for every resized axis, the sizes rounded half up
        one = (min if policy == "not_larger" else max)(scale[a] for a in axes)
        for a in axes:
            out_shape[a], scale[a] = int(one * shape[a] + 0.5), one
    for a in axes:
        if out_shape[a] < 1:
            raise ctx.fail(f"the resize leaves no output pixel on axis {a} (of {shape[a]})", unsupported=False)
    index = {a: resize_nearest_index(shape[a], out_shape[a], scale[a], ctm, rounding) for a in range(x.rank)
             if (out_shape[a], scale[a]) != (shape[a], 1.0)}
    index = {a: ix for a, ix in index.items() if not np.array_equal(ix, np.arange(shape[a]))}
    if not index:
        ctx.emit("Identity", [ctx.inp(0)])
        return
    factor = {a: out_shape[a] // shape[a] for a in index}
    if all(out_shape[a] == shape[a] * factor[a] and np.array_equal(ix, np.arange(out_shape[a]) // factor[a])
           for a, ix in index.items()):
        y = ctx.node.output[0]
        t = ctx.emit("Reshape", [ctx.inp(0)], {"shape": [d for n in shape for d in (n, 1)]}, out=f"{y}_split")
        t = ctx.emit("Expand", [t], {"shape": [d for a, n in enumerate(shape) for d in (n, factor.get(a, 1))]},
                     out=f"{y}_spread")
        ctx.emit("Reshape", [t], {"shape": out_shape})
        return
    t = ctx.inp(0)
    for k, (a, ix) in enumerate(sorted(index.items())):
        name = ctx.g.fresh(f"{ctx.node.output[0]}_index{a}")
        ctx.g.add_value(name, TensorType.of(ix), ix)
        last = k == len(index) - 1
        t = ctx.emit("Gather", [t, name], {"axis": a}, out=0 if last else f"{ctx.node.output[0]}_axis{a}")


@converter("Dropout")
def _dropout(ctx: Ctx):
    ctx.allow("ratio", "seed", "is_test")
    if ctx.has(2) and bool(np.asarray(ctx.need_const(2, "training_mode")).any()):
        raise ctx.fail("training_mode=True is not supported (hwc compiles inference graphs)")
    ctx.emit("Identity", [ctx.inp(0)])
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        ctx.set_const(np.ones(ctx.type(0).shape, dtype=bool), out=1)


@converter("Constant")
def _constant(ctx: Ctx):
    ctx.allow("value", "value_float", "value_floats", "value_int", "value_ints")
    a = ctx.attrs
    if "value" in a:
        data = numpy_helper.to_array(a["value"])
    elif "value_float" in a:
        data = np.array(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        data = np.array(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        data = np.array(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        data = np.array(a["value_ints"], dtype=np.int64)
    else:
        raise ctx.fail("a Constant without a value is not supported")
    ctx.set_const(data)


@converter("Shape")
def _shape(ctx: Ctx):
    ctx.allow("start", "end")
    shape = ctx.type(0).shape
    r = len(shape)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    ctx.set_const(np.array(shape[start:end], dtype=np.int64))


@converter("Size")
def _size(ctx: Ctx):
    ctx.allow()
    ctx.set_const(np.array(ctx.type(0).size, dtype=np.int64))


@converter("ConstantOfShape")
def _const_of_shape(ctx: Ctx):
    ctx.allow("value")
    shape = _ints(ctx.need_const(0, "shape"))
    v = ctx.attr("value", None)
    fill = numpy_helper.to_array(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    ctx.set_const(np.full(shape, fill[0], dtype=fill.dtype))


@converter("Range")
def _range(ctx: Ctx):
    ctx.allow()
    start, limit, delta = (ctx.need_const(i, n) for i, n in enumerate(("start", "limit", "delta")))
    ctx.set_const(np.arange(start, limit, delta, dtype=np.asarray(start).dtype))


@converter("Gather")
def _gather(ctx: Ctx):
    ctx.allow("axis")
    x = ctx.type(0)
    ctx.emit("Gather", [ctx.inp(0), ctx.inp(1)], {"axis": ctx.axis(ctx.attr("axis", 0), x.rank)})


@converter("Cast")
def _cast(ctx: Ctx):
    ctx.allow("to", "saturate", "round_mode")
    to = ctx.attr("to")
    if to not in ONNX_DTYPES:
        raise ctx.fail(f"cast to {onnx_dtype_name(to)} is not supported (hwc supports float32, int8, "
                       f"uint8, int32, int64, bool)")
    ctx.emit("Cast", [ctx.inp(0)], {"to": ONNX_DTYPES[to]})


@converter("CastLike")
def _cast_like(ctx: Ctx):
    # saturate and round_mode only apply to float8 targets, which the IR does not have.
    ctx.allow("saturate", "round_mode")
    ctx.emit("Cast", [ctx.inp(0)], {"to": ctx.type(1).dtype})


@converter("Expand")
def _expand(ctx: Ctx):
    ctx.allow()
    ctx.emit("Expand", [ctx.inp(0)], {"shape": _ints(ctx.need_const(1, "shape"))})


@converter("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum")
def _reduce(ctx: Ctx):
    op = ctx.node.op_type
    x = ctx.type(0)
    axes_as_input = ctx.opset >= (13 if op == "ReduceSum" else 18)
    if axes_as_input:
        ctx.allow("keepdims", "noop_with_empty_axes")
        axes = ctx.need_const(1, "axes") if ctx.has(1) else []
    else:
        ctx.allow("keepdims", "axes")
        axes = ctx.attr("axes", [])
    axes = sorted({ctx.axis(int(a), x.rank) for a in np.asarray(axes).reshape(-1)})
    keep = ctx.attr("keepdims", 1)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            ctx.emit("Identity", [ctx.inp(0)])
            return
        axes = list(range(x.rank))
    ctx.emit(op, [ctx.inp(0)], {"axes": axes, "keepdims": keep})


def _q_common(ctx: Ctx):
    ctx.allow("axis", "saturate", "block_size", "output_dtype", "precision")
    if ctx.attr("block_size", 0):
        raise ctx.fail("blocked quantization (block_size) is not supported")
    precision = ctx.attr("precision", 0)
    if precision not in (0, onnx.TensorProto.FLOAT):
        raise ctx.fail(f"precision={onnx_dtype_name(precision)} is not supported (the division "
                       f"is done in float32)")
    x = ctx.type(0)
    scale = ctx.type(1)
    # A one-element scale is per tensor whatever the axis says (onnxruntime writes [1]-shaped
    # bias scales with the default axis 1 on rank-1 biases): check the axis only when it matters.
    axis = ctx.axis(ctx.attr("axis", 1), max(x.rank, 1)) if scale.size > 1 else 1
    return axis


@converter("QuantizeLinear")
def _quantize(ctx: Ctx):
    axis = _q_common(ctx)
    if ctx.has(2):
        zp = ctx.inp(2)
    else:
        to = ctx.attr("output_dtype", onnx.TensorProto.UINT8) or onnx.TensorProto.UINT8
        if to not in (onnx.TensorProto.UINT8, onnx.TensorProto.INT8):
            raise ctx.fail(f"quantization to {onnx_dtype_name(to)} is not supported (int8/uint8 only)")
        zp = ctx.g.add_const(np.zeros(ctx.type(1).shape, dtype=ONNX_DTYPES[to]),
                             hint=f"{ctx.node.output[0]}_zp")
    if ctx.g.type(zp).dtype not in ("int8", "uint8"):
        raise ctx.fail(f"quantization to {ctx.g.type(zp).dtype} is not supported (int8/uint8 only)")
    ctx.emit("QuantizeLinear", [ctx.inp(0), ctx.inp(1), zp], {"axis": axis})


@converter("DequantizeLinear")
def _dequantize(ctx: Ctx):
    axis = _q_common(ctx)
    x = ctx.type(0)
    if x.dtype not in ("int8", "uint8", "int32"):
        raise ctx.fail(f"dequantization of {x.dtype} is not supported")
    to = ctx.attr("output_dtype", 0)
    if to not in (0, onnx.TensorProto.FLOAT):
        raise ctx.fail(f"output_dtype={onnx_dtype_name(to)} is not supported (float32 only)")
    if ctx.has(2):
        zp = ctx.inp(2)
    else:
        zp = ctx.g.add_const(np.zeros(ctx.type(1).shape, dtype=x.np_dtype),
                             hint=f"{ctx.node.output[0]}_zp")
    ctx.emit("DequantizeLinear", [ctx.inp(0), ctx.inp(1), zp], {"axis": axis})


# ---- the importer --------------------------------------------------------------------------
def supported_ops() -> list[str]:
    return sorted(CONVERTERS)


def scan_unsupported(model: onnx.ModelProto) -> list[str]:
    """Every node whose op type hwc cannot import at all, one line each."""
    opset = _opset(model)
    out = []
    for i, n in enumerate(model.graph.node):
        if n.domain not in ("", "ai.onnx") or n.op_type not in CONVERTERS:
            dom = f" (domain {n.domain!r})" if n.domain not in ("", "ai.onnx") else ""
            out.append(f"{n.op_type}{dom}, node {n.name or '#' + str(i)!r}, opset {opset}")
    return out


def _opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def _value_type(vi: onnx.ValueInfoProto, input_shapes: dict, where: str) -> TensorType:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise UnsupportedError(f"{where} {vi.name!r} is not a tensor (sequences, maps and optionals "
                               f"are not supported)", [vi.name])
    if tt.elem_type not in ONNX_DTYPES:
        raise UnsupportedError(
            f"{where} {vi.name!r} has dtype {onnx_dtype_name(tt.elem_type)}, which hwc does not support "
            f"(float32, int8, uint8, int32, int64, bool). Convert the model's inputs to one of these.",
            [vi.name])
    dtype = ONNX_DTYPES[tt.elem_type]
    if vi.name in input_shapes:
        shape = tuple(int(d) for d in input_shapes[vi.name])
        if tt.HasField("shape"):
            declared = tt.shape.dim
            if len(declared) != len(shape):
                raise UserError(f"--input-shape {vi.name}={'x'.join(map(str, shape))} has rank "
                                f"{len(shape)}, but the model declares rank {len(declared)} for "
                                f"{where} {vi.name!r}.")
            for ax, (d, s) in enumerate(zip(declared, shape)):
                if d.HasField("dim_value") and d.dim_value != s:
                    raise UserError(f"--input-shape {vi.name}: axis {ax} is {s}, but the model fixes it "
                                    f"to {d.dim_value}.")
        return TensorType(dtype, shape)
    if not tt.HasField("shape"):
        raise UserError(f"{where} {vi.name!r} has no declared shape. hwc needs static shapes: bind "
                        f"it with --input-shape {vi.name}=1x3x32x32 (API: input_shapes={{...}}).")
    dims = []
    for ax, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(d.dim_value)
        else:
            sym = d.dim_param or "?"
            example = "x".join(str(x.dim_value) if x.HasField("dim_value") else "1" for x in tt.shape.dim)
            raise UserError(
                f"{where} {vi.name!r} has a symbolic dimension {sym!r} at axis {ax} (shape "
                f"{_fmt_dims(tt.shape.dim)}). hwc compiles static shapes: bind it with "
                f"--input-shape {vi.name}={example} (API: input_shapes={{'{vi.name}': (...)}}).")
    return TensorType(dtype, tuple(dims))


def _fmt_dims(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                           for d in dims) + "]"


def import_onnx(
    model: onnx.ModelProto | str | os.PathLike,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    bind: dict[str, np.ndarray] | None = None,
    problems: list[tuple[onnx.NodeProto, str]] | None = None,
) -> Graph:
    """Import an ONNX model (a path or a ModelProto) into a verified graph IR.

    `input_shapes` binds symbolic (or overrides) input shapes; `bind` freezes graph
    inputs to constant values (variables known at build time become constants).
    With a `problems` list (what `hwc check` does), nodes that cannot be imported are
    recorded there as (node, reason) and skipped instead of raising; the graph returned
    is then partial and not verified.
    """
    if not isinstance(model, onnx.ModelProto):
        model = load_model(model)
    input_shapes = dict(input_shapes or {})
    bind = dict(bind or {})
    opset = _opset(model)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UnsupportedError(f"Model uses ONNX opset {opset}; hwc supports opsets {MIN_OPSET}-{MAX_OPSET}. "
                               f"Convert it with onnx.version_converter.convert_version(model, 17).",
                               [f"opset {opset}"])
    bad = scan_unsupported(model)
    if bad and problems is None:
        raise UnsupportedError(
            f"The model uses {len(bad)} node(s) hwc does not support:\n  " + "\n  ".join(bad)
            + "\nRun `hwc check MODEL` for the full table of what is and is not supported.", bad)
    graph = model.graph
    g = Graph(graph.name or "model")
    for init in graph.initializer:
        try:
            data = numpy_helper.to_array(init)
            g.add_value(init.name, TensorType.of(data), data)
        except KeyError:
            raise UnsupportedError(
                f"Initializer {init.name!r} has dtype {onnx_dtype_name(init.data_type)}, which hwc does "
                f"not support (float32, int8, uint8, int32, int64, bool).", [init.name]) from None
    init_names = {i.name for i in graph.initializer}
    graph_inputs = [vi for vi in graph.input if vi.name not in init_names]
    names = {vi.name for vi in graph_inputs}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        raise UserError(f"--input-shape names {unknown}, but the model's inputs are "
                        f"{sorted(names)}. Use one of those names.")
    for vi in graph_inputs:
        t = _value_type(vi, input_shapes, "input")
        if vi.name in bind:
            data = np.asarray(bind[vi.name])
            if TensorType.of(data) != t:
                raise UserError(f"bound value for input {vi.name!r} is {TensorType.of(data)}, expected {t}")
            g.add_value(vi.name, t, data)
        else:
            g.add_input(vi.name, t)
    consumers = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for n in graph.node:
        ctx = Ctx(g, n, opset, consumers)
        if problems is not None:
            if n.domain not in ("", "ai.onnx") or n.op_type not in CONVERTERS:
                problems.append((n, f"no converter for {n.op_type!r} (domain {n.domain or 'ai.onnx'!r})"))
                continue
            lost = [i for i in n.input if i and i not in g.values]
            if lost:
                problems.append((n, f"{UNCHECKED}: input {lost[0]!r} comes from a node that failed"))
                continue
            try:
                CONVERTERS[n.op_type](ctx)
            except UserError as e:
                problems.append((n, str(e).replace(ctx.where + ": ", "")))
            continue
        CONVERTERS[n.op_type](ctx)
        for o in n.output:
            if o and o in consumers and o not in g.values:
                raise ctx.fail(f"output {o!r} was not produced", unsupported=False)
    if problems:
        return g
    g.outputs = [o.name for o in graph.output]
    g.metadata["opset"] = opset
    g.metadata["producer"] = f"{model.producer_name} {model.producer_version}".strip()
    g.prune_values()
    verify(g, "import")
    return g
