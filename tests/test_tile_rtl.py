"""Whole-tile RTL tests: the generated tile.v under Icarus (cocotb, hwc/sim/cocotb/tb_tile.py),
for tile8x8 and tile32x32. Outputs are checked bit-exactly against numpy + hwc.quant.arith
(hwc.sim.programs), cycle counts and every instruction's issue cycle against the TileModel.

This file only launches: one tile.v generation, one Icarus compile and one simulator
run per target (module-scoped fixture); each test then checks one scenario's results.
"""

from __future__ import annotations

import numpy as np
import pytest
from hwc.hw.generate import generate, verilog_text
from hwc.sim import programs
from hwc.sim.model import TileModel
from hwc.sim.rtl import Scenario, run_scenarios
from hwc.targets import load_target, tile_variant

from hwc import isa


def v1_target(name: str) -> dict:
    """The v1 tile of docs/tile.md (the bundled targets enable the v2 features; tests of v2: *_v2.py)."""
    return tile_variant(load_target(name), post_unit=False, depthwise=False)

Op, Wait, Mem, E = isa.Op, isa.Wait, isa.Mem, isa.ErrorCode
TARGETS = ["tile8x8", "tile32x32"]
#: sizes per target: (pixels, K, M) of the GEMM workload; small for the 32x32 (simulation cost)
SIZES = {"tile8x8": (16, 24, 16), "tile32x32": (8, 64, 64)}


def error_workloads(t: dict) -> list[programs.Workload]:
    n = t["array"]["rows"]
    act_lines = t["scratchpad"]["act_lines"]
    out = []

    def make(name, bad, data=4096):
        """FILL; STORE it to d0; <bad>; STORE it to d0 + 8 (never runs); FINISH."""
        d0 = -(-5 * isa.INSN_BYTES // n)  # the data area starts right after the five instructions
        prog = [isa.make(Op.FILL, addr=0, count=4, value=5),
                isa.make(Op.STORE, Wait.COMPUTE, dram=d0, sram=0, rows=1, row_beats=4, dram_stride=0, sram_stride=0),
                bad if isinstance(bad, isa.Insn) else isa.make(Op.NOP),
                isa.make(Op.STORE, Wait.STORE, dram=d0 + 8, sram=0, rows=1, row_beats=4, dram_stride=0,
                         sram_stride=0),
                isa.make(Op.FINISH)]
        wl = programs.with_program(t, prog, data, name)
        assert programs.data_base(wl, n) == d0
        if not isinstance(bad, isa.Insn):
            wl.dram[2 * isa.INSN_BYTES:3 * isa.INSN_BYTES] = bad.to_bytes(isa.INSN_BYTES, "little")
        # the store before the fault ran; the faulty instruction and everything after did nothing
        wl.expect = [(d0 * n, bytes([5]) * 4 * n + bytes(16 * n))]
        return wl

    # opcode 9 does not exist
    out.append(make("err_illegal", 9 | (1 << isa.WAIT_LSB)))
    # a STORE whose ACT rows run past the end: must not write its (valid) external rows
    d0 = -(-5 * isa.INSN_BYTES // n)
    out.append(make("err_store_oor", isa.make(Op.STORE, dram=d0 + 16, sram=act_lines - 2, rows=1, row_beats=4,
                                              dram_stride=0, sram_stride=0)))
    # a GEMM with n_outer = 0
    out.append(make("err_bad_field", isa.make(Op.GEMM, wblk=0, act=0, acc=0, n_outer=0, n_inner=1, act_so=0,
                                              act_si=0, acc_so=0, acc_si=0, reset=1)))
    # a LOAD of ACT lines past the end (the first rows would be in range)
    out.append(make("err_load_oor", isa.make(Op.LOAD, mem=Mem.ACT, dram=0, sram=act_lines - 4, rows=2, row_beats=3,
                                             dram_stride=3, sram_stride=3)))
    return out


EXPECTED_ERRORS = {"err_illegal": E.ILLEGAL_OPCODE, "err_store_oor": E.OUT_OF_RANGE, "err_bad_field": E.BAD_FIELD,
                   "err_load_oor": E.OUT_OF_RANGE}


def workloads(t: dict) -> list[programs.Workload]:
    rng = np.random.default_rng(hash(t["name"]) % 2**32)
    pixels, k, m = SIZES[t["name"]]
    wl = [programs.matmul(t, rng, pixels, k, m, overlap=True, relu=True, name="mm")]
    # the same data without overlapping weight loads and compute
    serial = programs.matmul(t, np.random.default_rng(hash(t["name"]) % 2**32), pixels, k, m, overlap=False,
                             relu=True, name="mm_serial")
    assert serial.expect == wl[0].expect
    wl.append(serial)
    wl.append(programs.matmul(t, rng, pixels, k, m, overlap=True, relu=False, name="mm_backpressure"))
    wl.append(programs.pool_sum(t, rng, pixels=2 * pixels + 1, name="pool"))
    wl.append(programs.vec(t, rng, lines=6, name="vec"))
    wl.extend(error_workloads(t))
    return wl


@pytest.fixture(scope="module", params=TARGETS)
def rtl(request, tmp_path_factory):
    t = v1_target(request.param)
    out = tmp_path_factory.mktemp(f"hw_{t['name']}")
    generate(t, out)
    wls = {w.name: w for w in workloads(t)}
    models, scenarios = {}, []
    for w in wls.values():
        dram = bytearray(w.dram)
        models[w.name] = (TileModel(t).run(None, dram, w.prog_addr), dram)
        back = w.name == "mm_backpressure"
        scenarios.append(Scenario(w.name, bytes(w.dram), w.prog_addr,
                                  expect_cycles=None if back else models[w.name][0].cycles,
                                  ready="random" if back else "always", seed=7))
    results = run_scenarios(t, out / "tile.v", scenarios, workdir=out / "work", build_root=out / "build")
    return t, out, wls, models, results


def _outputs(res, wl):
    return [res["after"][a:a + len(b)] for a, b in wl.expect]


@pytest.mark.parametrize("name", ["mm", "mm_serial", "pool", "vec"])
def test_outputs_bit_exact_and_cycles_equal_model(rtl, name):
    t, _, wls, models, results = rtl
    res, wl = results[name], wls[name]
    model, model_dram = models[name]
    assert res["done"] and not res["error"] and not res["timeout"]
    assert _outputs(res, wl) == [b for _, b in wl.expect], "RTL outputs differ from numpy"
    assert res["after"] == bytes(model_dram), "RTL memory image differs from the model's"
    assert res["cycles"] == model.cycles == res["cycle_counter"]
    assert [pc for pc, _ in res["issues"]] == list(range(model.insns))
    assert [c for _, c in res["issues"]] == model.issue.tolist(), "issue cycles differ from the model"
    assert res["unit_busy"] == [model.busy["load"], model.busy["compute"], model.busy["store"]]


def test_backpressure_keeps_results_exact(rtl):
    t, _, wls, models, results = rtl
    res, wl = results["mm_backpressure"], wls["mm_backpressure"]
    assert res["done"] and not res["error"]
    assert _outputs(res, wl) == [b for _, b in wl.expect]
    assert res["cycles"] > models["mm_backpressure"][0].cycles  # a slower memory costs cycles, not bits


def test_weight_load_overlaps_gemm(rtl):
    t, _, wls, models, results = rtl
    fast, slow = results["mm"], results["mm_serial"]
    assert _outputs(fast, wls["mm"]) == _outputs(slow, wls["mm_serial"]) == [b for _, b in wls["mm"].expect]
    busy = fast["unit_busy"]
    # concurrency: the program took fewer cycles than its units were busy in total, and fewer than
    # the same program with every weight LOAD waiting for the compute unit
    assert fast["cycles"] < sum(busy)
    assert fast["cycles"] < slow["cycles"]
    # and a weight LOAD issued while a GEMM was still streaming (issue cycles from the RTL monitor)
    m = models["mm"][0]
    issue = dict(fast["issues"])
    prog = wls["mm"].program
    gemm_spans = [(issue[k], m.end[k]) for k, i in enumerate(prog) if i.op == Op.GEMM]
    wloads = [issue[k] for k, i in enumerate(prog) if i.op == Op.LOAD and i.get("mem") == Mem.WGT]
    assert any(s < c < e for c in wloads for s, e in gemm_spans)


@pytest.mark.parametrize("name", sorted(EXPECTED_ERRORS))
def test_errors_halt_without_writing(rtl, name):
    t, _, wls, models, results = rtl
    res, wl = results[name], wls[name]
    model = models[name][0]
    assert res["error"] and not res["done"]
    assert res["error_code"] == EXPECTED_ERRORS[name] == model.error
    assert res["error_pc"] == 2 == model.error_pc
    assert [pc for pc, _ in res["issues"]] == [0, 1], "nothing at or after the faulty instruction issued"
    assert res["cycles"] == model.cycles
    assert _outputs(res, wl) == [b for _, b in wl.expect]
    if name == "err_load_oor":
        assert res["beats_read"] == 0
    assert res["beats_written"] == 4, "only the STORE before the fault wrote (err_store_oor: d0 + 16.. stays 0)"


def test_tile_json_and_deterministic_verilog(rtl):
    t, out, *_ = rtl
    import json

    info = json.loads((out / "tile.json").read_text())
    assert info["config_name"] == t["derived"]["config_name"]
    widths = {p["name"]: p["width"] for p in info["ports"]}
    assert widths["dmem_rdata"] == 8 * t["bus"]["bytes"] and widths["imem_data"] == isa.INSN_BITS
    if t["name"] == "tile8x8":  # byte-identical Verilog for the same target (the 32x32 takes longer)
        assert verilog_text(t, cache=False)[0] == (out / "tile.v").read_text()   # (converted again)


def test_run_rtl_single_program(rtl, tmp_path):
    """The entry point `hwc sim --rtl` uses: tile.v as text, the whole image back, a VCD on request."""
    from hwc.sim.rtl import run_rtl

    t, out, *_ = rtl
    wl = programs.vec(t, np.random.default_rng(11), lines=4, name="single")
    model = TileModel(t).run(None, bytearray(wl.dram), 0)
    code = isa.to_bytes(wl.program)
    vcd = tmp_path / "wave.vcd" if t["name"] == "tile8x8" else None
    image, cycles = run_rtl(t, (out / "tile.v").read_text(), code, bytes(wl.dram), 0, wl.regions, vcd=vcd,
                            build_root=out / "build")
    assert cycles == model.cycles
    assert [bytes(image[a:a + len(b)]) for a, b in wl.expect] == [b for _, b in wl.expect]
    if vcd is not None:
        head = vcd.read_text(errors="replace")[:200_000]
        assert "$enddefinitions" in head and "dbg_issue" in head
