"""Small tile programs with their numpy references, for the tests, benchmarks and examples.

Every builder returns a `Workload`: the external memory image (program at instruction
index `prog_addr`), the output regions and the expected bytes there, computed with numpy
and hwc.quant.arith only (never with the tile model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwc import isa
from hwc.quant import arith

Op, Wait, Mem = isa.Op, isa.Wait, isa.Mem


@dataclass
class Workload:
    name: str
    program: list[isa.Insn]
    dram: bytearray                      # program included at byte prog_addr * 16
    prog_addr: int
    expect: list[tuple[int, bytes]] = field(default_factory=list)   # (byte address, bytes)
    notes: dict = field(default_factory=dict)

    @property
    def regions(self) -> list[tuple[int, int]]:
        return [(a, len(b)) for a, b in self.expect]


class Image:
    """Allocates beats of the external memory image after the program."""

    def __init__(self, beat: int, program_slots: int):
        self.beat = beat
        self.data = bytearray(program_slots * isa.INSN_BYTES)
        self._align()

    def _align(self):
        self.data.extend(b"\0" * (-len(self.data) % self.beat))

    def put(self, payload: bytes) -> int:
        """Append bytes (padded to a whole beat); returns the beat address."""
        addr = len(self.data) // self.beat
        self.data.extend(payload)
        self._align()
        return addr

    def reserve(self, nbytes: int) -> int:
        return self.put(b"\0" * nbytes)

    def finish(self, program: list[isa.Insn], prog_addr: int = 0) -> bytearray:
        code = isa.to_bytes(program)
        base = prog_addr * isa.INSN_BYTES
        assert base + len(code) <= len(self.data), "program area too small"
        self.data[base:base + len(code)] = code
        return self.data


def params(target: dict):
    sp = target["scratchpad"]
    return (target["array"]["rows"], target["bus"]["bytes"], sp["wgt_bank_blocks"],
            isa.param_entry_beats(target["array"]["rows"], target["bus"]["bytes"]))


def random_requant(rng, m: int, relu: bool):
    """Per-channel requantization parameters as the quantizer makes them (M in [2**30, 2**31))."""
    mult = rng.integers(arith.MULT_MIN, arith.MULT_MAX, m, dtype=np.int64).astype(np.int32)
    shift = rng.integers(36, 44, m).astype(np.int32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    z = int(rng.integers(-20, 20))
    lo, hi = (z, int(rng.integers(60, 128))) if relu else (-128, 127)
    return bias, mult, shift, z, lo, hi


def matmul(target: dict, rng, pixels: int, k: int, m: int, overlap: bool = True, relu: bool = True,
           name: str = "matmul") -> Workload:
    """y[P, M] = requant(x[P, K] @ w[M, K].T + bias): LOAD -> GEMM (K/N blocks accumulate) -> PPU -> STORE.

    overlap=True loads the next weight block while the current GEMM runs (ping-pong banks);
    overlap=False makes every weight LOAD wait for the compute unit (no overlap)."""
    n, beat, bank_blocks, peb = params(target)
    assert k % n == 0 and m % n == 0 and pixels % 2 == 0
    kb, mb = k // n, m // n
    x = rng.integers(-128, 128, (pixels, k), dtype=np.int64).astype(np.int8)
    w = rng.integers(-127, 128, (m, k), dtype=np.int64).astype(np.int8)
    bias, mult, shift, z, lo, hi = random_requant(rng, m, relu)
    acc = x.astype(np.int32) @ w.astype(np.int32).T
    y = np.concatenate([arith.requantize(acc[:, j * n:(j + 1) * n] + bias[j * n:(j + 1) * n],
                                         mult[j * n:(j + 1) * n], shift[j * n:(j + 1) * n], z, lo, hi)
                        for j in range(mb)], axis=1)

    n_insns = 4 + 2 * mb * kb + 2 * mb
    img = Image(beat, n_insns)
    x_at = img.put(b"".join(np.ascontiguousarray(x[:, j * n:(j + 1) * n]).tobytes() for j in range(kb)))
    w_at = [img.put(np.ascontiguousarray(w[o * n:(o + 1) * n, i * n:(i + 1) * n]).tobytes())
            for o in range(mb) for i in range(kb)]
    p_at = img.put(b"".join(isa.pack_param_entry(bias[o * n:(o + 1) * n], mult[o * n:(o + 1) * n],
                                                 shift[o * n:(o + 1) * n], z, lo, hi, n, beat) for o in range(mb)))
    y_at = img.reserve(pixels * m)

    half = pixels // 2
    act_out = kb * pixels
    prog = [isa.make(Op.LOAD, mem=Mem.PARAM, dram=p_at, sram=0, rows=mb, row_beats=peb, dram_stride=peb,
                     sram_stride=peb),
            isa.make(Op.LOAD, mem=Mem.ACT, dram=x_at, sram=0, rows=kb, row_beats=pixels, dram_stride=pixels,
                     sram_stride=pixels)]
    s = 0
    for o in range(mb):
        for i in range(kb):
            wblk = (s % 2) * bank_blocks + (s // 2) % bank_blocks
            prog.append(isa.make(Op.LOAD, Wait.NONE if overlap else Wait.COMPUTE, mem=Mem.WGT,
                                 dram=w_at[o * kb + i], sram=wblk * n, rows=n, row_beats=1, dram_stride=1,
                                 sram_stride=1))
            prog.append(isa.make(Op.GEMM, Wait.LOAD, wblk=wblk, act=i * pixels, acc=o * pixels, n_outer=2,
                                 n_inner=half, act_so=half, act_si=1, acc_so=half, acc_si=1, reset=int(i == 0)))
            s += 1
        # Wait.COMPUTE: a no-op on tile v1 (one unit), needed with a POST unit (tile v2)
        prog.append(isa.make(Op.PPU, Wait.COMPUTE, acc=o * pixels, out=act_out + o * pixels, n_outer=2, n_inner=half,
                             acc_so=half, acc_si=1, out_so=half, out_si=1, param=o))
        prog.append(isa.make(Op.STORE, Wait.COMPUTE, dram=y_at + o * pixels, sram=act_out + o * pixels, rows=2,
                             row_beats=half, dram_stride=half, sram_stride=half))
    prog.append(isa.make(Op.FINISH))
    dram = img.finish(prog)
    # y in external memory: block o holds pixels x N channels
    want = b"".join(np.ascontiguousarray(y[:, o * n:(o + 1) * n]).tobytes() for o in range(mb))
    return Workload(name, prog, dram, 0, [(y_at * beat, want)], {"y": y, "acc": acc})


def vec(target: dict, rng, lines: int, name: str = "vec") -> Workload:
    """VEC MAX and VEC ADD (with requantization) over `lines` lines, then FILL, all stored."""
    n, beat, _, peb = params(target)
    a = rng.integers(-128, 128, (lines, n), dtype=np.int64).astype(np.int8)
    b = rng.integers(-128, 128, (lines, n), dtype=np.int64).astype(np.int8)
    ma, mb, s = arith.quantize_multiplier_pair(float(rng.uniform(0.2, 1.5)), float(rng.uniform(0.2, 1.5)))
    za, zb, z = (int(v) for v in rng.integers(-30, 30, 3))
    lo, hi = -100, 110
    ymax = np.maximum(a, b)
    yadd = arith.add_requantize(a, b, za, zb, ma, mb, s, z, lo, hi)
    fill_value = -77
    entry_bias = np.zeros(n, np.int32)
    entry_bias[:2] = (za, zb)
    entry_mult = np.zeros(n, np.int32)
    entry_mult[:2] = (ma, mb)
    entry_shift = np.zeros(n, np.int32)
    entry_shift[0] = s
    img = Image(beat, 12)
    a_at = img.put(a.tobytes())
    b_at = img.put(b.tobytes())
    p_at = img.put(isa.pack_param_entry(entry_bias, entry_mult, entry_shift, z, lo, hi, n, beat))
    out_at = img.reserve(3 * lines * n)
    half = lines // 2
    A, B, OMAX, OADD, OFILL = 0, lines, 2 * lines, 3 * lines, 4 * lines
    loop = dict(n_outer=2, n_inner=half, in_so=half, in_si=1, out_so=half, out_si=1)
    prog = [isa.make(Op.LOAD, mem=Mem.ACT, dram=a_at, sram=A, rows=2, row_beats=lines, dram_stride=b_at - a_at,
                     sram_stride=B - A),
            isa.make(Op.LOAD, mem=Mem.PARAM, dram=p_at, sram=3 * peb, rows=1, row_beats=peb, dram_stride=0,
                     sram_stride=0),
            isa.make(Op.VEC, Wait.LOAD, op=isa.VecOp.MAX, a=A, b=B, out=OMAX, param=0, **loop),
            isa.make(Op.VEC, op=isa.VecOp.ADD, a=A, b=B, out=OADD, param=3, **loop),
            isa.make(Op.FILL, addr=OFILL, count=lines, value=fill_value & 0xFF),
            isa.make(Op.STORE, Wait.COMPUTE, dram=out_at, sram=OMAX, rows=3, row_beats=lines,
                     dram_stride=lines, sram_stride=lines),
            isa.make(Op.FINISH)]
    dram = img.finish(prog)
    want = ymax.tobytes() + yadd.tobytes() + np.full((lines, n), fill_value, np.int8).tobytes()
    return Workload(name, prog, dram, 0, [(out_at * beat, want)])


def with_program(target: dict, program: list[isa.Insn], data_bytes: int = 4096, name: str = "custom",
                 expect: list[tuple[int, bytes]] | None = None) -> Workload:
    """A hand-written program over a zeroed data area of `data_bytes` right after it."""
    _, beat, _, _ = params(target)
    img = Image(beat, len(program))
    img.reserve(data_bytes)
    return Workload(name, program, img.finish(program), 0, list(expect or []))


def data_base(workload: Workload, beat: int) -> int:
    """Beat address of the first beat after the program (where with_program's data area starts)."""
    return -(-len(workload.program) * isa.INSN_BYTES // beat)


def pool_sum(target: dict, rng, pixels: int, name: str = "pool") -> Workload:
    """Every pixel accumulated into ONE accumulator line, one line per cycle (forwarding), then
    requantized: y = requant(sum_p W @ x_p + bias) - a global-average-pool-like reduction."""
    n, beat, bank_blocks, peb = params(target)
    x = rng.integers(-128, 128, (pixels, n), dtype=np.int64).astype(np.int8)
    w = rng.integers(-127, 128, (n, n), dtype=np.int64).astype(np.int8)
    bias, mult, shift, z, lo, hi = random_requant(rng, n, relu=False)
    shift = shift - 4  # sums of many pixels: keep the outputs inside int8 often
    acc = (x.astype(np.int64) @ w.astype(np.int64).T).sum(axis=0).astype(np.int32)
    y = arith.requantize((acc + bias)[None, :], mult, shift, z, lo, hi)
    img = Image(beat, 9)
    x_at, w_at = img.put(x.tobytes()), img.put(w.tobytes())
    p_at = img.put(isa.pack_param_entry(bias, mult, shift, z, lo, hi, n, beat))
    y_at = img.reserve(n)
    wblk = bank_blocks  # bank 1, block 0
    half = (pixels - 1) // 2
    prog = [isa.make(Op.LOAD, mem=Mem.ACT, dram=x_at, sram=0, rows=1, row_beats=pixels, dram_stride=0,
                     sram_stride=0),
            isa.make(Op.LOAD, mem=Mem.WGT, dram=w_at, sram=wblk * n, rows=1, row_beats=n, dram_stride=0,
                     sram_stride=0),
            isa.make(Op.LOAD, mem=Mem.PARAM, dram=p_at, sram=peb, rows=1, row_beats=peb, dram_stride=0,
                     sram_stride=0),
            isa.make(Op.GEMM, Wait.LOAD, wblk=wblk, act=0, acc=7, n_outer=1, n_inner=1, act_so=0, act_si=0,
                     acc_so=0, acc_si=0, reset=1),
            isa.make(Op.GEMM, wblk=wblk, act=1, acc=7, n_outer=2, n_inner=half, act_so=half, act_si=1,
                     acc_so=0, acc_si=0, reset=0),
            isa.make(Op.PPU, Wait.COMPUTE, acc=7, out=pixels, n_outer=1, n_inner=1, acc_so=0, acc_si=0, out_so=0,
                     out_si=0,
                     param=1),
            isa.make(Op.STORE, Wait.COMPUTE, dram=y_at, sram=pixels, rows=1, row_beats=1, dram_stride=0,
                     sram_stride=0),
            isa.make(Op.FINISH)]
    assert 1 + 2 * half == pixels, "pixels must be odd"
    return Workload(name, prog, img.finish(prog), 0, [(y_at * beat, y.tobytes())])
