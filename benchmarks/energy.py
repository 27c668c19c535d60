"""The energy variants of a zoo model's tile build (the table of docs/report.md).

    python benchmarks/energy.py [MODEL] [TARGET]     # default: resnet8 tile8x8
"""

import sys

import hwc
from hwc.zoo import MODELS, random_inputs


def main(name: str = "resnet8", target: str = "tile8x8") -> None:
    model = MODELS[name]()
    art = hwc.build(model, target=target, calib=random_inputs(model, n=32, seed=3), hdl=False)
    print("| variant | cycles | compute | on-chip | off-chip | total |")
    print("|---|---:|---:|---:|---:|---:|")
    for v in art.report["energy"]["variants"]:
        if "error" in v:
            print(f"| {v['label']} | {v['error']} | | | | |")
            continue
        cells = [f"{v[k] / 1e6:.2f} µJ" for k in ("compute_pj", "onchip_pj", "offchip_pj", "total_pj")]
        cycles = f"{v['cycles']:,}" if v["cycles"] else "–"
        print(f"| {v['label']} | {cycles} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:])
