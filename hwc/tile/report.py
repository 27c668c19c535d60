"""Figures of a tile build, from one run of the Python tile model (timing is data-independent).

Per layer: cycles (first issue to last completion of its instructions), MACs, utilization
= MACs / (rows * cols * cycles), array lines streamed, bytes loaded, the cycles of its weight LOADs and the share
hidden behind compute. Whole model: cycles,
utilization, weight-load cycles and the share hidden behind compute (double-buffering),
unit busy cycles, memory figures of the ACT plan.
"""

from __future__ import annotations

import numpy as np

from hwc import isa
from hwc.tile.codegen import TileProgram
from hwc.tile.layers import TilePlan


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, e - s)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _compute_union(res) -> list[tuple[int, int]]:
    ops = res.ops
    compute_ops = {int(isa.Op.GEMM), int(isa.Op.PPU), int(isa.Op.VEC), int(isa.Op.FILL)}
    return _union([(int(res.issue[k]) + 1, int(res.end[k])) for k in range(len(ops)) if int(ops[k]) in compute_ops])


def weight_loads_hidden(insns: list, res, skip: int = 0) -> tuple[int, int]:
    """(cycles of weight LOADs, of those overlapping compute) on the tile model's timeline `res`, the first
    `skip` weight LOADs left out."""
    ops = res.ops
    wloads = [(int(res.issue[k]) + 1, int(res.end[k])) for k in range(len(ops))
              if int(ops[k]) == isa.Op.LOAD and insns[k].get("mem") == isa.Mem.WGT]
    wl = _union(wloads[skip:])
    return sum(e - s for s, e in wl), _overlap(wl, _compute_union(res))


def layer_weight_loads(prog: TileProgram, res) -> dict[int, tuple[float, float]]:
    """Per layer (cycles of its weight LOADs, of those overlapping compute): each weight LOAD's cycles shared
    among the layers whose GEMMs read its blocks, by blocks (`TileProgram.wgt_layer`), wherever the schedule
    placed it (a prefetch during an earlier layer counts for the layer it feeds)."""
    compute, out = _compute_union(res), {}
    for k, shares in prog.wgt_layer.items():
        span = [(int(res.issue[k]) + 1, int(res.end[k]))]
        cycles, hidden = span[0][1] - span[0][0], _overlap(span, compute)
        for li, share in shares.items():
            c, h = out.get(li, (0.0, 0.0))
            out[li] = (c + share * cycles, h + share * hidden)
    return out


def tile_report(target: dict, plan: TilePlan, prog: TileProgram, res) -> dict:
    peak = target["array"]["rows"] * target["array"]["cols"]
    insns = prog.program
    layer_of = np.array(prog.insn_layer)
    wl_total, hidden = weight_loads_hidden(insns, res)
    wloads = layer_weight_loads(prog, res)
    layers = []
    for li, rec in enumerate(prog.layers):
        idx = np.nonzero(layer_of == li)[0]
        if not len(idx):
            continue
        first, last = int(res.issue[idx].min()), int(res.end[idx].max())
        cycles = max(1, last - first)
        lines = sum(insns[k].get("n_outer") * insns[k].get("n_inner") for k in idx if insns[k].op == isa.Op.GEMM)
        wl, wh = wloads.get(li, (0, 0))
        layers.append({
            "name": rec["name"], "op": rec["op"], "where": "tile", "macs": rec["macs"], "cycles": cycles,
            "start": first, "end": last,
            "utilization": rec["macs"] / (peak * cycles),
            "array_lines": int(lines),
            "array_busy": int(lines) / cycles,
            "instructions": int(len(idx)),
            "weight_load_cycles": round(wl),
            "weight_load_hidden": wh / wl if wl else 1.0,
        } | {k: rec[k] for k in ("dw_post", "fused_into", "fold", "in_place") if k in rec})
    macs = sum(layer.macs for layer in plan.layers)
    cycles = int(res.cycles)
    return {
        "target": target["name"],
        "config_name": target["derived"]["config_name"],
        "macs": int(macs),
        "cycles": cycles,
        "utilization": macs / (peak * cycles) if cycles else 0.0,
        "time_us_at_clock": cycles / target["clock_mhz"],
        "instructions": len(insns),
        "weight_load_cycles": wl_total,
        "weight_load_hidden": hidden / wl_total if wl_total else 1.0,
        "busy": {k: int(v) for k, v in res.busy.items()},
        "bytes_loaded": int(res.bytes_loaded),
        "bytes_stored": int(res.bytes_stored),
        "array_macs_issued": int(res.macs),
        "memory": {k: prog.act_plan[k] for k in ("peak_bytes", "lower_bound_bytes", "naive_bytes")}
        | {"act_lines_used": prog.act_plan["peak_lines"], "act_lines": prog.act_plan["act_lines"],
           "dram_bytes": prog.dram_bytes},
        "layers": layers,
        "partition": plan.decisions,
        "host": {"pre": [nd.op for nd in plan.pre], "post": [nd.op for nd in plan.post],
                 "im2col": {k: v for k, v in plan.im2col.items()}},
    }


def merge_reports(parts: list[dict], peak: int) -> dict:
    """One report for a model that runs as several tile segments (host work in between):
    cycles and counts add up, layers and timeline bars follow each other in time, memory
    figures are the largest segment's (segments run one after another)."""
    if len(parts) == 1:
        return parts[0]
    out = dict(parts[0])
    offset = steps = 0
    layers, bars, rows, buffers = [], [], [], []
    other_events: dict[str, int] = {}
    for rep in parts:
        for layer in rep["layers"]:
            layers.append(dict(layer, start=layer["start"] + offset, end=layer["end"] + offset))
        tl = rep.get("timeline")
        if tl:
            n_rows = len(tl["rows"]) - 1  # the last row is "the rest" (I/O, parameters)
            for row, kind, s, e in tl["bars"]:
                bars.append([len(rows) + row if row < n_rows else -1, kind, s + offset, e + offset])
            rows += tl["rows"][:-1]
        for b in rep.get("memory", {}).get("buffers", []):
            buffers.append(dict(b, start=b["start"] + steps, end=b["end"] + steps))
        for k, v in rep.get("other_events", {}).items():
            other_events[k] = other_events.get(k, 0) + v
        offset += rep["cycles"]
        steps += len(rep["layers"]) + 1
    wl = sum(r["weight_load_cycles"] for r in parts)
    out.update({
        "macs": sum(r["macs"] for r in parts),
        "cycles": offset,
        "instructions": sum(r["instructions"] for r in parts),
        "weight_load_cycles": wl,
        "weight_load_hidden": (sum(r["weight_load_hidden"] * r["weight_load_cycles"] for r in parts) / wl
                               if wl else 1.0),
        "busy": {k: sum(r["busy"].get(k, 0) for r in parts) for k in parts[0]["busy"]},
        "bytes_loaded": sum(r["bytes_loaded"] for r in parts),
        "bytes_stored": sum(r["bytes_stored"] for r in parts),
        "array_macs_issued": sum(r["array_macs_issued"] for r in parts),
        "layers": layers,
        "host": {"pre": parts[0]["host"]["pre"], "post": parts[-1]["host"]["post"],
                 "im2col": {k: v for r in parts for k, v in r["host"]["im2col"].items()}},
    })
    out["utilization"] = out["macs"] / (peak * offset) if offset else 0.0
    out["time_us_at_clock"] = sum(r["time_us_at_clock"] for r in parts)
    mem = dict(parts[0]["memory"])
    for key in ("peak_bytes", "lower_bound_bytes", "naive_bytes", "act_lines_used"):
        mem[key] = max(r["memory"][key] for r in parts)
    mem["dram_bytes"] = parts[-1]["memory"]["dram_bytes"]
    if buffers:
        mem["buffers"] = buffers
    out["memory"] = mem
    if "timeline" in parts[0]:
        other_row = len(rows)
        out["timeline"] = dict(parts[0]["timeline"], cycles=offset, rows=rows + [parts[0]["timeline"]["rows"][-1]],
                               bars=[[other_row if b[0] < 0 else b[0], *b[1:]] for b in bars])
    if other_events:
        out["other_events"] = other_events
    return out
