"""The graph IR: building, verifier (each kind of malformation), printer, serialization."""

import numpy as np
import pytest
from onnx_helpers import tiny_cnn

from hwc.errors import VerifyError
from hwc.frontend import import_onnx
from hwc.ir import Graph, Node, TensorType, verify
from hwc.ir.serialize import graph_from_files, graph_to_files
from hwc.ref.interp import run_graph


def small_graph() -> Graph:
    g = Graph("g")
    g.add_input("x", TensorType("float32", (2, 3)))
    w = g.add_const(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    g.make_node("MatMul", ["x", w], name="mm", outputs=["h"])
    g.make_node("Relu", ["h"], name="relu", outputs=["y"])
    g.outputs = ["y"]
    return g


def test_make_node_infers_types_and_runs():
    g = small_graph()
    verify(g)
    assert g.type("h") == TensorType("float32", (2, 4))
    x = np.array([[1, -1, 0], [0, 1, 2]], np.float32)
    expected = np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4), 0)
    np.testing.assert_array_equal(run_graph(g, {"x": x})["y"], expected)


def test_a_window_larger_than_its_input_names_the_input():
    g = Graph("g")
    g.add_input("x", TensorType("float32", (4, 1, 1)))
    with pytest.raises(ValueError, match=r"larger than padded input 1 \(input shape \[4, 1, 1\], kernel \[2\]"):
        g.make_node("MaxPool", ["x"], {"kernel_shape": [2], "strides": [1], "pads": [0, 0], "dilations": [1],
                                       "ceil_mode": 0}, name="pool")


def test_constants_are_immutable():
    g = small_graph()
    with pytest.raises(ValueError):
        g.values["w"].data[0, 0] = 5


@pytest.mark.parametrize("break_it, message", [
    (lambda g: g.nodes[1].inputs.__setitem__(0, "nope"), "input 'nope' does not exist"),
    (lambda g: g.nodes.reverse(), "input 'h' is used before it is defined"),
    (lambda g: setattr(g.values["h"], "type", TensorType("float32", (2, 5))), "stored as f32[2x5], inferred f32[2x4]"),
    (lambda g: setattr(g.values["h"], "type", TensorType("int32", (2, 4))), "stored as i32[2x4]"),
    (lambda g: g.nodes.append(Node("Relu", "dup", ["x"], ["y"], {})), "output 'y' is defined more than once"),
    (lambda g: g.nodes.append(Node("Frobnicate", "f", ["x"], ["z"], {})), "unknown op 'Frobnicate'"),
    (lambda g: g.nodes[0].attrs.__setitem__("act", "swish"), "unknown fused activation 'swish'"),
    (lambda g: g.outputs.append("ghost"), "graph output 'ghost' is never defined"),
])
def test_verifier_catches(break_it, message):
    g = small_graph()
    break_it(g)
    with pytest.raises(VerifyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        verify(g)


def test_toposort_restores_order_and_detects_cycles():
    g = small_graph()
    g.nodes.reverse()
    g.toposort()
    assert [n.name for n in g.nodes] == ["mm", "relu"]
    verify(g)
    g.nodes[0].inputs[0] = "y"  # mm reads relu's output: a cycle
    with pytest.raises(ValueError, match="cycle"):
        g.toposort()


def test_replace_uses_keeps_output_names():
    g = small_graph()
    relu = g.nodes[1]
    g.remove_node(relu)
    g.replace_uses("y", "h")  # drop the Relu: the output keeps its user-visible name
    g.prune_values()
    verify(g)
    assert g.outputs == ["y"] and [n.outputs for n in g.nodes] == [["y"]]


def test_printer_shows_types_and_attrs():
    g = import_onnx(tiny_cnn(), {"x": (1, 3, 8, 8)})
    text = str(g)
    assert "%c: f32[1x8x8x8] = Conv(%x, @W:f32[8x3x3x3], @B:f32[8])" in text
    assert "pads=[1,1,1,1]" in text and "return %y" in text


def test_serialization_roundtrip_is_exact_and_deterministic():
    g = import_onnx(tiny_cnn(), {"x": (2, 3, 8, 8)})
    text, blob = graph_to_files(g)
    g2 = graph_from_files(text, blob)
    verify(g2)
    assert graph_to_files(g2) == (text, blob)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(run_graph(g, {"x": x})["y"], run_graph(g2, {"x": x})["y"])
