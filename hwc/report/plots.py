"""The report's plots: matplotlib figures of report.json sections, as inline SVG text.

Every function takes a section of report.json (nothing else) and returns one `<svg>`
element. SVG output is made deterministic (fixed `svg.hashsalt`, no date in the metadata,
text kept as <text>), and every id in it gets the plot's name as a prefix so that several
SVGs can share one HTML page. The artists that carry data get a gid starting with
"data-" (after the prefix: "<plot>-data-..."), which the browser test looks for.
"""

from __future__ import annotations

import io
import math
import re

COLORS = {"load": "#4C72B0", "compute": "#DD8452", "post": "#55A868", "store": "#C44E52",
          "onchip": "#8172B3", "offchip": "#937860"}
KIND_LABELS = {"load": "load (DMA in)", "compute": "compute (GEMM)", "post": "post-process (PPU/VEC/FILL)",
               "store": "store (DMA out)"}
SPLIT = (("compute_pj", "compute", COLORS["compute"]), ("onchip_pj", "on-chip memory", COLORS["onchip"]),
         ("offchip_pj", "off-chip memory", COLORS["offchip"]))
RC = {"svg.hashsalt": "hwc-report", "svg.fonttype": "none", "font.size": 9, "axes.titlesize": 10,
      "axes.spines.top": False, "axes.spines.right": False}


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def to_svg(fig, name: str, tight: bool = True) -> str:
    """The figure as an <svg> element (no XML prolog), its ids prefixed with `name`."""
    plt = _plt()
    buf = io.StringIO()
    with plt.rc_context(RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None},
                    bbox_inches="tight" if tight else None)
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{name}-{m.group(1)}"', text)
    text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{name}-{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{name}-{m.group(1)})", text)
    return text.strip()


def _figure(w: float, h: float):
    plt = _plt()
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(w, h))
    return fig, ax


def _gid(bars, prefix: str) -> None:
    """Name every bar of a BarContainer (one SVG group each): "<prefix>-<i>"."""
    for i, patch in enumerate(bars.patches):
        patch.set_gid(f"{prefix}-{i}")


def _short(name: str, n: int = 28) -> str:
    return name if len(name) <= n else name[:n - 1] + "…"


# ---- tile timeline --------------------------------------------------------------------------
def timeline(tl: dict) -> str:
    """Gantt chart: one row per layer, one lane per kind of work; overlapping bars across
    rows are work of two layers at once (a weight load behind the previous layer's compute)."""
    rows, kinds = tl["rows"], tl["kinds"]
    plt = _plt()
    with plt.rc_context(RC):
        fig, ax = _figure(11, 0.32 * len(rows) + 1.3)
        lane = 0.8 / len(kinds)
        per: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for row, kind, s, e in tl["bars"]:
            per.setdefault((row, kind), []).append((s, e - s))
        for (row, kind), spans in sorted(per.items()):
            y = row - 0.4 + kind * lane
            coll = ax.broken_barh(spans, (y, lane), facecolors=COLORS[kinds[kind]], linewidth=0)
            coll.set_gid(f"data-bars-{row}-{kind}")
        ax.set_yticks(range(len(rows)), [_short(r) for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, tl["cycles"])
        ax.set_xlabel(f"{tl['unit']} (total {tl['cycles']:,})")
        handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in kinds]
        ax.legend(handles, [KIND_LABELS.get(k, k) for k in kinds], ncols=len(kinds), loc="upper center",
                  bbox_to_anchor=(0.5, 1.0 + 0.5 / (len(rows) + 2)), frameon=False)
        ax.grid(axis="x", alpha=0.3)
        return to_svg(fig, "timeline")


# ---- utilization ------------------------------------------------------------------------------
def utilization(layers: list[dict], overall: float) -> str:
    plt = _plt()
    with plt.rc_context(RC):
        fig, ax = _figure(max(6.0, 0.45 * len(layers) + 2), 3.2)
        xs = range(len(layers))
        vals = [100 * entry["utilization"] for entry in layers]
        bars = ax.bar(xs, vals, color=COLORS["compute"], width=0.7)
        _gid(bars, "data-bar")
        ax.axhline(100, color="black", linewidth=1, linestyle="--", label="100% (every MAC busy every cycle)")
        ax.axhline(100 * overall, color=COLORS["load"], linewidth=1, linestyle=":",
                   label=f"whole model {100 * overall:.1f}%")
        ax.set_xticks(list(xs), [_short(entry["name"], 16) for entry in layers], rotation=45, ha="right")
        ax.set_ylim(0, 110)
        ax.set_ylabel("MAC utilization %")
        ax.legend(loc="upper right", frameon=False, fontsize=8)
        return to_svg(fig, "utilization")


# ---- memory plan --------------------------------------------------------------------------------
def memory(mem: dict) -> str:
    """Buffers as rectangles: x = schedule steps the buffer is live, y = its byte range."""
    plt = _plt()
    bufs = mem["buffers"]
    steps = max((b["end"] for b in bufs), default=0) + 1
    with plt.rc_context(RC):
        fig, ax = _figure(max(6.0, min(11.0, 0.5 * steps + 3)), 4.2)
        cmap = plt.get_cmap("tab20")
        kb = 1024.0
        peak = mem["peak_bytes"] / kb
        for i, b in enumerate(bufs):
            r = plt.Rectangle((b["start"], b["offset"] / kb), b["end"] + 1 - b["start"], b["size"] / kb,
                              facecolor=cmap(i % 20), edgecolor="white", linewidth=0.6, alpha=0.9)
            r.set_gid(f"data-buffer-{i}")
            ax.add_patch(r)
            if b["size"] / kb >= 0.06 * max(peak, 1e-9):
                ax.text(b["start"] + 0.05, (b["offset"] + b["size"] / 2) / kb, _short(b["name"], 18),
                        va="center", ha="left", fontsize=7, clip_on=True)
        ax.axhline(peak, color="#C44E52", linewidth=1.2, label=f"peak {mem['peak_bytes']:,} B")
        ax.axhline(mem["lower_bound_bytes"] / kb, color="black", linewidth=1, linestyle="--",
                   label=f"lower bound {mem['lower_bound_bytes']:,} B")
        ax.set_xlim(0, steps)
        ax.set_ylim(0, max(peak, mem["lower_bound_bytes"] / kb) * 1.12 or 1)
        ax.set_xlabel(f"schedule step ({mem.get('step_unit', 'step')})")
        ax.set_ylabel("offset (KiB)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
        return to_svg(fig, "memory")


# ---- quantization -------------------------------------------------------------------------------
def quant_histograms(quant: dict) -> str:
    """One small histogram per int8 tensor: calibration values (count + 1, log scale), the chosen range shaded."""
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    items = [(name, t, quant["histograms"][t["source"]]) for name, t in sorted(quant["tensors"].items())
             if t.get("source") in quant.get("histograms", {})]
    cols = 4
    nrows = max(1, math.ceil(len(items) / cols))
    with plt.rc_context(RC):
        fig, axes = plt.subplots(nrows, cols, figsize=(11, 1.9 * nrows), squeeze=False)
        fig.subplots_adjust(left=0.05, right=0.99, bottom=0.5 / (1.9 * nrows), top=1 - 0.45 / (1.9 * nrows),
                            wspace=0.25, hspace=0.85)
        for k, ax in enumerate(axes.flat):
            if k >= len(items):
                ax.set_visible(False)
                continue
            name, t, h = items[k]
            lo, hi = h["range"]
            counts = h["counts"]
            if hi <= lo:
                lo, hi = lo - 0.5, lo + 0.5
            edges = [lo + (hi - lo) * i / len(counts) for i in range(len(counts) + 1)]
            st = ax.stairs([c + 1 for c in counts], edges, fill=True, color=COLORS["load"], baseline=1)
            st.set_gid(f"data-hist-{k}")
            r0, r1 = t["range"]
            ax.axvspan(min(r0, 0.0), max(r1, 0.0), color=COLORS["post"], alpha=0.18, linewidth=0)
            for x in (r0, r1):
                ax.axvline(x, color=COLORS["post"], linewidth=1)
            ax.set_yscale("log")
            ax.set_yticks([])
            ax.minorticks_off()
            ax.xaxis.set_major_locator(MaxNLocator(4))
            ax.set_title(f"{_short(name, 24)}\nclipped {100 * t['clipped']:.3g}% · {t['method']}", fontsize=8)
            ax.tick_params(labelsize=7)
        return to_svg(fig, "quant", tight=False)


# ---- energy ----------------------------------------------------------------------------------------
def _stacked(ax, labels, rows, scale: float, horizontal: bool, gid: str):
    left = [0.0] * len(rows)
    for key, label, color in SPLIT:
        vals = [r.get(key, 0.0) * scale for r in rows]
        if horizontal:
            c = ax.barh(range(len(rows)), vals, left=left, color=color, label=label, height=0.7)
        else:
            c = ax.bar(range(len(rows)), vals, bottom=left, color=color, label=label, width=0.6)
        _gid(c, f"data-{gid}-{key}")
        left = [a + b for a, b in zip(left, vals)]
    return left


def energy_layers(energy: dict) -> str:
    plt = _plt()
    rows = energy["layers"]
    with plt.rc_context(RC):
        fig, ax = _figure(10, 0.3 * len(rows) + 1.4)
        _stacked(ax, [r["name"] for r in rows], rows, 1e-3, True, "layers")
        ax.set_yticks(range(len(rows)), [_short(r["name"], 30) for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlabel("energy per inference (nJ)")
        ax.legend(loc="lower right", frameon=False, fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        return to_svg(fig, "energy-layers")


def energy_variants(energy: dict) -> str:
    plt = _plt()
    rows = [v for v in energy["variants"] if "error" not in v]
    with plt.rc_context(RC):
        fig, ax = _figure(max(5.0, 2.0 * len(rows) + 1), 3.6)
        tops = _stacked(ax, [r["label"] for r in rows], rows, 1e-6, False, "variants")
        for i, top in enumerate(tops):
            ax.text(i, top, f"{top:.3g} µJ", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(rows)), [_wrap(r["label"], 18) for r in rows], fontsize=8)
        ax.set_ylabel("energy per inference (µJ)")
        ax.set_ylim(0, max(tops, default=1) * 1.15 or 1)
        ax.legend(loc="upper left", frameon=False, fontsize=8)
        return to_svg(fig, "energy-variants")


def _wrap(text: str, width: int) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "\n".join(lines + [cur])


# ---- quant-search -----------------------------------------------------------------------------------
def search(doc: dict) -> str:
    """Accuracy (or SQNR) against cost for every measured configuration, the pick marked."""
    plt = _plt()
    ok = [r for r in doc["results"] if not r.get("error") and r.get(doc["y"]) is not None]
    scale = 100.0 if doc["y"] == "metric" else 1.0
    with plt.rc_context(RC):
        fig, ax = _figure(8, 4.6)
        cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for stage in sorted({r["stage"] for r in ok}):
            color = cycle[(stage - 1) % len(cycle)]
            for within in (True, False):
                pts = [r for r in ok if r["stage"] == stage and (r["loss"] <= doc["max_loss"] + 1e-12) == within]
                if not pts:
                    continue
                c = ax.scatter([r["cost"] for r in pts], [scale * r[doc["y"]] for r in pts], s=30, alpha=0.9,
                               facecolors=color if within else "none", edgecolors=color,
                               label=f"stage {stage}" + ("" if within else ", over the loss budget"))
                c.set_gid(f"data-stage-{stage}-{'in' if within else 'over'}")
        picked = doc.get("picked")
        if picked is not None:
            r = doc["results"][picked]
            c = ax.scatter([r["cost"]], [scale * r[doc["y"]]], s=220, marker="*", color="#C44E52", zorder=5,
                           label=f"picked: {r['config']}")
            c.set_gid("data-picked")
        if doc.get("budget") is not None:
            ax.axhline(scale * doc["budget"], color="black", linestyle="--", linewidth=1,
                       label=f"loss budget ({100 * doc['max_loss']:.2g}%)")
        ax.set_xlabel("cost (int8 MACs with a non-zero weight + 4 x float MACs)")
        ax.set_ylabel(doc["y_label"])
        ax.legend(loc="lower right", frameon=False, fontsize=8)
        ax.grid(alpha=0.3)
        return to_svg(fig, "search")
