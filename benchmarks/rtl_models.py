"""Whole zoo models through the generated tile.v (cocotb + Icarus): the RTL's outputs and cycle count
against the Python tile model's and the int8 reference's (BENCHMARKS.md, "Tile compiler").

    python benchmarks/rtl_models.py tile8x8 resnet8 ds_cnn      # minutes per model under Icarus
    python benchmarks/rtl_models.py tile32x32 mobilenet_v1_025@128   # another input size (input_size=128)
"""

from __future__ import annotations

import sys
import time

import numpy as np
from hwc.targets import load_target

from hwc.frontend import import_onnx
from hwc.quant.build import quantize_model
from hwc.tile.build import build_tile
from hwc.zoo import MODELS, random_inputs


def main(target_name: str, *names: str) -> int:
    target = load_target(target_name)
    bad = 0
    for name in names or ("resnet8",):
        base, _, size = name.partition("@")
        model = MODELS[base](input_size=int(size)) if size else MODELS[base]()
        art = build_tile(quantize_model(import_onnx(model), target, random_inputs(model, n=32, seed=3)), target)
        feeds = {k: v[0] for k, v in random_inputs(model, n=1, seed=9).items()}
        ref = art.run(feeds, engine="reference")
        got = art.run(feeds, engine="model")
        model_cycles = art.last_run["cycles"]
        t0 = time.perf_counter()
        rtl = art.run(feeds, engine="rtl")
        rtl_cycles = art.last_run["cycles"]
        same = all(np.array_equal(ref[k], got[k]) and np.array_equal(ref[k], rtl[k]) for k in ref)
        ok = same and rtl_cycles == model_cycles
        bad += not ok
        print(f"{name} on {target_name}: outputs RTL == model == int8 reference: {same}; cycles model "
              f"{model_cycles:,}, RTL {rtl_cycles:,}; {time.perf_counter() - t0:.0f} s of RTL simulation", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
