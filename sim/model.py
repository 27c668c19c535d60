"""The fast Python tile model: bit-exact results and exact cycle counts, per instruction.

`TileModel(target).run(program, dram, prog_addr)` executes an instruction stream the way
the RTL does (docs/tile.md): every instruction's data effect is one numpy operation over
its whole 2-D loop (never a Python loop per line or per cycle), using the integer
arithmetic of hwc/quant/arith.py; its issue, start and end cycles are closed forms of the
earlier instructions' (hwc.isa.Timing). The RTL testbenches check both against the
generated Verilog, instruction by instruction.

Conventions (the same as the RTL's ports):
- `dram` is the external memory image (bytes; beats of `bus.bytes`); the program is read
  from `dram` at instruction index `prog_addr` (byte address `prog_addr * 16`), and
  `program`, if given, is first written there.
- Data semantics are program order. The hardware runs LOAD, COMPUTE and STORE
  concurrently, so a program must order dependent instructions with wait masks; an
  instruction whose writes overlap its own later reads (e.g. a VEC whose `out` lines are
  read as `a` by a later iteration) is unspecified, except exact in-place (same iteration).
- Cycle 0 is the first cycle after `start`; `cycles` is the cycle `done` rises (or the
  cycle after the faulting instruction reached the head, on an error), equal to the RTL's
  cycle counter.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from hwc import isa
from hwc.quant import arith

Op, Mem, E = isa.Op, isa.Mem, isa.ErrorCode
EXT_BEATS = 1 << isa.LAYOUT[Op.LOAD]["dram"][1].width
_W_LOAD, _W_COMPUTE, _W_STORE, _W_POST = (int(isa.Wait.LOAD), int(isa.Wait.COMPUTE), int(isa.Wait.STORE),
                                          int(isa.Wait.POST))


class ModelError(ValueError):
    """The program or memory image is outside what the model can run (not a tile error)."""


@dataclass
class Result:
    cycles: int                       # cycle `done` (or the error flag) rises, = the RTL cycle counter
    done: bool
    error: isa.ErrorCode
    error_pc: int | None
    ops: np.ndarray                   # opcode per executed instruction
    issue: np.ndarray                 # issue cycle per instruction
    start: np.ndarray                 # cycle its unit starts it (GEMM: its stream start)
    end: np.ndarray                   # cycle its unit is free of it (idle from then on if nothing follows)
    busy: dict[str, int] = field(default_factory=dict)  # cycles each unit was busy: [issue + 1, end), united
    bytes_loaded: int = 0
    bytes_stored: int = 0
    macs: int = 0                     # N*N per streamed GEMM line
    insns: int = 0

    def summary(self) -> str:
        state = "done" if self.done else f"error {self.error.name} at pc {self.error_pc}"
        return (f"{self.insns} instructions, {self.cycles} cycles, {state}; busy "
                + ", ".join(f"{k} {v}" for k, v in self.busy.items())
                + f"; {self.bytes_loaded} B loaded, {self.bytes_stored} B stored, {self.macs} MACs")


class _Busy:
    """Union length of in-order busy intervals [s, e)."""

    def __init__(self):
        self.total = 0
        self.until = 0

    def add(self, s: int, e: int) -> None:
        s = max(s, self.until)
        if e > s:
            self.total += e - s
            self.until = e


def _decoders():
    """op -> tuple of (name, lsb, mask, sign bit or 0): field extraction without isa.decode's objects."""
    out = {}
    for op, table in isa.LAYOUT.items():
        out[int(op)] = tuple((name, pos, (1 << f.width) - 1, (1 << (f.width - 1)) if f.signed else 0)
                             for name, (pos, f) in table.items())
    return out


_FIELDS = _decoders()
_OPS = {int(o) for o in Op}


def _grid(base: int, no: int, so: int, ni: int, si: int) -> np.ndarray | slice:
    """Addresses base + i*so + j*si (i outer), as a slice when they are an increasing
    arithmetic progression (the common case: no index arrays), else a flat int64 array."""
    if ni == 1:
        step, count = so, no
    elif no == 1 or so == ni * si:
        step, count = si, no * ni
    else:
        step = count = 0
    if step > 0:
        return slice(base, base + (count - 1) * step + 1, step)
    return (base + np.arange(no, dtype=np.int64)[:, None] * so + np.arange(ni, dtype=np.int64)[None, :] * si).ravel()


def _range_ok(base: int, no: int, so: int, ni: int, si: int, limit: int) -> bool:
    po, pi = (no - 1) * so, (ni - 1) * si
    return base + min(0, po) + min(0, pi) >= 0 and base + max(0, po) + max(0, pi) < limit


def _last_wins(idx: np.ndarray | slice) -> np.ndarray | None:
    """Positions to keep so that a scatter with repeated indices keeps the last write (None: all unique)."""
    if isinstance(idx, slice) or idx.size < 2:
        return None
    d = np.diff(idx)
    if (d > 0).all() or (d < 0).all():
        return None
    _, first_rev = np.unique(idx[::-1], return_index=True)
    return np.sort(idx.size - 1 - first_rev)


def _scatter(dst: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    keep = _last_wins(idx)
    if keep is None:
        dst[idx] = vals
    else:
        dst[idx[keep]] = vals[keep]


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _one_blas_thread():
    """The model's products are small (blocks N wide): measured on a tile32x32 program, a second BLAS thread made
    it 2x slower with the other core busy (its threads spin) and 7% slower with the core idle."""
    return _blas_controller().limit(limits=1, user_api="blas")


class TileModel:
    def __init__(self, target: dict):
        if target.get("kind") != "tile":
            raise ModelError(f"TileModel needs a tile target, not {target.get('name')!r}")
        self.target = target
        self.t = isa.Timing.from_target(target)
        sp = target["scratchpad"]
        self.n = target["array"]["rows"]
        self.beat = target["bus"]["bytes"]
        self.act_lines, self.acc_lines = sp["act_lines"], sp["acc_lines"]
        self.wgt_blocks = 2 * sp["wgt_bank_blocks"]
        self.wgt_rows = self.wgt_blocks * self.n
        self.param_entries = sp["param_entries"]
        self.param_beats = self.param_entries * self.t.PARAM_ENTRY_BEATS
        feats = target["features"]  # (validated: hwc/targets/tile_schema.py fills the defaults)
        self.post_unit = feats["post_unit"]    # docs/tile-v2.md: PPU/VEC/FILL in their own unit
        self.depthwise = feats["depthwise"]    # docs/tile-v2.md: GEMM.dw
        self.dw_lines = sp["dw_line_buffer"]   # GEMM.dwp: rows of up to this
        self.dw9 = feats["dw_ninth_tap"]       # GEMM.dw9: a ninth PE per row over rows
        self.dw_post = feats["dw_post"]        # PPU.dw: a 3x3 depthwise stage after the requantization
        self.reset()

    def reset(self) -> None:
        """Clear the on-chip memories (the RTL's power-on state: all zero)."""
        n = self.n
        self.act = np.zeros((self.act_lines, n), np.int8)
        self.acc = np.zeros((self.acc_lines, n), np.int32)
        self.wgt = np.zeros((self.wgt_rows, n), np.int8)
        self.param = np.zeros((self.param_beats, self.beat), np.uint8)

    # ---- checks (identical to the RTL's pre-decode, hw/fetch.py) ----
    def check(self, op: int, f: dict) -> isa.ErrorCode:
        if op not in _OPS:
            return E.ILLEGAL_OPCODE
        if op == Op.LOAD:
            counts, bad = (f["rows"], f["row_beats"]), f["mem"] > max(Mem)
        elif op == Op.STORE:
            counts, bad = (f["rows"], f["row_beats"]), False
        elif op == Op.GEMM:
            counts = (f["n_outer"], f["n_inner"])
            bad = bool(f["dw"] and (not self.depthwise or f["skip"] >= f["n_inner"])) or bool(f["skip"] and not f["dw"])
            bad = bad or bool(f["dwp"] and not (f["dw"] and isa.DWP_MIN_PITCH <= f["n_inner"] <= self.dw_lines))
            bad = bad or bool(f["dw9"] and not (f["dwp"] and self.dw9))
        elif op == Op.PPU:
            counts = (f["n_outer"], f["n_inner"])
            bad = bool(f["dw"] and not (self.dw_post and isa.DWP_MIN_PITCH <= f["n_inner"] + 1 <= self.dw_lines))
            bad = bad or bool(f["dws"] and (not f["dw"] or f["dws"] == 1))
            bad = bad or bool(f["dwc"] and not (f["dw"] and isa.ppu_dw_rows(f["n_outer"], f["dws"], f["dwc"])))
            bad = bad or bool(f["dwf"] and not (f["dw"] and f["dwf"] < 3 and (not f["dws"] or f["dwf"] == 1)))
            bad = bad or bool(f["neg"] and f["dw"])
        elif op == Op.VEC:
            counts, bad = (f["n_outer"], f["n_inner"]), f["op"] > max(isa.VecOp)
        elif op == Op.FILL:
            counts, bad = (f["count"], f["rows"]), False
        else:
            return E.NONE
        if bad or 0 in counts:
            return E.BAD_FIELD
        return E.NONE if all(_range_ok(*r) for r in self._ranges(op, f)) and self._scalars_ok(op, f) \
            else E.OUT_OF_RANGE

    def _ranges(self, op: int, f: dict) -> list[tuple]:
        if op in (Op.LOAD, Op.STORE):
            limit = self.act_lines if op == Op.STORE else {Mem.ACT: self.act_lines, Mem.WGT: self.wgt_rows,
                                                           Mem.PARAM: self.param_beats}[f["mem"]]
            return [(f["dram"], f["rows"], f["dram_stride"], f["row_beats"], 1, EXT_BEATS),
                    (f["sram"], f["rows"], f["sram_stride"], f["row_beats"], 1, limit)]
        no, ni = f.get("n_outer"), f.get("n_inner")
        if op == Op.GEMM:
            return [(f["act"], no, f["act_so"], ni, f["act_si"], self.act_lines),
                    (f["acc"], no, f["acc_so"], ni - f["skip"], f["acc_si"], self.acc_lines)]
        if op == Op.PPU:
            oo, oi = isa.ppu_out_dims(no, ni, f["dws"], f["dwc"], f["dwf"])
            return [(f["acc"], no, f["acc_so"], ni, f["acc_si"], self.acc_lines),
                    (f["out"], oo, f["out_so"], oi, f["out_si"], self.act_lines)]
        if op == Op.VEC:
            return [(f["a"], no, f["in_so"], ni, f["in_si"], self.act_lines),
                    (f["b"], no, f["in_so"], ni, f["in_si"], self.act_lines),
                    (f["out"], no, f["out_so"], ni, f["out_si"], self.act_lines)]
        return [(f["addr"], f["rows"], f["stride"], f["count"], 1, self.act_lines)]  # FILL

    def _scalars_ok(self, op: int, f: dict) -> bool:
        if op == Op.GEMM:  # (GEMM.dw9 reads the next block's first row too)
            return f["wblk"] + f["dw9"] < self.wgt_blocks
        if op == Op.PPU:  # (PPU.dw reads three entries, PPU.neg two)
            return f["param"] + (isa.DW_POST_ENTRIES - 1 if f["dw"] else f["neg"]) < self.param_entries
        if op == Op.VEC:
            return f["param"] < self.param_entries
        return True

    # ---- run ----
    def run(self, program: bytes | None, dram: bytearray, prog_addr: int = 0, max_insns: int = 10_000_000,
            *, data: bool = True) -> Result:
        """Execute the program in `dram` from instruction `prog_addr`. `data=False` counts the cycles only (the
        timing never depends on the data; the scheduler times its candidates so): no memory is read or written
        but the instructions, and every check of the instructions still runs."""
        if not isinstance(dram, bytearray):
            raise ModelError("dram must be a bytearray (the model writes STORE results into it)")
        if not data:
            return self._run(program, dram, prog_addr, max_insns, data)
        with _one_blas_thread():
            return self._run(program, dram, prog_addr, max_insns, data)

    def _run(self, program, dram, prog_addr, max_insns, data) -> Result:
        base = prog_addr * isa.INSN_BYTES
        if program is not None:
            if base + len(program) > len(dram):
                raise ModelError(f"the program ({len(program)} B at byte {base}) does not fit the {len(dram)}-byte "
                                 f"memory image")
            dram[base:base + len(program)] = program
        t = self.t
        mem = np.frombuffer(dram, np.uint8)
        beats = mem[:len(mem) // self.beat * self.beat].reshape(-1, self.beat)

        issue: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        ops: list[int] = []
        busy = {"load": _Busy(), "compute": _Busy(), "store": _Busy()}
        if self.post_unit:
            busy["post"] = _Busy()
        load_end = store_end = act_load_end = cmp_end = gemm_accept = stream_end = post_end = 0
        post_dw = False   # the last POST instruction was a PPU.dw (a next PPU.dw may overlap its drain)
        # v2, PPU.lag = k: the end of every GEMM but the k most recently issued ones, i.e. cmp_end just before
        # the k-th most recent GEMM's issue (older[-k]; 0 while fewer GEMMs have issued)
        older = [0] * isa.PPU_MAX_LAG
        lag = t.IDLE_LAG  # the issue stage sees a unit's end this many cycles late
        res = dict(done=False, error=E.NONE, error_pc=None, cycles=0)
        stats = dict(bytes_loaded=0, bytes_stored=0, macs=0)
        depth, n = t.FIFO_DEPTH, self.n
        k = 0
        while True:
            if k >= max_insns:
                raise ModelError(f"no FINISH within {max_insns} instructions")
            a = base + k * isa.INSN_BYTES
            if a + isa.INSN_BYTES > len(dram):
                raise ModelError(f"instruction {k} (byte {a}) is past the end of the memory image: "
                                 f"the program has no FINISH")
            word = int.from_bytes(dram[a:a + isa.INSN_BYTES], "little")
            request = k if k < depth else max(k, issue[k - depth] + 1)
            t0 = max(request + t.FETCH_LATENCY, issue[-1] + 1 if issue else 0)
            op = word & ((1 << isa.OPCODE_BITS) - 1)
            f = {}
            for name, pos, mask, sign in _FIELDS.get(op, ()):
                v = (word >> pos) & mask
                f[name] = v - ((v & sign) << 1) if sign else v
            err = self.check(op, f)
            if err:
                res.update(error=err, error_pc=k, cycles=t0 + 1)
                break
            wait = (word >> isa.WAIT_LSB) & ((1 << isa.WAIT_BITS) - 1)
            ti = t0
            if wait & _W_LOAD:
                ti = max(ti, load_end + lag)
            if wait & _W_COMPUTE:
                ti = max(ti, cmp_end + lag)
            if wait & _W_STORE:
                ti = max(ti, store_end + lag)
            if wait & _W_POST and self.post_unit:
                ti = max(ti, post_end + lag)
            start = ti
            if op == Op.LOAD:
                ti = max(ti, load_end + lag, store_end + lag if f["mem"] == Mem.ACT else 0)
                if self.post_unit and f["mem"] == Mem.ACT:
                    ti = max(ti, post_end + lag)  # POST shares the ACT port with DMA
                total = f["rows"] * f["row_beats"]
                start, end = ti, ti + t.LOAD_OVERHEAD + t.LM + total
                load_end = end
                if f["mem"] == Mem.ACT:
                    act_load_end = end
                busy["load"].add(ti + 1, end)
                if data:
                    self._load(f, beats)
                stats["bytes_loaded"] += total * self.beat
            elif op == Op.STORE:
                ti = max(ti, store_end + lag, act_load_end + lag, post_end + lag)
                total = f["rows"] * f["row_beats"]
                start, end = ti, ti + t.STORE_OVERHEAD + total
                store_end = end
                busy["store"].add(ti + 1, end)
                if data:
                    self._store(f, beats)
                stats["bytes_stored"] += total * self.beat
            elif op == Op.GEMM:
                ti = max(ti, gemm_accept + lag)
                p = f["n_outer"] * f["n_inner"]
                start = max(ti + (t.PRELOAD_DW9 if f["dw9"] else t.PRELOAD) + t.GEMM_SETUP, stream_end)
                stream_end = start + p
                gemm_accept = start
                end = stream_end + t.GEMM_LATENCY
                older = older[1:] + [cmp_end]
                cmp_end = max(cmp_end, end)
                busy["compute"].add(ti + 1, end)
                if data:
                    self._gemm(f)
                stats["macs"] += p * n * n
            elif op in (Op.PPU, Op.VEC, Op.FILL):
                dw = op == Op.PPU and f["dw"]
                free = post_end - (t.PPU_DW_DRAIN if dw and post_dw else 0)
                ti = (max(ti, free + lag, act_load_end + lag, store_end + lag) if self.post_unit
                      else max(ti, cmp_end + lag))
                if op == Op.PPU and f["lag"] and self.post_unit:
                    ti = max(ti, older[-f["lag"]] + lag)
                if op == Op.PPU:
                    end = ti + t.ppu_busy(f["n_outer"], f["n_inner"], f["dw"], f["dwc"], f["neg"])
                    if data:
                        self._ppu(f)
                elif op == Op.VEC:
                    end = ti + t.VEC_OVERHEAD + t.VEC_CYCLES_PER_LINE * f["n_outer"] * f["n_inner"]
                    if data:
                        self._vec(f)
                else:
                    end = ti + t.FILL_OVERHEAD + f["rows"] * f["count"]
                    if data:
                        idx = _grid(f["addr"], f["rows"], f["stride"], f["count"], 1)
                        self.act[idx] = np.int8(np.uint8(f["value"]).view(np.int8))
                start = ti
                if self.post_unit:
                    post_end, post_dw = end, dw
                    busy["post"].add(ti + 1, end)
                else:
                    cmp_end = gemm_accept = end
                    busy["compute"].add(ti + 1, end)
            elif op == Op.FINISH:
                ti = max(ti, load_end + lag, cmp_end + lag, store_end + lag, post_end + lag)
                start = end = ti
            else:  # NOP
                end = ti
            issue.append(ti)
            starts.append(start)
            ends.append(end)
            ops.append(op)
            k += 1
            if op == Op.FINISH:
                res.update(done=True, cycles=ti + 1)
                break
        return Result(ops=np.array(ops, np.int64), issue=np.array(issue, np.int64),
                      start=np.array(starts, np.int64), end=np.array(ends, np.int64),
                      busy={u: b.total for u, b in busy.items()}, insns=len(issue), **res, **stats)

    # ---- data effects, one numpy operation each ----
    def _ext(self, f: dict, beats: np.ndarray) -> np.ndarray:
        idx = _grid(f["dram"], f["rows"], f["dram_stride"], f["row_beats"], 1)
        last = idx.stop - 1 if isinstance(idx, slice) else int(idx.max())
        if last >= len(beats):
            raise ModelError(f"external beat {last} is past the end of the {len(beats)}-beat memory image")
        return idx

    def _load(self, f: dict, beats: np.ndarray) -> None:
        src = beats[self._ext(f, beats)]
        dst = _grid(f["sram"], f["rows"], f["sram_stride"], f["row_beats"], 1)
        if f["mem"] == Mem.ACT:
            _scatter(self.act, dst, src.view(np.int8))
        elif f["mem"] == Mem.WGT:
            _scatter(self.wgt, dst, src.view(np.int8))
        else:
            _scatter(self.param, dst, src)

    def _store(self, f: dict, beats: np.ndarray) -> None:
        dst = self._ext(f, beats)
        src = _grid(f["sram"], f["rows"], f["sram_stride"], f["row_beats"], 1)
        _scatter(beats, dst, self.act[src].view(np.uint8))

    def _gemm(self, f: dict) -> None:
        n = self.n
        w = self.wgt[f["wblk"] * n:(f["wblk"] + 1) * n + f["dw9"]].astype(np.float64)  # dw9: + row N (column 8)
        x = self.act[_grid(f["act"], f["n_outer"], f["act_so"], f["n_inner"], f["act_si"])].astype(np.float64)
        if f["dw"]:
            dot = self._depthwise(w, x, f)
        else:
            dot = (x @ w.T).astype(np.int32)  # exact: |dot| <= N * 2**14 < 2**53
        idx = _grid(f["acc"], f["n_outer"], f["acc_so"], f["n_inner"] - f["skip"], f["acc_si"])
        if f["reset"]:
            _scatter(self.acc, idx, dot)
        elif _last_wins(idx) is None:
            self.acc[idx] += dot  # int32 wraps, as the 32-bit adder
        else:
            np.add.at(self.acc, idx, dot)

    def _depthwise(self, w: np.ndarray, x: np.ndarray, f: dict) -> np.ndarray:
        """GEMM.dw: row r of line j sums W[r][c] * lane r of line j - c of the same inner loop
        (lines before the loop's start read as zero); lines j < skip are not written. GEMM.dw9: row N of `w`
        holds the ninth PE's weights, column 8 (byte r for row r)."""
        no, ni, n = f["n_outer"], f["n_inner"], self.n
        if f["dwp"]:  # over rows: one stream of no * ni lines, column c some rows and lines back
            out = np.zeros((no * ni, n))
            for c, d in enumerate(isa.dwp_delays(n, ni, f["dw9"])):
                wc = w[n] if c == n else w[:n, c]
                if d is not None and d < no * ni and wc.any():
                    out[d:] += x[:no * ni - d] * wc
            return out.reshape(no, ni, n)[:, f["skip"]:].reshape(-1, n).astype(np.int32)
        x = x.reshape(no, ni, n)
        out = np.zeros((no, ni, n))
        for c in range(min(n, ni)):
            if w[:, c].any():
                out[:, c:] += x[:, :ni - c] * w[:, c]
        return out[:, f["skip"]:].reshape(-1, n).astype(np.int32)

    def _entry(self, e: int) -> dict:
        peb = self.t.PARAM_ENTRY_BEATS
        return isa.unpack_param_entry(self.param[e * peb:(e + 1) * peb].tobytes(), self.n)

    def _ppu(self, f: dict) -> None:
        pe = self._entry(f["param"])
        acc = self.acc[_grid(f["acc"], f["n_outer"], f["acc_so"], f["n_inner"], f["acc_si"])]
        shift = np.clip(pe["shift"], arith.SHIFT_MIN, arith.SHIFT_MAX)
        neg = None
        if f["neg"]:   # (entry param + 1's first 4N bytes: the multipliers of negative lanes)
            e = (f["param"] + 1) * self.t.PARAM_ENTRY_BEATS
            neg = np.frombuffer(self.param[e:e + self.t.NEG_BEATS].tobytes(), "<i4", self.n).astype(np.int32)
        y = arith.requantize(acc + pe["bias"], pe["mult"], shift, pe["z_out"], pe["lo"], pe["hi"], neg)
        if f["dw"]:  # the 3x3 depthwise stage: the tile padded by one pixel of z_out, then entry param + 1
            no, ni, n = f["n_outer"], f["n_inner"], self.n
            yp = np.full((no + 2, ni + 2, n), pe["z_out"], np.int32)
            yp[1:-1, 1:-1] = y.reshape(no, ni, n)
            taps = np.frombuffer(self.param[(f["param"] + 2) * self.t.PARAM_ENTRY_BEATS:].tobytes(), np.int8,
                                 9 * n).reshape(3, 3, n).astype(np.int32)
            c = n >> f["dwf"]   # lanes a pixel: its neighbours are c lanes away, across into the lines beside
            s = 0
            for ky in range(3):
                prev, cur, nxt = (yp[ky:ky + no, kx:kx + ni] for kx in range(3))
                left = np.concatenate([prev[..., n - c:], cur[..., :n - c]], axis=-1)
                right = np.concatenate([cur[..., c:], nxt[..., :c]], axis=-1)
                if f["dws"] == 3 and f["dwf"] == 1:   # the window one pixel further (output: a line's second)
                    left, cur, right = cur, right, nxt
                s = s + taps[ky, 0] * left + taps[ky, 1] * cur + taps[ky, 2] * right
            # the rows it writes: not context rows (dwc); stride 2: every other one, from the first or the second
            s = s[isa.ppu_dw_rows(no, f["dws"], f["dwc"])]
            if f["dws"] and not f["dwf"]:   # (and every other column; two pixels a line: every line)
                s = s[:, f["dws"] & 1::2]
            pe = self._entry(f["param"] + 1)
            shift = np.clip(pe["shift"], arith.SHIFT_MIN, arith.SHIFT_MAX)
            y = arith.requantize(s.reshape(-1, n) + pe["bias"], pe["mult"], shift, pe["z_out"], pe["lo"],
                                 pe["hi"])
        oo, oi = isa.ppu_out_dims(f["n_outer"], f["n_inner"], f["dws"], f["dwc"], f["dwf"])
        _scatter(self.act, _grid(f["out"], oo, f["out_so"], oi, f["out_si"]), y)

    def _vec(self, f: dict) -> None:
        no, ni = f["n_outer"], f["n_inner"]
        a = self.act[_grid(f["a"], no, f["in_so"], ni, f["in_si"])]
        b = self.act[_grid(f["b"], no, f["in_so"], ni, f["in_si"])]
        if f["op"] == isa.VecOp.MAX:
            y = np.maximum(a, b)
        else:
            pe = self._entry(f["param"])
            shift = int(np.clip(pe["shift"][0], arith.SHIFT_MIN, arith.SHIFT_MAX))
            y = arith.add_requantize(a, b, int(pe["bias"][0]), int(pe["bias"][1]), int(pe["mult"][0]),
                                     int(pe["mult"][1]), shift, pe["z_out"], pe["lo"], pe["hi"])
        _scatter(self.act, _grid(f["out"], no, f["out_so"], ni, f["out_si"]), y)
