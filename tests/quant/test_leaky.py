"""A LeakyReLU fused into the requantization (`arith.leaky_params`, QConv / QGemm's sixth input mult_neg): no table,
one rounding, the same integers on every backend (int8 reference, compiled CPU code, the tile model)."""

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import F32, model, ort_run

import hwc
from hwc.quant import arith
from hwc.quant.search import sqnr_db


def test_leaky_params_by_hand():
    # f = 0.25, alpha = 0.1: the larger factor 0.25 takes 31 significant bits, 0.25 = 2**30 / 2**32; the negative
    # one 0.025 * 2**32 = 107374182.4 -> 107374182 on the same shift
    mult, mult_neg, shift = arith.leaky_params([0.25], 0.1)
    assert (int(mult[0]), int(mult_neg[0]), int(shift[0])) == (1 << 30, 107374182, 32)
    # alpha > 1 (a slope steeper than the positive side): the negative factor sets the shift
    mult, mult_neg, shift = arith.leaky_params([0.25], 2.0)   # 0.5 = 2**30 / 2**31
    assert (int(mult[0]), int(mult_neg[0]), int(shift[0])) == (1 << 29, 1 << 30, 31)
    # a = -100 -> -100 * 0.025 = -2.5 -> -2 (ties toward +inf); a = 10 -> 2.5 -> 3; a = 0 -> 0
    acc = np.array([-100, 10, 0], np.int32)
    y = arith.requantize(acc, 1 << 30, 32, 0, -128, 127, mult_neg=107374182)
    assert y.tolist() == [-2, 3, 0]


def _leaky_model(seed=0):
    """Conv 3x3 (8) + LeakyReLU 0.1 -> depthwise 3x3 stride 2 + LeakyReLU 0.2 -> Conv 1x1 (16) + LeakyReLU 0.01
    -> GlobalAveragePool -> Flatten -> Gemm (10) + LeakyReLU 0.1, input [1, 3, 12, 12]."""
    rng = np.random.default_rng(seed)
    inits = {"w0": rng.standard_normal((8, 3, 3, 3)) * 0.3, "b0": rng.standard_normal(8) * 0.1,
             "w1": rng.standard_normal((8, 1, 3, 3)) * 0.4, "b1": rng.standard_normal(8) * 0.1,
             "w2": rng.standard_normal((16, 8, 1, 1)) * 0.4, "b2": rng.standard_normal(16) * 0.1,
             "w3": rng.standard_normal((10, 16)) * 0.3, "b3": rng.standard_normal(10) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c0"], ["a0"], alpha=0.1),
             helper.make_node("Conv", ["a0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2], group=8),
             helper.make_node("LeakyRelu", ["c1"], ["a1"], alpha=0.2),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"]),
             helper.make_node("LeakyRelu", ["c2"], ["a2"], alpha=0.01),
             helper.make_node("GlobalAveragePool", ["a2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], transB=1),
             helper.make_node("LeakyRelu", ["g"], ["y"], alpha=0.1)]
    return model(nodes, [("x", F32, [1, 3, 12, 12])], [("y", F32, [1, 10])],
                 {k: v.astype(np.float32) for k, v in inits.items()})


def _inputs(n, seed):
    return {"x": np.random.default_rng(seed).standard_normal((n, 1, 3, 12, 12)).astype(np.float32)}


def _sqnr(art, m, test):
    want = np.stack([ort_run(m, {"x": x})["y"] for x in test["x"]])
    return sqnr_db(want, art.run(test, engine="reference")["y"])


def test_leaky_relu_is_a_second_multiplier_not_a_table(monkeypatch):
    """Every LeakyReLU fuses into its Conv / Gemm's requantization: no QLut, a mult_neg per layer, and the int8
    output is closer to onnxruntime's float one than with the tables (one rounding instead of two)."""
    import hwc.quant.quantize as qz

    m = _leaky_model()
    calib, test = _inputs(32, 1), _inputs(16, 2)
    art = hwc.build(m, target="ref", calib=calib)
    q = art.graph
    ops = q.op_counts()
    assert "QLut" not in ops and ops["QConv"] == 3 and ops["QGemm"] == 1, ops
    for n in q.nodes:
        if n.op in ("QConv", "QGemm"):
            mult, mult_neg = q.const(n.inputs[3]), q.const(n.inputs[5])
            assert mult_neg.dtype == np.int32 and (np.abs(mult_neg) < np.abs(mult)).all()
    fused = _sqnr(art, m, test)
    monkeypatch.setattr(qz, "SLOPE_ACTS", ())      # the tables, as before
    tables = hwc.build(m, target="ref", calib=calib)
    assert tables.graph.op_counts()["QLut"] == 4
    table_sqnr = _sqnr(tables, m, test)
    assert fused > 30 and fused >= table_sqnr, (fused, table_sqnr)   # measured 37.4 vs 34.1 dB


def test_cpu_int8_code_equals_the_int8_reference():
    """The compiled CPU code's fused LeakyReLU (conv by im2col, depthwise, FC) == the int8 reference, bit for bit."""
    m = _leaky_model(seed=3)
    art = hwc.build(m, target="cpu", calib=_inputs(16, 1))
    assert art.info["int8"]
    x = _inputs(6, 4)
    np.testing.assert_array_equal(art.run(x)["y"], art.run(x, engine="reference")["y"])


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_the_tile_runs_it_in_one_segment(target):
    """On the tile every layer is on the array with its LeakyReLU in the PPU (PPU.neg): one segment, exact."""
    m = _leaky_model(seed=5)
    art = hwc.build(m, target=target, calib=_inputs(16, 1), hdl=False)
    x = _inputs(3, 6)
    np.testing.assert_array_equal(art.run(x, engine="model")["y"], art.run(x, engine="reference")["y"])
    assert art.report["segments"] == 1
    assert {d["op"] for d in art.report["partition"] if d["where"] == "host"} <= {"Quantize", "Dequantize"}
