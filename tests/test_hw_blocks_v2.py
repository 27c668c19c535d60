"""amaranth.sim unit tests of the tile v2 blocks (docs/tile-v2.md), against plain numpy: the GEMM
engine's depthwise mode (the line shift register, `skip`, ACC addressing) mixed with ordinary
GEMMs, and the pre-decode's v2 BAD_FIELD rule and ACC range check."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator
from hwc.hw.params import TileParams
from hwc.targets import tile_variant
from test_hw_blocks import GemmHarness, _gemm, _predecode, _random_word, small_target, unlanes

from hwc import isa

Op, E = isa.Op, isa.ErrorCode


def v2_target(**kw):
    return tile_variant(small_target(**kw), post_unit=True, depthwise=True)


def _gemm_v2_reference(target, act, wgt, program):
    """numpy, one line at a time: SR of the inner loop's lines, PE (r, c) = W[r][c] * SR[c][r] in dw mode."""
    n = target["array"]["rows"]
    acc = np.zeros((target["scratchpad"]["acc_lines"], n), np.int64)
    written = np.zeros(len(acc), bool)
    for g in program:
        f = dict(g.fields)
        w = wgt[f["wblk"] * n:(f["wblk"] + 1) * n].astype(np.int64)
        for i in range(f["n_outer"]):
            lines = [act[f["act"] + i * f["act_so"] + j * f["act_si"]].astype(np.int64) for j in range(f["n_inner"])]
            for j, x in enumerate(lines):
                if f["dw"]:
                    sr = [lines[j - c] if j - c >= 0 else np.zeros(n, np.int64) for c in range(n)]
                    dot = np.array([sum(w[r, c] * sr[c][r] for c in range(n)) for r in range(n)])
                else:
                    dot = w @ x
                if j < f["skip"]:
                    continue
                a = f["acc"] + i * f["acc_so"] + (j - f["skip"]) * f["acc_si"]
                acc[a] = (0 if f["reset"] else acc[a]) + dot
                written[a] = True
    return acc, written


@pytest.mark.parametrize("case", ["conv3_rows", "mixed_back_to_back", "random"])
def test_gemm_engine_depthwise_mode_with_skip(case):
    n = 4
    t = v2_target(n=n, act_lines=64, acc_lines=32)
    p = TileParams.from_target(t)
    rng = np.random.default_rng({"conv3_rows": 1, "mixed_back_to_back": 2, "random": 3}[case])
    act = rng.integers(-128, 128, (p.act_lines, n))
    wgt = rng.integers(-128, 128, (p.wgt_rows, n))
    if case == "conv3_rows":  # a 3-tap depthwise row as the scheduler emits it: skip 2, three rows accumulated
        prog = [_gemm(wblk=k, act=8 * k, acc=0, n_outer=2, n_inner=7, act_so=20, act_si=1, acc_so=5, acc_si=1,
                      reset=int(k == 0), dw=1, skip=2) for k in range(3)]
    elif case == "mixed_back_to_back":  # dw and plain GEMMs streaming back to back, the SR must restart
        prog = [_gemm(wblk=0, act=0, acc=0, n_outer=1, n_inner=6, act_si=1, acc_si=1, reset=1, dw=1, skip=0),
                _gemm(wblk=1, act=10, acc=6, n_outer=3, n_inner=2, act_so=2, act_si=1, acc_so=2, acc_si=1,
                      reset=1),
                _gemm(wblk=2, act=20, acc=12, n_outer=2, n_inner=5, act_so=-3, act_si=2, acc_so=4, acc_si=1,
                      reset=1, dw=1, skip=1),
                _gemm(wblk=3, act=40, acc=12, n_outer=2, n_inner=5, act_so=5, act_si=-1, acc_so=4, acc_si=1,
                      reset=0, dw=1, skip=1),
                _gemm(wblk=2, act=3, acc=20, n_outer=1, n_inner=1, reset=1, dw=1, skip=0)]
    else:
        prog = []
        for _ in range(10):
            dw = int(rng.integers(0, 2))
            ni = int(rng.integers(1, 9))
            skip = int(rng.integers(0, min(ni, 8))) if dw else 0
            prog.append(_gemm(wblk=int(rng.integers(0, p.wgt_blocks)), act=int(rng.integers(20, 40)),
                              acc=int(rng.integers(0, 6)), n_outer=int(rng.integers(1, 4)), n_inner=ni,
                              act_so=int(rng.integers(-5, 6)), act_si=int(rng.integers(-2, 3)),
                              acc_so=int(rng.integers(0, 6)), acc_si=int(rng.integers(0, 3)),
                              reset=int(rng.integers(0, 2)), dw=dw, skip=skip))
    assert any(dict(g.fields)["skip"] for g in prog)
    h = GemmHarness(t, act, wgt)
    e = h.eng
    want, written = _gemm_v2_reference(t, act, wgt, prog)

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
        got = np.array([unlanes(ctx.get(h.acc.data[i]), 32, n) for i in range(p.acc_lines)])
        # lines never written keep the memory's zero; the int32 wrap cannot occur at these magnitudes
        np.testing.assert_array_equal(got[written], want[written])
        assert not got[~written].any()

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_predecode_v2_gemm_fields():
    """The v2 rule, written out: BAD_FIELD iff skip >= n_inner (dw = 1) or skip != 0 with dw = 0; the ACC
    range counts n_inner - skip writes per row. Without the depthwise feature any dw or skip is BAD_FIELD."""
    t = v2_target(n=4, act_lines=64, acc_lines=16)
    g = dict(wblk=0, act=0, acc=0, n_outer=2, n_inner=5, act_so=5, act_si=1, acc_so=3, acc_si=1, reset=1)
    cases = [  # (fields, v2 code, v1 code)
        (dict(dw=1, skip=0), E.NONE, E.BAD_FIELD),
        (dict(dw=1, skip=2), E.NONE, E.BAD_FIELD),
        (dict(dw=1, skip=4), E.NONE, E.BAD_FIELD),
        (dict(dw=1, skip=5), E.BAD_FIELD, E.BAD_FIELD),         # skip == n_inner
        (dict(dw=1, skip=7), E.BAD_FIELD, E.BAD_FIELD),
        (dict(dw=0, skip=1), E.BAD_FIELD, E.BAD_FIELD),         # skip without dw
        (dict(dw=0, skip=0), E.NONE, E.NONE),
        # ACC from 12, rows 3 apart, n_inner - skip lines of 1: the last line is 12 + 3 + (4 - skip) (16 lines)
        (dict(acc=12, dw=1, skip=2), E.OUT_OF_RANGE, E.BAD_FIELD),
        (dict(acc=12, dw=1, skip=3), E.OUT_OF_RANGE, E.BAD_FIELD),
        (dict(acc=12, dw=1, skip=4), E.NONE, E.BAD_FIELD),
        (dict(acc=12, dw=0, skip=0), E.OUT_OF_RANGE, E.OUT_OF_RANGE),
    ]
    words = [isa.encode(_gemm(**{**g, **kw})) for kw, _, _ in cases]
    assert _predecode(t, words) == [int(c) for _, c, _ in cases]
    v1 = small_target(n=4, act_lines=64, acc_lines=16)
    assert _predecode(v1, words) == [int(c) for _, _, c in cases]


def test_predecode_v2_random_words_match_model():
    from hwc.sim.model import TileModel

    t = v2_target(n=4)
    model = TileModel(t)
    rng = np.random.default_rng(14)
    words = [_random_word(rng, t) for _ in range(300)]
    # GEMMs with dw set and small skips, so that the v2 rule's both outcomes occur
    for _ in range(60):
        word = isa.encode(_gemm(n_outer=int(rng.integers(1, 3)), n_inner=int(rng.integers(1, 6)),
                                acc=int(rng.integers(0, 16)), acc_so=int(rng.integers(0, 4)),
                                acc_si=int(rng.integers(0, 3)), dw=int(rng.integers(0, 2)),
                                skip=int(rng.integers(0, 8))))
        words.append(word)
    rng.shuffle(words)

    def model_code(w):
        op = w & 0xF
        f = dict(isa.decode(w).fields) if op in isa.LAYOUT else {}
        return int(model.check(op, f))
    assert _predecode(t, words) == [model_code(w) for w in words]
