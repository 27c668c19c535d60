"""The model zoo: every model is a valid, deterministic ONNX file of the intended shape,
imports into hwc, and hwc's float reference matches onnxruntime on it.

Tolerance: `rtol=1e-4, atol=1e-4 * max(1, |ort|.max())`, i.e. relative to the scale of
the output being compared (the reference accumulates in float64, onnxruntime in float32;
the measured difference is about 1e-7 of the scale).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from hwc import zoo
from hwc.frontend import import_onnx
from hwc.ref.interp import run_graph

SOFTMAX_MODELS = ("resnet8", "ds_cnn", "mobilenet_v1_025")

#: (model, builder kwargs): every model, and the softmax ones also ending at the logits
#: (random models give near-uniform softmax outputs, which would hide errors).
CASES = [(name, {}) for name in zoo.MODELS]
CASES += [(name, {"softmax": False}) for name in SOFTMAX_MODELS]
CASE_IDS = [name + ("-logits" if kw else "") for name, kw in CASES]

#: MACs counted by hand (Conv: output elements x C_in/group x kh x kw; Gemm: M x K x N).
MACS = {
    # conv1 32*32*16*3*9 = 442,368; stack 1: 2 x 32*32*16*16*9 = 4,718,592;
    # stack 2: 16*16*32*16*9 + 16*16*32*32*9 + 1x1 shortcut 16*16*32*16 = 3,670,016;
    # stack 3: 8*8*64*32*9 + 8*8*64*64*9 + 8*8*64*32 = 3,670,016; Gemm 64*10 = 640.
    "resnet8": 12_501_632,
    # conv1 25*5*64*1*10*4 = 320,000; 4 x (depthwise 25*5*64*9 = 72,000 +
    # pointwise 25*5*64*64 = 512,000) = 2,336,000; Gemm 64*12 = 768.
    "ds_cnn": 2_656_768,
    # conv1 48*48*8*3*9 = 497,664; the 13 blocks, (depthwise + pointwise), size after the
    # depthwise: 48: 48*48*8*9 + 48*48*16*8 = 460,800; 24: 82,944 + 294,912;
    # 24: 165,888 + 589,824; 12: 41,472 + 294,912; 12: 82,944 + 589,824;
    # 6: 20,736 + 294,912; 5 x at 6: 41,472 + 589,824; 3: 10,368 + 294,912;
    # 3: 20,736 + 589,824; Gemm 256*2 = 512. Total 7,489,664 (MLPerf Tiny: 7.49 M).
    "mobilenet_v1_025": 7_489_664,
    # 640*128 + 3*128*128 + 128*8 + 8*128 + 3*128*128 + 128*640.
    "fc_autoencoder": 264_192,
    # conv1 16*16*32*3*9 = 221,184; fire(16, 32) at 16x16 from 32 channels: squeeze 256*16*32 = 131,072, expand
    # 1x1 256*32*16 = 131,072, expand 3x3 256*32*16*9 = 1,179,648 (1,441,792); from 64: squeeze 262,144
    # (1,572,864); fire(32, 64) at 8x8 from 64: 64*32*64 = 131,072 + 64*64*32 = 131,072 + 64*64*32*9 = 1,179,648
    # (1,441,792); from 128: squeeze 262,144 (1,572,864); conv 1x1 64*10*128 = 81,920.
    "squeezenet_fire": 6_332_416,
    # 64*64*16*3*9 = 1,769,472; 32*32*32*16*9, 16*16*64*32*9, 8*8*128*64*9 and 8*8*128*64*9 = 4,718,592 each;
    # 8*8*64*128 = 524,288; the head 8*8*21*128 = 172,032.
    "yolo_tiny": 21_340_160,
    # 64*32 + 32*10.
    "small_mlp": 2_368,
    # conv1 4*8*8*1*9 = 2,304; conv2 8*4*4*4*9 = 4,608; Gemm 128*10 = 1,280.
    "small_cnn": 8_192,
}

#: ONNX op counts of each model (Softmax only when built with softmax=True).
OP_COUNTS = {
    # conv1 + 2 per block + 2 shortcuts; BN after every conv but the shortcuts.
    "resnet8": {"Conv": 9, "BatchNormalization": 7, "Relu": 7, "Add": 3, "AveragePool": 1,
                "Flatten": 1, "Gemm": 1, "Softmax": 1},
    "ds_cnn": {"Conv": 9, "BatchNormalization": 9, "Relu": 9, "AveragePool": 1, "Flatten": 1,
               "Gemm": 1, "Softmax": 1},
    # conv1 + 13 x (depthwise + pointwise) = 27 convs, each followed by BN + ReLU6.
    "mobilenet_v1_025": {"Conv": 27, "BatchNormalization": 27, "Clip": 27,
                         "GlobalAveragePool": 1, "Flatten": 1, "Gemm": 1, "Softmax": 1},
    "fc_autoencoder": {"Gemm": 10, "BatchNormalization": 9, "Relu": 9},
    # conv1 + 4 fire modules x 3 convs + conv 1x1, each followed by a ReLU.
    "squeezenet_fire": {"Conv": 14, "Relu": 14, "Concat": 4, "MaxPool": 1, "GlobalAveragePool": 1, "Flatten": 1},
    # six conv + BN + LeakyReLU, three max pools, the linear head.
    "yolo_tiny": {"Conv": 7, "BatchNormalization": 6, "LeakyRelu": 6, "MaxPool": 3},
    "small_mlp": {"Gemm": 2, "Relu": 1},
    "small_cnn": {"Conv": 2, "Relu": 2, "MaxPool": 1, "Flatten": 1, "Gemm": 1},
}

IN_SHAPES = {"resnet8": (1, 3, 32, 32), "ds_cnn": (1, 1, 49, 10),
             "mobilenet_v1_025": (1, 3, 96, 96), "fc_autoencoder": (1, 640),
             "squeezenet_fire": (1, 3, 32, 32), "yolo_tiny": (1, 3, 64, 64), "small_mlp": (1, 64),
             "small_cnn": (1, 1, 8, 8)}
OUT_SHAPES = {"resnet8": (1, 10), "ds_cnn": (1, 12), "mobilenet_v1_025": (1, 2),
              "fc_autoencoder": (1, 640), "squeezenet_fire": (1, 10), "yolo_tiny": (1, 21, 8, 8),
              "small_mlp": (1, 10), "small_cnn": (1, 10)}

N_SAMPLES = 3


def _build(name, kw=None, seed=0):
    return zoo.MODELS[name](seed=seed, **(kw or {}))


def _close(ours, theirs, what):
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(theirs).max()),
                               err_msg=what)


def _graph_macs(g) -> int:
    total = 0
    for n in g.nodes:
        out = g.type(n.outputs[0]).shape
        if n.op == "Conv":
            total += math.prod(out) * math.prod(g.type(n.inputs[1]).shape[1:])
        elif n.op == "Gemm":
            a = g.type(n.inputs[0]).shape
            total += math.prod(out) * (a[0] if n.attrs["transA"] else a[1])
        elif n.op == "MatMul":
            raise AssertionError("the zoo builds no MatMul")
    return total


def _with_every_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` that also exposes every node output (for onnxruntime)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for o in node.output:
            if o and o not in have:
                vi = helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None)
                m.graph.output.append(vi)
    return m


# ---- the files themselves ------------------------------------------------------------------
@pytest.mark.parametrize("name", zoo.MODELS)
def test_model_is_valid_and_deterministic(name):
    m = _build(name)
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == 17
    assert m.SerializeToString() == _build(name).SerializeToString()
    other = {t.name: numpy_helper.to_array(t) for t in _build(name, seed=1).graph.initializer}
    for t in m.graph.initializer:
        w = numpy_helper.to_array(t)
        if w.size > 1:  # the Clip bounds are the same in every seed
            assert not np.array_equal(w, other[t.name]), f"{name}: {t.name} ignores the seed"


@pytest.mark.parametrize("name", zoo.MODELS)
def test_onnx_structure(name):
    m = _build(name)
    counts: dict[str, int] = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    assert counts == OP_COUNTS[name]
    assert zoo.input_shapes(m) == {"input": IN_SHAPES[name]}
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    (out,) = inferred.graph.output
    assert out.name == "output"
    assert tuple(d.dim_value for d in out.type.tensor_type.shape.dim) == OUT_SHAPES[name]


@pytest.mark.parametrize("name", SOFTMAX_MODELS)
def test_logits_variant_drops_only_the_softmax(name):
    with_sm, logits = _build(name), _build(name, {"softmax": False})
    ops = [n.op_type for n in logits.graph.node]
    assert [n.op_type for n in with_sm.graph.node] == ops + ["Softmax"]
    assert with_sm.graph.initializer == logits.graph.initializer


def test_batchnorm_statistics_are_not_trivial():
    m = _build("resnet8")
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in (n for n in m.graph.node if n.op_type == "BatchNormalization"):
        gamma, beta, mean, var = (inits[i] for i in n.input[1:])
        assert 0.5 <= gamma.min() and gamma.max() <= 1.5 and np.abs(gamma - 1).max() > 0.1
        assert 0.5 <= var.min() and var.max() <= 2.0 and np.abs(var - 1).max() > 0.1
        assert np.abs(mean).max() > 0.05 and np.abs(beta).max() > 0.05


def test_tf_same_padding():
    # TF "SAME": output ceil(n / s); total pad (out - 1) * s + k - n, the odd one at the end.
    assert zoo.tf_same_pads(49, 10, 2) == (4, 5)  # 25 rows: 24*2 + 10 - 49 = 9
    assert zoo.tf_same_pads(10, 4, 2) == (1, 1)   # 5 columns: 4*2 + 4 - 10 = 2
    assert zoo.tf_same_pads(32, 3, 2) == (0, 1)
    assert zoo.tf_same_pads(7, 3, 1) == (1, 1)
    first = _build("ds_cnn").graph.node[0]
    pads = next(a for a in first.attribute if a.name == "pads")
    assert list(pads.ints) == [4, 1, 5, 1]


def test_random_inputs():
    m = _build("ds_cnn")
    x = zoo.random_inputs(m, n=5, seed=3)
    assert x.keys() == {"input"} and x["input"].shape == (5, 1, 1, 49, 10)
    assert x["input"].dtype == np.float32
    np.testing.assert_array_equal(x["input"], zoo.random_inputs(m, n=5, seed=3)["input"])
    assert not np.array_equal(x["input"][:1], zoo.random_inputs(m, n=1, seed=4)["input"])
    with pytest.raises(ValueError, match="'n' must be a positive integer"):
        zoo.random_inputs(m, n=0)


# ---- hwc on the zoo ------------------------------------------------------------------------
@pytest.mark.parametrize("name", zoo.MODELS)
def test_import_shapes_and_macs(name):
    g = import_onnx(_build(name))
    expected = {("Reshape" if op == "Flatten" else op): c for op, c in OP_COUNTS[name].items()}
    assert g.op_counts() == expected  # the importer maps Flatten to Reshape, nothing else
    assert [g.type(i).shape for i in g.inputs] == [IN_SHAPES[name]]
    assert [g.type(o).shape for o in g.outputs] == [OUT_SHAPES[name]]
    assert _graph_macs(g) == MACS[name]


def test_parameter_counts():
    # resnet8: conv weights 3*16*9 + 2*16*16*9 + (16*32*9 + 32*32*9 + 16*32)
    #   + (32*64*9 + 64*64*9 + 32*64) = 76,720; conv biases 16 + 2*16 + 3*32 + 3*64 = 336;
    #   BN 4 x (16 + 2*16 + 2*32 + 2*64) = 960; Gemm 64*10 + 10 = 650.
    # ds_cnn: conv1 64*40 + 64; 4 x (64*9 + 64 + 64*64 + 64); BN 4 x 64 x 9; Gemm 64*12 + 12.
    for name, expected in (("resnet8", 78_666), ("ds_cnn", 24_908)):
        inits = _build(name).graph.initializer
        assert sum(math.prod(t.dims) for t in inits) == expected, name


@pytest.mark.parametrize(("name", "kw"), CASES, ids=CASE_IDS)
def test_reference_matches_onnxruntime(name, kw):
    m = _build(name, kw)
    g = import_onnx(m)
    sess = ort.InferenceSession(_with_every_output(m).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    xs = zoo.random_inputs(m, n=N_SAMPLES, seed=1)["input"]
    finals = []
    for i, x in enumerate(xs):
        env = run_graph(g, {"input": x}, keep=True)
        theirs = dict(zip(names, sess.run(None, {"input": x})))
        _close(env["output"], theirs["output"], f"{name} sample {i}: output")
        finals.append(theirs["output"])
        # Every intermediate tensor too, where the importer kept its name.
        shared = [k for k in names if k in env]
        assert len(shared) >= len(m.graph.node) // 2, f"{name}: too few names kept: {shared}"
        for k in shared:
            _close(env[k], theirs[k], f"{name} sample {i}: {k}")
    # Teeth: the logits must depend on the input well above the tolerance (30x), or the
    # comparison above could not see a wrong first layer. (Softmax squashes the spread.)
    finals = np.stack(finals)
    if "Softmax" not in OP_COUNTS[name] or kw.get("softmax") is False:
        spread = finals.std(axis=0).max() / np.abs(finals).max()
        assert spread > 3e-3, f"{name}: input spread / output scale = {spread:.4f}"
