"""Elementwise float32 arithmetic in LLVM IR, on scalars or vectors alike.

`emit_op(kb, op, args, params)` computes one IR op (the ops of FusedElementwise programs:
unary, binary, Max/Min) on LLVM values of type float or <n x float>, with the reference's
numbers (hwc/ref/interp.py): plain IEEE float32 where the reference is exact in float32
(add, mul, div, sqrt, min/max, clamps), and float64 where the reference computes in
float64 and rounds once (exp, log, tanh, sigmoid, expm1-based ops, pow, softplus).

Transcendentals are polynomial code written here, not calls to libm: the object file
calls nothing outside itself (model.h states it), and the loops stay vectorizable.
float64 keeps them accurate where float32 formulas cancel (tanh and expm1 near 0).
No fast-math flags are used here: NaN and infinity behave as in numpy.
"""

from __future__ import annotations

import math

from llvmlite import ir

from hwc.backends.cpu.irb import F32, F64, I64, KB, lanes_of, scalar_type, vec
from hwc.errors import UnsupportedError


def _t(v: ir.Value, s: ir.Type) -> ir.Type:
    return vec(s, lanes_of(v))


def fconst(kb: KB, like: ir.Value, x: float) -> ir.Value:
    return kb.const(like.type, x)


def select(kb: KB, cond, a, b):
    return kb.b.select(cond, a, b)


def fcmp(kb: KB, op: str, a, b):
    return kb.b.fcmp_ordered(op, a, b)


def to64(kb: KB, x: ir.Value) -> ir.Value:
    return kb.b.fpext(x, _t(x, F64))


def to32(kb: KB, x: ir.Value) -> ir.Value:
    return kb.b.fptrunc(x, _t(x, F32))


def relu(kb, x):
    # x < 0 ? 0 : x  (NaN stays NaN, as np.maximum(x, 0))
    return select(kb, fcmp(kb, "<", x, fconst(kb, x, 0.0)), fconst(kb, x, 0.0), x)


def clip(kb, x, lo: float, hi: float):
    """np.clip(x, lo, hi) = min(max(x, lo), hi), NaN propagating."""
    b = kb.b
    r = _f32 if scalar_type(x.type) == F32 else float
    if lo != -math.inf:
        c = fconst(kb, x, r(lo))
        x = b.select(b.fcmp_ordered("<", x, c), c, x)
    if hi != math.inf:
        c = fconst(kb, x, r(hi))
        x = b.select(b.fcmp_ordered(">", x, c), c, x)
    return x


def _f32(x: float) -> float:
    import numpy as np

    return float(np.float32(x))


def maximum(kb, a, b_):
    """np.maximum: the larger, NaN if either is NaN."""
    b = kb.b
    take_a = b.or_(b.fcmp_ordered(">", a, b_), b.fcmp_unordered("uno", a, a))
    return b.select(take_a, a, b_)


def minimum(kb, a, b_):
    b = kb.b
    take_a = b.or_(b.fcmp_ordered("<", a, b_), b.fcmp_unordered("uno", a, a))
    return b.select(take_a, a, b_)


# ---- float64 helpers ---------------------------------------------------------------------------
def _poly(kb: KB, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """c0 + c1 x + ... (Horner, coefficients lowest first)."""
    acc = fconst(kb, x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = kb.b.fadd(kb.b.fmul(acc, x), fconst(kb, x, c))
    return acc


def _round_nearest(kb: KB, x: ir.Value) -> ir.Value:
    """Round a float64 with |x| < 2**51 to the nearest integer (ties to even), no libm."""
    magic = fconst(kb, x, 6755399441055744.0)  # 1.5 * 2**52
    return kb.b.fsub(kb.b.fadd(x, magic), magic)


def exp64(kb: KB, x: ir.Value) -> ir.Value:
    """exp(x) in float64, for x representable in float32 (results outside float32 saturate
    to 0 or a value that rounds to inf; NaN stays NaN)."""
    b = kb.b
    isnan = b.fcmp_unordered("uno", x, x)
    xc = clip(kb, b.select(isnan, fconst(kb, x, 0.0), x), -745.0, 709.0)
    xc = b.select(b.fcmp_ordered("<", xc, fconst(kb, x, -745.0)), fconst(kb, x, -745.0), xc)
    n = _round_nearest(kb, b.fmul(xc, fconst(kb, x, 1.4426950408889634)))
    r = b.fsub(xc, b.fmul(n, fconst(kb, x, 0.6931471803691238)))
    r = b.fsub(r, b.fmul(n, fconst(kb, x, 1.9082149292705877e-10)))
    p = _poly(kb, r, [1.0 / math.factorial(i) for i in range(14)])
    # 2**n in two halves (n may reach -1075 or 1024, beyond one exponent field)
    ni = b.fptosi(n, _t(x, I64))
    n1 = b.ashr(ni, kb.const(ni.type, 1))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, kb.const(ni.type, 1023)), kb.const(ni.type, 52)), x.type)
    s2 = b.bitcast(b.shl(b.add(n2, kb.const(ni.type, 1023)), kb.const(ni.type, 52)), x.type)
    y = b.fmul(b.fmul(p, s1), s2)
    return b.select(isnan, x, y)


def expm1_64(kb: KB, x: ir.Value) -> ir.Value:
    """exp(x) - 1 in float64 without cancellation near 0."""
    b = kb.b
    small = b.fcmp_ordered("<", b.call(_fabs_fn(kb, x.type), [x]), fconst(kb, x, 0.5))
    p = b.fmul(x, _poly(kb, x, [1.0 / math.factorial(i + 1) for i in range(16)]))
    big = b.fsub(exp64(kb, x), fconst(kb, x, 1.0))
    return b.select(small, p, big)


def log64(kb: KB, x: ir.Value) -> ir.Value:
    """Natural log in float64: log(0) = -inf, log(<0) = NaN, log(inf) = inf, NaN stays NaN."""
    b = kb.b
    it = _t(x, I64)
    bits = b.bitcast(x, it)
    e = b.sub(b.lshr(bits, kb.const(it, 52)), kb.const(it, 1023))
    m = b.bitcast(b.or_(b.and_(bits, kb.const(it, (1 << 52) - 1)), kb.const(it, 1023 << 52)), x.type)
    big = b.fcmp_ordered(">", m, fconst(kb, x, math.sqrt(2.0)))
    m = b.select(big, b.fmul(m, fconst(kb, x, 0.5)), m)
    e = b.select(big, b.add(e, kb.const(it, 1)), e)
    s = b.fdiv(b.fsub(m, fconst(kb, x, 1.0)), b.fadd(m, fconst(kb, x, 1.0)))
    s2 = b.fmul(s, s)
    series = _poly(kb, s2, [2.0 / (2 * k + 1) for k in range(12)])
    y = b.fadd(b.fmul(b.sitofp(e, x.type), fconst(kb, x, math.log(2.0))), b.fmul(s, series))
    # special cases (inputs come from float32, so x is never a float64 subnormal)
    y = b.select(b.fcmp_ordered("==", x, fconst(kb, x, 0.0)), fconst(kb, x, -math.inf), y)
    y = b.select(b.fcmp_ordered("<", x, fconst(kb, x, 0.0)), fconst(kb, x, math.nan), y)
    y = b.select(b.fcmp_ordered("==", x, fconst(kb, x, math.inf)), x, y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def _fabs_fn(kb: KB, t: ir.Type):
    full = "llvm.fabs." + (f"v{t.count}" if isinstance(t, ir.VectorType) else "") + \
        ("f64" if scalar_type(t) == F64 else "f32")
    fn = kb.module.globals.get(full)
    if fn is None:
        fn = ir.Function(kb.module, ir.FunctionType(t, [t]), name=full)
    return fn


def fabs(kb, x):
    return kb.b.call(_fabs_fn(kb, x.type), [x])


def sigmoid64(kb, x64):
    b = kb.b
    e = exp64(kb, b.fneg(fabs(kb, x64)))
    one = fconst(kb, x64, 1.0)
    pos = b.fdiv(one, b.fadd(one, e))
    neg = b.fdiv(e, b.fadd(one, e))
    return b.select(b.fcmp_ordered(">=", x64, fconst(kb, x64, 0.0)), pos, neg)


def tanh64(kb, x64):
    b = kb.b
    xc = clip(kb, x64, -20.0, 20.0)
    t = expm1_64(kb, b.fmul(xc, fconst(kb, x64, 2.0)))
    return b.fdiv(t, b.fadd(t, fconst(kb, x64, 2.0)))


# ---- the ops -----------------------------------------------------------------------------------
def emit_op(kb: KB, op: str, args: list[ir.Value], params: tuple[float, ...]) -> ir.Value:
    """One elementwise IR op on float32 values (all args of the same type)."""
    b = kb.b
    x = args[0]
    if op == "Identity":
        return x
    if op == "Relu":
        return relu(kb, x)
    if op == "Clip":
        return clip(kb, x, params[0], params[1])
    if op == "LeakyRelu":
        return b.select(fcmp(kb, ">=", x, fconst(kb, x, 0.0)), x, b.fmul(x, fconst(kb, x, _f32(params[0]))))
    if op == "ThresholdedRelu":
        return b.select(fcmp(kb, ">", x, fconst(kb, x, _f32(params[0]))), x, fconst(kb, x, 0.0))
    if op == "HardSigmoid":
        y = b.fadd(b.fmul(to64(kb, x), fconst(kb, to64(kb, x), params[0])), fconst(kb, to64(kb, x), params[1]))
        return to32(kb, clip(kb, y, 0.0, 1.0))
    if op == "HardSwish":
        x64 = to64(kb, x)
        h = clip(kb, b.fadd(b.fdiv(x64, fconst(kb, x64, 6.0)), fconst(kb, x64, 0.5)), 0.0, 1.0)
        return to32(kb, b.fmul(x64, h))
    if op == "Abs":
        return fabs(kb, x)
    if op == "Neg":
        return b.fneg(x)
    if op == "Reciprocal":
        return b.fdiv(fconst(kb, x, 1.0), x)
    if op == "Sqrt":
        return kb.intrinsic("sqrt", [x])
    if op == "Floor":
        return kb.intrinsic("floor", [x])
    if op == "Ceil":
        return kb.intrinsic("ceil", [x])
    if op == "Sign":
        zero, one = fconst(kb, x, 0.0), fconst(kb, x, 1.0)
        s = b.select(fcmp(kb, ">", x, zero), one, b.select(fcmp(kb, "<", x, zero), b.fneg(one), zero))
        return b.select(b.fcmp_unordered("uno", x, x), x, s)
    if op == "Softsign":
        return b.fdiv(x, b.fadd(fconst(kb, x, 1.0), fabs(kb, x)))
    if op in ("Exp", "Log", "Sigmoid", "Tanh", "Softplus", "Elu", "Celu", "Selu"):
        return to32(kb, _f64_unary(kb, op, to64(kb, x), params))
    if op in ("Add", "Sum"):
        return b.fadd(x, args[1])
    if op == "Sub":
        return b.fsub(x, args[1])
    if op == "Mul":
        return b.fmul(x, args[1])
    if op == "Div":
        return b.fdiv(x, args[1])
    if op == "Max":
        return maximum(kb, x, args[1])
    if op == "Min":
        return minimum(kb, x, args[1])
    if op == "PRelu":
        return b.select(fcmp(kb, "<", x, fconst(kb, x, 0.0)), b.fmul(x, args[1]), x)
    if op == "Pow":
        return to32(kb, _pow64(kb, to64(kb, x), to64(kb, args[1])))
    raise UnsupportedError(f"no CPU elementwise kernel for {op}")


def _f64_unary(kb: KB, op: str, x: ir.Value, params) -> ir.Value:
    b = kb.b
    zero = fconst(kb, x, 0.0)
    if op == "Exp":
        return exp64(kb, x)
    if op == "Log":
        return log64(kb, x)
    if op == "Sigmoid":
        return sigmoid64(kb, x)
    if op == "Tanh":
        return tanh64(kb, x)
    if op == "Softplus":  # logaddexp(0, x) = max(x, 0) + log1p(exp(-|x|))
        y = exp64(kb, b.fneg(fabs(kb, x)))
        small = b.fcmp_ordered("<", y, fconst(kb, x, 1e-5))
        l1p = b.select(small, b.fmul(y, b.fsub(fconst(kb, x, 1.0), b.fmul(y, fconst(kb, x, 0.5)))),
                       log64(kb, b.fadd(y, fconst(kb, x, 1.0))))
        pos = b.select(b.fcmp_ordered(">", x, zero), x, zero)
        return b.select(b.fcmp_unordered("uno", x, x), x, b.fadd(pos, l1p))
    if op == "Elu":
        neg = b.fmul(fconst(kb, x, params[0]), expm1_64(kb, b.select(fcmp(kb, "<", x, zero), x, zero)))
        return b.select(fcmp(kb, ">", x, zero), x, neg)
    if op == "Selu":
        neg = b.fmul(fconst(kb, x, params[0]), expm1_64(kb, b.select(fcmp(kb, "<", x, zero), x, zero)))
        return b.fmul(fconst(kb, x, params[1]), b.select(fcmp(kb, ">", x, zero), x, neg))
    if op == "Celu":
        al = fconst(kb, x, params[0])
        m = b.select(fcmp(kb, "<", x, zero), x, zero)
        neg = b.fmul(al, expm1_64(kb, b.fdiv(m, al)))
        pos = b.select(fcmp(kb, ">", x, zero), x, zero)
        y = b.fadd(pos, b.select(fcmp(kb, "<", neg, zero), neg, zero))
        return b.select(b.fcmp_unordered("uno", x, x), x, y)
    raise AssertionError(op)


def _pow64(kb: KB, x: ir.Value, y: ir.Value) -> ir.Value:
    """np.power on float64: exp(y log|x|), with the sign of an integer power of a negative
    base, NaN for a non-integer power of one, and the IEEE special cases that matter."""
    b = kb.b
    zero, one = fconst(kb, x, 0.0), fconst(kb, x, 1.0)
    ax = fabs(kb, x)
    r = exp64(kb, b.fmul(y, log64(kb, ax)))
    yi = _round_nearest(kb, y)
    is_int = b.fcmp_ordered("==", yi, y)
    half = b.fmul(yi, fconst(kb, x, 0.5))
    odd = b.fcmp_ordered("!=", _round_nearest(kb, half), half)
    big = b.fcmp_ordered(">=", fabs(kb, y), fconst(kb, x, 2.0 ** 51))
    odd = b.and_(odd, b.not_(big))
    neg = b.fcmp_ordered("<", x, zero)
    r = b.select(b.and_(neg, b.and_(is_int, odd)), b.fneg(r), r)
    r = b.select(b.and_(neg, b.not_(is_int)), fconst(kb, x, math.nan), r)
    r = b.select(b.fcmp_ordered("==", y, zero), one, r)
    r = b.select(b.fcmp_ordered("==", x, one), one, r)
    return r


