"""`hwc report OUT`: report.json as text tables (rich), the terminal twin of report.html.

Every number printed is a number of report.json (formatted); the plots of the HTML page
become a character timeline, utilization bars and histogram sparklines.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

BLOCKS = " ▁▂▃▄▅▆▇█"
#: timeline characters by kind, and the order in which they win a shared character cell
KIND_CHAR = {"compute": "█", "post": "▓", "load": "░", "store": "▄"}
KIND_RANK = ("compute", "post", "load", "store")
STYLE = {"compute": "dark_orange", "post": "green", "load": "blue", "store": "red"}

#: report["schedule"][k]["im2col"]: the host's expansion of a thin first layer (hwc.tile.build.schedule)
_IM2COL = {True: "yes", "rows": "by rows (stacked outputs)", "windows": "windows of a 1-d signal", False: "no"}


def _shape(s) -> str:
    return "x".join(str(d) for d in s) if s else "scalar"


def _bar(frac: float, width: int = 12) -> str:
    cells = max(0.0, min(frac, 1.0)) * width
    full = int(cells)
    part = int(round((cells - full) * 8))
    return ("█" * full + (BLOCKS[part] if part and full < width else "")).ljust(width)


def sparkline(counts: list[int], width: int = 16) -> str:
    """A histogram in `width` characters (counts summed into equal groups, log-scaled heights)."""
    import math

    if not counts:
        return ""
    step = max(1, len(counts) // width)
    groups = [sum(counts[i:i + step]) for i in range(0, len(counts), step)]
    top = max(math.log1p(g) for g in groups) or 1.0
    return "".join(BLOCKS[int(round(8 * math.log1p(g) / top))] for g in groups)


def summary(rep: dict) -> Table:
    t = Table(title=f"hwc report: {rep.get('model', 'model')} on {rep.get('target', '?')}", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("MACs per inference", f"{rep.get('macs', 0):,}")
    if "cycles" in rep:
        t.add_row("cycles (Python tile model = RTL)", f"{rep['cycles']:,}")
        t.add_row("time at the target clock", f"{rep['time_us_at_clock']:,.1f} µs")
        t.add_row("MAC utilization", f"{rep['utilization']:.1%}")
        t.add_row("weight loads hidden behind compute", f"{rep['weight_load_hidden']:.0%}")
    for k, ch in enumerate(rep.get("schedule") or []):  # the scheduler's choices, by the cycle model
        t.add_row(f"schedule{f' (segment {k})' if len(rep['schedule']) > 1 else ''}",
                  f"pixel tiling {ch['tiling']}, loads {ch['loads']}, host im2col {_IM2COL.get(ch['im2col'], 'no')}, "
                  f"shifted stacking {'yes' if ch.get('shift') else 'no'}, "
                  f"first weights in pieces {'yes' if ch.get('split') else 'no'}, "
                  f"bus-bound weight groups grown {'yes' if ch.get('bus_groups') else 'no'}, "
                  f"weights prefetched {'yes' if ch.get('prefetch') else 'no'}, "
                  f"max pools during their conv {'yes' if ch.get('fuse_pools') else 'no'}"
                  + (", one-row input in column chunks" if ch.get("col_chunks") else ""))
    folded = [f"{layer['name']} ({layer['fold']} pixels)" for layer in rep.get("layers") or [] if layer.get("fold")]
    if folded:   # (docs/tile-v2.md, "One-row convolutions folded")
        t.add_row("one-row convs in rows of", ", ".join(folded))
    from hwc.tile.bands import describe

    if describe(rep.get("act_fit")):
        t.add_row("activations larger than ACT", describe(rep["act_fit"]))
    mem = rep.get("memory", {})
    if "peak_bytes" in mem:
        t.add_row("activation memory: peak / lower bound / no sharing",
                  f"{mem['peak_bytes']:,} / {mem['lower_bound_bytes']:,} / {mem['naive_bytes']:,} B")
    if "weights_bytes" in rep:
        t.add_row("weights", f"{rep['weights_bytes']:,} B")
    if rep.get("energy"):
        t.add_row("energy per inference", f"{rep['energy']['total']['total_pj'] * 1e-6:,.3f} µJ")
    return t


def layers(rep: dict) -> Table | None:
    rows = rep.get("layers") or []
    if not rows:
        return None
    tile = "cycles" in rep
    t = Table(title="Layers")
    for col in ("#", "layer", "op", "where", "input shapes", "output shape", "MACs"):
        t.add_column(col, justify="right" if col in ("#", "MACs") else "left")
    if tile:
        for col in ("cycles", "µs", "utilization", "", "weights hidden"):
            t.add_column(col, justify="right" if col else "left")
    for col in ("off-chip B", "on-chip B", "energy nJ"):
        t.add_column(col, justify="right")
    energy = {r["name"]: r for r in rep.get("energy", {}).get("layers", [])}
    clock = rep["time_us_at_clock"] / rep["cycles"] if tile and rep.get("cycles") else 0.0
    host = rep.get("host_layers", [])
    n = 0

    def host_row(h):
        cells = [str(n), h["name"], h["op"], "host", ", ".join(_shape(s) for s in h["in_shapes"]),
                 _shape(h["out_shape"]), f"{h['macs']:,}"]
        t.add_row(*cells, *(["–", "–", "–", "", "–"] if tile else []), "–", "–", "–", style="dim")

    for h in (h for h in host if h.get("position") == "pre"):
        n += 1
        host_row(h)
    for entry in rows:
        n += 1
        name = entry["name"] + (f" + {entry['dw_post']} (in its PPU)" if entry.get("dw_post") else "")
        cells = [str(n), name, entry["op"], entry.get("where", ""),
                 ", ".join(_shape(s) for s in entry.get("in_shapes", [])), _shape(entry.get("out_shape", [])),
                 f"{entry.get('macs', 0):,}"]
        if tile:
            u = entry.get("utilization", 0.0)
            cells += [f"{entry['cycles']:,}", f"{entry['cycles'] * clock:,.2f}", f"{u:.1%}", _bar(u),
                      f"{entry['weight_load_hidden']:.0%}" if entry.get("weight_load_cycles") else "–"]
        e = energy.get(entry["name"])
        cells += [f"{entry['bytes_offchip']:,}" if "bytes_offchip" in entry else "–",
                  f"{entry['bytes_onchip']:,}" if "bytes_onchip" in entry else "–",
                  f"{e['total_pj'] * 1e-3:,.1f}" if e else "–"]
        t.add_row(*cells)
    for h in (h for h in host if h.get("position") != "pre"):
        n += 1
        host_row(h)
    return t


def timeline(rep: dict, width: int = 60) -> Table | None:
    tl = rep.get("timeline")
    if not tl:
        return None
    cycles = max(tl["cycles"], 1)
    kinds = tl["kinds"]
    cells = [[dict.fromkeys(kinds, 0) for _ in range(width)] for _ in tl["rows"]]
    busy = [dict.fromkeys(kinds, 0) for _ in tl["rows"]]
    for row, kind, s, e in tl["bars"]:
        busy[row][kinds[kind]] += e - s
        for c in range(s * width // cycles, min(width - 1, (e - 1) * width // cycles) + 1):
            lo, hi = max(s, c * cycles / width), min(e, (c + 1) * cycles / width)
            cells[row][c][kinds[kind]] += max(hi - lo, 0)
    t = Table(title=f"Timeline ({cycles:,} cycles, {cycles / width:,.0f} per character; "
                    + ", ".join(f"{KIND_CHAR[k]} {k}" for k in KIND_RANK if k in kinds) + ")")
    t.add_column("layer")
    t.add_column("timeline", no_wrap=True)
    for k in kinds:
        t.add_column(f"{k} cycles", justify="right")
    for r, name in enumerate(tl["rows"]):
        line = Text()
        for cell in cells[r]:
            kind = next((k for k in KIND_RANK if cell.get(k)), None)
            line.append(KIND_CHAR[kind] if kind else "·", style=STYLE[kind] if kind else "grey50")
        t.add_row(name, line, *(f"{busy[r][k]:,}" for k in kinds))
    return t


def memory(rep: dict) -> Table | None:
    mem = rep.get("memory", {})
    bufs = mem.get("buffers")
    if not bufs:
        return None
    t = Table(title=f"Memory plan: peak {mem['peak_bytes']:,} B, lower bound {mem['lower_bound_bytes']:,} B, "
                    f"no sharing {mem['naive_bytes']:,} B")
    for col, just in (("buffer", "left"), ("offset B", "right"), ("size B", "right"),
                      (f"live ({mem.get('step_unit', 'step')}s)", "right")):
        t.add_column(col, justify=just)
    for b in bufs:
        t.add_row(b["name"], f"{b['offset']:,}", f"{b['size']:,}", f"{b['start']}–{b['end']}")
    return t


def quant(rep: dict) -> Table | None:
    q = rep.get("quant")
    if not q or not q.get("tensors"):
        return None
    hists = q.get("histograms", {})
    t = Table(title=f"Quantization ({q.get('mode')}, {q.get('calibration_samples')} calibration samples)")
    for col in ("tensor", "method", "scale", "zero point", "range", "clipped", "histogram (log)"):
        t.add_column(col, justify="right" if col in ("scale", "zero point", "clipped") else "left")
    for name, tq in sorted(q["tensors"].items()):
        lo, hi = tq["range"]
        h = hists.get(tq.get("source"), {})
        t.add_row(name, tq["method"], f"{tq['scale']:.5g}", str(tq["zero_point"]), f"[{lo:.4g}, {hi:.4g}]",
                  f"{tq['clipped']:.4%}", sparkline(h.get("counts", [])))
    return t


def energy(rep: dict) -> list[Table]:
    e = rep.get("energy")
    if not e:
        return []
    v = Table(title="Energy per inference: as built and with each optimization undone (µJ)")
    for col in ("variant", "cycles", "compute", "on-chip memory", "off-chip memory", "total", "vs as built"):
        v.add_column(col, justify="left" if col == "variant" else "right")
    for var in e["variants"]:
        if "error" in var:
            v.add_row(var["label"], f"[red]{var['error'][:80]}[/red]", "", "", "", "", "")
            continue
        cyc = f"{var['cycles']:,}" if var.get("cycles") is not None else "–"
        v.add_row(var["label"], cyc, *(f"{var[k] * 1e-6:,.3f}" for k in ("compute_pj", "onchip_pj", "offchip_pj",
                                                                           "total_pj")),
                  f"{var['vs_as_built_pj'] * 1e-6:+,.3f}")
    layers_t = Table(title="Energy per layer (nJ)", caption=f"{e['basis']}. Prices: {e['table']['source']}.")
    for col in ("layer", "op", "compute", "on-chip", "off-chip", "total"):
        layers_t.add_column(col, justify="left" if col in ("layer", "op") else "right")
    for row in e["layers"]:
        layers_t.add_row(row["name"], row["op"], *(f"{row[k] * 1e-3:,.1f}" for k in ("compute_pj", "onchip_pj",
                                                                                    "offchip_pj", "total_pj")))
    tot = e["total"]
    layers_t.add_row("total", "", *(f"{tot[k] * 1e-3:,.1f}" for k in ("compute_pj", "onchip_pj", "offchip_pj",
                                                                     "total_pj")), style="bold")
    prices = Table(title="Energy table (pJ per event or byte)")
    prices.add_column("price")
    prices.add_column("pJ", justify="right")
    for k, pj in e["table"]["pj"].items():
        prices.add_row(k, f"{pj:g}")
    counts = Table(title="Events (whole inference)")
    counts.add_column("event")
    counts.add_column("count", justify="right")
    for k, n in e["events"].items():
        counts.add_row(k, f"{n:,}")
    return [v, layers_t, prices, counts]


def render(rep: dict) -> Group:
    parts = [summary(rep), layers(rep), timeline(rep), memory(rep), quant(rep), *energy(rep)]
    return Group(*[p for p in parts if p is not None])


def print_report(rep: dict, console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    console.print(render(rep))
