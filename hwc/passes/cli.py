"""`hwc opt` and the graph-pass options of `hwc build`, for hwc/cli.py to wire in:

    from hwc.passes.cli import add_parser, add_pass_options, pass_options
    add_parser(sub)            # in build_parser(): adds `hwc opt` (sets fn=cmd_opt)
    add_pass_options(b)        # on the `build` subparser: --dump-after/--stop-after/--prune
    optimize(graph, target, **pass_options(args))   # where build runs the optimizer
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console


def add_pass_options(parser: argparse.ArgumentParser) -> None:
    """--dump-after PASS, --stop-after PASS, --prune FRACTION (kwargs of optimize: pass_options)."""
    grp = parser.add_argument_group("graph optimizer")
    grp.add_argument("--dump-after", metavar="PASS",
                     help="print the graph after every run of PASS ('all': after every pass)")
    grp.add_argument("--stop-after", metavar="PASS", help="end the pass pipeline after the first run of PASS")
    grp.add_argument("--prune", type=float, default=0.0, metavar="FRACTION",
                     help="magnitude pruning: zero the smallest FRACTION (0..1) of every weight (default: off)")


def pass_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of hwc.passes.optimize that add_pass_options' flags set."""
    return {"dump_after": args.dump_after, "stop_after": args.stop_after, "prune": args.prune}


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `opt` command to the `hwc` subparsers."""
    p = subparsers.add_parser("opt", help="run the graph optimizer and write the optimized graph as ONNX")
    p.add_argument("model", help="the .onnx model")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the optimized model")
    p.add_argument("--target", default="ref", help="ref, cpu, tile8x8, tile32x32 or a target .yaml (default: ref)")
    p.add_argument("--input-shape", action="append", metavar="NAME=1x3x32x32",
                   help="bind the shape of an input with symbolic dims (repeatable)")
    p.add_argument("--custom-domain", action="store_true",
                   help="write fused nodes in the ONNX domain 'hwc' (schemas: hwc/export_onnx.py) instead of "
                        "decomposing them into standard ops")
    add_pass_options(p)
    p.set_defaults(fn=cmd_opt)
    return p


def cmd_opt(args: argparse.Namespace, console: Console | None = None) -> int:
    """Import, optimize for the target, write OUT.onnx, print the per-pass table."""
    from hwc.cli import input_shapes
    from hwc.export_onnx import save_onnx
    from hwc.frontend.onnx_import import import_onnx
    from hwc.passes.pipeline import optimize
    from hwc.targets import load_target

    out = console or Console(highlight=False)
    target = load_target(args.target)
    graph = import_onnx(Path(args.model), input_shapes(args))
    dump = lambda text: out.print(text, markup=False, highlight=False, soft_wrap=True)
    opt, stats = optimize(graph, target, dump=dump, **pass_options(args))
    model = save_onnx(opt, args.output, custom_domain=args.custom_domain)
    out.print(stats.table(title=f"hwc opt {args.model} --target {target['name']}"))
    for line in stats.report_lines():
        out.print(line, markup=False, soft_wrap=True)
    before = ", ".join(f"{k} {v}" for k, v in stats.ops_before.items())
    after = ", ".join(f"{k} {v}" for k, v in stats.ops_after.items())
    out.print(f"nodes: {stats.nodes_before} -> {stats.nodes_after}\n  before: {before}\n  after:  {after}",
              markup=False)
    form = "custom domain 'hwc'" if args.custom_domain else "standard ONNX ops"
    out.print(f"wrote {args.output} ({len(model.graph.node)} ONNX nodes, {form})", markup=False)
    return 0
