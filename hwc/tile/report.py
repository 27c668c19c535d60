"""Figures of a tile build, from one run of the Python tile model (timing is data-independent).

Per layer: cycles (first issue to last completion of its instructions), MACs, utilization
= MACs / (rows * cols * cycles), array lines streamed, bytes loaded. Whole model: cycles,
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


def tile_report(target: dict, plan: TilePlan, prog: TileProgram, res) -> dict:
    peak = target["array"]["rows"] * target["array"]["cols"]
    ops = res.ops
    insns = prog.program
    layer_of = np.array(prog.insn_layer)
    compute_ops = {int(isa.Op.GEMM), int(isa.Op.PPU), int(isa.Op.VEC), int(isa.Op.FILL)}
    compute = _union([(int(res.issue[k]) + 1, int(res.end[k])) for k in range(len(ops)) if int(ops[k]) in compute_ops])
    wloads = [(int(res.issue[k]) + 1, int(res.end[k])) for k in range(len(ops))
              if int(ops[k]) == isa.Op.LOAD and insns[k].get("mem") == isa.Mem.WGT]
    wl = _union(wloads)
    wl_total = sum(e - s for s, e in wl)
    hidden = _overlap(wl, compute)
    layers = []
    for li, rec in enumerate(prog.layers):
        idx = np.nonzero(layer_of == li)[0]
        if not len(idx):
            continue
        first, last = int(res.issue[idx].min()), int(res.end[idx].max())
        cycles = max(1, last - first)
        lines = sum(insns[k].get("n_outer") * insns[k].get("n_inner") for k in idx if insns[k].op == isa.Op.GEMM)
        layers.append({
            "name": rec["name"], "op": rec["op"], "where": "tile", "macs": rec["macs"], "cycles": cycles,
            "start": first, "end": last,
            "utilization": rec["macs"] / (peak * cycles),
            "array_lines": int(lines),
            "array_busy": int(lines) / cycles,
            "instructions": int(len(idx)),
        })
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
