"""What-if for docs/proposal-post-overlap.md: the cycles of the benchmark models if POST overlapped consecutive
instructions, modelled by taking `--cut` cycles off PPU_OVERHEAD and VEC_OVERHEAD and twice that off
PPU_DW_OVERHEAD in `hwc.isa.Timing` (the scheduler's estimates and the tile model both read it, so the schedules
adapt). No hardware models this: it is an estimate of what the change would be worth, not a result.

    python benchmarks/post_overlap_whatif.py                      # the default rows, cut 0 and 13
    python benchmarks/post_overlap_whatif.py --cut 13 --rows mobilenet_v1_025:tile32x32
"""

from __future__ import annotations

import argparse
import dataclasses

from hwc import isa

DEFAULT_ROWS = ["mobilenet_v1_025:tile32x32", "resnet8:tile32x32", "ds_cnn:tile32x32", "mobilenet_v1_025:tile8x8"]


def cycles(model_name: str, target_name: str, cut: int) -> tuple[int, float]:
    """(cycles, MAC utilization) of the model built for the target with POST overheads `cut` shorter."""
    from hwc.targets import load_target

    from hwc.frontend import import_onnx
    from hwc.quant.build import quantize_model
    from hwc.tile.build import build_tile
    from hwc.zoo import MODELS, random_inputs

    real = isa.Timing.from_target.__func__

    def patched(cls, target):
        t = real(cls, target)
        return dataclasses.replace(t, PPU_OVERHEAD=t.PPU_OVERHEAD - cut, VEC_OVERHEAD=t.VEC_OVERHEAD - cut,
                                   PPU_DW_OVERHEAD=t.PPU_DW_OVERHEAD - 2 * cut)

    isa.Timing.from_target = classmethod(patched)
    try:
        model, target = MODELS[model_name](), load_target(target_name)
        q = quantize_model(import_onnx(model), target, random_inputs(model, n=32, seed=3))
        r = build_tile(q, target, hdl=False).report
    finally:
        isa.Timing.from_target = classmethod(real)
    return r["cycles"], r["utilization"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cut", type=int, nargs="+", default=[0, 13], help="cycles taken off the POST overheads")
    ap.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="model:target pairs")
    args = ap.parse_args(argv)
    print("| model, target | " + " | ".join(f"cut {c}" for c in args.cut) + " |")
    print("|---|" + "---:|" * len(args.cut))
    for row in args.rows:
        model, target = row.split(":")
        cells = [cycles(model, target, c) for c in args.cut]
        print(f"| {model}, {target} | " + " | ".join(f"{c:,} ({100 * u:.1f}%)" for c, u in cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
