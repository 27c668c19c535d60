"""Batched evaluation (hwc.quant.runner): N samples merged on the batch-1 axis give the same
numbers as N separate `run_graph` calls, and int8 builds of models whose ops spell out the
batch axis in their attributes (Slice: ends[0] = 1) calibrate on all samples."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import hwc
from hwc.frontend import import_onnx
from hwc.quant.runner import batch_safe, run_batched
from hwc.ref.interp import run_graph

F32 = TensorProto.FLOAT


def _model(nodes, out_shape, inits, in_shape=(1, 4, 6, 6)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", F32, list(in_shape))],
                          [helper.make_tensor_value_info("y", F32, list(out_shape))],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    onnx.checker.check_model(m)
    return m


def _i64(*v):
    return np.array(v, np.int64)


# (name, nodes, output shape, initializers, runs batched)
CASES = [
    ("slice_channels", [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], (1, 2, 6, 6),
     {"s": _i64(1), "e": _i64(3), "a": _i64(1)}, True),
    ("slice_batch_and_w", [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], (1, 4, 6, 2),
     {"s": _i64(0, 5), "e": _i64(1, 0), "a": _i64(0, 3), "st": _i64(1, -2)}, True),
    ("split", [helper.make_node("Split", ["x", "sp"], ["u", "v"], axis=1),
               helper.make_node("Sub", ["u", "v"], ["y"])], (1, 2, 6, 6), {"sp": _i64(2, 2)}, True),
    ("concat", [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["x", "r"], ["y"], axis=1)],
     (1, 8, 6, 6), {}, True),
    ("concat_const", [helper.make_node("Concat", ["x", "c"], ["y"], axis=1)], (1, 5, 6, 6),
     {"c": np.full((1, 1, 6, 6), 0.5, np.float32)}, False),
    ("gather", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], (1, 2, 6, 6), {"i": _i64(3, 0)}, True),
    ("reducemean", [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)], (1, 4, 1, 1), {},
     True),
    ("transpose_flatten", [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
                           helper.make_node("Flatten", ["t"], ["y"])], (1, 144), {}, True),
    ("pad", [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], (1, 4, 7, 8),
     {"p": _i64(0, 0, 1, 0, 0, 0, 0, 2)}, False),
]


@pytest.mark.parametrize("name, nodes, out_shape, inits, batched", CASES, ids=[c[0] for c in CASES])
def test_batched_run_equals_one_run_per_sample(name, nodes, out_shape, inits, batched):
    g = import_onnx(_model(nodes, out_shape, inits))
    assert batch_safe(g) == batched
    xs = np.random.default_rng(1).standard_normal((5, 1, 4, 6, 6)).astype(np.float32)
    got = run_batched(g, {"x": xs}, chunk=3)["y"]
    want = np.stack([run_graph(g, {"x": x})["y"] for x in xs])
    np.testing.assert_array_equal(got, want)


def _conv_slice_conv() -> onnx.ModelProto:
    """Conv(3->8) -> Slice(channels 0:4) -> Conv(4->4), x: [1, 3, 8, 8]."""
    rng = np.random.default_rng(0)
    inits = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
             "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
             "w2": (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32),
             "s": _i64(0), "e": _i64(4), "a": _i64(1)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Slice", ["c", "s", "e", "a"], ["h"]),
             helper.make_node("Conv", ["h", "w2"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, (1, 4, 8, 8), inits, in_shape=(1, 3, 8, 8))


@pytest.mark.parametrize("target", ["tile8x8", "cpu"])
def test_int8_build_of_a_model_with_slice(target):
    m = _conv_slice_conv()
    rng = np.random.default_rng(2)
    calib = {"x": rng.standard_normal((16, 1, 3, 8, 8)).astype(np.float32)}
    art = hwc.build(m, target=target, calib=calib, hdl=False)
    xs = {"x": rng.standard_normal((3, 1, 3, 8, 8)).astype(np.float32)}
    got, ref = art.run(xs), art.run(xs, engine="reference")
    np.testing.assert_array_equal(got["y"], ref["y"])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.stack([sess.run(None, {"x": x})[0] for x in xs["x"]])
    span = float(want.max() - want.min())
    # int8 error: a few output steps (range / 255) -- the calibration saw all 16 samples
    assert np.abs(got["y"] - want).max() < 0.03 * span


def test_int8_build_of_a_batch_2_model_with_slice():
    """A graph with a batch of 2 is not batch-safe: calibration and bias correction run it one
    sample at a time, as declared (its Slice keeps both rows of the batch axis)."""
    rng = np.random.default_rng(0)
    inits = {"s": _i64(0), "e": _i64(4), "a": _i64(1), "shp": _i64(6),
             "W": (rng.standard_normal((3, 4)) * 0.5).astype(np.float32),
             "B": (rng.standard_normal(3) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["h"]),
             helper.make_node("Gemm", ["h", "W", "B"], ["g"], transB=1),
             helper.make_node("Reshape", ["g", "shp"], ["y"])]
    m = _model(nodes, (6,), inits, in_shape=(2, 8))
    g = import_onnx(m)
    assert not batch_safe(g)
    calib = {"x": rng.standard_normal((16, 2, 8)).astype(np.float32)}
    art = hwc.build(m, target="cpu", calib=calib)
    xs = {"x": calib["x"][:3]}
    got, ref = art.run(xs), art.run(xs, engine="reference")
    np.testing.assert_array_equal(got["y"], ref["y"])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.stack([sess.run(None, {"x": x})[0] for x in xs["x"]])
    assert np.abs(got["y"] - want).max() < 0.03 * float(want.max() - want.min())
