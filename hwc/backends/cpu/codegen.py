"""LLVM code generation for a planned CPU program: one module, one entry point.

Module shape (everything but the entry point is internal):

    int NAME(const uint8_t *w, uint8_t *io, uint8_t *act)
        -> returns 1 (and touches nothing) when a pointer is not aligned, else runs
           every instruction in plan order and returns 0
    void hwc_kN_OP(ptr w, ptr buf...)   one function per instruction, specialized to its
                                        shapes (every loop bound is a constant); its buffer
                                        arguments are `noalias`: the planner guarantees that
                                        buffers live at the same time never share bytes

Only the kernels the program uses exist, so only they reach the object file. The
weights blob (weights.bin) is built here as kernels ask for constants: repacked
convolution/GEMM panels, folded biases, per-channel operands laid out in the output's
order; identical constants are stored once.

Every function carries "no-builtins" (LLVM must not turn a loop into a call to memcpy or
memset: the object calls nothing outside itself) and, for 512-bit vector targets,
"min-legal-vector-width"/"prefer-vector-width" so explicit 512-bit vectors are not split.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

from hwc.backends.cpu.irb import ELEM, I32, I64, KB, PTR
from hwc.backends.cpu.lowering import CL, cl_perm, logical_strides, view_layout
from hwc.backends.cpu.target import CpuTarget, init_llvm
from hwc.ir.types import TensorType
from hwc.lower.lir import Buffer, Instr, Program
from hwc.lower.memplan import MemoryPlan


def _round(x: int, a: int) -> int:
    return -(-x // a) * a


class Blob:
    """The constant weights region: arrays appended at aligned offsets, deduplicated."""

    def __init__(self, align: int):
        self.align = align
        self.parts: list[bytes] = []
        self.size = 0
        self.index: dict[bytes, int] = {}

    def add(self, arr: np.ndarray) -> int:
        data = np.ascontiguousarray(arr).tobytes()
        key = hashlib.sha256(data).digest() + len(data).to_bytes(8, "little")
        if key in self.index:
            return self.index[key]
        off = _round(self.size, self.align)
        if off > self.size:
            self.parts.append(bytes(off - self.size))
        self.parts.append(data)
        self.size = off + len(data)
        self.index[key] = off
        return off

    def data(self) -> bytes:
        out = b"".join(self.parts)
        return out + bytes(_round(len(out), self.align) - len(out))


@dataclass
class IoLayout:
    """Where every graph input and output lives in the caller's mutable I/O area."""

    offsets: dict[str, int]
    size: int


def io_layout(prog: Program, align: int) -> IoLayout:
    offsets, pos = {}, 0
    for name in list(prog.inputs) + [o for o in prog.outputs if o not in prog.inputs]:
        s = prog.storage(name)
        if s.region not in ("input", "output") or s.name in offsets:
            continue
        offsets[s.name] = pos
        pos = _round(pos + s.nbytes, align)
    return IoLayout(offsets, pos)


class Ctx:
    """What a kernel emitter sees: its instruction, typed buffers, pointers, constants."""

    def __init__(self, gen: Generator, ins: Instr, kb: KB, wptr: ir.Value, args: dict[str, ir.Value]):
        self.gen = gen
        self.ins = ins
        self.kb = kb
        self.b = kb.b
        self.wptr = wptr
        self.args = args
        self.target = gen.target
        self.prog = gen.prog
        self.graph = gen.prog.graph

    @property
    def lanes(self) -> int:
        return self.target.lanes

    def buf(self, name: str) -> Buffer:
        return self.prog.buffers[name]

    def type(self, name: str) -> TensorType:
        return self.prog.buffers[name].type

    def layout(self, name: str) -> str:
        return view_layout(self.prog, name)

    def ptr(self, name: str) -> ir.Value:
        """Pointer to the first element of buffer `name` (any region)."""
        s = self.prog.storage(name)
        if s.region == "weight":
            return self.weight(self.graph.const(s.name))
        return self.args[s.name]

    def weight(self, arr: np.ndarray) -> ir.Value:
        """Pointer to a constant array (added to weights.bin)."""
        return self.kb.byte_gep(self.wptr, self.gen.blob.add(arr))

    def const_data(self, name: str) -> np.ndarray | None:
        """The data of buffer `name` when it is a constant (viewed with its own shape)."""
        s = self.prog.storage(name)
        if s.region != "weight":
            return None
        return np.asarray(self.graph.const(s.name)).reshape(self.type(name).shape)

    def operand_strides(self, name: str, out_type: TensorType, out_layout: str) -> list[int]:
        """Element strides of activation `name` (broadcast to `out_type`) along the output's
        storage dims."""
        t = self.type(name)
        ls = (0,) * (out_type.rank - t.rank) + logical_strides(t, self.layout(name))
        perm = cl_perm(out_type.rank) if out_layout == CL else list(range(out_type.rank))
        return [ls[p] for p in perm]

    def output(self) -> str:
        """The name of the instruction's (first) output tensor, even when it is stored into
        a padded buffer (then the buffer written is another one: see out_view)."""
        halo = self.ins.attrs.get("halo")
        return halo["of"] if halo else self.ins.writes[0]

    def out_view(self, name: str) -> tuple[ir.Value, list[int]]:
        """(pointer to element 0, element stride of every logical axis) of output `name`.

        When the instruction writes straight into the interior of a padded buffer (the
        `halo` attribute, set by lowering.write_into_pads), element 0 sits past the
        padding and rows are as long as the padded buffer's."""
        halo = self.ins.attrs.get("halo")
        if halo is None or halo["of"] != name:
            return self.ptr(name), list(logical_strides(self.type(name), self.layout(name)))
        pt = self.type(halo["buffer"])
        full = _storage_strides(pt.shape, cl_perm(pt.rank))
        base = sum(b * s for b, s in zip(halo["begin"], full))
        return self.kb.gep(self.ptr(halo["buffer"]), base), full

    def const_operand(self, data: np.ndarray, out_type: TensorType, out_layout: str,
                      dtype=np.float32) -> tuple[ir.Value, list[int]]:
        """A constant broadcast to `out_type`, stored compactly in the output's storage order;
        returns (pointer, strides along the output's storage dims)."""
        r = out_type.rank
        d = np.asarray(data, dtype=dtype).reshape((1,) * (r - np.ndim(data)) + np.shape(data))
        perm = cl_perm(r) if out_layout == CL else list(range(r))
        d = np.ascontiguousarray(np.transpose(d, perm))
        strides, s = [0] * r, 1
        for i in reversed(range(r)):
            strides[i] = s if d.shape[i] != 1 else 0
            s *= d.shape[i]
        return self.weight(d), strides


def _storage_strides(shape, order) -> list[int]:
    """Element strides of logical axes stored in `order` (no zeroing of size-1 axes)."""
    strides, s = [0] * len(shape), 1
    for ax in reversed(order):
        strides[ax] = s
        s *= shape[ax]
    return strides


class Generator:
    def __init__(self, prog: Program, plan: MemoryPlan, target: CpuTarget, name: str):
        self.prog = prog
        self.plan = plan
        self.target = target
        self.name = name
        self.blob = Blob(target.alignment)
        self.io = io_layout(prog, target.alignment)
        self.module = ir.Module(name=name)
        self.module.triple = target.triple
        self.kernel_names: list[str] = []
        self.profile = False

    def _attrs(self, fn: ir.Function) -> None:
        fn.attributes.add("nounwind")
        set.add(fn.attributes, '"no-builtins"')
        if self.target.simd_bits >= 512:
            set.add(fn.attributes, f'"min-legal-vector-width"="{self.target.simd_bits}"')
            set.add(fn.attributes, f'"prefer-vector-width"="{self.target.simd_bits}"')

    def storages(self, ins: Instr) -> list[str]:
        names = []
        halo = [ins.attrs["halo"]["buffer"]] if "halo" in ins.attrs else []
        for n in [*ins.reads, *ins.writes, *halo]:
            s = self.prog.storage(n)
            if s.region != "weight" and s.name not in names:
                names.append(s.name)
        return names

    def kernel(self, idx: int, ins: Instr) -> tuple[ir.Function, list[str]]:
        from hwc.backends.cpu.kernels import EMITTERS

        stor = self.storages(ins)
        op = re.sub(r"[^A-Za-z0-9]", "", ins.op).lower()
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR] * (1 + len(stor))), f"hwc_k{idx}_{op}")
        fn.linkage = "internal"
        self._attrs(fn)
        for a in fn.args:
            a.add_attribute("noalias")
        fn.args[0].name = "w"
        for a, s in zip(fn.args[1:], stor):
            a.name = re.sub(r"[^A-Za-z0-9_.]", "_", s)[:40]
        kb = KB(ir.IRBuilder(fn.append_basic_block("entry")), self.target.lanes)
        ctx = Ctx(self, ins, kb, fn.args[0], dict(zip(stor, fn.args[1:])))
        emit = EMITTERS.get(ins.attrs["kernel"])
        if emit is None:
            raise AssertionError(f"no emitter for kernel {ins.attrs['kernel']!r} ({ins.op} {ins.name})")
        emit(ctx)
        kb.b.ret_void()
        self.kernel_names.append(fn.name)
        return fn, stor

    def generate(self) -> None:
        entry = ir.Function(self.module, ir.FunctionType(I32, [PTR, PTR, PTR]), self.name)
        self._attrs(entry)
        w, io, act = entry.args
        w.name, io.name, act.name = "constant_weights", "mutable_io", "activations"
        for a in entry.args:
            a.add_attribute("noalias")
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        mask = ir.Constant(I64, self.target.alignment - 1)
        bits = b.or_(b.or_(b.ptrtoint(w, I64), b.ptrtoint(io, I64)), b.ptrtoint(act, I64))
        bad = b.icmp_unsigned("!=", b.and_(bits, mask), ir.Constant(I64, 0))
        fail, run = entry.append_basic_block("misaligned"), entry.append_basic_block("run")
        b.cbranch(bad, fail, run)
        b.position_at_end(fail)
        b.ret(ir.Constant(I32, 1))
        b.position_at_end(run)
        calls = []
        for idx, ins in enumerate(self.prog.instrs):
            fn, stor = self.kernel(idx, ins)
            calls.append((fn, stor))
        prof = self.profile
        if prof:  # developer builds only: cycles of every kernel after the workspace
            cc = ir.Function(self.module, ir.FunctionType(I64, []), "llvm.readcyclecounter")
            base = b.gep(act, [ir.Constant(I64, self.plan.workspace_bytes)], inbounds=True, source_etype=ELEM["uint8"])
        for k, (fn, stor) in enumerate(calls):
            if prof:
                t0 = b.call(cc, [])
            args = [w]
            for s in stor:
                buf = self.prog.buffers[s]
                if buf.region == "activation":
                    args.append(b.gep(act, [ir.Constant(I64, buf.offset)], inbounds=True, source_etype=ELEM["uint8"]))
                else:
                    args.append(b.gep(io, [ir.Constant(I64, self.io.offsets[s])], inbounds=True,
                                      source_etype=ELEM["uint8"]))
            b.call(fn, args)
            if prof:
                slot = b.gep(base, [ir.Constant(I64, k)], inbounds=True, source_etype=I64)
                b.store(b.add(b.load(slot, typ=I64), b.sub(b.call(cc, []), t0)), slot)
        b.ret(ir.Constant(I32, 0))


# ---- LLVM: optimize and emit ---------------------------------------------------------------------
def optimize_module(text: str, target: CpuTarget) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    init_llvm()
    tm = target.target_machine()
    mod = llvm.parse_assembly(text)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod, tm


@dataclass
class Compiled:
    ir_text: str           # the module as generated (before optimization)
    optimized_ir: str      # after LLVM's -O3 pipeline
    object: bytes          # model.o
    weights: bytes         # weights.bin
    io: IoLayout
    kernels: list[str]


def compile_program(prog: Program, plan: MemoryPlan, target: CpuTarget, name: str, profile: bool = False) -> Compiled:
    """`profile` (developers): the entry point adds every kernel's cycle count (readcyclecounter)
    to an int64 counter per instruction placed right after the workspace."""
    gen = Generator(prog, plan, target, name)
    gen.profile = profile
    gen.generate()
    text = str(gen.module)
    mod, tm = optimize_module(text, target)
    obj = tm.emit_object(mod)
    return Compiled(text, str(mod), obj, gen.blob.data(), gen.io, gen.kernel_names)
