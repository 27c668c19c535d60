"""Model inputs outside the calibrated range at run time: huge and infinite values saturate
to the int8 end of their sign (not to -128 whatever the sign), the same on the tile, in the
compiled CPU code and in the int8 reference; NaN is a clear InputError."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hwc
from hwc.errors import InputError


def _conv() -> onnx.ModelProto:
    w = (np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "sat",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    return m


@pytest.fixture(scope="module", params=["tile8x8", "cpu"])
def art(request):
    calib = {"x": np.random.default_rng(1).standard_normal((8, 1, 3, 6, 6)).astype(np.float32)}
    return hwc.build(_conv(), target=request.param, calib=calib, hdl=False)


def test_huge_and_infinite_inputs_saturate_like_large_ones(art):
    x = np.random.default_rng(2).standard_normal((1, 3, 6, 6)).astype(np.float32)
    big = x.copy()
    flat = big.reshape(-1)
    flat[:8] = [1e19, 1e20, np.inf, 3e38, -1e19, -1e20, -np.inf, -3e38]
    flat[8::9] = np.where(flat[8::9] > 0, 1e30, -1e30)
    # the independent reference: +-1000, far outside the calibrated range (|x| < 5) but small enough for
    # any integer cast, saturates to the same int8 codes
    clipped = np.clip(np.nan_to_num(big), -1000, 1000)
    want = art.run({"x": clipped}, engine="reference")["y"]
    for engine in ("auto", "reference"):
        np.testing.assert_array_equal(art.run({"x": big}, engine=engine)["y"], want, err_msg=engine)


def test_nan_input_is_an_input_error(art):
    """Every int8 target (the check is in Artifact.run), every engine."""
    x = np.zeros((1, 3, 6, 6), np.float32)
    x[0, 1, 2, 3] = np.nan
    for engine in ("auto", "reference"):
        with pytest.raises(InputError) as e:
            art.run({"x": x}, engine=engine)
        msg = str(e.value)
        assert "'x'" in msg and "NaN" in msg and "1 of 108" in msg and "\n" not in msg
