"""Clean-up passes: no-op nodes, Reshape chains, Pad into Conv/pooling, CSE, DCE.

`remove_identities`: Identity (Dropout imports as one), and Reshape/Transpose/Pad/Cast/
Expand/Slice/Concat/Split/Clip that leave their input as it is.
`collapse_reshapes`: Reshape(Reshape(x)) -> Reshape(x) (Flatten/Squeeze/Unsqueeze import
as Reshape, so their chains collapse too).
`fold_pad`: a zero Pad before Conv/AveragePool (or a -inf Pad before MaxPool) becomes
the consumer's own padding.
`cse`: equal constants become one; nodes with the same op, inputs and attributes one.
`dce`: nodes nobody reads (dead branches), then values nobody uses (unused constants).
"""

from __future__ import annotations

import math

import numpy as np

from hwc.ir.graph import Graph
from hwc.passes.manager import PassContext, PassResult, graph_pass
from hwc.passes.rewrite import Match, Rule, bypass, bypass_reason, drop_if_dead, is_float, producer, rules_pass


# ---- no-op nodes -------------------------------------------------------------------------------
def _is_noop(g: Graph, n) -> bool:
    if len(n.outputs) != 1 or not n.inputs or g.type(n.inputs[0]) != g.type(n.outputs[0]):
        return False
    a = n.attrs
    return {
        "Identity": True,
        "Reshape": True,
        "Cast": True,
        "Expand": True,
        "Transpose": a.get("perm") == list(range(len(a.get("perm", [])))),
        "Pad": not any(a.get("pads", [1])),
        "Slice": all(s == 0 and st == 1 for s, st in zip(a.get("starts", []), a.get("steps", []))),
        "Concat": len(n.inputs) == 1,
        "Split": len(n.outputs) == 1,
        "Clip": (a.get("min"), a.get("max")) == (-math.inf, math.inf) and is_float(g, n.inputs[0]),
    }.get(n.op, False)


remove_identities = rules_pass("remove_identities", [
    Rule("noop", lambda g, n: {} if _is_noop(g, n) else None,
         lambda g, m: bypass_reason(g, m["node"].outputs[0], m["node"].inputs[0]),
         lambda g, m: bypass(g, m["node"], m["node"].inputs[0])),
], "Identity/Dropout and no-op Reshape/Transpose/Pad/Cast/Expand/Slice/Concat/Split/Clip removed.")


# ---- reshape chains ----------------------------------------------------------------------------------
def _reshape_pair(g: Graph, n) -> Match | None:
    if n.op != "Reshape":
        return None
    inner = producer(g, n.inputs[0])
    return {"inner": inner} if inner is not None and inner.op == "Reshape" else None


def _collapse_reshape(g: Graph, m: Match) -> None:
    m["node"].inputs[0] = m["inner"].inputs[0]
    drop_if_dead(g, m["inner"])


collapse_reshapes = rules_pass("collapse_reshapes", [
    Rule("reshape_of_reshape", _reshape_pair, lambda g, m: None, _collapse_reshape),
], "Reshape(Reshape(x)) -> Reshape(x) (Flatten/Squeeze/Unsqueeze chains too).")


# ---- Pad into Conv / pooling -------------------------------------------------------------------------
def _pad_pattern(g: Graph, n) -> Match | None:
    if n.op not in ("Conv", "MaxPool", "AveragePool"):
        return None
    pad = producer(g, n.inputs[0])
    return {"pad": pad} if pad is not None and pad.op == "Pad" else None


def _pad_check(g: Graph, m: Match) -> str | None:
    n, pad = m["node"], m["pad"]
    p, value, mode = pad.attrs["pads"], pad.attrs["value"], pad.attrs["mode"]
    r = len(p) // 2
    if mode != "constant":
        return f"Pad mode {mode!r} is not constant padding"
    if any(v < 0 for v in p):
        return f"negative pads {p} crop the input"
    if p[0] or p[1] or p[r] or p[r + 1]:
        return f"pads {p} pad the batch or channel axis"
    if not is_float(g, pad.inputs[0]):
        return "not float32"
    if n.op == "Conv" and value != 0.0:
        return f"Conv pads with 0, the Pad value is {value:g}"
    if n.op == "MaxPool" and value != -math.inf:
        return f"MaxPool pads with -inf, the Pad value is {value:g}"
    if n.op == "AveragePool":
        if value != 0.0:
            return f"AveragePool pads with 0, the Pad value is {value:g}"
        if any(n.attrs["pads"]) and not n.attrs["count_include_pad"]:
            return "AveragePool leaves its own padding out of the average but would count the Pad's zeros"
    if n.op != "Conv" and n.attrs["ceil_mode"]:
        return "ceil_mode: where the last window may start depends on which padding is the pool's own"
    return None


def _fold_pad(g: Graph, m: Match) -> None:
    n, pad = m["node"], m["pad"]
    p, r = pad.attrs["pads"], len(pad.attrs["pads"]) // 2
    spatial = p[2:r] + p[r + 2:]
    n.inputs[0] = pad.inputs[0]
    n.attrs["pads"] = [a + b for a, b in zip(n.attrs["pads"], spatial)]
    if n.op == "AveragePool":
        n.attrs["count_include_pad"] = 1
    drop_if_dead(g, pad)


fold_pad = rules_pass("fold_pad", [
    Rule("pad_into_window", _pad_pattern, _pad_check, _fold_pad),
], "A constant Pad before Conv/MaxPool/AveragePool becomes the consumer's padding.")


# ---- common subexpressions -----------------------------------------------------------------------
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean"})


def _dedupe_constants(g: Graph, res: PassResult) -> None:
    used = {i for n in g.nodes for i in n.inputs if i}
    first: dict[tuple, str] = {}
    for v in list(g.values.values()):
        if not v.is_const or v.name not in used or v.name in g.outputs:
            continue
        key = (v.type, hash(v.data.tobytes()))
        keep = first.setdefault(key, v.name)
        if keep != v.name and np.array_equal(g.const(keep), v.data):
            g.replace_uses(v.name, keep)
            del g.values[v.name]
            res.changed = True


@graph_pass("cse")
def cse(g: Graph, ctx: PassContext) -> PassResult:
    """Equal constants and nodes computing the same thing from the same inputs become one."""
    res = PassResult()
    _dedupe_constants(g, res)
    seen: dict[tuple, object] = {}
    for n in list(g.nodes):
        ins = tuple(sorted(n.inputs)) if n.op in COMMUTATIVE else tuple(n.inputs)
        key = (n.op, ins, repr(sorted(n.attrs.items())), len(n.outputs))
        first = seen.setdefault(key, n)
        if first is n:
            continue
        pairs = [(o, f) for o, f in zip(n.outputs, first.outputs) if o]
        reason = next((r for o, f in pairs if (r := bypass_reason(g, o, f))), None)
        if reason or any(not f for o, f in pairs):
            res.decline(n.name, f"same as {first.name!r}, but {reason or 'an output it needs is unnamed'}")
            continue
        g.remove_node(n)
        for o, f in pairs:
            g.replace_uses(o, f)
            if o not in g.outputs:
                g.values.pop(o, None)
        res.changed = True
    return res


# ---- dead code -----------------------------------------------------------------------------------------
@graph_pass("dce")
def dce(g: Graph, ctx: PassContext) -> PassResult:
    """Nodes whose outputs nobody reads (dead branches), then unused constants, removed."""
    live = set(g.outputs)
    keep = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs if o):
            keep.append(n)
            live.update(i for i in n.inputs if i)
    dead_nodes = len(g.nodes) - len(keep)
    g.nodes = keep[::-1]
    consts = {k for k, v in g.values.items() if v.is_const}
    dropped = g.prune_values()
    dead_consts = len(consts - set(g.values))
    res = PassResult(changed=bool(dead_nodes or dropped))
    for x in g.inputs:
        if x not in live:
            res.decline(x, "unused graph input kept: the inputs are the model's interface")
    if dead_nodes or dead_consts:
        res.notes.append(f"removed {dead_nodes} dead node(s) and {dead_consts} unused constant(s)")
    return res
