"""Nearest-neighbour Resize / Upsample (hwc/frontend/onnx_import.py `_resize`): imported as moves every backend
already has (Reshape -> Expand -> Reshape for whole factors, a Gather of constant indices per axis otherwise),
checked against onnxruntime in float on the reference and the compiled CPU code, and in int8 through the CPU
backend and both tiles against the int8 reference. ONNX's own node tests of Resize run in tests/test_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import F32, model, ort_run

import hwc
from hwc.errors import UnsupportedError
from hwc.frontend import import_onnx

rng = np.random.default_rng(7)
EMPTY = np.zeros(0, np.float32)


def _resize_model(shape, out_shape, opset, *, scales=None, sizes=None, op="Resize", **attrs):
    """x -> Resize -> y, its scales or sizes as initializers (inputs (X, roi, scales, sizes) from opset 11)."""
    inits = {}
    if op == "Upsample" or opset < 11:
        inits["scales"] = np.asarray(scales, np.float32)
        ins = ["x", "scales"]
    else:
        inits["roi"] = EMPTY
        ins = ["x", "roi"]
        if scales is not None:
            inits["scales"] = np.asarray(scales, np.float32)
            ins.append("scales")
        else:
            inits["sizes"] = np.asarray(sizes, np.int64)
            ins += ["", "sizes"]
    node = helper.make_node(op, ins, ["y"], **attrs)
    return model([node], [("x", F32, shape)], [("y", F32, out_shape)], inits, opset=opset)


# (name, input shape, output shape, opset, model kwargs, imported as Expand (whole factors) rather than Gather)
CASES = [
    ("scales_2x2_half_pixel", [1, 3, 4, 5], [1, 3, 8, 10], 13, dict(scales=[1, 1, 2, 2], mode="nearest"), True),
    ("scales_3x2_asymmetric_floor", [2, 2, 3, 4], [2, 2, 9, 8], 13,
     dict(scales=[1, 1, 3, 2], mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="floor"), True),
    ("scales_2x2_tf_half_pixel_for_nn", [1, 2, 3, 3], [1, 2, 6, 6], 13,
     dict(scales=[1, 1, 2, 2], mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn",
          nearest_mode="floor"), True),
    ("sizes_fractional_up", [1, 2, 4, 3], [1, 2, 7, 5], 13, dict(sizes=[1, 2, 7, 5], mode="nearest"), False),
    ("scales_down_half_pixel", [1, 2, 6, 8], [1, 2, 3, 4], 13, dict(scales=[1, 1, 0.5, 0.5], mode="nearest"), False),
    ("sizes_align_corners_ceil", [1, 1, 3, 4], [1, 1, 7, 9], 13,
     dict(sizes=[1, 1, 7, 9], mode="nearest", coordinate_transformation_mode="align_corners",
          nearest_mode="ceil"), False),
    ("scales_2x_asymmetric_round_prefer_ceil", [1, 2, 3, 3], [1, 2, 6, 6], 13,
     dict(scales=[1, 1, 2, 2], mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="round_prefer_ceil"), False),
    ("resize10_scales_2x3", [1, 2, 3, 4], [1, 2, 6, 12], 10, dict(scales=[1, 1, 2, 3], mode="nearest"), True),
    ("upsample9_2x2", [1, 3, 4, 4], [1, 3, 8, 8], 9, dict(op="Upsample", scales=[1, 1, 2, 2], mode="nearest"), True),
    ("resize18_axes_scales", [1, 2, 3, 4], [1, 2, 6, 8], 18, dict(scales=[2, 2], axes=[2, 3], mode="nearest"), True),
    ("resize18_not_larger_sizes", [1, 1, 4, 6], [1, 1, 6, 9], 18,
     dict(sizes=[6, 10], axes=[2, 3], mode="nearest", keep_aspect_ratio_policy="not_larger"), False),
]


@pytest.mark.parametrize("name,shape,out_shape,opset,kw,whole", CASES, ids=[c[0] for c in CASES])
def test_nearest_resize_is_onnxruntime_exactly(name, shape, out_shape, opset, kw, whole):
    m = _resize_model(shape, out_shape, opset, **kw)
    x = rng.standard_normal(shape).astype(np.float32)
    want = ort_run(m, {"x": x})["y"]
    assert want.shape == tuple(out_shape)
    ops = {n.op for n in import_onnx(m).nodes}
    assert ("Expand" in ops, "Gather" in ops) == (whole, not whole), ops
    for target in ("ref", "cpu"):
        got = hwc.build(m, target=target).run({"x": x})["y"]
        np.testing.assert_array_equal(got, want, err_msg=target)


def _unet():
    """Conv -> MaxPool 2 -> Conv -> Resize x2 (nearest) -> Concat with the skip -> Conv: a U-Net's one level."""
    r = np.random.default_rng(1)

    def w(*s):
        return (r.standard_normal(s) * 0.3).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p0", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Resize", ["r1", "", "sc"], ["up"], mode="nearest"),
             helper.make_node("Concat", ["up", "r0"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "W2", "B2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"W0": w(8, 3, 3, 3), "B0": w(8), "W1": w(8, 8, 3, 3), "B1": w(8), "W2": w(4, 16, 3, 3), "B2": w(4),
             "sc": np.array([1, 1, 2, 2], np.float32)}
    m = model(nodes, [("x", F32, [1, 3, 12, 12])], [("y", F32, [1, 4, 12, 12])], inits, opset=13)
    return m, {"x": r.standard_normal((16, 1, 3, 12, 12)).astype(np.float32)}, \
        {"x": r.standard_normal((3, 1, 3, 12, 12)).astype(np.float32)}


@pytest.mark.parametrize("target", ["cpu", "tile8x8", "tile32x32"])
def test_an_int8_unet_level_with_an_upsample_is_its_int8_reference_exactly(target):
    m, calib, feeds = _unet()
    kw = {"int8": True} if target == "cpu" else {"hdl": False}
    art = hwc.build(m, target=target, calib=calib, **kw)
    ref = art.run(feeds, engine="reference")["y"]
    got = art.run(feeds, engine="auto" if target == "cpu" else "model")["y"]
    np.testing.assert_array_equal(got, ref)
    # and on inputs inside the calibrated ranges (new inputs may saturate) int8 stays close to the float model
    # (onnxruntime): the upsample moves int8 values at their one scale
    seen = {"x": calib["x"][:3]}
    ref = art.run(seen, engine="reference")["y"]
    np.testing.assert_array_equal(art.run(seen, engine="auto" if target == "cpu" else "model")["y"], ref)
    want = np.stack([ort_run(m, {"x": x})["y"] for x in seen["x"]])
    assert np.abs(ref - want).max() < 0.03 * np.abs(want).max()
    if target != "cpu":   # the upsample's moves run on the host, between the tile's segments; the Concat on
        where = {d["op"]: d["where"] for d in art.report["partition"]}   # tile8x8 (8-channel parts: whole blocks)
        assert where["Expand"] == "host" and where["Concat"] == ("tile" if target == "tile8x8" else "host"), where


@pytest.mark.parametrize("kw,words", [
    (dict(scales=[1, 1, 2, 2], mode="linear"), "mode 'linear' is not supported"),
    (dict(scales=[1, 1, 2, 2], mode="nearest", coordinate_transformation_mode="tf_crop_and_resize"),
     "coordinate_transformation_mode 'tf_crop_and_resize' is not supported"),
])
def test_a_resize_hwc_cannot_compute_is_a_clear_error(kw, words):
    m = _resize_model([1, 2, 3, 3], [1, 2, 6, 6], 13, **kw)
    with pytest.raises(UnsupportedError, match=words) as e:
        hwc.build(m, target="ref")
    assert "Resize" in str(e.value)
