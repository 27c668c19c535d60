"""matmul_to_gemm, fuse_bias and fuse_activation."""

import numpy as np
import pytest
from passes_helpers import conv_attrs, new_graph, node, ops, rand, reasons, run_pass

from hwc.passes.fuse import fuse_activation, fuse_bias, matmul_to_gemm


def test_matmul_by_a_2d_constant_becomes_gemm_and_3d_declines():
    rng = np.random.default_rng(0)
    g = new_graph(x=(2, 8), s=(2, 3, 8))
    g.make_node("MatMul", ["x", g.add_const(rand(rng, 8, 4))], outputs=["y"])
    g.make_node("MatMul", ["s", g.add_const(rand(rng, 8, 4))], outputs=["z"], name="mm3")
    g.outputs = ["y", "z"]
    g2, res = run_pass(g, matmul_to_gemm)
    assert ops(g2) == ["Gemm", "MatMul"]
    assert res.declined == [("mm3", "matmul_2d_const: operands of rank 3 and 2: Gemm takes 2-d operands")]


@pytest.mark.parametrize("bias_shape, op", [((1, 6, 1, 1), "Add"), ((6, 1, 1), "Sub"), ((1,), "Add")])
def test_per_channel_add_becomes_conv_bias(bias_shape, op):
    rng = np.random.default_rng(1)
    g = new_graph(x=(1, 3, 5, 5))
    c = node(g, "Conv", ["x", rand(rng, 6, 3, 3, 3), rand(rng, 6)], conv_attrs())
    g.make_node(op, [c, g.add_const(rand(rng, *bias_shape))], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fuse_bias)
    assert ops(g2) == ["Conv"] and g2.nodes[0].outputs == ["y"]


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_add_after_fc_becomes_its_bias(op):
    rng = np.random.default_rng(2)
    g = new_graph(x=(3, 8))
    h = node(g, op, ["x", rand(rng, 8, 4)])
    g.make_node("Add", [g.add_const(rand(rng, 4)), h], outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fuse_bias)
    assert ops(g2) == ["Gemm"] and len(g2.nodes[0].inputs) == 3


def test_bias_declines_a_constant_that_varies_over_space_and_a_3d_matmul():
    rng = np.random.default_rng(3)
    g = new_graph(x=(1, 2, 4, 4), s=(2, 3, 8))
    c = node(g, "Conv", ["x", rand(rng, 2, 2, 1, 1)], conv_attrs(pad=0))
    g.make_node("Add", [c, g.add_const(rand(rng, 1, 2, 4, 4))], outputs=["y"])
    m = node(g, "MatMul", ["s", rand(rng, 8, 4)])
    g.make_node("Add", [m, g.add_const(rand(rng, 4))], outputs=["z"])
    g.outputs = ["y", "z"]
    g2, res = run_pass(g, fuse_bias)
    assert ops(g2).count("Add") == 2
    assert reasons(res) == [
        "add_const_into_bias: constant of shape (1, 2, 4, 4) varies along axes other than the channel axis",
        "add_const_into_bias: MatMul of rank 3 has no bias input (a Gemm takes 2-d operands)"]


ACTS = [("Relu", {}, "relu", []), ("Clip", {"min": 0.0, "max": 6.0}, "clip", [0.0, 6.0]),
        ("LeakyRelu", {"alpha": 0.1}, "leakyrelu", [0.1]),
        ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, "hardsigmoid", [0.2, 0.5]),
        ("HardSwish", {}, "hardswish", []), ("Sigmoid", {}, "sigmoid", []), ("Tanh", {}, "tanh", [])]


@pytest.mark.parametrize("act_op, attrs, act, args", ACTS)
@pytest.mark.parametrize("op", ["Conv", "Gemm", "MatMul"])
def test_activation_fuses_into_the_product(op, act_op, attrs, act, args):
    rng = np.random.default_rng(4)
    if op == "Conv":
        g = new_graph(x=(1, 3, 5, 5))
        h = node(g, "Conv", ["x", rand(rng, 4, 3, 3, 3), rand(rng, 4)], conv_attrs())
    else:
        g = new_graph(x=(3, 8))
        h = node(g, op, ["x", rand(rng, 8, 4)])
    g.make_node(act_op, [h], attrs, outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fuse_activation)
    assert ops(g2) == [op] and g2.nodes[0].outputs == ["y"]
    assert (g2.nodes[0].attrs["act"], g2.nodes[0].attrs["act_args"]) == (act, args)


def test_relu_then_clip_on_a_fused_product_merge_into_one_clip():
    rng = np.random.default_rng(5)
    g = new_graph(x=(3, 8))
    h = node(g, "Gemm", ["x", rand(rng, 8, 4, scale=3.0)], {"act": "relu"})
    g.make_node("Clip", [h], {"min": -1.0, "max": 6.0}, outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fuse_activation)
    assert ops(g2) == ["Gemm"] and g2.nodes[0].attrs["act_args"] == [0.0, 6.0]


def test_activation_declines_when_the_product_has_another_reader_or_a_sigmoid():
    rng = np.random.default_rng(6)
    g = new_graph(x=(3, 8))
    h = node(g, "Gemm", ["x", rand(rng, 8, 4)], name="fc")
    g.make_node("Relu", [h], outputs=["y"])
    g.make_node("Tanh", [h], outputs=["z"])
    s = node(g, "Gemm", ["x", rand(rng, 8, 4)], {"act": "sigmoid"}, name="fc2")
    g.make_node("Relu", [s], outputs=["w"])
    g.outputs = ["y", "z", "w"]
    g2, res = run_pass(g, fuse_activation)
    assert not res.changed
    assert set(reasons(res)) == {
        f"activation_into_linear: Gemm output {h!r} has 2 consumers",
        "activation_into_linear: Gemm 'fc2' already applies sigmoid; Relu after it does not merge"}
