"""fuse_elementwise and the FusedElementwise op (schema, program parser, reference kernel)."""

import numpy as np
import pytest
from passes_helpers import assert_same, new_graph, node, ops, rand, reasons, run_pass

from hwc.ir.types import TensorType
from hwc.ir.verify import verify
from hwc.passes.elementwise import fuse_elementwise


def test_add_mul_relu_chain_becomes_one_node_bit_exact():
    rng = np.random.default_rng(0)
    g = new_graph(x=(1, 4, 3, 3), z=(1, 4, 3, 3))
    a = node(g, "Add", ["x", "z"])
    m = node(g, "Mul", [a, rand(rng, 4, 1, 1)])
    g.make_node("Relu", [m], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fuse_elementwise)
    assert ops(g2) == ["FusedElementwise"] and g2.nodes[0].outputs == ["y"]
    assert g2.nodes[0].attrs["program"] == "add %0 %1; mul %3 %2; relu %4"
    assert_same(g, g2, exact=True)  # each instruction rounds to float32 like the op it replaces


def test_scalars_become_literals_and_params_follow_the_schema():
    g = new_graph(x=(2, 5))
    s = node(g, "Sub", ["x", np.full((1,), 0.25, np.float32)])
    d = node(g, "Div", [s, np.full((), 3.0, np.float32)])
    c = node(g, "Clip", [d], {"min": -0.5, "max": 0.75})
    g.make_node("LeakyRelu", [c], {"alpha": 0.125}, outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fuse_elementwise)
    assert g2.nodes[0].inputs == ["x"]
    assert g2.nodes[0].attrs["program"] == "sub %0 0.25; div %1 3.0; clip %2 -0.5 0.75; leakyrelu %3 0.125"
    assert_same(g, g2, exact=True)


def test_a_literal_that_would_change_the_shape_stays_an_input():
    g = new_graph(x=(3,))
    a = node(g, "Add", ["x", np.ones((1, 1), np.float32)])
    g.make_node("Relu", [a], outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fuse_elementwise)
    assert len(g2.nodes[0].inputs) == 2 and g2.type("y").shape == (1, 3)


def test_existing_fused_nodes_are_inlined_into_a_larger_group():
    g = new_graph(x=(4,), z=(4,))
    f = g.make_node("FusedElementwise", ["x", "z"], {"program": "mul %0 %1; tanh %2"}).outputs[0]
    a = node(g, "Add", [f, "x"])
    g.make_node("Sigmoid", [a], outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fuse_elementwise)
    assert ops(g2) == ["FusedElementwise"]
    assert g2.nodes[0].attrs["program"] == "mul %0 %1; tanh %2; add %3 %0; sigmoid %4"
    assert_same(g, g2, exact=True)


def test_declines_an_intermediate_that_others_read():
    g = new_graph(x=(4,), z=(4,))
    a = node(g, "Add", ["x", "z"], name="add")
    g.make_node("Relu", [a], outputs=["y"])
    g.make_node("Sigmoid", [a], outputs=["w"])
    g.outputs = ["y", "w"]
    g2, res = run_pass(g, fuse_elementwise)
    assert ops(g2) == ["Add", "Relu", "Sigmoid"]
    assert f"not fused into 'sigmoid': its output {a!r} has 2 consumers (it must be stored)" in reasons(res)


@pytest.mark.parametrize("program, message", [
    ("add %0 %5", "reads register %5, only %0..%1 exist"),
    ("frob %0", "unknown op"),
    ("clip %0 1", "clip takes 1 operand(s) and 2 parameter(s)"),
    ("relu %0", "inputs [1] are not used by the program"),
])
def test_schema_rejects_bad_programs(program, message):
    g = new_graph(x=(2,), z=(2,))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        g.make_node("FusedElementwise", ["x", "z"], {"program": program})


def test_schema_broadcasts_and_wants_float32():
    g = new_graph(x=(2, 1), z=(3,))
    n = g.make_node("FusedElementwise", ["x", "z"], {"program": "max %0 %1"})
    assert g.type(n.outputs[0]) == TensorType("float32", (2, 3))
    g.add_input("q", TensorType("int32", (2,)))
    with pytest.raises(ValueError, match="every input must be float32"):
        g.make_node("FusedElementwise", ["q"], {"program": "neg %0"})
    verify(g)
