"""report.html: one self-contained page rendered from report.json alone.

`render(report)` is a pure function of the report dict: every number on the page is read
from it (a table cell carries `data-src`, the path of its value in report.json, and
`data-value`, the value itself; the browser test checks both against report.json), and
every plot is drawn from one of its sections (hwc/report/plots.py). No scripts, no
external resources: the page views offline. `Artifact.save` calls `write` for every build.

`render_search(doc)` is the page `hwc quant-search` writes next to its quant-config.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from hwc.report import plots

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px auto;
max-width:1180px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
p.note,.note{color:#555;font-size:13px;max-width:980px}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.host td{color:#666}tr.total td{font-weight:600;border-top:2px solid #bbb}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:150px}
.card .k{font-size:11.5px;color:#666}.card .v{font-size:18px}
figure.plot{margin:8px 0 16px 0}figure.plot svg{max-width:100%;height:auto}
figcaption{font-size:12.5px;color:#555;max-width:980px}
"""


class _Page:
    """Collects the body; `num` makes a cell whose text and value both come from the report."""

    def __init__(self, report: dict):
        self.rep = report
        self.parts: list[str] = []
        self.pending: list[tuple] = []   # (index in parts, (plot function, *arguments), name, caption)

    def add(self, text: str) -> None:
        self.parts.append(text)

    def value(self, path: str):
        """The value at a JSON-pointer-like path ("layers/3/macs"; "~1" is "/", "~0" is "~")."""
        node = self.rep
        for key in path.split("/"):
            key = key.replace("~1", "/").replace("~0", "~")
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node

    def num(self, path: str, fmt: str = "{:,}", scale: float = 1.0, tag: str = "td", cls: str = "num") -> str:
        v = self.value(path)
        if v is None:
            return f'<{tag} class="{cls}">–</{tag}>'
        text = fmt.format(v * scale if scale != 1.0 else v)
        return (f'<{tag} class="{cls}" data-src="{html.escape(path)}" data-value="{html.escape(json.dumps(v))}" '
                f'data-scale="{scale!r}">{html.escape(text)}</{tag}>')

    def card(self, label: str, path: str, fmt: str = "{:,}", scale: float = 1.0, unit: str = "") -> str:
        cell = self.num(path, fmt, scale, tag="span", cls="v")
        return f'<div class="card"><div class="k">{html.escape(label)}{unit}</div>{cell}</div>'

    def plot(self, name: str, svg, caption: str) -> None:
        """A figure: `svg` is the <svg> text, or (plot function, *arguments) to draw later (`draw`)."""
        if isinstance(svg, tuple):
            self.pending.append((len(self.parts), svg, name, caption))
            self.add("")   # (its place)
            return
        self.add(_figure(name, svg, caption))

    def draw(self) -> None:
        """Draw the pending plots into their figures: in two processes where the machine has the cores (matplotlib
        takes about a second for a tile build's six plots; the page is the same either way)."""
        todo, self.pending = self.pending, []
        jobs = _jobs() if len(todo) > 1 else 1
        if jobs > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(min(jobs, len(todo)), mp_context=multiprocessing.get_context("fork")) as pool:
                svgs = list(pool.map(_draw, [thunk for _, thunk, _, _ in todo]))
        else:
            svgs = [_draw(thunk) for _, thunk, _, _ in todo]
        for (k, _, name, caption), svg in zip(todo, svgs):
            self.parts[k] = _figure(name, svg, caption)


def _figure(name: str, svg: str, caption: str) -> str:
    return f'<figure class="plot" id="plot-{name}">{svg}<figcaption>{caption}</figcaption></figure>'


def _draw(thunk: tuple) -> str:
    fn, *args = thunk
    return fn(*args)


def _jobs() -> int:
    """Processes for the plots: the same rules as the scheduler's search (fork only, from one thread)."""
    from hwc.tile.build import search_jobs

    return search_jobs()


def _ptr(key: str) -> str:
    """A dict key as one step of a data-src path."""
    return key.replace("~", "~0").replace("/", "~1")


def _esc(x) -> str:
    return html.escape(str(x))


def _shape(s) -> str:
    return "x".join(str(d) for d in s) if s else "scalar"


def render(report: dict) -> str:
    """The whole page for one build's report.json."""
    p = _Page(report)
    model, target = report.get("model", "model"), report.get("target", "?")
    p.add(f"<h1>hwc report: {_esc(model)} on {_esc(target)}</h1>")
    p.add('<p class="note">Every figure on this page is read from report.json in this folder (the same data '
          '<code>hwc report OUT</code> prints). Tile cycles come from the Python tile model, which is '
          'cycle-exact with the RTL.</p>')
    _summary(p)
    _layer_table(p)
    if report.get("timeline"):
        _timeline(p)
    if any("utilization" in entry for entry in report.get("layers", [])):
        _utilization(p)
    if report.get("memory", {}).get("buffers"):
        _memory(p)
    if report.get("quant", {}).get("histograms"):
        _quant(p)
    if report.get("energy"):
        _energy(p)
    p.draw()
    title = f"hwc report: {model} on {target}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_esc(title)}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(p.parts)
            + "\n</body></html>\n")


def write(folder: str | Path, report: dict) -> Path:
    path = Path(folder) / "report.html"
    path.write_text(render(report), encoding="utf-8")
    return path


# ---- sections --------------------------------------------------------------------------------------
def _summary(p: _Page) -> None:
    r = p.rep
    cards = [p.card("MACs per inference", "macs")]
    if "cycles" in r:
        cards.append(p.card("cycles", "cycles"))
        cards.append(p.card("time at clock", "time_us_at_clock", "{:,.1f}", unit=" (µs)"))
        cards.append(p.card("MAC utilization", "utilization", "{:.1%}"))
    mem = r.get("memory", {})
    if "peak_bytes" in mem:
        cards.append(p.card("activation memory peak", "memory/peak_bytes", unit=" (B)"))
        cards.append(p.card("lower bound", "memory/lower_bound_bytes", unit=" (B)"))
        cards.append(p.card("no sharing (naive)", "memory/naive_bytes", unit=" (B)"))
    if "weights_bytes" in r:
        cards.append(p.card("weights", "weights_bytes", unit=" (B)"))
    if r.get("energy"):
        cards.append(p.card("energy per inference", "energy/total/total_pj", "{:,.2f}", 1e-6, " (µJ)"))
    p.add('<div class="cards">' + "".join(cards) + "</div>")


def _layer_table(p: _Page) -> None:
    r = p.rep
    layers = r.get("layers", [])
    tile = "cycles" in r
    p.add("<h2>Layers</h2>")
    if not layers:
        p.add('<p class="note">This build has no per-layer figures.</p>')
        return
    cols = ["#", "layer", "op", "where", "input shapes", "output shape", "MACs"]
    if tile:
        cols += ["cycles", "time (µs)", "utilization", "weights hidden"]
    cols += ["off-chip bytes", "on-chip bytes", "energy (nJ)"]
    numeric = {"#", "MACs", "cycles", "time (µs)", "utilization", "weights hidden", "off-chip bytes", "on-chip bytes",
               "energy (nJ)"}
    head = "".join(f'<th class="{"num" if c in numeric else ""}">{_esc(c)}</th>' for c in cols)
    rows = []
    clock = r.get("time_us_at_clock", 0) / r["cycles"] if tile and r.get("cycles") else None
    e_names = {row["name"]: i for i, row in enumerate(r.get("energy", {}).get("layers", []))}
    host = r.get("host_layers", [])
    pre = [(i, h) for i, h in enumerate(host) if h.get("position") == "pre"]
    post = [(i, h) for i, h in enumerate(host) if h.get("position") != "pre"]
    n = 0

    def host_row(i, h):
        cells = [f"<td class=num>{n}</td>", f"<td>{_esc(h['name'])}</td>", f"<td>{_esc(h['op'])}</td>",
                 "<td>host</td>", f"<td>{_esc(', '.join(_shape(s) for s in h['in_shapes']))}</td>",
                 f"<td>{_esc(_shape(h['out_shape']))}</td>", p.num(f"host_layers/{i}/macs")]
        cells += ['<td class="num">–</td>'] * (4 if tile else 0) + ['<td class="num">–</td>'] * 3
        return '<tr class="host">' + "".join(cells) + "</tr>"

    for i, h in pre:
        n += 1
        rows.append(host_row(i, h))
    for i, entry in enumerate(layers):
        n += 1
        name = entry["name"] + (f" + {entry['dw_post']} (in its PPU)" if entry.get("dw_post") else "")
        cells = [f"<td class=num>{n}</td>", f"<td>{_esc(name)}</td>", f"<td>{_esc(entry['op'])}</td>",
                 f"<td>{_esc(entry.get('where', ''))}</td>",
                 f"<td>{_esc(', '.join(_shape(s) for s in entry.get('in_shapes', [])))}</td>",
                 f"<td>{_esc(_shape(entry.get('out_shape', [])))}</td>", p.num(f"layers/{i}/macs")]
        if tile:
            cells += [p.num(f"layers/{i}/cycles"), p.num(f"layers/{i}/cycles", "{:,.2f}", clock),
                      p.num(f"layers/{i}/utilization", "{:.1%}"),
                      p.num(f"layers/{i}/weight_load_hidden", "{:.0%}") if entry.get("weight_load_cycles")
                      else '<td class="num">–</td>']
        cells += [p.num(f"layers/{i}/bytes_offchip") if "bytes_offchip" in entry else '<td class="num">–</td>',
                  p.num(f"layers/{i}/bytes_onchip") if "bytes_onchip" in entry else '<td class="num">–</td>']
        k = e_names.get(entry["name"])
        cells.append(p.num(f"energy/layers/{k}/total_pj", "{:,.1f}", 1e-3) if k is not None
                     else '<td class="num">–</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    for i, h in post:
        n += 1
        rows.append(host_row(i, h))
    p.add(f"<table id=\"layers\"><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    if tile:
        p.add('<p class="note">Cycles of a layer: from the issue of its first instruction to the end of its last '
              '(weight loads of a layer overlap the previous one). Utilization = the model\'s MACs of the layer / '
              '(rows x cols x cycles). Weights hidden: the share of the cycles of the weight LOADs of the groups '
              'the layer opens (also those prefetched during earlier layers) during which the tile computed. '
              'Bytes: exact counts of the command stream (off-chip: DMA and instruction '
              'fetch; on-chip: scratchpad reads and writes). Host rows run on the host CPU around the tile.</p>')


def _timeline(p: _Page) -> None:
    tl = p.rep["timeline"]
    p.add("<h2>Timeline</h2>")
    hidden = p.rep.get("weight_load_hidden")
    extra = (f" Weight loads hidden behind compute: {p.num('weight_load_hidden', '{:.0%}', tag='span', cls='')}."
             if hidden is not None else "")
    p.plot("timeline", (plots.timeline, tl),
           "Busy intervals of the tile's units per layer, from the Python tile model (one lane each for load, "
           "compute, post-process and store). Double-buffering shows as overlap: the weight load of a layer "
           "(its load lane) runs under the compute of the layer before it." + extra)


def _utilization(p: _Page) -> None:
    layers = p.rep["layers"]
    p.add("<h2>Utilization</h2>")
    p.plot("utilization", (plots.utilization, layers, p.rep.get("utilization", 0.0)),
           "MAC utilization per layer against the 100% line (every multiplier of the array busy every cycle). "
           "Residual adds and pooling run on the post-processing unit and do no MACs.")


def _memory(p: _Page) -> None:
    mem = p.rep["memory"]
    p.add("<h2>Memory plan</h2>")
    what = "ACT scratchpad" if mem.get("step_unit") == "layer" else "activation workspace"
    p.plot("memory", (plots.memory, mem),
           f"Every buffer of the {what} as a rectangle: horizontally the schedule steps "
           f"({_esc(mem.get('step_unit'))}s) it is live, vertically its bytes. Buffers whose lifetimes do not "
           f"overlap share bytes. Peak "
           f"{p.num('memory/peak_bytes', tag='span', cls='')} B against a lower bound of "
           f"{p.num('memory/lower_bound_bytes', tag='span', cls='')} B (the most bytes live at one step) and "
           f"{p.num('memory/naive_bytes', tag='span', cls='')} B without sharing.")


def _quant(p: _Page) -> None:
    q = p.rep["quant"]
    p.add("<h2>Quantization</h2>")
    p.plot("quant", (plots.quant_histograms, q),
           "Calibration histogram of every int8 tensor (64 bins over the observed range, log scale), the chosen "
           "range shaded between green lines, and the share of calibration values clipped by it.")
    rows = []
    for name, t in sorted(q["tensors"].items()):
        base = f"quant/tensors/{_ptr(name)}"
        rows.append(f"<tr><td>{_esc(name)}</td><td>{_esc(t['method'])}</td>" + p.num(f"{base}/scale", "{:.5g}")
                    + p.num(f"{base}/zero_point", "{:d}") + p.num(f"{base}/range/0", "{:.4g}")
                    + p.num(f"{base}/range/1", "{:.4g}") + p.num(f"{base}/clipped", "{:.4%}") + "</tr>")
    p.add('<table id="quant"><thead><tr><th>tensor</th><th>method</th><th class="num">scale</th>'
          '<th class="num">zero point</th><th class="num">range lo</th><th class="num">range hi</th>'
          '<th class="num">clipped</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")


def _energy(p: _Page) -> None:
    e = p.rep["energy"]
    p.add("<h2>Energy</h2>")
    p.add(f'<p class="note">Per inference, {_esc(e["basis"])}. Prices: {_esc(e["table"]["source"])}.</p>')
    p.plot("energy-variants", (plots.energy_variants, e),
           "Energy per inference as built and with each optimization undone: what each one saves. Weight "
           "double-buffering saves time (cycles), not events, so its dynamic energy is the same.")
    rows = []
    for i, v in enumerate(e["variants"]):
        base = f"energy/variants/{i}"
        if "error" in v:
            rows.append(f"<tr><td>{_esc(v['label'])}</td><td colspan=7>{_esc(v['error'])}</td></tr>")
            continue
        cyc = p.num(f"{base}/cycles") if v.get("cycles") is not None else '<td class="num">–</td>'
        rows.append(f"<tr><td>{_esc(v['label'])}</td>{cyc}" + p.num(f"{base}/compute_pj", "{:,.3f}", 1e-6)
                    + p.num(f"{base}/onchip_pj", "{:,.3f}", 1e-6) + p.num(f"{base}/offchip_pj", "{:,.3f}", 1e-6)
                    + p.num(f"{base}/total_pj", "{:,.3f}", 1e-6) + p.num(f"{base}/vs_as_built_pj", "{:+,.3f}", 1e-6)
                    + "</tr>")
    p.add('<table id="energy-variants"><thead><tr><th>variant</th><th class="num">cycles</th>'
          '<th class="num">compute (µJ)</th><th class="num">on-chip memory (µJ)</th>'
          '<th class="num">off-chip memory (µJ)</th><th class="num">total (µJ)</th>'
          '<th class="num">vs as built (µJ)</th></tr></thead><tbody>'
          + "".join(rows) + "</tbody></table>")
    p.plot("energy-layers", (plots.energy_layers, e),
           "Energy per layer, split into compute, on-chip memory (scratchpads / caches) and off-chip memory "
           "(external memory: weights, activations in and out, instruction fetch).")
    rows = []
    for i, row in enumerate(e["layers"]):
        base = f"energy/layers/{i}"
        rows.append(f"<tr><td>{_esc(row['name'])}</td><td>{_esc(row['op'])}</td>"
                    + p.num(f"{base}/compute_pj", "{:,.1f}", 1e-3) + p.num(f"{base}/onchip_pj", "{:,.1f}", 1e-3)
                    + p.num(f"{base}/offchip_pj", "{:,.1f}", 1e-3) + p.num(f"{base}/total_pj", "{:,.1f}", 1e-3)
                    + "</tr>")
    rows.append('<tr class="total"><td>total</td><td></td>' + p.num("energy/total/compute_pj", "{:,.1f}", 1e-3)
                + p.num("energy/total/onchip_pj", "{:,.1f}", 1e-3) + p.num("energy/total/offchip_pj", "{:,.1f}", 1e-3)
                + p.num("energy/total/total_pj", "{:,.1f}", 1e-3) + "</tr>")
    p.add('<table id="energy-layers"><thead><tr><th>layer</th><th>op</th><th class="num">compute (nJ)</th>'
          '<th class="num">on-chip (nJ)</th><th class="num">off-chip (nJ)</th><th class="num">total (nJ)</th>'
          "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    prices = "".join(f"<tr><td>{_esc(k)}</td>{p.num(f'energy/table/pj/{k}', '{:g}')}</tr>"
                     for k in e["table"]["pj"])
    counts = "".join(f"<tr><td>{_esc(k)}</td>{p.num(f'energy/events/{k}')}</tr>" for k in e["events"])
    p.add('<div class="cards"><div><table id="energy-prices"><thead><tr><th>event</th><th class="num">pJ</th></tr>'
          f"</thead><tbody>{prices}</tbody></table></div><div><table id=\"energy-events\"><thead><tr><th>event "
          f'(whole inference)</th><th class="num">count</th></tr></thead><tbody>{counts}</tbody></table></div></div>')


# ---- quant-search ---------------------------------------------------------------------------------
def render_search(doc: dict) -> str:
    """The quant-search page: accuracy (or SQNR) against cost, every candidate, the pick marked."""
    p = _Page(doc)
    p.add(f"<h1>hwc quant-search: {_esc(doc['model'])} for {_esc(doc['target'])}</h1>")
    p.add(f'<p class="note">{_esc(doc["summary"])}</p>')
    p.plot("search", plots.search(doc), f"{_esc(doc['y_label'])} against cost for every configuration measured; "
           "the star is the pick (the cheapest within the loss budget).")
    rows = []
    for i, r in enumerate(doc["results"]):
        base = f"results/{i}"
        mark = "★ " if i == doc.get("picked") else ""
        if r.get("error"):
            rows.append(f"<tr><td class=num>{i + 1}</td><td>{mark}{_esc(r['config'])}</td>"
                        f"<td colspan=5>{_esc(r['error'])}</td></tr>")
            continue
        rows.append(f"<tr><td class=num>{i + 1}</td><td>{mark}{_esc(r['config'])}</td>"
                    + p.num(f"{base}/stage") + p.num(f"{base}/metric", "{:.2%}") + p.num(f"{base}/loss", "{:+.2%}")
                    + (p.num(f"{base}/sqnr_db", "{:.2f}") if r.get("sqnr_db") is not None else "<td>–</td>")
                    + p.num(f"{base}/cost") + "</tr>")
    p.add(f'<table id="search"><thead><tr><th>#</th><th>configuration</th><th class="num">stage</th>'
          f'<th class="num">{_esc(doc["metric"])}</th><th class="num">loss</th><th class="num">SQNR dB</th>'
          f'<th class="num">cost</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>hwc quant-search: '
            f"{_esc(doc['model'])}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(p.parts)
            + "\n</body></html>\n")
