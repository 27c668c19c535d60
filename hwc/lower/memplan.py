"""Static memory planning: every activation at a known offset in one workspace block.

The planner works on *intervals*: a buffer's size and the instruction steps during which
it is live (from the step that writes it to the last step that reads it). Two buffers
may share bytes when their intervals do not overlap. Sizes are in any unit (bytes for
the CPU, lines for the tile's scratchpad); `align` rounds offsets and sizes.

- `plan_greedy_by_size`: TensorFlow Lite Micro's GreedyMemoryPlanner, the baseline:
  buffers in decreasing size, each at the lowest offset that fits beside the already
  placed buffers whose lifetimes overlap.
- `plan_best`: hwc's planner: several placement orders (size, area = size x lifetime,
  lifetime length, start step, with the baseline's order among them) with best-fit gap
  choice; the smallest peak wins, so it is never worse than the baseline.
- `plan_program`: for a low-level program: in-place elementwise instructions (the output
  takes the bytes of an input that dies there), a choice among topological orders of the
  instructions (lifetimes shortened by reordering independent work), and the report
  figures: peak, lower bound (the largest sum of simultaneously live buffers over the
  chosen schedule) and the naive total (every buffer its own bytes).
- `check_plan`: no two simultaneously live buffers overlap (run on every model in tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hwc.ir.ops import BINARY_OPS, UNARY_OPS
from hwc.lower.lir import Program


@dataclass(frozen=True)
class Interval:
    name: str
    size: int
    start: int
    end: int  # inclusive

    def overlaps(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


def _round(x: int, align: int) -> int:
    return -(-x // align) * align


def peak(offsets: dict[str, int], intervals: list[Interval]) -> int:
    return max((offsets[iv.name] + iv.size for iv in intervals), default=0)


def lower_bound(intervals: list[Interval]) -> int:
    """The largest total size of buffers live at the same step: no plan can go below it."""
    if not intervals:
        return 0
    steps = max(iv.end for iv in intervals) + 1
    live = [0] * (steps + 1)
    for iv in intervals:
        live[iv.start] += iv.size
        live[iv.end + 1] -= iv.size
    best = run = 0
    for d in live:
        run += d
        best = max(best, run)
    return best


def naive_total(intervals: list[Interval]) -> int:
    return sum(iv.size for iv in intervals)


def check_plan(offsets: dict[str, int], intervals: list[Interval]) -> None:
    """Raise AssertionError when two simultaneously live buffers share any byte."""
    ivs = sorted(intervals, key=lambda iv: offsets[iv.name])
    for i, a in enumerate(ivs):
        for b in ivs[i + 1:]:
            if offsets[b.name] >= offsets[a.name] + a.size:
                break
            if a.overlaps(b):
                raise AssertionError(
                    f"memory plan overlap: {a.name} [{offsets[a.name]}, +{a.size}) steps {a.start}-{a.end} and "
                    f"{b.name} [{offsets[b.name]}, +{b.size}) steps {b.start}-{b.end}")


def _place(order: list[Interval], align: int, best_fit: bool) -> dict[str, int]:
    placed: list[tuple[int, Interval]] = []
    offsets: dict[str, int] = {}
    for iv in order:
        busy = sorted(((off, other) for off, other in placed if other.overlaps(iv)), key=lambda t: t[0])
        cursor, choice, choice_gap = 0, None, None
        for off, other in busy:
            gap = off - cursor
            if gap >= iv.size:
                if not best_fit:
                    choice = cursor
                    break
                if choice_gap is None or gap < choice_gap:
                    choice, choice_gap = cursor, gap
            cursor = max(cursor, _round(off + other.size, align))
        if choice is None:
            choice = cursor
        offsets[iv.name] = choice
        placed.append((choice, iv))
    return offsets


def plan_greedy_by_size(intervals: list[Interval], align: int = 1) -> dict[str, int]:
    """TFLM's greedy-by-size planner (the baseline hwc must never lose to)."""
    ivs = [Interval(i.name, _round(i.size, align), i.start, i.end) for i in intervals]
    return _place(sorted(ivs, key=lambda i: (-i.size, i.start)), align, best_fit=False)


_ORDERS: dict[str, Callable[[Interval], tuple]] = {
    "size": lambda i: (-i.size, i.start),
    "area": lambda i: (-i.size * (i.end - i.start + 1), -i.size),
    "lifetime": lambda i: (-(i.end - i.start), -i.size),
    "start": lambda i: (i.start, -i.size),
}


def plan_best(intervals: list[Interval], align: int = 1) -> tuple[dict[str, int], str]:
    """hwc's planner: the best of several orders x {first-fit, best-fit}; returns (offsets, how)."""
    ivs = [Interval(i.name, _round(i.size, align), i.start, i.end) for i in intervals]
    best, how = None, ""
    for name, key in _ORDERS.items():
        for fit in (False, True):
            off = _place(sorted(ivs, key=key), align, fit)
            if best is None or peak(off, ivs) < peak(best, ivs):
                best, how = off, f"{name}/{'best' if fit else 'first'}-fit"
    return best or {}, how


# ---- programs --------------------------------------------------------------------------------
INPLACE_OPS = frozenset(UNARY_OPS) | frozenset(BINARY_OPS)


@dataclass
class MemoryPlan:
    offsets: dict[str, int]          # activation storage buffer -> byte offset in the workspace
    workspace_bytes: int             # the peak: size of the activation block
    lower_bound_bytes: int
    naive_bytes: int
    baseline_bytes: int              # TFLM greedy-by-size on the program's own order
    order: list[int]                 # the instruction order chosen
    method: str
    inplace: list[str] = field(default_factory=list)  # instructions that run in place

    def report(self) -> dict:
        return {"peak_bytes": self.workspace_bytes, "lower_bound_bytes": self.lower_bound_bytes,
                "naive_bytes": self.naive_bytes, "tflm_greedy_bytes": self.baseline_bytes,
                "method": self.method, "inplace_instructions": len(self.inplace)}


def intervals_of(prog: Program, order: list[int]) -> list[Interval]:
    """Lifetimes of the activation storage buffers for instructions run in `order`."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for step, idx in enumerate(order):
        ins = prog.instrs[idx]
        for b in ins.writes:
            s = prog.storage(b)
            first.setdefault(s.name, step)
            last[s.name] = max(last.get(s.name, step), step)
        for b in ins.reads:
            s = prog.storage(b)
            if s.name in first:
                last[s.name] = max(last[s.name], step)
    return [Interval(n, prog.buffers[n].nbytes, first[n], last[n])
            for n in first if prog.buffers[n].region == "activation"]


def _apply_inplace(prog: Program) -> list[str]:
    """Let elementwise outputs reuse an input's bytes when that input dies there.

    An instruction is a candidate when its op is elementwise (INPLACE_OPS: every read may
    be taken over) or when a backend lists, in attrs["inplace_reads"], the reads its kernel
    consumes element by element before writing the same element (e.g. a convolution's
    residual operand). Buffers carrying a `layout` (a backend's storage order) must agree.
    """
    last_read: dict[str, int] = {}
    for i, ins in enumerate(prog.instrs):
        for b in ins.reads:
            last_read[prog.storage(b).name] = i
    done = []
    for i, ins in enumerate(prog.instrs):
        allowed = ins.attrs.get("inplace_reads")
        if (ins.op not in INPLACE_OPS and allowed is None) or len(ins.writes) != 1:
            continue
        out = prog.buffers[ins.writes[0]]
        if out.region != "activation" or out.alias_of is not None:
            continue
        for r in (ins.reads if allowed is None else allowed):
            src = prog.storage(r)
            if (src.region == "activation" and last_read.get(src.name) == i and src.type == out.type
                    and prog.buffers[r].type.shape == out.type.shape
                    and src.layout == out.layout):
                out.alias_of = src.name
                ins.attrs["inplace"] = r
                done.append(ins.name)
                break
    return done


def _topo_orders(prog: Program) -> dict[str, list[int]]:
    """Candidate instruction orders: the given one and a memory-greedy one."""
    n = len(prog.instrs)
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    deps_sets: list[set[int]] = [set() for _ in range(n)]
    for i, ins in enumerate(prog.instrs):
        for b in ins.reads:
            s = prog.storage(b).name
            if s in producer and producer[s] != i:
                deps_sets[i].add(producer[s])
            readers.setdefault(s, []).append(i)
        for b in ins.writes:
            s = prog.storage(b).name
            if s in producer:  # an in-place write: after every earlier reader and writer of the bytes
                deps_sets[i].update(j for j in readers.get(s, []) if j != i)
                deps_sets[i].add(producer[s])
                deps_sets[i].discard(i)
            producer[s] = i
    deps = [sorted(d) for d in deps_sets]
    users: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    # Greedy: among ready instructions, run the one that frees the most bytes (ties: program order).
    remaining_reads: dict[str, int] = {}
    for ins in prog.instrs:
        for b in ins.reads:
            s = prog.storage(b).name
            remaining_reads[s] = remaining_reads.get(s, 0) + 1
    indeg = [len(d) for d in deps]
    ready = [i for i in range(n) if indeg[i] == 0]
    greedy = []
    while ready:
        def gain(i):
            ins = prog.instrs[i]
            freed = sum(prog.buffers[s].nbytes for s in {prog.storage(b).name for b in ins.reads}
                        if remaining_reads.get(s) == sum(1 for b in ins.reads if prog.storage(b).name == s))
            alloc = sum(prog.storage(b).nbytes for b in ins.writes)
            return (alloc - freed, i)
        i = min(ready, key=gain)
        ready.remove(i)
        greedy.append(i)
        for b in prog.instrs[i].reads:
            remaining_reads[prog.storage(b).name] -= 1
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    orders = {"program": list(range(n))}
    if len(greedy) == n and greedy != orders["program"]:
        orders["greedy-free"] = greedy
    return orders


def plan_program(prog: Program, align: int = 64, reorder: bool = True, inplace: bool = True) -> MemoryPlan:
    """Plan the workspace of a lowered program (mutates it: in-place aliases, instruction order)."""
    done = _apply_inplace(prog) if inplace else []
    orders = _topo_orders(prog) if reorder else {"program": list(range(len(prog.instrs)))}
    program_ivs = [Interval(i.name, _round(i.size, align), i.start, i.end)
                   for i in intervals_of(prog, orders["program"])]
    baseline = peak(plan_greedy_by_size(program_ivs, align), program_ivs)
    best: MemoryPlan | None = None
    for oname, order in orders.items():
        ivs = intervals_of(prog, order)
        offs, how = plan_best(ivs, align)
        aligned = [Interval(i.name, _round(i.size, align), i.start, i.end) for i in ivs]
        mp = MemoryPlan(offs, peak(offs, aligned), lower_bound(aligned), naive_total(aligned),
                        baseline, order, f"{oname} order, {how}", done)
        if best is None or mp.workspace_bytes < best.workspace_bytes:
            best = mp
    assert best is not None
    prog.instrs = [prog.instrs[i] for i in best.order]
    best.order = list(range(len(prog.instrs)))
    for name, off in best.offsets.items():
        prog.buffers[name].offset = off
    return best


# ---- graphs (the reference target) -----------------------------------------------------------
def plan_graph(g, align: int = 64) -> dict:
    """report.json's `memory` for a graph run node by node (the reference target, which has no lowered
    program): every intermediate tensor (not the graph's inputs, outputs or constants) is a buffer live
    from the node that makes it to the last node that reads it, in the graph's node order."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    io = set(g.inputs) | set(g.outputs)
    for step, n in enumerate(g.nodes):
        for t in n.inputs:
            if t in first:
                last[t] = step
        for t in n.outputs:
            if t and t not in io:
                first.setdefault(t, step)
                last.setdefault(t, step)
    ivs = [Interval(t, _round(g.type(t).nbytes, align), first[t], last[t]) for t in first]
    offs, how = plan_best(ivs, align)
    check_plan(offs, ivs)
    return {"peak_bytes": peak(offs, ivs), "lower_bound_bytes": lower_bound(ivs), "naive_bytes": naive_total(ivs),
            "tflm_greedy_bytes": peak(plan_greedy_by_size(ivs, align), ivs), "method": f"node order, {how}",
            "alignment": align, "step_unit": "node",
            "buffers": [{"name": iv.name, "offset": offs[iv.name], "size": iv.size, "start": iv.start, "end": iv.end}
                        for iv in sorted(ivs, key=lambda i: (i.start, i.name))]}
