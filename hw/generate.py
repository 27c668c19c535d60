"""`hwc hw`: the tile's Verilog (Amaranth's backend) and a JSON description of it.

Outputs, written atomically (a temporary directory next to the outputs, then one
`os.replace` per file) and deterministically (no source paths, no timestamps: the same
target gives a byte-identical tile.v):
  tile.v     the whole tile, top module `tile` (clock `clk`, synchronous reset `rst`), and the
             registered multiplier module `hwc_mul18` it instantiates (hw/dsp.py)
  tile.json  ports with directions and widths, parameters, timing constants, the canonical
             configuration name (target['derived']['config_name']) and tile.v's SHA-256
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from amaranth.back import rtlil, verilog
from amaranth.hdl import Shape
from amaranth.lib import wiring

from hwc import isa

from . import dsp
from .hdl_cache import _cache_path, cache_root, convert_in_background, finish_background  # noqa: F401 (API)
from .params import TileParams
from .tile import Tile

TOP = "tile"


def ports_of(component: wiring.Component) -> list[dict]:
    out = [{"name": "clk", "dir": "in", "width": 1}, {"name": "rst", "dir": "in", "width": 1}]
    for name, member in component.signature.members.items():
        out.append({"name": name, "dir": "in" if member.flow == wiring.In else "out",
                    "width": Shape.cast(member.shape).width})
    return out


@contextlib.contextmanager
def fast_meminit():
    """While active, Amaranth's RTLIL backend writes a memory's initial contents from one formatted string
    instead of one netlist constant object per bit, with the same text: 9 of the ~14 s of converting tile8x8
    went there (2.8 M bits, most of them the zeros of the scratchpads). The RTLIL, hence tile.v, is unchanged
    (tests/test_hw_blocks.py compares both); amaranth is pinned in pyproject.toml, as this replaces a method
    of its backend (`ModuleEmitter.emit_memory`, amaranth 0.5.10)."""
    cls = rtlil.ModuleEmitter
    original = cls.emit_memory

    def emit_memory(self, cell_idx, cell):
        width, depth = cell.width, cell.depth
        if not width * depth:
            return original(self, cell_idx, cell)
        mask = (1 << width) - 1
        # the bits in order row 0 bit 0, row 0 bit 1, ..., written as one constant, most significant first
        bits = "".join(format(row & mask, f"0{width}b") for row in reversed(cell.init))
        self.builder.cell("$meminit_v2", ports={
            "ADDR": self.sigspec(),
            "DATA": f"{width * depth}'{bits}",
            "EN": self.sigspec(rtlil._nir.Value.ones(width)),
        }, parameters={
            "MEMID": self.memories[cell_idx].memid,
            "ABITS": 0,
            "WIDTH": width,
            "WORDS": depth,
            "PRIORITY": 0,
        }, src_loc=cell.src_loc)

    cls.emit_memory = emit_memory
    try:
        yield
    finally:
        cls.emit_memory = original


def verilog_text(target: dict, cache: bool = True) -> tuple[str, Tile]:
    """tile.v's text. Elaborating and converting the tile takes seconds, so the text is kept under
    $HWC_CACHE (default ~/.cache/hwc)/hdl/, named by `_cache_key`; `cache=False` always converts."""
    tile = Tile(target)
    path = _cache_path(target)
    if cache:
        try:
            text = path.read_text()
        except OSError:
            pass
        else:
            tile._MustUse__silence = True   # (not elaborated: only its signature is used, for tile.json's ports)
            return text, tile
    with dsp.as_instances(), fast_meminit():  # every multiplier an instance of hwc_mul18, defined at the end
        text = verilog.convert(tile, name=TOP, emit_src=False, strip_internal_attrs=True) + dsp.VERILOG
    if cache:
        try:  # written whole, then renamed: a reader never sees half a file
            write_atomic(path.parent, {path.name: text})
        except OSError:
            pass   # (a read-only cache: convert every time)
    return text, tile


def describe(target: dict, tile: Tile, text: str) -> dict:
    p = TileParams.from_target(target)
    return {
        "top": TOP,
        "target": target["name"],
        "config_name": target["derived"]["config_name"],
        "parameters": p.as_dict(),
        "timing": dataclasses.asdict(isa.Timing.from_target(target)),
        "isa": {"insn_bits": isa.INSN_BITS, "error_codes": {e.name: int(e) for e in isa.ErrorCode}},
        "ports": ports_of(tile),
        "verilog_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "peak_gops": target["derived"]["peak_gops"],
    }


def write_atomic(outdir: Path, files: dict[str, str]) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".hwc-tmp-", dir=outdir))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
        for name in files:
            os.replace(tmp / name, outdir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def generate(target: dict, outdir) -> dict:
    """Write tile.v and tile.json for a validated tile target into `outdir`; returns the JSON dict."""
    if target.get("kind") != "tile":
        from hwc.errors import TargetError

        raise TargetError(f"Target {target.get('name')!r} is of kind {target.get('kind')!r}: `hwc hw` "
                          f"generates hardware for tile targets only (e.g. --target tile8x8).")
    text, tile = verilog_text(target)
    info = describe(target, tile, text)
    write_atomic(Path(outdir), {"tile.v": text, "tile.json": json.dumps(info, indent=2, sort_keys=True) + "\n"})
    return info
