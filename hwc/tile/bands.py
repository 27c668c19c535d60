"""Activations larger than ACT: row bands and segment cuts (the int8 graph rewritten before scheduling).

A tile segment keeps every activation it computes in ACT. When a segment's activations do not fit
(`Codegen.plan_act` raises `ActOverflow`), `fit_act` rewrites the int8 graph and schedules again:

- **Row bands.** The largest layer of the segment, with the layers before and after it that each read
  only the one before and are large too (a chain, `_chain`), is split into bands of the last layer's
  output rows: per band, a Slice of the chain's input rows, each layer over the rows the next one
  reads (the halo: a 3x3 stride-1 layer computes two rows more than the next; rows past a tensor's
  edges are the next layer's pads, the top pad on the first band only, the bottom one on the last),
  and a Concat of the last layer's bands. Convolution rows are independent, so the bands compute the
  layers' bits exactly (the int8 reference runs the rewritten graph). A chain grows while its bands
  compute at most MAX_RECOMPUTE of its MACs twice. With PPU.dw (features.dw_post) a chain ends at a
  conv + 3x3 depthwise pair, whose depthwise layer keeps its own pads in every band (PPU.dw takes no
  band edge): an extra output row per band edge, dropped by a Slice (`_edge_rows`).
- **Cuts.** A segment whose layers each fit but whose live activations together do not (a long
  residual, many tensors) is cut in two at its middle layer: the tensors live across the cut go to
  external memory and come back as the next segment's inputs.
- **Channel groups.** A layer whose one-row bands still overflow, or a global pool (no bands), goes in
  groups of its channels, whole ACT lines each (`split_channels`): per-channel layers (depthwise, pools,
  adds) read their own channels, an ungrouped convolution computes a group of its output channels from
  the whole input. Each group is a layer of its own, banded again where it overflows.
- **Column bands.** The same as row bands along the columns (`band_chain(axis=3)`), every row of a range
  of columns: for layers of one output row (a 1-d convolution over a long signal), a convolution whose
  one-row bands overflow and whose input rows every channel group would read, and a row wider than the
  accumulators (`RowTooWide`: the convolution computes whole rows).

The bands and the cut segments are separate tile programs: each loads its weights and input before it
computes (the first LOAD is not hidden) and stores its output at the end. A later segment's LOADs read
the rows where the earlier ones stored them (`hwc.tile.views`: no host work for the Concat of the bands,
nor across a cut); where the layouts differ, or the rows are the host's (the model input), the host runs
the Slice or Concat (the partition shows which, with the reason).

The rewrite repeats, with more bands where a band still overflows, until every segment fits, or stops
with a clear error when a layer does not fit even with one output row per band and one line of channels
per group (or is one the tile cannot split: a fully connected layer over the whole input). Documented with the
measurements in docs/tile-v2.md, "Activations larger than ACT".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hwc.analysis import node_macs
from hwc.errors import UnsupportedError
from hwc.ir.graph import Graph, QuantParams

#: A chain's first band count: its largest layer's ACT lines (input + output, as the scheduler laid them out) over
#: this share of ACT (a band that still overflows gets more bands).
BAND_SHARE = 0.8

#: Node ops a row band can split: windows over the rows (convolution, pooling) and element-wise ops; all but QAdd
#: (two inputs) also in chains of several (`band_chain`).
BANDABLE = ("QConv", "QAvgPool", "MaxPool", "QRequant", "QAdd")
CHAINABLE = ("QConv", "QAvgPool", "MaxPool", "QRequant")

#: A chain of layers grows while its bands compute at most this share of its MACs twice (halo rows).
MAX_RECOMPUTE = 0.1

#: At most this many rewrites of one model (each reschedules it: a round fixes one chain or one cut).
MAX_ROUNDS = 64


class ActOverflow(UnsupportedError):
    """A tile segment's activations do not fit ACT. `layers`: the segment's layers (node names, in order) -> the
    ACT lines of the tensors each reads and writes (as the scheduler laid them out); `need`, `have`: ACT lines."""

    def __init__(self, message: str, items: list[str] | None = None, layers: dict[str, int] | None = None,
                 need: int = 0, have: int = 0):
        super().__init__(message, items)
        self.layers = dict(layers or {})
        self.need, self.have = need, have

    def __reduce__(self):   # (raised in the candidate search's worker processes)
        return ActOverflow, (str(self), self.items, self.layers, self.need, self.have)


class RowTooWide(UnsupportedError):
    """A layer's output row is wider than the accumulators hold (`Codegen.emit_conv` computes whole rows):
    `layer` (node name), `width` (pixels) and `cap` (accumulator lines). `fit_act` splits it into column bands."""

    def __init__(self, message: str, items: list[str] | None = None, layer: str = "", width: int = 0, cap: int = 1):
        super().__init__(message, items)
        self.layer, self.width, self.cap = layer, width, cap

    def __reduce__(self):   # (raised in the candidate search's worker processes)
        return RowTooWide, (str(self), self.items, self.layer, self.width, self.cap)


@dataclass
class Fit:
    """What `fit_act` did: band counts of the split chains of layers (keyed by their first layer; `chains` names the
    layers of each) and the cut points (nodes starting a segment)."""

    bands: dict[str, int] = field(default_factory=dict)
    chains: dict[str, list[str]] = field(default_factory=dict)
    cuts: list[str] = field(default_factory=list)
    dw_post: bool = False   # the target computes a conv and the depthwise layer after it in one pass (PPU.dw)
    solo: set[str] = field(default_factory=set)   # layers banded alone: their chain did not fit in one-row bands
    lanes: int = 0   # channels per ACT line (array.cols): for the messages
    channels: dict[str, int] = field(default_factory=dict)   # layers in channel groups (`split_channels`), in order
    columns: set[str] = field(default_factory=set)   # chains (heads) in column bands: their layers have one output row

    def as_report(self) -> dict:
        rep = {"bands": {_label(self.chains[k]): v for k, v in sorted(self.bands.items()) if k not in self.columns},
               "cuts": list(self.cuts), "channels": dict(self.channels)}
        if self.columns:
            rep["column_bands"] = {_label(self.chains[k]): v for k, v in sorted(self.bands.items())
                                   if k in self.columns}
        return rep


def _label(chain: list[str]) -> str:
    return chain[0] if len(chain) == 1 else f"{chain[0]}..{chain[-1]}"


def describe(act_fit: dict | None) -> str | None:
    """What a report's `act_fit` did, in a line (None when the activations fit ACT whole)."""
    if not act_fit or not (act_fit["bands"] or act_fit["cuts"] or act_fit.get("channels") or
                           act_fit.get("column_bands")):
        return None
    parts = []
    if act_fit.get("column_bands"):
        parts.append("in column bands: " + ", ".join(f"{k} ({v})" for k, v in act_fit["column_bands"].items()))
    if act_fit.get("channels"):
        parts.append("in channel groups: " + ", ".join(f"{k} ({v})" for k, v in act_fit["channels"].items()))
    if act_fit["bands"]:
        parts.append("in row bands: " + ", ".join(f"{k} ({v})" for k, v in act_fit["bands"].items()))
    if act_fit["cuts"]:
        parts.append("segments cut before " + ", ".join(act_fit["cuts"]))
    return "; ".join(parts) + " (each band and each cut part a tile segment of its own)"


def _window(g: Graph, node, axis: int = 2) -> tuple[int, int, int, int, int]:
    """(kernel rows, stride, dilation, top pad, bottom pad) of a node along the rows (axis 2; along the columns,
    axis 3: kernel columns, ..., left pad, right pad) (1, 1, 1, 0, 0: element-wise)."""
    a = node.attrs
    if node.op == "QConv":
        kh = g.const(node.inputs[1]).shape[axis]
    elif node.op in ("QAvgPool", "MaxPool"):
        kh = a["kernel_shape"][axis - 2]
    else:
        return 1, 1, 1, 0, 0
    p = a["pads"]
    return kh, a["strides"][axis - 2], a.get("dilations", [1, 1])[axis - 2], p[axis - 2], p[axis]


def _band_rows(g: Graph, nodes: list, bands: int, keep_pads: bool = False, axis: int = 2) -> list[list[tuple]]:
    """Per band, per node of the chain: (its output rows, its input rows, top pad, bottom pad). Bands split the last
    node's output rows evenly; each node computes the rows the next one reads (rows past the tensor's edges are the
    next one's pads). `keep_pads`: the last node keeps its own pads in every band (`_edge_rows`); its output rows
    then include an extra row above and below the band's, computed with a pad for a real row (not kept). `axis`
    3: column bands (the same along the columns, without `keep_pads`)."""
    ho = g.type(nodes[-1].outputs[0]).shape[axis]

    def reads(node, y0, y1):   # the input rows output rows [y0, y1) read, and the pads above and below them
        kh, sh, dh, pt, _ = _window(g, node, axis)
        h_in = g.type(node.inputs[0]).shape[axis]
        i0, i1 = y0 * sh - pt, (y1 - 1) * sh - pt + (kh - 1) * dh + 1
        return max(0, i0), min(h_in, i1), max(0, -i0), max(0, i1 - h_in)

    def ranges(y0, y1):   # None: a node reads no real row (its window is all padding)
        out = []
        for k, node in enumerate(reversed(nodes)):
            if keep_pads and k == 0:   # (+ the rows of its output the band keeps)
                i0, i1, top, bottom = _edge_rows(g, node, y0, y1)
                a = max(0, y0 - 1)
                out.append(((a, a + _rows_out(g, node, i1 - i0)), (i0, i1), top, bottom, (y0 - a, y1 - a)))
            else:
                i0, i1, top, bottom = reads(node, y0, y1)
                if i1 <= i0:
                    return None
                out.append(((y0, y1), (i0, i1), top, bottom, None))
            y0, y1 = i0, i1
        return out[::-1]

    cuts = [0]
    for y in sorted({round(b * ho / bands) for b in range(1, bands + 1)}):
        if ranges(cuts[-1], y) is not None:   # (a band whose window is all padding, from a pad of a stride or
            cuts.append(y)                    # more, joins the next)
    if cuts[-1] != ho:   # (or the one before, at the bottom)
        cuts[-1:] = [ho] if len(cuts) > 1 else [0, ho]
    plan = [ranges(cuts[b], cuts[b + 1]) for b in range(len(cuts) - 1)]
    # (None: even the whole output needs rows of a layer that read padding only, which a band's input Slice cannot
    # hold: the chain cannot be banded)
    return None if any(p is None for p in plan) else plan


def _ppu_dw_pair(g: Graph, nodes: list) -> bool:
    """Does the chain end in a convolution and the 3x3 depthwise layer after it that PPU.dw computes in one pass
    (features.dw_post; `layers.DWS_OF`: padded by one pixel at stride 1, or stride 2 TF SAME)? Its bands then keep
    the depthwise layer's pads (`_edge_rows`)."""
    from hwc.tile.layers import DWS_OF

    if len(nodes) < 2 or nodes[-2].op != "QConv" or not _depthwise(g, nodes[-1]):
        return False
    a = nodes[-1].attrs
    return g.const(nodes[-1].inputs[1]).shape[2:] == (3, 3) and (tuple(a["strides"]), tuple(a["pads"])) in DWS_OF


def _depthwise(g: Graph, node) -> bool:
    return (node.op == "QConv" and node.attrs["group"] > 1 and node.attrs["group"] == g.type(node.inputs[0]).shape[1]
            == g.type(node.outputs[0]).shape[1])


def _edge_rows(g: Graph, node, y0: int, y1: int) -> tuple[int, int, int, int]:
    """The input rows and pads of a band [y0, y1) of `node`'s output when it keeps its own pads (PPU.dw takes a
    depthwise layer padded as the model pads it, not a band edge without a pad row): it computes from one output row
    above the band (a pad stands for the real rows it reads: that row is not kept), from input row that row x the
    stride, to the input rows the band's last row reads; the rows past those are the bottom pad's."""
    kh, sh, dh, pt, pb = _window(g, node)
    h_in = g.type(node.inputs[0]).shape[2]
    a = max(0, y0 - 1)
    return a * sh, min(h_in, (y1 - 1) * sh - pt + (kh - 1) * dh + 1), pt, pb


def _rows_out(g: Graph, node, rows_in: int) -> int:
    """Output rows of `node` over `rows_in` input rows with its own pads."""
    kh, sh, dh, pt, pb = _window(g, node)
    return (rows_in + pt + pb - (kh - 1) * dh - 1) // sh + 1


def _recompute(g: Graph, nodes: list, bands: int, dw_post: bool = False, axis: int = 2) -> float:
    """The share of a chain's MACs its bands compute twice (the halo rows, or columns: `axis` 3)."""
    total = sum(node_macs(g, nd) for nd in nodes)
    if not total:
        return 0.0
    plan = _band_rows(g, nodes, bands, keep_pads=dw_post and axis == 2 and _ppu_dw_pair(g, nodes), axis=axis)
    if plan is None:
        return math.inf
    rows = [sum(r[k][0][1] - r[k][0][0] for r in plan) for k in range(len(nodes))]
    extra = sum(node_macs(g, nd) * (rows[k] / g.type(nd.outputs[0]).shape[axis] - 1) for k, nd in enumerate(nodes))
    return extra / total


def band_chain(g: Graph, names: list[str], bands: int, dw_post: bool = False, axis: int = 2) -> list[str]:
    """Replace the chain of nodes `names` (each reading the one before's output, which nothing else reads) by
    `bands` row bands of its last node's output: per band, Slice(s) of the chain's input -> each node over the rows
    the next one needs (a 3x3 stride-1 node two more than the next; rows past the tensor's edges are the next
    node's pads) -> Concat of the last node's bands. Returns the band nodes' names. The graph keeps the last node's
    output name (its consumers and the graph outputs are unchanged); the chain's other outputs go. `axis` 3: column
    bands, the same along the columns (a layer of one output row: a 1-d convolution over a long signal)."""
    nodes = [next(nd for nd in g.nodes if nd.name == name) for name in names]
    at = g.node_index(nodes[0])
    out = nodes[-1].outputs[0]
    data_in = [0, 1] if nodes[0].op == "QAdd" else [0]
    what = "rows" if axis == 2 else "columns"

    plan = _band_rows(g, nodes, bands, keep_pads=dw_post and axis == 2 and _ppu_dw_pair(g, nodes), axis=axis)
    if plan is None:
        raise UnsupportedError(f"the layers {_label(names)!r} cannot be split into {what[:-1]} bands: a band would "
                               f"need {what} of {names[0]!r} that read its padding only", list(names))
    for node in nodes:
        g.nodes.remove(node)
    new, parts = [], []
    for b, band in enumerate(plan):
        prev = None
        for k, (node, (rows, (i0, i1), top, bottom, keep)) in enumerate(zip(nodes, band)):
            inputs = list(node.inputs)
            if k:
                inputs[0] = prev
            else:
                for j in data_in:
                    new.append(_slice(g, node.inputs[j], axis, i0, i1, f"{names[0]}.band{b}.in{j}", at + len(new)))
                    inputs[j] = new[-1].outputs[0]
            attrs = dict(node.attrs)
            if "pads" in attrs:
                p = list(attrs["pads"])
                p[axis - 2], p[axis] = top, bottom
                attrs["pads"] = p
            bn = g.make_node(node.op, inputs, attrs, name=g.fresh(f"{node.name}.band{b}"), index=at + len(new))
            if g.type(bn.outputs[0]).shape[axis] != rows[1] - rows[0]:
                raise AssertionError(f"band {b} of {node.name}: {g.type(bn.outputs[0]).shape} != rows {rows}")
            g.values[bn.outputs[0]].quant = _copy_quant(g.values[node.outputs[0]].quant)
            new.append(bn)
            prev = bn.outputs[0]
            if keep is not None and keep != (0, rows[1] - rows[0]):   # (the extra rows of a node keeping its pads)
                new.append(_slice(g, prev, 2, *keep, f"{node.name}.band{b}.keep", at + len(new)))
                prev = new[-1].outputs[0]
        parts.append(prev)
    for node in nodes[:-1]:
        del g.values[node.outputs[0]]
    cat = g.make_node("Concat", parts, {"axis": axis}, name=g.fresh(f"{names[-1]}.bands"),
                      outputs=[g.fresh(out + ".cat")], index=at + len(new))
    g.metadata["tile_seams"] = [*g.metadata.get("tile_seams", []), cat.name]   # (the host's: `layers.partition`)
    # the Concat writes the last node's old output name: rename its fresh output back
    v = g.values.pop(cat.outputs[0])
    v.name, v.quant = out, g.values[out].quant
    g.values[out] = v
    cat.outputs[0] = out
    return [nd.name for nd in new if nd.op != "Slice"]


#: Node ops whose output channels can be computed in groups (`split_channels`): per channel (pooling, element-wise,
#: depthwise convolution: each group reads its own channels) or by output channel (a convolution: every group reads
#: the whole input).
CHANNEL_SPLITTABLE = ("QConv", "QAvgPool", "QGlobalAvgPool", "MaxPool", "QRequant", "QAdd")


def channel_splittable(g: Graph, node, lanes: int) -> bool:
    """Can `node` go in channel groups of whole ACT lines (`lanes` channels): an op of CHANNEL_SPLITTABLE on
    [1, C, H, W] with more than one line of output channels; a convolution ungrouped or depthwise."""
    if node.op not in CHANNEL_SPLITTABLE:
        return False
    shape = g.type(node.outputs[0]).shape
    if len(shape) != 4 or shape[0] != 1 or shape[1] <= lanes:
        return False
    return node.op != "QConv" or node.attrs["group"] == 1 or _depthwise(g, node)


def _channel_groups(c: int, lanes: int, groups: int) -> list[tuple[int, int]]:
    """`groups` (at most) ranges of the c channels, each whole ACT lines of `lanes` channels but the last."""
    blocks = -(-c // lanes)
    per = -(-blocks // groups)
    return [(b * lanes, min(c, (b + per) * lanes)) for b in range(0, blocks, per)]


def split_channels(g: Graph, name: str, groups: int, lanes: int) -> list[str]:
    """Replace node `name` by its output channels in groups of whole ACT lines: per group a Slice of its data inputs'
    channels (a depthwise or per-channel op; an ungrouped convolution reads its whole input), the node over them with
    its per-channel constants cut alike, and a Concat of the groups along the channels, which keeps the node's output
    name. Each group reads and writes a share of the lines: a tile segment of its own, banded by rows as any layer
    when it still does not fit. Returns the group nodes' names."""
    node = next(nd for nd in g.nodes if nd.name == name)
    at = g.node_index(node)
    out = node.outputs[0]
    c = g.type(out).shape[1]
    per_channel = not (node.op == "QConv" and node.attrs["group"] == 1)
    data_in = ([0, 1] if node.op == "QAdd" else [0]) if per_channel else []
    g.nodes.remove(node)
    new, parts = [], []
    for k, (c0, c1) in enumerate(_channel_groups(c, lanes, groups)):
        inputs = list(node.inputs)
        for j in data_in:
            new.append(_slice(g, node.inputs[j], 1, c0, c1, f"{name}.ch{k}.in{j}", at + len(new)))
            inputs[j] = new[-1].outputs[0]
        for j in range(len(inputs)):
            v = g.values[inputs[j]] if inputs[j] else None
            if v is not None and v.data is not None and v.data.ndim >= 1 and v.data.shape[0] == c and c > 1:
                inputs[j] = g.add_const(v.data[c0:c1].copy(), f"{inputs[j]}.ch{k}")   # weights, bias, multipliers
        attrs = dict(node.attrs)
        if node.op == "QConv" and per_channel:
            attrs["group"] = c1 - c0
        part = g.make_node(node.op, inputs, attrs, name=g.fresh(f"{name}.ch{k}"), index=at + len(new))
        g.values[part.outputs[0]].quant = _copy_quant(g.values[out].quant)
        new.append(part)
        parts.append(part.outputs[0])
    cat = g.make_node("Concat", parts, {"axis": 1}, name=g.fresh(f"{name}.groups"), outputs=[g.fresh(out + ".cat")],
                      index=at + len(new))
    g.metadata["tile_seams"] = [*g.metadata.get("tile_seams", []), cat.name]   # (the host's: `layers.partition`)
    v = g.values.pop(cat.outputs[0])   # (the Concat writes the node's old output name)
    v.name, v.quant = out, g.values[out].quant
    g.values[out] = v
    cat.outputs[0] = out
    return [nd.name for nd in new if nd.op != "Slice"]


def _slice(g: Graph, src: str, axis: int, r0: int, r1: int, name: str, index: int):
    """A Slice node (inserted at `index`) of [r0, r1) along `axis` of the [1, C, H, W] tensor `src`, quantized alike."""
    shape = g.type(src).shape
    starts, ends = [0] * len(shape), list(shape)
    starts[axis], ends[axis] = r0, r1
    sl = g.make_node("Slice", [src], {"starts": starts, "ends": ends, "steps": [1] * len(shape)}, name=g.fresh(name),
                     index=index)
    g.values[sl.outputs[0]].quant = _copy_quant(g.values[src].quant)
    return sl


def _copy_quant(q: QuantParams | None) -> QuantParams | None:
    return None if q is None else QuantParams(q.scale.copy(), q.zero_point.copy(), q.axis)


def grouped(g: Graph, fit: Fit) -> Graph:
    """The int8 graph with `fit`'s channel groups applied (a copy; g itself when there are none)."""
    if not fit.channels:
        return g
    g = g.copy()
    parts = {}
    for name, k in fit.channels.items():   # (in order: a group split again comes after its own split)
        for p in split_channels(g, name, k, fit.lanes):
            parts[p] = parts.pop(name, name)
    g.metadata["tile_groups"] = {p: {"of": of, "groups": fit.channels[of]} for p, of in parts.items()}
    return g


def rewrite(g: Graph, fit: Fit) -> Graph:
    """A copy of the int8 graph (with its channel groups applied: `grouped`) with `fit`'s bands and cuts applied."""
    g = g.copy()
    of = {}
    chains = {x for h in fit.bands for x in fit.chains[h]}
    g.metadata["tile_chain_macs"] = sum(node_macs(g, nd) for nd in g.nodes if nd.name in chains)
    for head, k in sorted(fit.bands.items()):
        for b in band_chain(g, fit.chains[head], k, fit.dw_post, 3 if head in fit.columns else 2):
            of[b] = head
    g.metadata["tile_cuts"] = list(fit.cuts)
    g.metadata["tile_chains"] = {h: list(fit.chains[h]) for h in fit.bands}
    g.metadata["tile_bands"] = {b: {"of": _label(fit.chains[h]), "head": h, "bands": fit.bands[h],
                                    **({"columns": True} if h in fit.columns else {})} for b, h in of.items()}
    return g


def recomputed_macs(g: Graph, banded: Graph) -> int:
    """MACs the bands compute more than the layers they split: the halo rows a chain's earlier layers compute for
    two bands, less the rows nothing reads (a stride-2 layer's last odd row), which bands do not compute. The
    model's MACs, which utilization counts, are the unbanded graph's."""
    bands = banded.metadata.get("tile_bands", {})
    return (sum(node_macs(banded, nd) for nd in banded.nodes if nd.name in bands)
            - banded.metadata.get("tile_chain_macs", 0))


def _chain(g: Graph, big: str, sizes: dict[str, int], room: int, dw_post: bool = False,
           solo: set[str] = frozenset(), axis: int = 2) -> list[str]:
    """The chain of layers to band around layer `big`: the layers before and after it, in the same segment, that each
    read only the one before (which nothing else reads) and are large too (each reads and writes more than half of
    `room`): computed band by band together, they stay in one segment (a convolution and the depthwise layer after
    it keep PPU.dw) and only the chain's input and output go through external memory."""
    nodes = {nd.name: nd for nd in g.nodes}
    producer = {o: nd for nd in g.nodes for o in nd.outputs}
    consumers = g.consumers()

    def linked(a, b):   # b reads a's output only as its data input, and nothing else reads it
        out = a.outputs[0]
        return (b.op in CHAINABLE and a.op in CHAINABLE and b.inputs[0] == out and out not in g.outputs
                and len(consumers.get(out, [])) == 1)

    def joins(x, after):   # a large layer, or a depthwise one after the chain (PPU.dw computes it with the conv)
        if x in solo:
            return False
        return x in sizes and (sizes[x] > room // 2 or (after and _depthwise(g, nodes[x])))

    def cheap(chain):   # its bands compute few rows twice
        k = max(2, -(-max(sizes[x] for x in chain) // room))
        return _recompute(g, [nodes[x] for x in chain], k, dw_post, axis) <= MAX_RECOMPUTE

    chain = [big]
    if nodes[big].op not in CHAINABLE:
        return chain
    while True:
        nxt = consumers.get(nodes[chain[-1]].outputs[0], [])
        if dw_post and _ppu_dw_pair(g, [nodes[x] for x in chain]):
            nxt = []   # (it ends at a PPU.dw pair: only there can the depthwise layer keep its pads)
        if len(nxt) == 1 and joins(nxt[0].name, True) and linked(nodes[chain[-1]], nxt[0]) \
                and cheap(chain + [nxt[0].name]):
            chain.append(nxt[0].name)
            continue
        prv = producer.get(nodes[chain[0]].inputs[0])
        if prv is not None and joins(prv.name, False) and linked(prv, nodes[chain[0]]) and cheap([prv.name] + chain):
            chain.insert(0, prv.name)
            continue
        return chain


def fit_act(g: Graph, target: dict, schedule):
    """Schedule the int8 graph (`schedule(graph)` -> segments), rewriting it into row bands, channel groups and cut
    segments while a segment's activations do not fit ACT. Returns (graph, segments, Fit)."""
    have = target["scratchpad"]["act_lines"]
    room = int(BAND_SHARE * have)
    fit = Fit(dw_post=target["features"].get("dw_post", False), lanes=target["array"]["cols"])
    base = cur = g   # base: g in `fit`'s channel groups
    for _ in range(MAX_ROUNDS):
        try:
            return cur, schedule(cur), fit
        except ActOverflow as e:
            err = e
        except RowTooWide as e:   # (a row wider than the accumulators: column bands of it, narrower ones)
            head = cur.metadata.get("tile_bands", {}).get(e.layer, {}).get("head", e.layer)
            if head not in fit.bands:
                if e.layer not in {nd.name for nd in base.nodes} or head in fit.solo:
                    raise
                fit.chains[head], fit.bands[head] = [head], 1
                fit.columns.add(head)
            elif head not in fit.columns:
                raise   # (a row band of a wide layer: rows and columns are not banded together)
            k = fit.bands[head]
            cols = _rows(base, fit.chains[head][-1], 3)
            if k >= cols:
                raise
            fit.bands[head] = min(cols, max(k + 1, -(-k * e.width // e.cap)))
            cur = rewrite(base, fit)
            continue
        nodes = {nd.name: nd for nd in cur.nodes}
        band_nodes = cur.metadata.get("tile_bands", {})
        sizes = {x: v for x, v in err.layers.items() if x in nodes}
        heads = {band_nodes[x]["head"] for x in sizes if x in band_nodes}
        if heads:   # a band of a chain overflows alone: more bands
            (head,) = heads
            k = fit.bands[head]
            axis = 3 if head in fit.columns else 2
            if len(fit.chains[head]) > 1 and k >= _rows(base, fit.chains[head][-1], axis):
                # (one-row bands of a chain still overflow: its layers are banded one by one instead)
                fit.solo.update(fit.chains.pop(head))
                del fit.bands[head]
                fit.columns.discard(head)
            elif len(fit.chains[head]) == 1 and k >= _rows(base, head, axis) and _group(base, fit, head, err, room):
                # (one-row bands of a layer still overflow: its channels go in groups, each banded anew)
                del fit.bands[head], fit.chains[head]
                fit.columns.discard(head)
            elif len(fit.chains[head]) == 1 and k >= _rows(base, head, axis) and axis == 2 \
                    and _rows(base, head, 3) > 1:
                # (nor in channel groups: a convolution reading rows too wide; column bands of all its rows instead)
                fit.columns.add(head)
                fit.bands[head] = 2
            else:
                fit.bands[head] = _more_bands(base, fit, head, max(k + 1, -(-k * err.need // room)), err)
        else:
            cands = {x: v for x, v in sizes.items() if nodes[x].op in BANDABLE}
            big = max(cands, key=lambda x: (cands[x], x), default=None)
            if big is not None and (len(sizes) == 1 or cands[big] > room // 2):
                one_row = _rows(base, big) == 1
                if one_row and not _whole_input_lines(base, nodes[big], fit.lanes) and _group(base, fit, big, err,
                                                                                            room):
                    base = grouped(g, fit)   # (one row of a per-channel layer: its channel groups, no halo)
                    cur = rewrite(base, fit)
                    continue
                axis = 3 if one_row else 2   # (one output row, e.g. a 1-d convolution: column bands)
                chain = [big] if big in fit.solo else _chain(cur, big, sizes, room, fit.dw_post and axis == 2,
                                                            fit.solo, axis)
                if _rows(base, chain[-1], axis) == 1:   # (no bands: the layers one by one, in channel groups)
                    if len(chain) > 1:
                        fit.solo.update(chain)
                        chain = [big]
                    if _rows(base, big, axis) == 1 and _group(base, fit, big, err, room):
                        base = grouped(g, fit)
                        cur = rewrite(base, fit)
                        continue
                fit.chains[chain[0]] = chain
                if axis == 3:
                    fit.columns.add(chain[0])
                fit.bands[chain[0]] = _more_bands(base, fit, chain[0],
                                                  max(2, -(-max(sizes[x] for x in chain) // room)), err)
            elif len(sizes) >= 2:
                fit.cuts.append(list(sizes)[len(sizes) // 2])
            else:
                (x,) = sizes or [err.items[0] if err.items else "?"]
                if not (x in nodes and _group(base, fit, x, err, room)):
                    op = nodes[x].op if x in nodes else "?"
                    raise UnsupportedError(f"layer {x!r} ({op}) does not fit ACT and cannot be split into row bands "
                                           f"(it reads its whole input at once){_groups_note(base, x, fit)}: {err}",
                                           [x]) from err
        base = grouped(g, fit)
        cur = rewrite(base, fit)
    raise UnsupportedError(f"the activations still do not fit ACT after {MAX_ROUNDS} rewrites into row bands and "
                           f"cut segments ({describe(fit.as_report())}): {err}", err.items) from err


def _group(g: Graph, fit: Fit, name: str, err: ActOverflow, room: int) -> bool:
    """Put layer `name` of `g` (the graph in `fit`'s channel groups) in channel groups, as many as its lines need
    (`err.need` of `room`), if it can go in groups (`channel_splittable`). Returns whether it did."""
    node = next((nd for nd in g.nodes if nd.name == name), None)
    if node is None or not channel_splittable(g, node, fit.lanes):
        return False
    blocks = -(-g.type(node.outputs[0]).shape[1] // fit.lanes)
    fixed = _whole_input_lines(g, node, fit.lanes)
    if fixed >= room:   # (a convolution's groups each read the whole input rows: too many already)
        return False
    fit.channels[name] = min(blocks, max(2, -(-(err.need - fixed) // (room - fixed))))
    return True


def _whole_input_lines(g: Graph, node, lanes: int) -> int:
    """ACT lines of the input rows one output row of an ungrouped convolution reads (padded, all its channels; the
    input columns one output column reads when it has one output row: column bands): what each of its output channel
    groups still holds (0 for a per-channel op, whose groups read their own channels)."""
    if node.op != "QConv" or node.attrs["group"] != 1:
        return 0
    _, c, h, w = g.type(node.inputs[0]).shape
    axis = 3 if g.type(node.outputs[0]).shape[2] == 1 else 2
    k, _, d, _, _ = _window(g, node, axis)
    p = node.attrs["pads"]
    across = w + p[1] + p[3] if axis == 2 else h + p[0] + p[2]
    return ((k - 1) * d + 1) * across * -(-c // lanes)


def _groups_note(g: Graph, name: str, fit: Fit) -> str:
    """Why layer `name` (which overflows ACT in its narrowest bands) is not in channel groups, for the messages."""
    node = next((nd for nd in g.nodes if nd.name == name), None)
    if node is None or node.op not in CHANNEL_SPLITTABLE:
        return ""
    group = g.metadata.get("tile_groups", {}).get(name)
    part = f", one of {group['groups']} channel groups of {group['of']!r}" if group else ""
    shape = g.type(node.outputs[0]).shape
    if node.op == "QConv" and node.attrs["group"] == 1:
        row = "column" if shape[2] == 1 else "row"
        return (f", nor into groups of its output channels{part} (each would still read the "
                f"{_whole_input_lines(g, node, fit.lanes)} lines of the input {row}s one output {row} needs)")
    if len(shape) == 4 and shape[1] <= fit.lanes:
        return f", nor into channel groups{part} (its {shape[1]} output channels are one ACT line)"
    return ", nor into channel groups (a grouped convolution that is not depthwise)" if node.op == "QConv" else ""


def _rows(g: Graph, name: str, axis: int = 2) -> int:
    """Output rows (columns: `axis` 3) of node `name`."""
    shape = g.type(next(nd for nd in g.nodes if nd.name == name).outputs[0]).shape
    return shape[axis] if len(shape) == 4 else 1


def _more_bands(g: Graph, fit: Fit, head: str, k: int, err: ActOverflow) -> int:
    """k bands of the chain starting at node `head` (at most one per output row, or column), or the clear error when
    it has as many already."""
    last = next(nd for nd in g.nodes if nd.name == fit.chains[head][-1])
    shape = g.type(last.outputs[0]).shape
    row = "column" if head in fit.columns else "row"
    rows = _rows(g, last.name, 3 if head in fit.columns else 2)
    if fit.bands.get(head, 1) >= rows:
        what = (f"layer {head!r} ({last.op}, output {list(shape)})" if len(fit.chains[head]) == 1 else
                f"the layers {_label(fit.chains[head])!r} (output {list(shape)})")
        raise UnsupportedError(
            f"{what} do{'es' * (len(fit.chains[head]) == 1)} not fit ACT even in {row} bands of one output {row} "
            f"each{' (nor in row bands)' if row == 'column' else ''}: such a band needs {err.need} ACT lines (the "
            f"input {row}s its windows read, padded, and its output {row}, in blocks of {fit.lanes} channels) and "
            f"the target has {err.have} (scratchpad.act_lines)"
            f"{_groups_note(g, head, fit) if len(fit.chains[head]) == 1 else ''}. Use a target with more act_lines, or "
            f"a model with narrower rows or fewer channels there.", [head]) from err
    return min(k, rows)
