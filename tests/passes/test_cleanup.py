"""remove_identities, collapse_reshapes, fold_pad, cse and dce."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_helpers import model
from passes_helpers import conv_attrs, new_graph, node, ops, rand, reasons, run_pass

from hwc.frontend import import_onnx
from hwc.passes.cleanup import collapse_reshapes, cse, dce, fold_pad, remove_identities


def test_identity_dropout_and_noop_reshape_are_removed():
    nodes = [helper.make_node("Dropout", ["x"], ["d"], name="drop"),
             helper.make_node("Identity", ["d"], ["i"]),
             helper.make_node("Reshape", ["i", "same"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    g = import_onnx(model(nodes, [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])],
                          {"same": np.array([2, 3], np.int64)}))
    assert ops(g) == ["Identity", "Identity", "Reshape", "Relu"]
    g2, res = run_pass(g, remove_identities)
    assert ops(g2) == ["Relu"] and g2.nodes[0].inputs == ["x"]


def test_noop_transpose_pad_slice_and_clip_are_removed_and_graph_outputs_keep_their_names():
    g = new_graph(x=(2, 3))
    r = node(g, "Relu", ["x"])
    t = node(g, "Transpose", [r], {"perm": [0, 1]})
    p = node(g, "Pad", [t], {"pads": [0, 0, 0, 0]})
    s = node(g, "Slice", [p], {"starts": [0, 0], "ends": [2, 3], "steps": [1, 1]})
    g.make_node("Clip", [s], {}, outputs=["y"])
    g.outputs = ["y"]
    g2, _ = run_pass(g, remove_identities)
    assert ops(g2) == ["Relu"] and g2.nodes[0].outputs == ["y"]


def test_identity_from_graph_input_to_graph_output_declines():
    g = new_graph(x=(2,))
    g.make_node("Identity", ["x"], outputs=["y"], name="keep")
    g.outputs = ["y"]
    g2, res = run_pass(g, remove_identities)
    assert ops(g2) == ["Identity"] and not res.changed
    assert res.declined == [("keep", "noop: graph output 'y' would become 'x', which is a graph input, output or "
                                     "constant")]


def test_reshape_and_flatten_chains_collapse():
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=2),
             helper.make_node("Unsqueeze", ["f", "ax"], ["u"]),
             helper.make_node("Reshape", ["u", "s"], ["y"])]
    g = import_onnx(model(nodes, [("x", TensorProto.FLOAT, [2, 3, 4, 5])], [("y", TensorProto.FLOAT, [6, 20])],
                          {"ax": np.array([0], np.int64), "s": np.array([6, 20], np.int64)}))
    g2, res = run_pass(g, collapse_reshapes)
    assert ops(g2) == ["Reshape"] and g2.nodes[0].inputs == ["x"] and g2.nodes[0].outputs == ["y"]


def test_inner_reshape_with_another_reader_stays():
    g = new_graph(x=(2, 6))
    r = node(g, "Reshape", ["x"], {"shape": [3, 4]})
    g.make_node("Reshape", [r], {"shape": [12]}, outputs=["y"])
    g.make_node("Relu", [r], outputs=["z"])
    g.outputs = ["y", "z"]
    g2, _ = run_pass(g, collapse_reshapes)
    assert ops(g2) == ["Reshape", "Reshape", "Relu"] and g2.nodes[1].inputs == ["x"]


@pytest.mark.parametrize("op, value, attrs", [
    ("Conv", 0.0, None),
    ("AveragePool", 0.0, {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1]}),
    ("AveragePool", 0.0, {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1],
                          "count_include_pad": 1}),
    ("MaxPool", -math.inf, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 0, 0], "dilations": [1, 1]}),
])
def test_pad_folds_into_conv_and_pools(op, value, attrs):
    rng = np.random.default_rng(0)
    g = new_graph(x=(1, 2, 5, 5))
    p = node(g, "Pad", ["x"], {"pads": [0, 0, 1, 2, 0, 0, 2, 1], "value": value})
    if op == "Conv":
        g.make_node("Conv", [p, g.add_const(rand(rng, 3, 2, 3, 3))], conv_attrs(pad=1), outputs=["y"])
    else:
        g.make_node(op, [p], attrs, outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fold_pad)
    assert ops(g2) == [op] and g2.nodes[0].inputs[0] == "x"


@pytest.mark.parametrize("pad_attrs, op, reason", [
    ({"mode": "reflect"}, "Conv", "Pad mode 'reflect' is not constant padding"),
    ({"value": 1.5}, "Conv", "Conv pads with 0, the Pad value is 1.5"),
    ({}, "MaxPool", "MaxPool pads with -inf, the Pad value is 0"),
    ({"pads": [0, 1, 0, 0, 0, 1, 0, 0]}, "Conv", "pads [0, 1, 0, 0, 0, 1, 0, 0] pad the batch or channel axis"),
])
def test_pad_fold_declines(pad_attrs, op, reason):
    rng = np.random.default_rng(1)
    g = new_graph(x=(1, 2, 5, 5))
    p = node(g, "Pad", ["x"], {"pads": [0, 0, 1, 1, 0, 0, 1, 1], **pad_attrs})
    cin = g.type(p).shape[1]
    if op == "Conv":
        g.make_node("Conv", [p, g.add_const(rand(rng, 3, cin, 3, 3))], conv_attrs(pad=0), outputs=["y"])
    else:
        g.make_node(op, [p], {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0],
                              "dilations": [1, 1]}, outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, fold_pad)
    assert ops(g2) == ["Pad", op]
    assert reasons(res) == [f"pad_into_window: {reason}"]


def test_cse_merges_duplicates_equal_constants_and_commutative_operands():
    g = new_graph(x=(2, 4), z=(2, 4))
    a1, a2 = node(g, "Add", ["x", "z"]), node(g, "Add", ["z", "x"])
    m1 = node(g, "Mul", [a1, np.full((4,), 2.0, np.float32)])
    m2 = node(g, "Mul", [a2, np.full((4,), 2.0, np.float32)])
    g.make_node("Sub", [m1, m2], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, cse)
    assert ops(g2) == ["Add", "Mul", "Sub"] and g2.nodes[2].inputs == [m1, m1]


def test_cse_declines_when_both_copies_are_graph_outputs():
    g = new_graph(x=(2,))
    g.make_node("Relu", ["x"], outputs=["y"], name="r1")
    g.make_node("Relu", ["x"], outputs=["z"], name="r2")
    g.outputs = ["y", "z"]
    g2, res = run_pass(g, cse)
    assert ops(g2) == ["Relu", "Relu"]
    assert res.declined == [("r2", "same as 'r1', but graph output 'z' would become 'y', which is a graph input, "
                                   "output or constant")]


def test_dce_removes_dead_branches_and_unused_constants_but_keeps_inputs():
    rng = np.random.default_rng(2)
    g = new_graph(x=(2, 4), unused=(3,))
    dead = node(g, "Mul", ["x", rand(rng, 4)])
    node(g, "Relu", [dead])
    g.add_const(rand(rng, 5), "orphan")
    g.make_node("Tanh", ["x"], outputs=["y"])
    g.outputs = ["y"]
    g2, res = run_pass(g, dce)
    assert ops(g2) == ["Tanh"] and not any(v.is_const for v in g2.values.values())
    assert g2.inputs == ["x", "unused"]
    assert res.notes == ["removed 2 dead node(s) and 2 unused constant(s)"]
    assert res.declined == [("unused", "unused graph input kept: the inputs are the model's interface")]
