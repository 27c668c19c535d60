"""merge_clips: Relu/Clip clamps merged, Clip(0, inf) recognised as Relu."""

import math

import numpy as np
import pytest
from passes_helpers import context, new_graph, node, ops, reasons, run_pass

from hwc.ir.types import TensorType
from hwc.passes.clip import merge_clips


def chain(*clamps, scale=4.0):
    g = new_graph(x=(4, 16))
    y = node(g, "Mul", ["x", np.full((), scale, np.float32)])
    for op, attrs in clamps[:-1]:
        y = node(g, op, [y], attrs)
    op, attrs = clamps[-1]
    g.make_node(op, [y], attrs, outputs=["y"])
    g.outputs = ["y"]
    return g


@pytest.mark.parametrize("clamps, expect", [
    ([("Relu", {}), ("Clip", {"min": 0.0, "max": 6.0})], ("Clip", 0.0, 6.0)),
    ([("Relu", {}), ("Clip", {"min": -2.0, "max": 6.0})], ("Clip", 0.0, 6.0)),
    ([("Clip", {"min": -1.0, "max": 3.0}), ("Clip", {"min": 0.5, "max": 6.0})], ("Clip", 0.5, 3.0)),
    ([("Clip", {"min": -1.0, "max": 3.0}), ("Relu", {})], ("Clip", 0.0, 3.0)),
    ([("Clip", {"min": -5.0, "max": math.inf}), ("Relu", {})], ("Relu",)),
    ([("Relu", {}), ("Relu", {}), ("Clip", {"min": 0.0, "max": 6.0})], ("Clip", 0.0, 6.0)),
    ([("Clip", {"min": 0.0, "max": math.inf})], ("Relu",)),
])
def test_clamps_merge_into_one(clamps, expect):
    g2, res = run_pass(chain(*clamps), merge_clips)
    assert res.changed and ops(g2) == ["Mul", expect[0]]
    last = g2.nodes[-1]
    assert last.outputs == ["y"]
    if expect[0] == "Clip":
        assert (last.attrs["min"], last.attrs["max"]) == expect[1:]


def test_declines_disjoint_intervals():
    g2, res = run_pass(chain(("Clip", {"min": 0.0, "max": 1.0}), ("Clip", {"min": 2.0, "max": 3.0})), merge_clips)
    assert ops(g2) == ["Mul", "Clip", "Clip"]
    assert reasons(res) == ["clamp_after_clamp: intervals [0, 1] then [2, 3] do not overlap (the result is a "
                            "constant)"]


def test_declines_integer_clamps():
    g = new_graph()
    g.add_input("q", TensorType("int32", (5,)))
    r = node(g, "Clip", ["q"], {"min": -3.5, "max": 100.0})
    g.make_node("Clip", [r], {"min": -1.5, "max": 2.5}, outputs=["y"])
    g.outputs = ["y"]
    _, res = run_pass_int(g)
    assert reasons(res) == ["clamp_after_clamp: int32 tensor: Clip rounds its bounds on integers"]


def run_pass_int(g):
    """run_pass without the float comparison (integer inputs)."""
    g2 = g.copy()
    return g2, merge_clips(g2, context())
