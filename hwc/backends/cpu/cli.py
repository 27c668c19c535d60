"""Command-line pieces of the CPU backend, wired into `hwc` by hwc/cli.py:

    add_build_options(build_parser)   --triple, --cpu for `hwc build --target cpu`
                                      (pass args.triple / args.cpu to hwc.build)
    add_bench_parser(subparsers)      `hwc bench MODEL --target cpu`
"""

from __future__ import annotations

import json
from pathlib import Path


def add_build_options(parser) -> None:
    g = parser.add_argument_group("cpu target")
    g.add_argument("--triple", default=None,
                   help="cross-compile for this LLVM target triple (e.g. thumbv7em-none-eabi, aarch64-linux-gnu); "
                        "default: the target file's (host)")
    g.add_argument("--cpu", default=None,
                   help="LLVM CPU name (e.g. cortex-m4, cortex-a72, znver3); default: the target file's (host)")


def resolve_model(spec: str):
    """A model path, or the name of a zoo model (resnet8, ds_cnn, ...) when no such file exists."""
    from hwc import zoo
    from hwc.errors import UserError

    if Path(spec).exists():
        return spec
    name = spec[4:] if spec.startswith("zoo:") else spec
    if name in zoo.MODELS:
        return zoo.MODELS[name]()
    raise UserError(f"Model {spec!r} is neither a file nor a zoo model ({', '.join(zoo.MODELS)}).")


def add_bench_parser(subparsers):
    p = subparsers.add_parser("bench", help="time the compiled model against onnxruntime and the reference")
    p.add_argument("model", help="an .onnx file, or a zoo model name (resnet8, ds_cnn, mobilenet_v1_025, ...)")
    p.add_argument("--target", default="cpu", help="a target of kind cpu (default: cpu)")
    p.add_argument("--seconds", type=float, default=3.0, help="time budget of the interleaved runs (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the figures to this JSON file")
    p.add_argument("--input-shape", action="append", metavar="NAME=1x3x32x32",
                   help="bind the shape of an input with symbolic dims (repeatable)")
    p.set_defaults(fn=cmd_bench)
    return p


def cmd_bench(args) -> int:
    from rich.console import Console
    from rich.table import Table

    import hwc
    from hwc.backends.cpu.bench import bench
    from hwc.errors import UserError
    from hwc.targets import load_target

    if load_target(args.target)["kind"] != "cpu":
        raise UserError(f"`hwc bench` compares a CPU build with onnxruntime: give a target of kind cpu, "
                        f"not {args.target!r}.")
    import onnx

    model = resolve_model(args.model)
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
    shapes = {}
    for text in args.input_shape or []:
        from hwc.cli import parse_shape_binding

        k, v = parse_shape_binding(text)
        shapes[k] = v
    art = hwc.build(proto, target=args.target, input_shapes=shapes or None)
    r = bench(proto, art, seconds=args.seconds)
    out = Console(highlight=False)
    t = Table(title=f"hwc bench {args.model} --target {args.target} ({r['cpu']}, {r['simd_bits']}-bit vectors, "
                    f"1 thread)")
    for col in ("", "median µs", "vs hwc"):
        t.add_column(col, justify="right")
    t.add_row("hwc (compiled)", f"{r['hwc_us']:.1f}", "1.00x")
    t.add_row("  entry point alone", f"{r['native_us']:.1f}", "")
    t.add_row("onnxruntime", f"{r['ort_us']:.1f}", f"{r['speedup']:.2f}x slower" if r["speedup"] >= 1
              else f"{1 / r['speedup']:.2f}x faster")
    t.add_row("hwc reference (numpy)", f"{r['ref_us']:.1f}", f"{r['ref_us'] / r['hwc_us']:.0f}x slower")
    out.print(t)
    out.print(f"{r['macs']:,} MACs: {r['gflops']:.1f} GFLOP/s (single-core sgemm ceiling {r['ceiling_gflops']:.0f}); "
              f"bottleneck: {r['bottleneck']}")
    out.print(f"code: model.o {r['code_bytes']:,} bytes (text+data) vs onnxruntime library "
              f"{r['ort_lib_bytes']:,} bytes; weights {r['weights_bytes']:,} B, workspace {r['workspace_bytes']:,} B")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
    return 0
