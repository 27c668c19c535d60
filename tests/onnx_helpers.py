"""Small builders of ONNX test models (onnx.helper), shared by the tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=None, opset=17, name="t") -> onnx.ModelProto:
    """inputs/outputs: lists of (name, elem_type, shape); inits: dict name -> array."""
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 10)
    onnx.checker.check_model(m)
    return m


def ort_run(m: onnx.ModelProto, feeds: dict) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def tiny_cnn(seed: int = 0, batch="N") -> onnx.ModelProto:
    """Conv(3->8, pad 1) -> Relu -> MaxPool 2 -> Flatten -> Gemm(10), input x: [batch,3,8,8]."""
    rng = np.random.default_rng(seed)
    inits = {
        "W": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
        "B": rng.standard_normal(8).astype(np.float32) * 0.1,
        "W2": rng.standard_normal((10, 128)).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c"], ["r"], name="relu1"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "W2"], ["y"], transB=1, name="fc"),
    ]
    return model(nodes, [("x", F32, [batch, 3, 8, 8])], [("y", F32, [batch, 10])], inits)
