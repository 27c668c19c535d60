"""Calibration: histograms and the four range methods on data whose answer is known."""

import warnings

import numpy as np
import pytest

from hwc.ir import Graph, TensorType
from hwc.quant.calibrate import TensorStats, choose_range, clipped_fraction, collect_stats
from hwc.quant.config import QuantConfig
from hwc.quant.quantize import encodings


def _stats(x: np.ndarray, bins: int = 2048) -> TensorStats:
    lo, hi = float(x.min()), float(x.max())
    return TensorStats(lo, hi, x.size, np.histogram(x, bins=bins, range=(lo, hi))[0])


def test_minmax_and_percentile_on_known_data():
    x = np.linspace(-1.0, 3.0, 400_001)
    st = _stats(x)
    assert choose_range(st, "minmax") == (-1.0, 3.0)
    lo, hi = choose_range(st, "percentile", 99.0)      # 0.5% off each end of a uniform [-1, 3]
    assert lo == pytest.approx(-0.98, abs=2e-3) and hi == pytest.approx(2.98, abs=2e-3)
    assert clipped_fraction(st, lo, hi) == pytest.approx(0.01, abs=1e-3)
    relu = _stats(np.maximum(x, 0))                    # after a ReLU: the range starts at 0
    assert choose_range(relu, "percentile", 99.0)[0] == 0.0


def test_mse_clips_a_gaussian_where_theory_says():
    # 8-bit uniform quantization of N(0, 1): the MSE-optimal clip is near +-4 sigma at this
    # sample size (the tails beyond ~4 sigma hold too little mass to pay for coarser steps)
    x = np.random.default_rng(0).standard_normal(2_000_000)
    lo, hi = choose_range(_stats(x), "mse")
    assert 3.0 < -lo < 4.6 and 3.0 < hi < 4.6
    assert -lo < -x.min() and hi < x.max()


def test_entropy_ignores_the_zero_spike_and_keeps_most_mass():
    rng = np.random.default_rng(1)
    x = np.maximum(rng.standard_normal(500_000), 0)    # half exact zeros
    lo, hi = choose_range(_stats(x), "entropy")
    assert lo == 0.0 and 2.0 < hi <= x.max()
    assert np.mean(x > hi) < 0.01


def test_collect_stats_and_encodings_on_a_graph():
    g = Graph("g")
    g.add_input("x", TensorType("float32", (1, 4)))
    g.make_node("Relu", ["x"], name="r", outputs=["y"])
    g.outputs = ["y"]
    xs = np.linspace(-2, 5, 4 * 50, dtype=np.float32).reshape(50, 1, 4)
    st = collect_stats(g, {"x": xs}, bins=256)
    assert (st["x"].min, st["x"].max, st["x"].count) == (-2.0, 5.0, 200)
    assert st["y"].min == 0.0 and st["y"].hist.sum() == 200
    enc = encodings(st, QuantConfig(method="minmax"))
    assert enc["y"].zero_point == -128 and enc["y"].scale == pytest.approx(5 / 255)
    assert enc["x"].scale == pytest.approx(7 / 255)
    wide = encodings(st, QuantConfig(method="minmax", headroom=0.5))
    assert wide["y"].scale == pytest.approx(7.5 / 255) and wide["y"].zero_point == -128


def _exp_conv_model(path):
    """x -> Exp -> h -> Conv 1x2 -> y, x: [1, 2, 4, 4]: a finite sample with a large x overflows h to inf."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.full((3, 2, 1, 2), 0.5, np.float32)
    w[..., 1] = -0.5   # (inf in two neighbouring pixels: inf - inf, NaN, where the reference sums the taps)
    g = helper.make_graph([helper.make_node("Exp", ["x"], ["h"], name="exp"),
                           helper.make_node("Conv", ["h", "w"], ["y"], name="conv")], "expconv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 3])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    onnx.save(m, path)


@pytest.mark.parametrize("where", ["input", "intermediate"])
def test_non_finite_calibration_data_is_a_user_error(tmp_path, capsys, where):
    from hwc.cli import main

    _exp_conv_model(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((40, 1, 2, 4, 4)).astype(np.float32)
    if where == "input":
        x[3, 0, 0, 0, :2] = np.inf
        x[37, 0, 1, 2, 2] = np.nan
    else:
        x[37, 0, 1, 3, 0] = 100.0    # exp(100) = 2.7e43: inf in float32 (sample 37: the second chunk of 32)
    np.savez(tmp_path / "calib.npz", x=x)
    with warnings.catch_warnings():   # (no numpy RuntimeWarning printed before the error: random probe 7)
        warnings.simplefilter("error")
        rc = main(["build", str(tmp_path / "m.onnx"), "--target", "cpu", "--int8", "--calib",
                   str(tmp_path / "calib.npz"), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, err
    msg = err[err.index("hwc: error:"):].strip()
    assert "\n" not in msg and "internal error" not in err and "Traceback" not in err
    if where == "input":
        assert "input 'x'" in msg and "samples 3, 37 (of 40" in msg and "remove or fix" in msg
    else:
        assert "sample 37 (of 40" in msg and "Exp" in msg and "inputs are finite" in msg and "remove" in msg
    assert not (tmp_path / "out").exists()
