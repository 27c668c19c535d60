"""`hwc sim` and `hwc disasm` (tile targets), wired into hwc/cli.py."""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from hwc.errors import UserError

out = Console(highlight=False)


def _tile_artifact(path):
    import hwc

    art = hwc.load(path)
    if art.kind != "tile":
        raise UserError(f"{str(path)!r} was built for {art.target['name']!r} ({art.kind}); `hwc sim` and "
                        f"`hwc disasm` need a tile build (--target tile8x8, tile32x32 or a tile .yaml).")
    return art


def layer_table(report: dict, title: str) -> Table:
    t = Table(title=title)
    for col in ("layer", "op", "where", "MACs", "cycles", "utilization"):
        t.add_column(col, justify="left" if col in ("layer", "op", "where") else "right")
    for layer in report["layers"]:
        name = layer["name"] + (f" + {layer['dw_post']} (in its PPU)" if layer.get("dw_post") else "")
        t.add_row(name, layer["op"], layer["where"], f"{layer['macs']:,}", f"{layer['cycles']:,}",
                  f"{layer['utilization']:.1%}")
    return t


def cmd_sim(args) -> int:
    from hwc.cli import read_inputs

    art = _tile_artifact(args.artifact)
    feeds = read_inputs(args.input, art.inputs)
    first = {k: (v[0] if v.shape != tuple(s["shape"]) else v)
             for (k, v), s in zip(feeds.items(), art.inputs)}
    t0 = time.perf_counter()
    ym = art.run(first, engine="model")
    model_run = dict(art.last_run, seconds=time.perf_counter() - t0)
    yr = art.run(first, engine="reference")
    exact_ref = all(np.array_equal(ym[k], yr[k]) for k in ym)
    out.print(layer_table(art.report, f"{art.target['name']}: per-layer figures (Python tile model)"))
    out.print(f"Python tile model: {model_run['cycles']:,} cycles in {model_run['seconds']:.2f} s; outputs "
              f"{'==' if exact_ref else '!='} int8 reference")
    ok = exact_ref
    if args.rtl:
        from hwc.sim.rtl import run_rtl  # noqa: F401  (fail early if cocotb is missing)

        if args.vcd:
            art.vcd = args.vcd
        t0 = time.perf_counter()
        from hwc.report.progress import waiting

        with waiting(f"RTL simulation of tile.v (Icarus + cocotb), {model_run['cycles']:,} cycles expected"):
            yv = art.run(first, engine="rtl")
        rtl_run = dict(art.last_run, seconds=time.perf_counter() - t0)
        same = all(np.array_equal(yv[k], ym[k]) for k in ym)
        same_cycles = rtl_run["cycles"] == model_run["cycles"]
        out.print(f"RTL (cocotb + Icarus): {rtl_run['cycles']:,} cycles in {rtl_run['seconds']:.1f} s; outputs "
                  f"{'==' if same else '!='} Python model; cycles {'==' if same_cycles else '!='} Python model "
                  f"({model_run['cycles']:,})")
        if args.vcd:
            segs = len(art.info["tile"]["segments"])
            out.print(f"waveform: {args.vcd}" if segs == 1 else
                      f"waveforms, one per tile segment: {', '.join(art.vcd_path(k) for k in range(segs))}")
        ok = ok and same and same_cycles
    rep = art.report
    size = f"{art.target['array']['rows']}x{art.target['array']['cols']}"
    out.print(f"model MACs {rep['macs']:,}; utilization {rep['utilization']:.1%} of {size}; weight loads "
              f"{rep['weight_load_cycles']:,} cycles, {rep['weight_load_hidden']:.0%} hidden behind compute")
    if not ok:
        out.print("[red]MISMATCH[/red]")
        return 1
    out.print("MATCH")
    return 0


def cmd_disasm(args) -> int:
    from hwc import isa

    art = _tile_artifact(args.artifact)
    prog = isa.from_bytes(art.program)
    for k, ins in enumerate(prog):
        out.print(f"{k:6d}  {ins}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"# {len(prog)} instructions, {len(art.program)} bytes", markup=False)
    return 0


def add_build_options(parser) -> None:
    g = parser.add_argument_group("tile targets")
    g.add_argument("--no-hdl", action="store_true",
                   help="do not generate tile.v (faster: the cycle model and the CPU reference still run)")


def add_parsers(sub) -> None:
    s = sub.add_parser("sim", help="run a tile build in the Python tile model (and with --rtl in the RTL): "
                                   "cycles, utilization, bit-exact checks")
    s.add_argument("artifact", help="a folder written by `hwc build --target tile...`")
    s.add_argument("--input", required=True, help="X.npz keyed by input names, or X.npy (first sample used)")
    s.add_argument("--rtl", action="store_true", help="also simulate tile.v (cocotb + Icarus) and compare")
    s.add_argument("--vcd", metavar="FILE", help="with --rtl: write the waveform to FILE")
    s.set_defaults(fn=cmd_sim)
    d = sub.add_parser("disasm", help="list the command stream of a tile build")
    d.add_argument("artifact")
    d.set_defaults(fn=cmd_disasm)
