"""hwc.quant.arith against hand-computed tables: the integer semantics every backend copies.

Every expected value below was worked out by hand (the comment shows the real number
before rounding); none is produced by the function under test.
"""

import math
import warnings

import numpy as np
import pytest

from hwc.quant import arith

M30 = 1 << 30           # multiplier 2**30: M * 2**-shift = 2**(30 - shift) exactly
MMAX = (1 << 31) - 1    # the largest multiplier


@pytest.mark.parametrize("acc, mult, shift, expected", [
    # f = 2**30 / 2**32 = 0.25: ties in both signs round toward +inf
    (10, M30, 32, 3),        # 2.5   -> 3
    (-10, M30, 32, -2),      # -2.5  -> -2
    (11, M30, 32, 3),        # 2.75  -> 3
    (-11, M30, 32, -3),      # -2.75 -> -3
    (9, M30, 32, 2),         # 2.25  -> 2
    (-9, M30, 32, -2),       # -2.25 -> -2
    (2, M30, 32, 1),         # 0.5   -> 1
    (-2, M30, 32, 0),        # -0.5  -> 0
    (-6, M30, 32, -1),       # -1.5  -> -1
    (0, M30, 32, 0),
    # f = 2**30 / 2**37 = 1/128
    (64, M30, 37, 1),        # 0.5 exactly -> 1
    (-64, M30, 37, 0),       # -0.5 exactly -> 0
    (-192, M30, 37, -1),     # -1.5 -> -1
    # multiplier near 2**31: f = (2**31 - 1) / 2**38 = 1/128 - 2**-38, a hair under the tie
    (64, MMAX, 38, 0),       # 0.5 - 2**-32   -> 0
    (-64, MMAX, 38, 0),      # -0.5 + 2**-32  -> 0 (nearest: not a tie)
    (192, MMAX, 38, 1),      # 1.5 - 3*2**-32 -> 1
    (128, MMAX, 38, 1),      # 1 - 2**-31     -> 1
    (-128, MMAX, 38, -1),    # -1 + 2**-31    -> -1
])
def test_requantize_table(acc, mult, shift, expected):
    y = arith.requantize(np.array([acc], np.int32), mult, shift)
    assert y.dtype == np.int8
    assert int(y[0]) == expected


def test_requantize_zero_point_and_saturation_both_ends():
    acc = np.array([1000, -1000, 500, -500, 508, -512], np.int32)
    # f = 0.25: 250, -250, 125, -125, 127, -128 before the zero point
    assert arith.requantize(acc, M30, 32, z_out=5).tolist() == [127, -128, 127, -120, 127, -123]
    assert arith.requantize(acc, M30, 32, z_out=-3).tolist() == [127, -128, 122, -128, 124, -128]
    # a fused clamp narrows the range: ReLU at z_out = -3 -> lo = -3; ReLU6-like hi = 100
    assert arith.requantize(acc, M30, 32, z_out=-3, lo=-3, hi=100).tolist() == [100, -3, 100, -3, 100, -3]


def test_requantize_int32_extremes_do_not_overflow():
    acc = np.array([2**31 - 1, -2**31], np.int32)
    # f = (2**31-1)/2**62 ~ 2**-31: (2**31-1)**2 / 2**62 = 0.99999999953 -> 1; -2**31*(2**31-1)/2**62 -> -1
    assert arith.requantize(acc, MMAX, 62).tolist() == [1, -1]
    # f = 2**30/2**31 = 0.5 on INT32_MAX: 1073741823.5 -> saturates at 127; INT32_MIN -> -128
    assert arith.requantize(acc, M30, 31).tolist() == [127, -128]
    with pytest.raises(TypeError):
        arith.requantize(np.array([1], np.int64), M30, 31)


@pytest.mark.parametrize("p, shift, expected", [
    # the edges of hwc's shift domain, 1 and 62
    (3, 1, 2), (-3, 1, -1), (5, 1, 3), (-5, 1, -2), (4, 1, 2), (-1, 1, 0), (1, 1, 1),
    # at shift 62 the products stay within |p| <= 2**62 (|acc| <= 2**31, M < 2**31)
    (2**61, 62, 1), (-2**61, 62, 0), (2**61 - 1, 62, 0), (-2**61 - 1, 62, -1), (2**62 - 1, 62, 1),
    (-2**62, 62, -1), (2**62, 62, 1), (3 * 2**60, 62, 1), (-3 * 2**60, 62, -1),
    # shifts 2..31 on a tie p = 2**(s-1) (0.5 -> 1) and -p (-0.5 -> 0)
    *[(2 ** (s - 1), s, 1) for s in range(2, 32)],
    *[(-(2 ** (s - 1)), s, 0) for s in range(2, 32)],
    *[(3 * 2 ** (s - 1), s, 2) for s in range(2, 32)],   # 1.5 -> 2
    *[(-3 * 2 ** (s - 1), s, -1) for s in range(2, 32)],  # -1.5 -> -1
])
def test_rounding_shift_table(p, shift, expected):
    assert int(arith.rounding_shift(np.int64(p), shift)) == expected


@pytest.mark.parametrize("f, expected", [
    (0.5, (M30, 31)), (1.0, (M30, 30)), (0.25, (M30, 32)), (0.75, (3 << 29, 31)),
    (2.0 ** 29, (M30, 1)),             # largest power of two in the domain: shift 1
    (2.0 ** -32, (M30, 62)),           # smallest: shift 62
    (1 - 2.0 ** -33, (M30, 30)),       # the mantissa rounds up to 1.0: renormalized
    (0.1, (1717986918, 34)),           # 0.1 * 2**34 = 1717986918.4
    (0.999999999, (2147483646, 31)),   # 0.999999999 * 2**31 = 2147483645.85
])
def test_quantize_multiplier(f, expected):
    m, s = arith.quantize_multiplier(f)
    assert (m, s) == expected
    assert arith.MULT_MIN <= m <= arith.MULT_MAX and arith.SHIFT_MIN <= s <= arith.SHIFT_MAX
    assert abs(m * 2.0 ** -s / f - 1) <= 2.0 ** -31


@pytest.mark.parametrize("f", [2.0 ** 30, 2.0 ** 31, 2.0 ** 29 * 1.9999999999, 2.0 ** -33, 2.0 ** -40, 0.0, -0.5,
                               math.inf, math.nan])
def test_out_of_range_factors_raise(f):
    with pytest.raises(ValueError, match="requantization factor"):
        arith.quantize_multiplier(f)


def test_add_requantize_hand_computed():
    # s_a = 0.1, s_b = 0.2, s_y = 0.2: fa = 0.5, fb = 1.0 -> Mb = 2**30, shift 30, Ma = 2**29
    ma, mb, shift = arith.quantize_multiplier_pair(0.5, 1.0)
    assert (ma, mb, shift) == (1 << 29, 1 << 30, 30)
    a = np.array([3, -3, 127, -128, 10], np.int8)
    b = np.array([0, 0, 127, -128, -5], np.int8)
    # real sums / 0.2 with z_a = 1, z_b = -1, z_out = 2:
    #   0.5*2 + 1 = 2 -> 4; 0.5*-4 + 1 = -1 -> 1; 63 + 128 -> 127 (sat); -64.5 - 127 -> -128 (sat);
    #   0.5*9 + (-4) = 0.5 -> rounds to 1 -> 3
    y = arith.add_requantize(a, b, 1, -1, ma, mb, shift, 2)
    assert y.tolist() == [4, 1, 127, -128, 3]


def test_quantize_saturates_huge_and_infinite_values():
    # scale 0.02, z 0: 100 / 0.02 = 5000 -> 127; 1e19 / 0.02 = 5e20 and 1e20 / 0.02 = 5e21 are beyond int64
    # (9.2e18), which must not wrap to INT64_MIN: they saturate to 127 like inf; their negatives to -128
    x = np.array([100, 1e19, 1e20, np.inf, -np.inf, -1e20, 0.03, -0.05], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (no numpy RuntimeWarning leaks to the user)
        assert arith.quantize(x, 0.02, 0).tolist() == [127, 127, 127, 127, -128, -128, 2, -2]   # 1.5 -> 2, -2.5 -> -2
        # z = -5: 1e20 -> 127, -1e20 -> -128; 0.03 / 0.02 = 1.5 -> 2 -> -3; -0.05 -> -2 -> -7
        assert arith.quantize(x, 0.02, -5).tolist() == [127, 127, 127, 127, -128, -128, -3, -7]
        # NaN has no code: lo, as the compiled CPU code gives it (runs reject NaN inputs before)
        assert arith.quantize(np.array([np.nan], np.float32), 0.02, 3).tolist() == [-128]
        assert arith.quantize(np.array([3e38, 1e300]), 1e-3, 0).tolist() == [127, 127]   # float32 overflow: inf


def test_choose_qparams_examples():
    s, z = arith.choose_qparams(0.0, 6.0)
    assert (s, z) == (pytest.approx(6 / 255), -128)
    s, z = arith.choose_qparams(-1.0, 3.0)
    assert (s, z) == (pytest.approx(4 / 255), -64)            # round(-128 + 63.75) = -64
    s, z = arith.choose_qparams(2.0, 5.0)                      # widened to [0, 5]: 0 is a code
    assert (s, z) == (pytest.approx(5 / 255), -128)
    s, z = arith.choose_qparams(-3.0, -1.0)                    # widened to [-3, 0]
    assert (s, z) == (pytest.approx(3 / 255), 127)
    assert arith.choose_qparams(0.0, 0.0) == (1.0, 0)
    for lo, hi in ((0, 6), (-1, 3), (-7.3, 0.2)):
        s, z = arith.choose_qparams(lo, hi)
        assert arith.quantize(np.float32(0), s, z) == z          # real 0 is exactly representable
        assert arith.dequantize(np.int8(z), s, z) == 0


def test_weights_symmetric_per_channel():
    w = np.array([[1.0, -0.5, 0.25], [0.0, 0.0, 0.0], [-2.54, 1.27, 0.004]])
    s = arith.weight_scales(w)
    assert s.tolist() == pytest.approx([1 / 127, 2.54 / 127, 2.54 / 127])   # zero channel borrows the max
    q = arith.quantize_weights(w, s)
    assert q.tolist() == [[127, -64, 32], [0, 0, 0], [-127, 64, 0]]         # -63.5 -> -64 (half to even)
    assert arith.weight_scales(w, per_channel=False).tolist() == pytest.approx([2.54 / 127] * 3)
    assert q.min() >= -127


def test_bias_and_clamps():
    codes, sat = arith.quantize_bias(np.array([0.5, -0.25, 1e9]), np.array([0.01, 0.01, 0.01]))
    assert codes.tolist() == [50, -25, 2**31 - 1] and sat == 1
    assert arith.activation_clamp("relu", [], 0.1, -20) == (-20, 127)
    assert arith.activation_clamp("clip", [0.0, 6.0], 0.1, -20) == (-20, 40)
    assert arith.activation_clamp("", [], 0.1, -20) == (-128, 127)
    with pytest.raises(ValueError, match="lookup table"):
        arith.activation_clamp("sigmoid", [], 0.1, 0)


def test_lut_sigmoid_worked_example():
    # the module docstring's example: s_in = 8/255, z_in = 0, s_out = 1/256, z_out = -128
    sig = lambda x: 1 / (1 + np.exp(-x))
    t = arith.make_lut(sig, 8 / 255, 0, 1 / 256, -128)
    assert t.shape == (256,) and t.dtype == np.int8
    assert t[0 + 128] == 0          # sigmoid(0) = 0.5 -> 128 - 128
    assert t[127 + 128] == 123      # sigmoid(3.98) * 256 = 251.3 -> 251 - 128
    assert t[-128 + 128] == -123    # sigmoid(-4.016) * 256 = 4.53 -> 5 - 128
    x = np.array([-128, 0, 127], np.int8)
    assert arith.lut_lookup(x, t).tolist() == [t[0], t[128], t[255]]


def test_quantize_linear_kernel_saturates_and_maps_nan_like_quantize():
    """The reference interpreter's QuantizeLinear (QDQ models) agrees with arith.quantize on huge, infinite and
    NaN values (hand-computed), without numpy's warnings (an undefined NaN cast before)."""
    from hwc.ref.interp import KERNELS

    x = np.array([1.0, np.nan, np.inf, -np.inf, 1e30, -1e30], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (q,) = KERNELS["QuantizeLinear"]({"axis": 1}, x, np.array(0.1, np.float32), np.array(3, np.int8))
        np.testing.assert_array_equal(q, [13, -128, 127, -128, 127, -128])
        np.testing.assert_array_equal(arith.quantize(x, 0.1, 3), q)
