"""The energy estimate: hand-computed for one small matmul, cross-checked against the Python
tile model's own counters, the target table and its errors."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from hwc.targets import load_target
from report_helpers import matmul_calib, matmul_model

import hwc
from hwc import isa, zoo
from hwc.errors import TargetError
from hwc.report.energy import DEFAULT_PJ, energy_table

# Horowitz, ISSCC 2014, 45 nm (the defaults of targets/tile8x8.yaml), in pJ
MAC8, ADD32, MUL32, SRAM, DRAM = 0.2 + 0.03, 0.1, 3.1, 10 / 8, 1300 / 8
MACF, ADDF, MULF = 3.7 + 0.9, 0.9, 3.7
TILE8X8 = resources.files("hwc.targets").joinpath("tile8x8.yaml").read_text()


@pytest.fixture(scope="module")
def matmul_tile():
    return hwc.build(matmul_model(), "tile8x8", calib=matmul_calib(), hdl=False)


def test_the_matmul_program_is_the_one_computed_by_hand(matmul_tile):
    prog = isa.from_bytes(matmul_tile.program)
    # the PARAM load goes behind the GEMM's loads: only the PPU needs it
    assert [(i.op, i.get("mem") if i.op == isa.Op.LOAD else None) for i in prog] == [
        (isa.Op.LOAD, isa.Mem.ACT), (isa.Op.LOAD, isa.Mem.WGT), (isa.Op.GEMM, None), (isa.Op.LOAD, isa.Mem.PARAM),
        (isa.Op.PPU, None), (isa.Op.STORE, None), (isa.Op.FINISH, None)]
    load_x, load_w, gemm, load_param, ppu, store, _ = prog
    assert load_param.rows * load_param.row_beats == 10            # one PARAM entry: ceil((4*8+4*8+8+3)/8) beats
    assert load_x.rows * load_x.row_beats == 1 and load_w.rows * load_w.row_beats == 8
    assert gemm.n_outer * gemm.n_inner == 1 and ppu.n_outer * ppu.n_inner == 1
    assert store.rows * store.row_beats == 1


def test_matmul_energy_equals_the_hand_computation(matmul_tile):
    # N = 8 lanes, a beat = a line = 8 bytes, an ACC line = 32 bytes, a PARAM entry = 10 beats = 80 bytes.
    # compute: GEMM 1 line x 8x8 MACs, 8 int32 accumulate adds; PPU 8 lanes x (1 mult + 3 adds)
    compute = 64 * MAC8 + 8 * ADD32 + 8 * (MUL32 + 3 * ADD32)
    # on chip, bytes read: GEMM 64 weight + 8 act + 32 ACC; PPU 80 param + 32 ACC; STORE 8 act
    # on chip, bytes written: LOADs 80 param + 8 act + 64 weight; GEMM 32 ACC; PPU 8 act
    onchip = (64 + 8 + 32 + 80 + 32 + 8) * SRAM + (80 + 8 + 64 + 32 + 8) * SRAM
    # off chip: the three LOADs (80 + 8 + 64 bytes), the STORE (8), 7 instructions fetched x 16 bytes
    offchip = (80 + 8 + 64 + 8 + 7 * 16) * DRAM
    e = matmul_tile.report["energy"]
    assert e["total"]["compute_pj"] == pytest.approx(compute, abs=1e-6) == pytest.approx(42.72)
    assert e["total"]["onchip_pj"] == pytest.approx(onchip, abs=1e-6) == pytest.approx(520.0)
    assert e["total"]["offchip_pj"] == pytest.approx(offchip, abs=1e-6) == pytest.approx(44200.0)
    assert e["total"]["total_pj"] == pytest.approx(compute + onchip + offchip, abs=1e-6)
    # the layer carries everything but the input, output and parameter transfers
    layer = next(r for r in e["layers"] if r["name"] == matmul_tile.report["layers"][0]["name"])
    assert layer["compute_pj"] == pytest.approx(compute, abs=1e-6)
    assert layer["offchip_pj"] == pytest.approx((64 + 3 * 16) * DRAM, abs=1e-6)   # weights, LOAD W + GEMM + PPU


def test_matmul_float32_variant_equals_the_hand_computation(matmul_tile):
    v = {x["key"]: x for x in matmul_tile.report["energy"]["variants"]}["float32"]
    # the same events in float32: fp32 MACs/adds/mults; int8 data bytes x4 (ACC, PARAM, instructions unchanged)
    compute = 64 * MACF + 8 * ADDF + 8 * (MULF + 3 * ADDF)
    onchip = ((64 + 8 + 8) * 4 + 32 + 32 + 80) * SRAM + ((8 + 64 + 8) * 4 + 80 + 32) * SRAM
    offchip = ((8 + 64 + 8) * 4 + 80 + 7 * 16) * DRAM
    assert v["compute_pj"] == pytest.approx(compute, abs=1e-6)
    assert v["onchip_pj"] == pytest.approx(onchip, abs=1e-6)
    assert v["offchip_pj"] == pytest.approx(offchip, abs=1e-6)


def test_reference_estimate_of_the_float_matmul_equals_the_hand_computation():
    e = hwc.build(matmul_model(), "ref").report["energy"]
    # 64 fp32 MACs; on chip x (32 B) and W, b (256 + 32 B) read, y (32 B) written;
    # off chip the weights (288 B), the input and the output (32 B each) once
    assert e["precision"] == "fp32"
    assert e["total"]["compute_pj"] == pytest.approx(64 * MACF, abs=1e-6)
    assert e["total"]["onchip_pj"] == pytest.approx((32 + 288 + 32) * SRAM, abs=1e-6)
    assert e["total"]["offchip_pj"] == pytest.approx((288 + 32 + 32) * DRAM, abs=1e-6)
    int8 = {x["key"]: x for x in e["variants"]}["int8"]
    assert int8["compute_pj"] == pytest.approx(64 * MAC8, abs=1e-6)


def test_tile_event_counts_agree_with_the_python_tile_model():
    """The report's counts (from the program) against the tile model's own counters (from the run)."""
    m = zoo.small_cnn(0)
    art = hwc.build(m, "tile8x8", calib=zoo.random_inputs(m, n=4, seed=0), hdl=False)
    rep = art.report
    ev = rep["energy"]["events"]
    assert ev["mac_int8"] == rep["array_macs_issued"]
    assert ev["dram_act_read_bytes"] + ev["dram_wgt_read_bytes"] + ev["dram_param_read_bytes"] == rep["bytes_loaded"]
    assert ev["dram_act_write_bytes"] == rep["bytes_stored"]
    assert ev["insn_fetch_bytes"] == 16 * rep["instructions"]
    assert ev.get("add_int8", 0) > 0                                    # the max pooling runs on VEC MAX
    # double-buffering moves loads in time, not in number: same events, more cycles without it
    v = {x["key"]: x for x in rep["energy"]["variants"]}
    assert v["no_double_buffer"]["cycles"] >= v["as_built"]["cycles"]
    assert v["no_double_buffer"]["total_pj"] == v["as_built"]["total_pj"]
    assert v["as_built"]["vs_as_built_pj"] == 0


def test_the_energy_table_comes_from_the_target_yaml(tmp_path):
    doc = yaml.safe_load(TILE8X8)
    doc["energy_pj"] = {"mac_int8": 1.0, "source": "a test table"}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    table = energy_table(load_target(str(path)))
    assert table["pj"]["mac_int8"] == 1.0 and table["source"] == "a test table"
    assert table["pj"]["dram_byte"] == DEFAULT_PJ["dram_byte"] and "dram_byte" in table["defaults"]
    art = hwc.build(matmul_model(), str(path), calib=matmul_calib(), hdl=False)
    assert art.report["energy"]["table"]["pj"]["mac_int8"] == 1.0
    assert art.report["energy"]["total"]["compute_pj"] == pytest.approx(64 * 1.0 + 8 * ADD32 + 8 * (MUL32 + 3 * ADD32))


@pytest.mark.parametrize("entry, message", [
    ({"mac_int9": 1}, "unknown key energy_pj.'mac_int9'"),
    ({"dram_byte": -1}, "energy_pj.dram_byte must be a non-negative number"),
    ({"dram_byte": "lots"}, "energy_pj.dram_byte must be a non-negative number"),
    ({"source": 3}, "energy_pj.source must be a string"),
])
def test_bad_energy_tables_are_target_errors(tmp_path, entry, message):
    doc = yaml.safe_load(TILE8X8)
    doc["energy_pj"] = entry
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_target(str(path))


def test_bundled_targets_name_their_source_and_use_the_published_figures():
    for name in ("tile8x8", "tile32x32", "cpu"):
        table = energy_table(load_target(name))
        assert table["pj"] == DEFAULT_PJ and table["defaults"] == []
        assert "Horowitz" in table["source"] and "ISSCC 2014" in table["source"]
