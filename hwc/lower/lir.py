"""The low-level IR (Glow's second IR): instructions over explicit buffers.

Lowering turns each graph node into one instruction that names the buffers it reads
and writes. Every graph value becomes a buffer in one of four regions:

- `weight`: constants; read-only; laid out in `weights.bin`.
- `input` / `output`: the caller's mutable I/O area (graph inputs and outputs).
- `activation`: the workspace; offsets are assigned by the memory planner
  (`hwc.lower.memplan`), buffers whose lifetimes do not overlap share bytes.

Data-movement ops that do not change bytes (Reshape, Identity, Flatten, Squeeze,
Unsqueeze — all Reshape in the graph IR) become *aliases*: the output buffer is a view
of its input buffer, and no instruction is emitted. An alias chain resolves to one
storage buffer (`Buffer.alias_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwc.ir.graph import Graph, Node
from hwc.ir.types import TensorType

REGIONS = ("weight", "input", "output", "activation")

#: Graph ops lowered to aliases (no bytes move).
ALIAS_OPS = frozenset({"Reshape", "Identity"})


@dataclass(eq=False)
class Buffer:
    name: str
    type: TensorType
    region: str
    alias_of: str | None = None  # storage buffer this one is a view of
    offset: int | None = None    # bytes from the start of its region (planned)
    layout: str = ""             # storage order a backend chose: "" = the type's row-major order,
                                 # "cl" = channels-last (N, spatial..., C; the CPU backend)

    @property
    def nbytes(self) -> int:
        return self.type.nbytes


@dataclass(eq=False)
class Instr:
    op: str
    name: str
    reads: list[str]
    writes: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    node: Node | None = None


@dataclass(eq=False)
class Program:
    graph: Graph
    buffers: dict[str, Buffer]
    instrs: list[Instr]
    inputs: list[str]
    outputs: list[str]
    io_buffers: dict[str, str] = field(default_factory=dict)  # graph output -> its I/O buffer, when a
                                                               # backend gave it another one (a copy)

    def storage(self, name: str) -> Buffer:
        """The buffer that owns the bytes of `name` (following aliases)."""
        b = self.buffers[name]
        while b.alias_of is not None:
            b = self.buffers[b.alias_of]
        return b

    def region_buffers(self, region: str) -> list[Buffer]:
        return [b for b in self.buffers.values() if b.region == region and b.alias_of is None]


def lower(g: Graph) -> Program:
    """Lower a (verified, optimized) graph to instructions over buffers."""
    buffers: dict[str, Buffer] = {}
    outputs = set(g.outputs)
    for v in g.values.values():
        if v.is_const:
            region = "weight"
        elif v.name in g.inputs:
            region = "input"
        elif v.name in outputs:
            region = "output"
        else:
            region = "activation"
        buffers[v.name] = Buffer(v.name, v.type, region)
    instrs: list[Instr] = []
    for n in g.nodes:
        src, dst = (n.inputs[0], n.outputs[0]) if n.inputs else (None, None)
        if n.op in ALIAS_OPS and _can_alias(buffers[src], buffers[dst]):
            buffers[dst].alias_of = src
            continue
        instrs.append(Instr(n.op, n.name, [i for i in n.inputs if i], [o for o in n.outputs if o],
                            dict(n.attrs), n))
    return Program(g, buffers, instrs, list(g.inputs), list(g.outputs))


def _can_alias(src: Buffer, dst: Buffer) -> bool:
    """A view is only possible inside one region of the same storage class.

    A graph output that is a reshape of an input or a weight, or an activation reshaped
    into an output, needs a real copy (the caller owns those bytes separately).
    """
    return src.region == dst.region == "activation" or (src.region == "weight" and dst.region == "activation")
