"""fold_batchnorm and batchnorm_to_scale_shift."""

import numpy as np
import pytest
from passes_helpers import bn_params, conv_attrs, new_graph, node, ops, rand, reasons, run_pass

from hwc.passes.batchnorm import batchnorm_to_scale_shift, fold_batchnorm


@pytest.mark.parametrize("group, bias", [(1, True), (1, False), (4, True)])
def test_bn_folds_into_conv(group, bias):
    rng = np.random.default_rng(group)
    g = new_graph(x=(1, 4, 6, 6))
    ins = ["x", rand(rng, 8, 4 // group, 3, 3)] + ([rand(rng, 8, scale=0.1)] if bias else [])
    c = node(g, "Conv", ins, conv_attrs(group=group), name="conv")
    g.make_node("BatchNormalization", [c, *bn_params(g, rng, 8)], {"epsilon": 1e-3}, outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fold_batchnorm)
    assert ops(g2) == ["Conv"] and g2.nodes[0].outputs == ["y"] and len(g2.nodes[0].inputs) == 3


@pytest.mark.parametrize("op, trans_b, with_c", [("Gemm", 1, True), ("Gemm", 0, False), ("MatMul", 0, False)])
def test_bn_folds_into_gemm_and_matmul(op, trans_b, with_c):
    rng = np.random.default_rng(3)
    g = new_graph(x=(2, 16))
    w = rand(rng, 8, 16) if trans_b else rand(rng, 16, 8)
    ins = ["x", w] + ([rand(rng, 8)] if with_c else [])
    attrs = {"transB": trans_b, "beta": 0.5} if op == "Gemm" else {}
    h = node(g, op, ins, attrs)
    g.make_node("BatchNormalization", [h, *bn_params(g, rng, 8)], outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, fold_batchnorm)
    assert ops(g2) == ["Gemm"]


def test_fold_declines_when_the_conv_output_has_another_consumer():
    rng = np.random.default_rng(4)
    g = new_graph(x=(1, 2, 4, 4))
    c = node(g, "Conv", ["x", rand(rng, 3, 2, 1, 1)], conv_attrs(pad=0), name="conv")
    g.make_node("BatchNormalization", [c, *bn_params(g, rng, 3)], outputs=["y"], name="bn")
    g.make_node("Relu", [c], outputs=["z"])
    g.outputs = ["y", "z"]
    g2, res = run_pass(g, fold_batchnorm)
    assert not res.changed and "BatchNormalization" in ops(g2)
    assert res.declined == [("bn", f"bn_into_linear: Conv output {c!r} has 2 consumers")]
    # ... and the lone BN becomes a per-channel scale and shift
    g3, res3 = run_pass(g2, batchnorm_to_scale_shift)
    assert res3.changed and sorted(ops(g3)) == ["Add", "Conv", "Mul", "Relu"]
    mul = next(n for n in g3.nodes if n.op == "Mul")
    assert g3.type(mul.inputs[1]).shape == (3, 1, 1)


def test_fold_declines_after_an_activation():
    rng = np.random.default_rng(5)
    g = new_graph(x=(2, 4))
    h = node(g, "Gemm", ["x", rand(rng, 4, 3)], {"act": "relu"}, name="fc")
    g.make_node("BatchNormalization", [h, *bn_params(g, rng, 3)], outputs=["y"], name="bn")
    g.outputs = ["y"]
    _, res = run_pass(g, fold_batchnorm)
    assert reasons(res) == ["bn_into_linear: Gemm 'fc' already applies relu: the BN comes after the activation"]


def test_lone_bn_on_2d_and_4d_becomes_mul_add():
    rng = np.random.default_rng(6)
    for shape in ((3, 5), (2, 5, 3, 3)):
        g = new_graph(x=shape)
        g.make_node("BatchNormalization", ["x", *bn_params(g, rng, 5)], {"epsilon": 1e-3}, outputs=["y"])
        g.outputs = ["y"]
        g2, _ = run_pass(g, batchnorm_to_scale_shift)
        assert ops(g2) == ["Mul", "Add"] and g2.nodes[1].outputs == ["y"]


def test_lone_bn_declines_run_time_statistics():
    rng = np.random.default_rng(7)
    g = new_graph(x=(2, 3), mean=(3,))
    gamma, beta, _, var = bn_params(g, rng, 3)
    g.make_node("BatchNormalization", ["x", gamma, beta, "mean", var], outputs=["y"])
    g.outputs = ["y"]
    _, res = run_pass(g, batchnorm_to_scale_shift)
    assert reasons(res) == ["bn_to_mul_add: its scale/bias/mean/var are computed at run time, not constants"]
