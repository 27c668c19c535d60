"""Graph IR -> ONNX ModelProto: to look at in Netron, or to run in onnxruntime.

The opset is 17 (as the zoo), raised only when the graph needs a later one: 19 for a
dilated AveragePool, 20 for ReduceMax/ReduceMin of bool.

By default every node is written as standard ONNX ops: a Conv/Gemm/MatMul with a fused
activation becomes the op followed by its activation node (Relu, Clip, LeakyRelu,
HardSigmoid, HardSwish, Sigmoid, Tanh), and a FusedElementwise becomes its chain of ops
again. The model passes onnx.checker and runs in onnxruntime with the same outputs.

With `custom_domain=True`, nodes that standard ONNX cannot express in one node are
written in the custom domain `hwc` (version 1), with these schemas:

  hwc.Conv(X, W[, B]) -> Y      ONNX Conv attributes (kernel_shape, strides, pads,
                                dilations, group) plus act: str, act_args: floats.
  hwc.Gemm(A, B[, C]) -> Y      ONNX Gemm attributes (alpha, beta, transA, transB) plus
                                act, act_args.
  hwc.MatMul(A, B) -> Y         numpy.matmul, plus act, act_args.
      act is one of hwc.ir.ops.ACTIVATIONS ("relu", "clip" [lo, hi], "leakyrelu" [alpha],
      "hardsigmoid" [alpha, beta], "hardswish", "sigmoid", "tanh"), applied to the result.
  hwc.FusedElementwise(X0, ..., Xn-1) -> Y   program: str, a straight-line program over
      registers %0..%n-1 (the inputs) in the format of hwc.ir.ops.parse_program, e.g.
      "add %0 %1; mul %3 %2; relu %4". Y is the last register, shaped by broadcasting.
  hwc.<Q op>(...)               the quantized IR ops (QConv, QGemm, QAdd, ...): the IR
      attributes as they are, inputs as in hwc.ir.ops (always in the custom domain).

Netron opens both forms (custom-domain nodes show as plain boxes with their attributes).
"""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hwc.errors import UnsupportedError
from hwc.frontend.onnx_import import IR_TO_ONNX
from hwc.ir.graph import Graph, Node
from hwc.ir.ops import OPS, QUANT_OPS, UNARY_OPS, parse_program

OPSET = 17
DOMAIN = "hwc"
_REDUCE = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum")

#: IR ops written as the ONNX op of the same name with the same attributes.
_SAME = (set(UNARY_OPS) - {"Clip"}) | {"Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min", "Sum", "Mean",
                                        "Transpose", "Concat", "Gather", "Softmax", "LogSoftmax",
                                        "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
                                        "QuantizeLinear", "DequantizeLinear"}


def needed_opset(g: Graph) -> int:
    """The lowest opset >= OPSET that expresses every node of `g`."""
    need = OPSET
    for n in g.nodes:
        if n.op == "AveragePool" and any(d != 1 for d in n.attrs["dilations"]):
            need = max(need, 19)
        if n.op in ("ReduceMax", "ReduceMin") and g.type(n.inputs[0]).dtype == "bool":
            need = max(need, 20)
    return need


class _Writer:
    def __init__(self, g: Graph, custom: bool):
        self.g, self.custom = g, custom
        self.opset = needed_opset(g)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.used = set(g.values) | {n.name for n in g.nodes}
        self.uses_domain = False

    def fresh(self, hint: str) -> str:
        name, i = hint, 0
        while name in self.used:
            i += 1
            name = f"{hint}_{i}"
        self.used.add(name)
        return name

    def const(self, data, hint: str) -> str:
        name = self.fresh(hint)
        self.inits[name] = np.asarray(data)
        return name

    def node(self, op: str, inputs, outputs, name: str, domain: str = "", **attrs) -> None:
        attrs = {k: v for k, v in attrs.items() if not (isinstance(v, list) and not v)}
        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), name=self.fresh(name),
                                           domain=domain or None, **attrs))
        self.uses_domain |= domain == DOMAIN


# ---- per-op writers ------------------------------------------------------------------------------
def _activation(w: _Writer, act: str, args, x: str, y: str, name: str) -> None:
    if act == "clip":
        lo, hi = (w.const(np.float32(v), f"{name}_{k}") if math.isfinite(v) else "" for v, k in
                  zip(args, ("min", "max")))
        w.node("Clip", [x, lo, hi], [y], name)
        return
    op = {"relu": "Relu", "leakyrelu": "LeakyRelu", "hardsigmoid": "HardSigmoid", "hardswish": "HardSwish",
          "sigmoid": "Sigmoid", "tanh": "Tanh"}[act]
    params = {"leakyrelu": ("alpha",), "hardsigmoid": ("alpha", "beta")}.get(act, ())
    w.node(op, [x], [y], name, **{k: float(v) for k, v in zip(params, args)})


def _linear(w: _Writer, n: Node) -> None:
    g, a = w.g, dict(n.attrs)
    act, act_args = a.pop("act"), a.pop("act_args")
    if n.op == "Conv":
        a["kernel_shape"] = list(g.type(n.inputs[1]).shape[2:])
    if act and w.custom:
        w.node(n.op, n.inputs, n.outputs, n.name, DOMAIN, act=act, act_args=act_args, **a)
        return
    y = n.outputs[0]
    out = w.fresh(f"{y}_pre_{act}") if act else y
    w.node(n.op, n.inputs, [out], n.name, **a)
    if act:
        _activation(w, act, act_args, out, y, f"{n.name}_{act}")


def _fused_elementwise(w: _Writer, n: Node) -> None:
    if w.custom:
        w.node("FusedElementwise", n.inputs, n.outputs, n.name, DOMAIN, program=n.attrs["program"])
        return
    instrs = parse_program(n.attrs["program"], len(n.inputs))
    regs = list(n.inputs)
    for k, ins in enumerate(instrs):
        last = k == len(instrs) - 1
        out = n.outputs[0] if last else w.fresh(f"{n.outputs[0]}_t{k}")
        args = [regs[a] if isinstance(a, int) else w.const(np.float32(a), f"{n.name}_c{k}") for a in ins.args]
        attrs = dict(zip(OPS[ins.op].attrs, ins.params))
        _write(w, Node(ins.op, f"{n.name}_{k}", args, [out], attrs))
        regs.append(out)


def _write(w: _Writer, n: Node) -> None:
    g, a, name = w.g, n.attrs, n.name
    i64 = lambda v, hint: w.const(np.asarray(v, dtype=np.int64), f"{name}_{hint}")
    if n.op in ("Conv", "Gemm", "MatMul"):
        _linear(w, n)
    elif n.op == "FusedElementwise":
        _fused_elementwise(w, n)
    elif n.op in QUANT_OPS:
        w.node(n.op, n.inputs, n.outputs, name, DOMAIN, **a)
    elif n.op == "Clip":
        lo = w.const(np.float32(a["min"]), f"{name}_min") if math.isfinite(a["min"]) else ""
        hi = w.const(np.float32(a["max"]), f"{name}_max") if math.isfinite(a["max"]) else ""
        # (a FusedElementwise chain's temporaries are float32 and not in the graph)
        if n.inputs[0] in g.values and g.type(n.inputs[0]).dtype != "float32":
            dt = g.type(n.inputs[0]).np_dtype
            lo = w.const(np.asarray(math.ceil(a["min"]), dt), f"{name}_min") if lo else ""
            hi = w.const(np.asarray(math.floor(a["max"]), dt), f"{name}_max") if hi else ""
        w.node("Clip", [n.inputs[0], lo, hi], n.outputs, name)
    elif n.op == "Reshape":  # the IR shape is explicit: a 0 is a 0 (allowzero), not "copy"
        extra = {"allowzero": 1} if 0 in a["shape"] else {}
        w.node(n.op, [n.inputs[0], i64(a["shape"], "shape")], n.outputs, name, **extra)
    elif n.op == "Expand":
        w.node(n.op, [n.inputs[0], i64(a["shape"], "shape")], n.outputs, name)
    elif n.op == "Split":
        w.node("Split", [n.inputs[0], i64(a["split"], "split")], n.outputs, name, axis=a["axis"])
    elif n.op == "Slice":
        x = g.type(n.inputs[0])
        ends = [e if e >= 0 else -(d + 1) for e, d in zip(a["ends"], x.shape)]
        ins = [n.inputs[0], i64(a["starts"], "starts"), i64(ends, "ends"), i64(range(x.rank), "axes"),
               i64(a["steps"], "steps")]
        w.node("Slice", ins, n.outputs, name)
    elif n.op == "Pad":
        ins = [n.inputs[0], i64(a["pads"], "pads")]
        if a["mode"] == "constant":
            ins.append(w.const(np.asarray(a["value"], g.type(n.inputs[0]).np_dtype), f"{name}_value"))
        w.node("Pad", ins, n.outputs, name, mode=a["mode"])
    elif n.op == "Cast":
        w.node("Cast", n.inputs, n.outputs, name, to=IR_TO_ONNX[a["to"]])
    elif n.op in _REDUCE:  # axes: an input from opset 13 (ReduceSum) / 18 (the others)
        if n.op == "ReduceSum" or w.opset >= 18:
            w.node(n.op, [n.inputs[0], i64(a["axes"], "axes")], n.outputs, name, keepdims=a["keepdims"])
        else:
            w.node(n.op, n.inputs, n.outputs, name, **a)
    elif n.op in ("MaxPool", "AveragePool"):
        attrs = dict(a)
        if n.op == "AveragePool" and w.opset < 19:
            attrs.pop("dilations")  # all ones (needed_opset)
        w.node(n.op, n.inputs, n.outputs, name, **attrs)
    elif n.op in _SAME:
        w.node(n.op, n.inputs, n.outputs, name, **a)
    else:
        raise UnsupportedError(f"export to ONNX: no writer for IR op {n.op!r} (node {name!r})", [name])


# ---- the model --------------------------------------------------------------------------------------
def _value_info(g: Graph, name: str) -> onnx.ValueInfoProto:
    t = g.type(name)
    return helper.make_tensor_value_info(name, IR_TO_ONNX[t.dtype], list(t.shape))


def export_onnx(g: Graph, *, custom_domain: bool = False) -> onnx.ModelProto:
    """The graph as an ONNX model that passes onnx.checker (standard ops unless custom_domain)."""
    w = _Writer(g, custom_domain)
    for n in g.nodes:
        _write(w, n)
    const_outs = [o for o in dict.fromkeys(g.outputs) if g.values[o].is_const]
    body, w.nodes = w.nodes, []
    for o in const_outs:  # an output that folded to a constant is written by an Identity
        w.node("Identity", [w.const(g.const(o), f"{o}_value")], [o], f"{o}_const")
    w.nodes += body
    used = {i for n in w.nodes for i in n.input if i}
    consts = [numpy_helper.from_array(np.asarray(v.data), k) for k, v in g.values.items()
              if v.is_const and k in used and k not in const_outs]
    consts += [numpy_helper.from_array(v, k) for k, v in w.inits.items()]
    outputs = [_value_info(g, o) for o in g.outputs]
    inner = [o for n in g.nodes for o in n.outputs if o and o not in g.outputs]
    graph = helper.make_graph(w.nodes, g.name, [_value_info(g, i) for i in g.inputs], outputs, initializer=consts,
                              value_info=[_value_info(g, v) for v in inner if v in g.values])
    opsets = [helper.make_opsetid("", w.opset)] + ([helper.make_opsetid(DOMAIN, 1)] if w.uses_domain else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="hwc")
    model.ir_version = 8 if w.opset == OPSET else 9
    onnx.checker.check_model(model)
    return model


def save_onnx(g: Graph, path: str | os.PathLike, *, custom_domain: bool = False) -> onnx.ModelProto:
    from hwc.artifact import write_output

    model = export_onnx(g, custom_domain=custom_domain)
    write_output(path, lambda f: f.write(model.SerializeToString()))
    return model


__all__ = ["DOMAIN", "OPSET", "export_onnx", "save_onnx"]
