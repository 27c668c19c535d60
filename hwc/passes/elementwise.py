"""Elementwise fusion: chains of elementwise ops become one FusedElementwise node.

A group grows backwards from a root op through producers that are elementwise (float32)
and read by nothing else, so every intermediate lives only inside the fused loop. Leaves
(graph values and constants) become the node's inputs; a one-element constant that does
not decide the output shape becomes a literal in the program. Existing FusedElementwise
nodes are inlined into a larger group. The program format is in `hwc.ir.ops`
(`parse_program`); the reference runs it op by op with float32 rounding, so fusing
changes no bit.
"""

from __future__ import annotations

from hwc.ir.graph import Graph, Node
from hwc.ir.ops import FUSED_EW_OPS, OPS, EwInstr, broadcast, format_program, parse_program
from hwc.passes.manager import PassContext, PassResult, graph_pass
from hwc.passes.rewrite import n_uses, producer

_FUSABLE = frozenset(FUSED_EW_OPS.values()) | {"FusedElementwise"}


def fusable(g: Graph, n: Node) -> bool:
    if n.op not in _FUSABLE or len(n.outputs) != 1:
        return False
    if n.op in ("Max", "Min") and len(n.inputs) != 2:
        return False
    return all(g.type(v).dtype == "float32" for v in [*n.inputs, *n.outputs])


def _grow(g: Graph, root: Node, taken: set[int], res: PassResult) -> list[Node]:
    group, stack = [root], [root]
    taken.add(id(root))
    while stack:
        n = stack.pop()
        for x in dict.fromkeys(n.inputs):
            p = producer(g, x)
            if p is None or id(p) in taken or not fusable(g, p):
                continue
            if x in g.outputs or n_uses(g, x) != n.inputs.count(x):
                why = "is a graph output" if x in g.outputs else f"has {n_uses(g, x)} consumers"
                res.decline(p.name, f"not fused into {root.name!r}: its output {x!r} {why} (it must be stored)")
                continue
            group.append(p)
            taken.add(id(p))
            stack.append(p)
    return group


def _program(g: Graph, group: list[Node]) -> tuple[list[str], str]:
    """(input values, program text) computing the group's last node."""
    inside = {o for n in group for o in n.outputs}
    leaves = list(dict.fromkeys(x for n in group for x in n.inputs if x not in inside))
    out_shape = g.type(group[-1].outputs[0]).shape
    literals: dict[str, float] = {}
    for x in leaves:
        rest = [g.type(v).shape for v in leaves if v != x and v not in literals]
        if g.values[x].is_const and g.type(x).size == 1 and rest and broadcast(*rest) == out_shape:
            literals[x] = float(g.const(x).reshape(()))
    inputs = [x for x in leaves if x not in literals]
    reg: dict[str, int] = {x: i for i, x in enumerate(inputs)}
    instrs: list[EwInstr] = []

    def ref(x):
        return literals[x] if x in literals else reg[x]

    for n in group:
        if n.op == "FusedElementwise":
            outer = [ref(x) for x in n.inputs]
            base = len(inputs) + len(instrs) - len(n.inputs)
            for ins in parse_program(n.attrs["program"], len(n.inputs)):
                args = tuple(a if not isinstance(a, int) else outer[a] if a < len(outer) else a + base
                             for a in ins.args)
                instrs.append(EwInstr(ins.op, args, ins.params))
        else:
            params = tuple(float(n.attrs[k]) for k in OPS[n.op].attrs)
            instrs.append(EwInstr(n.op, tuple(ref(x) for x in n.inputs), params))
        reg[n.outputs[0]] = len(inputs) + len(instrs) - 1
    return inputs, format_program(instrs)


@graph_pass("fuse_elementwise")
def fuse_elementwise(g: Graph, ctx: PassContext) -> PassResult:
    """Chains of elementwise ops (Add/Sub/Mul/Div/activations...) -> one FusedElementwise."""
    res = PassResult()
    taken: set[int] = set()
    groups = []
    for root in reversed(g.nodes):
        if id(root) not in taken and fusable(g, root):
            group = _grow(g, root, taken, res)
            if len(group) > 1:
                groups.append(sorted(group, key=g.node_index))
    for group in groups:
        root = group[-1]
        inputs, program = _program(g, group)
        for n in group:
            g.remove_node(n)
            for o in n.outputs:
                g.values.pop(o, None)
        idx = max((i + 1 for i, n in enumerate(g.nodes) if set(n.outputs) & set(inputs)), default=0)
        node = g.make_node("FusedElementwise", inputs, {"program": program}, outputs=[root.outputs[0]],
                           name=g.fresh(f"{root.name}_fused"), index=idx)
        res.notes.append(f"{node.name}: {' -> '.join(n.op for n in group)} as {program!r}")
        res.changed = True
    if groups:
        g.toposort()
    return res
