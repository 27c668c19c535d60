"""The issue's hand-built graph: every optimization on it at once, through the whole pipeline.

Two Gemms sharing an input, a Transpose->Transpose pair, a transposed constant weight,
Relu->Clip(0, 6), a duplicated subexpression, a dead branch and an Add->Mul->Relu chain.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import model, ort_run
from passes_helpers import assert_same, ops

from hwc.export_onnx import export_onnx
from hwc.frontend import import_onnx
from hwc.passes import optimize

F = TensorProto.FLOAT


def hand_built() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    r = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)
    inits = {"Wt": r(24, 16), "Wa": r(5, 24), "ba": r(5), "Wb": r(24, 3), "bb": r(3), "k": r(5),
             "c1": np.full(3, 1.5, np.float32), "c2": np.full(3, 1.5, np.float32),
             "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    n = helper.make_node
    nodes = [
        n("Transpose", ["Wt"], ["W"], perm=[1, 0], name="weight_T"),         # transposed constant weight
        n("MatMul", ["x", "W"], ["h"], name="fc0"),
        n("Relu", ["h"], ["h1"], name="relu"),                                 # Relu -> Clip(0, 6)
        n("Clip", ["h1", "lo", "hi"], ["h2"], name="clip"),
        n("Gemm", ["h2", "Wa", "ba"], ["ga"], transB=1, name="fc_a"),         # two Gemms sharing h2
        n("Gemm", ["h2", "Wb", "bb"], ["gb"], name="fc_b"),
        n("Transpose", ["ga"], ["t1"], perm=[1, 0], name="t1"),              # Transpose -> Transpose
        n("Transpose", ["t1"], ["t2"], perm=[1, 0], name="t2"),
        n("Add", ["t2", "u"], ["a"], name="add"),                              # Add -> Mul -> Relu
        n("Mul", ["a", "k"], ["m"], name="mul"),
        n("Relu", ["m"], ["y"], name="relu_out"),
        n("Mul", ["gb", "c1"], ["e1"], name="dup1"),                           # duplicated subexpression
        n("Mul", ["gb", "c2"], ["e2"], name="dup2"),
        n("Add", ["e1", "e2"], ["s"], name="sum"),
        n("Sigmoid", ["h"], ["dead1"], name="dead_sigmoid"),                   # dead branch
        n("Tanh", ["dead1"], ["dead2"], name="dead_tanh"),
    ]
    return model(nodes, [("x", F, [1, 16]), ("u", F, [1, 5])], [("y", F, [1, 5]), ("s", F, [1, 3])], inits)


@pytest.mark.parametrize("target", ["cpu", "tile8x8"])
def test_every_optimization_applies_and_outputs_hold(target):
    m = hand_built()
    g = import_onnx(m)
    g2, stats = optimize(g, target, debug=True)
    assert_same(g, g2)
    counts = g2.op_counts()
    # transposed weight folded, Transpose pair gone
    assert "Transpose" not in counts
    # Relu -> Clip(0, 6) is one clamp, fused into the first product
    fc0 = next(n for n in g2.nodes if n.inputs[0] == "x")
    assert fc0.op == "Gemm" and (fc0.attrs["act"], fc0.attrs["act_args"]) == ("clip", [0.0, 6.0])
    assert "Relu" not in counts or target == "tile8x8"
    assert "Clip" not in counts
    # the two Gemms sharing h2 are one Gemm and a Split
    assert counts["Gemm"] == 2 and counts["Split"] == 1
    assert any(line.startswith("merge_fc: merged 'fc_a', 'fc_b'") for line in stats.report_lines())
    # the duplicated Mul is computed once, the dead branch is gone
    assert "Sigmoid" not in counts and "Tanh" not in counts
    if target == "cpu":
        # Add -> Mul -> Relu is one loop; so is Mul -> Add(e, e) after CSE
        programs = sorted(n.attrs["program"] for n in g2.nodes if n.op == "FusedElementwise")
        assert programs == ["add %0 %1; mul %3 %2; relu %4", "mul %0 %1; add %2 %2"]
        assert sorted(ops(g2)) == ["FusedElementwise", "FusedElementwise", "Gemm", "Gemm", "Split"]
    else:
        # the tile keeps elementwise ops apart (its post-processing unit runs them), once each
        assert counts["Mul"] == 2 and counts["Add"] == 2 and counts["Relu"] == 1
    assert stats.nodes_before == 16 and stats.nodes_after == len(g2.nodes)
    # the optimized graph, as standard ONNX, runs in onnxruntime with the same outputs
    exported = export_onnx(g2)
    feeds = {"x": np.ones((1, 16), np.float32) * 0.3, "u": np.linspace(-1, 1, 5, dtype=np.float32)[None]}
    want = ort_run(m, feeds)
    got = ort_run(exported, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * np.abs(want[k]).max())
