"""From an int8 graph to tile layers: what runs on the tile, what stays on the host.

Every tile operation is expressed as one of four layer kinds over activation tensors
that live in the tile's ACT scratchpad (channel-blocked: a line holds N channels of one
pixel; a tensor is stored as a padded grid per channel block):

- `ConvLayer`: int8 convolution with dense weights [M, C, kh, kw] (groups expanded to
  zeros, so depthwise is block-diagonal and its zero blocks are skipped), an int32 bias
  with the input zero point folded in, per-channel requantization. QConv, QGemm (a
  Flatten + QGemm is a convolution whose kernel covers the whole input), QAvgPool and
  QRequant (identity weights) all become ConvLayers.
- `GapLayer`: global average pooling: every pixel accumulated into one accumulator line.
- `AddLayer`: residual QAdd on the VEC unit.
- `MaxPoolLayer`: MaxPool on int8 on the VEC unit.

Host work around the tile (quantizing inputs, an im2col of a thin first layer, dequantizing
outputs, Softmax, and any op the tile cannot run) stays in the int8 graph and runs in the
reference interpreter: the partition is recorded and shown in the report.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hwc import isa
from hwc.errors import UnsupportedError
from hwc.ir.graph import Graph, Node

# ---- tensors -----------------------------------------------------------------------------------


@dataclass(eq=False)
class TileTensor:
    """An int8 activation [C, H, W] resident in ACT, stored as CB padded grids of lines."""

    name: str
    c: int
    h: int
    w: int
    zp: int
    n: int                                     # lanes per line (array size)
    pads: list[int] = field(default_factory=lambda: [0, 0, 0, 0])   # top, left, bottom, right
    fill: int | None = None                    # halo value (zp, or -128 for max pooling)
    base: int = 0                              # first ACT line (planned)
    graph_shape: tuple[int, ...] = ()          # the IR shape ([1,C,H,W] or [M,K])
    s2d: int = 1                               # pixels per line (space_to_depth): c, w are the stacked sizes
    shift: int = 0                             # stacked: pad pixels before pixel 0 in line 0 (0 or 1)
    w0: int = 0                                # stacked: the unstacked width
    tail: int = 0                              # lines after each channel block's grid (`share_pad_column`)
    fill_reader: str = ""                      # the layer whose padding set `fill`
    # a part of a Concat whose producers write the output in place (`Codegen._alias_concats`): the output's name
    # and the first channel block of it this tensor is (the hazard regions name the output's lines)
    whole: str = ""
    cb0: int = 0

    @property
    def cb(self) -> int:
        return -(-self.c // self.n)

    @property
    def hp(self) -> int:
        return self.h + self.pads[0] + self.pads[2]

    @property
    def wp(self) -> int:
        return self.w + self.pads[1] + self.pads[3]

    @property
    def lines(self) -> int:
        return self.cb * self.block_lines

    @property
    def block_lines(self) -> int:
        return self.hp * self.wp + self.tail

    def share_pad_column(self) -> None:
        """Store the right pad in the next row's left pad: with pads (top, l, bottom, r), 0 < r <= l, a row's
        pitch is w + l, and pixel (y, w + j) (j < r) is line (y + 1, j - l), a pad. Every reader addresses
        lines as `line(cb, y, x)` does, so it reads the same value; the halo is r lines a row smaller and a
        stream over whole rows (GEMM.dwp) r lines a row shorter. The last row's right pad is in the bottom
        pad rows, that of the last pad row in `tail` lines after each channel block's grid (filled with the
        halo: a block's lines stay its own, which the FILLs' and GEMMs' row regions rely on)."""
        pr = self.pads[3]
        if 0 < pr <= self.pads[1] and self.s2d == 1 and self.fill == self.zp:
            self.pads[3] = 0
            self.tail = pr

    def region(self, cb: int | None, y0: int, y1: int) -> tuple:
        """The hazard region (tensor, channel block or None for every block, first row, end row) of rows [y0, y1)
        of channel block cb: for a part of a Concat written in place, the Concat output's lines."""
        if not self.whole:
            return (self.name, cb, y0, y1)
        return (self.whole, None if cb is None else self.cb0 + cb, y0, y1)

    def line(self, cb: int, y: int, x: int) -> int:
        """ACT line of channel block cb at (y, x) of the unpadded tensor (may be in the halo)."""
        return self.base + cb * self.block_lines + (y + self.pads[0]) * self.wp + (x + self.pads[1])

    def need_pads(self, pads, fill: int, reader: str, serves: int | None = None) -> None:
        """Pads of at least `pads` holding `fill` for layer `reader`; a halo already holding another value
        `v <= serves` also serves it (a max pool whose every window holds a pixel >= `serves`)."""
        for i in range(4):
            self.pads[i] = max(self.pads[i], pads[i])
        if any(pads):
            if self.fill is not None and self.fill != fill:
                if serves is not None and self.fill <= serves:
                    return
                raise UnsupportedError(
                    f"tensor {self.name!r} is read with padding by layers that need different padding values: "
                    f"{self.fill_reader!r} pads it with {self.fill} and {reader!r} with {fill}. {reader!r} has pads as "
                    f"large as its window, so some windows hold no pixel and need the padding value itself; the "
                    f"tile stores one halo per tensor. Give the pool pads smaller than its kernel, or build for "
                    f"--target cpu.", [self.name])
            self.fill, self.fill_reader = fill, reader


# ---- layers -------------------------------------------------------------------------------------


@dataclass(eq=False)
class ConvLayer:
    name: str
    src: str
    dst: str
    weight: np.ndarray        # int8 [M, C, kh, kw], dense
    bias: np.ndarray          # int32 [M]: the node's bias - z_in * sum(w) (padding holds z_in)
    mult: np.ndarray          # int32 [M]
    shift: np.ndarray         # int32 [M]
    z_out: int
    lo: int
    hi: int
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dilations: tuple[int, int]
    macs: int                 # the model's MACs for this layer (0 for pooling/requant helpers)
    op: str = "QConv"
    group: int = 1            # the QConv's groups (weight is dense; group == C == M is depthwise)
    plain: ConvLayer | None = None   # the layer before `space_to_depth` rewrote it onto stacked tensors
    mult_neg: np.ndarray | None = None   # int32 [M]: a fused LeakyReLU's multipliers of negative lanes (PPU.neg)


@dataclass(eq=False)
class GapLayer:
    name: str
    src: str
    dst: str
    bias: int                 # -count * z_in
    mult: int
    shift: int
    z_out: int
    lo: int
    hi: int
    op: str = "QGlobalAvgPool"
    macs: int = 0
    fold: int = 1             # pixels stacked per line in src: lanes c + C*a all add into channel c


@dataclass(eq=False)
class AddLayer:
    name: str
    a: str
    b: str
    dst: str
    attrs: dict
    op: str = "QAdd"
    macs: int = 0


@dataclass(eq=False)
class MaxPoolLayer:
    name: str
    src: str
    dst: str
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    op: str = "MaxPool"
    macs: int = 0


@dataclass(eq=False)
class ConcatLayer:
    """A Concat along the channels: VEC copies of each part's channel blocks into the output's (a part's channels
    start on a block boundary: every part but the last has a multiple of N channels; `concat_why_not`)."""
    name: str
    srcs: list[str]
    dst: str
    op: str = "Concat"
    macs: int = 0


Layer = ConvLayer | GapLayer | AddLayer | MaxPoolLayer | ConcatLayer


@dataclass
class TilePlan:
    """The partition of an int8 graph: host nodes before, tile layers, host nodes after."""

    graph: Graph
    pre: list[Node]               # host nodes run before the tile (in graph order)
    layers: list[Layer]           # tile layers in execution order
    post: list[Node]              # host nodes run after the tile
    tensors: dict[str, TileTensor]
    inputs: list[str]             # tile tensors written by the host (DRAM -> ACT)
    outputs: list[str]            # tile tensors read back by the host (ACT -> DRAM)
    decisions: list[dict]         # every node: where it runs and why
    aliases: dict[str, str] = field(default_factory=dict)   # IR value -> tile tensor it is a view of
    im2col: dict[str, dict] = field(default_factory=dict)   # host-built tensor -> how (see im2col_first_layer)
    # input -> where its rows already are in external memory (`hwc.tile.views`: earlier segments' outputs)
    views: dict[str, tuple] = field(default_factory=dict)


def copy_plan(plan: TilePlan) -> TilePlan:
    """A deep copy of `plan` for one scheduling variant to rewrite, sharing what the scheduler only reads:
    the graph (with its constants), the host nodes and the partition decisions. (Copying those, which grow
    with the whole graph, took most of a build of a graph cut into many segments: 90% of 84 s.)"""
    shared = (plan.graph, plan.pre, plan.post, plan.decisions)
    return copy.deepcopy(plan, {id(x): x for x in shared})


# ---- partition ----------------------------------------------------------------------------------
TILE_OPS = {"QConv", "QGemm", "QAdd", "QAvgPool", "QGlobalAvgPool", "QRequant", "MaxPool", "Reshape", "Identity",
            "Concat"}


def concat_why_not(g: Graph, n: Node, n_lanes: int) -> str | None:
    """None when the tile can run Concat node n (VEC copies of whole channel blocks), else why not."""
    types = [g.type(i) for i in n.inputs]
    out = g.type(n.outputs[0])
    if any(t.dtype != "int8" for t in types):
        return "a Concat of float32 tensors (the tile computes int8)"
    if out.rank != 4 or out.shape[0] != 1 or n.attrs["axis"] != 1:
        return f"a Concat along axis {n.attrs['axis']} of rank-{out.rank} tensors (the tile concatenates the " \
               f"channels of [1, C, H, W] images)"
    odd = [(i, t.shape[1]) for i, t in zip(n.inputs, types[:-1]) if t.shape[1] % n_lanes]
    if odd:
        return (f"input {odd[0][0]!r} has {odd[0][1]} channels, not a multiple of the tile's {n_lanes} lanes: its "
                f"copies would need lanes shifted within a line (only the last input may end mid-block)")
    return None


def _why_not(g: Graph, n: Node, n_lanes: int = 0) -> str | None:
    """None when the tile can run node n, else the reason it cannot."""
    if n.op not in TILE_OPS:
        kept = next((r for r in g.metadata.get("quant", {}).get("nodes", []) if r.get("node") == n.name
                     and r.get("mode") == "float"), None)
        if kept is not None:   # (the quantizer left it float: say why, not only that the tile has no float op)
            return f"{n.op} stays float32 ({kept['reason']}) and the tile computes int8 only"
        if n.op == "QLut":
            return "a quantized activation as a 256-entry table (QLut): the tile has no table unit"
        return f"{n.op} has no tile implementation"
    t_in = g.type(n.inputs[0]) if n.inputs else None
    if n.op == "Concat":
        return concat_why_not(g, n, n_lanes)
    if t_in is not None and t_in.dtype != "int8":
        return f"input is {t_in.dtype}, the tile computes int8"
    if n.op in ("QConv", "MaxPool", "QAvgPool") and t_in.rank != 4:
        return f"{t_in.rank - 2}-d {n.op.removeprefix('Q')}: the tile runs 2-d windows"
    if n.op == "QAvgPool" and not n.attrs["count_include_pad"] and any(n.attrs["pads"]):
        return "AveragePool with padding and count_include_pad=0 has a per-position divisor"
    if n.op == "QAvgPool" and n.attrs["ceil_mode"]:
        return "ceil_mode average pooling (its last windows' divisors differ)"
    if n.op == "MaxPool" and any(d != 1 for d in n.attrs["dilations"]):
        return "dilated MaxPool"
    if n.op == "QGlobalAvgPool" and t_in.rank != 4:
        return "non 2-d global pooling"
    if n.op == "QGemm" and g.const(n.inputs[1]) is None:
        return "QGemm with run-time weights"
    if n.op == "QConv" and g.const(n.inputs[1]) is None:
        return "QConv with run-time weights"
    return None


def _free_reshape(g: Graph, n: Node, consumers: dict) -> str | None:
    """None when a Reshape/Identity costs nothing on the tile: it keeps the shape, or it is a
    Flatten [1,C,H,W] -> [1,C*H*W] read only by QGemm (a whole-input convolution)."""
    src, dst = g.type(n.inputs[0]).shape, g.type(n.outputs[0]).shape
    if src == dst:
        return None
    users = consumers.get(n.outputs[0], [])
    flatten = len(src) == 4 and src[0] == 1 and dst == (1, src[1] * src[2] * src[3])
    if flatten and users and all(u.op == "QGemm" and u.inputs[0] == n.outputs[0] for u in users):
        return None
    return f"a reshape {list(src)} -> {list(dst)} changes the tile's channel-blocked layout (runs on the host)"


#: The end of a band Slice's or Concat's reason in the partition when the host runs it (`build_tile` replaces it
#: with VIEWED when the next segment's LOADs read the rows in place, `hwc.tile.views`).
HOST_COPIES = "; the host copies the rows"
VIEWED = "; no host work: the next segment's LOADs read the rows where the tile stored them"


def partition(g: Graph, n_lanes: int) -> list[TilePlan]:
    """Split an int8 graph into tile segments and the host work around and between them.

    Consecutive nodes the tile can run form a segment (Reshapes only where they are free:
    `_free_reshape`). Everything else runs on the host in the int8 reference interpreter: the
    model's quantization at the start, dequantization and Softmax at the end, and any node
    the tile cannot run, which ends one segment; the host runs it on the segment's outputs
    and the next segment starts from there. Segment k's `pre` holds the host nodes before
    it; the last segment's `post` the host nodes after it. Every node's placement and the
    reason for it is in `decisions` (the same list in every segment).
    """
    consumers = g.consumers()
    band_nodes = g.metadata.get("tile_bands", {})   # band node -> {"of": the node it is a band of, "bands": count}
    bands_of = {v: band_nodes[n.name] for n in g.nodes if n.name in band_nodes for v in n.inputs + n.outputs}
    group_nodes = g.metadata.get("tile_groups", {})   # channel group node -> {"of": the node, "groups": count}
    groups_of = {v: group_nodes[n.name] for n in g.nodes if n.name in group_nodes for v in n.inputs + n.outputs}
    seams = set(g.metadata.get("tile_seams", ()))
    status = []
    for n in g.nodes:
        why = _why_not(g, n, n_lanes)
        if why is None and n.op in ("Reshape", "Identity"):
            why = _free_reshape(g, n, consumers)
        if why is None and n.name in seams:   # (the Concat of a layer's bands or channel groups: segments' seam,
            why = "the Concat of bands or channel groups"   # which the host or the next LOADs join; reason below)
        status.append(why)
    # segments: runs of supported nodes that do real work (not only free reshapes)
    runs: list[list[int]] = []
    cuts = set(g.metadata.get("tile_cuts", ()))   # (`hwc.tile.bands`: a segment whose activations overflow ACT)
    for i, why in enumerate(status):
        if why is None:
            if runs and runs[-1][-1] == i - 1 and g.nodes[i].name not in cuts:
                runs[-1].append(i)
            else:
                runs.append([i])
    runs = [r for r in runs if any(g.nodes[i].op not in ("Reshape", "Identity") for i in r)]
    if not runs:
        edge = ("Quantize", "Dequantize")   # (the host's int8 <-> float32 conversions at the model's edges)
        if not any(s and n.op not in edge for n, s in zip(g.nodes, status)):
            raise UnsupportedError(
                "the model computes nothing the tile could run: its nodes only move data (" +
                (", ".join(sorted({n.op for n in g.nodes})) or "none") + "), which the host does. Build it for "
                "--target cpu or --target ref.", [n.name for n in g.nodes])
        raise UnsupportedError(
            "no layer of this model can run on the tile, which runs int8 2-d convolutions, fully connected layers, "
            "pooling, residual adds and channel concatenations; why not: " + "; ".join(
                f"node {n.name!r}: {s}" for n, s in zip(g.nodes, status) if s and n.op not in edge) +
            ". Build it for --target cpu (which runs every op hwc supports), or change those layers.",
            [n.name for n in g.nodes if n.op not in edge])
    on_tile = {i for r in runs for i in r}
    decisions = []
    for i, n in enumerate(g.nodes):
        if i in on_tile:
            seg = next(k for k, r in enumerate(runs) if i in r)
            decisions.append({"node": n.name, "op": n.op, "where": "tile", "segment": seg, "why": ""})
        else:
            why = status[i] or "outside the tile segments (model input/output side)"
            band = next((b for b in n.inputs + n.outputs if b in bands_of), None)
            group = next((b for b in n.inputs + n.outputs if b in groups_of), None)
            if n.op in ("Slice", "Concat") and band is not None:
                of = bands_of[band]
                if of.get("columns"):   # (one output row: column bands, whose Slices and Concats the host runs)
                    why = (f"column bands of {of['of']!r} ({of['bands']} bands: its activations do not fit ACT whole); "
                           f"the host copies the columns")
                else:
                    why = f"row bands of {of['of']!r} ({of['bands']} bands: its activations do not fit ACT whole)"
                    why += HOST_COPIES
            elif n.op in ("Slice", "Concat") and group is not None:
                of = groups_of[group]
                why = (f"channel groups of {of['of']!r} ({of['groups']} groups: its activations do not fit ACT even "
                       f"in one-row bands); the host copies the channels")
            decisions.append({"node": n.name, "op": n.op, "where": "host", "why": why})
    plans = []
    prev_end = 0
    for k, r in enumerate(runs):
        pre = g.nodes[prev_end:r[0]]
        post = g.nodes[r[-1] + 1:] if k == len(runs) - 1 else []
        plan = TilePlan(g, pre, [], post, {}, [], [], decisions)
        _build_layers(plan, [g.nodes[i] for i in r], n_lanes, after=g.nodes[r[-1] + 1:])
        plans.append(plan)
        prev_end = r[-1] + 1
    return plans


def _tensor(plan: TilePlan, name: str, n_lanes: int) -> TileTensor:
    if name in plan.tensors:
        return plan.tensors[name]
    g = plan.graph
    v = g.values[name]
    shape = v.type.shape
    zp = int(v.quant.zero_point.reshape(-1)[0]) if v.quant is not None else 0
    if len(shape) == 4 and shape[0] == 1:
        c, h, w = shape[1:]
    elif len(shape) == 2:           # [M, K]: K channels of M pixels in a row
        c, h, w = shape[1], 1, shape[0]
    else:
        raise UnsupportedError(
            f"tensor {name!r} has shape {list(shape)}; the tile stores one image [1,C,H,W] or a matrix [M,K]. A batch "
            f"of images runs as one inference per image: export the model with batch 1 (or bind a symbolic batch "
            f"dimension with --input-shape NAME=1x...), or build it for --target cpu.", [name])
    t = TileTensor(name, c, h, w, zp, n_lanes, graph_shape=tuple(shape))
    plan.tensors[name] = t
    return t


def _build_layers(plan: TilePlan, seg: list[Node], n_lanes: int, after: list[Node]) -> None:
    g = plan.graph
    produced: set[str] = set()
    alias: dict[str, str] = {}         # reshape outputs that are views of another tile tensor

    def src(name: str) -> str:
        name = alias.get(name, name)
        if name not in produced and name not in plan.inputs:
            plan.inputs.append(name)
            _tensor(plan, name, n_lanes)
        return name

    for n in seg:
        if n.op in ("Reshape", "Identity"):
            alias[n.outputs[0]] = alias.get(n.inputs[0], n.inputs[0])
            continue
        layer = _layer(plan, n, src, alias, n_lanes)
        plan.layers.append(layer)
        produced.add(layer.dst)
    # Outputs of the segment: tile tensors read by any node after it, or graph outputs.
    # (in graph order, not a set's: the outputs' order sets their DRAM addresses, and builds are deterministic)
    used_after = dict.fromkeys([i for n in after for i in n.inputs] + list(g.outputs))
    for name in used_after:
        base = alias.get(name, name)
        if base in produced and base not in plan.outputs:
            plan.outputs.append(base)
    plan.aliases = alias


def _flatten_source(plan: TilePlan, name: str, alias: dict) -> TileTensor | None:
    """The 4-d tile tensor a QGemm input is a Flatten of, if it is one."""
    base = alias.get(name)
    if base is None:
        return None
    t = plan.tensors.get(base)
    return t if t is not None and len(t.graph_shape) == 4 else None


def _layer(plan: TilePlan, n: Node, src, alias, n_lanes: int) -> Layer:
    g = plan.graph
    a = n.attrs
    if n.op in ("QConv", "QGemm"):
        w = g.const(n.inputs[1])
        bias = g.const(n.inputs[2]).astype(np.int64)
        mult = np.broadcast_to(g.const(n.inputs[3]), bias.shape).astype(np.int32)
        shift = np.broadcast_to(g.const(n.inputs[4]), bias.shape).astype(np.int32)
        mult_neg = np.broadcast_to(g.const(n.inputs[5]), bias.shape).astype(np.int32) \
            if len(n.inputs) > 5 and n.inputs[5] else None
        z_in = a["z_in"]
        if n.op == "QConv":
            s = src(n.inputs[0])
            wd = _dense_groups(w, a["group"])
            p = a["pads"]
            strides, pads, dil = tuple(a["strides"]), (p[0], p[1], p[2], p[3]), tuple(a["dilations"])
            macs = int(np.prod(g.type(n.outputs[0]).shape)) * int(np.prod(w.shape[1:]))
        else:
            if n.inputs[0] in alias:   # (a segment input the Flatten reads gets its tile tensor first)
                src(n.inputs[0])
            flat = _flatten_source(plan, n.inputs[0], alias)
            if flat is not None:       # Flatten + Gemm = a conv whose kernel is the whole input
                s = flat.name
                wd = w.reshape(w.shape[0], flat.c, flat.h, flat.w)
            else:
                s = src(n.inputs[0])
                wd = w.reshape(w.shape[0], w.shape[1], 1, 1)
            strides, pads, dil = (1, 1), (0, 0, 0, 0), (1, 1)
            macs = int(np.prod(g.type(n.outputs[0]).shape)) * w.shape[1]
        if plan.tensors[s].c != wd.shape[1]:   # (never a silent wrong answer: a weight layout the input does not have)
            raise AssertionError(f"layer {n.name!r}: weights over {wd.shape[1]} input channels, its tile input "
                                 f"{s!r} has {plan.tensors[s].c}")
        folded = bias - z_in * wd.astype(np.int64).reshape(wd.shape[0], -1).sum(axis=1)
        out = _tensor(plan, n.outputs[0], n_lanes)
        return ConvLayer(n.name, s, out.name, wd, _i32(folded, n), mult, shift, a["z_out"], a["lo"], a["hi"],
                         strides, pads, dil, macs, n.op, a.get("group", 1), mult_neg=mult_neg)
    if n.op == "QAvgPool" and not any(a["pads"]) and tuple(a["kernel_shape"]) == g.type(n.inputs[0]).shape[2:]:
        # a window over the whole input is a global average: one accumulator line per channel block
        s = src(n.inputs[0])
        t = plan.tensors[s]
        out = _tensor(plan, n.outputs[0], n_lanes)
        return GapLayer(n.name, s, out.name, -a["z_in"] * t.h * t.w, int(g.const(n.inputs[1]).reshape(-1)[0]),
                        int(g.const(n.inputs[2]).reshape(-1)[0]), a["z_out"], a["lo"], a["hi"], op=n.op)
    if n.op in ("QAvgPool", "QRequant"):
        s = src(n.inputs[0])
        t = plan.tensors[s]
        mult = np.broadcast_to(g.const(n.inputs[1]).reshape(-1), (t.c,)).astype(np.int32)
        shift = np.broadcast_to(g.const(n.inputs[2]).reshape(-1), (t.c,)).astype(np.int32)
        if n.op == "QRequant":
            k, strides, pads = (1, 1), (1, 1), (0, 0, 0, 0)
        else:
            k = tuple(a["kernel_shape"])
            strides, p = tuple(a["strides"]), a["pads"]
            pads = (p[0], p[1], p[2], p[3])
        eye = np.zeros((t.c, t.c) + k, np.int8)
        for c in range(t.c):
            eye[c, c] = 1
        bias = np.full(t.c, -a["z_in"] * int(np.prod(k)), np.int64)
        out = _tensor(plan, n.outputs[0], n_lanes)
        return ConvLayer(n.name, s, out.name, eye, _i32(bias, n), mult, shift, a["z_out"], a["lo"], a["hi"],
                         strides, pads, (1, 1), 0, n.op)
    if n.op == "QGlobalAvgPool":
        s = src(n.inputs[0])
        t = plan.tensors[s]
        out = _tensor(plan, n.outputs[0], n_lanes)
        return GapLayer(n.name, s, out.name, -a["z_in"] * t.h * t.w, int(g.const(n.inputs[1]).reshape(-1)[0]),
                        int(g.const(n.inputs[2]).reshape(-1)[0]), a["z_out"], a["lo"], a["hi"])
    if n.op == "QAdd":
        sa, sb = src(n.inputs[0]), src(n.inputs[1])
        out = _tensor(plan, n.outputs[0], n_lanes)
        return AddLayer(n.name, sa, sb, out.name, dict(a))
    if n.op == "MaxPool":
        s = src(n.inputs[0])
        out = _tensor(plan, n.outputs[0], n_lanes)
        p = a["pads"]
        return MaxPoolLayer(n.name, s, out.name, tuple(a["kernel_shape"]), tuple(a["strides"]),
                            (p[0], p[1], p[2], p[3]))
    if n.op == "Concat":
        parts = [src(i) for i in n.inputs]
        out = _tensor(plan, n.outputs[0], n_lanes)
        return ConcatLayer(n.name, parts, out.name)
    raise AssertionError(n.op)


def _i32(x: np.ndarray, n: Node) -> np.ndarray:
    if x.min() < -(1 << 31) or x.max() >= 1 << 31:
        raise UnsupportedError(f"node {n.name!r}: the bias with the input zero point folded in does not fit int32",
                               [n.name])
    return x.astype(np.int32)


def _dense_groups(w: np.ndarray, group: int) -> np.ndarray:
    """Grouped conv weights [M, C/g, kh, kw] -> dense [M, C, kh, kw] with zeros across groups."""
    if group == 1:
        return w
    m, cg = w.shape[:2]
    dense = np.zeros((m, cg * group) + w.shape[2:], np.int8)
    mg = m // group
    for o in range(m):
        gi = o // mg
        dense[o, gi * cg:(gi + 1) * cg] = w[o]
    return dense


# ---- thin first layer: im2col on the host ----------------------------------------------------------


def im2col_first_layer(plan: TilePlan, n_lanes: int, act_lines: int) -> bool:
    """A convolution on a host-provided input with few channels (an RGB image, an
    audio feature map) fills few lanes of a line. When it may pay (fewer channels than lanes,
    more lanes filled after, and the expanded tensor fits the scratchpad), the host builds the
    im2col of that input (every window's taps as channels, padding with the zero point) and
    the tile runs a 1x1 convolution over C*kh*kw channels instead: e.g. 3 channels x 3x3
    taps = 27 of 32 lanes on an 8x8 tile, instead of 3 of 8. The expanded input is bigger to load
    and to hold: the scheduler builds both programs and keeps the faster (hwc.tile.build.schedule).
    Returns whether a layer was expanded."""
    done = False
    for i, layer in enumerate(plan.layers):
        if not isinstance(layer, ConvLayer) or layer.src not in plan.inputs:
            continue
        t = plan.tensors[layer.src]
        m, c, kh, kw = layer.weight.shape
        taps = c * kh * kw
        out = plan.tensors[layer.dst]
        lines = -(-taps // n_lanes) * out.h * out.w
        if kh * kw == 1 or t.c != c or c >= n_lanes or lines > act_lines:
            continue  # only thin inputs, and only when the expanded tensor fits
        before = c / (-(-c // n_lanes) * n_lanes)
        after = taps / (-(-taps // n_lanes) * n_lanes)
        users = [x for x in plan.layers if x is not layer and layer.src in _layer_inputs(x)]
        if after <= before or users or layer.src in plan.outputs:
            continue
        name = f"{layer.src}_im2col"
        plan.im2col[name] = {"src": layer.src, "kernel": [kh, kw], "strides": list(layer.strides),
                             "pads": list(layer.pads), "dilations": list(layer.dilations), "zp": t.zp,
                             "lanes_before": round(before, 3), "lanes_after": round(after, 3)}
        plan.tensors[name] = TileTensor(name, taps, out.h, out.w, t.zp, n_lanes, graph_shape=(1, taps, out.h, out.w))
        plan.inputs[plan.inputs.index(layer.src)] = name
        del plan.tensors[layer.src]
        layer.src = name
        layer.weight = np.ascontiguousarray(layer.weight.reshape(m, taps, 1, 1))
        layer.strides, layer.pads, layer.dilations = (1, 1), (0, 0, 0, 0), (1, 1)
        plan.layers[i] = layer
        done = True
    return done


def im2row_first_layer(plan: TilePlan, orig: TilePlan, n_lanes: int, act_lines: int) -> bool:
    """A stride-`sx` convolution on a thin host-provided input whose output is stacked f pixels a line
    (`space_to_depth`, after it): those f outputs of one kernel row read a window of sx*(f-1) + (kw-1)*dx + 1
    input pixels. When that window's C channels fit a line, the host builds the tensor of such windows, one line
    per padded input row and stacked output column (neighbouring windows share their edge pixel: a copy each),
    and the tile runs a (kh x 1) convolution of stride (sy, 1) over it straight into the stacked output lanes
    (lane m + M*a: output channel m of pixel a): kh lines per output line. MobileNetV1-0.25 on tile32x32: 3 x 3
    taps of 3 channels, 4 outputs of 8 channels a line, a 9-pixel window of 27 lanes; the host im2col streams
    4 lines of 27 lanes (27 of 32 columns, 8 of 32 rows) per output line and loads twice the input. `orig`: the
    plan before stacking (its layers hold the original weights). Returns whether a layer was rewritten."""
    done = False
    for i, layer in enumerate(plan.layers):
        if not isinstance(layer, ConvLayer) or layer.src not in plan.inputs or layer.src in plan.outputs:
            continue
        base, t, dst = orig.layers[i], orig.tensors[layer.src], plan.tensors[layer.dst]
        m, c, kh, kw = base.weight.shape
        (sy, sx), (dy, dx), f = base.strides, base.dilations, dst.s2d
        window = sx * (f - 1) + (kw - 1) * dx + 1
        users = [x for x in plan.layers if x is not layer and layer.src in _layer_inputs(x)]
        pt, pl, pb, pr = base.pads
        hp = t.h + pt + pb
        if (f == 1 or base.group != 1 or t.c != c or kw == 1 or users or c * window > n_lanes
                or m * f != dst.c or hp * dst.w > act_lines):
            continue
        name = f"{layer.src}_im2row"
        weight = np.zeros((m * f, c * window, kh, 1), np.int8)
        for a in range(f):
            for kx in range(kw):
                for ci in range(c):
                    weight[a * m:(a + 1) * m, ci * window + sx * a + kx * dx, :, 0] = base.weight[:, ci, :, kx]
        plan.im2col[name] = {"kind": "rows", "src": layer.src, "window": window, "step": sx * f,
                             "start": -sx * dst.shift, "cols": dst.w, "pads": list(base.pads), "zp": t.zp,
                             "lanes_before": round(c / n_lanes, 3), "lanes_after": round(c * window / n_lanes, 3)}
        plan.tensors[name] = TileTensor(name, c * window, hp, dst.w, t.zp, n_lanes,
                                        graph_shape=(1, c * window, hp, dst.w))
        plan.inputs[plan.inputs.index(layer.src)] = name
        del plan.tensors[layer.src]
        layer.src, layer.weight = name, weight
        layer.bias, layer.mult, layer.shift = (np.tile(v, f) for v in (base.bias, base.mult, base.shift))
        layer.mult_neg = None if base.mult_neg is None else np.tile(base.mult_neg, f)
        layer.strides, layer.pads, layer.dilations = (sy, 1), (0, 0, 0, 0), (dy, 1)
        done = True
    return done


def windows_first_layer(plan: TilePlan, n_lanes: int, act_lines: int) -> bool:
    """A strided convolution over one row of a thin host-provided input (a 1-d signal), whose kernel is wider than
    the pixels a line holds: the host im2col copies each input pixel kw / sx times (M5's first layer, 1 x 80 of
    stride 4: 20 times, 3 lines a pixel on tile32x32). Instead the host lays out *windows*: one line per output
    pixel x' holding the L padded input pixels from sx * x' (L: the most pixels whose C channels fit a line, a
    multiple of the stride; `host_im2col`, the "rows" layout with step sx), so each pixel is copied L / sx times.
    The tile runs a convolution of T = ceil(E / L) taps over it (E: the kernel's extent), dilation L / sx, stride 1:
    tap t reads the window L pixels on, and its weight `[m, c*L + j, 0, t] = w[m, c, 0, kx]` where kx * dx = t L + j.
    The same lines a pixel as the im2col's when C * kw fills whole lines (tile32x32: 3; tile8x8: 10), a third of
    its input (M5: 4,016 lines instead of 12,000). A candidate of the search (`hwc.tile.build.schedule`). Returns
    whether a layer was rewritten."""
    done = False
    for layer in plan.layers:
        if not isinstance(layer, ConvLayer) or layer.src not in plan.inputs or layer.src in plan.outputs:
            continue
        t, out = plan.tensors[layer.src], plan.tensors[layer.dst]
        m, c, kh, kw = layer.weight.shape
        (_, sx), (_, dx) = layer.strides, layer.dilations
        users = [x for x in plan.layers if x is not layer and layer.src in _layer_inputs(x)]
        extent = (kw - 1) * dx + 1
        window = n_lanes // c // sx * sx
        if kh != 1 or t.h != 1 or out.h != 1 or layer.group != 1 or t.c != c or users or not window \
                or window >= extent:
            continue
        taps, d = -(-extent // window), window // sx
        cols = out.w + (taps - 1) * d
        if cols > act_lines:
            continue
        name = f"{layer.src}_windows"
        weight = np.zeros((m, c * window, 1, taps), np.int8)
        for kx in range(kw):
            tap, j = divmod(kx * dx, window)
            for ci in range(c):
                weight[:, ci * window + j, 0, tap] = layer.weight[:, ci, 0, kx]
        plan.im2col[name] = {"kind": "windows", "src": layer.src, "window": window, "step": sx, "start": 0,
                             "cols": cols, "pads": list(layer.pads), "zp": t.zp,
                             "lanes_before": round(c / n_lanes, 3), "lanes_after": round(c * window / n_lanes, 3)}
        plan.tensors[name] = TileTensor(name, c * window, 1, cols, t.zp, n_lanes, graph_shape=(1, c * window, 1, cols))
        plan.inputs[plan.inputs.index(layer.src)] = name
        del plan.tensors[layer.src]
        layer.src, layer.weight = name, weight
        layer.strides, layer.pads, layer.dilations = (1, 1), (0, 0, 0, 0), (1, d)
        done = True
    return done


def host_im2col(x: np.ndarray, how: dict) -> np.ndarray:
    """[1, C, H, W] int8 -> [1, C*kh*kw, Ho, Wo]: channel index (c, ky, kx), padding = zero point.
    `how["kind"] == "rows"` (`im2row_first_layer`; "windows", `windows_first_layer`): -> [1, C*window, Hp, cols],
    channel (c, j) of (row r, column X) the padded input's pixel (r, step*X + start + j), the zero point outside."""
    if how.get("kind") in ("rows", "windows"):
        pt, pl, pb, pr = how["pads"]
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=how["zp"])
        cols = how["step"] * np.arange(how["cols"])[None, :] + how["start"] + np.arange(how["window"])[:, None]
        ok = (cols >= 0) & (cols < xp.shape[3])
        out = np.where(ok[None, :, None, :], xp[0][:, :, np.clip(cols, 0, xp.shape[3] - 1)].transpose(0, 2, 1, 3),
                       np.int8(how["zp"]))
        return out.astype(x.dtype).reshape(1, -1, xp.shape[2], how["cols"])
    kh, kw = how["kernel"]
    sh, sw = how["strides"]
    dh, dw = how["dilations"]
    pt, pl, pb, pr = how["pads"]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=how["zp"])
    ho = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    wo = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    cols = np.empty((x.shape[1], kh, kw, ho, wo), x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            ys = slice(ky * dh, ky * dh + sh * (ho - 1) + 1, sh)
            cols[:, ky, kx] = xp[0, :, ys, kx * dw: kx * dw + sw * (wo - 1) + 1: sw]
    return cols.reshape(1, -1, ho, wo)


def _layer_inputs(layer: Layer) -> list[str]:
    return reads(layer)


# ---- thin tensors: several pixels per line (space-to-depth along W) ---------------------------


def _s2d_conv_weights(layer: ConvLayer, c: int, fi: int, fo: int, si: int = 0, so: int = 0):
    """Weights, strides, dilations and horizontal pads of `layer` on space-to-depth tensors.

    x'[c + C*a, y, U] = x[c, y, fi*U + a - si] and o'[m + M*b, y, X'] = o[m, y, fo*X' + b - so] (si, so:
    the shifts, pad pixels before pixel 0). Output column fo*X' + b - so reads input column
    u = sx*(fo*X' + b - so) + kx*dx - pl, stored at u + si = fi*(s'*X' + delta) + a with s' = sx*fo/fi,
    delta = floor((sx*b + kx*dx - pe) / fi), a = (sx*b + kx*dx - pe) mod fi, pe = pl + sx*so - si:
    a convolution of x' with stride s' whose kernel column is delta - min(delta)."""
    w = layer.weight
    m, _, kh, kw = w.shape
    sx, dx = layer.strides[1], layer.dilations[1]
    pl = layer.pads[1] + sx * so - si
    taps = [(b, kx, (sx * b + kx * dx - pl) // fi, (sx * b + kx * dx - pl) % fi) for b in range(fo) for kx in range(kw)]
    dmin = min(t[2] for t in taps)
    dmax = max(t[2] for t in taps)
    wn = np.zeros((m * fo, c * fi, kh, dmax - dmin + 1), np.int8)
    for b, kx, delta, a in taps:
        wn[m * b:m * (b + 1), c * a:c * (a + 1), :, delta - dmin] = w[:, :, :, kx]
    return wn, sx * fo // fi, -dmin, dmax


#: The most pixels a line of an input laid out for PPU.dw as whole-block pixels may stack (`space_to_depth(flat=)`):
#: its producer's GEMMs write every MAX_PHASES-th accumulator line, the largest GEMM.acc_si
MAX_PHASES = 1 << (isa.LAYOUT[isa.Op.GEMM]["acc_si"][1].width - 1)


def reads(layer) -> list[str]:
    """The tensors a tile layer reads."""
    if isinstance(layer, AddLayer):
        return [layer.a, layer.b]
    if isinstance(layer, ConcatLayer):
        return list(layer.srcs)
    return [layer.src]


#: PPU.dws of a depthwise layer fused into the PPU of the convolution before it (features.dw_post), by its
#: (strides, pads): stride 1 padded by one pixel, or stride 2 padded so (2) or at the bottom and right only (3)
DWS_OF = {((1, 1), (1, 1, 1, 1)): 0, ((2, 2), (1, 1, 1, 1)): 2, ((2, 2), (0, 0, 1, 1)): 3}


def dw_post_pairs(plan: TilePlan) -> dict[int, ConvLayer]:
    """Layer index of a convolution -> the 3x3 depthwise layer right after it that only it feeds, in a shape
    PPU.dw computes (`DWS_OF`): the pairs a tile with features.dw_post may run as one layer, as far as the graph
    goes (the scheduler checks the layout and the sizes, Codegen._fusable_dws)."""
    layers = plan.layers
    readers = Counter(name for layer in layers for name in reads(layer))
    out = {}
    for i in range(len(layers) - 1):
        conv, dw = layers[i], layers[i + 1]
        # (a conv of one channel to one is a depthwise layer to the scheduler, GEMM.dw: not a PPU.dw producer)
        if not (isinstance(conv, ConvLayer) and isinstance(dw, ConvLayer) and dw.src == conv.dst
                and conv.group == 1 and conv.op == "QConv" and readers[conv.dst] == 1
                and conv.dst not in plan.outputs and (conv.plain or conv).weight.shape[:2] != (1, 1)
                and conv.mult_neg is None and dw.mult_neg is None):   # (PPU.dw has no PPU.neg)
            continue
        d = dw.plain or dw   # (a stacked one as it was: PPU.dwf takes it whole, Codegen._fusable_dws)
        m, c, kh, kw = d.weight.shape
        if d.op == "QConv" and d.group == m == c and (kh, kw) == (3, 3) and d.dilations == (1, 1) \
                and (d.strides, tuple(d.pads)) in DWS_OF:
            out[i] = dw
    return out


def dw_post_flat(plan: TilePlan, target: dict) -> tuple[dict[str, ConvLayer], frozenset[str]]:
    """features.dw_post: the inputs of the depthwise layers of `dw_post_pairs` (-> the layer) that PPU.dw will
    take, whatever the stacking, when `space_to_depth(flat=...)` lays them out for it (before stacking: four rows
    within a third of the accumulators, a padded row within the row buffers, no residual add of the depthwise
    layer's output), and those of them it takes only in blocks of two pixels ("pairs": a stride-2 layer of N / 2
    channels whose padded row is within the row buffers at two pixels a position only, e.g. 64 pixels on
    tile32x32). The search tries that beside the default stacking (`tile.build.schedule`)."""
    if not target["features"].get("dw_post"):
        return {}, frozenset()
    sp = target["scratchpad"]
    added = {name for layer in plan.layers if isinstance(layer, AddLayer) for name in (layer.a, layer.b)}
    out = {}
    n = target["array"]["cols"]
    only_pairs = set()
    for i, dw in dw_post_pairs(plan).items():
        mid = plan.tensors[plan.layers[i].dst]
        if min(mid.h, 4) * mid.w > sp["acc_lines"] // 3 or dw.dst in added:
            continue
        if isa.DWP_MIN_PITCH <= mid.w + 1 <= sp["dw_line_buffer"]:
            out[mid.name] = dw
        elif (2 * mid.c == n and (dw.plain or dw).strides == (2, 2)
              and isa.DWP_MIN_PITCH <= -(-mid.w // 2) + 1 <= sp["dw_line_buffer"]):
            out[mid.name] = dw
            only_pairs.add(mid.name)
    return out, frozenset(only_pairs)


def most_stacked(c: int, w: int, n_lanes: int) -> int:
    """The most pixels a line of `n_lanes` lanes holds of a tensor of c channels and width w: a power of two that
    divides the width (`space_to_depth` starts each tensor there)."""
    k = 1
    while c * k * 2 <= n_lanes and w % (k * 2) == 0:
        k *= 2
    return k


def space_to_depth(plan: TilePlan, n_lanes: int, shift: bool = True, flat: frozenset[str] = frozenset(),
                   padded: frozenset[str] = frozenset(), loose: frozenset[str] = frozenset(),
                   keep: frozenset[str] = frozenset()) -> None:
    """Stack several pixels of a thin tensor (fewer channels than lanes) into one line.

    A tensor of C channels is stored with f = N/C pixels per line (f a power of two that
    divides its width): a 16-channel tensor fills the 32 lanes of a 32x32 tile with two
    pixels instead of half the lanes with one. Convolutions are rewritten exactly onto the
    stacked layout (`_s2d_conv_weights`), residual adds are unchanged, global pooling folds
    the stacked pixels back. Tensors read by max pooling keep one pixel per line.

    `flat` (`dw_post_flat`): inputs of depthwise layers that PPU.dw computes (features.dw_post). Such a tensor is
    never stored: its producer's accumulators hold it. One of N channels (a whole channel block) may be
    stacked like any other; its producer's GEMMs then write each stacked pixel's block to the accumulator line of
    that pixel (Codegen.emit_conv), so its reader sees it one pixel per line. A thinner one keeps one pixel per
    line, or, in `padded` (of `flat`), is padded to N channels by its producer's weights (zero rows: output
    blocks of one pixel, N - C lanes unused) and taken as a whole-block one, or, in `loose` (of `flat`), is
    stacked like any other and its blocks (of N / C pixels) written to the accumulators in pixel order (a
    stride-2 depthwise layer's PPU.dw then reads two pixels a line, PPU.dwf). Either way the depthwise layer's
    output keeps one pixel per line (PPU.dw writes it so).

    `keep`: tensors kept at one pixel per line besides (an input read where an earlier segment stored it so,
    `hwc.tile.views`)."""
    by_src = {layer.src: layer for layer in plan.layers if isinstance(layer, ConvLayer)}
    by_dst = {layer.dst: layer for layer in plan.layers if isinstance(layer, ConvLayer)}
    for name in padded:
        t, conv = plan.tensors[name], by_dst[name]
        extra = n_lanes - t.c if t.c < n_lanes else 0
        if extra:
            w = conv.weight
            conv.weight = np.concatenate([w, np.zeros((extra, *w.shape[1:]), w.dtype)])
            conv.bias, conv.mult = (np.concatenate([v, np.zeros(extra, v.dtype)]) for v in (conv.bias, conv.mult))
            if conv.mult_neg is not None:
                conv.mult_neg = np.concatenate([conv.mult_neg, np.zeros(extra, conv.mult_neg.dtype)])
            conv.shift = np.concatenate([conv.shift, np.full(extra, conv.shift[0], conv.shift.dtype)])
            t.c += extra
    destack = {name for name in flat if plan.tensors[name].c == n_lanes} | set(loose)
    fixed = (set(flat) - destack) | {by_src[name].dst for name in flat} | set(keep)

    def f_in(layer: ConvLayer) -> int:   # the stacking a convolution reads its input with
        return 1 if layer.src in destack else f[layer.src]
    for layer in plan.layers:
        if isinstance(layer, MaxPoolLayer):
            fixed.update((layer.src, layer.dst))
        elif isinstance(layer, ConcatLayer):   # (its VECs copy whole lines of one pixel each)
            fixed.update((*layer.srcs, layer.dst))
    f = {name: 1 if name in fixed or len(t.graph_shape) != 4 else most_stacked(t.c, t.w, n_lanes)
         for name, t in plan.tensors.items()}
    # Every convolution needs an integer stride on the stacked input (sx * fo divisible by fi), residual
    # operands and their result share one layout, and stacking needs the width to divide. First raise
    # the output factor of convolutions whose thin input is stacked deeper (only increases: it ends),
    # then lower factors until everything holds (only decreases: it ends).
    changed = True
    while changed:
        changed = False
        for layer in plan.layers:
            if not isinstance(layer, ConvLayer) or plan.tensors[layer.dst].w == 1:
                continue
            fi, fo, sx = f_in(layer), f[layer.dst], layer.strides[1]
            want = fi // sx if fi % sx == 0 else 0
            if (sx * fo) % fi and want > fo and plan.tensors[layer.dst].w % want == 0 and layer.dst not in fixed \
                    and (layer.dst not in destack or want <= MAX_PHASES):
                f[layer.dst] = want
                changed = True
    changed = True
    while changed:
        changed = False
        for layer in plan.layers:
            if isinstance(layer, ConvLayer):
                fi, fo, sx = f_in(layer), f[layer.dst], layer.strides[1]
                if plan.tensors[layer.dst].w == 1:
                    sx = fi  # one output column: its stride is free
                if (sx * fo) % fi:
                    f[layer.src] = math.gcd(fi, sx * fo)
                    changed = True
            elif isinstance(layer, AddLayer):
                k = min(f[layer.a], f[layer.b], f[layer.dst])
                for nm in (layer.a, layer.b, layer.dst):
                    if f[nm] != k:
                        f[nm] = k
                        changed = True
    if all(k == 1 for k in f.values()):
        return
    sh = _shifts(plan, f, n_lanes, destack) if shift else {name: 0 for name in plan.tensors}
    sh.update({name: 0 for name in destack})   # (its pixels in order in the accumulators)
    for layer in plan.layers:
        if isinstance(layer, ConvLayer):
            fi, fo = f_in(layer), f[layer.dst]
            if fi == fo == 1:
                continue
            c = plan.tensors[layer.src].c
            if plan.tensors[layer.dst].w == 1:
                layer.strides = (layer.strides[0], fi)
            si, so = sh[layer.src], sh[layer.dst]
            layer.plain = dataclasses.replace(layer)
            wn, sx2, pl2, _ = _s2d_conv_weights(layer, c, fi, fo, si, so)
            layer.weight = wn
            layer.bias = np.tile(layer.bias, fo)
            layer.mult = np.tile(layer.mult, fo)
            layer.shift = np.tile(layer.shift, fo)
            if layer.mult_neg is not None:
                layer.mult_neg = np.tile(layer.mult_neg, fo)
            layer.strides = (layer.strides[0], sx2)
            layer.dilations = (layer.dilations[0], 1)
            src_w2 = _stacked_width(plan.tensors[layer.src].w, fi, si)
            dst_w2 = _stacked_width(plan.tensors[layer.dst].w, fo, so)
            pr2 = max(0, sx2 * (dst_w2 - 1) + (wn.shape[3] - 1) - pl2 - (src_w2 - 1))
            layer.pads = (layer.pads[0], pl2, layer.pads[2], pr2)
        elif isinstance(layer, GapLayer):
            layer.fold = f[layer.src]
    for name, t in plan.tensors.items():
        k = f[name]
        if k > 1:
            t.s2d, t.shift, t.w0 = k, sh[name], t.w
            t.c, t.w = t.c * k, _stacked_width(t.w, k, sh[name])


def _stacked_width(w: int, f: int, shift: int) -> int:
    return -(-(w + shift) // f)


def _shifts(plan: TilePlan, f: dict[str, int], n_lanes: int, destack=frozenset()) -> dict[str, int]:
    """Shift (0 or 1 pad pixels before pixel 0) of each stacked tensor: a 3x3 convolution between two
    tensors of two pixels per line reads three lines per output line when both are aligned alike (the
    outer two a quarter used) but two when the alignments differ by one pixel. Chosen to minimize the
    convolutions' kernel columns x output lines, over the tensors a convolution or residual add writes
    and only convolutions and adds read (a shifted tensor's edge lines hold pad pixels: its producer
    writes them as the zero point). Residual operands and result share one shift."""
    shift = {name: 0 for name in plan.tensors}
    producer = {layer.dst: layer for layer in plan.layers}
    readers: dict[str, list] = {}
    for layer in plan.layers:
        for name in reads(layer):
            readers.setdefault(name, []).append(layer)
    ok = {name for name, t in plan.tensors.items()
          if f[name] > 1 and t.w > 1 and name not in plan.outputs and name not in plan.inputs
          and isinstance(producer.get(name), (ConvLayer, AddLayer))
          and all(isinstance(r, (ConvLayer, AddLayer)) for r in readers.get(name, []))}
    group = {name: name for name in plan.tensors}   # union-find: residual operands and result

    def root(x):
        while group[x] != x:
            x = group[x]
        return x

    for layer in plan.layers:
        if isinstance(layer, AddLayer):
            for other in (layer.a, layer.b):
                group[root(other)] = root(layer.dst)
    members: dict[str, list[str]] = {}
    for name in plan.tensors:
        members.setdefault(root(name), []).append(name)
    free = sorted(r for r, ms in members.items() if all(m in ok for m in ms))
    convs = [layer for layer in plan.layers if isinstance(layer, ConvLayer) and layer.src not in destack
             and (f[layer.src] > 1 or f[layer.dst] > 1) and plan.tensors[layer.dst].w > 1]
    if not free or not convs or len(free) > 12:
        return shift

    @functools.cache
    def lines(k: int, si: int, so: int) -> int:   # convs[k]'s streamed lines: nonzero weight blocks x output lines
        layer = convs[k]
        fi, fo = f[layer.src], f[layer.dst]
        wn = _s2d_conv_weights(layer, plan.tensors[layer.src].c, fi, fo, si, so)[0]
        mo, ci, kh, kw = wn.shape
        blocks = np.zeros((-(-mo // n_lanes) * n_lanes, -(-ci // n_lanes) * n_lanes, kh, kw), bool)
        blocks[:mo, :ci] = wn != 0
        nz = blocks.reshape(-1, n_lanes, blocks.shape[1] // n_lanes, n_lanes, kh, kw).any(axis=(1, 3)).sum()
        return int(nz) * plan.tensors[layer.dst].h * _stacked_width(plan.tensors[layer.dst].w, fo, so)

    def cost(sh):
        return sum(lines(k, sh[layer.src], sh[layer.dst]) for k, layer in enumerate(convs))

    best = (cost(shift), shift)
    for bits in range(1, 1 << len(free)):
        trial = dict(shift)
        for k, r in enumerate(free):
            if bits >> k & 1:
                for name in members[r]:
                    trial[name] = 1
        c = cost(trial)
        if c < best[0]:
            best = (c, trial)
    return best[1]
