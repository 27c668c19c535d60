"""Run programs on the generated Verilog of the whole tile (Icarus through cocotb's runner).

`run_rtl(...)` runs one program (what `hwc sim --rtl` calls); `run_scenarios(...)` runs
many in one simulator process (the tests: one Icarus compile and one vvp start per
target). The cocotb side is hwc/sim/cocotb/tb_tile.py; the two talk through files in a
work directory (scenarios.json, images in, images and results out).

The compiled simulator is cached per tile.v content (SHA-256) under `build_root`
(default $HWC_CACHE or ~/.cache/hwc, subfolder rtl/), guarded by a file lock so parallel
test workers share one compile.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hwc import isa

TOP = "tile"
TB_MODULE = "hwc.sim.cocotb.tb_tile"
DUMP_MODULE = "hwc_dump"


class RtlError(RuntimeError):
    """The simulator could not be built or run."""


@dataclass
class Scenario:
    name: str
    dram: bytes                         # the whole external memory image, program included
    prog_addr: int = 0                  # instruction index of the program (byte prog_addr * 16)
    expect_cycles: int | None = None
    expect_regions: list[tuple[int, bytes]] = field(default_factory=list)  # (byte address, bytes)
    ready: str = "always"               # "always", or "random" (memory back-pressure: timing not checked)
    seed: int = 0
    max_cycles: int = 1_000_000


def default_build_root() -> Path:
    from hwc.hw.hdl_cache import cache_root

    return cache_root() / "rtl"


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _runner(vcd: bool):
    from cocotb_tools.runner import get_runner

    runner = get_runner("icarus")
    if vcd:  # cocotb asks vvp for FST (-fst) or nothing (-none); we want a VCD
        orig = runner._test_command

        def _test_command():
            return [[("-vcd" if a in ("-fst", "-none") else a) for a in cmd] for cmd in orig()]

        runner._test_command = _test_command
    return runner


def verilog_source(tile_v) -> str:
    """tile.v's text, given its path or its text."""
    if isinstance(tile_v, str) and "endmodule" in tile_v:
        return tile_v
    p = Path(tile_v)
    if not p.is_file():
        raise RtlError(f"{tile_v} is neither a Verilog file nor Verilog text: generate it with `hwc hw`.")
    return p.read_text()


def build(tile_v, build_root: Path | None = None, vcd: bool = False):
    """Compile tile.v (a path or the Verilog text) with Icarus once per content; returns
    (build directory, a runner ready to test)."""
    if shutil.which("iverilog") is None:
        raise RtlError("Icarus Verilog (iverilog) is not installed: run `make setup` or, as root, "
                       "`apt-get install -y iverilog`.")
    text = verilog_source(tile_v)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    bdir = (build_root or default_build_root()) / (digest + ("-vcd" if vcd else ""))
    with _locked(bdir.with_suffix(".lock")):
        bdir.mkdir(parents=True, exist_ok=True)
        src = bdir / "tile.v"
        if not src.exists():
            tmp = bdir / "tile.v.tmp"
            tmp.write_text(text)
            os.replace(tmp, src)
        sources = [src]
        build_args = []
        if vcd:
            dump = bdir / f"{DUMP_MODULE}.v"
            dump.write_text(f"module {DUMP_MODULE}();\ninitial begin\n  string p;\n"
                            f"  if ($value$plusargs(\"vcd=%s\", p)) begin $dumpfile(p); $dumpvars(0, {TOP}); end\n"
                            f"end\nendmodule\n")
            sources.append(dump)
            build_args = ["-s", DUMP_MODULE]
        runner = _runner(vcd)
        try:  # skips the compile when sim.vvp is newer than the sources
            runner.build(sources=sources, hdl_toplevel=TOP, build_dir=bdir, timescale=("1ns", "1ps"),
                         build_args=build_args, log_file=bdir / "build.log")
        except BaseException as e:  # the runner raises SystemExit on a failed compile
            raise RtlError(f"Icarus could not compile {src} (log: {bdir / 'build.log'}): {e}") from None
    return bdir, runner


def write_scenarios(workdir: Path, target: dict, scenarios: list[Scenario]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    entries = []
    for sc in scenarios:
        (workdir / f"{sc.name}.dram.bin").write_bytes(bytes(sc.dram))
        e = {"name": sc.name, "prog_addr": sc.prog_addr, "beat_bytes": target["bus"]["bytes"],
             "read_latency": target["bus"]["read_latency"], "ready": sc.ready, "seed": sc.seed,
             "max_cycles": sc.max_cycles, "expect_regions": []}
        if sc.expect_cycles is not None:
            e["expect_cycles"] = sc.expect_cycles
        for k, (byte, data) in enumerate(sc.expect_regions):
            fname = f"{sc.name}.expect{k}.bin"
            (workdir / fname).write_bytes(bytes(data))
            e["expect_regions"].append([byte, len(data), fname])
        entries.append(e)
    (workdir / "scenarios.json").write_text(json.dumps(entries, indent=1))


def run_scenarios(target: dict, tile_v, scenarios: list[Scenario], workdir: Path | None = None,
                  build_root: Path | None = None, vcd: Path | None = None) -> dict[str, dict]:
    """Run every scenario in one simulator process; returns name -> result (with 'after': the image)."""
    names = [sc.name for sc in scenarios]
    if len(set(names)) != len(names):
        raise ValueError(f"scenario names must be unique: {names}")
    bdir, runner = build(tile_v, build_root, vcd=vcd is not None)
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="hwc-rtl-")) if own else Path(workdir)
    try:
        write_scenarios(work, target, scenarios)
        plusargs = [f"+vcd={Path(vcd).resolve()}"] if vcd is not None else []
        try:
            runner.test(test_module=TB_MODULE, hdl_toplevel=TOP, build_dir=bdir, test_dir=work,
                        extra_env={"HWC_TB_DIR": str(work)}, plusargs=plusargs,
                        log_file=work / "sim.log", timescale=("1ns", "1ps"))
        except BaseException as e:
            raise RtlError(f"the RTL simulation did not run (log: {work / 'sim.log'}): {e}") from None
        out = {}
        for sc in scenarios:
            rfile = work / f"{sc.name}.result.json"
            if not rfile.exists():
                log = (work / "sim.log").read_text()[-3000:] if (work / "sim.log").exists() else ""
                raise RtlError(f"scenario {sc.name!r} produced no result; simulator log tail:\n{log}")
            res = json.loads(rfile.read_text())
            res["after"] = (work / f"{sc.name}.after.bin").read_bytes()
            out[sc.name] = res
        return out
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def run_rtl(target: dict, tile_v_path, program: bytes, dram: bytes, prog_addr: int,
            out_regions: list[tuple[int, int]], vcd=None, build_root: Path | None = None):
    """Run one program on tile.v (a path, or the Verilog text). The program is written into
    the image at instruction index `prog_addr` (byte `prog_addr * 16`); `out_regions`,
    (byte address, length) pairs, must lie inside the image. Returns (the whole image
    after the run as a bytearray, cycles); raises RtlError if the tile stopped with an
    error (code and pc in the message) or did not finish. `vcd`: write a VCD there."""
    image = bytearray(dram)
    base = prog_addr * isa.INSN_BYTES
    if program:
        if base + len(program) > len(image):
            image.extend(b"\0" * (base + len(program) - len(image)))
        image[base:base + len(program)] = program
    res = run_scenarios(target, tile_v_path, [Scenario("run", bytes(image), prog_addr)],
                        build_root=build_root, vcd=Path(vcd) if vcd else None)["run"]
    if res["timeout"] or not res["done"]:
        code = isa.ErrorCode(res["error_code"]).name if res["error"] else "none"
        raise RtlError(f"the tile did not finish: error={res['error']} code={code} pc={res['error_pc']} "
                       f"after {res['cycles']} cycles")
    for a, n in out_regions:
        if a < 0 or a + n > len(image):
            raise ValueError(f"output region ({a}, {n}) is outside the {len(image)}-byte image")
    return bytearray(res["after"]), res["cycles"]
