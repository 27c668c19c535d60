"""onnxscript-style rewrite rules and the small graph-editing helpers every pass uses.

A `Rule` is `pattern` (does this node start a candidate? returns the match, a dict, or
None), `check` (None when the rewrite applies, else the reason it declines) and `rewrite`
(edits the graph). `rules_pass` turns a list of rules into a named Pass that tries every
rule at every node until nothing matches, and records each decline with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwc.ir.graph import Graph, Node
from hwc.ir.ops import normalize_attrs
from hwc.passes.manager import Pass, PassContext, PassResult

Match = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: Callable[[Graph, Node], Match | None]
    check: Callable[[Graph, Match], str | None]
    rewrite: Callable[[Graph, Match], None]


def rules_pass(name: str, rules: list[Rule], doc: str = "") -> Pass:
    """A pass applying `rules` everywhere, repeatedly, until no rule matches and applies."""
    def run(g: Graph, ctx: PassContext) -> PassResult:
        res = PassResult()
        declined: dict[tuple[str, str], None] = {}
        progress, rounds = True, 0
        while progress:
            progress, rounds = False, rounds + 1
            if rounds > 1000:
                raise RuntimeError(f"pass {name!r}: rules keep rewriting after 1000 rounds (a rule that "
                                   f"does not make progress)")
            for n in list(g.nodes):
                if not _alive(g, n):
                    continue
                for rule in rules:
                    m = rule.pattern(g, n)
                    if m is None:
                        continue
                    m.setdefault("node", n)
                    reason = rule.check(g, m)
                    if reason:
                        declined[(n.name, f"{rule.name}: {reason}")] = None
                        continue
                    rule.rewrite(g, m)
                    res.changed = progress = True
                    break
        # a decline that a later rewrite made moot (the node is gone) is not reported
        names = {n.name for n in g.nodes}
        res.declined = [d for d in declined if d[0] in names]
        return res
    return Pass(name, run, doc)


def _alive(g: Graph, n: Node) -> bool:
    return any(m is n for m in g.nodes)


# ---- queries ---------------------------------------------------------------------------
def producer(g: Graph, value: str) -> Node | None:
    for n in g.nodes:
        if value in n.outputs:
            return n
    return None


def consumers(g: Graph, value: str) -> list[Node]:
    return [n for n in g.nodes if value in n.inputs]


def n_uses(g: Graph, value: str) -> int:
    """How many places read `value`: node inputs plus graph outputs."""
    return sum(n.inputs.count(value) for n in g.nodes) + g.outputs.count(value)


def sole_use_reason(g: Graph, value: str, what: str = "its output") -> str | None:
    """None when `value` has exactly one consumer node and is not a graph output."""
    if value in g.outputs:
        return f"{what} {value!r} is a graph output"
    k = n_uses(g, value)
    return None if k == 1 else f"{what} {value!r} has {k} consumers"


def is_float(g: Graph, value: str) -> bool:
    return g.type(value).dtype == "float32"


def const(g: Graph, value: str) -> np.ndarray | None:
    return g.const(value) if value else None


# ---- edits -----------------------------------------------------------------------------
def bypass_reason(g: Graph, old: str, new: str) -> str | None:
    """Why readers of `old` cannot simply read `new` (None when they can).

    A graph output keeps its name: that works by renaming `new`, which must then be an
    internal value produced by a node.
    """
    if old not in g.outputs:
        return None
    if new in g.inputs or new in g.outputs or g.values[new].is_const or producer(g, new) is None:
        return f"graph output {old!r} would become {new!r}, which is a graph input, output or constant"
    return None


def bypass(g: Graph, node: Node, new: str) -> None:
    """Remove `node` (one output), making its readers read `new` instead."""
    old = node.outputs[0]
    g.remove_node(node)
    g.replace_uses(old, new)
    if old not in g.outputs:
        g.values.pop(old, None)


def drop_if_dead(g: Graph, node: Node | None) -> None:
    """Remove `node` when nothing reads its outputs any more (and its dead outputs)."""
    if node is None or not _alive(g, node):
        return
    if any(n_uses(g, o) for o in node.outputs if o):
        return
    g.remove_node(node)
    for o in node.outputs:
        g.values.pop(o, None)


def set_op(node: Node, op: str, attrs: dict) -> None:
    node.op = op
    node.attrs = normalize_attrs(op, attrs)


def replace_node(g: Graph, node: Node, build: Callable[[int], None]) -> None:
    """Replace `node` by what `build(index)` creates at its place; the builder must write the
    node's output names (their values are dropped first so make_node can recreate them)."""
    i = g.node_index(node)
    g.remove_node(node)
    for o in node.outputs:
        g.values.pop(o, None)
    build(i)


def set_const_input(g: Graph, node: Node, i: int, data: np.ndarray, hint: str) -> None:
    """Give input `i` of `node` a new constant (appending when i == len(inputs))."""
    name = g.add_const(np.ascontiguousarray(data), hint=hint)
    if i == len(node.inputs):
        node.inputs.append(name)
    else:
        node.inputs[i] = name


def make_const(g: Graph, value: str, data: np.ndarray) -> None:
    """Turn the (node-produced) value `value` into a constant holding `data`."""
    v = g.values[value]
    data = np.asarray(data).astype(v.type.np_dtype, copy=True)
    if data.shape != v.type.shape:
        raise ValueError(f"constant for {value!r} has shape {data.shape}, but the value is {v.type}")
    data.flags.writeable = False
    v.data = data
