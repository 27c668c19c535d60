"""A thin layer over llvmlite's IR builder for kernels: typed constants, pointer
arithmetic in elements, vector loads/stores/splats, intrinsics, and counted loops with
loop-carried values (phi nodes), so kernels read as the loop nests they are.

Every loop bound is a Python int: the generated code has constant trip counts, which is
what lets LLVM unroll, vectorize and drop every bounds check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

#: IR element types by IR dtype name.
ELEM = {"float32": F32, "int8": I8, "uint8": I8, "int32": I32, "int64": I64, "bool": I8, "float64": F64,
        "int16": I16}


def vec(t: ir.Type, n: int) -> ir.Type:
    return t if n == 1 else ir.VectorType(t, n)


def lanes_of(v: ir.Value) -> int:
    return v.type.count if isinstance(v.type, ir.VectorType) else 1


def scalar_type(t: ir.Type) -> ir.Type:
    return t.element if isinstance(t, ir.VectorType) else t


def _mangle(t: ir.Type) -> str:
    s = scalar_type(t)
    name = {F32: "f32", F64: "f64", I8: "i8", I16: "i16", I32: "i32", I64: "i64", I1: "i1"}[s]
    return f"v{t.count}{name}" if isinstance(t, ir.VectorType) else name


class KB:
    """Kernel builder: an IRBuilder positioned in a function, plus helpers."""

    def __init__(self, builder: ir.IRBuilder, lanes: int):
        self.b = builder
        self.lanes = lanes  # f32 lanes of one vector register on the target

    @property
    def module(self) -> ir.Module:
        return self.b.module

    # ---- constants ---------------------------------------------------------------------
    @staticmethod
    def i64(n: int) -> ir.Constant:
        return ir.Constant(I64, int(n))

    @staticmethod
    def const(t: ir.Type, x) -> ir.Constant:
        """A scalar or splatted vector constant of type `t`."""
        s = scalar_type(t)
        x = float(x) if isinstance(s, (ir.FloatType, ir.DoubleType)) else int(x)
        c = ir.Constant(s, x)
        return ir.Constant(t, [c] * t.count) if isinstance(t, ir.VectorType) else c

    # ---- memory -------------------------------------------------------------------------
    def gep(self, ptr: ir.Value, index, ety: ir.Type = F32) -> ir.Value:
        """&ptr[index] in elements of `ety` (index: int or i64 value)."""
        if isinstance(index, int):
            if index == 0:
                return ptr
            index = self.i64(index)
        return self.b.gep(ptr, [index], inbounds=True, source_etype=ety)

    def byte_gep(self, ptr: ir.Value, offset: int) -> ir.Value:
        return self.gep(ptr, offset, I8)

    def load(self, ptr: ir.Value, ety: ir.Type = F32, n: int = 1, align: int | None = None) -> ir.Value:
        t = vec(ety, n)
        return self.b.load(ptr, typ=t, align=align or _size(ety))

    def store(self, value: ir.Value, ptr: ir.Value, align: int | None = None) -> None:
        self.b.store(value, ptr, align=align or _size(scalar_type(value.type)))

    def splat(self, value: ir.Value, n: int) -> ir.Value:
        if n == 1:
            return value
        t = ir.VectorType(value.type, n)
        v = self.b.insert_element(ir.Constant(t, ir.Undefined), value, ir.Constant(I32, 0))
        return self.b.shuffle_vector(v, ir.Constant(t, ir.Undefined), ir.Constant(ir.VectorType(I32, n), [0] * n))

    # ---- intrinsics ---------------------------------------------------------------------
    def intrinsic(self, name: str, args: Sequence[ir.Value], ret: ir.Type | None = None,
                  types: Sequence[ir.Type] | None = None) -> ir.Value:
        """Call llvm.<name>.<mangled types>; `types` default to the first argument's."""
        types = list(types or [args[0].type])
        full = f"llvm.{name}." + ".".join(_mangle(t) for t in types)
        ret = ret or args[0].type
        fn = self.module.globals.get(full)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]), name=full)
        return self.b.call(fn, list(args))

    def fma(self, a, b, c):
        return self.intrinsic("fma", [a, b, c])

    # ---- control flow -------------------------------------------------------------------
    def loop(self, n: int, body: Callable, carry: Sequence[ir.Value] = (), name: str = "i") -> list[ir.Value]:
        """for i in range(n): carry = body(i, carry). Returns the final carried values.

        `n` is a Python int; n == 1 emits the body once with i = 0 and no loop.
        """
        carry = list(carry)
        if n <= 0:
            return carry
        if n == 1:
            out = body(self.i64(0), carry)
            return list(out) if out is not None else carry
        b = self.b
        pre = b.block
        head = b.append_basic_block(f"{name}.loop")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(self.i64(0), pre)
        phis = []
        for v in carry:
            p = b.phi(v.type)
            p.add_incoming(v, pre)
            phis.append(p)
        out = body(i, phis)
        out = list(out) if out is not None else phis
        nxt = b.add(i, self.i64(1), name=f"{name}.next")
        latch = b.block
        i.add_incoming(nxt, latch)
        for p, o in zip(phis, out):
            p.add_incoming(o, latch)
        exit_ = b.append_basic_block(f"{name}.end")
        b.cbranch(b.icmp_unsigned("<", nxt, self.i64(n)), head, exit_)
        b.position_at_end(exit_)
        return out

    def loops(self, counts: Sequence[int], body: Callable[[list], None], name: str = "i") -> None:
        """Nested loops over `counts` (outermost first); body(indices) with i64 values."""
        def rec(level, idx):
            if level == len(counts):
                body(idx)
                return
            self.loop(counts[level], lambda i, c: rec(level + 1, idx + [i]), name=f"{name}{level}")
        rec(0, [])

    def mul_add(self, terms: Sequence[tuple[ir.Value, int]], const: int = 0) -> ir.Value:
        """const + sum(value * stride) as an i64 (terms with stride 0 are dropped)."""
        acc = None
        for v, s in terms:
            if s == 0:
                continue
            t = v if s == 1 else self.b.mul(v, self.i64(s))
            acc = t if acc is None else self.b.add(acc, t)
        if acc is None:
            return self.i64(const)
        return acc if const == 0 else self.b.add(acc, self.i64(const))



def _size(t: ir.Type) -> int:
    return {F32: 4, F64: 8, I8: 1, I16: 2, I32: 4, I64: 8, I1: 1}[t]
