"""The CPU pipeline after the graph optimizer: lower, plan, generate, emit.

    build = compile_graph(graph, target)   # graph: optimized (float or int8) graph IR
    build.compiled.object                  # model.o bytes; .weights: weights.bin bytes
    build.report                           # report.json figures of this backend
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hwc.analysis import node_macs
from hwc.backends.cpu.codegen import Compiled, compile_program
from hwc.backends.cpu.lowering import lower_for_cpu
from hwc.backends.cpu.target import CpuTarget
from hwc.ir.graph import Graph
from hwc.lower.lir import Program
from hwc.lower.memplan import MemoryPlan

#: Names an entry point must not take: C's keywords, `main`, the C library functions the example main.c calls, and
#: main.c's own (hwc_...); such a model name gets a "_model" suffix.
C_RESERVED = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
    main printf fprintf fopen fclose fread fwrite malloc free exit memset strcmp atoi qsort aligned_alloc
    clock_gettime size_t uint8_t int8_t stderr stdout
    hwc_run hwc_alloc_region hwc_read_file hwc_now hwc_cmp hwc_tensor hwc_inputs hwc_outputs""".split())


def c_identifier(name: str) -> str:
    """A C identifier from a model name: 'resnet8' -> 'resnet8', '1-net' -> 'hwc_1_net', 'main' -> 'main_model'."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "model").strip("_") or "model"
    s = s if re.match(r"[A-Za-z_]", s) else f"hwc_{s}"
    return f"{s}_model" if s in C_RESERVED else s


@dataclass
class CpuBuild:
    name: str                # the entry point's name
    target: CpuTarget
    program: Program
    plan: MemoryPlan
    compiled: Compiled

    profile: bool = False

    @property
    def sizes(self) -> dict[str, int]:
        extra = 8 * len(self.program.instrs) if self.profile else 0
        return {"weights": len(self.compiled.weights), "io": self.compiled.io.size,
                "activations": self.plan.workspace_bytes + extra}

    def io_spec(self) -> list[dict]:
        """Every graph input and output: name, kind, offset and size in the I/O area.

        `io_buffers` (the copies `separate_outputs` adds) applies to outputs only: a graph
        input that is also a graph output is read from its own bytes and copied to the
        output's, so its input entry must keep the input's offset."""
        g = self.program.graph
        out = []
        for kind, names in (("input", g.inputs), ("output", g.outputs)):
            for n in names:
                s = self.program.storage(self.program.io_buffers.get(n, n) if kind == "output" else n)
                out.append({"name": n, "kind": kind, "dtype": g.type(n).dtype, "shape": list(g.type(n).shape),
                            "offset": self.compiled.io.offsets[s.name], "bytes": g.type(n).nbytes})
        return out

    def report(self) -> dict:
        g = self.program.graph
        layers = []
        for ins in self.program.instrs:
            macs = node_macs(g, ins.node) if ins.node is not None and ins.node.op in ("Conv", "Gemm", "MatMul") \
                else 0
            layers.append({"name": ins.name, "op": ins.op, "kernel": ins.attrs.get("kernel"), "macs": macs,
                           "writes": list(ins.writes)})
        return {
            "memory": {**self.plan.report(), "alignment": self.target.alignment},
            "weights_bytes": len(self.compiled.weights),
            "io_bytes": self.compiled.io.size,
            "object_bytes": len(self.compiled.object),
            "kernels": len(self.compiled.kernels),
            "entry_point": self.name,
            "cpu": self.target.as_dict(),
            "layers": layers,
        }


def compile_graph(g: Graph, target: CpuTarget, name: str | None = None, profile: bool = False) -> CpuBuild:
    entry = c_identifier(name or g.name)
    prog, plan = lower_for_cpu(g.copy(), target.alignment)
    compiled = compile_program(prog, plan, target, entry, profile)
    build = CpuBuild(entry, target, prog, plan, compiled)
    build.profile = profile
    return build
