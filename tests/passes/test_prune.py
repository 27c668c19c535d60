"""prune: magnitude pruning with sparsity and output error reported; off by default."""

import numpy as np
import pytest
from passes_helpers import context, conv_attrs, new_graph, node, rand, target

from hwc.errors import UserError
from hwc.ir.verify import verify
from hwc.passes import optimize
from hwc.passes.manager import pass_names
from hwc.passes.pipeline import default_pipeline
from hwc.passes.prune import prune, prune_array


def net():
    rng = np.random.default_rng(0)
    g = new_graph(x=(1, 2, 6, 6))
    c = node(g, "Conv", ["x", rand(rng, 4, 2, 3, 3), rand(rng, 4)], {**conv_attrs(), "act": "relu"}, name="conv")
    f = node(g, "Reshape", [c], {"shape": [1, 144]})
    g.make_node("Gemm", [f, g.add_const(rand(rng, 144, 10))], outputs=["y"], name="fc")
    g.make_node("Gemm", [f, g.add_const(rand(rng, 1, 1).reshape(1, 1).repeat(144, 0))], outputs=["z"], name="tiny")
    g.outputs = ["y", "z"]
    return g


def test_prune_array_zeroes_exactly_the_smallest_fraction():
    w = np.array([[0.5, -0.1, 2.0], [-3.0, 0.05, 0.2]], np.float32)
    np.testing.assert_array_equal(prune_array(w, 0.5), [[0.5, 0, 2.0], [-3.0, 0, 0]])
    np.testing.assert_array_equal(prune_array(w, 0.0), w)


def test_prune_zeroes_weights_and_reports_sparsity_and_error():
    g = net()
    g2 = g.copy()
    res = prune(g2, context("ref", prune=0.5))
    verify(g2)
    assert res.changed
    fc = next(n for n in g2.nodes if n.name == "fc")
    w = g2.const(fc.inputs[1])
    assert np.count_nonzero(w == 0) == w.size // 2
    info = g2.metadata["prune"]
    assert info["weights"] == 72 + 1440 + 144 and info["zeros"] == 36 + 720 + 72
    assert 0 < info["rel_l2_error"] < 1 and info["max_abs_error"] > 0
    assert res.notes[0] == ("zeroed the smallest 50.0% of 3 weight tensors: 828 of 1,656 weights are zero "
                            "(sparsity 50.0%)")
    assert res.notes[1].startswith("output error on 4 random inputs: relative L2 ")


def test_prune_declines_a_weight_too_small_to_prune():
    g = new_graph(x=(1, 2))
    g.make_node("Gemm", ["x", g.add_const(np.ones((2, 1), np.float32))], outputs=["y"], name="fc")
    g.outputs = ["y"]
    res = prune(g, context("ref", prune=0.3))
    assert not res.changed
    assert res.declined == [("fc", "weight of 2 entries: 0.3 of it is less than one entry")]


def test_off_by_default_and_validated():
    assert "prune" not in pass_names(default_pipeline(target("tile8x8")))
    g2, stats = optimize(net(), "ref")
    assert "prune" not in g2.metadata
    g3, stats = optimize(net(), "ref", prune=0.25)
    assert g3.metadata["prune"]["sparsity"] >= 0.25
    with pytest.raises(UserError, match=r"'--prune' must be a fraction in \[0, 1\), not 1.5"):
        optimize(net(), "ref", prune=1.5)
