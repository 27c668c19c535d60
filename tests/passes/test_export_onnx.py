"""hwc.export_onnx: optimized graphs as valid ONNX, standard ops running in onnxruntime."""

import math

import numpy as np
import onnx
import pytest
from onnx_helpers import ort_run
from passes_helpers import new_graph, node, rand, zoo_model

from hwc.export_onnx import DOMAIN, export_onnx
from hwc.frontend import import_onnx
from hwc.ir.types import TensorType
from hwc.passes import optimize
from hwc.ref.interp import run_graph
from hwc.zoo import MODELS, random_inputs


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_optimized_zoo_models_run_in_onnxruntime_unchanged(name):
    m = zoo_model(name)
    g = import_onnx(m)
    g2, _ = optimize(g, "ref")
    exported = export_onnx(g2)
    onnx.checker.check_model(exported, full_check=True)
    assert all(n.domain in ("", None) for n in exported.graph.node)
    assert [i.name for i in exported.graph.input] == ["input"] and [o.name for o in exported.graph.output] == ["output"]
    feeds = {k: v[0] for k, v in random_inputs(m, 1).items()}
    close(ort_run(exported, feeds)["output"], run_graph(g, feeds)["output"])


def test_custom_domain_keeps_fused_nodes_whole():
    g2, _ = optimize(import_onnx(zoo_model("resnet8")), "cpu")
    exported = export_onnx(g2, custom_domain=True)
    onnx.checker.check_model(exported)
    custom = {n.op_type for n in exported.graph.node if n.domain == DOMAIN}
    assert custom == {"Conv", "FusedElementwise"}
    fused = next(n for n in exported.graph.node if n.op_type == "FusedElementwise")
    assert onnx.helper.get_attribute_value(fused.attribute[0]) == b"add %0 %1; relu %2"
    conv = next(n for n in exported.graph.node if n.domain == DOMAIN and n.op_type == "Conv")
    assert {a.name for a in conv.attribute} >= {"act", "kernel_shape", "pads", "strides", "group"}
    assert {(o.domain, o.version) for o in exported.opset_import} == {("", 17), (DOMAIN, 1)}
    assert len(exported.graph.node) == len(g2.nodes)


def test_every_fused_activation_and_data_movement_op_exports():
    rng = np.random.default_rng(0)
    g = new_graph(x=(2, 8))
    outs = []
    for act, args in [("relu", []), ("clip", [-1.0, math.inf]), ("leakyrelu", [0.1]), ("hardsigmoid", [0.3, 0.4]),
                      ("hardswish", []), ("sigmoid", []), ("tanh", [])]:
        outs.append(node(g, "Gemm", ["x", rand(rng, 8, 3), rand(rng, 3)], {"act": act, "act_args": args}))
    s = node(g, "Slice", [outs[0]], {"starts": [1, 2], "ends": [-1, 0], "steps": [-1, -1]})
    p = node(g, "Pad", [outs[1]], {"pads": [1, 0, 0, 2], "value": 0.5})
    a, b = g.make_node("Split", [outs[2]], {"axis": 1, "split": [1, 2]}, n_outputs=2).outputs
    r = node(g, "ReduceSum", [b], {"axes": [1], "keepdims": 1})
    c = node(g, "Clip", [r], {"min": -math.inf, "max": 0.25})
    q = node(g, "Cast", [node(g, "Cast", [a], {"to": "int32"})], {"to": "float32"})
    f = g.make_node("FusedElementwise", [outs[3], outs[4], outs[5]],
                    {"program": "mul %0 %1; sub %3 %2; max %4 -0.5; tanh %5"}).outputs[0]
    g.outputs = [s, p, c, q, f, outs[6]]
    exported = export_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    want, got = run_graph(g, feeds), ort_run(exported, feeds)
    for o in g.outputs:
        close(got[o], want[o])


def test_an_output_that_folded_to_a_constant_still_exports():
    g = new_graph(x=(2,))
    g.make_node("Relu", ["x"], outputs=["y"])
    g.add_value("k", TensorType("float32", (2,)), np.array([1.0, 2.0], np.float32))
    g.outputs = ["y", "k"]
    exported = export_onnx(g)
    got = ort_run(exported, {"x": np.array([-1.0, 3.0], np.float32)})
    np.testing.assert_array_equal(got["k"], [1.0, 2.0])


def test_opset_rises_only_when_needed_and_zero_dims_stay_zero():
    g = new_graph(x=(1, 1, 6, 6))
    a = node(g, "AveragePool", ["x"], {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 0, 0],
                                       "dilations": [2, 2]})
    r = node(g, "ReduceMean", [a], {"axes": [3], "keepdims": 0})
    e = node(g, "Reshape", [node(g, "Slice", [r], {"starts": [0, 0, 0], "ends": [1, 1, 0], "steps": [1, 1, 1]})],
             {"shape": [0, 4]})
    g.outputs = [r, e]
    exported = export_onnx(g)
    assert [o.version for o in exported.opset_import if o.domain == ""] == [19]
    feeds = {"x": np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)}
    want, got = run_graph(g, feeds), ort_run(exported, feeds)
    close(got[r], want[r])
    assert got[e].shape == (0, 4)


def test_a_clip_inside_a_fused_chain_exports():
    """A Clip reading one of a FusedElementwise chain's temporaries (Sub -> Clip -> Add)."""
    g = new_graph(x=(2, 8), z=(2, 8))
    g.make_node("FusedElementwise", ["x", "z"], {"program": "sub %0 %1; clip %2 -0.5 0.5; add %3 %1"},
                outputs=["y"])
    g.outputs = ["y"]
    exported = export_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((2, 8)).astype(np.float32) for k in ("x", "z")}
    want = np.clip(feeds["x"] - feeds["z"], -0.5, 0.5) + feeds["z"]
    close(ort_run(exported, feeds)["y"], want)
