"""Clip/ReLU algebra: Relu and Clip are clamps to an interval ([0, inf) and [lo, hi]).

A clamp after a clamp is one clamp to the intersection (when the intervals overlap;
otherwise the result is a constant and the rule declines). Clip(0, inf) is Relu.
Only float32: Clip on integers rounds its bounds.
"""

from __future__ import annotations

import math

from hwc.ir.graph import Graph
from hwc.passes.rewrite import Match, Rule, drop_if_dead, is_float, producer, rules_pass, set_op


def interval(n) -> tuple[float, float] | None:
    if n.op == "Relu":
        return 0.0, math.inf
    if n.op == "Clip":
        return n.attrs["min"], n.attrs["max"]
    return None


def _set_clamp(n, lo: float, hi: float) -> None:
    if (lo, hi) == (0.0, math.inf):
        set_op(n, "Relu", {})
    else:
        set_op(n, "Clip", {"min": lo, "max": hi})


def _pair(g: Graph, n) -> Match | None:
    if interval(n) is None:
        return None
    inner = producer(g, n.inputs[0])
    return {"inner": inner} if inner is not None and interval(inner) is not None else None


def _pair_check(g: Graph, m: Match) -> str | None:
    n, inner = m["node"], m["inner"]
    if not is_float(g, n.inputs[0]):
        return f"{g.type(n.inputs[0]).dtype} tensor: Clip rounds its bounds on integers"
    (a, b), (c, d) = interval(inner), interval(n)
    if max(a, c) > min(b, d):
        return f"intervals [{a:g}, {b:g}] then [{c:g}, {d:g}] do not overlap (the result is a constant)"
    return None


def _merge(g: Graph, m: Match) -> None:
    n, inner = m["node"], m["inner"]
    (a, b), (c, d) = interval(inner), interval(n)
    n.inputs[0] = inner.inputs[0]
    _set_clamp(n, max(a, c), min(b, d))
    drop_if_dead(g, inner)


def _relu_clip(g: Graph, n) -> Match | None:
    ok = n.op == "Clip" and (n.attrs["min"], n.attrs["max"]) == (0.0, math.inf) and is_float(g, n.inputs[0])
    return {} if ok else None


merge_clips = rules_pass("merge_clips", [
    Rule("clamp_after_clamp", _pair, _pair_check, _merge),
    Rule("clip_0_inf_is_relu", _relu_clip, lambda g, m: None, lambda g, m: _set_clamp(m["node"], 0.0, math.inf)),
], "Relu->Clip, Clip->Clip, Clip->Relu merged into one clamp; Clip(0, inf) -> Relu.")
