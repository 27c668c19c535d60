"""A small CNN through the whole chain: float model -> int8 -> tile program -> RTL (cocotb + Icarus).
The RTL's outputs and cycle count must equal the Python tile model's, whose outputs equal the
int8 reference interpreter's and the CPU int8 bundle's (ARCHITECTURE.md, the bit-exact chain)."""

from pathlib import Path

import numpy as np
import pytest

import hwc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_digits_cnn_rtl_equals_model_equals_int8_reference(tmp_path):
    art = hwc.build(EXAMPLES / "digits_cnn.onnx", target="tile8x8", calib=EXAMPLES / "digits_calib.npz")
    art = hwc.load(art.save(tmp_path / "out"))  # through the files, as `hwc sim` does
    x = np.load(EXAMPLES / "digits_test.npz")["input"]
    ref = art.run({"input": x[:3]}, engine="reference")["logits"]
    model = art.run({"input": x[:3]}, engine="model")["logits"]
    np.testing.assert_array_equal(model, ref)
    model_cycles = art.last_run["cycles"]
    rtl = art.run({"input": x[0]}, engine="rtl")["logits"]
    rtl_cycles = art.last_run["cycles"]
    np.testing.assert_array_equal(rtl, model[0])
    assert rtl_cycles == model_cycles == art.report["cycles"]


def test_bit_exact_chain_includes_the_cpu_int8_bundle():
    """The same int8 graph compiled for the CPU gives the same bits as the tile and the reference."""
    from hwc.targets import load_target

    from hwc.backends.cpu import build_artifact

    tile = hwc.build(EXAMPLES / "digits_cnn.onnx", target="tile8x8", calib=EXAMPLES / "digits_calib.npz", hdl=False)
    cpu = build_artifact(load_target("cpu"), tile.graph, {}, {"int8": True})
    x = {"input": np.load(EXAMPLES / "digits_test.npz")["input"][:40]}
    ref = tile.run(x, engine="reference")["logits"]
    np.testing.assert_array_equal(tile.run(x, engine="model")["logits"], ref)
    np.testing.assert_array_equal(cpu.run(x)["logits"], ref)


def test_depthwise_cnn_on_the_v2_tile_rtl_equals_model_equals_int8_reference():
    """Tile v2 (docs/tile-v2.md) end to end: a small CNN with depthwise convolutions (stride 1 and 2) built
    for a v2 variant of tile8x8, with HDL; the program uses GEMM.dw / GEMM.skip and the POST unit; the
    generated tile.v's outputs and cycles equal the model's, whose outputs equal the int8 reference's."""
    from hwc.targets import load_target, tile_variant
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.ref.interp import run_graph
    from hwc.tile.build import build_tile

    # (without GEMM.dwp's row buffers, so that the row-wise schedules with skips run: test_depthwise_over_rows)
    target = tile_variant(load_target("tile8x8"), dw_line_buffer=0)
    b = QBuilder(seed=21)
    x = b.input("x", (1, 6, 9, 9), zp=-3)
    y = b.conv(x, 16, relu=True)
    y = b.conv(y, 16, k=3, group=16, relu=True)                                  # depthwise, stride 1
    y = b.conv(y, 16, k=3, stride=2, pads=[0, 0, 1, 1], group=16, relu=True)     # depthwise, stride 2
    y = b.conv(y, 12, k=1, pads=[0, 0, 0, 0])
    g = b.output(y)
    verify(g)
    art = build_tile(g, target, hdl=True)
    assert art.tile_v and "acc_post" in art.tile_v
    prog = isa.from_bytes(art.program)
    assert any(i.op == isa.Op.GEMM and i.get("dw") and i.get("skip") for i in prog)
    assert any(int(i.wait) & isa.Wait.POST for i in prog)
    feeds = {"x": np.random.default_rng(4).integers(-128, 128, (1, 6, 9, 9)).astype(np.int8)}
    want = run_graph(g, feeds)
    model = art.run(feeds, engine="model")
    model_cycles = art.last_run["cycles"]
    rtl = art.run(feeds, engine="rtl")
    rtl_cycles = art.last_run["cycles"]
    for name in g.outputs:
        np.testing.assert_array_equal(model[name], want[name])
        np.testing.assert_array_equal(rtl[name], want[name])
    assert rtl_cycles == model_cycles == art.report["cycles"]


def test_depthwise_schedules_through_the_rtl():
    """The depthwise schedules the cost model picks (docs/tile-v2.md, "Depthwise schedules"): down the
    columns of a tall image (GEMM act_si = the padded width, the PPU writing column by column) and the
    whole padded image in one GEMM (every tap fewer than N lines back; the PPU skipping the lines that are
    not outputs). Through the generated tile.v: outputs and cycles equal the model's, outputs the reference's."""
    from hwc.targets import load_target, tile_variant
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = tile_variant(load_target("tile8x8"), dw_line_buffer=0)   # (with them GEMM.dwp wins: below)
    b = QBuilder(seed=22)
    x = b.input("x", (1, 5, 16, 5), zp=-3)
    y = b.conv(x, 16, k=1, relu=True)
    y = b.conv(y, 16, k=3, group=16, relu=True)                        # 16x5, padded 18x6: columns
    y = b.conv(y, 16, k=2, pads=[0, 0, 0, 0], group=16)                # 16x5: every tap within 6 lines
    y = b.conv(y, 8, k=1)
    g = b.output(y)
    verify(g)
    art = build_tile(g, target, hdl=True)
    dw = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.GEMM and i.get("dw")]
    assert any(i.get("act_si") == 6 and i.get("n_inner") == 16 + 2 for i in dw), "columns"   # (row pitch 5 + 1)
    assert any(i.get("n_outer") == 1 and i.get("act_so") == 0 and i.get("skip") == 0 for i in dw), "whole image"
    feeds = {"x": np.random.default_rng(5).integers(-128, 128, (1, 5, 16, 5)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_depthwise_over_rows_through_the_rtl():
    """GEMM.dwp (docs/tile-v2.md): depthwise layers streaming whole padded rows through the two row buffers
    (8 of 9 taps in one GEMM, the ninth a diagonal GEMM over the outputs), stride 1 on a 14-wide image and
    stride 2 (a GEMM per column phase, every other column: act_si = 2), on the bundled tile8x8: the tile.v's
    outputs and cycles equal the model's, the outputs the int8 reference's."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = load_target("tile8x8")
    b = QBuilder(seed=23)
    x = b.input("x", (1, 5, 10, 14), zp=-3)
    y = b.conv(x, 16, k=1, relu=True)
    y = b.conv(y, 16, k=3, group=16, relu=True)                                  # 10x14, padded 12x15
    y = b.conv(y, 16, k=3, stride=2, group=16, relu=True)                        # 5x7
    g = b.output(b.conv(y, 8, k=1))
    verify(g)
    art = build_tile(g, target, hdl=True)
    dwp = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.GEMM and i.get("dwp")]
    assert any(i.get("n_inner") == 15 and i.get("act_si") == 1 for i in dwp), "rows of the padded width"
    # stride 2: the column phases up to the last output's last tap, x = -1, 1, .., 13 and 0, 2, .., 12
    assert {i.get("n_inner") for i in dwp if i.get("act_si") == 2} == {8, 7}, "stride 2: the column phases"
    feeds = {"x": np.random.default_rng(7).integers(-128, 128, (1, 5, 10, 14)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_depthwise_down_the_columns_over_rows_through_the_rtl():
    """GEMM.dwp down the columns ("pcols", tall narrow maps; a row of 2 pixels, 3 lines with its shared pad
    column, is too short a pitch for "pitch"): the row buffers hold whole padded columns (act_si = the row
    pitch), 6 taps in one GEMM, the first kernel column in a "cols" GEMM accumulating into its output lines.
    RTL == model == int8 reference, equal cycles."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    b = QBuilder(seed=24)
    x = b.input("x", (1, 5, 25, 2), zp=-3)
    y = b.conv(x, 16, k=1, relu=True)
    y = b.conv(y, 16, k=3, group=16, relu=True)
    g = b.output(b.conv(y, 8, k=1))
    verify(g)
    art = build_tile(g, load_target("tile8x8"), hdl=True)
    dwp = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.GEMM and i.get("dwp")]
    assert dwp and all(i.get("act_si") == 3 and i.get("act_so") == 1 for i in dwp), "down the columns"
    feeds = {"x": np.random.default_rng(8).integers(-128, 128, (1, 5, 25, 2)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


@pytest.mark.slow
def test_ds_cnn_on_the_v2_tile_rtl_equals_model_equals_int8_reference():
    """MLPerf-Tiny-shaped DS-CNN (depthwise-separable) on the v2 tile8x8 through the RTL (about 1.5 min):
    the whole program's cycles equal the model's, the outputs the int8 reference's."""
    from hwc.targets import load_target

    from hwc.frontend import import_onnx
    from hwc.quant.build import quantize_model
    from hwc.tile.build import build_tile
    from hwc.zoo import MODELS, random_inputs

    model = MODELS["ds_cnn"]()
    target = load_target("tile8x8")   # the bundled v2 tile, GEMM.dwp included
    art = build_tile(quantize_model(import_onnx(model), target, random_inputs(model, n=32, seed=3)), target)
    feeds = {k: v[0] for k, v in random_inputs(model, n=1, seed=9).items()}
    ref = art.run(feeds, engine="reference")
    got = art.run(feeds, engine="model")
    model_cycles = art.last_run["cycles"]
    rtl = art.run(feeds, engine="rtl")
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
        np.testing.assert_array_equal(rtl[k], ref[k])
    assert art.last_run["cycles"] == model_cycles == art.report["cycles"]


def test_shifted_stacking_on_the_v2_tile_rtl_equals_model_equals_int8_reference():
    """Thin tensors stacked two pixels a line with alternating alignments (edge lines hold pad pixels the
    PPU writes as the zero point through a parameter entry with multiplier 0): RTL == model == reference."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = load_target("tile8x8")
    b = QBuilder(seed=33)
    x = b.input("x", (1, 8, 8, 8), zp=3)
    y = b.conv(x, 4, k=1, relu=True)
    z = b.conv(b.conv(y, 4, pads=[1, 1, 1, 1], relu=True), 4, pads=[1, 1, 1, 1])
    g = b.output(b.conv(b.add(z, y, relu=True), 8, pads=[1, 1, 1, 1], stride=2))
    verify(g)
    art = build_tile(g, target, hdl=False)
    # (the shifted alignments, whether or not the search prefers them: they are what this test runs)
    art = build_tile(g, target, hdl=True, pin=[dict(art.report["schedule"][0], shift=True)])
    assert art.report["schedule"][0]["shift"]
    feeds = {"x": np.random.default_rng(5).integers(-128, 128, (1, 8, 8, 8)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_depthwise_over_stacked_pixels_through_the_rtl():
    """A depthwise layer over stacked pixels of whole channel blocks (docs/tile-v2.md, "Depthwise over stacked
    pixels"): its GEMMs read the other pixel's block in the depthwise mode (stride 1, then stride 2 back to one
    pixel a line). Through the generated tile.v: RTL == model == int8 reference."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = load_target("tile8x8")
    b = QBuilder(seed=34)
    x = b.input("x", (1, 4, 6, 8), zp=3)                    # 4 channels: two pixels a line
    y = b.conv(x, 8, k=1, relu=True)                        # 8 channels, stacked as its input
    y = b.conv(y, 8, k=3, group=8, relu=True)               # depthwise over stacked pixels, stride 1
    g = b.output(b.conv(y, 8, k=3, stride=2, pads=[0, 0, 1, 1], group=8))   # stride 2: one pixel a line
    verify(g)
    art = build_tile(g, target, hdl=True)
    dw = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.GEMM and i.dw]
    src = next(a for a in art.memory_map["act"] if a["pixels_per_line"] == 2 and a["channels"] == 16)
    read = {(i.act - src["offset"]) // src["block_lines"] for i in dw
            if src["offset"] <= i.act < src["offset"] + src["size"]}
    assert read == {0, 1}, "the stride-1 depthwise layer reads both pixels' blocks in the depthwise mode"
    feeds = {"x": np.random.default_rng(6).integers(-128, 128, (1, 4, 6, 8)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def _rtl_equals_model_equals_reference(art, g, feeds):
    """The tile model's and the RTL's outputs equal the int8 reference's, with equal cycle counts."""
    from hwc.ref.interp import run_graph

    want = run_graph(g, feeds)
    model = art.run(feeds, engine="model")
    model_cycles = art.last_run["cycles"]
    rtl = art.run(feeds, engine="rtl")
    for name in g.outputs:
        np.testing.assert_array_equal(model[name], want[name])
        np.testing.assert_array_equal(rtl[name], want[name])
    assert art.last_run["cycles"] == model_cycles == art.report["cycles"]


def test_fc_weight_streaming_through_the_rtl():
    """An FC chain at batch 8 whose weights take 9 weight groups on tile8x8 (a bank holds 128 blocks): each
    group after the second loads into the bank the group before last read, with no wait, right behind the
    current group's first GEMM; the input loads 8 channel blocks per LOAD; the bundled tile preloads 2 weight
    rows a cycle. RTL == model == int8 reference, equal cycles."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = load_target("tile8x8")
    assert target["scratchpad"]["wgt_read_rows"] == 2
    b = QBuilder(seed=41)
    x = b.input("x", (8, 256), zp=-2)
    g = b.output(b.gemm(b.gemm(x, 256), 64))
    verify(g)
    art = build_tile(g, target, hdl=True)
    prog = isa.from_bytes(art.program)
    wgt = [k for k, i in enumerate(prog) if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT]
    assert len(wgt) >= 9
    behind = [k for k in wgt[2:] if prog[k - 1].op == isa.Op.GEMM and int(prog[k].wait) == 0]
    assert len(behind) == len(wgt) - 2
    feeds = {"x": np.random.default_rng(6).integers(-128, 128, (8, 256)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


@pytest.mark.parametrize("v1", [False, True])
def test_prefetched_weights_through_the_rtl(v1):
    """Weights prefetched (Codegen.finalize `prefetch`): on a tile with 8-block banks, an FC chain of 4-block
    layers (v2) or a CNN (v1, docs/tile.md) whose later groups load into a bank while GEMMs still read its other
    blocks, each LOAD behind the GEMM after its blocks' last reader. RTL == model == int8 reference, equal cycles
    (the RTL runs the LOADs beside the GEMMs: a LOAD too early would change what a GEMM reads)."""
    from hwc.targets import load_target, tile_variant
    from hwc.targets.tile_schema import validate_tile
    from qgraphs import QBuilder

    from hwc.ir import verify
    from hwc.tile.build import build_tile

    base = load_target("tile8x8")
    doc = {k: v for k, v in base.items() if k != "derived"}
    target = validate_tile(dict(doc, scratchpad=dict(base["scratchpad"], wgt_bank_blocks=8)), "tile8x8 (8-block banks)")
    b = QBuilder(seed=47)
    if v1:
        target = tile_variant(target, post_unit=False, depthwise=False)
        x = b.input("x", (1, 8, 8, 8), zp=1)
        for m in (8, 16, 8, 16, 8):
            x = b.conv(x, m, 3, pads=[1] * 4, relu=True)
    else:
        x = b.input("x", (1, 64), zp=3)
        for m in (32, 32, 32, 32, 32, 32):
            x = b.gemm(x, m)
    g = b.output(x)
    verify(g)
    choice = build_tile(g, target, hdl=False).report["schedule"][0]
    art = build_tile(g, target, hdl=True, pin=[dict(choice, prefetch=True)])
    plain = build_tile(g, target, hdl=False, pin=[dict(choice, prefetch=False)])
    assert art.report["schedule"][0]["prefetch"] and art.program != plain.program
    shape = g.type("x").shape
    feeds = {"x": np.random.default_rng(8).integers(-128, 128, shape).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_first_weight_group_in_pieces_through_the_rtl():
    """The first weight group loaded in pieces (Codegen.finalize `split`): LOADs of 1, 2, ... blocks into one
    bank, each GEMM waiting for the piece holding its block while the next pieces load. RTL == model == int8
    reference, equal cycles."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = load_target("tile8x8")
    b = QBuilder(seed=43)
    x = b.input("x", (1, 24, 6, 6), zp=1)
    y = b.conv(x, 16, k=1, pads=[0, 0, 0, 0], relu=True)
    g = b.output(b.conv(y, 8, k=3, pads=[1, 1, 1, 1]))
    verify(g)
    art = build_tile(g, target, hdl=True,
                     pin=[{"tiling": "cost", "loads": "eager", "im2col": False, "shift": False, "split": True}])
    prog = isa.from_bytes(art.program)
    wl = [i.get("row_beats") // 8 for i in prog if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT]
    assert wl[:2] == [1, 2], wl
    feeds = {"x": np.random.default_rng(8).integers(-128, 128, (1, 24, 6, 6)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_im2row_first_layer_through_the_rtl():
    """A thin first layer by rows (layers.im2row_first_layer): the host builds windows of 5 input pixels (stride 2,
    two outputs a line, 3x3) of a 1-channel image and the tile runs a 3x1 convolution straight into the stacked,
    shifted output. Through the generated tile.v: RTL == model == int8 reference, equal cycles."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = load_target("tile8x8")
    b = QBuilder(seed=44)
    x = b.input("x", (1, 1, 13, 12), zp=7)
    y = b.conv(x, 4, k=3, stride=2, pads=[1, 1, 1, 1], relu=True)      # 4 channels: two pixels a line
    z = b.conv(y, 4, k=3, pads=[1, 1, 1, 1], relu=True)
    g = b.output(b.conv(z, 8, k=1))
    verify(g)
    art = build_tile(g, target, hdl=True,
                     pin=[{"tiling": "quarter", "loads": "eager", "im2col": "rows", "shift": True, "split": False}])
    assert art.report["schedule"][0]["im2col"] == "rows" and art.report["schedule"][0]["shift"]
    feeds = {"x": np.random.default_rng(9).integers(-128, 128, (1, 1, 13, 12)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_depthwise_in_the_post_processing_through_the_rtl():
    """PPU.dw (features.dw_post) in a compiled CNN: a convolution, the 3x3 depthwise layer its PPU computes, another
    pair, and a convolution reading that, on tile8x8 with the stage, through the generated tile.v: RTL == model ==
    int8 reference, equal cycles."""
    from hwc.targets import load_target, tile_variant
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = tile_variant(load_target("tile8x8"), dw_post=True)
    b = QBuilder(seed=41)
    y = b.input("x", (1, 5, 7, 6), zp=-4)
    for m in (16, 12):
        y = b.conv(b.conv(y, m, k=1, relu=True), m, k=3, pads=[1, 1, 1, 1], group=m, relu=m == 16)
    g = b.output(b.conv(y, 8, k=3, stride=2))
    verify(g)
    art = build_tile(g, target, hdl=True)
    assert sum(1 for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("dw")) == 2 + 2
    feeds = {"x": np.random.default_rng(6).integers(-128, 128, (1, 5, 7, 6)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_depthwise_in_the_post_processing_in_row_bands_through_the_rtl():
    """PPU.dw in row bands (PPU.dwc context rows, Codegen._dw_bands) in a compiled CNN on tile8x8 with the stage,
    through the generated tile.v: RTL == model == int8 reference, equal cycles. (The cost model's tiling is pinned:
    it bands the 8-channel pair, which the search does not keep at this size.)"""
    from hwc.targets import load_target, tile_variant
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = tile_variant(load_target("tile8x8"), dw_post=True)
    b = QBuilder(seed=41)
    y = b.input("x", (1, 5, 13, 6), zp=-4)
    for m in (16, 8):
        y = b.conv(b.conv(y, m, k=1, relu=True), m, k=3, pads=[1, 1, 1, 1], group=m, relu=m == 16)
    y = b.conv(b.conv(y, 8, k=1, relu=True), 8, k=3, stride=2, pads=[1, 1, 1, 1], group=8)
    g = b.output(b.conv(y, 8, k=3, stride=2))
    verify(g)
    pin = dict(tiling="cost", loads="eager", split=False, bus_groups=False, shift=False, im2col=False)
    art = build_tile(g, target, hdl=True, pin=[pin])
    dwc = [i.get("dwc") for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("dw")]
    assert 1 in dwc and 2 in dwc, dwc
    feeds = {"x": np.random.default_rng(7).integers(-128, 128, (1, 5, 13, 6)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


@pytest.mark.parametrize("c,h,w,pads,flat,kinds", [
    (4, 7, 10, [1, 1, 1, 1], "blocks", {(0, 1), (2, 0)}), (2, 6, 16, [0, 0, 1, 1], "pairs", {(0, 2), (3, 1)})])
def test_depthwise_in_the_post_processing_of_stacked_pixels_through_the_rtl(c, h, w, pads, flat, kinds):
    """PPU.dw over stacked pixels in a compiled CNN on tile8x8 with the stage, through the generated tile.v: a
    c-channel depthwise layer stacked 8 / c pixels a line (PPU.dwf, the window shifted by c lanes), then a
    stride-2 2c-channel one: 8 channels, its conv's one-pixel blocks written one per accumulator line ("blocks"),
    or 4 with TensorFlow's "same" padding (the odd outputs), its conv's blocks of two pixels written in pixel order
    and read two pixels a line (dwf = 1, "pairs"). RTL == model == int8 reference, equal cycles (layout pinned)."""
    from hwc.targets import load_target, tile_variant
    from qgraphs import QBuilder

    from hwc import isa
    from hwc.ir import verify
    from hwc.tile.build import build_tile

    target = tile_variant(load_target("tile8x8"), dw_post=True)
    b = QBuilder(seed=40 + c)
    y = b.input("x", (1, c, h, w), zp=3)
    y = b.conv(y, c, k=1, relu=True)
    y = b.conv(y, c, k=3, group=c, relu=True)
    y = b.conv(y, 2 * c, k=1, relu=True)
    y = b.conv(y, 2 * c, k=3, stride=2, pads=pads, group=2 * c, relu=True)
    g = b.output(b.conv(y, 3, k=1))
    verify(g)
    pin = dict(tiling="cost", loads="eager", split=False, bus_groups=False, shift=False, im2col=False, flat=flat)
    art = build_tile(g, target, hdl=True, pin=[pin])
    prog = isa.from_bytes(art.program)
    assert {(i.get("dws"), i.get("dwf")) for i in prog if i.op == isa.Op.PPU and i.get("dw")} == kinds
    assert any(i.get("acc_si") == 2 for i in prog if i.op == isa.Op.GEMM)
    feeds = {"x": np.random.default_rng(8).integers(-128, 128, (1, c, h, w)).astype(np.int8)}
    _rtl_equals_model_equals_reference(art, g, feeds)


def test_max_pool_channel_blocks_through_the_rtl():
    """A 3x3 stride-2 padded max pool over four channel blocks (a partial one), whose blocks reuse its two
    one-block temporaries (each pass in place over the running maximum): RTL == model == int8 reference."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc.tile.build import build_tile

    t = load_target("tile8x8")
    b = QBuilder(seed=31)
    x = b.input("x", (1, 5, 12, 11), zp=-3)
    y = b.maxpool(b.conv(x, 27, relu=True), 3, 2, pads=(1, 1, 1, 1))
    g = b.output(b.conv(y, 8, k=1, pads=[0] * 4))
    art = build_tile(g, t, hdl=True)
    rng = np.random.default_rng(0)
    _rtl_equals_model_equals_reference(art, g, {"x": rng.integers(-128, 128, (1, 5, 12, 11)).astype(np.int8)})


def test_max_pool_over_real_pixels_through_the_rtl():
    """An Inception-like block on the model input: a padded conv holds the input's halo at its zero point, so the
    padded max pool beside it reads real pixels only (edge windows over their taps inside, one-column VEC runs).
    Two channel blocks, asymmetric pads, stride 2: RTL == model == int8 reference."""
    from hwc.targets import load_target
    from qgraphs import QBuilder

    from hwc.tile.build import build_tile

    t = load_target("tile8x8")
    b = QBuilder(seed=32)
    x = b.input("x", (1, 11, 9, 10), zp=25)
    c, m = b.conv(x, 8, pads=[1, 1, 1, 1]), b.maxpool(x, 3, 2, pads=(2, 1, 1, 2))
    g = b.output(c, m)
    art = build_tile(g, t, hdl=True)
    rng = np.random.default_rng(0)
    _rtl_equals_model_equals_reference(art, g, {"x": rng.integers(-128, 60, (1, 11, 9, 10)).astype(np.int8)})


def test_one_row_max_pool_through_the_rtl():
    """A 1-d signal: a 1 x 3 conv over one row of 40 pixels and two channel blocks, then a 1 x 4 stride-4 max pool,
    whose horizontal pass writes the output (no vertical pass): RTL == model == int8 reference."""
    from qgraphs import QBuilder

    b = QBuilder(seed=33)
    x = b.input("x", (1, 3, 1, 40), zp=-5)
    y = b.conv(x, 12, k=(1, 3), pads=[0, 1, 0, 1], relu=True)
    _through_the_tile8x8_rtl(b.output(b.maxpool(y, (1, 4), (1, 4))), seed=0)


def _through_the_tile8x8_rtl(g, seed):
    """g built for tile8x8 with its Verilog; random int8 inputs through the RTL, the model and the int8 reference
    (`_rtl_equals_model_equals_reference`). Returns the build."""
    from hwc.targets import load_target

    from hwc.tile.build import build_tile

    art = build_tile(g, load_target("tile8x8"), hdl=True)
    rng = np.random.default_rng(seed)
    _rtl_equals_model_equals_reference(art, g, {k: rng.integers(-128, 128, g.type(k).shape).astype(np.int8)
                                                for k in g.inputs})
    return art


def test_a_folded_one_row_conv_through_the_rtl():
    """A 1-d signal of 256 pixels: a 1 x 3 conv computed as 32 rows of 8 pixels (`Codegen._fold_width`), in
    several pixel tiles whose PPUs run beside the next tiles' GEMMs, with its 1 x 4 max pool's VECs in between:
    RTL == model == int8 reference, equal cycles."""
    from qgraphs import QBuilder

    b = QBuilder(seed=34)
    x = b.input("x", (1, 8, 1, 256), zp=-5)
    y = b.conv(x, 8, k=(1, 3), pads=[0, 1, 0, 1], relu=True)
    art = _through_the_tile8x8_rtl(b.output(b.maxpool(y, (1, 4), (1, 4))), seed=1)
    conv, pool = art.report["layers"]
    assert conv["fold"] == 8 and pool["fused_into"] == conv["name"]


def test_windows_of_a_thin_1d_first_layer_through_the_rtl():
    """M5's first layer shape over 1,000 samples (one channel, 1 x 80, stride 4) on tile8x8: the host lays out
    windows of 8 samples a line and the tile runs 10 taps of dilation 2 over them (`layers.windows_first_layer`),
    folded, then a 1 x 4 max pool and a 1 x 3 conv: RTL == model == int8 reference, equal cycles."""
    from qgraphs import QBuilder

    b = QBuilder(seed=35)
    x = b.input("x", (1, 1, 1, 1000), zp=3)
    y = b.maxpool(b.conv(x, 16, k=(1, 80), stride=(1, 4), pads=[0, 39, 0, 40], relu=True), (1, 4), (1, 4))
    art = _through_the_tile8x8_rtl(b.output(b.conv(y, 8, k=(1, 3), pads=[0, 1, 0, 1])), seed=2)
    assert art.report["schedule"][0]["im2col"] == "windows" and art.report["layers"][0]["fold"]


@pytest.mark.parametrize("in_place", [False, True])
def test_a_channel_concat_through_the_rtl(in_place):
    """An Inception-like block: a 3x3 and a 1x1 branch and a stride-1 max pool off one tensor, concatenated along
    the channels on the tile, read by a 3x3 conv: RTL == model == int8 reference, equal cycles. With the parts'
    zero points the Concat's, their producers write it in place; else VEC copies (their halos differ)."""
    from qgraphs import QBuilder

    b = QBuilder(seed=41)
    x = b.input("x", (1, 8, 7, 9), zp=3)
    x = b.conv(x, 8, k=1, relu=True, zp_out=-4)
    zp = -4 if in_place else None
    y = b.concat(b.conv(x, 8, k=3, pads=[1, 1, 1, 1], relu=True, zp_out=zp), b.conv(x, 16, k=1, relu=True, zp_out=zp),
                 b.maxpool(x, 3, 1, pads=(1, 1, 1, 1)), b.conv(x, 5, k=1, zp_out=zp))
    art = _through_the_tile8x8_rtl(b.output(b.conv(y, 8, k=3, pads=[1, 1, 1, 1], relu=True)), seed=2)
    assert [d["where"] for d in art.report["partition"] if d["op"] == "Concat"] == ["tile"]
    rec = next((r for r in art.report["layers"] if r["op"] == "Concat"), None)
    assert (rec is None or rec.get("in_place", False)) == in_place, rec


def test_a_leaky_relu_cnn_through_the_rtl():
    """LeakyReLU fused into the requantization (PPU.neg: a second multiplier for negative accumulators, read from
    the PARAM entry after the layer's own) after a conv, a depthwise conv, a 1x1 conv and an FC layer, beside
    plain layers sharing the same PARAM memory: RTL == model == int8 reference, equal cycles."""
    from qgraphs import QBuilder

    from hwc import isa

    b = QBuilder(seed=42)
    x = b.input("x", (1, 3, 10, 10), zp=-3)
    y = b.conv(x, 12, k=3, stride=2, neg=True)
    y = b.conv(y, 12, k=3, group=12, neg=True)          # depthwise
    y = b.conv(y, 16, k=1, relu=True)
    y = b.conv(y, 10, k=1, neg=True)
    art = _through_the_tile8x8_rtl(b.output(b.gemm(b.flatten(y), 9, neg=True)), seed=3)
    negs = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("neg")]
    assert negs and len(negs) < sum(i.op == isa.Op.PPU for i in isa.from_bytes(art.program))
