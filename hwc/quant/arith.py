"""hwc's integer arithmetic, defined once. The int8 reference interpreter, the CPU int8
code, the Python tile model and the tile's RTL all implement exactly these functions, so
all four produce identical bits (ARCHITECTURE.md, "the bit-exact chain").

Number formats
--------------
- Activations: int8, per-tensor, *asymmetric*: real = s * (q - z), z in [-128, 127].
  A tensor that follows a ReLU gets the range [0, max] and z = -128, so all 256 codes
  cover the useful range (symmetric would waste the sign bit). On the tile the zero
  point costs nothing in the MAC array: sum_k w*(x - z) = sum_k w*x - z*sum_k w, and the
  second term is folded into the bias at compile time; padding is filled with z.
- Weights: int8, symmetric (z = 0), one scale per output channel, codes in [-127, 127]
  (-128 is never used, so negating a weight cannot overflow).
- Bias: int32 with scale s_x * s_w[c] and zero point 0. Accumulators: int32.

Requantization (`requantize`)
-----------------------------
The real factor f = s_in / s_out (for a conv: s_x * s_w[c] / s_y) is written as
f ~= M * 2**-shift with an int32 multiplier M in [2**30, 2**31) and 1 <= shift <= 62
(`quantize_multiplier`). Then, for an int32 accumulator a:

    p = a * M                         (exact, int64: |p| < 2**62)
    r = (p + 2**(shift - 1)) >> shift (arithmetic shift = floor: rounds half toward +inf)
    y = clamp(r + z_out, lo, hi)      (lo/hi: the int8 range, narrowed by a fused activation)

Rounding is "half toward +infinity" for both signs: 2.5 -> 3, -2.5 -> -2, -2.6 -> -3.
It is one adder and a shift in hardware and has no sign-dependent case.

Worked examples (M = 2**30 and shift = 32, i.e. f = 2**30 / 2**32 = 0.25):
    a = 10  -> p = 10 * 2**30,  r = floor(2.5 + 0.5)  = 3
    a = -10 -> p = -10 * 2**30, r = floor(-2.5 + 0.5) = -2
    a = -11 -> r = floor(-2.75 + 0.5) = -3;   a = 1000, z_out = 5 -> r = 250, y = clamp(255) = 127

Fused activations are a clamp of the quantized output: ReLU is lo = z_out (real 0),
ReLU6 is hi = min(127, z_out + round(6 / s_out)). A fused LeakyReLU / PReLU of slope alpha is a
second multiplier for the negative accumulators (`requantize(..., mult_neg=)`, `leaky_params`): the
multiplier is M_neg where a < 0, M elsewhere, both on one shift, so y is still rounded once.
Example: M = 2**30, M_neg = 2**30 / 10 rounded = 107374182, shift = 32 (f = 0.25, alpha = 0.1):
a = -100 -> p = -100 * 107374182, r = floor(-2.4999999 + 0.5) = -2 (float: -2.5 -> -2).

Residual Add (`add_requantize`): both inputs are brought to the output scale in one
step with a shared shift, so there is a single rounding:

    y = clamp(z_y + ((Ma*(a - z_a) + Mb*(b - z_b) + 2**(s-1)) >> s), lo, hi)

with Ma/2**s ~= s_a/s_y and Mb/2**s ~= s_b/s_y, Ma, Mb int32 (`quantize_multiplier_pair`).

Compile-time helpers (what the quantizer uses to *choose* the integers above)
--------------------------------------------------------------------------
These run in float at build time; their results are integer constants of the int8 graph,
so they never need to be reproduced by a backend.

- `choose_qparams(lo, hi)`: the range is first widened to contain 0 (so real 0, the value
  of padding and of a ReLU's clamp, is exactly a code), then s = (hi - lo) / 255 and
  z = round(-128 - lo / s) clipped to [-128, 127]. Example: [0, 6] -> s = 6/255 =
  0.023529, z = -128 (a ReLU6 output uses all 256 codes); [-1, 3] -> s = 4/255 = 0.015686,
  z = round(-128 + 63.75) = -64.
- `weight_scales(w, per_channel)`: s_w[c] = max|w[c]| / 127 (symmetric, codes in
  [-127, 127]); an all-zero channel borrows the largest scale of the layer.
  `quantize_weights`: round half to even, clip to [-127, 127].
- `quantize_bias(b, s)`: int32 codes rint(b / s) with s = s_x * s_w[c], saturated to the
  int32 range (the count of saturated entries is returned so the quantizer can report it).
- Requantization factors are computed in float64 from the float32 scales:
  f[c] = s_x * s_w[c] / s_y, then `quantize_multiplier` per channel (`requant_params`).
  The multiplier keeps 31 significant bits, so |M * 2**-shift / f - 1| <= 2**-31.
- Fused activations become a clamp of the output codes (`activation_clamp`): real bound a
  -> code z + rint(a / s), intersected with [-128, 127]. ReLU on a range that starts at 0
  gives lo = z = -128: the clamp is free and the ReLU vanishes.
- Lookup tables (`make_lut`) for Sigmoid, Tanh, HardSwish, LeakyRelu and other unary
  functions: entry i (input code q = i - 128) is quantize(fn(s_in * (q - z_in)), s_out,
  z_out), i.e. the float function applied to the exact real value of every input code and
  rounded once (half to even). The table is exact by construction -- an int8 input has
  only 256 values -- so a LUT op adds no error beyond the output rounding. Example: Sigmoid
  with s_in = 8/255, z_in = 0 and s_out = 1/256, z_out = -128: q = 0 -> x = 0 ->
  0.5 * 256 = 128 -> code 0; q = 127 -> x = 3.98 -> 0.9817 * 256 = 251.3 -> code 123.
- Average pooling folds 1/window into the factor: f = s_in / (s_out * kh * kw).
"""

from __future__ import annotations

import math

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
WEIGHT_MAX = 127
MULT_MIN, MULT_MAX = 1 << 30, (1 << 31) - 1
SHIFT_MIN, SHIFT_MAX = 1, 62


def quantize_multiplier(f: float) -> tuple[int, int]:
    """(M, shift) with M in [2**30, 2**31) and M * 2**-shift closest to f (> 0).

    Raises ValueError when f cannot be represented (f <= 0, or the shift would leave
    [1, 62]: f >= 2**31 or f < 2**-32).
    """
    if not (f > 0 and math.isfinite(f)):
        raise ValueError(f"requantization factor must be positive and finite, not {f}")
    mant, exp = math.frexp(f)  # f = mant * 2**exp, mant in [0.5, 1)
    m = round(mant * (1 << 31))
    if m == 1 << 31:  # mantissa rounded up to 1.0
        m //= 2
        exp += 1
    shift = 31 - exp
    if not SHIFT_MIN <= shift <= SHIFT_MAX:
        raise ValueError(f"requantization factor {f:g} is out of range (shift {shift} not in "
                         f"[{SHIFT_MIN}, {SHIFT_MAX}])")
    return int(m), int(shift)


def rounding_shift(p: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """floor((p + 2**(shift-1)) / 2**shift) on int64: round half toward +infinity."""
    p = np.asarray(p, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    return (p + (np.int64(1) << (shift - 1))) >> shift


def requantize(acc, mult, shift, z_out: int = 0, lo: int = INT8_MIN, hi: int = INT8_MAX,
               mult_neg=None) -> np.ndarray:
    """int32 accumulators -> int8. `mult`/`shift` broadcast against `acc` (per channel). `mult_neg` (a fused
    LeakyReLU or PReLU, `leaky_params`): the multiplier of the negative accumulators instead of `mult`."""
    acc = np.asarray(acc)
    if acc.dtype != np.int32:
        raise TypeError(f"accumulators must be int32, not {acc.dtype}")
    m = np.asarray(mult, dtype=np.int64)
    if mult_neg is not None:
        m = np.where(acc < 0, np.asarray(mult_neg, dtype=np.int64), m)
    p = acc.astype(np.int64) * m
    r = rounding_shift(p, shift) + np.int64(z_out)
    return np.clip(r, lo, hi).astype(np.int8)


def quantize_multiplier_pair(fa: float, fb: float) -> tuple[int, int, int]:
    """(Ma, Mb, shift) with Ma/2**shift ~= fa and Mb/2**shift ~= fb, sharing one shift.

    The larger factor gets a multiplier in [2**30, 2**31); the smaller one is rounded on
    the same shift.
    """
    big = max(fa, fb)
    m, shift = quantize_multiplier(big)
    ma = round(fa * 2.0 ** shift)
    mb = round(fb * 2.0 ** shift)
    return int(ma), int(mb), shift


def add_requantize(a, b, za: int, zb: int, ma: int, mb: int, shift: int, z_out: int,
                   lo: int = INT8_MIN, hi: int = INT8_MAX) -> np.ndarray:
    """int8 + int8 -> int8 with rescaling to the output scale and a single rounding."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError("add_requantize takes int8 operands")
    p = (a.astype(np.int64) - za) * np.int64(ma) + (b.astype(np.int64) - zb) * np.int64(mb)
    r = rounding_shift(p, shift) + np.int64(z_out)
    return np.clip(r, lo, hi).astype(np.int8)


def quantize(x: np.ndarray, scale: float, zero_point: int, lo: int = INT8_MIN, hi: int = INT8_MAX) -> np.ndarray:
    """float -> int8: round half to even (numpy's rint, as ONNX QuantizeLinear), saturate.

    The saturation happens in float, before the integer cast: a quotient beyond the int64
    range (|x / scale| > 9.2e18, or inf) would wrap to INT64_MIN and saturate to lo even
    when positive. +inf and huge values give hi, -inf and huge negative values lo, and NaN
    gives lo: what the compiled CPU code does (hwc.backends.cpu.kernels.int8._quantize).
    (A run rejects NaN in a model input before that, on every target: `build.check_quantized_inputs`.)
    """
    zero_point = np.asarray(zero_point, dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):   # (huge / scale -> inf: saturated below)
        r = np.rint(np.asarray(x, dtype=np.float32) / np.float32(scale))
    r = np.clip(r, lo - zero_point, hi - zero_point)
    r = np.where(np.isnan(r), lo - zero_point, r)
    return (r.astype(np.int64) + zero_point).astype(np.int8)


def dequantize(q: np.ndarray, scale, zero_point) -> np.ndarray:
    return ((np.asarray(q).astype(np.int32) - np.asarray(zero_point, np.int32)).astype(np.float32)
            * np.asarray(scale, np.float32))


# ---- compile-time helpers: choosing the integers (see the module docstring) -------------
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
#: Smallest scale the quantizer hands out; keeps every factor inside quantize_multiplier's domain.
MIN_SCALE = 2.0 ** -24


def choose_qparams(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero_point) for the real range [lo, hi] widened to contain 0.

    The scale is rounded to float32 (the precision it is stored in); a range of width 0
    gets scale 1. Examples: (0, 6) -> (0.023529, -128); (-1, 3) -> (0.015686, -64).
    """
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"cannot quantize the range [{lo}, {hi}]: it is not finite")
    if hi - lo <= 0:
        return 1.0, 0
    scale = float(np.float32(max((hi - lo) / 255.0, MIN_SCALE)))
    zp = int(np.clip(round(INT8_MIN - lo / scale), INT8_MIN, INT8_MAX))
    return scale, zp


def weight_scales(w: np.ndarray, per_channel: bool = True) -> np.ndarray:
    """Symmetric scales of a weight tensor, one per output channel (axis 0), float32 [M].

    Per-tensor weights get the same scale repeated M times. An all-zero channel gets the
    largest scale of the layer (any positive scale represents it exactly).
    """
    w = np.asarray(w, dtype=np.float64)
    m = w.shape[0]
    amax = np.abs(w.reshape(m, -1)).max(axis=1) if w.size else np.zeros(m)
    if not per_channel:
        amax = np.full(m, amax.max() if m else 0.0)
    s = amax / WEIGHT_MAX
    fallback = s.max() if m and s.max() > 0 else 1.0
    s = np.where(s > 0, np.maximum(s, MIN_SCALE), fallback)
    return s.astype(np.float32)


def quantize_weights(w: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """int8 codes rint(w / s[c]) clipped to [-WEIGHT_MAX, WEIGHT_MAX]; scales along axis 0."""
    w = np.asarray(w, dtype=np.float64)
    s = np.asarray(scales, dtype=np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    return np.clip(np.rint(w / s), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)


def quantize_bias(b: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, int]:
    """(int32 codes rint(b / s), number of saturated entries); s = s_x * s_w[c] per channel."""
    q = np.rint(np.asarray(b, np.float64) / np.asarray(scales, np.float64))
    n_sat = int(np.count_nonzero((q < INT32_MIN) | (q > INT32_MAX)))
    return np.clip(q, INT32_MIN, INT32_MAX).astype(np.int32), n_sat


def requant_params(factors) -> tuple[np.ndarray, np.ndarray]:
    """(mult int32[n], shift int32[n]) for the real factors (`quantize_multiplier` each)."""
    pairs = [quantize_multiplier(float(f)) for f in np.atleast_1d(np.asarray(factors, np.float64))]
    return (np.array([m for m, _ in pairs], dtype=np.int32), np.array([s for _, s in pairs], dtype=np.int32))


def leaky_params(factors, alpha) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mult, mult_neg, shift), int32 [n] each, of a requantization with a fused LeakyReLU / PReLU of slope
    `alpha` (a scalar or one per channel): a >= 0 scales by f, a < 0 by alpha * f, where f = `factors` [n]
    (> 0). One shift serves both multipliers (`quantize_multiplier_pair`: the larger of f and |alpha| f gets
    31 significant bits), so the activation costs no rounding of its own: y = requantize(acc, mult, shift, ...,
    mult_neg=mult_neg) is the float y = f * acc (or alpha f acc) rounded once. alpha = 0 is a ReLU; a negative
    alpha gives a negative mult_neg."""
    fs = np.atleast_1d(np.asarray(factors, np.float64))
    al = np.broadcast_to(np.asarray(alpha, np.float64).reshape(-1), fs.shape)
    out = []
    for f, a in zip(fs, al):
        m, shift = quantize_multiplier(float(max(f, abs(a) * f)))
        out.append((round(f * 2.0 ** shift), round(a * f * 2.0 ** shift), shift))
    return tuple(np.array([o[k] for o in out], dtype=np.int32) for k in range(3))


def activation_clamp(act: str, args, scale: float, zero_point: int) -> tuple[int, int]:
    """(lo, hi) output codes of a fused clamp activation ("", relu or clip) at (scale, zero_point).

    Raises ValueError for activations that are not a clamp (they need a lookup table).
    """
    if act == "":
        a, b = -math.inf, math.inf
    elif act == "relu":
        a, b = 0.0, math.inf
    elif act == "clip":
        a, b = float(args[0]), float(args[1])
    else:
        raise ValueError(f"activation {act!r} is not a clamp; quantize it with a lookup table")
    return clamp_codes(a, b, scale, zero_point)


def clamp_codes(a: float, b: float, scale: float, zero_point: int) -> tuple[int, int]:
    """The code interval of the real interval [a, b] (either end may be infinite)."""
    lo = INT8_MIN if a == -math.inf else int(np.clip(zero_point + np.rint(a / scale), INT8_MIN, INT8_MAX))
    hi = INT8_MAX if b == math.inf else int(np.clip(zero_point + np.rint(b / scale), INT8_MIN, INT8_MAX))
    if lo > hi:
        raise ValueError(f"clamp [{a}, {b}] is empty at scale {scale}, zero point {zero_point}")
    return lo, hi


def make_lut(fn, s_in: float, z_in: int, s_out: float, z_out: int) -> np.ndarray:
    """int8[256] table of y = fn(x) for every int8 input code: table[q + 128].

    `fn` maps a float64 array to a float array (the float reference kernel of the op).
    """
    q = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int32)
    x = dequantize(q, s_in, z_in)
    y = np.asarray(fn(x), dtype=np.float64)
    return quantize(y, s_out, z_out)   # (it rounds y to float32 first, an overflow to inf included)


def lut_lookup(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """y = table[x + 128] for int8 x (what the QLut op does)."""
    x = np.asarray(x)
    if x.dtype != np.int8:
        raise TypeError(f"lut_lookup takes int8 codes, not {x.dtype}")
    return np.asarray(table, dtype=np.int8)[x.astype(np.int32) - INT8_MIN]
