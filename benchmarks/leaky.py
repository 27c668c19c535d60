"""LeakyReLU fused into the requantization (PPU.neg, docs/tile-v2.md "LeakyReLU in the requantization"): the
Tiny-YOLO-shaped zoo model (`hwc.zoo.yolo_tiny`, six conv + BN + LeakyReLU 0.1 layers) on both bundled tiles,
its LeakyReLUs

- fused (the default: a second multiplier for negative accumulators, `arith.leaky_params`),
- as 256-entry tables (QLut, as before 2026-12-06): split off each Conv, run on the host between tile segments.

Cycles are the tile's (the host's tables are not counted: in the QLut rows the tile also stores and loads every
activation over the bus). SQNR: the int8 output against the float model's, on held-out random inputs. Every row is
checked exact against the int8 reference.

    python benchmarks/leaky.py
"""

from __future__ import annotations

import contextlib

import numpy as np


@contextlib.contextmanager
def _mode(mode: str):
    import hwc.quant.quantize as qz

    saved = qz.SLOPE_ACTS
    if mode == "qlut":
        qz.SLOPE_ACTS = ()
    try:
        yield
    finally:
        qz.SLOPE_ACTS = saved


def row(target: str, mode: str) -> dict:
    import hwc
    from hwc.quant.search import sqnr_db
    from hwc.zoo import random_inputs, yolo_tiny

    m = yolo_tiny()
    calib = random_inputs(m, n=32, seed=3)
    test = random_inputs(m, n=8, seed=4)
    with _mode(mode):
        art = hwc.build(m, target=target, calib=calib, hdl=False)
    x = {k: v[:2] for k, v in test.items()}
    exact = bool(np.array_equal(art.run(x, engine="model")["output"], art.run(x, engine="reference")["output"]))
    ref = hwc.build(m, target="ref")
    sqnr = sqnr_db(ref.run(test)["output"], art.run(test, engine="reference")["output"])
    r = art.report
    return {"target": target, "mode": mode, "exact": exact, "cycles": r["cycles"], "util": r["utilization"],
            "segments": r["segments"], "loaded": r["bytes_loaded"], "stored": r["bytes_stored"],
            "luts": art.graph.op_counts().get("QLut", 0), "sqnr": sqnr}


def main() -> None:
    print("| target | LeakyReLU | cycles | MAC util. | segments | bytes loaded / stored | QLuts | SQNR | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for target in ("tile8x8", "tile32x32"):
        for mode in ("fused", "qlut"):
            r = row(target, mode)
            print(f"| {target} | {mode} | {r['cycles']:,} | {r['util']:.1%} | {r['segments']} | "
                  f"{r['loaded']:,} / {r['stored']:,} | {r['luts']} | {r['sqnr']:.1f} dB | {r['exact']} |")


if __name__ == "__main__":
    main()
