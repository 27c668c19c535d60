"""Command-line entry points of the hardware flow, for hwc/cli.py to register:

    from hwc.hw import cli as hwcli
    hwcli.add_parser(sub)          # adds `hwc hw` and `hwc synth`

`hwc hw --target tile8x8 -o DIR`          writes DIR/tile.v and DIR/tile.json
`hwc synth DIR --device ecp5-85k|xc7`     synthesizes DIR/tile.v, writes DIR/synth.json
Errors a user can cause raise hwc.errors.UserError subclasses (exit code 2).
"""

from __future__ import annotations

import argparse


def cmd_hw(args) -> int:
    from hwc.targets import load_target

    from .generate import generate

    target = load_target(args.target)
    info = generate(target, args.output)
    ports = sum(p["width"] for p in info["ports"])
    print(f"hwc hw: {info['config_name']} -> {args.output}/tile.v ({len(info['ports'])} ports, {ports} bits), "
          f"{args.output}/tile.json; peak {info['peak_gops']:g} GOPS at the target clock")
    return 0


def cmd_synth(args) -> int:
    from hwc.report.progress import steps

    from .synth import synth, synth_steps

    with steps(f"synthesis for {args.device}", synth_steps(args.device, not args.no_place)) as step:
        r = synth(args.dir, args.device, freq_mhz=args.freq, place=not args.no_place,
                  seed=args.seed, router=args.router, placer=args.placer, progress=step)
    res = ", ".join(f"{k} {v}" for k, v in r["resources"].items() if v)
    fmax = f"; Fmax {r['fmax_mhz']} MHz" if r.get("fmax_mhz") else ""
    print(f"hwc synth: {r['config_name']} on {r['device']}: {res}{fmax} -> {args.dir}/synth.json")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    h = subparsers.add_parser("hw", help="generate the tile's Verilog (tile.v) and description (tile.json)")
    h.add_argument("--target", default="tile8x8", help="tile8x8, tile32x32 or a tile target .yaml")
    h.add_argument("-o", "--output", default="out/hw", help="output folder (default: out/hw)")
    h.set_defaults(fn=cmd_hw)

    s = subparsers.add_parser("synth", help="FPGA synthesis of a generated tile (YoWASP tools)")
    s.add_argument("dir", help="a folder written by `hwc hw`, or a tile build folder (`hwc build --target T`)")
    s.add_argument("--device", default="ecp5-85k", choices=["ecp5-85k", "xc7"])
    s.add_argument("--freq", type=float, default=None, help="target clock for place-and-route (MHz, default 150)")
    s.add_argument("--no-place", action="store_true", help="ECP5: synthesis only, no place-and-route")
    s.add_argument("--seed", type=int, default=1, help="nextpnr placement seed (default 1)")
    s.add_argument("--placer", default="static", choices=["static", "heap", "sa"],
                   help="nextpnr placer (default static: keeps block RAM read registers beside their block RAMs)")
    s.add_argument("--router", default="router1", choices=["router1", "router2"],
                   help="nextpnr router (default router1: slower, but meets a higher clock on the tile)")
    s.set_defaults(fn=cmd_synth)
