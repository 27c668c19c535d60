"""Tile inputs read straight from external memory: row views of earlier segments' outputs (and of the model input).

A tile segment stores its outputs in external memory ([channel block][row][column][lane], `host.pack`), and a
later segment's input is often only rows of them: the row bands `hwc.tile.bands` cuts (a Slice of the chain's
input rows per band, a Concat of the bands' outputs) or a tensor live across a segment cut. Then no host work
is needed between the segments: the later segment's LOADs read those rows where the earlier one stored them
(a row offset, and the source's rows as the pitch between channel blocks; a Concat is one LOAD per part).

The same holds for the bands of a chain that starts at the model input: `host_sources` gives the (quantized) input a
region of its own, which the host writes once, whole. `row_views` finds, for a segment's inputs, where their rows
already are; the Placement (`hwc.tile.place`) uses
a view when the input is laid out as its source (the same stacked channels, width and pixels per line), else
the host writes the input as before. `host_work` then says which host nodes still have work, and which outputs
the host reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwc.ir.graph import Graph
from hwc.ir.ops import slice_ranges
from hwc.tile.layers import most_stacked


@dataclass(frozen=True)
class Piece:
    """Rows [lo, hi) of a view are rows [row, row + hi - lo) of `src`, stored at byte `dram` with `pitch` rows per
    channel block, laid out as `layout` (stacked channels, width, pixels per line)."""

    lo: int
    hi: int
    src: str
    dram: int
    pitch: int
    row: int
    layout: tuple[int, int, int]


def _rows_of_slice(g: Graph, nd) -> tuple[int, int] | None:
    """(r0, r1) when the Slice takes rows [r0, r1) of a [1, C, H, W] tensor and everything else whole."""
    shape = g.type(nd.inputs[0]).shape
    if len(shape) != 4 or len(nd.inputs) != 1:
        return None
    ranges = slice_ranges(nd.attrs)
    if len(ranges) != 4:
        return None
    for axis, r in enumerate(ranges):
        full = range(shape[axis])
        if axis != 2 and r != full and list(r) != list(full):
            return None
    rows = ranges[2]
    if rows.step != 1 or rows.start < 0 or rows.stop > shape[2] or rows.stop <= rows.start:
        return None
    return rows.start, rows.stop


def _pieces(g: Graph, name: str, stored: dict[str, dict], producers: dict, depth: int = 0) -> list[Piece] | None:
    """Where the rows of `name` are in external memory, in order, or None (some are not there as they are)."""
    if name in stored:
        s = stored[name]
        return [Piece(0, s["h"], name, s["dram"], s["h"], 0, (s["c"], s["w"], s["s2d"]))]
    nd = producers.get(name)
    if nd is None or depth > 64 or len(g.type(name).shape) != 4:
        return None
    q = g.values[name].quant
    for i in filter(None, nd.inputs):   # (int8 Slice and Concat copy values: a Concat's inputs are requantized first)
        qi = g.values[i].quant
        if (qi is None) != (q is None) or (q is not None and not (
                (qi.scale == q.scale).all() and (qi.zero_point == q.zero_point).all())):
            return None
    if nd.op in ("Identity", "Reshape") and g.type(nd.inputs[0]).shape == g.type(name).shape:
        return _pieces(g, nd.inputs[0], stored, producers, depth + 1)
    if nd.op == "Slice":
        rows = _rows_of_slice(g, nd)
        src = _pieces(g, nd.inputs[0], stored, producers, depth + 1) if rows else None
        if src is None:
            return None
        r0, r1 = rows
        return [Piece(max(p.lo, r0) - r0, min(p.hi, r1) - r0, p.src, p.dram, p.pitch, p.row + max(p.lo, r0) - p.lo,
                      p.layout) for p in src if p.hi > r0 and p.lo < r1]
    if nd.op == "Concat" and nd.attrs.get("axis", 0) % 4 == 2:
        out, at = [], 0
        for i in nd.inputs:
            src = _pieces(g, i, stored, producers, depth + 1)
            if src is None:
                return None
            out += [Piece(p.lo + at, p.hi + at, p.src, p.dram, p.pitch, p.row, p.layout) for p in src]
            at += g.type(i).shape[2]
        return out
    return None


def host_sources(g: Graph, plans: list, n: int) -> dict[str, dict]:
    """Host tensors (the quantized model input) whose row Slices are tile inputs (the row bands of a chain that
    starts at the model input): the host writes each once, whole, and the bands read their rows in place. Each
    laid out as the scheduler stacks a tensor by default (`layers.most_stacked`): name -> {"c", "h", "w", "s2d"}
    (stacked sizes)."""
    producers = g.producers()
    tile_made = {o for plan in plans for o in plan.outputs}
    out = {}
    for plan in plans:
        for name in plan.inputs:
            nd = producers.get(name)
            if nd is None or nd.op != "Slice" or _rows_of_slice(g, nd) is None:
                continue
            x = nd.inputs[0]
            shape = g.type(x).shape
            if x in tile_made or x in out or shape[0] != 1 or g.type(x).dtype != "int8":
                continue
            _, c, h, w = shape
            k = most_stacked(c, w, n)
            out[x] = {"c": c * k, "h": h, "w": w // k, "s2d": k}
    return out


def row_views(g: Graph, inputs: list[str], stored: dict[str, dict]) -> dict[str, tuple[Piece, ...]]:
    """The segment inputs whose rows are all in external memory already, each with its pieces (one layout only).
    `stored`: earlier segments' outputs and the host sources, name -> {"dram", "c", "h", "w", "s2d"} (laid out:
    stacked sizes)."""
    producers = g.producers()
    out = {}
    for name in inputs:
        pieces = _pieces(g, name, stored, producers)   # (also an earlier segment's output, read again whole)
        if pieces and len({p.layout for p in pieces}) == 1:
            out[name] = tuple(pieces)
    return out


def host_work(g: Graph, segments: list[dict]) -> tuple[set[str], set[str]]:
    """(the host nodes with work, the tile outputs the host reads): what the model's outputs and the tile inputs the
    host writes need (`segments`: tile_io of each, with "view" on the inputs the tile reads in external memory)."""
    producers = g.producers()
    tile_out = {v for io in segments for t in io["outputs"] for v in [t["name"], *t.get("views", [])]}
    # (a segment's view of a tile tensor: its base, which the host may have to compute, e.g. the bands' Concat)
    aliases = {v: base for io in segments for v, base in io.get("aliases", {}).items()}
    want = list(g.outputs) + [t["im2col"]["src"] if t.get("im2col") else t["name"]
                              for io in segments for t in io["inputs"] if not t.get("view")]
    want += [p["src"] for io in segments for t in io["inputs"] for p in t.get("view", ())   # (`host_sources`)
             if p["src"] not in tile_out]
    nodes: set[str] = set()
    read: set[str] = set()
    while want:
        v = want.pop()
        nd = producers.get(v)
        if v in tile_out:
            read.add(v)
            continue
        if v in aliases:
            want.append(aliases[v])
            continue
        if nd is None or nd.name in nodes:
            continue
        nodes.add(nd.name)
        want += [i for i in nd.inputs if i]
    return nodes, read
