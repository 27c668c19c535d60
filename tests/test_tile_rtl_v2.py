"""Whole-tile RTL tests of tile v2 (docs/tile-v2.md: the POST unit and the depthwise mode): the
generated tile.v of a v2 variant of tile8x8 under Icarus (cocotb, hwc/sim/cocotb/tb_tile.py).

Random programs exercise the four units concurrently (LOAD / GEMM with and without the depthwise
mode / STORE / POST with PPU, VEC and FILL), with wait bits derived from their memory footprints
(so the result is defined by program order); every scenario's whole memory image after the run
must equal the Python tile model's, and the RTL's cycle count, every instruction's issue cycle and
every unit's busy cycles must equal the model's closed forms. The fixed workloads (matmul, pool,
vec) are also checked against numpy + hwc.quant.arith (hwc.sim.programs), and the v2 BAD_FIELD rule
against the model's error codes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hwc.hw.generate import generate
from hwc.sim import programs
from hwc.sim.model import TileModel
from hwc.sim.rtl import Scenario, run_scenarios
from hwc.targets import load_target, tile_variant

from hwc import isa

Op, Wait, Mem, E = isa.Op, isa.Wait, isa.Mem, isa.ErrorCode
V2 = {"post_unit": True, "depthwise": True}
UNIT = {Op.LOAD: Wait.LOAD, Op.GEMM: Wait.COMPUTE, Op.STORE: Wait.STORE, Op.PPU: Wait.POST, Op.VEC: Wait.POST,
        Op.FILL: Wait.POST}
N_RANDOM = 10


def v2(name: str, features=V2) -> dict:
    return tile_variant(load_target(name), **features)


# ---- random programs with footprint-derived wait bits ----------------------------------------------
class RandomProgram:
    """A random v2 program over a small working set: ACT lines [0, ACT), ACC lines [0, ACC), weight blocks
    [0, WB), PARAM entries [0, PE). A prologue writes all of it before anything reads it (the on-chip
    memories keep the previous scenario's contents), an epilogue requantizes every ACC line and stores
    the whole ACT working set."""

    ACT, ACC, WB, PE = 96, 48, 4, 2

    def __init__(self, t: dict, rng, length: int):
        self.t, self.rng = t, rng
        self.n = n = t["array"]["rows"]
        self.peb = isa.param_entry_beats(n, t["bus"]["bytes"])
        self.model = TileModel(t)
        bank = t["scratchpad"]["wgt_bank_blocks"]
        self.blocks = [0, 1, bank, bank + 1]  # two blocks in each weight bank
        self.post_unit = bool(t["features"].get("post_unit"))
        self.dw_lines = t["scratchpad"].get("dw_line_buffer", 0) if t["features"].get("depthwise") else 0
        self.dw9 = t["features"]["dw_ninth_tap"]
        self.dw_post = t["features"]["dw_post"]
        if self.dw_post:   # PPU.dw reads three entries
            self.PE = 4
        # without the POST unit, PPU/VEC/FILL belong to the compute unit (and Wait.POST means nothing)
        self.unit = {op: (Wait.COMPUTE if u == Wait.POST and not self.post_unit else u) for op, u in UNIT.items()}
        units = (Wait.LOAD, Wait.COMPUTE, Wait.STORE) + ((Wait.POST,) if self.post_unit else ())
        self.pending = {u: (set(), set()) for u in units}
        img = programs.Image(t["bus"]["bytes"], length + 64)
        self.x_at = img.put(rng.integers(-128, 128, (4 * self.ACT, n)).astype(np.int8).tobytes())
        self.w_at = img.put(rng.integers(-128, 128, (4 * self.WB * n, n)).astype(np.int8).tobytes())
        entries = b""
        for _ in range(2 * self.PE):
            bias, mult, shift, z, lo, hi = programs.random_requant(rng, n, relu=bool(rng.integers(0, 2)))
            entries += isa.pack_param_entry(bias, mult, shift, z, lo, hi, n, t["bus"]["bytes"])
        self.p_at = img.put(entries)
        self.out_at = img.reserve(64 * self.ACT * n)
        self.out_next = self.out_at
        self.img = img
        self.prog: list[isa.Insn] = []
        self.recent = [(set(), set())] * isa.PPU_MAX_LAG   # footprints of the latest GEMMs (PPU.lag = k skips k)

    # footprints: sets of (memory, index)
    def _fp(self, op, f):
        rd, wr = set(), set()

        def grid(mem, base, no, so, ni, si):
            return {(mem, base + i * so + j * si) for i in range(no) for j in range(ni)}
        if op == Op.LOAD:
            mem = {Mem.ACT: "act", Mem.WGT: "wgt", Mem.PARAM: "param"}[f["mem"]]
            wr |= grid(mem, f["sram"], f["rows"], f["sram_stride"], f["row_beats"], 1)
        elif op == Op.STORE:
            rd |= grid("act", f["sram"], f["rows"], f["sram_stride"], f["row_beats"], 1)
        elif op == Op.GEMM:
            rd |= grid("act", f["act"], f["n_outer"], f["act_so"], f["n_inner"], f["act_si"])
            rd |= {("wgt", f["wblk"] * self.n + r) for r in range(self.n + f["dw9"])}   # dw9: + row N
            wr |= grid("acc", f["acc"], f["n_outer"], f["acc_so"], f["n_inner"] - f["skip"], f["acc_si"])
            if not f["reset"]:
                rd |= grid("acc", f["acc"], f["n_outer"], f["acc_so"], f["n_inner"] - f["skip"], f["acc_si"])
        elif op == Op.PPU:
            rd |= grid("acc", f["acc"], f["n_outer"], f["acc_so"], f["n_inner"], f["acc_si"])
            rd |= {("param", f["param"] * self.peb + b) for b in range(self.peb * (3 if f["dw"] else 1))}
            oo, oi = isa.ppu_out_dims(f["n_outer"], f["n_inner"], f["dws"], f["dwc"], f["dwf"])
            wr |= grid("act", f["out"], oo, f["out_so"], oi, f["out_si"])
        elif op == Op.VEC:
            rd |= grid("act", f["a"], f["n_outer"], f["in_so"], f["n_inner"], f["in_si"])
            rd |= grid("act", f["b"], f["n_outer"], f["in_so"], f["n_inner"], f["in_si"])
            rd |= {("param", f["param"] * self.peb + b) for b in range(self.peb)}
            wr |= grid("act", f["out"], f["n_outer"], f["out_so"], f["n_inner"], f["out_si"])
        elif op == Op.FILL:
            wr |= grid("act", f["addr"], f["rows"], f["stride"], f["count"], 1)
        return rd, wr

    def emit(self, op, extra_wait=Wait.NONE, /, **f) -> bool:
        """Append `op` with the wait bits its footprint needs (plus `extra_wait`); False if the model rejects it."""
        insn = isa.make(op, **f)
        fields = dict(insn.fields)
        if self.model.check(int(op), fields) != E.NONE:
            return False
        rd, wr = self._fp(op, fields)
        own = self.unit.get(op)
        wait = Wait(extra_wait)
        lag = fields.get("lag", 0) if op == Op.PPU and self.post_unit else 0
        lrd = set().union(*(f[0] for f in self.recent[len(self.recent) - lag:])) if lag else set()
        lwr = set().union(*(f[1] for f in self.recent[len(self.recent) - lag:])) if lag else set()
        for u, (urd, uwr) in self.pending.items():
            if lag and u == Wait.COMPUTE:  # PPU.lag = k covers every GEMM but the latest k
                if wr & (lrd | lwr) or rd & lwr:
                    return False
            elif u != own and (wr & (urd | uwr) or rd & uwr):
                wait |= u
        if op == Op.FINISH:
            wait = Wait.NONE
        for u in self.pending:
            if wait & u:
                self.pending[u] = (set(), set())
        if lag:
            self.pending[Wait.COMPUTE] = (lrd, lwr)
        if own is not None:
            self.pending[own][0].update(rd)
            self.pending[own][1].update(wr)
        if op == Op.GEMM:
            self.recent = self.recent[1:] + [(rd, wr)]
        self.prog.append(isa.make(op, wait, **f))
        return True

    def _range(self, limit, no, ni):
        """(base, so, si) with every base + i*so + j*si in [0, limit)."""
        r = self.rng
        for _ in range(100):
            so, si = int(r.integers(-6, 7)), int(r.integers(-3, 4))
            lo = min(0, (no - 1) * so) + min(0, (ni - 1) * si)
            hi = max(0, (no - 1) * so) + max(0, (ni - 1) * si)
            if hi - lo < limit:
                return int(r.integers(-lo, limit - hi)), so, si
        return 0, 0, 0

    def prologue(self):
        n, peb = self.n, self.peb
        self.emit(Op.LOAD, mem=Mem.ACT, dram=self.x_at, sram=0, rows=2, row_beats=self.ACT // 2,
                  dram_stride=self.ACT // 2, sram_stride=self.ACT // 2)
        for k, b in enumerate(self.blocks):
            self.emit(Op.LOAD, mem=Mem.WGT, dram=self.w_at + k * n, sram=b * n, rows=1, row_beats=n, dram_stride=0,
                      sram_stride=0)
        self.emit(Op.LOAD, mem=Mem.PARAM, dram=self.p_at, sram=0, rows=self.PE, row_beats=peb, dram_stride=peb,
                  sram_stride=peb)
        self.emit(Op.GEMM, wblk=self.blocks[0], act=0, acc=0, n_outer=1, n_inner=self.ACC, act_so=0, act_si=1,
                  acc_so=0, acc_si=1, reset=1)

    def body_insn(self):
        r, n = self.rng, self.n
        kind = r.choice(["load_act", "load_wgt", "load_param", "gemm", "gemm", "gemm_dw", "gemm_dw", "ppu", "vec",
                         "fill", "store", "nop"] + (["gemm_dwp", "gemm_dwp"] if self.dw_lines else [])
                        + (["ppu_dw", "ppu_dw"] if self.dw_post else []))
        no, ni = int(r.integers(1, 4)), int(r.integers(1, 9))
        if kind == "load_act":
            rows, rb = int(r.integers(1, 3)), int(r.integers(1, 9))
            return self.emit(Op.LOAD, mem=Mem.ACT, dram=self.x_at + int(r.integers(0, 3 * self.ACT)),
                             sram=int(r.integers(0, self.ACT - rows * rb + 1)),
                             rows=rows, row_beats=rb, dram_stride=int(r.integers(0, 20)), sram_stride=rb)
        if kind == "load_wgt":
            k = int(r.integers(0, len(self.blocks)))
            return self.emit(Op.LOAD, mem=Mem.WGT, dram=self.w_at + int(r.integers(0, 4 * self.WB - 1)) * n,
                             sram=self.blocks[k] * n, rows=1, row_beats=n, dram_stride=0, sram_stride=0)
        if kind == "load_param":
            e = int(r.integers(0, self.PE))
            return self.emit(Op.LOAD, mem=Mem.PARAM, dram=self.p_at + int(r.integers(0, 2 * self.PE)) * self.peb,
                             sram=e * self.peb, rows=1, row_beats=self.peb, dram_stride=0, sram_stride=0)
        if kind.startswith("gemm"):
            dw, dwp = int(kind != "gemm"), int(kind == "gemm_dwp")
            if dw and r.random() < 0.3:  # longer rows: lines leave the shift register (all N columns used)
                no, ni = 1, int(r.integers(n - 2, n + 7))
            if dwp:  # over rows: up to 4 rows of a pitch the row buffers hold (lines 1 and 2 rows back)
                no, ni = int(r.integers(1, 5)), int(r.integers(isa.DWP_MIN_PITCH, min(self.dw_lines, 13) + 1))
            skip = int(r.integers(0, min(ni, 8))) if dw else 0
            dw9 = int(dwp and self.dw9 and r.random() < 0.5)   # GEMM.dw9: the ninth PE, row N of the block
            if dw9:  # at least 3 rows: the ninth PE's line (2 rows and 2 lines back) is in the GEMM
                no = int(r.integers(3, 5))
            act, act_so, act_si = self._range(self.ACT, no, ni)
            acc, acc_so, acc_si = self._range(self.ACC, no, ni - skip)
            if acc_so < 0 or acc_si < 0:   # ACC strides are unsigned
                acc, acc_so, acc_si = int(r.integers(0, self.ACC - (ni - skip))), 0, 1
                if no > 1 and acc + (ni - skip) + no - 1 <= self.ACC:
                    acc_so = 1
            # (dw9 reads the next block's first row: both in the working set, which the prologue wrote)
            wblk = int(r.choice([b for b in self.blocks if not dw9 or b + 1 in self.blocks]))
            return self.emit(Op.GEMM, wblk=wblk, act=act, acc=acc, n_outer=no, n_inner=ni,
                             act_so=act_so, act_si=act_si, acc_so=acc_so, acc_si=acc_si,
                             reset=int(r.integers(0, 2)), dw=dw, skip=skip, dwp=dwp, dw9=dw9)
        if kind == "ppu_dw":   # PPU.dw: a tile of up to 5 rows, a row pitch (n_inner + 1) the row buffers hold,
            # stride 1 or 2 (either phase), context rows or not
            no, ni = int(r.integers(1, 6)), int(r.integers(isa.DWP_MIN_PITCH - 1, min(self.dw_lines, 12)))
            dws = int(r.choice([0, 2, 3]))
            dwc = int(r.integers(0, 4)) if r.random() < 0.5 else 0
            dwf = 0
            if r.random() < 0.7:   # stacked: 2 or 4 pixels a line, in turn (stride 2: 2 only)
                self.dwf_next = dwf = 3 - getattr(self, "dwf_next", 2)
                dwf = 1 if dws else dwf
            while not isa.ppu_dw_rows(no, dws, dwc):
                no += 1
            acc, acc_so, acc_si = self._range(self.ACC, no, ni)
            if acc_so < 0 or acc_si < 0:
                acc, acc_so, acc_si = int(r.integers(0, self.ACC - ni)), 0, 1
            out, out_so, out_si = self._out(*isa.ppu_out_dims(no, ni, dws, dwc, dwf), set())
            return self.emit(Op.PPU, acc=acc, out=out, n_outer=no, n_inner=ni, acc_so=acc_so, acc_si=acc_si,
                             out_so=out_so, out_si=out_si, param=int(r.integers(0, self.PE - 2)), dw=1, dws=dws,
                             dwc=dwc, dwf=dwf,
                             lag=int(r.integers(1, isa.PPU_MAX_LAG + 1)) if r.random() < 0.5 else 0)
        if kind == "ppu":
            acc, acc_so, acc_si = self._range(self.ACC, no, ni)
            if acc_so < 0 or acc_si < 0:
                acc, acc_so, acc_si = int(r.integers(0, self.ACC - ni)), 0, 1
            out, out_so, out_si = self._out(no, ni, set())
            return self.emit(Op.PPU, acc=acc, out=out, n_outer=no, n_inner=ni, acc_so=acc_so, acc_si=acc_si,
                             out_so=out_so, out_si=out_si, param=int(r.integers(0, self.PE)),
                             lag=int(r.integers(1, isa.PPU_MAX_LAG + 1)) if self.post_unit and r.random() < 0.5 else 0)
        if kind == "vec":
            a, so, si = self._range(self.ACT, no, ni)
            b = int(r.integers(0, self.ACT))
            lines = lambda base: {base + i * so + j * si for i in range(no) for j in range(ni)}
            if not all(0 <= v < self.ACT for v in lines(b)):
                b = a
            out, out_so, out_si = self._out(no, ni, lines(a) | lines(b))
            return self.emit(Op.VEC, op=int(r.integers(0, 2)), a=a, b=b, out=out, n_outer=no, n_inner=ni,
                             in_so=so, in_si=si, out_so=out_so, out_si=out_si, param=int(r.integers(0, self.PE)))
        if kind == "fill":  # one run, or strided runs (a halo: a row's right pad and the next row's left pad)
            count, rows = int(r.integers(1, 12)), int(r.integers(1, 5)) if r.random() < 0.5 else 1
            stride = int(r.integers(count, count + 6)) if rows > 1 else 0
            return self.emit(Op.FILL, addr=int(r.integers(0, self.ACT - count - (rows - 1) * stride)), count=count,
                             value=int(r.integers(0, 256)), rows=rows, stride=stride)
        if kind == "store":
            rows, rb = int(r.integers(1, 3)), int(r.integers(1, 9))
            ok = self.emit(Op.STORE, dram=self.out_next, sram=int(r.integers(0, self.ACT - 2 * rb)), rows=rows,
                           row_beats=rb, dram_stride=rb, sram_stride=rb)
            self.out_next += rows * rb
            return ok
        return self.emit(Op.NOP, Wait(int(r.integers(0, 16))))

    def _out(self, no, ni, avoid):
        """An output range in ACT disjoint from `avoid` (the unspecified overlaps of docs/tile.md)."""
        for _ in range(50):
            base, so, si = self._range(self.ACT, no, ni)
            if not {base + i * so + j * si for i in range(no) for j in range(ni)} & avoid:
                return base, so, si
        return self.ACT - 1, 0, 0  # the last line

    def epilogue(self):
        self.emit(Op.PPU, acc=0, out=0, n_outer=1, n_inner=self.ACC, acc_so=0, acc_si=1, out_so=0, out_si=1,
                  param=0)
        self.emit(Op.STORE, dram=self.out_next, sram=0, rows=1, row_beats=self.ACT, dram_stride=0, sram_stride=0)
        self.emit(Op.FINISH)

    def build(self, length: int, name: str) -> programs.Workload:
        self.prologue()
        while len(self.prog) < length:
            self.body_insn()
        self.epilogue()
        assert len(self.prog) + 1 < length + 64
        return programs.Workload(name, self.prog, self.img.finish(self.prog), 0)


def random_workloads(t: dict, count: int, seed: int) -> list[programs.Workload]:
    return [RandomProgram(t, np.random.default_rng(seed + k), 40).build(40, f"rand{k}") for k in range(count)]


def bad_workload(t: dict, name: str, bad: isa.Insn) -> programs.Workload:
    """FILL; STORE it to d0; <bad>; STORE it to d0 + 8 (never runs); FINISH (as tests/test_tile_rtl.py)."""
    n = t["array"]["rows"]
    d0 = -(-5 * isa.INSN_BYTES // n)
    prog = [isa.make(Op.FILL, addr=0, count=4, value=5),
            isa.make(Op.STORE, Wait.POST, dram=d0, sram=0, rows=1, row_beats=4, dram_stride=0, sram_stride=0),
            bad,
            isa.make(Op.STORE, Wait.STORE, dram=d0 + 8, sram=0, rows=1, row_beats=4, dram_stride=0, sram_stride=0),
            isa.make(Op.FINISH)]
    wl = programs.with_program(t, prog, 4096, name)
    wl.expect = [(d0 * n, bytes([5]) * 4 * n + bytes(16 * n))]
    return wl


#: v2 pre-decode rule (docs/tile-v2.md): skip >= n_inner, skip without dw, and the ACC range of n_inner - skip
V2_ERRORS = {"err_skip_ge_inner": (dict(dw=1, skip=3), E.BAD_FIELD),
             "err_skip_without_dw": (dict(dw=0, skip=1), E.BAD_FIELD),
             "err_dw_acc_oor": (dict(acc=-3, n_inner=6, dw=1, skip=2), E.OUT_OF_RANGE),
             # GEMM.dwp: only in the depthwise mode, with a row pitch (n_inner) of 4 .. dw_line_buffer lines
             "err_dwp_without_dw": (dict(dw=0, dwp=1, n_inner=6), E.BAD_FIELD),
             "err_dwp_short_pitch": (dict(dw=1, dwp=1, n_inner=isa.DWP_MIN_PITCH - 1), E.BAD_FIELD),
             "err_dwp_long_pitch": (dict(dw=1, dwp=1, n_inner=-1), E.BAD_FIELD),
             # GEMM.dw9 (features.dw_ninth_tap): only with dwp, and the next block (its row N) in WGT
             "err_dw9_without_dwp": (dict(dw=1, dw9=1, n_inner=6), E.BAD_FIELD),
             "err_dw9_last_block": (dict(dw=1, dwp=1, dw9=1, n_inner=6, wblk=-1), E.OUT_OF_RANGE)}


def v2_error_workloads(t: dict) -> list[programs.Workload]:
    out = []
    for name, (kw, _) in V2_ERRORS.items():
        g = {**dict(wblk=0, act=0, acc=0, n_outer=1, n_inner=3, act_so=0, act_si=1, acc_so=0, acc_si=1, reset=1),
             **kw}
        if g["wblk"] < 0:  # the last block
            g["wblk"] = 2 * t["scratchpad"]["wgt_bank_blocks"] - 1
        if name == "err_dw9_last_block" and not t["features"]["dw_ninth_tap"]:
            continue   # (without the ninth PE any dw9 is a BAD_FIELD: err_dw9_without_dwp)
        if g["n_inner"] < 0:  # one line longer than the row buffers
            g["n_inner"] = t["scratchpad"]["dw_line_buffer"] + 1
        if g["acc"] < 0:  # the last n_inner - skip + 1 ACC lines: one too many
            g["acc"] = t["scratchpad"]["acc_lines"] - (g["n_inner"] - g["skip"]) + 1
        out.append(bad_workload(t, name, isa.make(Op.GEMM, **g)))
    # the same GEMM with one skip more fits: not an error (the range check counts n_inner - skip writes)
    g = dict(wblk=0, act=0, acc=t["scratchpad"]["acc_lines"] - 3, n_outer=1, n_inner=6, act_so=0, act_si=1,
             acc_so=0, acc_si=1, reset=1, dw=1, skip=3)
    ok = bad_workload(t, "ok_dw_acc_fits", isa.make(Op.GEMM, **g))
    four = 4 * t["array"]["rows"]  # both STOREs ran: lines d0 .. d0 + 3 and d0 + 8 .. d0 + 11
    ok.expect = [(ok.expect[0][0], bytes([5]) * four + bytes(four) + bytes([5]) * four)]
    out.append(ok)
    return out


def lag_workload(t: dict, lag: int = 1) -> programs.Workload:
    """PPU.lag as the scheduler uses it: pixel tiles alternating accumulator halves, each tile's PPU behind
    the next tile's first `lag` GEMMs (waiting for the GEMMs before those only), the first waiting for POST.
    Short GEMMs (4 lines), so that the PPU's wait decides when the next GEMM issues, and tiles of 8, longer than a
    PPU, so that POST does not."""
    rp = RandomProgram(t, np.random.default_rng(7), 64)
    rp.prologue()
    half, lines = rp.ACC // 2, 4
    for tile in range(5):
        acc = (tile % 2) * half
        for k in range(8):
            assert rp.emit(Op.GEMM, Wait.POST if k == 0 and tile else Wait.NONE, wblk=rp.blocks[k % 4],
                           act=(7 * tile + 3 * k) % (rp.ACT - lines), acc=acc, n_outer=1, n_inner=lines, act_so=0,
                           act_si=1, acc_so=0, acc_si=1, reset=int(k == 0))
            if k == lag - 1 and tile:
                prev = ((tile - 1) % 2) * half
                assert rp.emit(Op.PPU, acc=prev, out=60 + 12 * (tile % 2), n_outer=1, n_inner=lines, acc_so=0,
                               acc_si=1, out_so=0, out_si=1, param=tile % 2, lag=lag)
    rp.epilogue()
    return programs.Workload("lag" if lag == 1 else f"lag{lag}", rp.prog, rp.img.finish(rp.prog), 0)


def fixed_workloads(t: dict) -> list[programs.Workload]:
    rng = np.random.default_rng(5)
    return [programs.matmul(t, rng, 16, 24, 16, overlap=True, relu=True, name="mm"),
            programs.pool_sum(t, rng, pixels=33, name="pool"),
            programs.vec(t, rng, lines=6, name="vec")] + [lag_workload(t, k) for k in range(1, isa.PPU_MAX_LAG + 1)]


def ppu_dw_without_feature(t: dict) -> programs.Workload:
    """A PPU with dw = 1 on a tile without features.dw_post (a BAD_FIELD error)."""
    return bad_workload(t, "err_ppu_dw_without_feature", isa.make(Op.PPU, acc=0, out=0, n_outer=2, n_inner=5,
                                                                  acc_so=5, acc_si=1, out_so=5, out_si=1, param=0,
                                                                  dw=1))


def workloads(t: dict) -> list[programs.Workload]:
    return (fixed_workloads(t) + random_workloads(t, N_RANDOM, seed=100) + v2_error_workloads(t)
            + [ppu_dw_without_feature(t)])


def _model_and_rtl(t, out, wls):
    """Every workload through the Python model ((result, memory image after) per name) and through
    out/tile.v under Icarus (the cocotb results per name)."""
    models, scenarios = {}, []
    for w in wls.values():
        dram = bytearray(w.dram)
        models[w.name] = (TileModel(t).run(None, dram, w.prog_addr), dram)
        scenarios.append(Scenario(w.name, bytes(w.dram), w.prog_addr, expect_cycles=models[w.name][0].cycles))
    return models, run_scenarios(t, out / "tile.v", scenarios, workdir=out / "work", build_root=out / "build")


@pytest.fixture(scope="module")
def rtl(tmp_path_factory):
    t = v2("tile8x8")
    out = tmp_path_factory.mktemp("hw_tile8x8_v2")
    generate(t, out)
    wls = {w.name: w for w in workloads(t)}
    models, results = _model_and_rtl(t, out, wls)
    return t, out, wls, models, results


def _check_against_model(res, model, model_dram):
    assert res["done"] and not res["error"] and not res["timeout"], res["mismatches"]
    assert res["after"] == bytes(model_dram), "RTL memory image differs from the model's"
    assert res["cycles"] == model.cycles == res["cycle_counter"]
    assert [pc for pc, _ in res["issues"]] == list(range(model.insns))
    assert [c for _, c in res["issues"]] == model.issue.tolist(), "issue cycles differ from the model"
    assert res["unit_busy"] == [model.busy[u] for u in ("load", "compute", "store", "post")]


@pytest.mark.parametrize("name", ["mm", "pool", "vec", "lag", "lag2", "lag3"])
def test_v2_fixed_workloads_bit_exact_and_cycles_equal_model(rtl, name):
    t, _, wls, models, results = rtl
    res, wl = results[name], wls[name]
    assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect], "differs from numpy"
    _check_against_model(res, *models[name])


@pytest.mark.parametrize("k", range(N_RANDOM))
def test_v2_random_programs_equal_model(rtl, k):
    t, _, wls, models, results = rtl
    name = f"rand{k}"
    _check_against_model(results[name], *models[name])


def test_v2_random_programs_cover_the_v2_features(rtl):
    """The random programs run GEMMs in depthwise mode with skips, POST work beside streaming GEMMs, and
    the port-B interlocks (a LOAD into ACT, a STORE or a POST instruction held back by another)."""
    t, _, wls, models, results = rtl
    dw = skips = overlap = lag = lag_waited = deep = deep_waited = 0
    for name in [f"rand{k}" for k in range(N_RANDOM)] + ["lag", "lag2", "lag3"]:
        prog, m = wls[name].program, models[name][0]
        dw += sum(1 for i in prog if i.op == Op.GEMM and i.get("dw"))
        skips += sum(1 for i in prog if i.op == Op.GEMM and i.get("skip"))
        gemms = [(m.issue[j], m.end[j]) for j, i in enumerate(prog) if i.op == Op.GEMM]
        posts = [m.issue[j] for j, i in enumerate(prog) if i.op in (Op.PPU, Op.VEC, Op.FILL)]
        overlap += sum(1 for p in posts if any(s < p < e for s, e in gemms))
        # PPU.lag: issued while the latest GEMM still runs, right after an older one ended
        for j, i in enumerate(prog):
            if i.op == Op.PPU and i.get("lag"):
                waited = any(e + 1 == m.issue[j] for _, e in gemms)
                lag += 1
                lag_waited += waited
                deep += i.get("lag") >= 2     # behind two or three GEMMs that may still run
                deep_waited += waited and i.get("lag") >= 2
    assert dw >= 20 and skips >= 10 and overlap >= 10 and lag >= 10 and lag_waited >= 2, \
        (dw, skips, overlap, lag, lag_waited)
    assert deep >= 8 and deep_waited >= 4, (deep, deep_waited)
    strided = [i for k in range(N_RANDOM) for i in wls[f"rand{k}"].program if i.op == Op.FILL and i.get("rows") > 1]
    assert len(strided) >= 5, len(strided)
    dwp = [i for k in range(N_RANDOM) for i in wls[f"rand{k}"].program if i.op == Op.GEMM and i.get("dwp")]
    assert len(dwp) >= 10 and any(i.get("n_outer") > 2 for i in dwp), len(dwp)   # lines two rows back
    assert sum(1 for i in dwp if i.get("dw9")) >= 5, dwp    # GEMM.dw9: the ninth PE (features.dw_ninth_tap)


@pytest.mark.parametrize("name", sorted(V2_ERRORS))
def test_v2_predecode_errors_halt_without_writing(rtl, name):
    t, _, wls, models, results = rtl
    res, wl = results[name], wls[name]
    model = models[name][0]
    assert res["error"] and not res["done"]
    assert res["error_code"] == V2_ERRORS[name][1] == model.error
    assert res["error_pc"] == 2 == model.error_pc
    assert [pc for pc, _ in res["issues"]] == [0, 1]
    assert res["cycles"] == model.cycles
    assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect]


def test_v2_dw_gemm_whose_written_lines_fit_runs(rtl):
    t, _, wls, models, results = rtl
    res, wl = results["ok_dw_acc_fits"], wls["ok_dw_acc_fits"]
    assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect]
    _check_against_model(res, *models["ok_dw_acc_fits"])


@pytest.fixture(scope="module", params=["post_unit", "depthwise"])
def rtl_one_feature(request, tmp_path_factory):
    """The features are independent: a tile with only one of them (the other unit organization or GEMM)."""
    t = v2("tile8x8", {"post_unit": False, "depthwise": False, request.param: True})
    out = tmp_path_factory.mktemp(f"hw_tile8x8_{request.param}")
    generate(t, out)
    wls = {w.name: w for w in fixed_workloads(t) + random_workloads(t, 4, seed=300)}
    models, results = _model_and_rtl(t, out, wls)
    return t, wls, models, results


def test_one_feature_tiles_equal_model(rtl_one_feature):
    t, wls, models, results = rtl_one_feature
    units = ("load", "compute", "store") + (("post",) if t["features"]["post_unit"] else ())
    if t["features"]["depthwise"]:
        assert sum(1 for w in wls.values() for i in w.program if i.op == Op.GEMM and i.get("dw")) >= 8
    for name, wl in wls.items():
        res, (model, model_dram) = results[name], models[name]
        assert res["done"] and not res["error"] and not res["timeout"], (name, res["mismatches"])
        assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect], name
        assert res["after"] == bytes(model_dram), f"{name}: RTL memory image differs from the model's"
        assert res["cycles"] == model.cycles == res["cycle_counter"], name
        assert [c for _, c in res["issues"]] == model.issue.tolist(), name
        assert res["unit_busy"] == [model.busy[u] for u in units], name


def _generated_and_run(tmp_path_factory, t: dict, tag: str, workload_list) -> tuple:
    """tile.v of target t generated into a new folder, the workloads through the model and the RTL:
    (t, workloads by name, model results, RTL results)."""
    out = tmp_path_factory.mktemp(tag)
    generate(t, out)
    wls = {w.name: w for w in workload_list}
    models, results = _model_and_rtl(t, out, wls)
    return t, wls, models, results


@pytest.fixture(scope="module")
def rtl32(tmp_path_factory):
    t = v2("tile32x32")
    return _generated_and_run(tmp_path_factory, t, "hw_tile32x32_v2",
                              random_workloads(t, 3, seed=500) + v2_error_workloads(t))


def test_v2_tile32x32_equals_model(rtl32):
    """The v2 tile32x32: random programs (depthwise rows longer than N included, and PPU.dw: the bundled tile32x32
    has the depthwise stage in the post-processing) and the BAD_FIELD cases."""
    t, wls, models, results = rtl32
    assert t["features"]["dw_post"] and any(i.op == Op.PPU and i.get("dw") for k in range(3)
                                            for i in wls[f"rand{k}"].program)
    assert any(i.op == Op.GEMM and i.get("dw") and i.get("n_inner") > t["array"]["rows"]
               for k in range(3) for i in wls[f"rand{k}"].program)
    for name, wl in wls.items():
        res, (model, model_dram) = results[name], models[name]
        if name in V2_ERRORS:
            assert res["error"] and res["error_code"] == V2_ERRORS[name][1] == model.error, name
            assert res["cycles"] == model.cycles and [pc for pc, _ in res["issues"]] == [0, 1], name
            assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect], name
        else:
            _check_against_model(res, model, model_dram)


@pytest.fixture(scope="module", params=[2, 8])
def rtl_wide_preload(request, tmp_path_factory):
    """scratchpad.wgt_read_rows: the preload reads R weight rows a cycle (R memories per WGT bank), a block in
    N / R cycles; R = N loads a whole block in one cycle."""
    t = tile_variant(v2("tile8x8"), wgt_read_rows=request.param)
    return _generated_and_run(tmp_path_factory, t, f"hw_tile8x8_r{request.param}",
                              fixed_workloads(t) + random_workloads(t, 4, seed=700 + request.param))


def test_wide_preload_tiles_equal_model(rtl_wide_preload):
    """Bit-exact against numpy (the fixed workloads) and the model's memory image, with the model's cycles,
    issue cycles and busy cycles: GEMMs back to back now start PRELOAD + 1 = N / R + 1 cycles after issue."""
    t, wls, models, results = rtl_wide_preload
    assert isa.Timing.from_target(t).PRELOAD == t["array"]["rows"] // t["scratchpad"]["wgt_read_rows"]
    for name, wl in wls.items():
        res, (model, model_dram) = results[name], models[name]
        assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect], name
        _check_against_model(res, model, model_dram)


#: PPU.dw (features.dw_post): a row pitch (n_inner + 1) outside 4 .. dw_line_buffer, and three entries past the end
DW_POST_ERRORS = {"err_ppu_dw_short_pitch": (dict(n_inner=isa.DWP_MIN_PITCH - 2), E.BAD_FIELD),
                  "err_ppu_dws_1": (dict(dws=1), E.BAD_FIELD),
                  "err_ppu_dws_without_dw": (dict(dw=0, dws=2), E.BAD_FIELD),
                  # stride 2 writes 3 x 3 outputs of the 5 x 5 tile (out_so 5): lines out .. out + 12
                  "err_ppu_dws_out": (dict(n_outer=5, dws=2, out=-12), E.OUT_OF_RANGE),
                  "err_ppu_dw_long_pitch": (dict(n_inner=-1), E.BAD_FIELD),
                  "err_ppu_dw_param": (dict(param=-2), E.OUT_OF_RANGE),
                  "err_ppu_dwc_without_dw": (dict(dw=0, dwc=1), E.BAD_FIELD),
                  # two rows, both context: no output row; three, stride 2 from the first, the middle one context
                  "err_ppu_dwc_no_rows": (dict(dwc=3), E.BAD_FIELD),
                  "err_ppu_dwc_no_phase_rows": (dict(n_outer=3, dws=2, dwc=3), E.BAD_FIELD),
                  # context rows write fewer rows: 3 of the 5 (out_so 5), lines out .. out + 14
                  "err_ppu_dwc_out": (dict(n_outer=5, dwc=3, out=-14), E.OUT_OF_RANGE),
                  # stacked pixels: 1, 2 or 4 a line; stride 1 only
                  "err_ppu_dwf_3": (dict(dwf=3), E.BAD_FIELD),
                  "err_ppu_dwf_stride_2": (dict(dwf=2, dws=2), E.BAD_FIELD),
                  "err_ppu_dwf_without_dw": (dict(dw=0, dwf=1), E.BAD_FIELD)}


def dw_post_error_workloads(t: dict) -> list[programs.Workload]:
    out = []
    for name, (kw, _) in DW_POST_ERRORS.items():
        f = {**dict(acc=0, out=0, n_outer=2, n_inner=5, acc_so=5, acc_si=1, out_so=5, out_si=1, param=0, dw=1), **kw}
        if f["n_inner"] < 0:   # a pitch one line longer than the row buffers
            f["n_inner"] = t["scratchpad"]["dw_line_buffer"]
        if f["param"] < 0:     # entries param + 1 and param + 2: the last one is past the end
            f["param"] = t["scratchpad"]["param_entries"] + f["param"]
        if f["out"] < 0:       # this many lines before the end of ACT
            f["out"] += t["scratchpad"]["act_lines"]
        out.append(bad_workload(t, name, isa.make(Op.PPU, **f)))
    # one line lower the stride-2 outputs fit (the range check counts them, not the tile's 5 x 5): not an error
    f = dict(acc=0, out=t["scratchpad"]["act_lines"] - 13, n_outer=5, n_inner=5, acc_so=5, acc_si=1, out_so=5,
             out_si=1, param=0, dw=1, dws=2)
    four = 4 * t["array"]["rows"]  # both STOREs ran: lines d0 .. d0 + 3 and d0 + 8 .. d0 + 11
    ok = bad_workload(t, "ok_ppu_dws_fits", isa.make(Op.PPU, **f))
    ok.expect = [(ok.expect[0][0], bytes([5]) * four + bytes(four) + bytes([5]) * four)]
    out.append(ok)
    # nor are the 3 rows of a 5-row tile with both context rows one line lower (lines out .. out + 14)
    f = dict(f, out=t["scratchpad"]["act_lines"] - 15, dws=0, dwc=3)
    ok = bad_workload(t, "ok_ppu_dwc_fits", isa.make(Op.PPU, **f))
    ok.expect = [(ok.expect[0][0], bytes([5]) * four + bytes(four) + bytes([5]) * four)]
    out.append(ok)
    return out


@pytest.fixture(scope="module")
def rtl_dw_post(tmp_path_factory):
    t = tile_variant(v2("tile8x8"), dw_post=True)
    return _generated_and_run(tmp_path_factory, t, "hw_tile8x8_dwpost",
                              random_workloads(t, 6, seed=900) + dw_post_error_workloads(t))


def test_ppu_dw_equals_model(rtl_dw_post):
    """features.dw_post (docs/tile-v2.md, "Depthwise in the post-processing"): random programs with PPU.dw among the
    other v2 instructions, bit-exact with the model's memory image and cycle-exact (issue cycles, busy cycles);
    the pre-decode's BAD_FIELD and OUT_OF_RANGE cases of PPU.dw as the model's."""
    t, wls, models, results = rtl_dw_post
    ppus = [i for k in range(6) for i in wls[f"rand{k}"].program if i.op == Op.PPU and i.get("dw")]
    assert len(ppus) >= 6 and {i.get("dws") for i in ppus} == {0, 2, 3}
    # (PPU.dw after PPU.dw, "PPU.dw after PPU.dw": some issue while the one before drains, on the model's timeline;
    # the RTL's issue cycles are compared below)
    overlapped = 0
    for k in range(6):
        prog, model = wls[f"rand{k}"].program, models[f"rand{k}"][0]
        post = [j for j, i in enumerate(prog[:model.insns]) if i.op in (Op.PPU, Op.VEC, Op.FILL)]
        dw = {j for j in post if prog[j].op == Op.PPU and prog[j].get("dw")}
        overlapped += sum(1 for a, b in zip(post, post[1:]) if a in dw and b in dw and model.issue[b] <= model.end[a])
    assert overlapped >= 2, overlapped
    for name, wl in wls.items():
        res, (model, model_dram) = results[name], models[name]
        if name in DW_POST_ERRORS:
            assert res["error"] and res["error_code"] == DW_POST_ERRORS[name][1] == model.error, name
            assert res["cycles"] == model.cycles and [pc for pc, _ in res["issues"]] == [0, 1], name
        elif name.startswith("ok_"):
            assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect], name
            _check_against_model(res, model, model_dram)
        else:
            _check_against_model(res, model, model_dram)


def test_ppu_dw_is_a_bad_field_without_the_feature(rtl):
    """Without features.dw_post a PPU with dw = 1 is a BAD_FIELD error, in the model and the RTL's pre-decode, and
    halts before anything after it runs."""
    t, _, wls, models, results = rtl
    name = "err_ppu_dw_without_feature"
    assert not t["features"]["dw_post"]
    res, (model, _), wl = results[name], models[name], wls[name]
    assert res["error"] and res["error_code"] == model.error == E.BAD_FIELD
    assert res["cycles"] == model.cycles and [pc for pc, _ in res["issues"]] == [0, 1]
    assert [res["after"][a:a + len(b)] for a, b in wl.expect] == [b for _, b in wl.expect]
