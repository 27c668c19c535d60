"""The float reference interpreter: numpy, one kernel per IR op, written for clarity.

This is the oracle every later stage is tested against. Matrix products and
convolutions accumulate in float64 and round once to float32, so the reference is at
least as accurate as any float32 backend it checks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from hwc.ir.graph import Graph, Node
from hwc.ir.ops import slice_ranges

KERNELS: dict[str, Callable[..., list[np.ndarray]]] = {}


def kernel(*names):
    def deco(fn):
        for n in names:
            KERNELS[n] = fn
        return fn
    return deco


def run_graph(g: Graph, feeds: dict[str, np.ndarray], *, keep: bool = False) -> dict[str, np.ndarray]:
    """Evaluate `g` on `feeds` (one array per graph input, exact IR types).

    Returns the graph outputs, or every value when `keep` is True.
    """
    env: dict[str, np.ndarray] = {}
    for v in g.values.values():
        if v.is_const:
            env[v.name] = v.data
    for name in g.inputs:
        env[name] = feeds[name]
    for n in g.nodes:
        outs = run_node(n, [env[i] if i else None for i in n.inputs])
        for o, y in zip(n.outputs, outs):
            if o:
                t = g.values[o].type
                y = np.asarray(y)
                assert y.shape == t.shape, f"{n.op} {n.name}: kernel gave {y.shape}, IR says {t}"
                env[o] = y.astype(t.np_dtype, copy=False)
    if keep:
        return env
    return {o: env[o] for o in g.outputs}


def run_node(n: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    fn = KERNELS.get(n.op)
    if fn is None:
        raise NotImplementedError(f"reference interpreter has no kernel for {n.op}")
    return fn(n.attrs, *inputs)


# ---- activations (also used fused into Conv/Gemm/MatMul) -----------------------------
def _sigmoid(x):
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def apply_activation(x: np.ndarray, act: str, args) -> np.ndarray:
    if act == "":
        return x
    if act == "relu":
        return np.maximum(x, 0)
    if act == "clip":
        return np.clip(x, args[0], args[1])
    if act == "leakyrelu":
        return np.where(x >= 0, x, x * args[0])
    if act == "hardsigmoid":
        return np.clip(x * args[0] + args[1], 0, 1)
    if act == "hardswish":
        return x * np.clip(x / 6 + 0.5, 0, 1)
    if act == "sigmoid":
        return _sigmoid(x)
    if act == "tanh":
        return np.tanh(x)
    raise ValueError(f"unknown activation {act!r}")


def _f(x):
    return np.asarray(x, dtype=np.float64)


@kernel("Relu")
def _relu(a, x):
    return [np.maximum(x, np.zeros((), x.dtype))]


@kernel("LeakyRelu")
def _leaky(a, x):
    return [apply_activation(_f(x), "leakyrelu", [a["alpha"]])]


@kernel("Clip")
def _clip(a, x):
    lo, hi = a["min"], a["max"]
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        lo = info.min if lo < info.min else math.ceil(lo)
        hi = info.max if hi > info.max else math.floor(hi)
        return [np.clip(x, lo, hi).astype(x.dtype)]
    return [np.clip(x, np.float32(lo), np.float32(hi))]


@kernel("Sigmoid")
def _sig(a, x):
    return [_sigmoid(x)]


@kernel("HardSigmoid")
def _hsig(a, x):
    return [apply_activation(_f(x), "hardsigmoid", [a["alpha"], a["beta"]])]


@kernel("HardSwish")
def _hswish(a, x):
    return [apply_activation(_f(x), "hardswish", [])]


@kernel("Elu")
def _elu(a, x):
    x = _f(x)
    return [np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0)))]


@kernel("Celu")
def _celu(a, x):
    x, al = _f(x), a["alpha"]
    return [np.maximum(x, 0) + np.minimum(0, al * np.expm1(np.minimum(x, 0) / al))]


@kernel("Selu")
def _selu(a, x):
    x = _f(x)
    return [a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0)))]


@kernel("ThresholdedRelu")
def _trelu(a, x):
    return [np.where(x > a["alpha"], x, 0)]


@kernel("Softplus")
def _softplus(a, x):
    x = _f(x)
    return [np.logaddexp(0, x)]


@kernel("Softsign")
def _softsign(a, x):
    x = _f(x)
    return [x / (1 + np.abs(x))]


_UNARY_NUMPY = {"Tanh": np.tanh, "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log,
                "Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil,
                "Sign": np.sign}
for _name, _fn in _UNARY_NUMPY.items():
    def _make(fn):
        def k(a, x):
            with np.errstate(all="ignore"):
                return [fn(x)]
        return k
    KERNELS[_name] = _make(_fn)


@kernel("Identity")
def _identity(a, x):
    return [x]


@kernel("Cast")
def _cast(a, x):
    from hwc.ir.types import DTYPES

    return [x.astype(DTYPES[a["to"]])]


# ---- binary / variadic elementwise ---------------------------------------------------
def _int_div(x, y):
    # ONNX integer Div truncates toward zero (C semantics).
    q = np.abs(x) // np.abs(y)
    return (np.sign(x) * np.sign(y) * q).astype(x.dtype)


def _binary(fn, int_fn=None):
    def k(a, x, y):
        with np.errstate(all="ignore"):
            if int_fn is not None and np.issubdtype(x.dtype, np.integer):
                return [int_fn(x, y)]
            return [fn(x, y)]
    return k


KERNELS["Add"] = _binary(np.add)
KERNELS["Sub"] = _binary(np.subtract)
KERNELS["Mul"] = _binary(np.multiply)
KERNELS["Div"] = _binary(np.divide, _int_div)
KERNELS["Pow"] = _binary(lambda x, y: np.power(_f(x), _f(y)))


@kernel("PRelu")
def _prelu(a, x, slope):
    return [np.where(x < 0, x * slope, x)]


@kernel("Max")
def _max(a, *xs):
    return [np.maximum.reduce(np.broadcast_arrays(*xs))]


@kernel("Min")
def _min(a, *xs):
    return [np.minimum.reduce(np.broadcast_arrays(*xs))]


@kernel("Sum")
def _sum(a, *xs):
    return [np.add.reduce(np.broadcast_arrays(*[_f(x) for x in xs]))]


@kernel("Mean")
def _mean(a, *xs):
    return [np.add.reduce(np.broadcast_arrays(*[_f(x) for x in xs])) / len(xs)]


@kernel("Softmax")
def _softmax(a, x):
    x = _f(x)
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return [e / e.sum(axis=a["axis"], keepdims=True)]


@kernel("LogSoftmax")
def _logsoftmax(a, x):
    x = _f(x)
    m = x.max(axis=a["axis"], keepdims=True)
    return [x - m - np.log(np.exp(x - m).sum(axis=a["axis"], keepdims=True))]


# ---- matrix products and convolution -------------------------------------------------
def _acc_dtype(x):
    return np.float64 if np.issubdtype(x.dtype, np.floating) else np.int64


@kernel("MatMul")
def _matmul(a, x, y):
    dt = _acc_dtype(x)
    out = np.matmul(x.astype(dt), y.astype(dt))
    return [apply_activation(out, a["act"], a["act_args"])]


@kernel("Gemm")
def _gemm(a, A, B, C=None):
    dt = _acc_dtype(A)
    A = A.astype(dt).T if a["transA"] else A.astype(dt)
    B = B.astype(dt).T if a["transB"] else B.astype(dt)
    y = a["alpha"] * (A @ B)
    if C is not None:
        y = y + a["beta"] * C.astype(dt)
    return [apply_activation(y, a["act"], a["act_args"])]


def _windows(x: np.ndarray, kernel_shape, strides, dilations, out_shape):
    """Yield (kernel index, strided view of x) for every kernel position: the view holds,
    for every output position, the input element under that kernel tap."""
    nd = len(kernel_shape)
    for k in itertools.product(*(range(s) for s in kernel_shape)):
        idx = tuple(
            slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (out_shape[i] - 1) + 1, strides[i])
            for i in range(nd)
        )
        yield k, x[(Ellipsis,) + idx]


def _pad_spatial(x, pads, value):
    nd = len(pads) // 2
    width = [(0, 0)] * (x.ndim - nd) + [(pads[i], pads[i + nd]) for i in range(nd)]
    return np.pad(x, width, mode="constant", constant_values=value)


@kernel("Conv")
def _conv(a, x, w, b=None):
    g = a["group"]
    n, c = x.shape[:2]
    m = w.shape[0]
    xp = _pad_spatial(x.astype(np.float64), a["pads"], 0.0)
    from hwc.ir.ops import conv_out_dim

    nd = w.ndim - 2
    out_sp = tuple(conv_out_dim(x.shape[2 + i], w.shape[2 + i], a["strides"][i], a["dilations"][i],
                                a["pads"][i], a["pads"][i + nd]) for i in range(nd))
    xg = xp.reshape((n, g, c // g) + xp.shape[2:])
    wg = w.astype(np.float64).reshape((g, m // g, c // g) + w.shape[2:])
    y = np.zeros((n, g, m // g) + out_sp)
    for k, view in _windows(xg, w.shape[2:], a["strides"], a["dilations"], out_sp):
        # view: (n, g, c/g, *out_sp); weights at tap k: (g, m/g, c/g)
        y += np.einsum("ngc...,gmc->ngm...", view, wg[(Ellipsis,) + k])
    y = y.reshape((n, m) + out_sp)
    if b is not None:
        y += b.astype(np.float64).reshape((1, m) + (1,) * nd)
    return [apply_activation(y, a["act"], a["act_args"])]


@kernel("MaxPool")
def _maxpool(a, x):
    from hwc.ir.ops import conv_out_dim

    k, nd = a["kernel_shape"], len(a["kernel_shape"])
    out_sp = tuple(conv_out_dim(x.shape[2 + i], k[i], a["strides"][i], a["dilations"][i], a["pads"][i],
                                a["pads"][i + nd], bool(a["ceil_mode"])) for i in range(nd))
    fill = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp = _pad_ceil(x, a, out_sp, fill)
    y = None
    for _, view in _windows(xp, k, a["strides"], a["dilations"], out_sp):
        y = view.copy() if y is None else np.maximum(y, view)
    return [y]


def _pad_ceil(x, a, out_sp, fill):
    """Pad with the declared pads, plus whatever extra end padding ceil_mode windows need."""
    k, nd = a["kernel_shape"], len(a["kernel_shape"])
    pads = list(a["pads"])
    for i in range(nd):
        need = (out_sp[i] - 1) * a["strides"][i] + (k[i] - 1) * a["dilations"][i] + 1
        have = x.shape[2 + i] + pads[i] + pads[i + nd]
        pads[i + nd] += max(0, need - have)
    return _pad_spatial(x, pads, fill)


@kernel("AveragePool")
def _avgpool(a, x):
    from hwc.ir.ops import conv_out_dim

    k, nd = a["kernel_shape"], len(a["kernel_shape"])
    out_sp = tuple(conv_out_dim(x.shape[2 + i], k[i], a["strides"][i], a["dilations"][i], a["pads"][i],
                                a["pads"][i + nd], bool(a["ceil_mode"])) for i in range(nd))
    xp = _pad_ceil(x.astype(np.float64), a, out_sp, 0.0)
    # What counts toward the divisor: real input (1) everywhere; declared padding too when
    # count_include_pad; the extra ceil_mode padding never.
    ones = np.ones(x.shape[2:])
    inner = _pad_spatial(ones, a["pads"], 1.0 if a["count_include_pad"] else 0.0)
    extra = [max(0, xp.shape[2 + i] - inner.shape[i]) for i in range(nd)]
    mask = np.pad(inner, [(0, e) for e in extra], constant_values=0.0)
    total = np.zeros(x.shape[:2] + out_sp)
    count = np.zeros(out_sp)
    for (_, view), (_, mview) in zip(_windows(xp, k, a["strides"], a["dilations"], out_sp),
                                     _windows(mask, k, a["strides"], a["dilations"], out_sp)):
        total += view
        count += mview
    return [total / count]


@kernel("GlobalAveragePool")
def _gap(a, x):
    axes = tuple(range(2, x.ndim))
    return [_f(x).mean(axis=axes, keepdims=True)]


@kernel("GlobalMaxPool")
def _gmp(a, x):
    axes = tuple(range(2, x.ndim))
    return [x.max(axis=axes, keepdims=True)]


@kernel("BatchNormalization")
def _bn(a, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    r = lambda p: _f(p).reshape(shape)
    return [(_f(x) - r(mean)) / np.sqrt(r(var) + a["epsilon"]) * r(scale) + r(bias)]


# ---- shape ops ------------------------------------------------------------------------
@kernel("Reshape")
def _reshape(a, x):
    return [x.reshape(a["shape"])]


@kernel("Transpose")
def _transpose(a, x):
    return [np.transpose(x, a["perm"])]


@kernel("Expand")
def _expand(a, x):
    return [np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(a["shape"]))).copy()]


@kernel("Concat")
def _concat(a, *xs):
    return [np.concatenate(xs, axis=a["axis"])]


@kernel("Split")
def _split(a, x):
    cuts = np.cumsum(a["split"])[:-1]
    return np.split(x, cuts, axis=a["axis"])


@kernel("Slice")
def _slice(a, x):
    idx = tuple(slice(r.start, None if r.stop < 0 else r.stop, r.step) for r in slice_ranges(a))
    return [x[idx]]


@kernel("Pad")
def _pad(a, x):
    nd = x.ndim
    p = a["pads"]
    # Negative pads crop.
    crop = tuple(slice(max(0, -p[i]), x.shape[i] - max(0, -p[i + nd])) for i in range(nd))
    x = x[crop]
    width = [(max(0, p[i]), max(0, p[i + nd])) for i in range(nd)]
    mode = a["mode"]
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=np.array(a["value"]).astype(x.dtype))]
    return [np.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


@kernel("Gather")
def _gather(a, x, idx):
    ax = a["axis"]
    idx = np.where(idx < 0, idx + x.shape[ax], idx)
    return [np.take(x, idx, axis=ax)]


def _empty_reduction(fn, dtype: np.dtype):
    """ReduceMax/ReduceMin of an empty set: -inf/+inf, or the dtype's min/max (bool: False/True)."""
    big = fn is np.max
    if np.issubdtype(dtype, np.floating):
        return -np.inf if big else np.inf
    if dtype == np.bool_:
        return not big
    info = np.iinfo(dtype)
    return info.min if big else info.max


def _reducer(fn):
    def k(a, x):
        axes = tuple(a["axes"])
        if x.size == 0 and fn in (np.max, np.min):
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
            y = np.full(shape, _empty_reduction(fn, x.dtype), dtype=x.dtype)
            return [y if a["keepdims"] else y.reshape([d for i, d in enumerate(x.shape) if i not in axes])]
        src = _f(x) if fn in (np.mean, np.sum) and np.issubdtype(x.dtype, np.floating) else x
        return [fn(src, axis=axes, keepdims=bool(a["keepdims"]))]
    return k


KERNELS["ReduceMean"] = _reducer(np.mean)
KERNELS["ReduceMax"] = _reducer(np.max)
KERNELS["ReduceMin"] = _reducer(np.min)
KERNELS["ReduceSum"] = _reducer(np.sum)


# ---- quantization ---------------------------------------------------------------------
def _qparam(p, x, axis):
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    shape = [1] * x.ndim
    shape[axis] = -1
    return p.reshape(shape)


@kernel("QuantizeLinear")
def _quantize(a, x, scale, zp):
    s = _qparam(scale, x, a["axis"]).astype(np.float32)
    z = _qparam(zp, x, a["axis"]).astype(np.int64)
    info = np.iinfo(zp.dtype)
    # Divide in float32 (the scale's precision), round half to even, then add the zero
    # point and saturate in float64, so out-of-range values (even inf) saturate.
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.rint(x.astype(np.float32) / s).astype(np.float64) + z
    q = np.where(np.isnan(q), info.min, q)   # (NaN: the low end, as hwc.quant.arith.quantize; no undefined cast)
    return [np.clip(q, info.min, info.max).astype(zp.dtype)]


@kernel("DequantizeLinear")
def _dequantize(a, x, scale, zp):
    s = _qparam(scale, x, a["axis"]).astype(np.float32)
    z = _qparam(zp, x, a["axis"]).astype(np.int64)
    return [((x.astype(np.int64) - z).astype(np.float32) * s).astype(np.float32)]


# ---- fused elementwise ----------------------------------------------------------------
@kernel("FusedElementwise")
def _fused_elementwise(a, *xs):
    """Run the program one instruction at a time, each the IR op's own kernel rounded to
    float32: the same numbers as the unfused chain."""
    from hwc.ir.ops import OPS, normalize_attrs, parse_program

    regs = [np.asarray(x, dtype=np.float32) for x in xs]
    for ins in parse_program(a["program"], len(xs)):
        args = [regs[r] if isinstance(r, int) else np.float32(r) for r in ins.args]
        attrs = normalize_attrs(ins.op, dict(zip(OPS[ins.op].attrs, ins.params)))
        regs.append(np.asarray(KERNELS[ins.op](attrs, *args)[0]).astype(np.float32))
    return [regs[-1]]
