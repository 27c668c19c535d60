"""A graph input that is also a graph output (directly, or through an Identity): the compiled
code copies it into the output's own bytes, and model.json/model.h must still give the input
its own offset, or the caller writes the input where the code never reads it."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import F32, model, ort_run

import hwc


def _model(identity: bool):
    """y = Conv(x), and x itself (or Identity(x)) as a second output."""
    rng = np.random.default_rng(0)
    inits = {"w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
             "b": (rng.standard_normal(8) * 0.1).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    out = "x"
    if identity:
        nodes.append(helper.make_node("Identity", ["x"], ["xo"]))
        out = "xo"
    return model(nodes, [("x", F32, [1, 3, 6, 6])], [("y", F32, [1, 8, 6, 6]), (out, F32, [1, 3, 6, 6])], inits,
                 name="passthrough"), out


@pytest.mark.parametrize("int8", [False, True], ids=["float", "int8"])
@pytest.mark.parametrize("identity", [False, True], ids=["direct", "identity"])
def test_input_that_is_an_output(tmp_path, identity, int8):
    m, out = _model(identity)
    rng = np.random.default_rng(1)
    calib = {"x": rng.standard_normal((8, 1, 3, 6, 6)).astype(np.float32)} if int8 else None
    art = hwc.build(m, target="cpu", calib=calib)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = ort_run(m, {"x": x})
    got = art.run({"x": x})
    if int8:
        ref = art.run({"x": x}, engine="reference")
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
        assert np.abs(got["y"] - want["y"]).max() < 0.03 * float(np.ptp(want["y"]))   # int8 steps of the range
    if int8 and identity:   # the quantizer runs the Identity on int8: x through the input quantization
        np.testing.assert_allclose(got[out], x, atol=float(np.ptp(calib["x"])) / 255)
    else:
        np.testing.assert_array_equal(got[out], x)
    if not int8:
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)

    # model.h: a C caller writes the input at its offset and reads both outputs at theirs
    d = art.save(tmp_path / "out")
    h = (d / "model.h").read_text()
    offs = dict(re.findall(r"#define \w+_((?:INPUT|OUTPUT)_\w+)_OFFSET (\d+)", h))
    assert offs["INPUT_X"] != offs[f"OUTPUT_{out.upper()}"]
    assert shutil.which("gcc") and shutil.which("make"), "gcc/make missing: run `make setup`"
    subprocess.run(["make", "-C", str(d)], check=True, capture_output=True)
    x.tofile(tmp_path / "in.bin")
    subprocess.run([str(d / "main"), "-w", str(d / "weights.bin"), str(tmp_path / "in.bin"),
                    str(tmp_path / "out.bin")], capture_output=True, text=True, check=True)
    raw = np.fromfile(tmp_path / "out.bin", np.float32)
    np.testing.assert_array_equal(raw[:288].reshape(1, 8, 6, 6), got["y"])
    np.testing.assert_array_equal(raw[288:].reshape(1, 3, 6, 6), got[out])
