"""The Python tile model: bit-exact against numpy + hwc.quant.arith, timing closed forms
recomputed here by hand from hwc.isa.Timing, errors, counters and speed.
(Its agreement with the RTL, cycle by cycle, is tests/test_tile_rtl.py.)"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hwc.sim import programs
from hwc.sim.model import ModelError, TileModel
from hwc.targets import load_target, tile_variant

from hwc import isa
from hwc.errors import TargetError


def v1_target(name: str) -> dict:
    """The v1 tile of docs/tile.md (the bundled targets enable the v2 features; tests of v2: *_v2.py)."""
    return tile_variant(load_target(name), post_unit=False, depthwise=False)

Op, Wait, Mem, E = isa.Op, isa.Wait, isa.Mem, isa.ErrorCode


@pytest.fixture(params=["tile8x8", "tile32x32"])
def target(request):
    return v1_target(request.param)


def _run(t, wl):
    dram = bytearray(wl.dram)
    return TileModel(t).run(None, dram, wl.prog_addr), dram


def _region(dram, wl):
    return [bytes(dram[a:a + len(b)]) for a, b in wl.expect]


@pytest.mark.parametrize("seed", [0, 1])
def test_matmul_bit_exact(target, seed):
    rng = np.random.default_rng(seed)
    n = target["array"]["rows"]
    wl = programs.matmul(target, rng, pixels=34, k=3 * n, m=2 * n, relu=bool(seed))
    res, dram = _run(target, wl)
    assert res.done and res.error == E.NONE
    assert _region(dram, wl) == [b for _, b in wl.expect]
    assert res.macs == 34 * 3 * 2 * n * n
    assert res.bytes_stored == 34 * 2 * n


def test_vec_pool_bit_exact(target):
    rng = np.random.default_rng(5)
    for wl in (programs.vec(target, rng, lines=10), programs.pool_sum(target, rng, pixels=41)):
        res, dram = _run(target, wl)
        assert res.done
        assert _region(dram, wl) == [b for _, b in wl.expect], wl.name


def _prog(t, insns, data=4096):
    return programs.with_program(t, insns, data)


def test_timing_closed_forms_by_hand():
    t = v1_target("tile8x8")
    T = isa.Timing.from_target(t)
    lm, fl = t["bus"]["read_latency"], T.FETCH_LATENCY
    assert fl == lm + isa.PREDECODE_STAGES + 2
    pre = 4   # the preload: tile8x8 reads 2 of the block's 8 weight rows a cycle
    assert t["scratchpad"]["wgt_read_rows"] == 2 and T.PRELOAD == pre
    g = dict(act=0, acc=0, n_outer=2, n_inner=5, act_so=5, act_si=1, acc_so=5, acc_si=1, reset=1)
    insns = [isa.make(Op.LOAD, mem=Mem.ACT, dram=40, sram=0, rows=2, row_beats=5, dram_stride=5, sram_stride=5),
             isa.make(Op.GEMM, Wait.LOAD, wblk=0, **g),
             isa.make(Op.GEMM, wblk=1, **g),
             isa.make(Op.PPU, acc=0, out=20, n_outer=1, n_inner=10, acc_so=0, acc_si=1, out_so=0, out_si=1, param=0),
             isa.make(Op.STORE, Wait.COMPUTE, dram=60, sram=20, rows=1, row_beats=10, dram_stride=0, sram_stride=0),
             isa.make(Op.FINISH)]
    res, _ = _run(t, _prog(t, insns))
    lag = T.IDLE_LAG                               # the issue stage sees a unit's end this much later
    load_end = fl + T.LOAD_OVERHEAD + lm + 10
    g0 = load_end + lag                            # waits for the LOAD
    s0 = g0 + pre + T.GEMM_SETUP
    g1 = s0 + lag                                  # accepted once GEMM 0 streams
    s1 = max(g1 + pre + T.GEMM_SETUP, s0 + 10)
    cmp_idle = s1 + 10 + T.GEMM_LATENCY
    ppu, ppu_end = cmp_idle + lag, cmp_idle + lag + T.PPU_OVERHEAD + 10
    st, st_end = ppu_end + lag, ppu_end + lag + T.STORE_OVERHEAD + 10
    assert res.issue.tolist() == [fl, g0, g1, ppu, st, st_end + lag]
    assert res.start.tolist()[1:3] == [s0, s1]
    assert res.cycles == st_end + lag + 1
    # a unit is busy from the cycle after an issue: the PPU's issue cycle is an idle compute cycle
    assert res.busy == {"load": load_end - fl - 1, "compute": (cmp_idle - g0 - 1) + (ppu_end - ppu - 1),
                        "store": st_end - st - 1}


def test_fetch_fifo_credits():
    """Instruction k >= fifo_depth is requested the cycle after instruction k - fifo_depth issued."""
    t = v1_target("tile8x8")
    T = isa.Timing.from_target(t)
    d = T.FIFO_DEPTH
    insns = [isa.make(Op.FILL, addr=0, count=200, value=1), isa.make(Op.NOP, Wait.COMPUTE)]
    insns += [isa.make(Op.NOP)] * (2 * d) + [isa.make(Op.FINISH)]
    res, _ = _run(t, _prog(t, insns))
    issue = [T.FETCH_LATENCY, T.FETCH_LATENCY + 1 + T.FILL_OVERHEAD + 200 - 1 + 0]
    issue[1] = issue[0] + T.FILL_OVERHEAD + 200 + T.IDLE_LAG  # the NOP waits for the FILL
    for k in range(2, len(insns)):
        request = k if k < d else issue[k - d] + 1
        issue.append(max(request + T.FETCH_LATENCY, issue[-1] + 1))
    assert res.issue.tolist() == issue
    # once the FIFO drained, the NOPs come one per FETCH_LATENCY + 1 ... per d instructions
    assert issue[d + 2] - issue[d + 1] == 1 and issue[2 * d + 1] > issue[2 * d] + 1


def test_strided_fill_writes_its_runs_only():
    """FILL.rows / FILL.stride (a halo: a row's right pad and the next row's left pad): `rows` runs of `count`
    lines, `stride` apart, nothing between them; busy FILL_OVERHEAD + rows * count (by hand)."""
    t = v1_target("tile8x8")
    T = isa.Timing.from_target(t)
    insns = [isa.make(Op.FILL, addr=0, count=12, value=7),
             isa.make(Op.FILL, Wait.COMPUTE, addr=1, count=2, value=0xFE, rows=3, stride=4),
             isa.make(Op.STORE, Wait.COMPUTE, dram=40, sram=0, rows=1, row_beats=12, dram_stride=0, sram_stride=0),
             isa.make(Op.FINISH, Wait.ALL)]
    res, dram = _run(t, _prog(t, insns))
    lines = np.frombuffer(bytes(dram[40 * 8:52 * 8]), np.uint8).reshape(12, 8)[:, 0].tolist()
    assert lines == [7, 0xFE, 0xFE, 7, 7, 0xFE, 0xFE, 7, 7, 0xFE, 0xFE, 7]
    assert res.end[1] - res.issue[1] == T.FILL_OVERHEAD + 3 * 2


def test_act_port_exclusion_between_load_and_store():
    t = v1_target("tile8x8")
    T = isa.Timing.from_target(t)
    insns = [isa.make(Op.STORE, dram=100, sram=0, rows=1, row_beats=50, dram_stride=0, sram_stride=0),
             isa.make(Op.LOAD, mem=Mem.WGT, dram=200, sram=0, rows=1, row_beats=8, dram_stride=0, sram_stride=0),
             isa.make(Op.LOAD, Wait.LOAD, mem=Mem.ACT, dram=300, sram=0, rows=1, row_beats=8, dram_stride=0,
                      sram_stride=0),
             isa.make(Op.FINISH)]
    res, _ = _run(t, _prog(t, insns))
    st_end = res.issue[0] + T.STORE_OVERHEAD + 50
    assert res.issue[1] == res.issue[0] + 1          # a WGT load runs beside a STORE
    assert res.issue[2] == max(res.end[1], st_end) + T.IDLE_LAG  # an ACT load waits for the STORE (shared port)


T8 = v1_target("tile8x8")
ACT8, PARAMS8 = T8["scratchpad"]["act_lines"], T8["scratchpad"]["param_entries"]


@pytest.mark.parametrize("bad, code", [
    (isa.make(Op.FILL, addr=ACT8 - 2, count=3, value=0), E.OUT_OF_RANGE),
    (isa.make(Op.GEMM, wblk=2 * T8["scratchpad"]["wgt_bank_blocks"], act=0, acc=0, n_outer=1, n_inner=1,
              act_so=0, act_si=0, acc_so=0, acc_si=0, reset=0), E.OUT_OF_RANGE),
    (isa.make(Op.GEMM, wblk=0, act=5, acc=0, n_outer=3, n_inner=1, act_so=-3, act_si=0, acc_so=0, acc_si=0,
              reset=0), E.OUT_OF_RANGE),                  # act + 2 * (-3) < 0
    (isa.make(Op.PPU, acc=T8["scratchpad"]["acc_lines"] - 1, out=0, n_outer=1, n_inner=2, acc_so=0, acc_si=1,
              out_so=0, out_si=1, param=0), E.OUT_OF_RANGE),
    (isa.make(Op.VEC, op=1, a=0, b=0, out=0, n_outer=1, n_inner=1, in_so=0, in_si=0, out_so=0, out_si=0,
              param=PARAMS8), E.OUT_OF_RANGE),
    (isa.make(Op.LOAD, mem=3, dram=0, sram=0, rows=1, row_beats=1, dram_stride=0, sram_stride=0), E.BAD_FIELD),
    (isa.make(Op.STORE, dram=(1 << 28) - 2, sram=0, rows=1, row_beats=4, dram_stride=0, sram_stride=0),
     E.OUT_OF_RANGE),
    (isa.make(Op.FILL, addr=0, count=0, value=0), E.BAD_FIELD),
    (isa.make(Op.FILL, addr=0, count=2, value=0, rows=0, stride=4), E.BAD_FIELD),
    (isa.make(Op.FILL, addr=ACT8 - 11, count=2, value=0, rows=3, stride=5), E.OUT_OF_RANGE),  # last line ACT8
])
def test_errors(bad, code):
    t = v1_target("tile8x8")
    insns = [isa.make(Op.FILL, addr=0, count=2, value=9),
             isa.make(Op.STORE, Wait.COMPUTE, dram=40, sram=0, rows=1, row_beats=2, dram_stride=0, sram_stride=0),
             bad, isa.make(Op.STORE, Wait.ALL, dram=50, sram=0, rows=1, row_beats=2, dram_stride=0, sram_stride=0),
             isa.make(Op.FINISH)]
    wl = _prog(t, insns)
    before = bytes(wl.dram)
    res, dram = _run(t, wl)
    assert (res.error, res.error_pc, res.done, res.insns) == (code, 2, False, 2)
    assert dram[40 * 8:42 * 8] == bytes([9]) * 16
    assert dram[:40 * 8] == before[:40 * 8] and dram[42 * 8:] == before[42 * 8:]


def test_illegal_opcode():
    t = v1_target("tile8x8")
    wl = _prog(t, [isa.make(Op.NOP), isa.make(Op.NOP), isa.make(Op.FINISH)])
    wl.dram[16] = 0x0C
    res, _ = _run(t, wl)
    assert (res.error, res.error_pc) == (E.ILLEGAL_OPCODE, 1)
    assert res.cycles == isa.Timing.from_target(t).FETCH_LATENCY + 2


def test_model_rejects_bad_use():
    t = v1_target("tile8x8")
    with pytest.raises(ModelError, match="no FINISH"):
        TileModel(t).run(isa.to_bytes([isa.make(Op.NOP)]), bytearray(64), 0)
    with pytest.raises(ModelError, match="bytearray"):
        TileModel(t).run(None, bytes(64), 0)
    with pytest.raises(ModelError, match="tile target"):
        TileModel(load_target("cpu"))
    with pytest.raises(TargetError):
        load_target("tile9x9")


def test_ten_thousand_instructions_in_well_under_a_second():
    t = v1_target("tile8x8")
    rng = np.random.default_rng(9)
    base = programs.matmul(t, rng, pixels=16, k=16, m=16)
    body = [i for i in base.program if i.op not in (Op.FINISH,)]
    reps = 10_000 // len(body) + 1
    prog = body * reps + [isa.make(Op.FINISH)]
    code = isa.to_bytes(prog)
    dram = bytearray(code) + base.dram[len(isa.to_bytes(base.program)):]
    # the data beats are addressed after the original program: shift the image accordingly
    shift = len(code) - len(isa.to_bytes(base.program))
    assert shift % t["bus"]["bytes"] == 0
    prog = [isa.make(i.op, i.wait, **{k: (v + shift // 8 if k == "dram" else v) for k, v in i.fields})
            if i.op in (Op.LOAD, Op.STORE) else i for i in prog]
    dram[:len(code)] = isa.to_bytes(prog)
    model = TileModel(t)
    t0 = time.perf_counter()
    res = model.run(None, dram, 0)
    dt = time.perf_counter() - t0
    assert res.done and res.insns >= 10_000
    assert dt < 1.0, f"{res.insns} instructions took {dt:.2f} s"
    want = base.expect[0][1]
    addr = base.expect[0][0] + shift
    assert bytes(dram[addr:addr + len(want)]) == want


def test_timing_only_run_counts_the_same_cycles_and_touches_no_data(target):
    """`TileModel.run(data=False)` (the scheduler times its candidates so): the same cycles, instructions and
    busy counts as the full run, and no STORE result written."""
    wl = programs.matmul(target, np.random.default_rng(3), pixels=20, k=2 * target["array"]["rows"],
                         m=target["array"]["rows"], relu=True)
    full, _ = _run(target, wl)
    dram = bytearray(wl.dram)
    timed = TileModel(target).run(None, dram, wl.prog_addr, data=False)
    assert (timed.cycles, timed.insns, timed.busy) == (full.cycles, full.insns, full.busy)
    assert dram == bytearray(wl.dram), "a timing-only run writes nothing"


def test_instruction_encoding_by_hand():
    """isa.encode of a FILL, the word computed by hand from the layout (opcode [3:0], wait [7:4], then addr 16,
    count 16, value 8, rows 12, stride 16 bits from bit 8); an Insn whose fields are in another order encodes
    the same; a field out of range is refused."""
    insn = isa.make(isa.Op.FILL, isa.Wait.COMPUTE, addr=5, count=3, value=-2 & 0xFF, rows=2, stride=7)
    want = 6 | (2 << 4) | (5 << 8) | (3 << 24) | (0xFE << 40) | (2 << 48) | (7 << 60)
    assert isa.encode(insn) == want
    shuffled = isa.Insn(isa.Op.FILL, isa.Wait.COMPUTE, tuple(reversed(insn.fields)))
    assert isa.encode(shuffled) == want
    assert isa.decode(want) == insn
    with pytest.raises(ValueError, match=r"FILL.count = 65536 does not fit 16 bits"):
        isa.make(isa.Op.FILL, addr=0, count=1 << 16, value=0)
