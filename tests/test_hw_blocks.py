"""amaranth.sim unit tests of the tile's blocks, each against an independent numpy model
(hwc.quant.arith for the arithmetic, plain numpy for the array and the accumulator)."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator
from hwc.hw.fetch import Fetch
from hwc.hw.gemm import GemmEngine
from hwc.hw.mac import MacArray, dot_bits
from hwc.hw.params import TileParams
from hwc.hw.post import PostPipe
from hwc.hw.wishbone import ID, REGS, WishboneTile
from hwc.sim.model import TileModel
from hwc.targets import load_target
from hwc.targets.tile_schema import validate_tile

from hwc import isa
from hwc.quant import arith

Op = isa.Op


def small_target(n=4, act_lines=64, acc_lines=16, wgt_bank_blocks=2, param_entries=4, lm=2, fifo=4):
    doc = {"name": f"small{n}", "kind": "tile", "array": {"rows": n, "cols": n},
           "dtypes": {"operand_bits": 8, "acc_bits": 32},
           "scratchpad": {"act_lines": act_lines, "acc_lines": acc_lines, "wgt_bank_blocks": wgt_bank_blocks,
                          "param_entries": param_entries},
           "bus": {"bytes": n, "read_latency": lm}, "decoder": {"fifo_depth": fifo}, "clock_mhz": 100}
    return validate_tile(doc, "test")


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def lanes(values, bits):
    out = 0
    for k, v in enumerate(values):
        out |= (int(v) & ((1 << bits) - 1)) << (bits * k)
    return out


def unlanes(word, bits, n):
    vals = [(word >> (bits * k)) & ((1 << bits) - 1) for k in range(n)]
    return np.array([v - (1 << bits) if v >> (bits - 1) else v for v in vals], np.int64)


# ---- PostPipe: requantize / add_requantize / max, bit-exact -----------------------------------
def _pipe_run(n, params, tokens):
    """Feed tokens (dict of inputs) one per cycle; return the y lines of valid outputs, in order."""
    dut = PostPipe(n)
    outs = []

    async def bench(ctx):
        for k, v in params.items():
            ctx.set(getattr(dut, k), v)
        # in_vec is per instruction: it stays as it was while the pipe drains
        drain = [{"in_valid": 0, "in_vec": tokens[-1].get("in_vec", 0)}] * (isa.POST_PIPE_STAGES + 1)
        for tok in tokens + drain:
            for k in ("in_valid", "in_vec", "in_second", "acc_in", "act_in"):
                ctx.set(getattr(dut, k), tok.get(k, 0))
            await ctx.tick()
            if ctx.get(dut.out_valid):
                outs.append(unlanes(ctx.get(dut.y), 8, n))
    run(dut, bench)
    return np.array(outs, np.int64)


def test_post_pipe_requantize_matches_arith_including_ties_and_saturation():
    rng = np.random.default_rng(0)
    n = 4
    for trial in range(5):
        mult = rng.integers(arith.MULT_MIN, arith.MULT_MAX, n, dtype=np.int64).astype(np.int32)
        shift = rng.integers(20, 40, n).astype(np.int32)
        bias = rng.integers(-(1 << 20), 1 << 20, n).astype(np.int32)
        if trial == 1:   # exact ties: M = 2**30, shift 32 -> (acc + bias) / 4, ties at 2 mod 4
            mult[:], shift[:], bias[:] = 1 << 30, 32, 0
        if trial == 2:   # shift bytes outside [1, 62] are clamped (the model does the same)
            shift = np.array([0, 63, 200, 1], np.int32)
        z, lo, hi = int(rng.integers(-128, 128)), int(rng.integers(-128, 0)), int(rng.integers(0, 128))
        if trial == 3:
            z, lo, hi = 5, 5, 127  # relu-like clamp
        if trial == 4:
            z, lo, hi = 0, 40, -40  # lo > hi: numpy's clip gives hi everywhere
        acc = rng.integers(-(1 << 31), 1 << 31, (40, n), dtype=np.int64).astype(np.int32)
        acc[:10] = rng.integers(-40, 40, (10, n))            # small: ties and no saturation
        acc[10] = np.iinfo(np.int32).max                      # wraps when the bias is added
        acc[11] = np.iinfo(np.int32).min
        sh = np.clip(shift, arith.SHIFT_MIN, arith.SHIFT_MAX)
        params = {"bias": lanes(bias, 32), "mult": lanes(mult, 32), "shm1": lanes(sh - 1, 6),
                  "z_out": z, "lo": lo, "hi": hi, "op_max": 0}
        got = _pipe_run(n, params, [{"in_valid": 1, "acc_in": lanes(a, 32)} for a in acc])
        want = arith.requantize(acc + bias, mult, np.clip(shift, arith.SHIFT_MIN, arith.SHIFT_MAX), z, lo, hi)
        np.testing.assert_array_equal(got, want)
        if trial == 1:
            assert (((acc[:10].astype(np.int64)) % 4) == 2).any(), "the tie case must contain ties"


def test_post_pipe_neg_multiplies_negative_lanes_by_mult_neg():
    """PPU.neg (a fused LeakyReLU / PReLU): where wrap32(acc + bias) < 0 the lane's mult_neg replaces its mult,
    checked against arith.requantize(..., mult_neg=) and, for one hand-computed value, by hand."""
    rng = np.random.default_rng(5)
    n = 4
    mult, shift = np.full(n, 1 << 30, np.int32), np.full(n, 32, np.int32)
    mult_neg = np.array([107374182, -(1 << 28), 0, 1 << 30], np.int32)   # alpha 0.1, -0.25, 0 (ReLU), 1
    bias = np.array([0, 7, -3, 1 << 30], np.int32)
    acc = rng.integers(-2000, 2000, (30, n)).astype(np.int32)
    acc[0] = [-100, -100, -100, -100]
    acc[1] = [0, -7, 3, 0]                        # acc + bias == 0: not negative
    acc[2] = np.iinfo(np.int32).max               # lane 3 wraps negative
    params = {"bias": lanes(bias, 32), "mult": lanes(mult, 32), "mult_neg": lanes(mult_neg, 32), "neg": 1,
              "shm1": lanes(shift - 1, 6), "z_out": 3, "lo": -128, "hi": 127, "op_max": 0}
    got = _pipe_run(n, params, [{"in_valid": 1, "acc_in": lanes(a, 32)} for a in acc])
    want = arith.requantize(acc + bias, mult, shift, 3, -128, 127, mult_neg=mult_neg)
    np.testing.assert_array_equal(got, want)
    assert got[0, 0] == -2 + 3     # -100 * 0.1 * 0.25 = -2.5, rounded half up to -2, + z_out
    assert (want != arith.requantize(acc + bias, mult, shift, 3, -128, 127)).any()
    params["neg"] = 0              # without PPU.neg the same entry is a plain requantization
    got = _pipe_run(n, params, [{"in_valid": 1, "acc_in": lanes(a, 32)} for a in acc])
    np.testing.assert_array_equal(got, arith.requantize(acc + bias, mult, shift, 3, -128, 127))


def test_post_pipe_clamp_boundaries():
    """Every t around lo and hi (the clamp compares the pre-rounding value against bounds derived
    from lo, hi and z_out): mult 2**30 and shift 31 make t = round(acc / 2) + z_out."""
    n = 4
    acc = np.repeat(np.arange(-600, 600, dtype=np.int32)[:, None], n, axis=1)
    for z, lo, hi in ((3, -20, 17), (-128, -128, 127), (127, -5, 5), (-7, 0, 0), (10, 30, -30)):
        mult, shift = np.full(n, 1 << 30, np.int32), np.full(n, 31, np.int32)
        params = {"bias": lanes([0] * n, 32), "mult": lanes(mult, 32), "shm1": lanes(shift - 1, 6),
                  "z_out": z, "lo": lo, "hi": hi, "op_max": 0}
        got = _pipe_run(n, params, [{"in_valid": 1, "acc_in": lanes(a, 32)} for a in acc])
        want = arith.requantize(acc, mult, shift, z, lo, hi)
        np.testing.assert_array_equal(got, want)
        assert (want == lo).any() and (want == hi).any() or lo > hi


@pytest.mark.parametrize("op", ["add", "max"])
def test_post_pipe_vec_matches_arith(op):
    rng = np.random.default_rng(1)
    n = 4
    a = rng.integers(-128, 128, (30, n)).astype(np.int8)
    b = rng.integers(-128, 128, (30, n)).astype(np.int8)
    ma, mb, s = arith.quantize_multiplier_pair(0.7, 1.3)
    za, zb, z, lo, hi = 3, -9, 4, -120, 100
    params = {"za": za, "zb": zb, "ma": ma, "mb": mb, "shm1": lanes([s - 1] * n, 6), "z_out": z, "lo": lo, "hi": hi,
              "op_max": int(op == "max")}
    tokens = []
    for i in range(len(a)):
        tokens += [{"in_vec": 1, "act_in": lanes(a[i], 8)},
                   {"in_valid": 1, "in_vec": 1, "in_second": 1, "act_in": lanes(b[i], 8)}]
        if i % 3 == 0:  # a gap (the VEC frame's write slot)
            tokens.append({"in_vec": 1})
    got = _pipe_run(n, params, tokens)
    want = np.maximum(a, b) if op == "max" else arith.add_requantize(a, b, za, zb, ma, mb, s, z, lo, hi)
    np.testing.assert_array_equal(got, want)


# ---- MacArray ----------------------------------------------------------------------------------
def test_mac_array_dot_products_and_swap():
    t = small_target(n=4)
    p = TileParams.from_target(t)
    dut = MacArray(p)
    rng = np.random.default_rng(2)
    w1, w2 = (rng.integers(-127, 128, (4, 4)) for _ in range(2))
    xs = rng.integers(-128, 128, (12, 4))
    outs = []

    async def bench(ctx):
        for wts, swap_after in ((w1, True), (w2, False)):
            for r in range(4):
                ctx.set(dut.row_we, 1)
                ctx.set(dut.row_idx, r)
                ctx.set(dut.row_data, lanes(wts[r], 8))
                await ctx.tick()
            ctx.set(dut.row_we, 0)
            if swap_after:
                ctx.set(dut.swap, 1)
                await ctx.tick()
                ctx.set(dut.swap, 0)
        # w1 is active, w2 waits in the shadow registers; swap between x[5] and x[6]
        for i, x in enumerate(xs):
            ctx.set(dut.x, lanes(x, 8))
            ctx.set(dut.swap, int(i == 5))
            await ctx.tick()
            outs.append(ctx.get(dut.dot))
        ctx.set(dut.swap, 0)
        for _ in range(dut.latency):
            await ctx.tick()
            outs.append(ctx.get(dut.dot))
    run(dut, bench)
    got = np.array([unlanes(v, dot_bits(p), 4) for v in outs[dut.latency - 1:]])[:len(xs)]
    want = np.array([(w1 if i <= 5 else w2) @ x for i, x in enumerate(xs)])
    np.testing.assert_array_equal(got, want)


# ---- GEMM engine with its memories: accumulation and forwarding ---------------------------------
class GemmHarness(Elaboratable):
    def __init__(self, target, act, wgt):
        self.p = TileParams.from_target(target)
        self.eng = GemmEngine(self.p)
        self.act = Memory(shape=self.p.line_bits, depth=self.p.act_lines, init=[lanes(r, 8) for r in act])
        self.wgt = Memory(shape=self.p.line_bits, depth=self.p.wgt_rows, init=[lanes(r, 8) for r in wgt])
        self.acc = Memory(shape=self.p.acc_line_bits, depth=self.p.acc_lines, init=[])

    def elaborate(self, platform):
        m = Module()
        m.submodules.eng, m.submodules.act, m.submodules.wgt, m.submodules.acc = self.eng, self.act, self.wgt, self.acc
        e = self.eng
        ar, wr, cr, cw = self.act.read_port(), self.wgt.read_port(), self.acc.read_port(), self.acc.write_port()
        # as in the tile: memory inputs registered in front of the RAM, read data behind it
        # (isa.MEM_LATENCY = 3, isa.MEM_WRITE_LATENCY = 1)
        assert isa.MEM_LATENCY == 3 and isa.MEM_WRITE_LATENCY == 1
        m.d.sync += [ar.addr.eq(e.act_addr), wr.addr.eq(e.wgt_addr), cr.addr.eq(e.acc_raddr),
                     cw.addr.eq(e.acc_waddr), cw.data.eq(e.acc_wdata), cw.en.eq(e.acc_we),
                     e.act_data.eq(ar.data), e.wgt_data.eq(wr.data), e.acc_rdata.eq(cr.data)]
        return m


def _gemm(**kw):
    base = dict(wblk=0, act=0, acc=0, n_outer=1, n_inner=1, act_so=0, act_si=0, acc_so=0, acc_si=0, reset=0)
    base.update(kw)
    return isa.make(Op.GEMM, **base)


def _gemm_reference(target, act, wgt, program):
    """numpy: acc[...] (=|+=) W @ act[...] per iteration, in order."""
    n = target["array"]["rows"]
    acc = np.zeros((target["scratchpad"]["acc_lines"], n), np.int64)
    for g in program:
        f = dict(g.fields)
        w = wgt[f["wblk"] * n:(f["wblk"] + 1) * n]
        for i in range(f["n_outer"]):
            for j in range(f["n_inner"]):
                x = act[f["act"] + i * f["act_so"] + j * f["act_si"]]
                a = f["acc"] + i * f["acc_so"] + j * f["acc_si"]
                acc[a] = (0 if f["reset"] else acc[a]) + w @ x
    return acc


@pytest.mark.parametrize("case", ["same_line_every_cycle", "back_to_back_overlap", "random"])
def test_gemm_engine_accumulates_with_forwarding(case):
    t = small_target(n=4)
    p = TileParams.from_target(t)
    rng = np.random.default_rng(3)
    act = rng.integers(-128, 128, (p.act_lines, 4))
    wgt = rng.integers(-127, 128, (p.wgt_rows, 4))
    if case == "same_line_every_cycle":   # global-average-pool style: every line into ACC line 5
        prog = [_gemm(act=0, acc=5, n_outer=1, n_inner=1, reset=1),
                _gemm(wblk=0, act=1, acc=5, n_outer=3, n_inner=7, act_so=7, act_si=1)]
    elif case == "back_to_back_overlap":  # the next GEMM hits the lines the previous one is still writing
        prog = [_gemm(wblk=1, act=0, acc=0, n_inner=6, act_si=1, acc_si=1, reset=1),
                _gemm(wblk=2, act=10, acc=4, n_inner=6, act_si=1, acc_si=1),
                _gemm(wblk=3, act=20, acc=9, n_outer=2, n_inner=2, act_so=-3, act_si=1, acc_so=0, acc_si=0)]
    else:
        prog = [_gemm(wblk=int(rng.integers(0, p.wgt_blocks)), act=int(rng.integers(20, 40)),
                      acc=int(rng.integers(0, 4)), n_outer=int(rng.integers(1, 4)), n_inner=int(rng.integers(1, 4)),
                      act_so=int(rng.integers(-5, 6)), act_si=int(rng.integers(-3, 4)), acc_so=int(rng.integers(0, 4)),
                      acc_si=int(rng.integers(0, 3)), reset=int(k == 0)) for k in range(6)]
    h = GemmHarness(t, act, wgt)
    e = h.eng

    async def bench(ctx):
        for g in prog:
            ctx.set(e.word, isa.encode(g))
            while not ctx.get(e.accept):
                await ctx.tick()
            ctx.set(e.start, 1)
            await ctx.tick()
            ctx.set(e.start, 0)
        while ctx.get(e.busy):
            await ctx.tick()
        got = np.array([unlanes(ctx.get(h.acc.data[i]), 32, 4) for i in range(p.acc_lines)])
        want = _gemm_reference(t, act, wgt, prog)
        written = np.zeros(p.acc_lines, bool)
        for g in prog:
            f = dict(g.fields)
            for i in range(f["n_outer"]):
                for j in range(f["n_inner"]):
                    written[f["acc"] + i * f["acc_so"] + j * f["acc_si"]] = True
        np.testing.assert_array_equal(got[written], want[written])

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# ---- pre-decode: the RTL's error codes equal the model's on random instructions ------------------
def _random_word(rng, target) -> int:
    op = int(rng.choice([o for o in range(16)] + [int(o) for o in Op] * 3))
    word = op | (int(rng.integers(0, 8)) << isa.WAIT_LSB)
    if op in isa.LAYOUT:
        sp = target["scratchpad"]
        near = [0, 1, 2, 3, sp["act_lines"] - 3, sp["acc_lines"] - 2, 2 * sp["wgt_bank_blocks"], sp["param_entries"]]
        for pos, f in isa.LAYOUT[Op(op)].values():
            r = rng.random()
            if r < 0.5:
                v = int(rng.choice(near)) % (1 << f.width)
            elif r < 0.7:
                v = int(rng.integers(0, 1 << f.width))
            else:
                v = int(rng.integers(0, 5)) if not f.signed else int(rng.integers(-3, 4)) % (1 << f.width)
            word |= v << pos
    return word


def _predecode(target, words):
    """The error code the Fetch unit's pre-decode gives each instruction word, in order."""
    dut = Fetch(TileParams.from_target(target))
    got = []

    async def bench(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for w in words + [None] * (isa.PREDECODE_STAGES + 2):
            ctx.set(dut.imem_data_valid, int(w is not None))
            ctx.set(dut.imem_data, w or 0)
            ctx.set(dut.pop, 0)
            if ctx.get(dut.head_valid):
                got.append(ctx.get(dut.head_err))
                ctx.set(dut.pop, 1)
            await ctx.tick()
    run(dut, bench)
    return got


def test_predecode_error_codes_match_model():
    t = small_target(n=4)
    model = TileModel(t)
    rng = np.random.default_rng(4)
    words = [_random_word(rng, t) for _ in range(300)]
    got = _predecode(t, words)

    def model_code(w):
        op = w & 0xF
        f = dict(isa.decode(w).fields) if op in isa.LAYOUT else {}
        return int(model.check(op, f))
    want = [model_code(w) for w in words]
    assert got == want
    assert {0, 1, 2, 3} <= set(want), "the random instructions must exercise every error code"


# ---- Wishbone adapter ----------------------------------------------------------------------------
def test_wishbone_registers_start_and_status():
    t = small_target(n=4, lm=1)
    dut = WishboneTile(t)
    program = [isa.encode(isa.make(Op.NOP)), isa.encode(isa.make(Op.FINISH))]
    reads = {}

    async def wb(ctx, adr, data=None):
        ctx.set(dut.wb_cyc, 1)
        ctx.set(dut.wb_stb, 1)
        ctx.set(dut.wb_adr, adr)
        ctx.set(dut.wb_we, int(data is not None))
        ctx.set(dut.wb_dat_w, data or 0)
        while True:
            await ctx.tick()
            if ctx.get(dut.wb_ack):
                break
        value = ctx.get(dut.wb_dat_r)
        ctx.set(dut.wb_cyc, 0)
        ctx.set(dut.wb_stb, 0)
        await ctx.tick()
        return value

    async def imem(ctx):  # instruction memory with one cycle of latency, in the background
        ctx.set(dut.imem_ready, 1)
        pending = []
        while True:
            if pending:
                a = pending.pop(0)
                ctx.set(dut.imem_data, program[a - 40] if 0 <= a - 40 < len(program) else 0)
                ctx.set(dut.imem_data_valid, 1)
            else:
                ctx.set(dut.imem_data_valid, 0)
            if ctx.get(dut.imem_valid):
                pending.append(ctx.get(dut.imem_addr))
            await ctx.tick()

    async def bench(ctx):
        reads["id"] = await wb(ctx, REGS.index("ID"))
        await wb(ctx, REGS.index("PROG_ADDR"), 40)
        reads["prog"] = await wb(ctx, REGS.index("PROG_ADDR"))
        reads["config"] = await wb(ctx, REGS.index("CONFIG"))
        await wb(ctx, REGS.index("CTRL"), 1)
        for _ in range(40):
            await ctx.tick()
        reads["irq"] = ctx.get(dut.irq)
        reads["status"] = await wb(ctx, REGS.index("STATUS"))
        reads["cycles"] = await wb(ctx, REGS.index("CYCLES"))
        reads["error"] = await wb(ctx, REGS.index("ERROR_CODE"))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(imem, background=True)
    sim.run()
    timing = isa.Timing.from_target(t)
    assert reads["id"] == ID and reads["prog"] == 40
    assert reads["config"] & 0xFF == 4 and (reads["config"] >> 8) & 0xFF == 4
    assert reads["status"] == 0b010 and reads["irq"] == 1 and reads["error"] == 0
    # NOP issues when it arrives, FINISH one cycle later (its request is one cycle later too)
    assert reads["cycles"] == 1 + timing.FETCH_LATENCY + 1


def test_tile_params_come_from_the_target_only():
    for name in ("tile8x8", "tile32x32"):
        t = load_target(name)
        p = TileParams.from_target(t)
        assert (p.n, p.act_lines, p.acc_lines, p.beat_bytes) == (t["array"]["rows"], t["scratchpad"]["act_lines"],
                                                                 t["scratchpad"]["acc_lines"], t["bus"]["bytes"])
        assert p.wgt_rows * p.n == t["derived"]["wgt_bytes"]
    with pytest.raises(ValueError, match="validated tile target"):
        TileParams.from_target({"kind": "cpu", "name": "cpu"})


def test_tile_v_converts_in_the_background_into_the_cache(tmp_path, monkeypatch):
    """`hwc build` converts tile.v in another process while it schedules (hwc.hw.generate.convert_in_background):
    the cached text is the in-process conversion's, and a cached target starts no process."""
    from hwc.hw.generate import convert_in_background, finish_background, verilog_text

    monkeypatch.setenv("HWC_CACHE", str(tmp_path))
    t = small_target()
    proc = convert_in_background(t)
    assert proc is not None, "nothing cached yet: a conversion starts"
    finish_background(proc)
    assert proc.returncode == 0
    cached = list((tmp_path / "hdl").glob("*.v"))
    assert len(cached) == 1
    assert cached[0].read_text() == verilog_text(t, cache=False)[0]
    assert convert_in_background(t) is None, "cached: no second conversion"
    killed = convert_in_background(small_target(n=2))
    finish_background(killed, kill=True)   # (a build that failed meanwhile): no half-written file
    assert [p.name for p in (tmp_path / "hdl").iterdir()] == [cached[0].name]


def test_fast_meminit_writes_the_same_rtlil_as_amaranth():
    """hwc.hw.generate.fast_meminit replaces how Amaranth's backend writes memory contents (one string instead
    of an object per bit): the RTLIL must be Amaranth's own, byte for byte, for the memory shapes tile.v has
    (all-zero scratchpads) and others (signed words with negative contents, one-bit words, a partial init)."""
    from amaranth.back import rtlil
    from amaranth.hdl import signed
    from hwc.hw.generate import fast_meminit

    class Mems(Elaboratable):
        def elaborate(self, platform):
            m = Module()
            shapes = [(8, 16, []), (signed(12), 5, [-1, 2047, -2048, 0, 7]), (1, 9, [1, 0, 1]),
                      (64, 128, [0x0123456789ABCDEF, (1 << 64) - 1])]
            for k, (shape, depth, init) in enumerate(shapes):
                mem = m.submodules[f"mem{k}"] = Memory(shape=shape, depth=depth, init=init)
                rd = mem.read_port()
                wr = mem.write_port()
                m.d.comb += [rd.addr.eq(wr.addr + 1)]
            return m

    with fast_meminit():
        ours_fast = rtlil.convert(Mems(), ports=[])
    theirs = rtlil.convert(Mems(), ports=[])
    assert "$meminit_v2" in theirs and theirs.count("$meminit_v2") == 4
    assert ours_fast == theirs
    assert rtlil.ModuleEmitter.emit_memory.__name__ == "emit_memory" and \
        rtlil.ModuleEmitter.emit_memory.__qualname__.startswith("ModuleEmitter"), "the original is restored"
