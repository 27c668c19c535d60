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
ReLU6 is hi = min(127, z_out + round(6 / s_out)).

Residual Add (`add_requantize`): both inputs are brought to the output scale in one
step with a shared shift, so there is a single rounding:

    y = clamp(z_y + ((Ma*(a - z_a) + Mb*(b - z_b) + 2**(s-1)) >> s), lo, hi)

with Ma/2**s ~= s_a/s_y and Mb/2**s ~= s_b/s_y, Ma, Mb int32 (`quantize_multiplier_pair`).
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


def requantize(acc, mult, shift, z_out: int = 0, lo: int = INT8_MIN, hi: int = INT8_MAX) -> np.ndarray:
    """int32 accumulators -> int8. `mult`/`shift` broadcast against `acc` (per channel)."""
    acc = np.asarray(acc)
    if acc.dtype != np.int32:
        raise TypeError(f"accumulators must be int32, not {acc.dtype}")
    p = acc.astype(np.int64) * np.asarray(mult, dtype=np.int64)
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
    """float -> int8: round half to even (numpy's rint, as ONNX QuantizeLinear), saturate."""
    q = np.rint(np.asarray(x, dtype=np.float32) / np.float32(scale)).astype(np.int64) + zero_point
    return np.clip(q, lo, hi).astype(np.int8)


def dequantize(q: np.ndarray, scale, zero_point) -> np.ndarray:
    return ((np.asarray(q).astype(np.int32) - np.asarray(zero_point, np.int32)).astype(np.float32)
            * np.asarray(scale, np.float32))
