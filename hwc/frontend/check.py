"""`hwc check`: which ops of a model hwc supports, and for every node it does not, why."""

from __future__ import annotations

import os

import onnx

from hwc.errors import UserError
from hwc.frontend.onnx_import import UNCHECKED, import_onnx, load_model


def _symbolic_bindings(model: onnx.ModelProto, given: dict) -> tuple[dict, list[str]]:
    """Bind every unbound symbolic input dim to 1 so the check can run; note each one."""
    init = {i.name for i in model.graph.initializer}
    shapes, notes = dict(given), []
    for vi in model.graph.input:
        if vi.name in init or vi.name in shapes or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            continue
        bound = [d.dim_value if d.HasField("dim_value") else 1 for d in dims]
        syms = [d.dim_param or "?" for d in dims if not d.HasField("dim_value")]
        shapes[vi.name] = tuple(bound)
        notes.append(f"input {vi.name!r} has symbolic dims {syms}; checked with them bound to 1 "
                     f"({'x'.join(map(str, bound))}). `hwc build` needs --input-shape "
                     f"{vi.name}={'x'.join(map(str, bound))} (or your real sizes).")
    return shapes, notes


def check_model_support(path: str | os.PathLike, input_shapes: dict | None = None):
    """Rows per op type: {op, count, unsupported, unchecked, reasons}, plus notes for the user.

    `unchecked` counts nodes that could not be checked because an input comes from a node
    that failed.
    """
    model = load_model(path)
    shapes, notes = _symbolic_bindings(model, input_shapes or {})
    problems: list[tuple[onnx.NodeProto, str]] = []
    try:
        import_onnx(model, shapes, problems=problems)
    except UserError as e:  # whole-model problems (opset, input dtypes): one row says it
        problems.append((None, str(e)))
    rows: dict[str, dict] = {}
    for n in model.graph.node:
        r = rows.setdefault(n.op_type, {"op": n.op_type, "count": 0, "unsupported": 0, "unchecked": 0,
                                        "reasons": []})
        r["count"] += 1
    for node, reason in problems:
        key = node.op_type if node is not None else "(model)"
        r = rows.setdefault(key, {"op": key, "count": 0, "unsupported": 0, "unchecked": 0, "reasons": []})
        r["unchecked" if reason.startswith(UNCHECKED) else "unsupported"] += 1
        label = f"{_node_label(model, node)}: {reason}" if node is not None else reason
        if len(r["reasons"]) < 3:
            r["reasons"].append(label)
        elif len(r["reasons"]) == 3:
            r["reasons"].append("...")
    return sorted(rows.values(), key=lambda r: (-r["unsupported"], r["op"])), notes


def _node_label(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """A node's name, or its place in the graph when it has none ("node #3")."""
    if node.name:
        return node.name
    return next((f"node #{i}" for i, n in enumerate(model.graph.node) if n is node), "an unnamed node")
