"""Activations larger than ACT (hwc/tile/bands.py): MobileNetV1-0.25 at growing input sizes on the bundled tiles,
where the activations stop fitting ACT whole and layers go in row bands. Beside each build, the same model on the
same tile with an ACT large enough to hold it whole (65,536 lines, the most the instructions address; nothing
else changes): the cost of the
bands, side by side in one run. Prints a markdown table (BENCHMARKS.md).

    python benchmarks/large_inputs.py                       # 96, 128, 160, 224 on both tiles
    python benchmarks/large_inputs.py --sizes 160 --targets tile8x8
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from hwc.targets import load_target
from hwc.targets.tile_schema import validate_tile

from hwc.frontend import import_onnx
from hwc.quant.build import quantize_model
from hwc.tile.build import build_tile
from hwc.zoo import mobilenet_v1_025, random_inputs


def big_act(target: dict, lines: int = 65536) -> dict:
    doc = {k: v for k, v in target.items() if k != "derived"}
    doc["scratchpad"] = dict(target["scratchpad"], act_lines=lines)
    return validate_tile(doc, f"{target['name']} (act_lines {lines})")


def timed_build(model, target: dict, calib: dict):
    """(int8 graph, tile build, seconds): `model` quantized with `calib` and built for `target`, timed together."""
    t0 = time.perf_counter()
    q = quantize_model(import_onnx(model), target, calib)
    art = build_tile(q, target, hdl=False)
    return q, art, time.perf_counter() - t0


def host_bytes(art) -> int:
    """Bytes the host copies per inference for the row bands: the Slices and Concats it runs (int8; those whose rows
    the next segment's LOADs read where the tile stored them, `hwc.tile.views`, cost it nothing)."""
    graph = art.graph
    bands = graph.metadata.get("tile_bands", {})
    band_values = {v for nd in graph.nodes if nd.name in bands for v in nd.inputs + nd.outputs}
    hosted = {d["node"] for d in art.report["partition"] if d["where"] == "host"}
    return sum(int(np.prod(graph.type(nd.outputs[0]).shape)) for nd in graph.nodes
               if nd.op in ("Slice", "Concat") and set(nd.inputs + nd.outputs) & band_values and nd.name in hosted)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", type=int, default=[96, 128, 160, 224])
    ap.add_argument("--targets", nargs="+", default=["tile8x8", "tile32x32"])
    args = ap.parse_args(argv)
    print("| input | target | MACs | cycles | MAC util. | layers in row bands (bands) | tile segments | host copies B "
          "| with 65,536 ACT lines: cycles (util.) | bands cost | build s |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        model = mobilenet_v1_025(input_size=size)
        calib = random_inputs(model, n=8, seed=3)
        for tn in args.targets:
            target = load_target(tn)
            q, art, build_s = timed_build(model, target, calib)
            r = art.report
            whole = build_tile(q, big_act(target), hdl=False).report
            assert not whole["act_fit"]["bands"] and not whole["act_fit"]["cuts"]
            bands = ", ".join(f"{k} ({v})" for k, v in r["act_fit"]["bands"].items()) or "-"
            if r["act_fit"]["cuts"]:
                bands += f"; cuts before {', '.join(r['act_fit']['cuts'])}"
            print(f"| {size}x{size} | {tn} | {r['macs']:,} | {r['cycles']:,} | {r['utilization']:.1%} | {bands} | "
                  f"{r['segments']} | {host_bytes(art):,} | {whole['cycles']:,} ({whole['utilization']:.1%}) | "
                  f"{r['cycles'] / whole['cycles'] - 1:+.1%} | {build_s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
