"""Save and load a graph IR exactly: `STEM.json` (structure) + `STEM.bin` (constants).

Deterministic: the same graph gives byte-identical files (sorted keys, no timestamps,
constants laid out in value order at 64-byte aligned offsets).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from hwc.ir.graph import Graph, Node, QuantParams
from hwc.ir.types import TensorType

ALIGN = 64
FORMAT = "hwc-graph-1"


def _num(x: float):
    """JSON has no inf/nan: encode them as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def _unnum(x):
    if x in ("inf", "-inf", "nan"):
        return float(x)
    return x


def _attrs_out(attrs: dict) -> dict:
    return {k: [_num(v) for v in val] if isinstance(val, list) else _num(val) for k, val in attrs.items()}


def _attrs_in(attrs: dict) -> dict:
    return {k: [_unnum(v) for v in val] if isinstance(val, list) else _unnum(val) for k, val in attrs.items()}


def graph_to_files(g: Graph) -> tuple[str, bytes]:
    """The JSON text and the constant blob of `g`."""
    blob = bytearray()
    values = []
    for v in g.values.values():
        entry = {"name": v.name, "dtype": v.type.dtype, "shape": list(v.type.shape)}
        if v.is_const:
            pad = (-len(blob)) % ALIGN
            blob += b"\0" * pad
            entry["offset"] = len(blob)
            raw = np.ascontiguousarray(v.data).tobytes()
            entry["nbytes"] = len(raw)
            blob += raw
        if v.quant is not None:
            entry["quant"] = {"scale": v.quant.scale.tolist(), "zero_point": v.quant.zero_point.tolist(),
                              "axis": v.quant.axis}
        values.append(entry)
    doc = {
        "format": FORMAT,
        "name": g.name,
        "inputs": g.inputs,
        "outputs": g.outputs,
        "values": values,
        "nodes": [{"op": n.op, "name": n.name, "inputs": n.inputs, "outputs": n.outputs,
                   "attrs": _attrs_out(n.attrs)} for n in g.nodes],
        "metadata": g.metadata,
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n", bytes(blob)


def graph_from_files(text: str, blob: bytes) -> Graph:
    doc = json.loads(text)
    if doc.get("format") != FORMAT:
        raise ValueError(f"not an hwc graph file (format {doc.get('format')!r}, expected {FORMAT!r})")
    g = Graph(doc["name"])
    for e in doc["values"]:
        t = TensorType(e["dtype"], tuple(e["shape"]))
        data = None
        if "offset" in e:
            data = np.frombuffer(blob, dtype=t.np_dtype, count=t.size, offset=e["offset"]).reshape(t.shape)
        v = g.add_value(e["name"], t, data)
        if "quant" in e:
            q = e["quant"]
            v.quant = QuantParams(np.array(q["scale"]), np.array(q["zero_point"]), q["axis"])
    g.nodes = [Node(n["op"], n["name"], n["inputs"], n["outputs"], _attrs_in(n["attrs"])) for n in doc["nodes"]]
    g.inputs, g.outputs = doc["inputs"], doc["outputs"]
    g.metadata = doc.get("metadata", {})
    return g


def save_graph(g: Graph, folder: str | Path, stem: str = "graph") -> None:
    text, blob = graph_to_files(g)
    folder = Path(folder)
    (folder / f"{stem}.json").write_text(text)
    (folder / f"{stem}.bin").write_bytes(blob)


def load_graph(folder: str | Path, stem: str = "graph") -> Graph:
    folder = Path(folder)
    return graph_from_files((folder / f"{stem}.json").read_text(), (folder / f"{stem}.bin").read_bytes())
