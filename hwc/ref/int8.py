"""The int8 reference interpreter: numpy kernels of the quantized ops (hwc.ir.ops, end).

Registered into `hwc.ref.interp.KERNELS`, so `run_graph` runs an int8 graph (and mixed
graphs, where some nodes stayed float) unchanged. The integer semantics are those of
`hwc.quant.arith` and nothing else: every kernel computes an int32 accumulator and hands
it to `arith.requantize` / `arith.add_requantize` / `arith.lut_lookup`.

Exactness: the sums of products are computed with float64 matrix products (BLAS) and then
converted to int64. Every operand is an integer of magnitude <= 255 * 128 per product and
every partial sum stays far below 2**53, so each float64 operation is exact whatever the
summation order, and the result equals the integer sum bit for bit. The accumulator is
then checked against the int32 range: an accumulator that does not fit int32 is a
quantizer bug (it keeps K * 255 * 127 + |bias| < 2**31), so the reference raises
OverflowError instead of silently wrapping.

Data-movement ops on int8 tensors (Reshape, Transpose, Concat, Split, Slice, MaxPool,
Identity) use the float interpreter's kernels, which are dtype-generic (MaxPool pads with
-128, the smallest code, so padding never wins a max).
"""

from __future__ import annotations

import numpy as np

from hwc.ir.ops import conv_out_dim
from hwc.quant import arith
from hwc.ref.interp import kernel


def _check_int8(op: str, **arrays) -> None:
    for name, a in arrays.items():
        if a.dtype != np.int8:
            raise TypeError(f"{op}: {name} must be int8, not {a.dtype}")


def to_acc32(acc: np.ndarray, op: str) -> np.ndarray:
    """int64 (or exact float64) sums -> int32 accumulators; raises OverflowError if one does not fit."""
    acc = np.asarray(acc)
    if acc.dtype.kind == "f":
        acc = np.rint(acc).astype(np.int64)
    if acc.size and (acc.min() < arith.INT32_MIN or acc.max() > arith.INT32_MAX):
        raise OverflowError(f"{op}: accumulator outside the int32 range "
                            f"[{acc.min()}, {acc.max()}]: the quantized graph is malformed")
    return acc.astype(np.int32)


def _per_channel(p: np.ndarray, ndim: int, axis: int = 1) -> np.ndarray:
    """A requantization parameter of shape [1] or [C], shaped to broadcast along `axis`."""
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return p.reshape(shape)


def _out_spatial(x_shape, kernel_shape, a, ceil_mode=False):
    nd = len(kernel_shape)
    return tuple(conv_out_dim(x_shape[2 + i], kernel_shape[i], a["strides"][i], a["dilations"][i],
                              a["pads"][i], a["pads"][i + nd], ceil_mode) for i in range(nd))


def _patches(xs: np.ndarray, kernel_shape, a, out_sp) -> np.ndarray:
    """[N, C, *out_sp] windows -> array [N, C, prod(kernel), *out_sp] of the zero-padded input."""
    nd = len(kernel_shape)
    pads = list(a["pads"])
    for i in range(nd):  # extra end padding for ceil_mode windows (zero: contributes nothing)
        need = (out_sp[i] - 1) * a["strides"][i] + (kernel_shape[i] - 1) * a["dilations"][i] + 1
        pads[i + nd] += max(0, need - (xs.shape[2 + i] + pads[i] + pads[i + nd]))
    width = [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)]
    xp = np.pad(xs, width)
    taps = []
    for k in np.ndindex(*kernel_shape):
        idx = tuple(slice(k[i] * a["dilations"][i],
                          k[i] * a["dilations"][i] + a["strides"][i] * (out_sp[i] - 1) + 1,
                          a["strides"][i]) for i in range(nd))
        taps.append(xp[(Ellipsis,) + idx])
    return np.stack(taps, axis=2)


def conv_accumulate(x: np.ndarray, w: np.ndarray, bias: np.ndarray, z_in: int, a: dict) -> np.ndarray:
    """int32 accumulators of QConv: conv(x - z_in, w) + bias, padding contributing 0."""
    n, c = x.shape[:2]
    m, g = w.shape[0], a["group"]
    out_sp = _out_spatial(x.shape, w.shape[2:], a)
    xs = x.astype(np.float64) - z_in
    cols = _patches(xs, w.shape[2:], a, out_sp)          # [N, C, T, *out]
    t = cols.shape[2]
    p = int(np.prod(out_sp))
    cols = cols.reshape(n, g, (c // g) * t, p)            # [N, g, Cg*T, P]
    wg = w.astype(np.float64).reshape(g, m // g, (c // g) * t)
    if g == 1:
        acc = np.matmul(wg[0], cols[:, 0])[:, None]       # [N, 1, M, P]
    elif m == g and c == g:                               # depthwise: one filter per channel
        acc = np.einsum("ngkp,gk->ngp", cols, wg[:, 0])[:, :, None]
    else:
        acc = np.matmul(wg, cols)                         # [N, g, M/g, P]
    acc = acc.reshape((n, m) + out_sp) + bias.astype(np.float64).reshape((1, m) + (1,) * len(out_sp))
    return to_acc32(acc, "QConv")


@kernel("QConv")
def _qconv(a, x, w, bias, mult, shift, mult_neg=None):
    _check_int8("QConv", x=x, w=w)
    acc = conv_accumulate(x, w, bias, a["z_in"], a)
    return [arith.requantize(acc, _per_channel(mult, acc.ndim), _per_channel(shift, acc.ndim),
                             a["z_out"], a["lo"], a["hi"],
                             None if mult_neg is None else _per_channel(mult_neg, acc.ndim))]


def gemm_accumulate(x: np.ndarray, w: np.ndarray, bias: np.ndarray, z_in: int) -> np.ndarray:
    """int32 accumulators of QGemm: (x - z_in) @ w.T + bias, w stored [N, K]."""
    acc = (x.astype(np.float64) - z_in) @ w.astype(np.float64).T + bias.astype(np.float64)
    return to_acc32(acc, "QGemm")


@kernel("QGemm")
def _qgemm(a, x, w, bias, mult, shift, mult_neg=None):
    _check_int8("QGemm", x=x, w=w)
    acc = gemm_accumulate(x, w, bias, a["z_in"])
    return [arith.requantize(acc, _per_channel(mult, 2), _per_channel(shift, 2), a["z_out"], a["lo"], a["hi"],
                             None if mult_neg is None else _per_channel(mult_neg, 2))]


@kernel("QAdd")
def _qadd(a, x, y):
    _check_int8("QAdd", a=x, b=y)
    return [arith.add_requantize(x, y, a["z_a"], a["z_b"], a["mult_a"], a["mult_b"], a["shift"],
                                 a["z_out"], a["lo"], a["hi"])]


@kernel("QAvgPool")
def _qavgpool(a, x, mult, shift):
    _check_int8("QAvgPool", x=x)
    k = a["kernel_shape"]
    out_sp = _out_spatial(x.shape, k, a, bool(a["ceil_mode"]))
    acc = _patches(x.astype(np.int64) - a["z_in"], k, a, out_sp).sum(axis=2)
    acc = to_acc32(acc, "QAvgPool")
    return [arith.requantize(acc, mult.reshape(()), shift.reshape(()), a["z_out"], a["lo"], a["hi"])]


@kernel("QGlobalAvgPool")
def _qgap(a, x, mult, shift):
    _check_int8("QGlobalAvgPool", x=x)
    axes = tuple(range(2, x.ndim))
    acc = to_acc32((x.astype(np.int64) - a["z_in"]).sum(axis=axes, keepdims=True), "QGlobalAvgPool")
    return [arith.requantize(acc, mult.reshape(()), shift.reshape(()), a["z_out"], a["lo"], a["hi"])]


@kernel("QRequant")
def _qrequant(a, x, mult, shift):
    _check_int8("QRequant", x=x)
    acc = (x.astype(np.int32) - np.int32(a["z_in"])).astype(np.int32)
    return [arith.requantize(acc, _per_channel(mult, x.ndim), _per_channel(shift, x.ndim),
                             a["z_out"], a["lo"], a["hi"])]


@kernel("QLut")
def _qlut(a, x, table):
    return [arith.lut_lookup(x, table)]


@kernel("Quantize")
def _quantize(a, x):
    return [arith.quantize(x, a["scale"], a["zero_point"])]


@kernel("Dequantize")
def _dequantize(a, x):
    _check_int8("Dequantize", x=x)
    return [arith.dequantize(x, a["scale"], a["zero_point"])]
