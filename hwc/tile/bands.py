"""Activations larger than ACT: row bands and segment cuts (the int8 graph rewritten before scheduling).

A tile segment keeps every activation it computes in ACT. When a segment's activations do not fit
(`Codegen.plan_act` raises `ActOverflow`), `fit_act` rewrites the int8 graph and schedules again:

- **Row bands.** A layer whose input and output alone take much of ACT is split into bands of output
  rows: band b is the same layer (weights, requantization) over rows [y0, y1) of the output, reading
  the input rows those need (its halo included: a 3x3 stride-1 band reads two rows more than it
  writes) through a Slice, with the layer's top pad on the first band only and the bottom pad on the
  last. A Concat along the rows gives the layer's output. Convolution rows are independent, so the
  bands compute exactly the unbanded layer's bits (the int8 reference runs the rewritten graph).
- **Cuts.** A segment whose layers each fit but whose live activations together do not (a long
  residual, many tensors) is cut in two at its middle layer: the tensors live across the cut go to
  external memory and come back as the next segment's inputs.

Slice and Concat run on the host between tile segments (the partition shows them, with the reason),
so the bands and the cut segments are separate tile programs: each loads its weights and input
before it computes (the first LOAD is not hidden) and stores its output at the end. The host's copies
are not in the tile's cycle count; the tile's LOADs and STOREs of the bands are.

The rewrite repeats, doubling a layer's bands, until every segment fits, or stops with a clear error
when a layer does not fit even with one output row per band (or is one the tile cannot band: a global
pool, a fully connected layer over the whole input).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwc.errors import UnsupportedError
from hwc.ir.graph import Graph, QuantParams

#: Banded layers keep their estimated input + output lines below this share of ACT (the estimate ignores the
#: stacking and alignment the scheduler picks; a band that still overflows doubles the band count).
BAND_SHARE = 0.8

#: Node ops a row band can split: windows over the rows (convolution, pooling) and element-wise ops.
BANDABLE = ("QConv", "QAvgPool", "MaxPool", "QRequant", "QAdd")

#: At most this many rewrites of one model (each reschedules it).
MAX_ROUNDS = 24


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


@dataclass
class Fit:
    """What `fit_act` did: band counts of the split layers and the cut points (nodes starting a segment)."""

    bands: dict[str, int] = field(default_factory=dict)
    cuts: list[str] = field(default_factory=list)

    def as_report(self) -> dict:
        return {"bands": dict(sorted(self.bands.items())), "cuts": list(self.cuts)}


def describe(act_fit: dict | None) -> str | None:
    """One line for a report's `act_fit` (None when the activations fit ACT whole)."""
    if not act_fit or not (act_fit["bands"] or act_fit["cuts"]):
        return None
    parts = []
    if act_fit["bands"]:
        parts.append("in row bands: " + ", ".join(f"{k} ({v})" for k, v in act_fit["bands"].items()))
    if act_fit["cuts"]:
        parts.append("segments cut before " + ", ".join(act_fit["cuts"]))
    return "activations larger than ACT: " + "; ".join(parts) + " (the host moves the rows between segments)"


def _lines(shape, n: int, pads=(0, 0, 0, 0)) -> int:
    """ACT lines of an int8 [1, C, H, W] (or [M, K]) tensor, unstacked, with `pads`."""
    if len(shape) == 4:
        c, h, w = shape[1:]
    elif len(shape) == 2:
        c, h, w = shape[1], 1, shape[0]
    else:
        return 0
    return -(-c // n) * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])


def _window(g: Graph, node) -> tuple[int, int, int, int, int]:
    """(kernel rows, stride, dilation, top pad, bottom pad) of a node along the rows (1, 1, 1, 0, 0: element-wise)."""
    a = node.attrs
    if node.op == "QConv":
        kh = g.const(node.inputs[1]).shape[2]
    elif node.op in ("QAvgPool", "MaxPool"):
        kh = a["kernel_shape"][0]
    else:
        return 1, 1, 1, 0, 0
    p = a["pads"]
    return kh, a["strides"][0], a.get("dilations", [1, 1])[0], p[0], p[2]


def footprint(g: Graph, node, n: int) -> int:
    """Estimated ACT lines of a node's activation inputs and output (unstacked, its own pads on the input)."""
    pads = node.attrs.get("pads", (0, 0, 0, 0)) if node.op in ("QConv", "QAvgPool", "MaxPool") else (0,) * 4
    ins = [i for i in node.inputs[:2 if node.op == "QAdd" else 1] if i and g.const(i) is None]
    total = sum(_lines(g.type(i).shape, n, pads) for i in ins)
    return total + _lines(g.type(node.outputs[0]).shape, n, (1, 1, 1, 1))


def band_node(g: Graph, name: str, bands: int) -> list[str]:
    """Replace node `name` by `bands` row bands: Slice(s) -> the node on the band -> Concat. Returns the band nodes'
    names. The graph keeps the node's output name (its consumers and the graph outputs are unchanged)."""
    node = next(nd for nd in g.nodes if nd.name == name)
    at = g.node_index(node)
    out = node.outputs[0]
    oshape = g.type(out).shape
    ho = oshape[2]
    kh, sh, dh, pt, _ = _window(g, node)
    data_in = [0, 1] if node.op == "QAdd" else [0]
    h_in = g.type(node.inputs[0]).shape[2]
    def reads(y0, y1):   # the input rows output rows [y0, y1) read, and the pads above and below them
        i0, i1 = y0 * sh - pt, (y1 - 1) * sh - pt + (kh - 1) * dh + 1
        return max(0, i0), min(h_in, i1), max(0, -i0), max(0, i1 - h_in)

    cuts = [0]
    for y in sorted({round(b * ho / bands) for b in range(1, bands + 1)}):
        i0, i1, _, _ = reads(cuts[-1], y)
        if i1 > i0:   # (a band whose window is all padding, from a pad of a stride or more, joins the next)
            cuts.append(y)
    if cuts[-1] != ho:   # (or the one before, at the bottom)
        cuts[-1:] = [ho] if len(cuts) > 1 else [0, ho]
    g.nodes.remove(node)
    new, parts = [], []
    for b in range(len(cuts) - 1):
        y0, y1 = cuts[b], cuts[b + 1]
        i0, i1, top, bottom = reads(y0, y1)
        inputs = list(node.inputs)
        for k in data_in:
            src = node.inputs[k]
            shape = g.type(src).shape
            sl = g.make_node("Slice", [src], {"starts": [0, 0, i0, 0], "ends": [shape[0], shape[1], i1, shape[3]],
                                              "steps": [1, 1, 1, 1]},
                             name=g.fresh(f"{name}.band{b}.in{k}"), index=at + len(new))
            g.values[sl.outputs[0]].quant = _copy_quant(g.values[src].quant)
            inputs[k] = sl.outputs[0]
            new.append(sl)
        attrs = dict(node.attrs)
        if "pads" in attrs:
            p = list(attrs["pads"])
            attrs["pads"] = [top, p[1], bottom, p[3]]
        bn = g.make_node(node.op, inputs, attrs, name=g.fresh(f"{name}.band{b}"), index=at + len(new))
        if g.type(bn.outputs[0]).shape[2] != y1 - y0:
            raise AssertionError(f"band {b} of {name}: {g.type(bn.outputs[0]).shape} rows != {y1 - y0}")
        g.values[bn.outputs[0]].quant = _copy_quant(g.values[out].quant)
        new.append(bn)
        parts.append(bn.outputs[0])
    cat = g.make_node("Concat", parts, {"axis": 2}, name=g.fresh(f"{name}.bands"), outputs=[g.fresh(out + ".cat")],
                      index=at + len(new))
    # the Concat writes the node's old output name: rename its fresh output back
    tmp = cat.outputs[0]
    v = g.values.pop(tmp)
    quant = g.values[out].quant
    del g.values[out]
    v.name = out
    v.quant = quant
    g.values[out] = v
    cat.outputs[0] = out
    return [nd.name for nd in new if nd.op == node.op]


def _copy_quant(q: QuantParams | None) -> QuantParams | None:
    return None if q is None else QuantParams(q.scale.copy(), q.zero_point.copy(), q.axis)


def rewrite(g: Graph, fit: Fit) -> Graph:
    """A copy of the int8 graph with `fit`'s bands and cuts applied (g is not changed)."""
    g = g.copy()
    why = {}
    for name, k in sorted(fit.bands.items()):
        for b in band_node(g, name, k):
            why[b] = name
    g.metadata["tile_cuts"] = list(fit.cuts)
    g.metadata["tile_bands"] = {b: {"of": of, "bands": fit.bands[of]} for b, of in why.items()}
    return g


def fit_act(g: Graph, target: dict, schedule):
    """Schedule the int8 graph (`schedule(graph)` -> segments), rewriting it into row bands and cut segments
    while a segment's activations do not fit ACT. Returns (graph, segments, Fit)."""
    have = target["scratchpad"]["act_lines"]
    room = int(BAND_SHARE * have)
    fit = Fit()
    cur = g
    for _ in range(MAX_ROUNDS):
        try:
            return cur, schedule(cur), fit
        except ActOverflow as e:
            err = e
        nodes = {nd.name: nd for nd in cur.nodes}
        band_nodes = cur.metadata.get("tile_bands", {})
        sizes = {x: v for x, v in err.layers.items() if x in nodes}
        if len(sizes) == 1 and next(iter(sizes)) in band_nodes:   # a band alone overflows: more bands
            orig = band_nodes[next(iter(sizes))]["of"]
            k = fit.bands[orig]
            fit.bands[orig] = _more_bands(g, fit, orig, max(k + 1, -(-k * err.need // room)), err)
        else:
            cands = {x: v for x, v in sizes.items() if nodes[x].op in BANDABLE and x not in band_nodes}
            big = max(cands, key=lambda x: (cands[x], x), default=None)
            if big is not None and (len(sizes) == 1 or cands[big] > room // 2):
                fit.bands[big] = _more_bands(g, fit, big, max(2, -(-cands[big] // room)), err)
            elif len(sizes) >= 2:
                fit.cuts.append(list(sizes)[len(sizes) // 2])
            else:
                (x,) = sizes or [err.items[0] if err.items else "?"]
                op = nodes[x].op if x in nodes else "?"
                raise UnsupportedError(f"layer {x!r} ({op}) does not fit ACT and cannot be split into row bands (it "
                                       f"reads its whole input at once): {err}", [x]) from err
        cur = rewrite(g, fit)
    raise err


def _more_bands(g: Graph, fit: Fit, name: str, k: int, err: ActOverflow) -> int:
    """k bands of node `name` (at most one per output row), or the clear error when it has as many already."""
    node = next(nd for nd in g.nodes if nd.name == name)
    shape = g.type(node.outputs[0]).shape
    rows = shape[2] if len(shape) == 4 else 1
    if fit.bands.get(name, 1) >= rows:
        raise UnsupportedError(
            f"layer {name!r} ({node.op}, output {list(shape)}) does not fit ACT even in row bands of one output row"
            f" each: {err}", [name]) from err
    return min(k, rows)
