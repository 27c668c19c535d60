"""The pass manager (Glow/tinygrad style): named passes, an explicit pipeline, fixed points.

A pass is a small named function `fn(graph, ctx) -> PassResult`: whether it changed the
graph, which candidates it declined and why (`(node, reason)`), and notes on decisions
it took (e.g. why two Gemms were merged). A pipeline is a plain list of passes and
`Fixpoint` groups (a group repeats until a whole round changes nothing), so a backend
can take the default list as is, extend it, drop from it or reorder it (`without`,
`insert_after`, `replace`).

`PassManager.run` times every pass, counts nodes before and after, verifies the IR after
every pass in debug mode (and checks that a pass reporting "unchanged" changed nothing),
dumps the graph after a named pass and stops after a named pass. `Stats` holds every run
and renders the per-pass table with rich.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hwc.errors import UserError, VerifyError
from hwc.ir.graph import Graph
from hwc.ir.verify import verify


@dataclass
class PassResult:
    """What one run of a pass did: changed?, declined candidates (node, reason), notes."""

    changed: bool = False
    declined: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def decline(self, node: str, reason: str) -> None:
        self.declined.append((node, reason))


@dataclass(frozen=True)
class PassContext:
    """What passes may read besides the graph: the target description and options."""

    target: dict[str, Any]
    prune: float = 0.0

    @property
    def kind(self) -> str:
        return self.target["kind"]


@dataclass(frozen=True)
class Pass:
    name: str
    fn: Callable[[Graph, PassContext], PassResult]
    doc: str = ""

    def __call__(self, g: Graph, ctx: PassContext) -> PassResult:
        return self.fn(g, ctx)


@dataclass(frozen=True)
class Fixpoint:
    """Run `passes` in order, again and again, until a round changes nothing."""

    name: str
    passes: tuple[Pass, ...]
    max_rounds: int = 10


Pipeline = list  # of Pass | Fixpoint


def graph_pass(name: str) -> Callable[[Callable], Pass]:
    """Decorator: a function `fn(g, ctx) -> PassResult` becomes a named Pass (doc: its docstring)."""
    def deco(fn):
        return Pass(name, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
    return deco


# ---- editing a pipeline (what a backend does with the default list) ---------------------
def pass_names(pipeline: Pipeline) -> list[str]:
    """Every pass name in run order (a group's passes in place of the group)."""
    return [q.name for p in pipeline for q in (p.passes if isinstance(p, Fixpoint) else (p,))]


def without(pipeline: Pipeline, *names: str) -> Pipeline:
    """The pipeline with the named passes (or groups) dropped, inside groups too."""
    out = []
    for p in pipeline:
        if p.name in names:
            continue
        if isinstance(p, Fixpoint):
            p = Fixpoint(p.name, tuple(q for q in p.passes if q.name not in names), p.max_rounds)
        out.append(p)
    return out


def insert_after(pipeline: Pipeline, name: str, *new) -> Pipeline:
    """The pipeline with `new` passes after the top-level pass or group `name`."""
    names = [p.name for p in pipeline]
    if name not in names:
        raise ValueError(f"no top-level pass or group {name!r} in the pipeline ({', '.join(names)})")
    i = names.index(name)
    return pipeline[:i + 1] + list(new) + pipeline[i + 1:]


def replace(pipeline: Pipeline, name: str, new) -> Pipeline:
    return [new if p.name == name else p for p in pipeline]


# ---- statistics ------------------------------------------------------------------------
@dataclass
class PassRun:
    name: str
    group: str          # the Fixpoint group's name, "" at top level
    round: int
    nodes_before: int
    nodes_after: int
    seconds: float
    changed: bool
    declined: list[tuple[str, str]]
    notes: list[str]

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}" if self.group else self.name


@dataclass
class Stats:
    runs: list[PassRun] = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    stopped_after: str | None = None
    unconverged: list[str] = field(default_factory=list)

    def rows(self) -> list[dict]:
        """One row per pass run, in order (a pass in a Fixpoint group has one per round)."""
        return [{"pass": r.key + (f" #{r.round + 1}" if r.group else ""), "changed": r.changed,
                 "nodes_before": r.nodes_before, "nodes_after": r.nodes_after, "seconds": r.seconds,
                 "declined": len(r.declined)} for r in self.runs]

    def summary_rows(self) -> list[dict]:
        """One row per pass (its runs summed), in pipeline order, with its unique declines and notes."""
        rows: dict[str, dict] = {}
        for r in self.runs:
            row = rows.setdefault(r.key, {"pass": r.key, "runs": 0, "changed": 0, "delta": 0, "seconds": 0.0,
                                          "declined": [], "notes": []})
            row["runs"] += 1
            row["changed"] += r.changed
            row["delta"] += r.nodes_after - r.nodes_before
            row["seconds"] += r.seconds
            row["declined"] += [d for d in r.declined if d not in row["declined"]]
            row["notes"] += [n for n in r.notes if n not in row["notes"]]
        return list(rows.values())

    def declined(self) -> dict[str, list[tuple[str, str]]]:
        """pass -> the unique (node, reason) pairs it declined."""
        return {r["pass"]: r["declined"] for r in self.summary_rows() if r["declined"]}

    def notes(self) -> dict[str, list[str]]:
        return {r["pass"]: r["notes"] for r in self.summary_rows() if r["notes"]}

    def to_dict(self) -> dict:
        return {"nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "ops_before": self.ops_before, "ops_after": self.ops_after,
                "stopped_after": self.stopped_after, "runs": self.rows(), "passes": self.summary_rows()}

    def table(self, title: str = "graph passes", compact: bool = False):
        """The per-pass table (rich): one row per run, or per pass when compact."""
        from rich.table import Table

        t = Table(title=title)
        cols = ["pass", "runs", "changed", "Δ nodes"] if compact else ["pass", "changed", "nodes before",
                                                                       "nodes after", "Δ nodes"]
        for col in cols + ["time ms", "declined"]:
            t.add_column(col, justify="left" if col == "pass" else "right")
        fmt = lambda d: f"{d:+d}" if d else "0"
        if compact:
            for r in self.summary_rows():
                t.add_row(r["pass"], str(r["runs"]), str(r["changed"]), fmt(r["delta"]),
                          f"{r['seconds'] * 1e3:.2f}", str(len(r["declined"])))
        else:
            for r in self.rows():
                t.add_row(r["pass"], "yes" if r["changed"] else "", str(r["nodes_before"]), str(r["nodes_after"]),
                          fmt(r["nodes_after"] - r["nodes_before"]), f"{r['seconds'] * 1e3:.2f}",
                          str(r["declined"]) if r["declined"] else "")
        total = [str(len(self.runs)), str(sum(r.changed for r in self.runs))] if compact else \
            [str(sum(r.changed for r in self.runs)), str(self.nodes_before), str(self.nodes_after)]
        t.add_row("[bold]total[/bold]", *total, fmt(self.nodes_after - self.nodes_before),
                  f"{sum(r.seconds for r in self.runs) * 1e3:.2f}",
                  str(sum(len(d) for d in self.declined().values())))
        return t

    def report_lines(self, max_per_reason: int = 3) -> list[str]:
        """Decisions and declines as text: reasons grouped, with up to a few node names each."""
        lines = []
        for name, notes in self.notes().items():
            lines += [f"{name}: {n}" for n in notes]
        for name, declined in self.declined().items():
            by_reason: dict[str, list[str]] = {}
            for node, reason in declined:
                by_reason.setdefault(reason, []).append(node)
            for reason, nodes in by_reason.items():
                more = f" (+{len(nodes) - max_per_reason} more)" if len(nodes) > max_per_reason else ""
                lines.append(f"{name} declined {len(nodes)}x [{', '.join(nodes[:max_per_reason])}{more}]: {reason}")
        for u in self.unconverged:
            lines.append(f"warning: {u}")
        if self.stopped_after:
            lines.append(f"stopped after pass {self.stopped_after!r} (--stop-after)")
        return lines


# ---- running ---------------------------------------------------------------------------
class _Stop(Exception):
    pass


def _signature(g: Graph) -> tuple:
    nodes = tuple((n.op, tuple(n.inputs), tuple(n.outputs), repr(n.attrs)) for n in g.nodes)
    consts = tuple(sorted((k, id(v.data)) for k, v in g.values.items() if v.is_const))
    return nodes, consts, tuple(g.inputs), tuple(g.outputs)


class PassManager:
    """Runs a pipeline over a graph (in place) and records a PassRun for every pass run."""

    def __init__(self, pipeline: Pipeline, ctx: PassContext, *, debug: bool = False,
                 dump_after: str | None = None, stop_after: str | None = None,
                 dump: Callable[[str], None] = print):
        names = pass_names(pipeline)
        for opt, val in (("--dump-after", dump_after), ("--stop-after", stop_after)):
            if val is not None and val != "all" and val not in names:
                raise UserError(f"{opt} {val!r}: no pass of that name in the pipeline for target "
                                f"{ctx.target['name']!r}. Passes: {', '.join(dict.fromkeys(names))}.")
        self.pipeline, self.ctx, self.debug = pipeline, ctx, debug
        self.dump_after, self.stop_after, self.dump = dump_after, stop_after, dump

    def run(self, g: Graph) -> Stats:
        stats = Stats(nodes_before=len(g.nodes), ops_before=dict(sorted(g.op_counts().items())))
        try:
            for p in self.pipeline:
                if isinstance(p, Fixpoint):
                    self._fixpoint(g, p, stats)
                else:
                    self._run_one(g, p, "", 0, stats)
        except _Stop:
            stats.stopped_after = self.stop_after
        stats.nodes_after = len(g.nodes)
        stats.ops_after = dict(sorted(g.op_counts().items()))
        return stats

    def _fixpoint(self, g: Graph, group: Fixpoint, stats: Stats) -> None:
        for rnd in range(group.max_rounds):
            changed = [self._run_one(g, p, group.name, rnd, stats) for p in group.passes]
            if not any(changed):
                return
        stats.unconverged.append(f"group {group.name!r} still changed the graph after {group.max_rounds} rounds")

    def _run_one(self, g: Graph, p: Pass, group: str, rnd: int, stats: Stats) -> bool:
        before = len(g.nodes)
        sig = _signature(g) if self.debug else None
        t0 = time.perf_counter()
        res = p(g, self.ctx)
        dt = time.perf_counter() - t0
        stats.runs.append(PassRun(p.name, group, rnd, before, len(g.nodes), dt, res.changed,
                                  list(res.declined), list(res.notes)))
        if self.debug:
            verify(g, f"pass {p.name!r}")
            if not res.changed and _signature(g) != sig:
                raise VerifyError(f"pass {p.name!r} changed graph {g.name!r} but reported no change")
        if self.dump_after in (p.name, "all"):
            where = f"{group}/{p.name} round {rnd}" if group else p.name
            self.dump(f"// after pass {where} ({'changed' if res.changed else 'unchanged'})\n{g}")
        if self.stop_after == p.name:
            raise _Stop
        return res.changed
