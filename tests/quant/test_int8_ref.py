"""The int8 reference kernels against naive loops over Python integers (exact, independent
of hwc.quant.arith and of numpy's vectorized arithmetic): equality, not tolerance."""

import numpy as np
import pytest

from hwc.ir.graph import Node
from hwc.ir.ops import normalize_attrs
from hwc.ref.interp import run_node


def _rq(acc: int, mult: int, shift: int, z: int, lo: int, hi: int) -> int:
    r = (acc * mult + (1 << (shift - 1))) >> shift     # Python ints: exact floor shift
    return min(max(r + z, lo), hi)


def naive_qconv(x, w, bias, mult, shift, a):
    n_, c_, h_, w_ = x.shape
    m_, cg, kh_, kw_ = w.shape
    g = a["group"]
    (sh, sw), (dh, dw) = a["strides"], a["dilations"]
    pt, pl, pb, pr = a["pads"]
    oh_ = (h_ + pt + pb - (kh_ - 1) * dh - 1) // sh + 1
    ow_ = (w_ + pl + pr - (kw_ - 1) * dw - 1) // sw + 1
    y = np.zeros((n_, m_, oh_, ow_), np.int8)
    for n in range(n_):
        for m in range(m_):
            gi = m // (m_ // g)
            for oh in range(oh_):
                for ow in range(ow_):
                    acc = int(bias[m])
                    for c in range(cg):
                        for kh in range(kh_):
                            for kw in range(kw_):
                                ih, iw = oh * sh - pt + kh * dh, ow * sw - pl + kw * dw
                                if 0 <= ih < h_ and 0 <= iw < w_:
                                    acc += (int(x[n, gi * cg + c, ih, iw]) - a["z_in"]) * int(w[m, c, kh, kw])
                    y[n, m, oh, ow] = _rq(acc, int(mult[m]), int(shift[m]), a["z_out"], a["lo"], a["hi"])
    return y


def _rand(rng, shape, lo=-128, hi=127, dtype=np.int8):
    return rng.integers(lo, hi + 1, shape).astype(dtype)


CONVS = [
    # (x shape, w shape, group, strides, pads, dilations)
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, [1, 1], [1, 1, 1, 1], [1, 1]),
    ((1, 4, 9, 9), (6, 4, 3, 3), 1, [2, 2], [0, 0, 1, 1], [1, 1]),            # strided, asymmetric pads
    ((1, 6, 8, 7), (6, 1, 3, 3), 6, [2, 1], [1, 1, 1, 1], [1, 1]),            # depthwise, strided
    ((1, 4, 8, 8), (8, 2, 3, 2), 2, [1, 2], [2, 1, 0, 1], [2, 1]),            # grouped, dilated
    ((1, 3, 5, 5), (6, 1, 3, 3), 3, [1, 1], [1, 1, 1, 1], [1, 1]),            # depth multiplier 2
    ((1, 8, 4, 4), (5, 8, 1, 1), 1, [1, 1], [0, 0, 0, 0], [1, 1]),            # pointwise
]


@pytest.mark.parametrize("xs, ws, g, st, pads, dil", CONVS)
def test_qconv_matches_naive_loops(xs, ws, g, st, pads, dil):
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x, w = _rand(rng, xs), _rand(rng, ws, -127, 127)
    m = ws[0]
    bias = _rand(rng, (m,), -5000, 5000, np.int32)
    mult = _rand(rng, (m,), 1 << 30, (1 << 31) - 1, np.int32)
    shift = _rand(rng, (m,), 14, 20, np.int32)
    a = normalize_attrs("QConv", {"strides": st, "pads": pads, "dilations": dil, "group": g, "z_in": -7,
                                  "z_out": 3, "lo": -100, "hi": 120})
    got = run_node(Node("QConv", "c", [], [], a), [x, w, bias, mult, shift])[0]
    np.testing.assert_array_equal(got, naive_qconv(x, w, bias, mult, shift, a))


def test_qgemm_matches_naive_loops():
    rng = np.random.default_rng(1)
    x, w = _rand(rng, (3, 40)), _rand(rng, (7, 40), -127, 127)
    bias = _rand(rng, (7,), -9000, 9000, np.int32)
    mult = _rand(rng, (7,), 1 << 30, (1 << 31) - 1, np.int32)
    shift = _rand(rng, (7,), 12, 18, np.int32)
    a = normalize_attrs("QGemm", {"z_in": 12, "z_out": -4})
    got = run_node(Node("QGemm", "g", [], [], a), [x, w, bias, mult, shift])[0]
    want = [[_rq(int(bias[j]) + sum((int(x[i, k]) - 12) * int(w[j, k]) for k in range(40)),
                 int(mult[j]), int(shift[j]), -4, -128, 127) for j in range(7)] for i in range(3)]
    np.testing.assert_array_equal(got, np.array(want, np.int8))


def test_pools_requant_lut_match_naive():
    rng = np.random.default_rng(2)
    x = _rand(rng, (1, 3, 6, 6))
    mult, shift = np.array([1 << 30], np.int32), np.array([33], np.int32)       # 1/8
    a = normalize_attrs("QAvgPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0],
                                     "dilations": [1, 1], "z_in": -20, "z_out": 5})
    got = run_node(Node("QAvgPool", "p", [], [], a), [x, mult, shift])[0]
    want = np.zeros((1, 3, 3, 3), np.int8)
    for c in range(3):
        for i in range(3):
            for j in range(3):
                acc = sum(int(x[0, c, 2 * i + di, 2 * j + dj]) + 20 for di in (0, 1) for dj in (0, 1))
                want[0, c, i, j] = _rq(acc, 1 << 30, 33, 5, -128, 127)
    np.testing.assert_array_equal(got, want)

    a = normalize_attrs("QGlobalAvgPool", {"z_in": 3, "z_out": -1})
    got = run_node(Node("QGlobalAvgPool", "g", [], [], a), [x, mult, shift])[0]
    want = [_rq(sum(int(v) - 3 for v in x[0, c].reshape(-1)), 1 << 30, 33, -1, -128, 127) for c in range(3)]
    np.testing.assert_array_equal(got.reshape(-1), np.array(want, np.int8))

    mult3, shift3 = np.array([1 << 30, 3 << 29, (1 << 31) - 1], np.int32), np.array([31, 31, 30], np.int32)
    a = normalize_attrs("QRequant", {"z_in": 10, "z_out": -3, "lo": -50})
    got = run_node(Node("QRequant", "r", [], [], a), [x, mult3, shift3])[0]
    want = np.array([[[[_rq(int(x[0, c, i, j]) - 10, int(mult3[c]), int(shift3[c]), -3, -50, 127)
                        for j in range(6)] for i in range(6)] for c in range(3)]], np.int8)
    np.testing.assert_array_equal(got, want)

    table = _rand(rng, (256,))
    got = run_node(Node("QLut", "l", [], [], {}), [x, table])[0]
    np.testing.assert_array_equal(got, np.array([table[int(v) + 128] for v in x.reshape(-1)],
                                                np.int8).reshape(x.shape))


def test_accumulator_overflow_is_an_error():
    x = np.full((1, 1, 1, 1), -128, np.int8)
    w = np.full((1, 1, 1, 1), -127, np.int8)
    bias = np.array([2**31 - 1], np.int32)
    a = normalize_attrs("QConv", {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "z_in": 127})
    with pytest.raises(OverflowError, match="int32"):
        run_node(Node("QConv", "c", [], [], a), [x, w, bias, np.array([1 << 30], np.int32),
                                                  np.array([31], np.int32)])
