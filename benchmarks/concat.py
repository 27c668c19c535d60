"""Channel Concat on the tile (docs/tile-v2.md, "Concat along the channels"): the SqueezeNet-shaped zoo model
(`hwc.zoo.squeezenet_fire`, four fire modules) on both bundled tiles, its Concats

- in place (the default: the parts' producers write the output's lines),
- as VEC copies (`Codegen._alias_concats` switched off),
- on the host (the tile's segments cut at each Concat, as before 2026-12-05),
- in place, but without the quantizer's shared encodings (`share_concat_encodings` off: a QRequant per part).

Cycles are the tile's (the host's copies are not counted: in the host rows the tile also stores and loads the
Concats' inputs and outputs over the bus). Every row is checked exact against the int8 reference.

    python benchmarks/concat.py
"""

from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def _mode(mode: str):
    import hwc.quant.quantize as qz
    import hwc.tile.layers as layers
    from hwc.tile.codegen import Codegen

    saved = (layers.concat_why_not, Codegen._alias_concats, qz.share_concat_encodings)
    if mode == "copies":
        Codegen._alias_concats = lambda self: {}
    elif mode == "host":
        layers.concat_why_not = lambda g, n, n_lanes: "benchmark: the Concat on the host"
    elif mode == "unshared":
        qz.share_concat_encodings = lambda g, tq: 0
    try:
        yield
    finally:
        layers.concat_why_not, Codegen._alias_concats, qz.share_concat_encodings = saved


def row(target: str, mode: str) -> dict:
    import hwc
    from hwc.zoo import random_inputs, squeezenet_fire

    m = squeezenet_fire()
    calib = random_inputs(m, n=32, seed=3)
    with _mode(mode):
        art = hwc.build(m, target=target, calib=calib, hdl=False)
    x = {k: v[:2] for k, v in calib.items()}
    exact = bool(np.array_equal(art.run(x, engine="model")["output"], art.run(x, engine="reference")["output"]))
    r = art.report
    return {"target": target, "mode": mode, "exact": exact, "cycles": r["cycles"], "util": r["utilization"],
            "segments": r["segments"], "loaded": r["bytes_loaded"], "stored": r["bytes_stored"],
            "requants": art.graph.op_counts().get("QRequant", 0)}


def main() -> None:
    print("| target | Concats | cycles | MAC util. | segments | bytes loaded / stored | QRequants | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for target in ("tile8x8", "tile32x32"):
        for mode in ("in place", "copies", "host", "unshared"):
            r = row(target, mode.replace("in place", "default"))
            print(f"| {target} | {mode} | {r['cycles']:,} | {r['util']:.1%} | {r['segments']} | "
                  f"{r['loaded']:,} / {r['stored']:,} | {r['requants']} | {r['exact']} |")


if __name__ == "__main__":
    main()
