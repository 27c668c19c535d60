"""Tile benchmark: cycles and MAC utilization of MLPerf-Tiny-shaped models on the tile targets,
with the ablations (weight double-buffering off, thin-matrix stacking off), compile time and the
Python tile model's run time. Prints a markdown table (the `## Tile compiler` section of
BENCHMARKS.md).

    python benchmarks/tile.py            # all models, both tiles
    python benchmarks/tile.py --quick    # resnet8 on tile8x8 only
    python benchmarks/tile.py --v1       # the v1 tile (docs/tile.md) instead of the bundled v2
    python benchmarks/tile.py --wgt-read-rows 1   # the bundled targets with a one-row weight preload
    python benchmarks/tile.py --targets tile32x32 --models ds_cnn   # some rows only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from hwc.targets import load_target, tile_variant

from hwc import isa
from hwc.errors import UnsupportedError
from hwc.frontend import import_onnx
from hwc.quant.build import quantize_model
from hwc.tile.build import build_tile
from hwc.zoo import MODELS, fc_autoencoder, random_inputs

CASES = [
    ("resnet8", MODELS["resnet8"]),
    ("ds_cnn", MODELS["ds_cnn"]),
    ("mobilenet_v1_025", MODELS["mobilenet_v1_025"]),
    ("fc_autoencoder", MODELS["fc_autoencoder"]),
    ("fc_autoencoder (batch 8)", lambda: fc_autoencoder(batch=8)),
    # (a clip's frames: at batch 1 the bus bounds FC layers, each weight byte serves one MAC)
    ("fc_autoencoder (batch 32)", lambda: fc_autoencoder(batch=32)),
]


def min_lines(report: dict, target: dict, depthwise: set[str] = frozenset()) -> float:
    """A lower bound on the streamed lines of any schedule of these layers on this array: each of the `rows`
    adder trees sums at most `cols` products into one output value per line, so an output value that is a sum
    of K products takes at least ceil(K / cols) tree-lines, whatever the layout (stacking, im2col, depthwise
    mode); a `depthwise` layer's on a tile with the ninth depthwise PE (features.dw_ninth_tap) ceil(K / (cols +
    1)). Layers without MACs (pooling, adds) are not counted: they can run on POST."""
    rows, cols = target["array"]["rows"], target["array"]["cols"]
    total = 0.0
    for layer in report["layers"]:
        if layer["macs"] and layer["where"] == "tile":
            outputs = 1
            for d in layer["out_shape"]:
                outputs *= d
            per_line = cols + (1 if target["features"]["dw_ninth_tap"] and layer["name"] in depthwise else 0)
            total += outputs * -(-(layer["macs"] // outputs) // per_line) / rows
    return total


def multipliers(target: dict) -> int:
    """The tile's 8-bit multipliers: the N x N array, the ninth depthwise PE of each row (features.dw_ninth_tap)
    and the 9 per lane of the depthwise stage behind the PPU (features.dw_post). MACs / (this x cycles) is the
    utilization of all of them; the issue's MAC utilization counts the array's only."""
    rows, cols = target["array"]["rows"], target["array"]["cols"]
    feats = target["features"]
    return rows * cols + rows * bool(feats["dw_ninth_tap"]) + 9 * rows * bool(feats["dw_post"])


def hidden_after_first(art, target: dict) -> float:
    """The share of weight-LOAD cycles that overlap compute, the first weight LOAD left out: it comes before any
    compute, so no schedule hides it (the report's `weight_load_hidden` counts it)."""
    from hwc.sim.model import TileModel

    from hwc.tile.report import weight_loads_hidden

    io = art.info["tile"]["segments"][0]
    res = TileModel(target).run(art.program, art.memory_image(), io["prog_offset"] // isa.INSN_BYTES, data=False)
    total, hidden = weight_loads_hidden(isa.from_bytes(art.program), res, skip=1)
    return hidden / total if total else 1.0


def measure(model, target_name: str, v1: bool = False, wgt_read_rows: int | None = None) -> dict:
    target = load_target(target_name)
    if v1:  # the bundled targets are tile v2 (docs/tile-v2.md); v1 (docs/tile.md) has both features off
        target = tile_variant(target, post_unit=False, depthwise=False)
    if wgt_read_rows is not None:  # the weight preload's rows per cycle (docs/tile-v2.md, section 3)
        target = tile_variant(target, wgt_read_rows=wgt_read_rows)
    calib = random_inputs(model, n=32, seed=3)
    t0 = time.perf_counter()
    q = quantize_model(import_onnx(model), target, calib)
    art = build_tile(q, target, hdl=False)
    compile_s = time.perf_counter() - t0
    feeds = {k: v[0] for k, v in random_inputs(model, n=1, seed=9).items()}
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        art.run(feeds, engine="model")
        runs.append(time.perf_counter() - t0)
    no_db = build_tile(q, target, hdl=False, double_buffer=False, pin=art.report["schedule"]).report
    try:
        no_stack = build_tile(q, target, hdl=False, stack=False, im2col=False).report
        no_stack = f"{no_stack['cycles']:,} ({no_stack['utilization']:.1%})"
    except UnsupportedError:
        no_stack = "does not fit the scratchpad"
    r = art.report
    depthwise = {nd.name for nd in q.nodes if nd.op == "QConv" and nd.attrs.get("group", 1) > 1}
    # where utilization goes: MAC util. = (streamed lines / cycles) x (MACs / (rows x cols x streamed lines))
    prog = isa.from_bytes(art.program)
    lines = sum(i.get("n_outer") * i.get("n_inner") for i in prog if i.op == isa.Op.GEMM)
    dw_lines = sum(i.get("n_outer") * i.get("n_inner") for i in prog if i.op == isa.Op.GEMM and i.get("dw"))
    peak = target["array"]["rows"] * target["array"]["cols"]
    bus_beats = sum(i.get("rows") * i.get("row_beats") for i in prog if i.op == isa.Op.LOAD)
    # the depthwise layers' share of the cycles (each layer's span, first issue to last end: spans of neighbours
    # overlap by a few dozen cycles) and of the MACs
    dw_layers = [layer for layer in r["layers"] if layer["name"] in depthwise]
    dw_cycles = sum(layer["cycles"] for layer in dw_layers) / r["cycles"]
    dw_macs = sum(layer["macs"] for layer in dw_layers) / r["macs"]
    return {"streaming": lines / r["cycles"], "pe_use": r["macs"] / (peak * lines), "dw_lines": dw_lines / lines,
            "hidden_later": hidden_after_first(art, target),
            "dw_cycles": dw_cycles, "dw_macs": dw_macs, "no_dw_util": r["utilization"] / (1 - dw_cycles),
            "map_ceiling": r["macs"] / (peak * min_lines(r, target, depthwise)),
            "bus_ceiling": r["macs"] / (peak * bus_beats),
            "cycles": r["cycles"], "util": r["utilization"], "hidden": r["weight_load_hidden"],
            "util_all": r["macs"] / (multipliers(target) * r["cycles"]),
            "no_db": no_db["cycles"], "no_db_util": no_db["utilization"], "no_db_hidden": no_db["weight_load_hidden"],
            "no_stack": no_stack, "compile_s": compile_s, "run_s": statistics.median(runs), "macs": r["macs"]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--v1", action="store_true", help="the v1 tile (docs/tile.md): the v2 features off")
    ap.add_argument("--wgt-read-rows", type=int, default=None,
                    help="override the targets' scratchpad.wgt_read_rows (weight rows preloaded per cycle)")
    ap.add_argument("--targets", nargs="+", default=None, help="only these targets")
    ap.add_argument("--models", nargs="+", default=None, help="only these rows (model names as in the table)")
    args = ap.parse_args(argv)
    targets = ["tile8x8"] if args.quick else ["tile8x8", "tile32x32"]
    cases = CASES[:1] if args.quick else CASES
    if args.targets:
        targets = args.targets
    if args.models:
        cases = [c for c in cases if c[0] in args.models]
    print("| model | target | MACs | cycles | MAC util. | weight loads hidden "
          "| no double-buffering: cycles (util., hidden) | no stacking: cycles (util.) | build s | model run s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name, fn in cases:
        model = fn()
        for tn in targets:
            m = measure(model, tn, args.v1, args.wgt_read_rows)
            rows.append((name, tn, m))
            print(f"| {name} | {tn} | {m['macs']:,} | {m['cycles']:,} | {m['util']:.1%} | {m['hidden']:.0%} | "
                  f"{m['no_db']:,} ({m['no_db_util']:.1%}, {m['no_db_hidden']:.0%}) | "
                  f"{m['no_stack']} | {m['compile_s']:.2f} | {m['run_s']:.3f} |",
                  flush=True)
    print("\nMAC util. counts the N x N array's multipliers; counting all of the tile's 8-bit multipliers (the ninth "
          "depthwise PE of tile8x8's rows, the 9N of tile32x32's depthwise stage):\n")
    print("| model | target | MAC util. | of all multipliers |")
    print("|---|---|---:|---:|")
    for name, tn, m in rows:
        print(f"| {name} | {tn} | {m['util']:.1%} | {m['util_all']:.1%} |")
    print("\nWeight loads hidden behind compute, and without the first weight LOAD (it precedes all compute: no "
          "schedule hides it):\n")
    print("| model | target | weight loads hidden | after the first LOAD |")
    print("|---|---|---:|---:|")
    for name, tn, m in rows:
        print(f"| {name} | {tn} | {m['hidden']:.0%} | {m['hidden_later']:.0%} |")
    print("\nWhere utilization goes: MAC util. = array streaming (GEMM lines / cycles) x PEs used per streamed "
          "line (MACs / (rows x cols x lines)).\n")
    print("| model | target | MAC util. | array streaming | PEs used per line | depthwise-mode share of lines | "
          "depthwise layers: share of cycles / of MACs | MAC util. without their cycles |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, tn, m in rows:
        dw = f"{m['dw_cycles']:.0%} / {m['dw_macs']:.1%} | {m['no_dw_util']:.1%}" if m["dw_macs"] else "- | -"
        print(f"| {name} | {tn} | {m['util']:.1%} | {m['streaming']:.1%} | {m['pe_use']:.1%} | {m['dw_lines']:.1%} | "
              f"{dw} |")
    print("\nCeilings (upper bounds on MAC util. for any schedule): mapping = MACs / (rows x cols x the fewest lines "
          "any mapping streams: an output summing K products takes ceil(K / cols) lines of one adder tree); bus = "
          "MACs / (rows x cols x the beats this schedule loads: weights, params, inputs). The goal is reachable only "
          "where the lower of the two is above it.\n")
    print("| model | target | MAC util. | mapping ceiling | bus ceiling | of the lower ceiling |")
    print("|---|---|---:|---:|---:|---:|")
    for name, tn, m in rows:
        low = min(m['map_ceiling'], m['bus_ceiling'])
        bus = f"{m['bus_ceiling']:.1%}" if m['bus_ceiling'] < 1 else "> 100%"
        print(f"| {name} | {tn} | {m['util']:.1%} | {m['map_ceiling']:.1%} | {bus} | {m['util'] / low:.0%} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
