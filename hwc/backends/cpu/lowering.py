"""From an (optimized) graph to the CPU backend's low-level program.

The steps, in order (`lower_for_cpu`):

1. `check_supported`: every node must be one the backend compiles; otherwise one
   UnsupportedError lists every offending node (op, name, why). No silent fallback.
2. `hwc.lower.lir.lower`: one instruction per node over buffers in four regions;
   Reshape/Identity inside the workspace become aliases. `separate_outputs` gives a graph
   output that is a constant or an input its own I/O bytes (a copy);
   `pack_runtime_conv_weights` reorders run-time convolution weights for the GEMM.
3. `classify`: every instruction gets its kernel family (attrs["kernel"]) and, for the
   elementwise ones and the producers that can carry an epilogue (Conv, Gemm, MatMul),
   an `EwProgram`: the elementwise work done on the value before it is stored.
4. `fuse_epilogues`: an elementwise instruction whose input is produced by a Conv/Gemm/
   MatMul or another elementwise instruction, and read by nothing else, is merged into
   that producer's program: a residual Add and its ReLU run in the convolution's store
   loop, a chain runs as one loop. The intermediate buffer disappears.
5. `assign_layouts`: 4-d (and 3-d) activations produced by convolutions and pools are
   kept channels-last ("cl": N, H, W, C): the micro-kernels vectorize along channels,
   and a strided convolution needs no gather. Everything else is in the graph's own
   (logical, row-major) layout; `Relayout` copies are inserted where the two meet,
   except for tensors whose two layouts have the same bytes (C == 1 or H*W == 1).
   Graph inputs and outputs are always logical (the contract of model.h).
6. `insert_pads`: a Conv or pooling whose input needs padding (or a layout change) reads
   a padded copy (channels-last; NCHW for a GEMM convolution fed in NCHW, which reads
   through strides) made by a `Pad` instruction just before it; the copy is an
   activation buffer like any other, so the planner can reuse its bytes at once.
   `write_into_pads`: when the producer can store with row strides, it writes straight
   into the padded buffer's interior and the Pad only fills the border.
7. `hwc.lower.memplan.plan_program`: offsets of every activation in one workspace
   (elementwise outputs and residual operands in place where the input dies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hwc.errors import UnsupportedError
from hwc.ir.graph import Graph, Node
from hwc.ir.ops import (
    BINARY_OPS,
    QUANT_OPS,
    UNARY_OPS,
    EwInstr,
    conv_out_dim,
    parse_program,
)
from hwc.ir.types import TensorType
from hwc.lower.lir import Buffer, Instr, Program, lower
from hwc.lower.memplan import MemoryPlan, plan_program

CL = "cl"  # channels-last layout: logical [N, C, *spatial] stored as [N, *spatial, C]

#: Elementwise ops on float32 that the elementwise kernel computes.
EW_OPS = frozenset(UNARY_OPS) | frozenset(BINARY_OPS) | {"Max", "Min", "Sum", "Mean", "FusedElementwise",
                                                          "BatchNormalization"}
#: Ops that only move bytes (any dtype).
MOVE_OPS = frozenset({"Identity", "Reshape", "Transpose", "Slice", "Concat", "Split", "Expand", "Pad",
                      "Gather"})
FLOAT_OPS = frozenset({"Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
                       "GlobalMaxPool", "Softmax", "LogSoftmax", "ReduceMean", "ReduceMax", "ReduceMin",
                       "ReduceSum"})
INT8_OPS = frozenset({"QConv", "QGemm", "QAdd", "QAvgPool", "QGlobalAvgPool", "QRequant", "QLut", "Quantize",
                      "Dequantize", "MaxPool", "QuantizeLinear", "DequantizeLinear"})

#: Elementwise ops also compiled on integer tensors (numpy's wrap-around semantics).
INT_EW_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Clip", "Relu", "Neg", "Abs", "Identity"})
INT_DTYPES = frozenset({"int8", "uint8", "int32", "int64"})

#: A fused activation (Conv/Gemm/MatMul attribute `act`) as elementwise instructions.
_ACT_OPS = {"relu": "Relu", "clip": "Clip", "leakyrelu": "LeakyRelu", "hardsigmoid": "HardSigmoid",
            "hardswish": "HardSwish", "sigmoid": "Sigmoid", "tanh": "Tanh"}


# ---- elementwise programs ------------------------------------------------------------------
@dataclass
class EwProgram:
    """Registers %0..%(n-1) are the operands, instruction k writes %(n+k); the result is the
    last register (%0 when there are no instructions). An operand is a buffer name, or None
    for the value a producer computes itself (a Conv's accumulator)."""

    operands: list[str | None]
    instrs: list[EwInstr] = field(default_factory=list)

    @property
    def result(self) -> int:
        return len(self.operands) + len(self.instrs) - 1 if self.instrs else 0

    def names(self) -> list[str]:
        return [o for o in self.operands if o is not None]


def merge_programs(p: EwProgram, c: EwProgram, name: str) -> EwProgram:
    """The program computing `c` where every operand equal to `name` is `p`'s result."""
    keep = [o for o in c.operands if o != name]
    ops = list(p.operands) + [o for o in keep if o not in p.operands or o is None]
    n_new, n_p, n_c = len(ops), len(p.operands), len(c.operands)

    def p_reg(r):
        return r if r < n_p else r + n_new - n_p

    p_result = p_reg(p.result)
    instrs = [EwInstr(i.op, tuple(p_reg(a) if isinstance(a, int) else a for a in i.args), i.params)
              for i in p.instrs]

    def c_reg(r):
        if r < n_c:
            o = c.operands[r]
            return p_result if o == name else ops.index(o)
        return n_new + len(p.instrs) + (r - n_c)

    instrs += [EwInstr(i.op, tuple(c_reg(a) if isinstance(a, int) else a for a in i.args), i.params)
               for i in c.instrs]
    if not c.instrs:  # c is the identity of its operand
        r = c_reg(0)
        if r != (len(ops) + len(instrs) - 1 if instrs else 0):
            instrs.append(EwInstr("Identity", (r,)))
    return EwProgram(ops, instrs)


def _act_instrs(act: str, args: list[float], reg: int) -> list[EwInstr]:
    if not act:
        return []
    if act == "clip":
        return [EwInstr("Clip", (reg,), (float(args[0]), float(args[1])))]
    return [EwInstr(_ACT_OPS[act], (reg,), tuple(float(a) for a in args))]


# ---- support check ---------------------------------------------------------------------------
def unsupported_reason(g: Graph, n: Node) -> str | None:
    """Why the CPU backend cannot compile node `n`, or None when it can."""
    dtypes = {g.type(v).dtype for v in [*n.inputs, *n.outputs] if v}
    if n.op in MOVE_OPS or n.op == "Cast":
        if n.op == "Pad" and n.attrs["mode"] != "constant" and g.type(n.inputs[0]).dtype != "float32":
            return f"Pad mode {n.attrs['mode']!r} is compiled for float32 only"
        return None
    if n.op in QUANT_OPS or n.op in ("QuantizeLinear", "DequantizeLinear"):
        return None
    if n.op in ("MaxPool", "GlobalMaxPool") and dtypes in ({"int8"}, {"uint8"}):
        return _pool_reason(g, n)
    if n.op in INT_EW_OPS and len(dtypes) == 1 and dtypes <= INT_DTYPES:
        return None
    if n.op in ("ReduceMax", "ReduceMin") and len(dtypes) == 1 and dtypes <= INT_DTYPES | {"bool"}:
        return None
    if n.op == "Pow" and g.type(n.inputs[0]).dtype == "float32" and g.type(n.inputs[1]).dtype in INT_DTYPES:
        return None
    if dtypes != {"float32"}:
        return f"the CPU backend compiles {n.op} on float32 only (here: {', '.join(sorted(dtypes))})"
    if n.op in EW_OPS:
        return None
    if n.op == "Conv":
        rank = g.type(n.inputs[0]).rank
        return None if rank in (3, 4) else f"{rank - 2}-d convolution (the CPU backend compiles 1-d and 2-d)"
    if n.op in ("MaxPool", "AveragePool"):
        return _pool_reason(g, n)
    if n.op in ("GlobalAveragePool", "GlobalMaxPool"):
        return None if g.type(n.inputs[0]).rank >= 3 else "global pooling of a tensor of rank < 3"
    if n.op in FLOAT_OPS:
        return None
    return f"no CPU kernel for {n.op}"


def _pool_reason(g, n):
    rank = g.type(n.inputs[0]).rank
    return None if rank in (3, 4) else f"{rank - 2}-d pooling (the CPU backend compiles 1-d and 2-d)"


def check_supported(g: Graph) -> None:
    items = []
    for n in g.nodes:
        why = unsupported_reason(g, n)
        if why:
            items.append(f"{n.op} node {n.name!r}: {why}")
    if items:
        raise UnsupportedError(
            f"The CPU backend cannot compile {len(items)} node(s) of {g.name!r}:\n  " + "\n  ".join(items[:20])
            + ("\n  ..." if len(items) > 20 else "")
            + "\nUse --target ref for the numpy reference, or change the model.", items)


# ---- classification -----------------------------------------------------------------------------
def classify(prog: Program) -> None:
    g = prog.graph
    for ins in prog.instrs:
        op = ins.op
        a = ins.attrs
        if "kernel" in a:
            continue
        if op in ("Conv", "Gemm", "MatMul"):
            a["kernel"] = "conv" if op == "Conv" else "gemm"
            a["ew"] = EwProgram([None], _act_instrs(a.get("act", ""), a.get("act_args", []), 0))
        elif op in EW_OPS:
            a["kernel"] = "ew"
            a["ew"] = _ew_of(g, prog, ins)
        elif op in ("MaxPool", "AveragePool"):
            a["kernel"] = "pool"
        elif op == "GlobalMaxPool" and g.type(ins.reads[0]).dtype != "float32":
            # an integer global max: one window over the whole image (the pooling kernel's integer max)
            nd = g.type(ins.reads[0]).rank - 2
            a.update(kernel="pool", kernel_shape=list(g.type(ins.reads[0]).shape[2:]), strides=[1] * nd,
                     pads=[0] * (2 * nd), dilations=[1] * nd, ceil_mode=0)
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            a["kernel"] = "gpool"
        else:
            a["kernel"] = op.lower()


def _ew_of(g: Graph, prog: Program, ins: Instr) -> EwProgram:
    n = ins.node
    op = ins.op
    if op == "FusedElementwise":
        return EwProgram(list(n.inputs), parse_program(n.attrs["program"], len(n.inputs)))
    if op == "BatchNormalization":
        x, sc, b, mean, var = (g.const(v) for v in n.inputs)
        rank = g.type(n.inputs[0]).rank
        if any(p is None for p in (sc, b, mean, var)):  # run-time parameters: the formula, per element
            views = [_channel_view(prog, v, rank) for v in n.inputs[1:]]
            eps = float(n.attrs["epsilon"])
            return EwProgram([n.inputs[0], *views], [
                EwInstr("Sub", (0, 3)), EwInstr("Add", (4, eps)), EwInstr("Sqrt", (6,)), EwInstr("Div", (5, 7)),
                EwInstr("Mul", (8, 1)), EwInstr("Add", (9, 2))])
        scale = (sc.astype(np.float64) / np.sqrt(var.astype(np.float64) + n.attrs["epsilon"]))
        shift = b.astype(np.float64) - mean.astype(np.float64) * scale
        shape = (1, -1) + (1,) * (rank - 2) if rank > 1 else (-1,)
        s_name = _new_const(g, prog, scale.astype(np.float32).reshape(shape), f"{n.name}_scale")
        t_name = _new_const(g, prog, shift.astype(np.float32).reshape(shape), f"{n.name}_shift")
        return EwProgram([n.inputs[0], s_name, t_name], [EwInstr("Mul", (0, 1)), EwInstr("Add", (3, 2))])
    if op in UNARY_OPS:
        params = tuple(float(n.attrs[k]) for k in UNARY_OPS[op])
        return EwProgram([n.inputs[0]], [EwInstr(op, (0,), params)])
    if op in BINARY_OPS:
        return EwProgram(list(n.inputs), [EwInstr(op, (0, 1))])
    # variadic: Max, Min, Sum, Mean
    k = len(n.inputs)
    base = {"Max": "Max", "Min": "Min", "Sum": "Add", "Mean": "Add"}[op]
    instrs, acc = [], 0
    for i in range(1, k):
        instrs.append(EwInstr(base, (acc, i)))
        acc = k + len(instrs) - 1
    if op == "Mean" and k > 1:
        instrs.append(EwInstr("Div", (acc, float(k))))
    if not instrs:
        instrs = [EwInstr("Identity", (0,))]
    return EwProgram(list(n.inputs), instrs)


def _channel_view(prog: Program, name: str, rank: int) -> str:
    """A per-channel vector [C] viewed as [1, C, 1, ...] (so that it broadcasts along axis 1)."""
    t = prog.buffers[name].type
    shape = (1, t.size) + (1,) * (rank - 2) if rank > 1 else (t.size,)
    s = prog.storage(name)
    return add_buffer(prog, f"{name}.view", TensorType(t.dtype, shape), region=s.region, alias_of=s.name)


def _new_const(g: Graph, prog: Program, data: np.ndarray, hint: str) -> str:
    name = g.add_const(np.ascontiguousarray(data), hint)
    prog.buffers[name] = Buffer(name, g.type(name), "weight")
    return name


# ---- epilogue fusion ----------------------------------------------------------------------------
def _readers(prog: Program) -> dict[str, list[Instr]]:
    out: dict[str, list[Instr]] = {}
    for ins in prog.instrs:
        for r in dict.fromkeys(ins.reads):
            out.setdefault(prog.storage(r).name, []).append(ins)
    return out


def _epilogue_operand_ok(g: Graph, prog: Program, name: str, out_shape: tuple[int, ...], kernel: str) -> bool:
    """Can a Conv/Gemm store loop read operand `name` (broadcast to `out_shape`)?"""
    t = g.type(name)
    if t.dtype != "float32":
        return False
    if t.shape == tuple(out_shape) or t.size == 1:
        return True
    if prog.buffers[name].region != "weight":
        return False
    # A constant: per output channel (axis 1 of a conv, the last axis of a Gemm) or scalar.
    shape = (1,) * (len(out_shape) - len(t.shape)) + tuple(t.shape)
    if len(shape) != len(out_shape):
        return False
    ch = 1 if kernel == "conv" else len(out_shape) - 1
    return all(d == 1 for i, d in enumerate(shape) if i != ch)


def fuse_epilogues(prog: Program) -> int:
    """Merge elementwise instructions into their producer's program; returns how many."""
    g = prog.graph
    merged = 0
    changed = True
    while changed:
        changed = False
        producer = {w: ins for ins in prog.instrs for w in ins.writes}
        readers = _readers(prog)
        for c in prog.instrs:
            if c.attrs.get("kernel") != "ew":
                continue
            out_t = g.type(c.writes[0])
            for name in dict.fromkeys(c.attrs["ew"].names()):
                p = producer.get(name)
                if p is None or p.attrs.get("kernel") not in ("ew", "conv", "gemm") or len(p.writes) != 1:
                    continue
                buf = prog.buffers[name]
                if buf.region != "activation" or buf.alias_of is not None:
                    continue
                if [r for r in readers.get(name, []) if r is not c] or any(
                        b.alias_of == name for b in prog.buffers.values()):
                    continue
                if g.type(name).shape != out_t.shape or g.type(name).dtype != "float32":
                    continue
                others = [o for o in c.attrs["ew"].names() if o != name]
                if p.attrs["kernel"] != "ew" and not all(
                        _epilogue_operand_ok(g, prog, o, out_t.shape, p.attrs["kernel"]) for o in others):
                    continue
                if any(producer.get(o) is c for o in others):
                    continue
                p.attrs["ew"] = merge_programs(p.attrs["ew"], c.attrs["ew"], name)
                p.reads = _plus_operands(p.reads, others)
                p.writes = list(c.writes)
                p.name = f"{p.name}+{c.name}"
                # the merged instruction runs where the consumer ran: its other operands exist by then
                prog.instrs.remove(p)
                prog.instrs[prog.instrs.index(c)] = p
                del prog.buffers[name]
                merged += 1
                changed = True
                break
            if changed:
                break
    return merged


# ---- layouts ---------------------------------------------------------------------------------------
def layout_free(t: TensorType) -> bool:
    """Channels-last and logical order have the same bytes (C == 1 or no spatial extent)."""
    return t.rank < 3 or t.shape[1] == 1 or math.prod(t.shape[2:]) == 1


def cl_perm(rank: int) -> list[int]:
    """Logical axes in channels-last storage order."""
    return [0, *range(2, rank), 1] if rank >= 3 else list(range(rank))


def physical_shape(t: TensorType, layout: str) -> tuple[int, ...]:
    return tuple(t.shape[i] for i in cl_perm(t.rank)) if layout == CL else t.shape


def logical_strides(t: TensorType, layout: str) -> tuple[int, ...]:
    """Element stride of every logical axis in storage with `layout` (0 for size-1 axes)."""
    order = cl_perm(t.rank) if layout == CL else list(range(t.rank))
    strides = [0] * t.rank
    s = 1
    for ax in reversed(order):
        strides[ax] = s if t.shape[ax] != 1 else 0
        s *= t.shape[ax]
    return tuple(strides)


#: Kernels that read and write channels-last activations.
CL_KERNELS = ("conv", "pool", "gpool", "qconv", "qavgpool", "qglobalavgpool")
#: Elementwise kernels: they run in whatever layout their full-size activation operands share.
EW_KERNELS = ("ew", "qadd", "qrequant", "qlut", "quantize", "dequantize")


def fresh(prog: Program, hint: str) -> str:
    used = set(prog.buffers) | set(prog.graph.values)
    if hint not in used:
        return hint
    i = 1
    while f"{hint}_{i}" in used:
        i += 1
    return f"{hint}_{i}"


def add_buffer(prog: Program, hint: str, t: TensorType, layout: str = "", region: str = "activation",
               alias_of: str | None = None) -> str:
    name = fresh(prog, hint)
    b = Buffer(name, t, region, alias_of=alias_of)
    b.layout = layout
    prog.buffers[name] = b
    return name


def storage_layout(prog: Program, name: str) -> str:
    return prog.storage(name).layout


def is_reshaped_view(prog: Program, name: str) -> bool:
    b, s = prog.buffers[name], prog.storage(name)
    return b is not s and b.type.shape != s.type.shape


def view_layout(prog: Program, name: str) -> str:
    """The layout in which buffer `name` can be read; "?" for a reshaped view of
    channels-last bytes (only a logical copy of the storage makes it readable). A reshaped
    view of channels-last storage whose bytes are in logical order (C == 1, or no spatial
    extent) is logical, whatever its own shape."""
    lay = storage_layout(prog, name)
    if lay == CL and is_reshaped_view(prog, name):
        return "" if layout_free(prog.storage(name).type) else "?"
    return lay


class _Layouts:
    """Layout bookkeeping of `assign_layouts`: conversions made once per (buffer, layout)."""

    def __init__(self, prog: Program):
        self.prog = prog
        self.converted: dict[tuple[str, str], str] = {}
        self.before: list[Instr] = []

    def need(self, name: str, layout: str) -> str:
        """A buffer holding `name` readable in `layout` (a Relayout is queued if needed)."""
        prog = self.prog
        t = prog.buffers[name].type
        have = view_layout(prog, name)
        if have == layout or (have != "?" and layout_free(t)):
            return name
        if (name, layout) in self.converted:
            return self.converted[(name, layout)]
        src = name
        if have == "?":  # a logical copy of the storage, viewed with this shape
            logical = self.need(prog.storage(name).name, "")
            src = add_buffer(prog, f"{name}.view", t, "", alias_of=logical)
            if layout == "":
                self.converted[(name, layout)] = src
                return src
        new = add_buffer(prog, f"{name}.{layout or 'logical'}", t, layout)
        self.before.append(Instr("Relayout", f"relayout:{new}", [src], [new], {"kernel": "relayout"}))
        self.converted[(name, layout)] = new
        return new

    def set_out(self, ins: Instr, layout: str) -> Instr | None:
        """Make `ins` write in `layout`; for a graph output that must stay logical, `ins`
        writes a channels-last temporary and the returned Relayout copies it out."""
        prog = self.prog
        dst = ins.writes[0]
        b = prog.buffers[dst]
        if layout == CL and b.region != "activation" and not layout_free(b.type):
            tmp = add_buffer(prog, f"{dst}.cl", b.type, CL)
            ins.writes[0] = tmp
            b.layout = ""
            return Instr("Relayout", f"relayout:{dst}", [tmp], [dst], {"kernel": "relayout"})
        b.layout = layout
        return None


def _ew_layout(prog: Program, ins: Instr, operands: list[str]) -> str:
    out = prog.buffers[ins.writes[0]]
    acts = [o for o in operands if prog.buffers[o].region != "weight" and prog.buffers[o].type.shape == out.type.shape]
    if out.type.rank >= 3 and any(view_layout(prog, o) == CL for o in acts) and out.region == "activation":
        return CL
    return ""


def assign_layouts(prog: Program) -> None:
    for b in prog.buffers.values():
        b.layout = ""
    L = _Layouts(prog)
    out_instrs: list[Instr] = []
    for ins in prog.instrs:
        L.before = []
        after = None
        k = ins.attrs["kernel"]
        if k in CL_KERNELS:
            if view_layout(prog, ins.reads[0]) == "?" or k == "gpool" or k == "qglobalavgpool":
                ins.reads[0] = L.need(ins.reads[0], CL if k in ("gpool", "qglobalavgpool") else "")
            after = L.set_out(ins, CL)
            if k == "conv":
                _epilogue_layouts(L, ins, CL)
        elif k in EW_KERNELS or k == "gemm":
            if k == "gemm":
                # every run-time operand (A, B, and Gemm's C) is read in logical order
                n_data = len([i for i in ins.node.inputs if i])
                ins.reads[:n_data] = [r if prog.buffers[r].region == "weight" else L.need(r, "")
                                      for r in ins.reads[:n_data]]
                lay = ""
            elif k == "ew":
                lay = _ew_layout(prog, ins, ins.attrs["ew"].names())
            else:
                lay = _ew_layout(prog, ins, [r for r in ins.reads if prog.buffers[r].region != "weight"])
            after = L.set_out(ins, lay)
            if k in ("ew", "gemm"):
                _epilogue_layouts(L, ins, lay)
            else:
                ins.reads = [L.need(r, lay) if prog.buffers[r].region != "weight"
                             and prog.buffers[r].type.shape == prog.buffers[ins.writes[0]].type.shape else r
                             for r in ins.reads]
        else:
            ins.reads = [L.need(r, "") if prog.buffers[r].region != "weight" else r for r in ins.reads]
        out_instrs.extend(L.before)
        out_instrs.append(ins)
        if after is not None:
            out_instrs.append(after)
    prog.instrs = out_instrs


def _epilogue_layouts(L: _Layouts, ins: Instr, layout: str) -> None:
    """Full-size activation operands of an elementwise program are read in the output's layout."""
    prog = L.prog
    ew: EwProgram = ins.attrs["ew"]
    shape = prog.buffers[ins.writes[0]].type.shape
    n_data = len([i for i in ins.node.inputs if i]) if ins.attrs["kernel"] != "ew" else 0
    data = ins.reads[:n_data]
    ops = []
    for o in ew.operands:
        if o is not None and prog.buffers[o].region != "weight":
            o = L.need(o, layout) if prog.buffers[o].type.shape == shape else L.need(o, "")
        ops.append(o)
    ew.operands = ops
    ins.reads = _plus_operands(data, ew.names())


def _plus_operands(reads: list[str], extra: list[str]) -> list[str]:
    """`reads` kept as it is (a kernel finds its data operands by position: MatMul(x, x) reads x
    twice) followed by the operands of `extra` it does not already read."""
    return list(reads) + [o for o in dict.fromkeys(extra) if o not in reads]


# ---- padding -------------------------------------------------------------------------------------
def pad_spec(x: TensorType, a: dict, kernel_shape, ceil_mode: bool = False) -> tuple[list[int], list[int]]:
    """(begin, end) pads per spatial axis such that the padded input holds exactly the rows
    the windows read: `end` is negative when trailing input rows are never read, and larger
    than the declared pad when ceil_mode windows hang over the end."""
    nd = len(kernel_shape)
    begin, end = list(a["pads"][:nd]), []
    for i in range(nd):
        o = conv_out_dim(x.shape[2 + i], kernel_shape[i], a["strides"][i], a["dilations"][i], begin[i],
                         a["pads"][nd + i], ceil_mode)
        need = (o - 1) * a["strides"][i] + (kernel_shape[i] - 1) * a["dilations"][i] + 1
        end.append(need - x.shape[2 + i] - begin[i])
    return begin, end


def insert_pads(prog: Program) -> None:
    g = prog.graph
    out: list[Instr] = []
    for ins in prog.instrs:
        k = ins.attrs["kernel"]
        if k in ("conv", "pool", "qconv", "qavgpool"):
            x = ins.reads[0]
            xt = prog.buffers[x].type
            ks = g.type(ins.node.inputs[1]).shape[2:] if k in ("conv", "qconv") else ins.attrs["kernel_shape"]
            begin, end = pad_spec(xt, ins.attrs, ks, bool(ins.attrs.get("ceil_mode", 0)))
            vl = view_layout(prog, x)
            # a GEMM convolution reads its input through strides: logical (NCHW) order works too,
            # which keeps the first layer's padding a plain row copy of the graph input
            gemm = k == "conv" and not (ins.attrs["group"] == xt.shape[1] == g.type(ins.node.inputs[1]).shape[0])
            readable = vl == CL or (gemm and vl == "") or (layout_free(xt) and not is_reshaped_view(prog, x)
                                                           and vl != "?")
            if any(begin) or any(e > 0 for e in end) or not readable:
                shape = xt.shape[:2] + tuple(xt.shape[2 + i] + begin[i] + end[i] for i in range(len(begin)))
                lay = "" if gemm and vl == "" and not layout_free(xt) else CL
                name = add_buffer(prog, f"{x}.pad", TensorType(xt.dtype, shape), lay)
                out.append(Instr("Pad", f"pad:{name}", [x], [name],
                                 {"kernel": "padcl", "begin": begin, "end": end, "value": _pad_value(g, ins)}))
                ins.reads[0] = name
                if "ew" in ins.attrs:   # (an epilogue may read the unpadded input too: a residual of the conv's input)
                    ins.reads = _plus_operands(ins.reads, ins.attrs["ew"].names())
                ins.attrs["in_pads"] = (begin, end)
            else:
                ins.attrs["in_pads"] = ([0] * len(begin), end)
        out.append(ins)
    prog.instrs = out


#: Kernels that can store their output into the interior of a padded buffer (Ctx.out_view).
HALO_KERNELS = ("conv", "pool")


def write_into_pads(prog: Program) -> int:
    """A padded copy of a tensor whose producer can store with row strides is not a copy:
    the producer writes straight into the padded buffer's interior and the Pad only fills
    the border (moved before the producer). Returns how many copies disappeared."""
    producer = {w: ins for ins in prog.instrs for w in ins.writes}
    readers = _readers(prog)
    done = 0
    for pad in list(prog.instrs):
        if pad.attrs.get("kernel") != "padcl":
            continue
        x = pad.reads[0]
        q = producer.get(x)
        b = prog.buffers[x]
        if q is None or q.attrs.get("kernel") not in HALO_KERNELS or len(q.writes) != 1 or q.attrs.get("halo"):
            continue
        if (b.region != "activation" or b.alias_of is not None or b.layout != CL
                or b.type.dtype != "float32" or any(e < 0 for e in pad.attrs["end"])):
            continue
        if [r for r in readers.get(x, []) if r is not pad] or any(v.alias_of == x for v in prog.buffers.values()):
            continue
        xp = pad.writes[0]
        rank = b.type.rank
        q.attrs["halo"] = {"of": x, "buffer": xp, "begin": [0, 0] + list(pad.attrs["begin"]) + [0] * (rank - 2 - len(
            pad.attrs["begin"]))}
        q.writes = [xp]  # x itself is never stored: its buffer only describes the output's type
        pad.reads = []
        pad.attrs["border_only"] = True
        prog.instrs.remove(pad)
        prog.instrs.insert(prog.instrs.index(q), pad)
        done += 1
    return done


def _pad_value(g: Graph, ins: Instr) -> float:
    if ins.op in ("MaxPool", "GlobalMaxPool"):
        return {"float32": -math.inf, "int8": -128, "uint8": 0}[g.type(ins.node.inputs[0]).dtype]
    if ins.op in ("QConv", "QAvgPool"):
        return ins.attrs["z_in"]
    return 0.0


# ---- the whole lowering -------------------------------------------------------------------------
def lower_for_cpu(g: Graph, alignment: int = 64) -> tuple[Program, MemoryPlan]:
    """The planned low-level program of `g` (which the backend may extend with constants)."""
    check_supported(g)
    prog = lower(g)
    separate_outputs(prog)
    classify(prog)
    pack_runtime_conv_weights(prog)
    fuse_epilogues(prog)
    assign_layouts(prog)
    insert_pads(prog)
    write_into_pads(prog)
    for ins in prog.instrs:
        _mark_inplace(prog, ins)
    plan = plan_program(prog, align=alignment)
    return prog, plan


def separate_outputs(prog: Program) -> None:
    """Every graph output gets its own bytes in the I/O area. An output that is a constant
    or a graph input has none after `lir.lower`: an Identity copies it there.
    `prog.io_buffers` maps such output names to their copies; it says nothing about inputs
    (a graph input that is also an output keeps its own buffer as the input)."""
    prog.io_buffers = {}
    for i, o in enumerate(prog.outputs):
        s = prog.storage(o)
        if s.region == "output":
            continue
        new = add_buffer(prog, f"{o}.out", prog.buffers[o].type, region="output")
        prog.instrs.append(Instr("Copy", f"copy:{new}", [o], [new], {"kernel": "identity"}))
        prog.outputs[i] = new
        prog.io_buffers[o] = new


def pack_runtime_conv_weights(prog: Program) -> None:
    """A Conv whose weights are a run-time tensor first copies them into the [group, kh,
    kw, C/group, M/group] order its GEMM walks (constant weights are packed at build time)."""
    out = []
    for ins in prog.instrs:
        if ins.attrs.get("kernel") == "conv" and prog.buffers[ins.reads[1]].region != "weight":
            w = ins.reads[1]
            wt = prog.buffers[w].type
            G = ins.attrs["group"]
            M, Cg = wt.shape[:2]
            ks = tuple(wt.shape[2:]) if wt.rank == 4 else (1, wt.shape[2])
            packed = add_buffer(prog, f"{w}.packed", TensorType(wt.dtype, (G, *ks, Cg, M // G)))
            out.append(Instr("WPack", f"wpack:{packed}", [w], [packed], {"kernel": "wpack", "group": G}))
            ins.reads[1] = packed
            ins.attrs["runtime_weights"] = True
        out.append(ins)
    prog.instrs = out


def _mark_inplace(prog: Program, ins: Instr) -> None:
    """Reads whose bytes the output may take over (the planner decides whether it does)."""
    k = ins.attrs["kernel"]
    out = prog.buffers[ins.writes[0]] if ins.writes else None
    if out is None:
        return
    if k == "ew":
        names = ins.attrs["ew"].names()
    elif k in ("conv", "gemm"):
        names = [o for o in ins.attrs["ew"].names() if o not in ins.reads[:2]]
    elif k == "qadd":
        names = list(ins.reads)
    else:
        return
    same = [n for n in names if prog.buffers[n].region == "activation" and prog.buffers[n].type == out.type
            and prog.storage(n).layout == out.layout
            and not is_reshaped_view(prog, n)]
    if k in ("conv", "gemm"):
        same = [n for n in same if prog.storage(n).name not in {prog.storage(r).name for r in ins.reads[:2]}]
    if same:
        ins.attrs["inplace_reads"] = same
