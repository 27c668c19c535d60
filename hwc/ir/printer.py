"""A readable text form of the graph IR (what `--dump-after` and `hwc check -v` print)."""

from __future__ import annotations

import numpy as np

from hwc.ir.graph import Graph


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ",".join(_fmt_attr(x) for x in v) + "]"
    return repr(v) if isinstance(v, str) else str(v)


def _fmt_input(g: Graph, name: str) -> str:
    if not name:
        return "-"
    v = g.values.get(name)
    if v is None:
        return f"%{name}?"
    if v.is_const:
        if v.data.size <= 4:
            return f"{np.array2string(v.data.reshape(-1), separator=',')}:{v.type}"
        return f"@{name}:{v.type}"
    return f"%{name}"


def format_graph(g: Graph) -> str:
    lines = [f"graph {g.name} ("]
    for i in g.inputs:
        lines.append(f"    %{i}: {g.values[i].type}")
    consts = [v for v in g.values.values() if v.is_const]
    lines.append(f") {len(g.nodes)} nodes, {len(consts)} constants "
                 f"({sum(v.type.nbytes for v in consts)} bytes) {{")
    for n in g.nodes:
        outs = ", ".join(f"%{o}: {g.values[o].type}" if o in g.values else f"%{o}" for o in n.outputs)
        args = ", ".join(_fmt_input(g, i) for i in n.inputs)
        attrs = " ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs.items()
                         if not (k in ("act", "act_args") and not v))
        lines.append(f"  {outs} = {n.op}({args}){' ' + attrs if attrs else ''}  # {n.name}")
    lines.append("  return " + ", ".join(f"%{o}" for o in g.outputs))
    lines.append("}")
    return "\n".join(lines)
