"""The whole pipeline over every hwc.zoo model, for every target kind.

Every BatchNorm folded, every Conv/Gemm carries its activation (no activation node left
reading a product), outputs unchanged (see passes_helpers), names kept, fewer nodes.
"""

import numpy as np
import pytest
from passes_helpers import RTOL, zoo_model

from hwc.frontend import import_onnx
from hwc.passes import optimize
from hwc.ref.interp import run_graph
from hwc.zoo import MODELS, random_inputs

ACT_OPS = {"Relu", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh"}
LINEAR = {"Conv", "Gemm", "MatMul"}


def activations_after_products(g, through_bn=False):
    """Activation nodes reading a Conv/Gemm/MatMul output (or, through_bn, a BN of one)."""
    prod = {o: n for n in g.nodes for o in n.outputs}

    def product(v):
        p = prod.get(v)
        if through_bn and p is not None and p.op == "BatchNormalization":
            p = prod.get(p.inputs[0])
        return p is not None and p.op in LINEAR

    return [n.name for n in g.nodes if n.op in ACT_OPS and product(n.inputs[0])]


@pytest.mark.parametrize("target", ["ref", "cpu", "tile8x8", "tile32x32"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_pipeline_on_zoo_model(name, target):
    m = zoo_model(name)
    g = import_onnx(m)
    g2, stats = optimize(g, target, debug=True)
    assert g2.inputs == g.inputs == ["input"] and g2.outputs == g.outputs == ["output"]
    assert "BatchNormalization" not in g2.op_counts()
    assert not activations_after_products(g2)
    fused = sum(1 for n in g2.nodes if n.op in LINEAR and n.attrs["act"])
    assert fused == len(activations_after_products(g, through_bn=True)) > 0
    assert stats.nodes_before == len(g.nodes) > stats.nodes_after == len(g2.nodes)
    xs = random_inputs(m, n=2, seed=1)
    for i in range(2):
        feeds = {k: v[i] for k, v in xs.items()}
        ref, got = run_graph(g, feeds)["output"], run_graph(g2, feeds)["output"]
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


def test_node_counts_before_and_after():
    """The figures the issue asks for (also printed by `hwc opt`)."""
    counts = {}
    for name in ("resnet8", "ds_cnn", "mobilenet_v1_025", "fc_autoencoder"):
        _, stats = optimize(import_onnx(zoo_model(name)), "cpu")
        counts[name] = (stats.nodes_before, stats.nodes_after)
    assert counts == {"resnet8": (29, 15), "ds_cnn": (30, 12), "mobilenet_v1_025": (84, 30),
                      "fc_autoencoder": (28, 10)}
