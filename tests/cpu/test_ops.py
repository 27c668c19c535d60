"""Every op the CPU backend compiles, through the real object code, against the float
reference (rtol 1e-4, see cpu_helpers): elementwise ops and chains, convolutions of every
shape class, pooling, Gemm/MatMul variants, softmax, reductions, data movement, and the
places where channels-last and logical layouts meet."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import check_model
from onnx import TensorProto, helper
from onnx_helpers import F32, model

from hwc.ir.ops import UNARY_OPS

rng = np.random.default_rng(0)


def _w(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def single(op, in_shapes, out_shape, inits=None, **attrs):
    names = [f"x{i}" for i in range(len(in_shapes))] + list(inits or {})
    node = helper.make_node(op, names, ["y"], **attrs)
    return model([node], [(f"x{i}", F32, s) for i, s in enumerate(in_shapes)], [("y", F32, out_shape)], inits)


# ---- elementwise ------------------------------------------------------------------------------
_POSITIVE = {"Log", "Sqrt", "Reciprocal"}


@pytest.mark.parametrize("op", sorted(UNARY_OPS))
def test_unary(op):
    m = single(op, [[2, 3, 4, 5]], [2, 3, 4, 5])
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32) * 3
    x[0, 0, 0, :4] = [0.0, 1e-6, -1e-6, 20.0]
    if op in _POSITIVE:
        x = np.abs(x) + 0.05
    check_model(m, {"x0": x})


_SHAPES = [([2, 3, 4, 5], [2, 3, 4, 5]), ([2, 3, 4, 5], [3, 1, 5]), ([1, 3, 1, 5], [2, 1, 4, 1]), ([7], [1])]
#: PRelu's slope broadcasts to x only
_BINARY = [(op, s) for op in ["Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Max", "Min"] for s in _SHAPES
           if op != "PRelu" or np.broadcast_shapes(tuple(s[0]), tuple(s[1])) == tuple(s[0])]


@pytest.mark.parametrize("op,shapes", _BINARY)
def test_binary_broadcast(op, shapes):
    a, b = shapes
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))
    m = single(op, [a, b], out)
    x0 = rng.standard_normal(a).astype(np.float32)
    x1 = rng.standard_normal(b).astype(np.float32)
    if op == "Pow":
        x0 = np.abs(x0) + 0.1
    if op == "Div":
        x1 = np.where(np.abs(x1) < 0.1, 0.5, x1).astype(np.float32)
    check_model(m, {"x0": x0, "x1": x1})


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op):
    m = single(op, [[2, 3, 4], [3, 4], [1, 1, 4]], [2, 3, 4])
    check_model(m)


def test_elementwise_chain_with_constants_is_one_loop():
    inits = {"c": _w(3, 1, 1), "d": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Mul", ["x", "c"], ["a"]), helper.make_node("Add", ["a", "d"], ["b"]),
             helper.make_node("Sigmoid", ["b"], ["s"]), helper.make_node("Mul", ["b", "s"], ["y"])]
    m = model(nodes, [("x", F32, [2, 3, 8, 8])], [("y", F32, [2, 3, 8, 8])], inits)
    build = check_model(m)
    assert [i.attrs["kernel"] for i in build.program.instrs] == ["ew"]
    build = check_model(m, optimize=True)
    assert [i.attrs["kernel"] for i in build.program.instrs] == ["ew"]


def test_batchnorm_alone():
    c = 5
    inits = {"s": _w(c) + 1, "b": _w(c), "m": _w(c), "v": np.abs(_w(c)) + 0.5}
    m = single("BatchNormalization", [[2, c, 3, 4]], [2, c, 3, 4], inits, epsilon=1e-3)
    check_model(m)


# ---- convolution ------------------------------------------------------------------------------------
CONVS = [
    # cin, cout, (kh, kw), stride, pads [t, l, b, r], dilation, group, (H, W), bias
    (3, 16, (3, 3), 1, [1, 1, 1, 1], 1, 1, (9, 11), True),
    (16, 32, (3, 3), 2, [0, 0, 1, 1], 1, 1, (16, 16), True),
    (8, 24, (1, 1), 1, [0, 0, 0, 0], 1, 1, (7, 5), False),
    (8, 20, (1, 1), 2, [0, 0, 0, 0], 1, 1, (9, 9), True),
    (1, 64, (10, 4), 2, [4, 1, 5, 1], 1, 1, (49, 10), True),
    (6, 6, (3, 3), 1, [1, 1, 1, 1], 1, 6, (8, 8), True),       # depthwise
    (40, 40, (3, 3), 2, [0, 0, 1, 1], 1, 40, (12, 10), False),  # depthwise, strided, channel tail
    (8, 12, (3, 3), 1, [2, 2, 2, 2], 2, 1, (10, 10), True),    # dilated
    (8, 12, (3, 3), 1, [1, 0, 2, 1], 1, 4, (6, 7), True),      # grouped, asymmetric pads
    (5, 7, (2, 3), (2, 1), [0, 1, 1, 0], (1, 2), 1, (8, 9), True),
    (3, 100, (3, 3), 1, [1, 1, 1, 1], 1, 1, (3, 3), True),     # many channels, tiny image
]


@pytest.mark.parametrize("cin,cout,k,stride,pads,dil,group,hw,bias", CONVS)
def test_conv2d(cin, cout, k, stride, pads, dil, group, hw, bias):
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    dil = dil if isinstance(dil, tuple) else (dil, dil)
    inits = {"W": _w(cout, cin // group, *k)}
    if bias:
        inits["B"] = _w(cout)
    from hwc.ir.ops import conv_out_dim

    oh = conv_out_dim(hw[0], k[0], stride[0], dil[0], pads[0], pads[2])
    ow = conv_out_dim(hw[1], k[1], stride[1], dil[1], pads[1], pads[3])
    node = helper.make_node("Conv", ["x", *inits], ["y"], kernel_shape=list(k), strides=list(stride), pads=pads,
                            dilations=list(dil), group=group)
    m = model([node], [("x", F32, [2, cin, *hw])], [("y", F32, [2, cout, oh, ow])], inits)
    check_model(m)


def test_conv1d():
    inits = {"W": _w(6, 4, 3), "B": _w(6)}
    node = helper.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 2])
    m = model([node], [("x", F32, [1, 4, 17])], [("y", F32, [1, 6, 9])], inits)
    check_model(m)


def test_conv_epilogue_residual_bn_relu():
    """Conv -> BN -> Add(graph input) -> Relu: the BN folds, the add and relu run in the store."""
    c = 16
    inits = {"W": _w(c, c, 3, 3, scale=0.1), "s": _w(c) + 1, "b": _w(c), "m": _w(c), "v": np.abs(_w(c)) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Add", ["n", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    m = model(nodes, [("x", F32, [1, c, 10, 10])], [("y", F32, [1, c, 10, 10])], inits)
    build = check_model(m)
    kernels = [i.attrs["kernel"] for i in build.program.instrs]
    assert kernels.count("conv") == 1 and "ew" not in kernels, kernels


def test_conv_then_layout_sensitive_ops():
    """A channels-last conv output feeding Flatten+Gemm, a Transpose, a Concat on channels
    and a Slice: every consumer sees the logical tensor."""
    inits = {"W": _w(8, 3, 3, 3), "W2": _w(8, 8, 1, 1), "F": _w(8 * 6 * 6, 5)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "W2"], ["c2"]),
             helper.make_node("Concat", ["r", "c2"], ["cat"], axis=1),
             helper.make_node("Slice", ["cat", "st", "en", "ax"], ["sl"]),
             helper.make_node("Flatten", ["sl"], ["f"]),
             helper.make_node("MatMul", ["f", "F"], ["y"]),
             helper.make_node("Transpose", ["c2"], ["t"], perm=[0, 2, 3, 1])]
    inits.update({"st": np.array([4], np.int64), "en": np.array([12], np.int64), "ax": np.array([1], np.int64)})
    m = model(nodes, [("x", F32, [1, 3, 6, 6])], [("y", F32, [1, 5]), ("t", F32, [1, 6, 6, 8])], inits)
    check_model(m)
    check_model(m, optimize=True)


@pytest.mark.parametrize("case", ["conv_1x1_image", "pool_one_channel", "gap_softmax"])
def test_layout_free_output_reshaped_to_an_image(case):
    """A conv/pool output whose channels-last bytes are its logical bytes (H*W == 1 or C == 1),
    reshaped to a rank-3 shape that is not: its consumers read it in logical order (the
    GAP -> Reshape -> Softmax of attention blocks)."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    if case == "conv_1x1_image":
        x, shape, first = [4, 3, 1, 1], [2, 4, 4], helper.make_node("Conv", ["x", "W"], ["p"])
        last, out = helper.make_node("Relu", ["r"], ["y"]), [2, 4, 4]
    elif case == "pool_one_channel":
        x, shape = [4, 1, 8], [2, 4, 2]
        first = helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2], strides=[2])
        last, out = helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1]), [2, 2, 4]
    else:
        x, shape, first = [1, 8, 3, 3], [1, 4, 2], helper.make_node("GlobalAveragePool", ["x"], ["p"])
        last, out = helper.make_node("Softmax", ["r"], ["y"], axis=1), [1, 4, 2]
    nodes = [first, helper.make_node("Reshape", ["p", "shp"], ["r"]), last]
    m = model(nodes, [("x", F32, x)], [("y", F32, out)], {"W": _w(8, 3, 1, 1), "shp": i64(shape)})
    check_model(m)


@pytest.mark.parametrize("x,w,pads,op", [([1, 1, 5, 5], [1, 1, 3, 3], [1, 1, 1, 1], "Add"),
                                         ([1, 3, 1, 1], [3, 3, 3, 3], [1, 1, 1, 1], "Add"),
                                         ([1, 1, 1], [7, 1, 2], [0, 1], "Min"),
                                         ([1, 4, 5, 5], [4, 4, 3, 3], [1, 1, 1, 1], "Add")])
def test_padded_conv_epilogue_reads_the_conv_input(x, w, pads, op):
    """A padded conv whose fused epilogue reads the conv's own (unpadded) input, e.g. a residual: the kernel
    reads the padded copy and the input itself (layout-free inputs once lost the latter)."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=pads), helper.make_node(op, ["c", "x"], ["y"])]
    out = list(np.broadcast_shapes(tuple(x), (1, w[0]) + tuple(x[2:])))
    check_model(model(nodes, [("x", F32, x)], [("y", F32, out)], {"W": _w(*w)}))


def test_conv_output_is_graph_output_and_input_feeds_two_convs():
    inits = {"W": _w(4, 2, 3, 3), "V": _w(4, 2, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "V"], ["z"])]
    m = model(nodes, [("x", F32, [1, 2, 5, 5])], [("y", F32, [1, 4, 5, 5]), ("z", F32, [1, 4, 5, 5])], inits)
    check_model(m)


# ---- pooling -------------------------------------------------------------------------------------------
POOLS = [
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2]), (8, 8)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (9, 9)),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), (8, 8)),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[1, 1], dilations=[2, 2]), (7, 7)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (9, 9)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1), (9, 9)),
    ("AveragePool", dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1), (8, 7)),
    ("AveragePool", dict(kernel_shape=[8, 8], strides=[8, 8]), (8, 8)),
]


@pytest.mark.parametrize("op,attrs,hw", POOLS)
def test_pool2d(op, attrs, hw):
    import onnx

    m0 = single(op, [[2, 20, *hw]], [2, 20, 1, 1], **attrs)
    inferred = onnx.shape_inference.infer_shapes(m0)
    dims = [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]
    m = single(op, [[2, 20, *hw]], dims, **attrs)
    check_model(m)


def test_pool1d_and_global():
    check_model(single("MaxPool", [[1, 3, 11]], [1, 3, 5], kernel_shape=[3], strides=[2]))
    check_model(single("GlobalAveragePool", [[2, 37, 5, 6]], [2, 37, 1, 1]))
    check_model(single("GlobalMaxPool", [[2, 37, 5, 6]], [2, 37, 1, 1]))


# ---- matrix products ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, [13], [1, 13], [6, 13], [6, 1], []])
def test_gemm_constant_b(ta, tb, c_shape):
    a_shape = [9, 6] if ta else [6, 9]
    inits = {"B": _w(*([13, 9] if tb else [9, 13]))}
    if c_shape is not None:
        inits["C"] = _w(*c_shape) if c_shape else np.array(0.7, np.float32)
    m = single("Gemm", [a_shape], [6, 13], inits, transA=ta, transB=tb, alpha=0.5, beta=1.5)
    check_model(m)


@pytest.mark.parametrize("tb", [0, 1])
def test_gemm_runtime_b_and_c(tb):
    nodes = [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=tb, alpha=2.0, beta=0.5)]
    m = model(nodes, [("a", F32, [5, 7]), ("b", F32, [4, 7] if tb else [7, 4]), ("c", F32, [5, 1])],
              [("y", F32, [5, 4])])
    check_model(m)


@pytest.mark.parametrize("c_shape", [[4], [1, 4], [1]])
def test_gemm_runtime_b_constant_per_column_c(c_shape):
    """alpha * A @ B + beta * C: a constant per-column C is not scaled by alpha when B is read in
    place (the kernel's bias is added before the epilogue that applies alpha)."""
    nodes = [helper.make_node("Gemm", ["a", "b", "C"], ["y"], alpha=0.5, beta=1.5)]
    m = model(nodes, [("a", F32, [5, 7]), ("b", F32, [7, 4])], [("y", F32, [5, 4])], {"C": _w(*c_shape) + 1})
    check_model(m)


@pytest.mark.parametrize("op,attrs,c", [("MatMul", {}, None), ("Gemm", {"transB": 1}, None),
                                        ("Gemm", {"transB": 1}, [4]), ("Gemm", {"transB": 1, "alpha": 2.0}, [1, 1]),
                                        ("Gemm", {"transA": 1}, None)])
def test_product_of_a_tensor_with_itself(op, attrs, c):
    """MatMul(x, x) and Gemm(x, x, C) (x @ x.T + C): the kernel finds its operands by position,
    so x is read twice and C stays the third operand."""
    inits = {"C": _w(*c) + 1} if c else {}
    nodes = [helper.make_node(op, ["x", "x"] + list(inits), ["y"], **attrs)]
    check_model(model(nodes, [("x", F32, [4, 4])], [("y", F32, [4, 4])], inits))


@pytest.mark.parametrize("case", ["f_f", "v_f", "a_f", "c_is_f"])
def test_gemm_run_time_operands_that_are_views_of_a_conv_output(case):
    """A Gemm's run-time B or C that is a Flatten of a channels-last conv output is read in logical order."""
    conv = helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1])
    flat = helper.make_node("Flatten", ["c"], ["f"])
    ins, out, inits = [("x", F32, [2, 3, 3, 3])], [2, 2], {"W": _w(2, 3, 3, 3)}
    gemm = {"f_f": (["f", "f"], {"transB": 1}), "v_f": (["v", "f"], {"transB": 1}), "a_f": (["a", "f"], {}),
            "c_is_f": (["v", "W2", "f"], {"alpha": 0.5})}[case]
    if case == "v_f":
        ins.append(("v", F32, [3, 18]))
        out = [3, 2]
    elif case == "a_f":
        ins.append(("a", F32, [4, 2]))
        out = [4, 18]
    elif case == "c_is_f":
        ins.append(("v", F32, [2, 5]))
        inits["W2"], out = _w(5, 18), [2, 18]
    nodes = [conv, flat, helper.make_node("Gemm", gemm[0], ["y"], **gemm[1])]
    check_model(model(nodes, ins, [("y", F32, out)], inits))


@pytest.mark.parametrize("sa,sb", [([3, 5], [5, 4]), ([2, 3, 5], [5, 21]), ([2, 3, 5], [2, 5, 4]),
                                   ([2, 1, 3, 5], [4, 5, 6]), ([5], [5, 4]), ([3, 5], [5]), ([5], [5])])
def test_matmul_runtime(sa, sb):
    out = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    m = single("MatMul", [sa, sb], list(out))
    check_model(m)


def test_matmul_constant_b_batched_a_with_epilogue():
    inits = {"B": _w(8, 20), "c": _w(20)}
    nodes = [helper.make_node("MatMul", ["x", "B"], ["m"]), helper.make_node("Add", ["m", "c"], ["a"]),
             helper.make_node("Tanh", ["a"], ["y"])]
    m = model(nodes, [("x", F32, [2, 3, 8])], [("y", F32, [2, 3, 20])], inits)
    check_model(m)


# ---- softmax and reductions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(op, axis):
    x = (rng.standard_normal((2, 17, 3)) * 5).astype(np.float32)
    check_model(single(op, [[2, 17, 3]], [2, 17, 3], axis=axis), {"x0": x})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keep", [([1], 1), ([0, 2], 0), ([2, 3], 1), ([0, 1, 2, 3], 0)])
def test_reduce(op, axes, keep):
    shape = [2, 3, 4, 5]
    out = [1 if i in axes else d for i, d in enumerate(shape)] if keep else [d for i, d in enumerate(shape)
                                                                          if i not in axes]
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep)
    m = model([node], [("x", F32, shape)], [("y", F32, out)], {"axes": np.array(axes, np.int64)}, opset=18)
    check_model(m)


# ---- data movement --------------------------------------------------------------------------------------------
def test_transpose_slice_expand_split_concat():
    inits = {"st": np.array([5, 0], np.int64), "en": np.array([0, 4], np.int64), "ax": np.array([2, 3], np.int64),
             "sp": np.array([-1, 1], np.int64), "shape": np.array([2, 3, 4, 6], np.int64),
             "split": np.array([1, 3], np.int64)}
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]),       # [2, 6, 3, 4]
             helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),       # [2, 3, 5, 4]
             helper.make_node("Expand", ["e", "shape"], ["ex"]),                    # [2, 3, 4, 6]
             helper.make_node("Split", ["x", "split"], ["p0", "p1"], axis=3),       # [2,3,6,1], [2,3,6,3]
             helper.make_node("Concat", ["p1", "p0"], ["c"], axis=3)]
    m = model(nodes, [("x", F32, [2, 3, 6, 4]), ("e", F32, [3, 1, 6])],
              [("t", F32, [2, 6, 3, 4]), ("s", F32, [2, 3, 5, 4]), ("ex", F32, [2, 3, 4, 6]), ("c", F32, [2, 3, 6, 4])],
              inits, opset=18)
    check_model(m)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    pads = np.array([0, 1, 2, 0, 0, 2, 1, 0] if mode != "constant" else [0, 1, -1, 2, 1, 0, 2, -1], np.int64)
    inits = {"p": pads, "v": np.array(1.5, np.float32)}
    shape = [2, 3, 4, 5]
    out = [d + int(pads[i]) + int(pads[i + 4]) for i, d in enumerate(shape)]
    ins = ["x", "p", "v"] if mode == "constant" else ["x", "p"]
    m = model([helper.make_node("Pad", ins, ["y"], mode=mode)], [("x", F32, shape)], [("y", F32, out)],
              {k: inits[k] for k in ins[1:]}, opset=19)
    check_model(m)


def test_gather_constant_and_runtime_indices():
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=1),
             helper.make_node("Gather", ["x", "j"], ["z"], axis=2)]
    m = model(nodes, [("x", F32, [2, 5, 4]), ("j", TensorProto.INT64, [3])],
              [("y", F32, [2, 2, 3, 4]), ("z", F32, [2, 5, 3])], {"i": np.array([[0, -1, 2], [4, 4, 1]], np.int64)})
    check_model(m, {"x": rng.standard_normal((2, 5, 4)).astype(np.float32), "j": np.array([3, -4, 1], np.int64)})


def test_identity_and_reshape_between_input_and_output():
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Flatten", ["x"], ["z"])]
    m = model(nodes, [("x", F32, [2, 3, 4])], [("y", F32, [2, 3, 4]), ("z", F32, [2, 12])])
    check_model(m)


# ---- integer tensors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_integer_binary(op, dtype):
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = model([helper.make_node(op, ["a", "b"], ["y"])], [("a", et, [3, 7]), ("b", et, [7])], [("y", et, [3, 7])])
    info = np.iinfo(dtype)
    r = np.random.default_rng(1)
    a = r.integers(max(info.min, -1000), min(info.max, 1000), (3, 7)).astype(dtype)
    b = r.integers(max(info.min, -9), min(info.max, 9), (7,)).astype(dtype)
    b[0] = 0  # Div by zero gives 0, as in the reference
    check_model(m, {"a": a, "b": b})


def test_integer_clip_reduce_and_cast():
    nodes = [helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
             helper.make_node("ReduceMax", ["a", "ax"], ["r"], keepdims=0),
             helper.make_node("Cast", ["c"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32)]
    m = model(nodes, [("a", TensorProto.INT8, [4, 6]), ("x", F32, [5])],
              [("r", TensorProto.INT8, [4]), ("f", F32, [4, 6]), ("i", TensorProto.INT32, [5])],
              {"lo": np.array(-3, np.int8), "hi": np.array(50, np.int8), "ax": np.array([1], np.int64)}, opset=18)
    a = np.random.default_rng(2).integers(-128, 128, (4, 6)).astype(np.int8)
    check_model(m, {"a": a, "x": np.array([-2.7, -0.5, 0.0, 3.9, 100.2], np.float32)})


def test_batchnorm_with_runtime_statistics():
    names = ["s", "b", "m", "v"]
    node = helper.make_node("BatchNormalization", ["x", *names], ["y"], epsilon=1e-2)
    m = model([node], [("x", F32, [2, 3, 4, 5])] + [(n, F32, [3]) for n in names], [("y", F32, [2, 3, 4, 5])])
    r = np.random.default_rng(3)
    feeds = {n: r.standard_normal(3).astype(np.float32) for n in names}
    feeds["v"] = np.abs(feeds["v"]) + 0.5
    feeds["x"] = r.standard_normal((2, 3, 4, 5)).astype(np.float32)
    check_model(m, feeds)
