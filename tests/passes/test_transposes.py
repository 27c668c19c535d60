"""collapse_transposes and sink_transposes."""

import numpy as np
from passes_helpers import new_graph, node, ops, rand, reasons, run_pass

from hwc.passes.transpose import collapse_transposes, sink_transposes


def test_inverse_pair_disappears():
    g = new_graph(x=(2, 3, 4, 5))
    t = node(g, "Transpose", ["x"], {"perm": [0, 2, 3, 1]})
    t2 = node(g, "Transpose", [t], {"perm": [0, 3, 1, 2]})
    g.make_node("Relu", [t2], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, collapse_transposes)
    assert res.changed and ops(g2) == ["Relu"] and g2.nodes[0].inputs == ["x"]


def test_chain_of_three_becomes_one_with_the_composed_perm():
    g = new_graph(x=(2, 3, 4))
    t = "x"
    for perm in ([1, 0, 2], [0, 2, 1], [2, 1, 0]):
        t = node(g, "Transpose", [t], {"perm": perm})
    g.make_node("Relu", [t], outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, collapse_transposes)
    assert ops(g2) == ["Transpose", "Relu"]
    assert g2.nodes[0].inputs == ["x"] and g2.type(g2.nodes[0].outputs[0]) == g.type(t)


def test_inner_transpose_with_another_reader_stays_and_graph_io_names_hold():
    """The pair still collapses for one reader; the graph output keeps its name through an Identity
    when it would otherwise become the graph input."""
    g = new_graph(x=(2, 3))
    t = node(g, "Transpose", ["x"], {"perm": [1, 0]})
    g.make_node("Transpose", [t], {"perm": [1, 0]}, outputs=["y"])
    g.make_node("Relu", [t], outputs=["z"])
    g.outputs = ["y", "z"]
    g2, _ = run_pass(g, collapse_transposes)
    assert sorted(ops(g2)) == ["Identity", "Relu", "Transpose"]
    assert next(n for n in g2.nodes if n.op == "Identity").inputs == ["x"]


def test_transpose_sinks_through_elementwise_ops_to_cancel():
    rng = np.random.default_rng(0)
    g = new_graph(x=(1, 4, 3, 3), z=(1, 4, 3, 3))
    t = node(g, "Transpose", ["x"], {"perm": [0, 2, 3, 1]})        # NCHW -> NHWC
    tz = node(g, "Transpose", ["z"], {"perm": [0, 2, 3, 1]})
    a = node(g, "Add", [t, rand(rng, 4)])                            # per-channel constant in NHWC
    r = node(g, "Relu", [a])
    m = node(g, "Mul", [r, tz])
    g.make_node("Transpose", [m], {"perm": [0, 3, 1, 2]}, outputs=["y"])  # back to NCHW
    g.outputs = ["y"]
    g2, res = run_pass(g, sink_transposes)
    assert res.changed and ops(g2)[:3] == ["Add", "Relu", "Mul"]
    g3, _ = run_pass(g2, collapse_transposes)
    assert "Transpose" not in ops(g3)
    add = g3.nodes[0]
    assert g3.type(add.inputs[1]).shape == (1, 4, 1, 1)              # the constant moved to NCHW


def test_sink_declines_when_no_transpose_is_below():
    g = new_graph(x=(2, 3))
    t = node(g, "Transpose", ["x"], {"perm": [1, 0]})
    g.make_node("Relu", [t], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, sink_transposes)
    assert not res.changed and ops(g2) == ["Transpose", "Relu"]
    assert reasons(res) == ["sink_through_elementwise: no Transpose below to cancel with: sinking would only move it"]


def test_sink_declines_a_plain_operand():
    g = new_graph(x=(2, 3), w=(3, 2))
    t = node(g, "Transpose", ["x"], {"perm": [1, 0]})
    a = node(g, "Add", [t, "w"])
    g.make_node("Transpose", [a], {"perm": [1, 0]}, outputs=["y"])
    g.outputs = ["y"]
    _, res = run_pass(g, sink_transposes)
    assert reasons(res) == ["sink_through_elementwise: operand 'w' is neither a constant nor a Transpose with "
                            "perm [1, 0]"]
