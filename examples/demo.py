"""`make demo`: the main job end to end on the bundled digits model.

Each step is the real `hwc` command a user would type; the script prints it, runs it,
and at the end compares hwc's results with onnxruntime on the same inputs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "build" / "demo"
MODEL = HERE / "digits_cnn.onnx"
TEST = HERE / "digits_test.npz"
CALIB = HERE / "digits_calib.npz"


def hwc(*args) -> None:
    cmd = ["hwc", *map(str, args)]
    print(f"\n$ {shlex.join(str(Path(a).relative_to(ROOT)) if str(a).startswith(str(ROOT)) else a for a in cmd)}",
          flush=True)
    r = subprocess.run([sys.executable, "-m", "hwc.cli", *map(str, args)], cwd=ROOT)
    if r.returncode:
        sys.exit(f"demo: `{shlex.join(cmd)}` failed with exit code {r.returncode}")


def onnxruntime_outputs(x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(MODEL), so, providers=["CPUExecutionProvider"])
    return np.stack([s.run(None, {"input": xi})[0] for xi in x])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    data = np.load(TEST)
    x, labels = data["input"], data["labels"]
    print(f"hwc demo: a small CNN trained on scikit-learn's handwritten digits "
          f"({len(labels)} held-out 8x8 images)")
    hwc("check", MODEL)
    hwc("build", MODEL, "--target", "ref", "-o", OUT / "ref")
    hwc("run", OUT / "ref", "--input", TEST, "-o", OUT / "ref_out.npz")

    # The matrix-engine tile: int8, calibrated on training digits, scheduled onto the 8x8 tile,
    # run in the Python tile model, then the first digit through the generated Verilog (cocotb).
    hwc("build", MODEL, "--target", "tile8x8", "--calib", CALIB, "-o", OUT / "tile8x8")
    hwc("run", OUT / "tile8x8", "--input", TEST, "-o", OUT / "tile_out.npz")
    hwc("run", OUT / "tile8x8", "--input", TEST, "--engine", "reference", "-o", OUT / "int8_ref_out.npz")
    hwc("sim", OUT / "tile8x8", "--input", TEST, "--rtl")

    ours = np.load(OUT / "ref_out.npz")["logits"]
    theirs = onnxruntime_outputs(x)
    tile = np.load(OUT / "tile_out.npz")["logits"]
    int8_ref = np.load(OUT / "int8_ref_out.npz")["logits"]
    report = json.loads((OUT / "tile8x8" / "report.json").read_text())
    diff = np.abs(ours - theirs).max()
    rel = diff / np.abs(theirs).max()
    agree = (ours.argmax(-1) == theirs.argmax(-1)).mean()
    top1 = lambda y: (y.reshape(len(labels), -1).argmax(-1) == labels).mean()
    bitexact = np.array_equal(tile, int8_ref)
    ok = rel < 1e-4 and agree == 1.0 and bitexact
    print("\n== result ==")
    print(f"float: hwc reference vs onnxruntime: max |diff| {diff:.2e} ({rel:.1e} of the output range), "
          f"top-1 agreement {agree:.1%}")
    print(f"int8 on tile8x8: Python tile model == int8 reference on all {len(labels)} digits: {bitexact} "
          f"(and the RTL on the first digit, cycle for cycle: see `hwc sim` above)")
    print(f"tile8x8: {report['cycles']:,} cycles per digit ({report['time_us_at_clock']:.1f} us at the target "
          f"clock), MAC utilization {report['utilization']:.1%}")
    print(f"top-1 accuracy on the held-out digits: float {top1(ours):.1%}, int8 tile {top1(tile):.1%}")
    print("MATCH" if ok else "MISMATCH")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
