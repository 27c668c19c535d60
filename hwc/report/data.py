"""The report's data, computed once at build time and kept in report.json.

report.html (hwc/report/html.py) and `hwc report` (hwc/report/text.py) only render what is
here, so every figure they show is a figure of report.json. Two entry points:

- `add_tile_data(report, target, plan, prog, res)` (called by hwc.tile.build.build_tile,
  which has the schedule and its Python-model run): per layer its shapes, exact event
  counts and bytes moved; the timeline (busy intervals per layer and kind of work); the
  ACT memory plan as buffers (offset, size, first and last schedule step).
- `complete(art)` (called by hwc.build for every target): the model name, host layers,
  quantization histograms, the memory plan of a CPU build, and the energy estimate with
  its variants (tile: weight double-buffering off and thin-matrix stacking off, rebuilt
  and rerun; every target: float32 instead of int8, or int8 instead of float32).

Everything is deterministic: no timestamps and no wall-clock times.
"""

from __future__ import annotations

from hwc import isa
from hwc.analysis import node_macs
from hwc.report import energy as en
from hwc.report import events as ev

#: Timeline kinds, in drawing order, and the opcodes of each.
KINDS = ("load", "compute", "post", "store")
_KIND_OF = {isa.Op.LOAD: 0, isa.Op.GEMM: 1, isa.Op.PPU: 2, isa.Op.VEC: 2, isa.Op.FILL: 2, isa.Op.STORE: 3}
OTHER = "(I/O, parameters)"


# ---- tile: from the schedule and its model run ---------------------------------------------------
def add_tile_data(report: dict, target: dict, plan, prog, res) -> None:
    """Per-layer shapes/events/bytes, the timeline and the ACT buffers, into a tile report."""
    from hwc.tile.layers import reads
    n = target["array"]["rows"]
    owner = ev.weight_load_owner(prog.program, prog.insn_layer, n, target["scratchpad"]["wgt_bank_blocks"])
    layer_ev, other_ev = ev.tile_events(prog.program, owner, len(prog.layers), target)
    index = {rec["name"]: i for i, rec in enumerate(prog.layers)}
    for entry in report["layers"]:
        layer = plan.layers[index[entry["name"]]]
        e = layer_ev[index[entry["name"]]]
        srcs = reads(layer)
        entry["in_shapes"] = [list(plan.tensors[s].graph_shape) for s in srcs]
        entry["out_shape"] = list(plan.tensors[layer.dst].graph_shape)
        entry["events"] = e
        entry["bytes_offchip"] = int(sum(v for k, v in e.items() if ev.EVENTS[k][0] == "offchip"))
        entry["bytes_onchip"] = int(sum(v for k, v in e.items() if ev.EVENTS[k][0] == "onchip"))
    report["other_events"] = other_ev
    report["timeline"] = timeline(report, prog, res, owner)
    report["memory"]["buffers"] = [
        {"name": b["name"], "offset": b["offset"] * n, "size": b["size"] * n, "start": b["start"], "end": b["end"]}
        for b in sorted(prog.act_plan.get("buffers", []), key=lambda b: (b["start"], b["offset"], b["name"]))]
    report["memory"]["step_unit"] = "layer"


def timeline(report: dict, prog, res, owner: list[int]) -> dict:
    """Busy intervals [issue + 1, end) of every instruction, merged per (row, kind): one row per
    reported layer plus a last row for the rest (inputs, outputs, parameters)."""
    names = [entry["name"] for entry in report["layers"]]
    row_of_layer = {i: names.index(rec["name"]) for i, rec in enumerate(prog.layers) if rec["name"] in names}
    other = len(names)
    raw = []
    for k, ins in enumerate(prog.program):
        kind = _KIND_OF.get(ins.op)
        if kind is None:
            continue
        s, e = int(res.issue[k]) + 1, int(res.end[k])
        if e > s:
            raw.append((row_of_layer.get(owner[k], other), kind, s, e))
    bars: list[list[int]] = []
    for row, kind, s, e in sorted(raw):
        last = bars[-1] if bars else None
        if last and last[0] == row and last[1] == kind and s <= last[3]:
            last[3] = max(last[3], e)
        else:
            bars.append([row, kind, s, e])
    return {"unit": "cycles", "cycles": int(res.cycles), "rows": names + [OTHER], "kinds": list(KINDS),
            "bars": bars}


# ---- every target: at the end of hwc.build -------------------------------------------------------
def complete(art) -> None:
    """Add the target-independent report data to `art.report` (see the module docstring)."""
    rep, g = art.report, art.graph
    rep["model"] = g.name
    quant = g.metadata.get("quant")
    if quant and "quant" in rep and quant.get("histograms"):
        rep["quant"]["histograms"] = quant["histograms"]
    if art.kind == "tile":
        _tile_host_layers(art)
        _tile_energy(art)
    else:
        layers, other = _graph_layers(art)
        _graph_energy(art, layers, other)
    rep["sizes"] = sizes(art)


def sizes(art) -> dict:
    """report.json's `sizes`: the bytes of what a deployment holds. Every target: `weights_bytes` (weights.bin)
    and `activations_bytes` (the planned peak of the activations: the workspace, or the tile's ACT scratchpad).
    cpu adds `object_bytes` (model.o) and `io_bytes` (the input/output area); tile adds `program_bytes`
    (program.bin) and `dram_bytes` (the external memory the tile addresses: weights, I/O, program)."""
    rep = art.report
    out = {"weights_bytes": rep.get("weights_bytes", 0),
           "activations_bytes": rep.get("memory", {}).get("peak_bytes", 0)}
    if art.kind == "cpu":
        out.update(object_bytes=rep["object_bytes"], io_bytes=rep["io_bytes"])
    if art.kind == "tile":
        out.update(program_bytes=len(art.program),
                   dram_bytes=max((r["offset"] + r["size"] for r in art.memory_map.get("dram", [])), default=0))
    return out


def _shape_list(g, names) -> list[list[int]]:
    return [list(g.type(x).shape) for x in names if x]


def _tile_host_layers(art) -> None:
    """The nodes the host runs around the tile (Quantize, Dequantize, Softmax, ...)."""
    g, rep = art.graph, art.report
    tile_nodes = [i for i, nd in enumerate(g.nodes)
                  if any(d["node"] == nd.name and d["where"] == "tile" for d in rep.get("partition", []))]
    first = min(tile_nodes) if tile_nodes else len(g.nodes)
    last = max(tile_nodes) if tile_nodes else -1
    host = {d["node"] for d in rep.get("partition", []) if d["where"] == "host"}
    rep["host_layers"] = [
        {"name": nd.name, "op": nd.op, "where": "host",
         "position": "pre" if i < first else "post" if i > last else "between",
         "in_shapes": _shape_list(g, [x for x in nd.inputs if x and not g.values[x].is_const]),
         "out_shape": list(g.type(nd.outputs[0]).shape), "macs": node_macs(g, nd)}
        for i, nd in enumerate(g.nodes) if nd.name in host]


def _split(events: dict, pj: dict) -> dict:
    return en.energy(events, pj)


def _tile_energy(art) -> None:
    from hwc.tile.build import build_tile

    rep, target = art.report, art.target
    table = en.energy_table(target)
    pj = table["pj"]
    layers = [{"name": entry["name"], "op": entry["op"], **_split(entry["events"], pj)} for entry in rep["layers"]]
    layers.append({"name": OTHER, "op": "", **_split(rep["other_events"], pj)})
    total_ev = ev.clean(_total_events(rep))
    variants = [{"key": "as_built", "label": "as built (int8)", "cycles": rep["cycles"], **_split(total_ev, pj)}]
    # each variant keeps the build's tiling and load choices (`pin`): one program each, not another search
    for key, label, kw in (("no_double_buffer", "weight double-buffering off",   # the same choices otherwise
                            {"double_buffer": False, "pin": rep["schedule"]}),
                           ("no_stacking", "stacking off (no im2col, no space-to-depth)",
                            {"stack": False, "im2col": False, "pin": rep["schedule"]})):
        try:
            alt = build_tile(art.graph, target, hdl=False, **kw).report
        except Exception as e:  # e.g. a variant that does not fit the scratchpad: say so
            variants.append({"key": key, "label": label, "error": f"{type(e).__name__}: {e}"})
            continue
        variants.append({"key": key, "label": label, "cycles": alt["cycles"],
                         **_split(ev.clean(_total_events(alt)), pj)})
    variants.append({"key": "float32", "label": "float32 instead of int8 (same schedule)", "cycles": None,
                     **_split(ev.to_fp32(total_ev), pj)})
    _deltas(variants)
    rep["energy"] = {"table": table, "precision": "int8",
                     "basis": "exact event counts of the command stream (hwc/report/events.py); dynamic energy "
                              "only; host work (quantize, dequantize, softmax) not included",
                     "events": total_ev, "layers": layers, "total": _split(total_ev, pj), "variants": variants}


def _deltas(variants: list[dict]) -> None:
    """Each variant's total minus the as-built total (positive: undoing the optimization costs energy)."""
    base = variants[0]["total_pj"]
    for v in variants:
        if "total_pj" in v:
            v["vs_as_built_pj"] = en._round(v["total_pj"] - base)


def _total_events(rep: dict) -> dict:
    total = dict(rep.get("other_events", {}))
    for entry in rep["layers"]:
        total = ev.add(total, entry["events"])
    return total


# ---- CPU and reference targets: a graph-level estimate -------------------------------------------
def _graph_layers(art) -> tuple[list[dict], dict]:
    """Per-operation rows (CPU: the lowered kernels; reference: the graph's nodes) with their
    events; the CPU build also gets its memory plan as buffers."""
    g, rep = art.graph, art.report
    if art.kind == "cpu":
        return _cpu_layers(art)
    rows, per_node = [], ev.graph_events(g)[0]
    for nd, e in zip(g.nodes, per_node):
        rows.append({"name": nd.name, "op": nd.op, "where": "host",
                     "in_shapes": _shape_list(g, [x for x in nd.inputs if x and not g.values[x].is_const]),
                     "out_shape": list(g.type(nd.outputs[0]).shape), "macs": node_macs(g, nd),
                     "events": e, **_bytes(e)})
    rep["layers"] = rows
    return rows, ev.graph_events(g)[1]


def _bytes(e: dict) -> dict:
    return {"bytes_offchip": int(sum(v for k, v in e.items() if ev.EVENTS[k][0] == "offchip")),
            "bytes_onchip": int(sum(v for k, v in e.items() if ev.EVENTS[k][0] == "onchip"))}


def _cpu_layers(art) -> tuple[list[dict], dict]:
    from hwc.backends.cpu.lowering import lower_for_cpu
    from hwc.lower.memplan import intervals_of

    g, rep = art.graph, art.report
    prog, plan = lower_for_cpu(g.copy(), art.target.get("alignment", 64))
    by_name = {entry["name"]: entry for entry in rep.get("layers", [])}
    rows = []
    for ins in prog.instrs:
        acts = [b for b in ins.reads if prog.storage(b).region != "weight"]
        wgts = [b for b in ins.reads if prog.storage(b).region == "weight"]
        out = prog.buffers[ins.writes[0]].type if ins.writes else None
        macs = node_macs(g, ins.node) if ins.node is not None else 0
        int8 = bool(ins.reads) and prog.buffers[ins.reads[0]].type.dtype in ("int8", "uint8")
        e: dict = {}
        if macs:
            e["mac_int8" if int8 else "mac_fp32"] = macs
        else:
            e["add_int32" if int8 else "add_fp32"] = sum(prog.buffers[w].type.size for w in ins.writes)
        e["act_read_bytes"] = sum(prog.buffers[b].nbytes for b in acts)
        e["wgt_read_bytes"] = sum(prog.buffers[b].nbytes for b in wgts)
        e["act_write_bytes"] = sum(prog.buffers[b].nbytes for b in ins.writes)
        e = ev.clean(e)
        entry = by_name.get(ins.name, {"name": ins.name, "op": ins.op})
        entry.update({"where": "cpu", "in_shapes": [list(prog.buffers[b].type.shape) for b in acts],
                      "out_shape": list(out.shape) if out is not None else [], "macs": macs, "events": e,
                      **_bytes(e)})
        rows.append(entry)
    rep["layers"] = rows
    ivs = intervals_of(prog, list(range(len(prog.instrs))))
    rep.setdefault("memory", {})
    rep["memory"]["buffers"] = [
        {"name": iv.name, "offset": plan.offsets[iv.name], "size": iv.size, "start": iv.start, "end": iv.end}
        for iv in sorted(ivs, key=lambda iv: (iv.start, plan.offsets[iv.name], iv.name))]
    rep["memory"]["step_unit"] = "instruction"
    other = {"dram_wgt_read_bytes": sum(b.nbytes for b in prog.region_buffers("weight")),
             "dram_act_read_bytes": sum(g.type(i).nbytes for i in g.inputs),
             "dram_act_write_bytes": sum(g.type(o).nbytes for o in g.outputs)}
    return rows, ev.clean(other)


def _graph_energy(art, layers: list[dict], other: dict) -> None:
    rep = art.report
    table = en.energy_table(art.target)
    pj = table["pj"]
    total_ev = other
    for row in layers:
        total_ev = ev.add(total_ev, row["events"])
    total_ev = ev.clean(total_ev)
    int8 = bool(art.info.get("int8"))
    rows = [{"name": r["name"], "op": r["op"], **_split(r["events"], pj)} for r in layers]
    rows.append({"name": "(weights, inputs, outputs from memory)", "op": "", **_split(other, pj)})
    variants = [{"key": "as_built", "label": f"as built ({'int8' if int8 else 'float32'})", "cycles": None,
                 **_split(total_ev, pj)}]
    if int8:
        variants.append({"key": "float32", "label": "float32 instead of int8", "cycles": None,
                         **_split(ev.to_fp32(total_ev), pj)})
    else:
        variants.append({"key": "int8", "label": "int8 instead of float32", "cycles": None,
                         **_split(ev.to_int8(total_ev), pj)})
    _deltas(variants)
    what = "the lowered kernels" if art.kind == "cpu" else "the graph's nodes"
    rep["energy"] = {"table": table, "precision": "int8" if int8 else "fp32",
                     "basis": f"estimate from {what}: MACs, one operation per output element elsewhere, every "
                              f"input and output of an operation read/written once on chip, weights and model "
                              f"I/O once off chip; no instruction overhead (a lower bound for a CPU)",
                     "events": total_ev, "layers": rows, "total": _split(total_ev, pj), "variants": variants}
