"""The `hwc` command line (contract in ARCHITECTURE.md).

Exit codes: 0 ok; 2 bad input or unsupported model (a one-paragraph message, never a
traceback); 1 an internal error (a bug in hwc: run with --debug for the traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from hwc.backends.cpu import cli as cpu_cli
from hwc.errors import HwcError, UserError
from hwc.hw import cli as hw_cli
from hwc.passes.cli import add_parser as add_opt_parser
from hwc.passes.cli import add_pass_options, pass_options
from hwc.quant import cli as qcli
from hwc.report import cli as report_cli
from hwc.tile import cli as tile_cli

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


# ---- argument helpers ---------------------------------------------------------------------
def parse_shape_binding(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=1x3x32x32` -> ("NAME", (1, 3, 32, 32))."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
        ok = sep and name and all(d >= 1 for d in shape)
    except ValueError:
        ok = False
    if not ok:
        raise UserError(f"--input-shape {text!r} is not of the form NAME=D1xD2x... with every dimension at least "
                        f"1 (e.g. --input-shape input=1x3x32x32).")
    return name, shape


def input_shapes(args) -> dict[str, tuple[int, ...]]:
    return dict(parse_shape_binding(t) for t in (getattr(args, "input_shape", None) or []))


def read_inputs(path: str, inputs: list[dict]) -> dict[str, np.ndarray]:
    """Read an .npz keyed by input names, or an .npy for a single-input model. Arrays of an .npz that are not
    inputs of the model (labels, say) are left out, with a note naming them."""
    from hwc.data import load_named_arrays

    names = [i["name"] for i in inputs]
    feeds = load_named_arrays(path, names, "Input")
    if str(path).endswith(".npz"):
        with np.load(path, allow_pickle=False) as f:
            extra = sorted(set(f.files) - set(names))
        if extra:
            err.print(f"note: {path} also holds {extra}, which are not inputs of the model {names}: not used.",
                      soft_wrap=True, markup=False)
    return feeds


def _fmt_shape(shape) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


# ---- commands -------------------------------------------------------------------------------
def cmd_check(args) -> int:
    from hwc.frontend.check import check_model_support

    rows, notes = check_model_support(args.model, input_shapes(args))
    table = Table(title=f"hwc check {args.model}")
    for col in ("op type", "count", "supported", "why not"):
        table.add_column(col)
    bad = sum(r["unsupported"] for r in rows)
    unchecked = sum(r["unchecked"] for r in rows)
    for r in rows:
        if r["unsupported"]:
            status = f"[red]no ({r['unsupported']})[/red]"
        elif r["unchecked"]:
            status = f"[yellow]not checked ({r['unchecked']})[/yellow]"
        else:
            status = "yes"
        table.add_row(r["op"], str(r["count"]), status, "; ".join(r["reasons"]))
    out.print(table)
    for n in notes:
        out.print(f"note: {n}")
    total = sum(r["count"] for r in rows)
    if bad:
        more = f"; {unchecked} more could not be checked because they depend on those" if unchecked else ""
        err.print(f"hwc: {bad} of {total} nodes are not supported{more} (see the table above).",
                  soft_wrap=True)
        return 2
    out.print(f"All {total} nodes ({len(rows)} op types) are supported by the importer.")
    return _check_target(args) if args.target else 0


def _check_target(args) -> int:
    """`hwc check --target T`: build for T in memory (an int8 target calibrated on random inputs: the placement
    does not depend on the values) and say what runs where; a model T cannot build is exit 2 with the reason."""
    import hwc
    from hwc.targets import load_target

    tgt = load_target(args.target)
    int8 = tgt["kind"] == "tile" or args.int8
    calib = None
    if int8:
        from hwc.frontend import import_onnx

        g = import_onnx(Path(args.model), input_shapes(args))
        rng = np.random.default_rng(0)
        calib = {name: rng.standard_normal((8, *g.type(name).shape)).astype(g.type(name).np_dtype)
                 for name in g.inputs}
    art = hwc.build(args.model, target=args.target, calib=calib, int8=int8, input_shapes=input_shapes(args),
                    hdl=False)
    rep = art.report
    kind = f"int8 on {tgt['name']}" if int8 else tgt["name"]
    host = [d for d in rep.get("partition", []) if d["where"] == "host"
            and d["op"] not in ("Quantize", "Dequantize")]
    if tgt["kind"] == "tile":
        on_tile = sum(d["where"] == "tile" for d in rep["partition"])
        out.print(f"{tgt['name']}: builds; {on_tile} nodes on the tile in {rep['segments']} segment(s), "
                  f"{len(host)} on the host (besides the input's quantization and the output's dequantization).")
        for d in host:
            out.print(f"  host: {d['node']} ({d['op']}): {d['why']}", markup=False)
        for d in rep["partition"]:
            if d["where"] == "dram":   # (hwc.tile.views: rows the tile stored, read in place)
                out.print(f"  in external memory: {d['node']} ({d['op']}): {d['why']}", markup=False)
        from hwc.tile.bands import describe

        if describe(rep.get("act_fit")):
            out.print(f"  activations larger than ACT: {describe(rep['act_fit'])}", markup=False)
    else:
        out.print(f"{kind}: builds.")
    return 0


def cmd_build(args) -> int:
    import hwc

    if args.float32:   # (int8 is implied by calibration data, a quantization config, or a tile target)
        from hwc.targets import load_target

        why, fix = (("--calib", "leave out --calib") if args.calib else
                    ("--quant-config", "leave out --quant-config") if args.quant_config else
                    (f"--target {args.target} (a tile runs int8 only)", "use --target cpu or ref")
                    if load_target(args.target)["kind"] == "tile" else (None, None))
        if why:
            raise UserError(f"--float asks for a float32 build, but {why} makes it int8. Leave out --float for an "
                            f"int8 build, or {fix} for a float one.")
    t0 = time.perf_counter()
    err.print(f"building {args.model} for {args.target} ...")
    art = hwc.build(args.model, target=args.target, calib=args.calib, int8=args.int8,
                    input_shapes=input_shapes(args), quant_config=args.quant_config,
                    passes=pass_options(args), triple=args.triple, cpu=args.cpu, hdl=not args.no_hdl)
    dest = art.save(args.output)
    rep = art.report
    out.print(f"built {args.model} for [bold]{art.target['name']}[/bold] -> {dest}/ "
              f"in {time.perf_counter() - t0:.2f} s")
    out.print(f"  {rep.get('nodes', '?')} nodes, {rep.get('macs', 0):,} MACs, "
              f"{rep.get('weights_bytes', 0):,} weight bytes")
    if "cycles" in rep:
        out.print(f"  {rep['cycles']:,} cycles ({rep['time_us_at_clock']:.1f} us at {art.target['clock_mhz']} MHz), "
                  f"MAC utilization {rep['utilization']:.1%}, weight loads {rep['weight_load_hidden']:.0%} hidden")
    from hwc.tile.bands import describe

    if describe(rep.get("act_fit")):
        out.print(f"  activations larger than ACT: {describe(rep['act_fit'])}; {rep['segments']} tile segments")
    for io, label in ((art.inputs, "input"), (art.outputs, "output")):
        for i in io:
            out.print(f"  {label} {i['name']}: {i['dtype']}[{_fmt_shape(i['shape'])}]")
    for note in rep.get("quant", {}).get("notes", []):
        if note.startswith("warning:"):
            err.print(f"hwc: {note}", markup=False, soft_wrap=True)
    return 0


def cmd_run(args) -> int:
    import hwc

    art = hwc.load(args.artifact)
    feeds = read_inputs(args.input, art.inputs)
    t0 = time.perf_counter()
    res = art.run(feeds, engine=args.engine)
    dt = time.perf_counter() - t0
    if args.output:
        from hwc.artifact import write_output

        write_output(args.output, lambda f: np.savez(f, **res))
    out.print(f"ran {args.artifact} ({art.target['name']}, engine {args.engine}) in {dt * 1e3:.1f} ms")
    for name, y in res.items():
        flat = y.reshape(-1)
        head = np.array2string(flat[:6], precision=4, separator=", ")
        out.print(f"  {name}: {y.dtype}[{_fmt_shape(y.shape)}] {head}{' ...' if flat.size > 6 else ''}",
                  markup=False)   # ("[nan, nan]" is not a rich tag)
    if args.output:
        out.print(f"  wrote {args.output}")
    return 0


# ---- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hwc", description="hwc: an ahead-of-time neural-network "
                                "compiler for CPUs (LLVM) and a generated int8 matrix-engine tile.")
    p.add_argument("--version", action="version", version=f"hwc {__import__('hwc').__version__}")
    p.add_argument("--debug", action="store_true",
                   help="verify the IR after every pass and show tracebacks of internal errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def shapes(sp):
        sp.add_argument("--input-shape", action="append", metavar="NAME=1x3x32x32",
                        help="bind the shape of an input with symbolic dims (repeatable)")

    c = sub.add_parser("check", help="what in a model is supported, what is not, and why")
    c.add_argument("model")
    c.add_argument("--target", help="also build for this target in memory and say what runs where (int8 targets: "
                                    "calibrated on random inputs, which the placement does not depend on)")
    c.add_argument("--int8", action="store_true", help="with --target cpu or ref: the int8 build")
    shapes(c)
    c.set_defaults(fn=cmd_check)

    b = sub.add_parser("build", help="compile a model for a target")
    b.add_argument("model")
    b.add_argument("--target", default="ref", help="ref, cpu, tile8x8, tile32x32 or a target .yaml")
    b.add_argument("-o", "--output", default="out", help="output folder (default: out)")
    b.add_argument("--calib", help="calibration inputs (.npz) for int8 quantization")
    q = b.add_mutually_exclusive_group()
    q.add_argument("--int8", action="store_true", help="quantize to int8")
    q.add_argument("--float", dest="float32", action="store_true",
                   help="keep float32 (the default without --calib or --quant-config; not for tile targets)")
    shapes(b)
    add_pass_options(b)
    qcli.add_build_options(b)
    cpu_cli.add_build_options(b)
    tile_cli.add_build_options(b)
    b.set_defaults(fn=cmd_build)

    r = sub.add_parser("run", help="run a built model on inputs")
    r.add_argument("artifact", help="a folder written by `hwc build`")
    r.add_argument("--input", required=True,
                   help="X.npz keyed by input names, or X.npy; an array with one more leading axis than the "
                        "model's input (e.g. 5x1x3x96x96 for a 1x3x96x96 input) is a batch of samples, run one by "
                        "one, and the outputs get that axis too")
    r.add_argument("-o", "--output", help="write outputs to this .npz")
    r.add_argument("--engine", default="auto", help="auto, reference, model or rtl")
    r.set_defaults(fn=cmd_run)

    add_opt_parser(sub)
    qcli.add_parser(sub)
    tile_cli.add_parsers(sub)
    report_cli.add_parser(sub)
    hw_cli.add_parser(sub)
    cpu_cli.add_bench_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    import os

    if not sys.stdout.isatty():
        os.environ.setdefault("COLUMNS", "160")  # piped output: wide tables instead of 80-column wrapping
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.debug:
        import os

        os.environ["HWC_DEBUG"] = "1"
    try:
        return args.fn(args)
    except UserError as e:
        err.print(f"hwc: error: {e}", markup=False, soft_wrap=True)
        return 2
    except HwcError as e:
        err.print(f"hwc: internal error: {e}", markup=False, soft_wrap=True)
        if args.debug:
            raise
        return 1
    except KeyboardInterrupt:
        err.print("hwc: interrupted")
        return 130
    except Exception as e:  # a bug in hwc: say so, keep the traceback for --debug
        err.print(f"hwc: internal error ({type(e).__name__}): {e}\n"
                  f"This is a bug in hwc. Run again with --debug for the traceback and report it.",
                  markup=False)
        if args.debug:
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
