"""The IR verifier: run after import and, in debug mode, after every pass.

Checks: every op is known and its attributes match its schema; every input is defined
before it is used (topological order, so no cycles); every value is produced once;
graph inputs and constants are never produced; stored types equal the inferred types;
graph outputs exist; constants hold data of their declared type.
"""

from __future__ import annotations

from hwc.errors import VerifyError
from hwc.ir.graph import Graph
from hwc.ir.ops import OPS, infer_types, normalize_attrs
from hwc.ir.types import TensorType


def verify(g: Graph, where: str = "") -> None:
    """Raise VerifyError listing every problem found in `g`."""
    problems: list[str] = []
    defined: set[str] = set()
    for name in g.inputs:
        if name not in g.values:
            problems.append(f"graph input {name!r} has no value")
        elif g.values[name].is_const:
            problems.append(f"graph input {name!r} is a constant")
        defined.add(name)
    for v in g.values.values():
        if v.is_const:
            if TensorType.of(v.data) != v.type:
                problems.append(f"constant {v.name!r}: data {TensorType.of(v.data)} != type {v.type}")
            defined.add(v.name)
    produced: set[str] = set()
    for n in g.nodes:
        if n.op not in OPS:
            problems.append(f"node {n.name!r}: unknown op {n.op!r}")
            continue
        try:
            if normalize_attrs(n.op, n.attrs) != n.attrs:
                problems.append(f"node {n.name!r}: attributes not normalized: {n.attrs}")
        except ValueError as e:
            problems.append(f"node {n.name!r}: {e}")
        missing = [i for i in n.inputs if i and i not in defined]
        for i in missing:
            why = "is used before it is defined (cycle or bad order)" if i in g.values else "does not exist"
            problems.append(f"node {n.name!r} ({n.op}): input {i!r} {why}")
        for o in n.outputs:
            if not o:
                continue
            if o in produced or o in g.inputs or (o in g.values and g.values[o].is_const):
                problems.append(f"node {n.name!r}: output {o!r} is defined more than once")
            if o not in g.values:
                problems.append(f"node {n.name!r}: output {o!r} has no value")
            produced.add(o)
            defined.add(o)
        if missing:
            continue
        try:
            types = infer_types(g, n)
        except (ValueError, KeyError) as e:
            problems.append(f"node {n.name!r} ({n.op}): shape inference failed: {e}")
            continue
        for o, t in zip(n.outputs, types):
            if o and o in g.values and g.values[o].type != t:
                problems.append(f"node {n.name!r}: output {o!r} stored as {g.values[o].type}, inferred {t}")
    for o in g.outputs:
        if o not in defined:
            problems.append(f"graph output {o!r} is never defined")
    if problems:
        head = f"IR verifier failed{' after ' + where if where else ''} on graph {g.name!r}"
        raise VerifyError(head + ":\n  " + "\n  ".join(problems[:50]))
