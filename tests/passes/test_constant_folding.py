"""fold_constants and fold_weight_transposes."""

import numpy as np
from onnx import TensorProto, helper
from onnx_helpers import model
from passes_helpers import new_graph, node, ops, rand, reasons, run_pass

from hwc.frontend import import_onnx
from hwc.passes.fold import fold_constants, fold_weight_transposes


def test_folds_shape_arithmetic_and_weight_math():
    rng = np.random.default_rng(0)
    g = new_graph(x=(2, 3, 4))
    # shape arithmetic: Gather(shape, [2]) and Concat -> [3, 4] -> Cast -> used as a float offset
    shape = g.add_const(np.array([2, 3, 4], np.int64), "shape")
    dims = node(g, "Gather", [shape, np.array([1, 2], np.int64)], {"axis": 0})
    both = node(g, "Concat", [dims, np.array([7], np.int64)], {"axis": 0})
    offs = node(g, "Cast", [both], {"to": "float32"})
    w = node(g, "Mul", [rand(rng, 4), np.float32(2.0) * np.ones(4, np.float32)])
    a = node(g, "Add", ["x", w])
    g.make_node("Add", [a, node(g, "Slice", [offs], {"starts": [0], "ends": [1], "steps": [1]})], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fold_constants)
    assert res.changed and ops(g2) == ["Add", "Add"]
    assert g2.const(g2.nodes[1].inputs[1]).tolist() == [3.0]


def test_declines_folding_that_would_blow_up_a_constant():
    g = new_graph(x=(256, 256))
    big = node(g, "Expand", [np.ones((1, 1), np.float32)], {"shape": [256, 256]})
    g.make_node("Add", ["x", big], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fold_constants)
    assert ops(g2) == ["Expand", "Add"] and not res.changed
    assert reasons(res) == ["the result (262144 bytes) is more than 4x its constant inputs (4 bytes): left to "
                            "run time to save memory"]


def test_weight_transpose_folds_into_the_constant():
    rng = np.random.default_rng(1)
    g = new_graph(x=(3, 8))
    wt = node(g, "Transpose", [rand(rng, 5, 8)], {"perm": [1, 0]})
    g.make_node("MatMul", ["x", wt], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fold_weight_transposes)
    assert ops(g2) == ["MatMul"] and g2.values[g2.nodes[0].inputs[1]].is_const
    assert g2.type(g2.nodes[0].inputs[1]).shape == (8, 5)


def test_2d_transposes_become_gemm_flags_and_other_readers_decline():
    g = new_graph(a=(8, 3), b=(5, 8))
    at, bt = node(g, "Transpose", ["a"], {"perm": [1, 0]}), node(g, "Transpose", ["b"], {"perm": [1, 0]})
    g.make_node("Gemm", [at, bt], outputs=["y"], name="gemm")
    g.make_node("Relu", [bt], outputs=["z"])
    g.outputs = ["y", "z"]
    g2, res = run_pass(g, fold_weight_transposes)
    gemm = next(n for n in g2.nodes if n.op == "Gemm")
    assert gemm.inputs == ["a", "b"] and (gemm.attrs["transA"], gemm.attrs["transB"]) == (1, 1)
    assert ops(g2).count("Transpose") == 1  # kept for the Relu
    assert reasons(res) == ["input 'b' is computed at run time, not a weight, and a reader is no Gemm "
                            "(whose transA/transB could absorb it)"]


def test_onnx_shape_arithmetic_leaves_nothing_to_run():
    """Shape -> Gather -> Concat -> Reshape from an exporter: no shape op survives import + folding."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    m = model(nodes, [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, [2, 12])],
              {"i0": np.array(0, np.int64), "ax": np.array([0], np.int64), "minus1": np.array([-1], np.int64)})
    g = import_onnx(m)
    g2, _ = run_pass(g, fold_constants)
    assert ops(g2) == ["Reshape"] and g2.nodes[0].attrs["shape"] == [2, 12]
