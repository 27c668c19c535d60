"""The quantizer: int8 reference vs float reference, with the error bounds stated and asserted.

Single layer, range method minmax, evaluated on the calibration samples themselves (so no
value is clipped), output element y = sum_k w_k x_k + b:

    |y_int8 - y_float| <= s_x/2 * sum_k |w_k|          (input rounding, |x - x^| <= s_x/2)
                        + s_w/2 * sum_k |x^_k|         (weight rounding, |w - w^| <= s_w/2)
                        + s_x*s_w/2                    (bias rounding)
                        + s_y/2 + s_y                  (output rounding, and one more step for
                                                        the 31-bit multiplier and the half-up tie)

(the sums run over the whole receptive field, an upper bound where padding cuts it).
Whole models: output SQNR against the float reference, asserted a few dB below the
measured value, stated next to each case.
"""

import numpy as np
import onnx
import pytest

from hwc import zoo
from hwc.frontend import import_onnx
from hwc.ir import Graph, TensorType
from hwc.ir.verify import verify
from hwc.quant.config import QuantConfig
from hwc.quant.quantize import check_int8_graph, quantize
from hwc.quant.runner import run_batched
from hwc.quant.search import sqnr_db
from hwc.ref.interp import run_graph


def _conv_graph(rng, act="", act_args=(), group=1, strides=(1, 1), pads=(1, 1, 1, 1), cin=4, cout=6):
    g = Graph("conv")
    g.add_input("x", TensorType("float32", (1, cin, 9, 8)))
    w = g.add_const((rng.standard_normal((cout, cin // group, 3, 3)) * 0.4).astype(np.float32), "w")
    b = g.add_const((rng.standard_normal(cout) * 0.3).astype(np.float32), "b")
    g.make_node("Conv", ["x", w, b], {"strides": list(strides), "pads": list(pads), "dilations": [1, 1],
                                       "group": group, "act": act, "act_args": list(act_args)},
                name="conv", outputs=["y"])
    g.outputs = ["y"]
    verify(g)
    return g


def _bound_conv(q, g, xs):
    """Per-element bound of the module docstring for the single Conv of `g`."""
    qc = next(n for n in q.nodes if n.op == "QConv")
    sx = float(q.values[qc.inputs[0]].quant.scale)
    sw = q.values[qc.inputs[1]].quant.scale.astype(np.float64)
    sy = float(q.values[qc.outputs[0]].quant.scale)
    conv = next(n for n in g.nodes if n.op == "Conv")
    w = g.const(conv.inputs[1]).astype(np.float64)
    xq = (np.rint(xs / sx) * sx)  # |x^| <= |x| + s_x/2: bound it by |x| + s_x/2
    ones = {**conv.attrs, "act": "", "act_args": []}
    from hwc.ref.interp import KERNELS
    field = KERNELS["Conv"](ones, np.abs(xq) + sx / 2,
                            np.ones_like(w).astype(np.float32))[0]
    per_c = (1, -1, 1, 1)
    return (sx / 2 * np.abs(w).reshape(len(w), -1).sum(1).reshape(per_c) + field * (sw / 2).reshape(per_c)
            + (sx * sw / 2).reshape(per_c) + 1.5 * sy)


@pytest.mark.parametrize("kw", [
    {}, {"act": "relu"}, {"act": "clip", "act_args": (0.0, 1.5)}, {"group": 4, "cin": 4, "cout": 4},
    {"strides": (2, 2), "pads": (0, 0, 1, 1)}, {"group": 2, "cout": 6, "act": "relu"},
])
@pytest.mark.parametrize("per_channel", [True, False])
def test_single_conv_within_stated_bound(kw, per_channel):
    rng = np.random.default_rng(len(kw) + per_channel)
    g = _conv_graph(rng, **kw)
    xs = rng.standard_normal((16, 1, 4, 9, 8)).astype(np.float32)
    q = quantize(g, {"x": xs}, QuantConfig(method="minmax", per_channel=per_channel))
    assert q.op_counts() == {"Quantize": 1, "QConv": 1, "Dequantize": 1}
    yf = run_batched(g, {"x": xs})["y"].reshape(16, *g.type("y").shape[1:])
    yq = run_batched(q, {"x": xs})["y"].reshape(yf.shape)
    bound = _bound_conv(q, g, xs.reshape(16, 4, 9, 8))
    assert np.all(np.abs(yq - yf) <= bound), float(np.max(np.abs(yq - yf) - bound))
    # the measured error is far inside the bound
    assert float(np.max(np.abs(yq - yf))) < 0.5 * float(bound.max())


def test_gemm_and_matmul_within_stated_bound():
    rng = np.random.default_rng(7)
    g = Graph("fc")
    g.add_input("x", TensorType("float32", (1, 3, 20)))
    w = g.add_const((rng.standard_normal((20, 12)) * 0.3).astype(np.float32), "w")
    g.make_node("MatMul", ["x", w], {"act": "relu"}, name="mm", outputs=["h"])
    g.outputs = ["h"]
    xs = rng.standard_normal((32, 1, 3, 20)).astype(np.float32)
    q = quantize(g, {"x": xs}, QuantConfig(method="minmax"))
    assert q.op_counts() == {"Quantize": 1, "Reshape": 2, "QGemm": 1, "Dequantize": 1}
    qg = next(n for n in q.nodes if n.op == "QGemm")
    assert q.type(qg.inputs[1]).shape == (12, 20)      # weights stored [N, K]
    sx = float(q.values[qg.inputs[0]].quant.scale)
    sw = q.values[qg.inputs[1]].quant.scale.astype(np.float64)
    sy = float(q.values[qg.outputs[0]].quant.scale)
    wf = g.const(w).astype(np.float64)
    x = xs.reshape(-1, 20).astype(np.float64)
    bound = sx / 2 * np.abs(wf).sum(0) + (np.abs(x) + sx / 2).sum(1, keepdims=True) * sw / 2 + sx * sw / 2 + 1.5 * sy
    yf = run_batched(g, {"x": xs})["h"].reshape(-1, 12)
    yq = run_batched(q, {"x": xs})["h"].reshape(-1, 12)
    assert np.all(np.abs(yq - yf) <= bound)


def _all_ops_model() -> onnx.ModelProto:
    """Conv(+relu) -> depthwise stride 2 (+ReLU6) -> 1x1 conv; shortcut 1x1 stride 2; Add -> Relu;
    Concat(relu, Sigmoid(relu)) -> AveragePool -> HardSwish -> LeakyRelu -> GlobalAveragePool
    -> Flatten -> Transpose(identity perm) -> Gemm -> Tanh -> Softmax."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * np.sqrt(2 / np.prod(s[1:]))).astype(np.float32),
                                           f"w{len(inits)}")
    inits = []
    nodes = []

    def conv(x, cin, cout, k, stride=1, pad=0, group=1):
        inits.append(w(cout, cin // group, k, k))
        wn = inits[-1].name
        inits.append(numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{len(inits)}"))
        y = f"c{len(nodes)}"
        nodes.append(helper.make_node("Conv", [x, wn, inits[-1].name], [y], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4, group=group))
        return y

    def op(kind, ins, **attrs):
        y = f"{kind.lower()}{len(nodes)}"
        nodes.append(helper.make_node(kind, ins, [y], **attrs))
        return y

    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    inits.append(numpy_helper.from_array(np.array(6.0, np.float32), "six"))
    a = op("Relu", [conv("x", 3, 8, 3, pad=1)])
    d = op("Clip", [conv(a, 8, 8, 3, stride=2, pad=1, group=8), "zero", "six"])
    p = conv(d, 8, 8, 1)
    s = conv(a, 8, 8, 1, stride=2)
    r = op("Relu", [op("Add", [p, s])])
    c = op("Concat", [r, op("Sigmoid", [r])], axis=1)
    h = op("LeakyRelu", [op("HardSwish", [op("AveragePool", [c], kernel_shape=[2, 2], strides=[2, 2])])], alpha=0.1)
    f = op("Transpose", [op("Flatten", [op("GlobalAveragePool", [h])])], perm=[0, 1])
    inits.append(w(16, 5))
    y = op("Tanh", [op("Gemm", [f, inits[-1].name], alpha=1.0)])
    nodes.append(helper.make_node("Softmax", [y], ["probs"], axis=-1))
    graph = helper.make_graph(nodes, "allops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 5])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_every_supported_op_quantizes_and_softmax_stays_float():
    import hwc

    m = _all_ops_model()
    rng = np.random.default_rng(0)
    calib = {"x": rng.standard_normal((64, 1, 3, 8, 8)).astype(np.float32)}
    test = {"x": rng.standard_normal((32, 1, 3, 8, 8)).astype(np.float32)}
    art = hwc.build(m, target="ref", calib=calib, quant_config={"method": "minmax"})
    q = art.graph
    check_int8_graph(q)
    ops = q.op_counts()
    for op in ("QConv", "QAdd", "QLut", "Concat", "QAvgPool", "QGlobalAvgPool", "QGemm", "Reshape", "Softmax"):
        assert op in ops, (op, ops)
    nodes = {d["node"]: d for d in q.metadata["quant"]["nodes"]}
    floats = [d for d in nodes.values() if d["mode"] == "float"]
    assert [d["op"] for d in floats] == ["Softmax"]
    assert "no int8 form" in floats[0]["reason"]
    assert any(d["mode"] == "folded" and d["op"] == "Relu" for d in nodes.values())   # Add -> Relu folded
    softmax = next(n for n in q.nodes if n.op == "Softmax")
    assert q.type(softmax.inputs[0]).dtype == "float32"                                 # after a Dequantize
    # every int8 tensor is reported: scale, zero point, range, method, clipped fraction
    for t in q.metadata["quant"]["tensors"].values():
        assert set(t) >= {"scale", "zero_point", "range", "method", "clipped"}
    assert art.report["quant"]["nodes"]["float"] == 1
    ref = hwc.build(m, target="ref")
    pf = ref.run(test)["probs"]
    pq = art.run(test)["probs"]
    # measured: max |dp| 0.005, SQNR 48 dB on the probabilities
    assert float(np.max(np.abs(pq - pf))) < 0.03
    assert sqnr_db(pf, pq) > 30


def test_relu_range_starts_at_zero_and_the_relu_is_dropped():
    m = zoo.small_cnn()
    g = import_onnx(m)
    q = quantize(g, zoo.random_inputs(m, 32, seed=1), QuantConfig(method="percentile"))
    assert "Relu" not in q.op_counts()
    for n in q.nodes:
        if n.op == "QConv":
            y = q.values[n.outputs[0]].quant
            assert int(y.zero_point) == -128 and n.attrs["lo"] == -128     # [0, hi]: the clamp is free
            assert q.type(n.inputs[2]).dtype == "int32"                     # unfolded bias, z_in on the node
            assert n.attrs["z_in"] == int(q.values[n.inputs[0]].quant.zero_point)


def test_unsupported_op_falls_back_to_float_with_its_reason():
    g = Graph("fallback")
    g.add_input("x", TensorType("float32", (1, 8)))
    rng = np.random.default_rng(0)
    w1 = g.add_const(rng.standard_normal((8, 8)).astype(np.float32), "w1")
    w2 = g.add_const(rng.standard_normal((8, 4)).astype(np.float32), "w2")
    g.make_node("MatMul", ["x", w1], name="mm1", outputs=["h"])
    g.make_node("Mul", ["h", "h"], name="square", outputs=["s"])
    g.make_node("MatMul", ["s", w2], name="mm2", outputs=["y"])
    g.outputs = ["y"]
    xs = rng.standard_normal((16, 1, 8)).astype(np.float32)
    q = quantize(g, {"x": xs}, QuantConfig(float_nodes=("mm2",)))
    d = {r["node"]: r for r in q.metadata["quant"]["nodes"]}
    assert d["mm1"]["mode"] == "int8"
    assert d["square"]["mode"] == "float" and "Mul has no int8 form" in d["square"]["reason"]
    assert d["mm2"]["mode"] == "float" and "float_nodes" in d["mm2"]["reason"]
    assert q.op_counts() == {"Quantize": 1, "QGemm": 1, "Dequantize": 1, "Mul": 1, "MatMul": 1}
    yf = run_batched(g, {"x": xs})["y"]
    assert sqnr_db(yf, run_batched(q, {"x": xs})["y"]) > 32   # measured 38.6 dB


@pytest.mark.parametrize("name, floor", [("small_mlp", 33), ("small_cnn", 33), ("ds_cnn", 41)])
def test_models_sqnr_floor(name, floor):
    """Measured (calibration 64, held-out 32 random samples): small_mlp 36.7, small_cnn 36.5,
    ds_cnn logits 44.7 dB (mse, per channel, bias correction)."""
    kw = {"softmax": False} if name == "ds_cnn" else {}
    m = zoo.MODELS[name](**kw)
    from hwc.targets import load_target

    from hwc.quant.build import optimize_for_quant

    g = optimize_for_quant(import_onnx(m), load_target("ref"))
    q = quantize(g, zoo.random_inputs(m, 64, seed=1), QuantConfig(method="mse", bias_correction=True))
    test = zoo.random_inputs(m, 32, seed=2)
    assert sqnr_db(run_batched(g, test)["output"], run_batched(q, test)["output"]) > floor


def test_batched_and_per_sample_runs_agree_exactly():
    m = zoo.small_cnn()
    g = import_onnx(m)
    xs = zoo.random_inputs(m, 5, seed=3)
    q = quantize(g, xs)
    from hwc.quant.runner import batch_safe
    assert batch_safe(q) and batch_safe(g)   # (the convolutions run all samples in one call)
    batched = run_batched(q, xs)["output"]
    single = np.stack([run_graph(q, {"input": x})["output"] for x in xs["input"]])
    np.testing.assert_array_equal(batched, single)


def test_quantization_is_deterministic():
    from hwc.ir.serialize import graph_to_files

    m = zoo.small_mlp()
    g = import_onnx(m)
    xs = zoo.random_inputs(m, 16, seed=1)
    a, b = (graph_to_files(quantize(g, xs, QuantConfig(bias_correction=True))) for _ in range(2))
    assert a == b


def _branches_model() -> onnx.ModelProto:
    """Two convolution branches (3x3 + ReLU, 1x1) off one input, concatenated, then a 3x3 convolution."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    w = {k: numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), k)
         for k, s in (("wa", (8, 4, 3, 3)), ("wb", (8, 4, 1, 1)), ("wc", (6, 16, 3, 3)))}
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["ra"]),
             helper.make_node("Conv", ["x", "wb"], ["b"]),
             helper.make_node("Concat", ["ra", "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "wc"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 6, 6])], list(w.values()))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_concat_inputs_made_by_convolutions_take_the_concat_encoding(monkeypatch):
    """Each branch's convolution requantizes straight to the Concat's scale and zero point: no QRequant, and no
    worse than requantizing twice (measured: SQNR 34.5 dB shared, 34.0 dB with the second requantization)."""
    import hwc.quant.quantize as qz

    m = _branches_model()
    g = import_onnx(m)
    rng = np.random.default_rng(1)
    calib = {"x": rng.standard_normal((32, 1, 4, 6, 6)).astype(np.float32)}
    want = run_batched(g, calib)["y"]
    q = quantize(g, calib, QuantConfig(method="minmax"))
    assert "QRequant" not in q.op_counts() and "Concat" in q.op_counts()
    cat = next(n for n in q.nodes if n.op == "Concat")
    enc = [(float(q.values[v].quant.scale), int(q.values[v].quant.zero_point)) for v in cat.inputs + cat.outputs]
    assert len(set(enc)) == 1, enc
    shared = sqnr_db(want, run_batched(q, calib)["y"])
    monkeypatch.setattr(qz, "share_concat_encodings", lambda g, tq: 0)
    q2 = quantize(g, calib, QuantConfig(method="minmax"))
    assert q2.op_counts().get("QRequant") == 2
    twice = sqnr_db(want, run_batched(q2, calib)["y"])
    assert shared >= twice - 0.1, (shared, twice)
    print(f"SQNR shared {shared:.1f} dB, requantized twice {twice:.1f} dB")
