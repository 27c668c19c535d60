"""Compile time of the whole CLI, as a user meets it: `hwc build MODEL.onnx --target T --calib C -o OUT` in a
new process each time (imports, quantization, the candidate search, the report, tile.v).

    python benchmarks/compile_time.py                    # ResNet-8 on tile8x8, 5 runs
    python benchmarks/compile_time.py --runs 9 --models resnet8 mobilenet_v1_025 --targets tile8x8 tile32x32
    python benchmarks/compile_time.py --convert --runs 3     # converting tile.v alone, in this process

Per (model, target): the median wall time of `--runs` builds with tile.v in the HDL cache ($HWC_CACHE/hdl),
the same with the candidate search in one process (HWC_JOBS=1, what a busy machine gets), and one build with
an empty HDL cache (the first build for a target on a machine converts the tile's Verilog, in a process of its
own beside the scheduling). Every build's artifacts are compared with the first one's (deterministic builds).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from hwc.zoo import MODELS, random_inputs

HWC = [sys.executable, "-m", "hwc.cli"]


def _build(model: Path, calib: Path, target: str, out: Path, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run([*HWC, "build", str(model), "--target", target, "--calib", str(calib), "-o", str(out)],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _same(a: Path, b: Path) -> bool:
    files = sorted(p.name for p in a.iterdir())
    _, differ, missing = filecmp.cmpfiles(a, b, files, shallow=False)
    return files == sorted(p.name for p in b.iterdir()) and not differ and not missing


def measure(name: str, target: str, runs: int, work: Path) -> dict:
    model = work / f"{name}.onnx"
    m = MODELS[name]()
    onnx.save(m, model)
    calib = work / f"{name}_calib.npz"
    np.savez(calib, **random_inputs(m, n=32, seed=3))
    env = dict(os.environ)
    first = work / f"{name}-{target}-0"
    cold_cache = work / "empty-cache"
    shutil.rmtree(cold_cache, ignore_errors=True)
    cold = _build(model, calib, target, work / "cold", {**env, "HWC_CACHE": str(cold_cache)})
    _build(model, calib, target, first, env)   # (fills the user's cache, if it was empty)
    warm = [_build(model, calib, target, work / "warm", env) for _ in range(runs)]
    serial = [_build(model, calib, target, work / "serial", {**env, "HWC_JOBS": "1"}) for _ in range(runs)]
    same = all(_same(first, work / d) for d in ("cold", "warm", "serial"))
    return {"model": name, "target": target, "warm": statistics.median(warm), "serial": statistics.median(serial),
            "cold": cold, "runs": runs, "same": same}


def convert(targets: list[str], runs: int) -> None:
    """tile.v's conversion alone (`hwc.hw.generate.verilog_text`, no cache), with Amaranth's own writer of the
    memories' contents and with `fast_meminit` (the same text), alternating; medians of `runs`."""
    import contextlib

    from amaranth.back import verilog
    from hwc.hw import dsp, generate
    from hwc.hw.tile import Tile
    from hwc.targets import load_target

    print("| target | tile.v conversion, Amaranth's memory contents | with fast_meminit | same text |")
    print("|---|---:|---:|---|")
    for name in targets:
        t = load_target(name)
        times, texts = {False: [], True: []}, {}
        for _ in range(runs):
            for fast in (False, True):
                t0 = time.perf_counter()
                with dsp.as_instances(), generate.fast_meminit() if fast else contextlib.nullcontext():
                    texts[fast] = verilog.convert(Tile(t), name=generate.TOP, emit_src=False,
                                                  strip_internal_attrs=True)
                times[fast].append(time.perf_counter() - t0)
        print(f"| {name} | {statistics.median(times[False]):.2f} s | {statistics.median(times[True]):.2f} s | "
              f"{'yes' if texts[False] == texts[True] else 'NO'} |", flush=True)
    print(f"\n({runs} runs each; `python benchmarks/compile_time.py --convert --runs {runs} --targets "
          f"{' '.join(targets)}`)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=["resnet8"])
    ap.add_argument("--targets", nargs="+", default=["tile8x8"])
    ap.add_argument("--convert", action="store_true", help="time converting tile.v alone")
    args = ap.parse_args(argv)
    if args.convert:
        convert(args.targets, args.runs)
        return 0
    print("| model | target | CLI build, tile.v cached (median) | same, search in one process | "
          "empty HDL cache (one run) | artifacts identical |")
    print("|---|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="hwc-compile-time-") as d:
        for name in args.models:
            for target in args.targets:
                r = measure(name, target, args.runs, Path(d))
                print(f"| {r['model']} | {r['target']} | {r['warm']:.2f} s | {r['serial']:.2f} s | {r['cold']:.2f} s "
                      f"| {'yes' if r['same'] else 'NO'} |", flush=True)
    print(f"\n({args.runs} runs each; {os.cpu_count()} CPUs; `python benchmarks/compile_time.py "
          f"--runs {args.runs} --models {' '.join(args.models)} --targets {' '.join(args.targets)}`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
