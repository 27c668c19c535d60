"""QDQ import: a model quantized by onnxruntime's quantize_static runs in hwc's int8
reference within 1 LSB of onnxruntime's execution of the same file (as written: `ort_codes`).

Why not always 0: the integers (weights, biases, zero points, scales) are the model's; only
the arithmetic differs -- onnxruntime dequantizes to float32, runs the float op and quantizes
with rounding half to even, hwc accumulates in int32 and requantizes with a 31-bit multiplier,
rounding half up (hwc.quant.arith, hwc.quant.qdq). A code differs when the exact value lies
within float32's error of a rounding boundary, or on an exact tie; a difference in one layer
can move a downstream code by one step too. Measured (16 held-out samples): small_cnn and
small_mlp identical on every output code; ResNet-8 (9 convs, 3 residual adds, average pool)
23 of 160 output codes differ by 1 per-channel, 28 of 160 per-tensor, none by more.
"""

import logging
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from hwc import zoo
from hwc.errors import UnsupportedError
from hwc.frontend import import_onnx
from hwc.quant.qdq import import_qdq, is_qdq, strip_qdq
from hwc.quant.runner import run_batched


def ort_quantize(model, feeds, per_channel):
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{k: v[i] for k, v in feeds.items()} for i in range(len(next(iter(feeds.values()))))])

        def get_next(self):
            return next(self.it, None)

    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "m.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, per_channel=per_channel)
        return onnx.load(dst)


def ort_codes(qm, feeds, scale, zp):
    """onnxruntime's output codes of the QDQ model as written (DequantizeLinear, the float op, QuantizeLinear).
    Not with its graph optimizations: they fuse each QDQ group into an int8 kernel, and on an x86 CPU without
    VNNI (AVX2 only, e.g. this AMD EPYC) that kernel adds products in pairs in saturating int16 (VPMADDUBSW):
    output codes then differ by up to 36 from the exact result, depending on the machine (measured 2026-12-02;
    on the earlier VNNI machine they matched)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(qm.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = np.stack([s.run(None, {k: v[i] for k, v in feeds.items()})[0] for i in range(len(feeds["input"]))])
    return np.rint(y / scale).astype(np.int64) + zp


def _resnet_block():
    """ResNet-8 as hwc optimizes it (BatchNorm folded), exported back to ONNX for onnxruntime:
    residual Adds, a Relu after each Add, AveragePool, Flatten, Gemm."""
    from hwc.targets import load_target

    from hwc.export_onnx import export_onnx
    from hwc.quant.build import optimize_for_quant

    return export_onnx(optimize_for_quant(import_onnx(zoo.resnet8(softmax=False)), load_target("ref")))


@pytest.mark.parametrize("name", ["small_cnn", "small_mlp", "resnet8"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_qdq_import_within_one_lsb_of_onnxruntime(name, per_channel):
    m = _resnet_block() if name == "resnet8" else zoo.MODELS[name]()
    calib = zoo.random_inputs(m, 16, seed=1)
    test = zoo.random_inputs(m, 16, seed=2)
    qm = ort_quantize(m, calib, per_channel)
    g = import_onnx(qm)
    assert is_qdq(g)
    q = import_qdq(g)
    assert q.metadata["quant"]["mode"] == "qdq"
    assert not [d for d in q.metadata["quant"]["nodes"] if d["mode"] == "float"]   # all of it int8
    out = next(v for v in q.metadata["quant"]["tensors"].values() if v["source"] == "output")
    # hwc's int8 output codes, read before the final Dequantize
    deq = next(n for n in q.nodes if n.op == "Dequantize" and n.outputs[0] == "output")
    q.outputs = [deq.inputs[0]]
    ours = run_batched(q, test)[deq.inputs[0]].astype(np.int64)
    theirs = ort_codes(qm, test, out["scale"], out["zero_point"]).reshape(ours.shape)
    diff = np.abs(ours - theirs)
    assert diff.max() <= 1, (name, int(diff.max()), float(np.mean(diff > 0)))
    if name != "resnet8":
        assert diff.max() == 0


def test_qdq_uses_the_models_integers():
    m = zoo.small_cnn()
    qm = ort_quantize(m, zoo.random_inputs(m, 8, seed=1), True)
    fg, tq, weights, biases, notes = strip_qdq(import_onnx(qm))
    assert not is_qdq(fg) and not notes
    q = import_qdq(import_onnx(qm))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in qm.graph.initializer}
    qconvs = [n for n in q.nodes if n.op == "QConv"]
    np.testing.assert_array_equal(q.const(qconvs[0].inputs[1]), inits["w0_quantized"])   # weights as they are
    np.testing.assert_array_equal(q.const(qconvs[0].inputs[2]), inits["b0_quantized"])   # bias codes too
    assert qconvs[0].attrs["z_in"] == int(inits["input_zero_point"])


def test_qdq_int8_output_is_rejected_clearly():
    from onnx import TensorProto, helper

    m = helper.make_model(helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 4])],
        [onnx.numpy_helper.from_array(np.array(0.1, np.float32), "s"),
         onnx.numpy_helper.from_array(np.array(0, np.int8), "z")]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedError, match="int8 output is used directly"):
        import_qdq(import_onnx(m))
