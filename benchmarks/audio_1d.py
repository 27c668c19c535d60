"""A raw-waveform keyword-spotting network (M5-shaped: 1-d convolutions over one second of 16 kHz audio, imported as
[1, 1, 1, 16000]) on the bundled tiles. A single row has no row bands and its rows are wider than the accumulators:
the tile computes its convolutions in column bands (hwc/tile/bands.py). Beside each build the same int8 graph with
65,536 ACT lines (the most the instructions address), where only the accumulators' width still bands it. Prints a
markdown table (BENCHMARKS.md); each build's outputs are checked equal to the int8 reference's first.

    python benchmarks/audio_1d.py
"""

from __future__ import annotations

import argparse

import numpy as np
from hwc.targets import load_target
from large_inputs import big_act, timed_build

from hwc.ref.interp import run_graph
from hwc.tile.build import build_tile
from hwc.zoo import _Builder


def m5(seed: int = 0, samples: int = 16000, classes: int = 12):
    """Conv 1x80 stride 4 (32) + BN + ReLU + MaxPool 1x4, then three times Conv 1x3 (32, 64, 64) + BN + ReLU +
    MaxPool 1x4, a global average pool and a classifier."""
    b = _Builder("m5_audio", seed)

    def conv1d(x, cin, cout, k, stride=1):
        fan_in = cin * k
        w = b.const("w", b.he((cout, cin, 1, k), fan_in))
        y = b.node("Conv", [x, w, b.const("b", b.small(cout))], kernel_shape=[1, k], strides=[1, stride],
                   pads=[0, (k - 1) // 2, 0, k // 2])
        y = b.relu(b.bn(y, cout))
        return b.node("MaxPool", [y], kernel_shape=[1, 4], strides=[1, 4])

    x = conv1d("input", 1, 32, 80, 4)
    for cin, cout in ((32, 32), (32, 64), (64, 64)):
        x = conv1d(x, cin, cout, 3)
    x = b.gemm(b.flatten(b.node("GlobalAveragePool", [x])), 64, classes, he=False)
    return b.finish([1, 1, 1, samples], x, [1, classes])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", nargs="+", default=["tile8x8", "tile32x32"])
    args = ap.parse_args(argv)
    model = m5()
    calib = {"input": np.random.default_rng(3).normal(0, 0.3, (8, 1, 1, 1, 16000)).astype(np.float32)}
    print("| target | MACs | cycles | MAC util. | layers in column bands (bands) | tile segments | with 65,536 ACT "
          "lines: cycles (util.), column bands | build s |")
    print("|---|---:|---:|---:|---|---:|---|---:|")
    for tn in args.targets:
        target = load_target(tn)
        q, art, build_s = timed_build(model, target, calib)
        r = art.report
        feeds = {name: np.random.default_rng(5).normal(0, 0.3, q.type(name).shape).astype(np.float32)
                 for name in q.inputs}
        got, want = art.run(feeds, engine="model"), run_graph(q, feeds)
        assert all(np.array_equal(got[o], want[o]) for o in q.outputs), "tile model != int8 reference"
        whole = build_tile(q, big_act(target), hdl=False).report
        cols = ", ".join(f"{k} ({v})" for k, v in r["act_fit"].get("column_bands", {}).items()) or "-"
        wcols = ", ".join(f"{k} ({v})" for k, v in whole["act_fit"].get("column_bands", {}).items()) or "-"
        print(f"| {tn} | {r['macs']:,} | {r['cycles']:,} | {r['utilization']:.1%} | {cols} | {r['segments']} | "
              f"{whole['cycles']:,} ({whole['utilization']:.1%}), {wcols} | {build_s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
