"""The static memory planner: never overlaps live buffers, never worse than TFLM's greedy planner."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwc.frontend import import_onnx
from hwc.lower.lir import lower
from hwc.lower.memplan import (
    Interval,
    check_plan,
    lower_bound,
    naive_total,
    peak,
    plan_best,
    plan_greedy_by_size,
    plan_program,
)
from hwc.ref.interp import run_graph
from hwc.zoo import MODELS, random_inputs

intervals = st.lists(
    st.tuples(st.integers(1, 4096), st.integers(0, 30), st.integers(0, 10)).map(
        lambda t: (t[0], t[1], t[1] + t[2])),
    min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(intervals, st.sampled_from([1, 16, 64]))
def test_plans_are_valid_and_never_worse_than_tflm(raw, align):
    ivs = [Interval(f"b{i}", s, a, b) for i, (s, a, b) in enumerate(raw)]
    aligned = [Interval(i.name, -(-i.size // align) * align, i.start, i.end) for i in ivs]
    base = plan_greedy_by_size(ivs, align)
    best, _ = plan_best(ivs, align)
    for plan in (base, best):
        check_plan(plan, aligned)
        assert all(off % align == 0 for off in plan.values())
    assert lower_bound(aligned) <= peak(best, aligned) <= peak(base, aligned) <= naive_total(aligned)


def test_hand_computed_plan():
    # a(100) lives 0-1, b(50) 1-2, c(100) 2-3: a and c can share; b must sit beside both.
    ivs = [Interval("a", 100, 0, 1), Interval("b", 50, 1, 2), Interval("c", 100, 2, 3)]
    plan, _ = plan_best(ivs)
    check_plan(plan, ivs)
    assert peak(plan, ivs) == 150 == lower_bound(ivs)
    assert naive_total(ivs) == 250


def test_checker_catches_overlap():
    ivs = [Interval("a", 10, 0, 2), Interval("b", 10, 2, 3)]
    with pytest.raises(AssertionError, match="overlap"):
        check_plan({"a": 0, "b": 5}, ivs)
    check_plan({"a": 0, "b": 10}, ivs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_models_plan(name):
    g = import_onnx(MODELS[name]())
    prog = lower(g)
    mp = plan_program(prog, align=64)
    from hwc.lower.memplan import intervals_of

    ivs = [Interval(i.name, -(-i.size // 64) * 64, i.start, i.end) for i in intervals_of(prog, mp.order)]
    check_plan(mp.offsets, ivs)
    assert mp.lower_bound_bytes <= mp.workspace_bytes <= mp.baseline_bytes <= mp.naive_bytes
    # The plan is usable: simulate the program in one workspace array and compare with the reference.
    feeds = {k: v[0] for k, v in random_inputs(MODELS[name](), seed=1).items()}
    np.testing.assert_allclose(_run_planned(prog, mp, feeds), run_graph(g, feeds)[g.outputs[0]],
                               rtol=1e-5, atol=1e-6)


def _run_planned(prog, mp, feeds):
    """Execute the lowered program with every activation living at its planned offset."""
    from hwc.ref.interp import run_node

    ws = np.zeros(mp.workspace_bytes + 64, np.uint8)
    env = {b.name: b for b in prog.buffers.values()}
    store = {}

    def read(name):
        s = prog.storage(name)
        b = env[name]
        if s.region == "activation":
            raw = ws[s.offset:s.offset + s.nbytes].view(s.type.np_dtype)
            return raw.reshape(b.type.shape).copy()
        if s.region == "weight":
            return prog.graph.values[s.name].data.reshape(b.type.shape)
        return store[s.name].reshape(b.type.shape)

    def write(name, val):
        s = prog.storage(name)
        val = np.ascontiguousarray(val.astype(s.type.np_dtype))
        if s.region == "activation":
            ws[s.offset:s.offset + s.nbytes] = val.reshape(-1).view(np.uint8)
        else:
            store[s.name] = val

    for k, v in feeds.items():
        store[k] = v
    for ins in prog.instrs:
        outs = run_node(ins.node, [read(r) for r in ins.node.inputs])
        for o, v in zip(ins.writes, outs):
            write(o, np.asarray(v))
    return read(prog.outputs[0])
