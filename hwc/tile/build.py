"""`hwc build MODEL --target tile8x8`: the int8 graph scheduled onto the tile.

The artifact holds the int8 graph (the host part runs in the int8 reference), the tile
program and DRAM image, and everything needed to run it in the Python tile model (fast,
the default) or in the RTL (cocotb + Icarus), with the exact same inputs and outputs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from hwc import isa
from hwc.artifact import Artifact, register
from hwc.errors import UserError
from hwc.ir.graph import Graph
from hwc.ir.serialize import load_graph, save_graph
from hwc.ref.interp import run_graph, run_node
from hwc.tile import host
from hwc.tile.codegen import Codegen, TileProgram
from hwc.tile.layers import TilePlan, host_im2col, im2col_first_layer, partition, space_to_depth


def schedule(g: Graph, target: dict, *, im2col: bool = True, stack: bool = True,
             double_buffer: bool = True) -> tuple[TilePlan, TileProgram]:
    """Partition the int8 graph and generate the tile program."""
    plan = partition(g, target["array"]["rows"])
    if im2col:
        im2col_first_layer(plan, target["array"]["rows"], target["scratchpad"]["act_lines"])
    if stack:
        space_to_depth(plan, target["array"]["rows"])
    return plan, Codegen(plan, target, double_buffer=double_buffer).run()


def tile_io(plan: TilePlan, prog: TileProgram) -> dict:
    """What the host needs to drive the tile (kept in model.json)."""
    def desc(name, dram):
        t = plan.tensors[name]
        return {"name": name, "c": t.c, "h": t.h, "w": t.w, "dram": dram, "shape": list(t.graph_shape),
                "zero_point": t.zp, "s2d": t.s2d}

    views: dict[str, list[str]] = {}
    for v, base in plan.aliases.items():
        views.setdefault(base, []).append(v)
    return {
        "pre": [n.name for n in plan.pre],
        "post": [n.name for n in plan.post],
        "inputs": [dict(desc(n, prog.inputs[n]), im2col=plan.im2col.get(n)) for n in plan.inputs],
        "outputs": [dict(desc(n, prog.outputs[n]), views=sorted(views.get(n, []))) for n in plan.outputs],
        "io_end": prog.dram_bytes,
        "prog_offset": host.program_offset(prog.dram_bytes),
        "instructions": len(prog.program),
    }


@register("tile")
class TileArtifact(Artifact):
    engines = ("auto", "model", "reference", "rtl")

    def __init__(self, target, graph, report=None, info=None, *, program: bytes = b"", const: bytes = b"",
                 memory_map: dict | None = None, tile_v: str | None = None):
        super().__init__(target, graph, report, info)
        self.program = program
        self.const = const
        self.memory_map = memory_map or {}
        self.tile_v = tile_v
        self.last_run: dict = {}

    # ---- running -----------------------------------------------------------------------------
    def _run_one(self, feeds, engine):
        if engine == "reference":
            return run_graph(self.graph, feeds)
        io = self.info["tile"]
        n = self.target["array"]["rows"]
        env = self._host_env(feeds, io["pre"])
        inputs = {}
        for t in io["inputs"]:
            src = t["im2col"]["src"] if t.get("im2col") else t["name"]
            x = env[src]
            if t.get("im2col"):
                x = host_im2col(x, t["im2col"])
            x = host.stack_pixels(x, t["s2d"])
            inputs[t["dram"]] = host.pack(x, t["c"], t["h"], t["w"], n)
        mem = host.dram_image(self.const, self.program, io["prog_offset"], io["io_end"], inputs)
        t0 = time.perf_counter()
        if engine == "rtl":
            mem, cycles = self._run_rtl(mem, io)
        else:
            mem, cycles = self._run_model(mem, io)
        self.last_run = {"engine": engine, "cycles": cycles, "seconds": time.perf_counter() - t0}
        for t in io["outputs"]:
            nbytes = -(-t["c"] // n) * t["h"] * t["w"] * n
            y = host.unpack(bytes(mem[t["dram"]:t["dram"] + nbytes]), t["c"], t["h"], t["w"], n,
                            tuple(t["shape"]), t["s2d"])
            env[t["name"]] = y
            for v in t["views"]:
                env[v] = y.reshape(self.graph.type(v).shape)
        return self._host_finish(env, io["post"])

    def _host_env(self, feeds, pre_names):
        env = {v.name: v.data for v in self.graph.values.values() if v.is_const}
        env.update(feeds)
        nodes = {nd.name: nd for nd in self.graph.nodes}
        for name in pre_names:
            nd = nodes[name]
            for o, y in zip(nd.outputs, run_node(nd, [env[i] if i else None for i in nd.inputs])):
                env[o] = np.asarray(y).astype(self.graph.type(o).np_dtype, copy=False)
        return env

    def _host_finish(self, env, post_names):
        nodes = {nd.name: nd for nd in self.graph.nodes}
        for name in post_names:
            nd = nodes[name]
            for o, y in zip(nd.outputs, run_node(nd, [env[i] if i else None for i in nd.inputs])):
                env[o] = np.asarray(y).astype(self.graph.type(o).np_dtype, copy=False)
        return {o: env[o] for o in self.graph.outputs}

    def _run_model(self, mem: bytearray, io: dict):
        from hwc.sim.model import TileModel

        res = TileModel(self.target).run(None, mem, io["prog_offset"] // isa.INSN_BYTES)
        if res.error:
            raise UserError(f"the tile stopped with error {res.error.name} at instruction {res.error_pc}: "
                            f"the program is invalid for target {self.target['name']!r} (a bug in the scheduler)")
        self.last_model = res
        return mem, res.cycles

    def _run_rtl(self, mem: bytearray, io: dict):
        from hwc.sim.rtl import run_rtl

        if not self.tile_v:
            raise UserError("this artifact has no tile.v to simulate; rebuild it with `hwc build`.")
        out_regions = [(t["dram"], -(-t["c"] // self.target["array"]["rows"]) * t["h"] * t["w"]
                        * self.target["array"]["rows"]) for t in io["outputs"]]
        return run_rtl(self.target, self.tile_v, bytes(self.program), bytes(mem), io["prog_offset"] // isa.INSN_BYTES,
                       out_regions, vcd=getattr(self, "vcd", None))

    # ---- files -------------------------------------------------------------------------------
    def _write(self, folder: Path) -> None:
        save_graph(self.graph, folder)
        (folder / "program.bin").write_bytes(self.program)
        (folder / "weights.bin").write_bytes(self.const)
        (folder / "memory_map.json").write_text(json.dumps(self.memory_map, indent=1, sort_keys=True) + "\n")
        if self.tile_v is not None:
            (folder / "tile.v").write_text(self.tile_v)

    @classmethod
    def _read(cls, folder: Path, model: dict) -> TileArtifact:
        report = json.loads((folder / "report.json").read_text())
        info = {k: v for k, v in model.items() if k not in ("hwc_version", "kind", "target", "inputs", "outputs")}
        tv = folder / "tile.v"
        return cls(model["target"], load_graph(folder), report, info,
                   program=(folder / "program.bin").read_bytes(), const=(folder / "weights.bin").read_bytes(),
                   memory_map=json.loads((folder / "memory_map.json").read_text()),
                   tile_v=tv.read_text() if tv.is_file() else None)


def build_tile(graph: Graph, target: dict, *, hdl: bool = True, im2col: bool = True, stack: bool = True,
               double_buffer: bool = True) -> TileArtifact:
    """Schedule an int8 graph for a tile target, measure it in the Python tile model, and
    package program, DRAM image, memory map, report and (with `hdl`) the tile's Verilog."""
    from hwc.report.data import add_tile_data
    from hwc.sim.model import TileModel
    from hwc.tile.report import tile_report

    plan, prog = schedule(graph, target, im2col=im2col, stack=stack, double_buffer=double_buffer)
    io = tile_io(plan, prog)
    program = isa.to_bytes(prog.program)
    const = bytes(prog.dram)
    # Timing does not depend on the data: one run on zero inputs gives the cycle counts.
    mem = host.dram_image(const, program, io["prog_offset"], io["io_end"], {})
    res = TileModel(target).run(None, mem, io["prog_offset"] // isa.INSN_BYTES)
    if res.error:
        raise AssertionError(f"scheduler produced an invalid program: {res.error.name} at {res.error_pc}")
    report = tile_report(target, plan, prog, res)
    add_tile_data(report, target, plan, prog, res)  # per-layer events, timeline, ACT buffers (hwc/report)
    report["weights_bytes"] = len(const)
    report["nodes"] = len(graph.nodes)
    memory_map = {
        "dram": prog.dram_regions + [{"name": "program", "offset": io["prog_offset"], "size": len(program),
                                      "kind": "program"}],
        "act": [{"name": t.name, "offset": t.base, "size": t.lines, "unit": "lines", "bank": "act",
                 "channels": t.c, "height": t.h, "width": t.w, "pads": list(t.pads)}
                for t in sorted(plan.tensors.values(), key=lambda t: (t.base, t.name))],
        "wgt": {"banks": 2, "blocks_per_bank": target["scratchpad"]["wgt_bank_blocks"]},
        "param": {"entries_used": len(prog.dram_regions[0:1]) and prog.dram_regions[0]["entries"],
                  "entries": target["scratchpad"]["param_entries"]},
    }
    tile_v = None
    if hdl:
        from hwc.hw.generate import verilog_text

        tile_v = verilog_text(target)[0]
    info = {"int8": True, "tile": io}
    return TileArtifact(target, graph, report, info, program=program, const=const, memory_map=memory_map,
                        tile_v=tile_v)
