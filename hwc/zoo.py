"""Test and benchmark models built with onnx.helper: no torch, no downloads.

Each builder returns an `onnx.ModelProto` (opset 17, checked by onnx.checker) with random
weights drawn from `numpy.random.default_rng(seed)`, so the same seed gives the same bytes.
Shapes follow the MLPerf Tiny reference models; weights are He-scaled and every
BatchNormalization has random, non-trivial statistics, so activations stay O(1) through
the network and a wrong BN, pad or stride shows up in the numbers.

Models with a Softmax at the end (as their reference has) take `softmax=False` to end at
the logits instead: random models give near-uniform softmax outputs, which hide errors.
The graph input is named "input" and the graph output "output".

    MODELS["resnet8"](seed=0)          -> onnx.ModelProto
    random_inputs(model, n=4, seed=0)  -> {"input": array [4, 1, 3, 32, 32]}
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

#: Keras' BatchNormalization epsilon: the MLPerf Tiny reference models are Keras models.
KERAS_BN_EPS = 1e-3

#: Second word of the seed of `random_inputs`' generator, to keep it apart from the weights'.
_INPUT_STREAM = 0x1A7


def tf_same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """(begin, end) padding of TensorFlow's padding="SAME" along one axis.

    The output is ceil(size / stride); the total padding goes mostly at the end.
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class _Builder:
    """Accumulates nodes and initializers of one model, drawing weights from one rng."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}
        self._relu6: tuple[str, str] | None = None

    def fresh(self, hint: str) -> str:
        i = self._count.get(hint, 0)
        self._count[hint] = i + 1
        return f"{hint}{i}"

    def const(self, hint: str, data: np.ndarray) -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(data, dtype=np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], hint: str | None = None, **attrs) -> str:
        name = self.fresh(hint or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    # ---- random parameters ----------------------------------------------------------
    def he(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return self.rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)

    def small(self, n: int, std: float = 0.1) -> np.ndarray:
        return self.rng.normal(0.0, std, n)

    # ---- layers ---------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, kernel: tuple[int, int], *, stride: int = 1,
             pads: tuple[int, int, int, int] | None = None, group: int = 1,
             bias: bool = True) -> str:
        """Conv with He-normal weights; `pads` = [top, left, bottom, right] (default: none)."""
        kh, kw = kernel
        fan_in = cin // group * kh * kw
        w = self.const("w", self.he((cout, cin // group, kh, kw), fan_in))
        inputs = [x, w] + ([self.const("b", self.small(cout))] if bias else [])
        return self.node("Conv", inputs, kernel_shape=[kh, kw], strides=[stride, stride],
                         pads=list(pads or (0, 0, 0, 0)), group=group)

    def bn(self, x: str, c: int) -> str:
        """BatchNormalization with random statistics (inference form, as exported)."""
        r = self.rng
        gamma = r.uniform(0.5, 1.5, c)
        beta = r.normal(0.0, 0.1, c)
        mean = r.normal(0.0, r.uniform(0.1, 0.5), c)
        var = r.uniform(0.5, 2.0, c)
        params = [self.const(h, p) for h, p in
                  (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))]
        return self.node("BatchNormalization", [x] + params, "bn", epsilon=KERAS_BN_EPS)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def relu6(self, x: str) -> str:
        """ReLU6 as Clip(x, 0, 6); the two bounds are initializers shared by every Clip."""
        if self._relu6 is None:
            self._relu6 = (self.const("clip_min", np.array(0.0)),
                           self.const("clip_max", np.array(6.0)))
        return self.node("Clip", [x, *self._relu6])

    def gemm(self, x: str, n_in: int, n_out: int, *, trans_b: bool = True,
             he: bool = True) -> str:
        """Fully connected layer; W is [out, in] with transB=1 (as PyTorch exports it)."""
        std = np.sqrt((2.0 if he else 1.0) / n_in)
        w = self.rng.normal(0.0, std, (n_out, n_in))
        if not trans_b:
            w = w.T
        return self.node("Gemm", [x, self.const("fc_w", w), self.const("fc_b", self.small(n_out))],
                         transB=int(trans_b))

    def flatten(self, x: str) -> str:
        return self.node("Flatten", [x], axis=1)

    def softmax(self, x: str) -> str:
        return self.node("Softmax", [x], axis=-1)

    # ---- the model ------------------------------------------------------------------
    def finish(self, in_shape: list[int], x: str, out_shape: list[int]) -> onnx.ModelProto:
        """The checked model: input "input", output "output" (the last node writes it)."""
        last = self.nodes[-1]
        if last.output[0] != x:
            raise ValueError(f"{self.name}: the output {x!r} is not the last node's")
        last.output[0] = "output"
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)],
            initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="hwc.zoo")
        model.ir_version = 8  # the IR version that came with opset 17 (onnx 1.12)
        onnx.checker.check_model(model, full_check=True)
        return model


# ---- MLPerf Tiny shapes ----------------------------------------------------------------
def resnet8(seed: int = 0, softmax: bool = True) -> onnx.ModelProto:
    """MLPerf Tiny image classification (CIFAR-10): ResNet-8, 1x3x32x32 -> 10.

    conv3x3(16)+BN+ReLU, then three stacks of one residual block each (16, 32, 64
    filters). Stacks 2 and 3 start with a stride-2 conv whose TF "SAME" padding is
    asymmetric ([0, 0, 1, 1] for 32->16 and 16->8) and take a 1x1 stride-2 conv as
    the shortcut (no BN on it, as in the reference). AveragePool 8x8, Flatten, Gemm 10.
    """
    b = _Builder("resnet8", seed)
    x = b.relu(b.bn(b.conv("input", 3, 16, (3, 3), pads=(1, 1, 1, 1)), 16))
    cin, size = 16, 32
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        p0, p1 = tf_same_pads(size, 3, stride)
        y = b.relu(b.bn(b.conv(x, cin, cout, (3, 3), stride=stride, pads=(p0, p0, p1, p1)), cout))
        size = -(-size // stride)
        y = b.bn(b.conv(y, cout, cout, (3, 3), pads=(1, 1, 1, 1)), cout)
        shortcut = x if stride == 1 else b.conv(x, cin, cout, (1, 1), stride=stride)
        x = b.relu(b.node("Add", [y, shortcut]))
        cin = cout
    x = b.node("AveragePool", [x], kernel_shape=[8, 8], strides=[8, 8])
    x = b.gemm(b.flatten(x), 64, 10, he=False)
    if softmax:
        x = b.softmax(x)
    return b.finish([1, 3, 32, 32], x, [1, 10])


def ds_cnn(seed: int = 0, softmax: bool = True) -> onnx.ModelProto:
    """MLPerf Tiny keyword spotting: DS-CNN (small), MFCC 1x1x49x10 -> 12 keywords.

    Conv 10x4 stride 2 with TF "SAME" padding, which for 49x10 is [top 4, left 1,
    bottom 5, right 1] (output 25x5), 64 filters + BN + ReLU; four depthwise-separable
    blocks (depthwise 3x3 + BN + ReLU, pointwise 1x1 64 + BN + ReLU); AveragePool 25x5;
    Flatten; Gemm 12.
    """
    b = _Builder("ds_cnn", seed)
    (t, bt), (lf, rt) = tf_same_pads(49, 10, 2), tf_same_pads(10, 4, 2)
    x = b.relu(b.bn(b.conv("input", 1, 64, (10, 4), stride=2, pads=(t, lf, bt, rt)), 64))
    for _ in range(4):
        x = b.relu(b.bn(b.conv(x, 64, 64, (3, 3), pads=(1, 1, 1, 1), group=64), 64))
        x = b.relu(b.bn(b.conv(x, 64, 64, (1, 1)), 64))
    x = b.node("AveragePool", [x], kernel_shape=[25, 5], strides=[25, 5])
    x = b.gemm(b.flatten(x), 64, 12, he=False)
    if softmax:
        x = b.softmax(x)
    return b.finish([1, 1, 49, 10], x, [1, 12])


#: MobileNet v1 depthwise-separable blocks at alpha 1: (depthwise stride, pointwise filters).
MOBILENET_V1_BLOCKS = ((1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512),
                       (1, 512), (1, 512), (1, 512), (1, 512), (1, 512), (2, 1024), (1, 1024))


def mobilenet_v1_025(seed: int = 0, softmax: bool = True, input_size: int = 96) -> onnx.ModelProto:
    """MLPerf Tiny visual wake words: MobileNet v1, alpha 0.25, 1x3x96x96 -> 2 classes (`input_size`: another
    square input, e.g. 224 as in ImageNet).

    conv3x3 stride 2 (8 filters), then the 13 depthwise-separable blocks of MobileNet v1
    (channels 16, 32, ..., 256), BN + ReLU6 (Clip 0..6) after every conv; stride-2
    convs use TF "SAME" padding ([0, 0, 1, 1] on even sizes). GlobalAveragePool,
    Flatten, Gemm 2.
    """
    b = _Builder("mobilenet_v1_025", seed)
    p0, p1 = tf_same_pads(input_size, 3, 2)
    x = b.relu6(b.bn(b.conv("input", 3, 8, (3, 3), stride=2, pads=(p0, p0, p1, p1)), 8))
    cin, size = 8, -(-input_size // 2)
    for stride, filters in MOBILENET_V1_BLOCKS:
        p0, p1 = tf_same_pads(size, 3, stride)
        x = b.relu6(b.bn(b.conv(x, cin, cin, (3, 3), stride=stride, pads=(p0, p0, p1, p1),
                                group=cin), cin))
        size = -(-size // stride)
        cout = filters // 4
        x = b.relu6(b.bn(b.conv(x, cin, cout, (1, 1)), cout))
        cin = cout
    x = b.flatten(b.node("GlobalAveragePool", [x]))
    x = b.gemm(x, cin, 2, he=False)
    if softmax:
        x = b.softmax(x)
    return b.finish([1, 3, input_size, input_size], x, [1, 2])


def fc_autoencoder(seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """MLPerf Tiny anomaly detection: the fully connected autoencoder, Bx640 -> Bx640.

    (Gemm 128 + BN + ReLU) x4, Gemm 8 + BN + ReLU, (Gemm 128 + BN + ReLU) x4, Gemm 640.
    BN acts on the 2-d [B, 128] activations (BatchNormalization on N x C). The reference
    benchmark scores the frames of a clip one by one (B = 1); `batch` > 1 scores several
    frames in one inference, as a deployment that buffers frames would.
    """
    b = _Builder("fc_autoencoder", seed)
    x, n_in = "input", 640
    for n_out in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = b.relu(b.bn(b.gemm(x, n_in, n_out), n_out))
        n_in = n_out
    x = b.gemm(x, n_in, 640, he=False)
    return b.finish([batch, 640], x, [batch, 640])


def squeezenet_fire(seed: int = 0) -> onnx.ModelProto:
    """SqueezeNet-shaped (fire modules, the concatenating kind of CNN), 1x3x32x32 -> 10: Conv 3x3 stride 2 (32) +
    ReLU; fire(16, 32) x2 at 16x16; MaxPool 2; fire(32, 64) x2 at 8x8; Conv 1x1 (10) + ReLU; GlobalAveragePool;
    Flatten. A fire(s, e) module: squeeze Conv 1x1 (s) + ReLU, then expand Conv 1x1 (e) + ReLU beside expand
    Conv 3x3 pad 1 (e) + ReLU, concatenated along the channels (2e)."""
    b = _Builder("squeezenet_fire", seed)
    x = b.relu(b.conv("input", 3, 32, (3, 3), stride=2, pads=(1, 1, 1, 1)))
    cin = 32
    for sq, ex, pool in ((16, 32, False), (16, 32, True), (32, 64, False), (32, 64, False)):
        s = b.relu(b.conv(x, cin, sq, (1, 1)))
        x = b.node("Concat", [b.relu(b.conv(s, sq, ex, (1, 1))), b.relu(b.conv(s, sq, ex, (3, 3), pads=(1, 1, 1, 1)))],
                   axis=1)
        cin = 2 * ex
        if pool:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("GlobalAveragePool", [b.relu(b.conv(x, cin, 10, (1, 1)))])
    return b.finish([1, 3, 32, 32], b.flatten(x), [1, 10])


def yolo_tiny(seed: int = 0, input_size: int = 64, anchors: int = 3, classes: int = 2) -> onnx.ModelProto:
    """Tiny-YOLO-shaped (the LeakyReLU kind of CNN: Darknet's conv + BN + LeakyReLU 0.1), 1x3x64x64 ->
    1x(anchors * (5 + classes))x8x8: Conv 3x3 pad 1 (16) + BN + LeakyReLU, MaxPool 2; the same with 32 and 64
    channels; Conv 3x3 (128) + BN + LeakyReLU, Conv 1x1 (64) + BN + LeakyReLU, Conv 3x3 (128) + BN + LeakyReLU at
    8x8; the detection head Conv 1x1 (anchors * (5 + classes)), linear."""
    b = _Builder("yolo_tiny", seed)
    x, cin = "input", 3
    for cout, k, pool in ((16, 3, True), (32, 3, True), (64, 3, True), (128, 3, False), (64, 1, False),
                          (128, 3, False)):
        x = b.conv(x, cin, cout, (k, k), pads=(k // 2,) * 4, bias=False)
        x = b.node("LeakyRelu", [b.bn(x, cout)], alpha=0.1)
        if pool:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        cin = cout
    head = anchors * (5 + classes)
    s = input_size // 8
    return b.finish([1, 3, input_size, input_size], b.conv(x, cin, head, (1, 1)), [1, head, s, s])


# ---- small models for fast tests ---------------------------------------------------------
def small_mlp(seed: int = 0) -> onnx.ModelProto:
    """64 -> Gemm 32 + ReLU -> Gemm 10 (weights [in, out], transB=0), 1x64 -> 1x10."""
    b = _Builder("small_mlp", seed)
    x = b.relu(b.gemm("input", 64, 32, trans_b=False))
    x = b.gemm(x, 32, 10, trans_b=False, he=False)
    return b.finish([1, 64], x, [1, 10])


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """1x1x8x8: Conv 3x3 pad 1 (4) + ReLU + MaxPool 2 + Conv 3x3 pad 1 (8) + ReLU +
    Flatten + Gemm 10."""
    b = _Builder("small_cnn", seed)
    x = b.relu(b.conv("input", 1, 4, (3, 3), pads=(1, 1, 1, 1)))
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.relu(b.conv(x, 4, 8, (3, 3), pads=(1, 1, 1, 1)))
    x = b.gemm(b.flatten(x), 8 * 4 * 4, 10, he=False)
    return b.finish([1, 1, 8, 8], x, [1, 10])


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet8": resnet8,
    "ds_cnn": ds_cnn,
    "mobilenet_v1_025": mobilenet_v1_025,
    "fc_autoencoder": fc_autoencoder,
    "squeezenet_fire": squeezenet_fire,
    "yolo_tiny": yolo_tiny,
    "small_mlp": small_mlp,
    "small_cnn": small_cnn,
}


def input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The declared shape of every graph input that is not an initializer."""
    inits = {t.name for t in model.graph.initializer}
    shapes = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ValueError(f"input {vi.name!r} of {model.graph.name!r} has a symbolic "
                             f"dimension; random_inputs needs static shapes")
        shapes[vi.name] = tuple(d.dim_value for d in dims)
    return shapes


def random_inputs(model: onnx.ModelProto, n: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """n standard-normal float32 samples for every input, as `{name: [n, *shape]}`.

    The leading axis is the samples axis of the CLI's data files (so the result can go
    to `np.savez` as calibration or test data); `x[name][i]` is one feed. The stream is
    not the builders' (`default_rng(seed)`): with the same seed, inputs drawn from it
    would equal the first weight rows up to a scale, and the first layer would blow up.
    """
    if n < 1:
        raise ValueError(f"'n' must be a positive integer, not {n!r}")
    rng = np.random.default_rng([seed, _INPUT_STREAM])
    return {name: rng.standard_normal((n, *shape)).astype(np.float32)
            for name, shape in input_shapes(model).items()}
