"""Activations larger than ACT (hwc/tile/bands.py): row bands and segment cuts. The rewritten graph must compute
the original graph's bits (the int8 reference of the graph as given is the reference), on the tile model and
through the RTL, and a layer that cannot fit even in one-row bands must give a clear error naming it."""

import numpy as np
import pytest
from hwc.targets import load_target, tile_variant
from hwc.targets.tile_schema import validate_tile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qgraphs import QBuilder
from test_rtl_end_to_end import _rtl_equals_model_equals_reference
from test_schedule import check_exact

from hwc.errors import UnsupportedError
from hwc.ir import verify
from hwc.ref.interp import run_graph
from hwc.tile.bands import Fit, describe, rewrite
from hwc.tile.build import build_tile


def small_act(target: dict, lines: int) -> dict:
    """`target` with an ACT of `lines` lines."""
    doc = {k: v for k, v in target.items() if k != "derived"}
    doc["scratchpad"] = dict(target["scratchpad"], act_lines=lines)
    return validate_tile(doc, f"{target['name']} (act_lines {lines})")


T8 = tile_variant(load_target("tile8x8"), dw_post=False)
T32 = load_target("tile32x32")


def feeds_for(g, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.integers(-128, 128, g.type(name).shape).astype(np.int8) for name in g.inputs}


layer_cases = st.fixed_dictionaries({
    "op": st.sampled_from(["conv", "conv", "depthwise", "maxpool", "avgpool", "add"]),
    "c": st.integers(1, 12), "h": st.integers(1, 17), "w": st.integers(1, 6),
    "k": st.sampled_from([1, 2, 3, 5]), "stride": st.sampled_from([1, 2, 3]), "dil": st.sampled_from([1, 1, 2]),
    "pads": st.lists(st.integers(0, 2), min_size=4, max_size=4), "bands": st.integers(2, 9),
    "chain": st.lists(st.tuples(st.sampled_from(["conv", "depthwise", "maxpool"]), st.sampled_from([1, 3]),
                                st.sampled_from([1, 2]), st.integers(0, 1)), max_size=3),
    "dw_post": st.booleans(),
})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer_cases)
def test_row_bands_compute_the_layers_bits(case):
    """The rewrite alone, in the int8 reference: every banded layer kind, odd sizes, strides, pads, dilation, alone
    and followed by a chain of up to three more layers banded with it."""
    k, s, d = case["k"], case["stride"], case["dil"]
    if case["op"] in ("maxpool", "avgpool"):
        d = 1
        case["pads"] = [min(p, k - 1) for p in case["pads"]]   # (ONNX: a pad smaller than the window)
    span = (k - 1) * d + 1
    b = QBuilder(seed=case["c"] * 31 + case["h"])
    x = b.input("x", (1, case["c"], case["h"] + span + 4, case["w"] + span), zp=-5)
    if case["op"] == "conv":
        y = b.conv(x, 7, k=k, stride=s, pads=case["pads"], dil=d)
    elif case["op"] == "depthwise":
        y = b.conv(x, case["c"], k=k, stride=s, pads=case["pads"], dil=d, group=case["c"])
    elif case["op"] == "maxpool":
        y = b.maxpool(x, k, s, case["pads"])
    elif case["op"] == "avgpool":
        y = b.avgpool(x, k, s, case["pads"])
    else:
        y = b.add(x, b.conv(x, case["c"], k=1))
    chain = [b.g.nodes[-1].name]
    for op, kk, ss, pad in ([] if case["op"] == "add" else case["chain"]):
        rows = min(b.g.type(y).shape[2:])
        if rows + 2 * pad < kk:
            break
        if op == "maxpool":
            y = b.maxpool(y, min(kk, 2), ss, [0] * 4) if rows >= 2 else y
        else:
            c = b.g.type(y).shape[1]
            y = b.conv(y, c if op == "depthwise" else 5, k=kk, stride=ss, pads=[pad] * 4,
                       group=c if op == "depthwise" else 1)
        if b.g.nodes[-1].name != chain[-1]:
            chain.append(b.g.nodes[-1].name)
    g = b.output(y)
    rows = g.type(y).shape[2]
    # (dw_post: a chain ending in a conv and a 3x3 depthwise layer keeps the latter's pads, `bands._edge_rows`)
    try:
        banded = rewrite(g, Fit(bands={chain[0]: min(case["bands"], rows)}, chains={chain[0]: chain},
                                dw_post=case["dw_post"]))
    except UnsupportedError as e:   # a chain whose first layer's needed rows read padding only: refused, not wrong
        assert len(chain) > 1 and "cannot be split into row bands" in str(e), e
        return
    verify(banded)
    made = sum(n.name.startswith(f"{chain[-1]}.band") and n.op not in ("Slice", "Concat") for n in banded.nodes)
    # (fewer only where a band's window would be all padding: a pad of a stride or more joins it to its neighbour)
    assert 1 <= made <= min(case["bands"], rows)
    if len(chain) == 1 and not any(case["pads"]):
        assert made == min(case["bands"], rows)
    assert not any(n.name in chain for n in banded.nodes)
    feeds = feeds_for(g, seed=case["h"])
    np.testing.assert_array_equal(run_graph(banded, feeds)[y], run_graph(g, feeds)[y])


@pytest.mark.parametrize("stride, pads, h", [(1, [1, 1, 1, 1], 13), (2, [1, 1, 1, 1], 13), (2, [0, 0, 1, 1], 14),
                                             (2, [1, 1, 1, 1], 14)])
@pytest.mark.parametrize("bands", [2, 3, 5])
def test_a_depthwise_layer_after_a_conv_keeps_its_pads_in_bands(stride, pads, h, bands):
    """With PPU.dw (dw_post), a chain ending in a conv and a 3x3 depthwise layer keeps the latter's pads in every
    band: it computes an extra row above and below the band (a pad standing for real rows) that a Slice drops."""
    b = QBuilder(seed=bands + h)
    x = b.input("x", (1, 5, h, 9), zp=2)
    y = b.conv(b.conv(x, 12, k=1, pads=[0] * 4), 12, k=3, stride=stride, pads=pads, group=12)
    g = b.output(y)
    chain = [n.name for n in g.nodes]
    banded = rewrite(g, Fit(bands={chain[0]: bands}, chains={chain[0]: chain}, dw_post=True))
    verify(banded)
    dws = [n for n in banded.nodes if n.name.startswith(f"{chain[1]}.band") and n.op == "QConv"]
    assert len(dws) == bands and all(n.attrs["pads"] == pads for n in dws)
    assert sum(n.name.endswith(".keep") for n in banded.nodes) >= bands - 1
    feeds = feeds_for(g, seed=h)
    np.testing.assert_array_equal(run_graph(banded, feeds)[y], run_graph(g, feeds)[y])


def test_activations_too_large_for_act_are_built_in_row_bands():
    """64 channels of 64x64 (8 channel blocks of 66x66 padded pixels: 34,848 lines) on tile8x8's 16,384 ACT
    lines: both convolutions go in row bands together (a band of the second computes the rows of the first it
    reads, halo included), exact; the partition shows the host's Slice and Concat and why."""
    b = QBuilder()
    x = b.input("x", (1, 64, 64, 64), zp=0)
    g = b.output(b.conv(b.conv(x, 64), 64))
    art = check_exact(g, T8)
    fit = art.report["act_fit"]
    assert list(fit["bands"]) == ["qconv..qconv_1"] and fit["cuts"] == [], fit
    assert art.report["segments"] == fit["bands"]["qconv..qconv_1"]
    # the first convolution computes its bands' halo rows twice: 2 rows per band boundary
    macs = sum(layer["macs"] for layer in art.report["layers"] if layer["name"].startswith("qconv.band"))
    assert macs == (64 + 2 * (art.report["segments"] - 1)) * 64 * 64 * 64 * 9
    # utilization counts the model's MACs, not those computed twice
    assert art.report["macs"] == 2 * 64 * 64 * 64 * 64 * 9
    assert art.report["act_fit"]["macs_recomputed"] == 2 * (art.report["segments"] - 1) * 64 * 64 * 64 * 9
    hosted = [d for d in art.report["partition"] if d["where"] == "host" and d["op"] in ("Slice", "Concat")]
    assert hosted and all("row bands of" in d["why"] and "do not fit ACT whole" in d["why"] for d in hosted)
    assert art.report["memory"]["act_lines_used"] <= 16384


def _branches():
    """Eight 1x1 branches of one 8x16x16 input, summed up."""
    b = QBuilder(seed=4)
    x = b.input("x", (1, 8, 16, 16), zp=3)
    branches = [b.conv(x, 8, k=1, pads=[0] * 4) for _ in range(8)]
    y = branches[0]
    for z in branches[1:]:
        y = b.add(y, z)
    return b.output(y)


def test_live_activations_too_large_for_act_cut_the_segment():
    """Eight 1x1 branches of one input summed up: every layer fits a 2,048-line ACT, all the branches alive at once
    do not (9 tensors of 256 lines and the sums): the segment is cut (the branches go out and come back in)."""
    art = check_exact(_branches(), small_act(T8, 2048))
    fit = art.report["act_fit"]
    assert fit["cuts"] and not fit["bands"], fit
    assert art.report["segments"] == len(fit["cuts"]) + 1


def test_a_layer_too_large_even_in_one_row_bands_is_a_clear_error():
    """256 channels (32 lines a pixel on tile8x8) of 16x16 into a 3x3 convolution on a 1,024-line ACT: one output
    row's band reads 3 padded rows of 18 pixels x 32 blocks, one output column's band 18 rows of 3, and every group of
    its output channels the same: the error names the layer, the sizes, and each way tried."""
    b = QBuilder()
    x = b.input("x", (1, 256, 16, 16), zp=0)
    g = b.output(b.conv(x, 8))
    with pytest.raises(UnsupportedError, match=r"layer 'qconv' \(QConv, output \[1, 8, 16, 16\]\) does not fit ACT "
                                               r"even in column bands of one output column each \(nor in row bands\): "
                                               r"such a band needs \d+ ACT lines .* the target has 1024 "
                                               r"\(scratchpad.act_lines\), nor into groups of its output channels "
                                               r"\(each would still read the 1728 lines of the input rows one output "
                                               r"row needs\)"):
        build_tile(g, small_act(T8, 1024), hdl=False)


def test_rows_too_wide_for_one_row_bands_go_in_column_bands():
    """A 3x3 convolution over rows of 1,200 pixels of 32 channels on a 2,048-line ACT: one output row's band needs
    3 x 1,202 x 4 lines, and groups of its output channels would each read them all; column bands (every row, a
    range of columns, the columns past the edges the pads of the first and last band) fit, exact."""
    b = QBuilder(seed=2)
    x = b.input("x", (1, 32, 3, 1200), zp=-4)
    g = b.output(b.conv(x, 16, relu=True))
    art = check_exact(g, small_act(T8, 2048))
    assert art.report["act_fit"]["column_bands"]["qconv"] >= 2 and not art.report["act_fit"]["bands"]
    assert "in column bands: qconv" in describe(art.report["act_fit"])


def test_a_one_dimensional_convolution_over_a_long_signal_goes_in_column_bands():
    """Raw audio: one second at 16 kHz ([1, 1, 1, 16000]) into 1-d convolutions (1x9 stride 4, then 1x3), a global
    pool and a classifier on tile8x8. Its activations do not fit ACT and its rows do not fit the accumulators, and a
    single row has no row bands: the two convolutions go in column bands together (their halo columns computed
    twice), exact against the int8 reference; the host copies the columns between the segments."""
    b = QBuilder(seed=11)
    x = b.input("x", (1, 1, 1, 16000), zp=3)
    y = b.conv(x, 32, k=(1, 9), stride=(1, 4), pads=[0, 4, 0, 4], relu=True)
    y = b.conv(y, 32, k=(1, 3), pads=[0, 1, 0, 1], relu=True)
    g = b.output(b.gemm(b.flatten(b.gap(y)), 10))
    art = check_exact(g, T8)
    fit = art.report["act_fit"]
    assert list(fit["column_bands"]) == ["qconv..qconv_1"] and fit["macs_recomputed"] > 0, fit
    assert art.report["utilization"] > 0.5
    why = _host_reasons(art)
    assert any("column bands of 'qconv..qconv_1'" in w and "the host copies the columns" in w for w in why.values())


def test_a_row_wider_than_the_accumulators_goes_in_column_bands():
    """A 1x1 convolution over rows of 1,500 pixels: the activations fit ACT whole, an output row does not fit the
    1,024 accumulator lines (the convolution computes whole rows): two column bands, exact."""
    b = QBuilder(seed=3)
    x = b.input("x", (1, 8, 2, 1500), zp=0)
    g = b.output(b.conv(x, 8, k=1, pads=[0] * 4))
    art = check_exact(g, T8)
    assert art.report["act_fit"]["column_bands"] == {"qconv": 2}, art.report["act_fit"]


def test_a_one_row_convolution_wider_than_the_accumulators_is_folded_not_banded(monkeypatch):
    """A 1 x 3 convolution over one row of 3,000 pixels on tile8x8 (1,024 accumulator lines a slot): folded into
    rows of 100 pixels (`Codegen._fold_width`), its pixel tiles fit the accumulators, so it runs in one segment
    with no column bands (measured 15,324 cycles); with folding off the row goes in 3 column bands, 3 segments,
    18,376 cycles. Both exact."""
    from hwc.tile.codegen import Codegen

    b = QBuilder(seed=12)
    x = b.input("x", (1, 8, 1, 3000), zp=2)
    g = b.output(b.conv(x, 8, k=(1, 3), pads=[0, 1, 0, 1], relu=True))
    art = check_exact(g, T8)
    assert art.report["segments"] == 1 and not art.report["act_fit"].get("column_bands")
    assert art.report["layers"][0]["fold"] == 100
    monkeypatch.setattr(Codegen, "_fold_width", lambda self, i, layer: None)
    banded = check_exact(g, T8)
    assert banded.report["act_fit"]["column_bands"] == {"qconv": 3}
    assert art.report["cycles"] < banded.report["cycles"]


@pytest.mark.parametrize("shape,lines,match", [
    ((1, 8, 96, 96), 4096, r"layer 'qglobalavgpool' \(QGlobalAvgPool\) does not fit ACT and cannot be split into row "
                           r"bands \(it reads its whole input at once\), nor into channel groups \(its 8 output "
                           r"channels are one ACT line\)"),
    # (two lines of channels: in two groups, each still larger than ACT)
    ((1, 16, 12, 12), 128, r"layer 'qglobalavgpool.ch0' \(QGlobalAvgPool\) does not fit ACT .*nor into channel "
                           r"groups, one of 2 channel groups of 'qglobalavgpool' \(its 8 output channels are one ACT "
                           r"line\): the activations need 145"),
])
def test_a_global_pool_over_an_input_larger_than_act_is_a_clear_error(shape, lines, match):
    b = QBuilder()
    g = b.output(b.gap(b.input("x", shape, zp=0)))
    with pytest.raises(UnsupportedError, match=match):
        build_tile(g, small_act(T8, lines), hdl=False)


def _host_reasons(art) -> dict[str, str]:
    return {d["node"]: d["why"] for d in art.report["partition"] if d["where"] == "host"}


def test_a_global_pool_over_many_channel_blocks_goes_in_channel_groups():
    """A global pool of 80 channels (10 lines a pixel on tile8x8) over 12x12 pixels needs 1,440 ACT lines for its
    input and cannot go in row bands; in channel groups of whole lines each group's pool is a segment of its own
    (the host slices the channels and concatenates the pooled groups), exact against the int8 reference of the
    graph as given, and the FC layer after it reads the concatenation."""
    b = QBuilder(seed=4)
    x = b.input("x", (1, 80, 12, 12), zp=-6)
    g = b.output(b.gemm(b.flatten(b.gap(x)), 10))
    art = check_exact(g, small_act(T8, 1024))
    groups = art.report["act_fit"]["channels"]
    assert list(groups) == ["qglobalavgpool"] and groups["qglobalavgpool"] >= 2, art.report["act_fit"]
    assert art.report["segments"] == groups["qglobalavgpool"] + 1   # (+ the FC layer's)
    why = _host_reasons(art)
    assert sum("channel groups of 'qglobalavgpool'" in w for w in why.values()) == groups["qglobalavgpool"] + 1, why
    assert "in channel groups: qglobalavgpool" in describe(art.report["act_fit"])


@pytest.mark.parametrize("target", [T8, T32], ids=["tile8x8", "tile32x32"])
def test_per_channel_layers_too_wide_for_one_row_bands_go_in_channel_groups(target):
    """A 3x3 depthwise layer, a padded max pool and a residual add over 12 channel blocks of rows 60 pixels wide: one
    output row's band of each needs more lines than ACT has, so each goes in groups of its channels (each group
    banded by rows as any layer), exact against the int8 reference."""
    n = target["array"]["cols"]
    c = 12 * n
    b = QBuilder(seed=n)
    x = b.input("x", (1, c, 6, 60), zp=3)
    d = b.conv(x, c, k=3, group=c, pads=[1, 1, 1, 1], relu=True)
    m = b.maxpool(d, 3, 1, (1, 1, 1, 1))
    g = b.output(b.add(m, x))
    assert 3 * 62 * 12 > 2048   # (three padded input rows of the depthwise layer's one-row band alone)
    art = check_exact(g, small_act(target, 2048))
    groups = art.report["act_fit"]["channels"]
    assert {"qconv", "maxpool", "qadd"} <= set(groups), art.report["act_fit"]
    assert all(k >= 2 for k in groups.values())


def test_a_convolution_with_many_output_channels_goes_in_groups_of_them():
    """A 1x1 convolution from 8 to 200 channels (25 lines a pixel on tile8x8) over rows 40 pixels wide: one output
    row needs 1,000 lines, more than the 512-line ACT; each group of its output channels reads the whole input row
    (40 lines) and writes a share of the output: exact against the int8 reference, with the weights, bias and
    multipliers of each group cut from the layer's."""
    b = QBuilder(seed=5)
    x = b.input("x", (1, 8, 3, 40), zp=-1)
    g = b.output(b.conv(x, 200, k=1, pads=[0] * 4, relu=True))
    art = check_exact(g, small_act(T8, 512))
    assert art.report["act_fit"]["channels"].get("qconv", 0) >= 2, art.report["act_fit"]
    assert art.report["macs"] == 8 * 200 * 3 * 40


def test_column_bands_through_the_rtl():
    """A 3x3 convolution over rows of 1,500 pixels on tile8x8 (wider than the accumulators: two column bands, each
    reading the halo column of the other) through the RTL: outputs and cycles equal to the model's, the outputs to
    the int8 reference."""
    b = QBuilder(seed=12)
    x = b.input("x", (1, 8, 2, 1500), zp=-2)
    g = b.output(b.conv(x, 8, relu=True))
    verify(g)
    art = build_tile(g, load_target("tile8x8"), hdl=True)
    assert art.report["act_fit"].get("column_bands", {}).get("qconv", 0) >= 2, art.report["act_fit"]
    _rtl_equals_model_equals_reference(art, g, feeds_for(g, 4))


def test_channel_groups_through_the_rtl():
    """A global pool in channel groups (a segment each, the host's Slices and Concat around them; 300 lines of input
    on a 256-line ACT) through the tile8x8 RTL: every segment's outputs and cycles equal to the model's, the outputs
    to the int8 reference."""
    b = QBuilder(seed=6)
    x = b.input("x", (1, 24, 10, 10), zp=2)
    g = b.output(b.gap(x))
    verify(g)
    art = build_tile(g, small_act(load_target("tile8x8"), 256), hdl=True)
    assert art.report["act_fit"]["channels"], art.report["act_fit"]
    _rtl_equals_model_equals_reference(art, g, feeds_for(g, 3))


def test_mobilenet_at_160_pixels_on_tile8x8():
    """The benchmark MobileNetV1-0.25 at 160x160 (its 96x96 fits tile8x8 whole): the first layers in bands on
    tile8x8, exact against the int8 reference of the same int8 graph unbanded (tile32x32's build: it fits whole)."""
    import hwc
    from hwc import zoo

    m = zoo.mobilenet_v1_025(input_size=160, softmax=False)
    calib = zoo.random_inputs(m, n=4, seed=3)
    art = hwc.build(m, target="tile8x8", calib=calib, hdl=False)
    whole = hwc.build(m, target="tile32x32", calib=calib, hdl=False)
    assert art.report["act_fit"]["bands"] and not whole.report["act_fit"]["bands"]
    assert not any(n.op == "Slice" for n in whole.graph.nodes)
    feeds = {k: v[0] for k, v in zoo.random_inputs(m, n=1, seed=9).items()}
    got = art.run(feeds, engine="model")["output"]
    np.testing.assert_array_equal(got, whole.run(feeds, engine="reference")["output"])


@pytest.mark.parametrize("target, lines", [(T8, 1024), (T32, 512)], ids=["tile8x8", "tile32x32"])
def test_row_bands_through_the_rtl(target, lines):
    """A small CNN on a tile with a small ACT (the RTL's too): its layers in row bands, chained; the RTL's outputs
    and cycles equal the model's, whose outputs equal the int8 reference's."""
    t = small_act(target, lines)
    b = QBuilder(seed=8)
    x = b.input("x", (1, 6, 30, 22), zp=-3)
    y = b.conv(x, 16, relu=True)
    y = b.conv(y, 16, k=3, group=16, stride=2)
    y = b.conv(y, 24, k=1, pads=[0] * 4)
    g = b.output(b.maxpool(y))
    verify(g)
    art = build_tile(g, t, hdl=True)
    assert any(".." in k for k in art.report["act_fit"]["bands"]), art.report["act_fit"]   # (a chain of layers)
    if target["features"]["dw_post"]:   # a conv and its depthwise layer banded together in PPU.dw passes
        from hwc import isa

        assert any(n.name.endswith(".keep") for n in art.graph.nodes)
        assert any(i.op == isa.Op.PPU and i.get("dw") for i in isa.from_bytes(art.program))
    _rtl_equals_model_equals_reference(art, g, feeds_for(g, seed=2))


def test_sim_of_a_banded_build_writes_a_waveform_per_segment(tmp_path, capsys):
    """`hwc sim --rtl --vcd FILE` of a build in several segments: one waveform per segment (FILE.segK.vcd; a
    single FILE would hold the last segment only), each the RTL's own (a header Icarus wrote), and MATCH."""
    from hwc.cli import main

    t = small_act(T8, 1024)
    b = QBuilder(seed=3)
    x = b.input("x", (1, 8, 40, 16), zp=1)
    g = b.output(b.conv(b.conv(x, 8, relu=True), 8))
    art = build_tile(g, t, hdl=True)
    segs = art.report["segments"]
    assert segs >= 2
    out = art.save(tmp_path / "out")
    np.save(tmp_path / "x.npy", feeds_for(g)["x"])
    rc = main(["sim", str(out), "--input", str(tmp_path / "x.npy"), "--rtl", "--vcd", str(tmp_path / "w.vcd")])
    text = capsys.readouterr().out
    assert rc == 0 and "MATCH" in text, text
    files = sorted(p.name for p in tmp_path.glob("w*.vcd"))
    assert files == [f"w.seg{k}.vcd" for k in range(segs)], files
    assert all("$timescale" in (tmp_path / f).read_text(errors="replace")[:5000] for f in files)


def test_segments_scheduled_once_across_rewrites_give_the_same_build(monkeypatch):
    """`fit_act` reschedules after each rewrite; segments unchanged by it come from a cache (`schedule(cache=)`).
    Bands and cuts over several rounds: the same program, DRAM image and report as without the cache."""
    import hwc.tile.build as tb

    t = small_act(T8, 1024)
    b = QBuilder(seed=6)
    x = b.input("x", (1, 8, 26, 14), zp=2)
    y = b.conv(x, 8, relu=True)
    z = b.conv(y, 8, k=1, pads=[0] * 4)
    y = b.add(y, b.conv(z, 8))
    g = b.output(b.conv(b.maxpool(y), 16))
    cached = check_exact(g, t)
    assert len(cached.report["act_fit"]["bands"]) + len(cached.report["act_fit"]["cuts"]) >= 2, \
        cached.report["act_fit"]
    plain = tb.schedule
    monkeypatch.setattr(tb, "schedule", lambda *a, cache=None, **k: plain(*a, **k))
    fresh = check_exact(g, t)
    assert (cached.program, cached.const, cached.report) == (fresh.program, fresh.const, fresh.report)


def test_a_chain_that_overflows_in_one_row_bands_is_banded_layer_by_layer():
    """A chain's one-row bands can still overflow a small ACT (each band holds all its layers' rows) where its
    layers banded one by one fit: then they are (found by a random-graph probe, which got 'does not fit ACT even in
    row bands of one output row each')."""
    t = small_act(T32, 256)
    b = QBuilder(seed=264056)
    x = b.input("x", (1, 32, 29, 29), zp=18)
    y = b.conv(x, 32, k=1, pads=[0] * 4, relu=True)
    y = b.conv(y, 32, k=3, stride=2, group=32, relu=True)
    y = b.conv(y, 38, k=3, relu=True)
    g = b.output(b.conv(y, 38, k=3, group=38, relu=True))
    art = check_exact(g, t)
    assert art.report["act_fit"]["bands"] and not any(".." in k for k in art.report["act_fit"]["bands"])


def _view_case(c: int):
    """A chain of two 3x3 convolutions of `c` channels (a channel block) too large for a 1,024-line ACT, then a 2x2
    max pool and a 1x1 conv on the tile after it (the chain's bands end before one of them)."""
    b = QBuilder(seed=11)
    x = b.input("x", (1, c, 24, 20), zp=-2)
    y = b.conv(b.conv(x, c, relu=True), c)
    return b.output(b.conv(b.maxpool(y), c, k=1, pads=[0] * 4))


@pytest.mark.parametrize("target", [T8, T32], ids=["tile8x8", "tile32x32"])
def test_the_next_segment_reads_the_bands_where_the_tile_stored_them(target):
    """No host work between the bands and the segment after them: that segment's LOADs read each band's output
    rows where its segment stored them (hwc.tile.views), the Concat is no host node, the host neither reads the
    bands' outputs nor writes the Concat; the bands read their rows of the model input, which the host writes once;
    outputs equal the int8 reference; the RTL equals the model (cycles too)."""
    from hwc import isa

    g = _view_case(target["array"]["rows"])
    t = small_act(target, 1024)
    art = build_tile(g, t, hdl=True)
    segs = art.info["tile"]["segments"]
    assert len(segs) >= 3 and art.report["act_fit"]["bands"], art.report["act_fit"]
    cat = next(nd for nd in art.graph.nodes if nd.op == "Concat")
    last = segs[-1]
    (inp,) = last["inputs"]
    assert inp["name"] == cat.outputs[0] and inp["dram"] is None
    # the pieces: each band's output in order, all its rows, at the address its segment stored it
    stored = {o["name"]: o for io in segs[:-1] for o in io["outputs"]}
    assert [p["src"] for p in inp["view"]] == cat.inputs
    at = 0
    for p in inp["view"]:
        src = stored[p["src"]]
        assert (p["lo"], p["hi"], p["row"], p["dram"], p["pitch"]) == (at, at + src["h"], 0, src["dram"], src["h"])
        assert not src["host"]
        at += src["h"]
    assert at == inp["h"]
    # the segment's first LOADs read the first band's rows (its DRAM address), no input region of its own
    prog = isa.from_bytes(art.program[slice(*last["program_range"])])
    beat = t["bus"]["bytes"]
    loads = [i for i in prog if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.ACT]
    assert loads and min(i.get("dram") for i in loads) * beat == stored[cat.inputs[0]]["dram"]
    assert not any(r["name"] == f"input.{cat.outputs[0]}" for r in art.memory_map["dram"])
    assert cat.name not in {n for io in segs for n in io["pre"] + io["post"]}
    # the bands read the model input's rows in place too: the host writes x once, first in memory, and runs nothing
    assert all(not io["pre"] and not io["post"] for io in segs)
    for io in segs[:-1]:
        (band_in,) = io["inputs"]
        assert [p["src"] for p in band_in["view"]] == ["x"] and band_in["dram"] is None
    assert art.memory_map["dram"][0]["name"] == "input.x" and art.memory_map["dram"][0]["offset"] == 0
    cat_d = next(d for d in art.report["partition"] if d["node"] == cat.name)
    assert cat_d["where"] == "dram" and "no host work" in cat_d["why"], cat_d
    _rtl_equals_model_equals_reference(art, g, feeds_for(g, seed=4))


@pytest.mark.parametrize("target", [T8, T32], ids=["tile8x8", "tile32x32"])
def test_a_model_output_that_is_a_view_of_the_bands_concat(target):
    """A model output that is a Reshape of the bands' Concat, which the next segment reads where the bands stored
    it: the host reads the bands and runs the Concat for that output (before: the output was missing, a KeyError
    after the run; random probe 7, seed 2417). Exact against the int8 reference."""
    c = target["array"]["rows"]
    b = QBuilder(seed=12)
    x = b.input("x", (1, c, 24, 20), zp=-2)
    y = b.conv(b.conv(x, c, relu=True), c)
    view = b.reshape(y, (1, c, 24, 20))
    g = b.output(b.gemm(b.flatten(b.gap(view)), 10), view)
    art = check_exact(g, small_act(target, 1024))
    assert art.report["act_fit"]["bands"], art.report["act_fit"]
    cat = next(nd for nd in art.graph.nodes if nd.op == "Concat")
    assert cat.name in {n for io in art.info["tile"]["segments"] for n in io["pre"] + io["post"]}
    assert next(d for d in art.report["partition"] if d["node"] == cat.name)["where"] == "host"


def test_a_cut_segment_reads_the_tensors_live_across_the_cut_where_they_are():
    """A segment cut (live activations too large together): the tensors live across it go out and come back in
    as they are (row views of the whole tensor, no host work): exact."""
    art = check_exact(_branches(), small_act(T8, 2048))
    segs = art.info["tile"]["segments"]
    assert len(segs) >= 2
    outs = {o["name"]: o for o in segs[0]["outputs"]}
    viewed = [i for i in segs[1]["inputs"] if i.get("view")]
    assert viewed and all(
        [dict(p, layout=tuple(p["layout"])) for p in i["view"]] == [{
            "lo": 0, "hi": 16, "src": i["name"], "dram": outs[i["name"]]["dram"], "pitch": 16, "row": 0,
            "layout": (outs[i["name"]]["c"], outs[i["name"]]["w"], outs[i["name"]]["s2d"])}] for i in viewed)
    assert not any(outs[i["name"]]["host"] for i in viewed)


def test_row_views_compose_slices_of_concats():
    """`row_views` by hand: rows [3, 9) of the Concat of A (5 rows) and B (6 rows) are A's rows 3..4 and B's 0..3;
    a Slice of columns is no row view; parts of two layouts are none either."""
    from hwc.ir.graph import Graph
    from hwc.ir.types import TensorType
    from hwc.tile.views import Piece, row_views

    g = Graph("v")
    for name, h in (("A", 5), ("B", 6)):
        g.add_input(name, TensorType("int8", (1, 4, h, 7)))
    cat = g.make_node("Concat", ["A", "B"], {"axis": 2})
    rows = g.make_node("Slice", [cat.outputs[0]], {"starts": [0, 0, 3, 0], "ends": [1, 4, 9, 7],
                                                   "steps": [1, 1, 1, 1]})
    cols = g.make_node("Slice", [cat.outputs[0]], {"starts": [0, 0, 0, 1], "ends": [1, 4, 11, 7],
                                                   "steps": [1, 1, 1, 1]})
    stored = {"A": {"dram": 64, "c": 4, "h": 5, "w": 7, "s2d": 1}, "B": {"dram": 640, "c": 4, "h": 6, "w": 7, "s2d": 1}}
    v = row_views(g, [rows.outputs[0], cols.outputs[0]], stored)
    assert v == {rows.outputs[0]: (Piece(0, 2, "A", 64, 5, 3, (4, 7, 1)), Piece(2, 6, "B", 640, 6, 0, (4, 7, 1)))}
    stored["B"]["s2d"] = 2
    assert row_views(g, [rows.outputs[0]], stored) == {}


def test_a_viewed_input_the_host_im2col_expands():
    """A segment whose input is rows an earlier segment stored, read by a thin 3x3 conv that the host im2col
    variant expands (the input is renamed; its view no longer applies): builds, exact (a random-graph probe's
    crash)."""
    b = QBuilder(seed=1)
    x = b.input("x", (1, 4, 16, 16), zp=0)
    g = b.output(b.conv(b.conv(b.conv(x, 16), 12, stride=2), 27, stride=2))
    art = check_exact(g, small_act(T32, 256))
    assert art.report["segments"] > 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=3), st.lists(st.tuples(st.booleans(), st.integers(0, 99),
                                                                                st.integers(0, 99),
                                                                                st.integers(0, 99)),
                                                                      min_size=1, max_size=8))
def test_row_views_follow_slices_and_concats_of_stored_rows(heights, ops):
    """Random Slices (of rows) and Concats (along the rows) of earlier segments' outputs: every row of every
    resulting tensor, by `row_views`' pieces, is the source row the int8 reference puts there (each source row
    holds its own label)."""
    from hwc.ir.graph import Graph
    from hwc.ir.types import TensorType
    from hwc.tile.views import row_views

    g = Graph("v")
    stored, feeds = {}, {}
    for i, h in enumerate(heights):
        name = f"s{i}"
        g.add_input(name, TensorType("int8", (1, 2, h, 3)))
        stored[name] = {"dram": 64 * i, "c": 2, "h": h, "w": 3, "s2d": 1}
        feeds[name] = np.broadcast_to((10 * i + np.arange(h)).reshape(1, 1, h, 1), (1, 2, h, 3)).astype(np.int8)
    names = list(stored)
    for concat, a, b, c in ops:
        x = names[a % len(names)]
        if concat:
            nd = g.make_node("Concat", [x, names[b % len(names)]], {"axis": 2})
        else:
            h = g.type(x).shape[2]
            r0 = b % h
            r1 = r0 + 1 + c % (h - r0)
            nd = g.make_node("Slice", [x], {"starts": [0, 0, r0, 0], "ends": [1, 2, r1, 3], "steps": [1, 1, 1, 1]})
        names.append(nd.outputs[0])
    g.outputs = names[len(heights):]
    got = run_graph(g, feeds)
    views = row_views(g, g.outputs, stored)
    assert set(views) == set(g.outputs)
    for name, pieces in views.items():
        want = got[name][0, 0, :, 0]
        labels = []
        for p in pieces:
            assert p.pitch == stored[p.src]["h"] and p.dram == stored[p.src]["dram"]
            labels += [10 * int(p.src[1:]) + p.row + y for y in range(p.hi - p.lo)]
        assert [p.lo for p in pieces] == [0] + [p.hi for p in pieces[:-1]] and pieces[-1].hi == len(want)
        assert labels == want.tolist(), name


def test_no_region_for_a_host_tensor_no_band_reads_in_place():
    """MobileNetV1-0.25 at 224x224 on tile32x32: its first bands take the host im2col of the thin first layer (rows
    of windows the host builds), so no segment reads the quantized input in place: the build is scheduled without a
    region for it (the first segment's data at address 0), and the host writes the bands' im2col inputs."""
    from hwc import zoo
    from hwc.frontend import import_onnx
    from hwc.quant.build import quantize_model

    m = zoo.mobilenet_v1_025(input_size=224)
    q = quantize_model(import_onnx(m), T32, zoo.random_inputs(m, n=2, seed=3))
    art = build_tile(q, T32, hdl=False)
    segs = art.info["tile"]["segments"]
    assert art.report["act_fit"]["bands"] and segs[0]["inputs"][0].get("im2col")
    assert segs[0]["dram_base"] == 0 and not any(r["name"].startswith("input.input") for r in art.memory_map["dram"])
    assert all(p["src"] in {o["name"] for io in segs for o in io["outputs"]}
               for io in segs for t in io["inputs"] for p in t.get("view", ()))


def test_vec_rows_wider_than_its_fields_go_one_row_and_piece_at_a_time():
    """A padded max pool and a residual add over rows of 5,000 pixels (a 65,536-line ACT holds them whole): VEC's
    outer stride (12 bits) cannot step a row and its counts (12 bits) cannot cover one, so each VEC becomes one a row
    in pieces of at most 4,095 lines (it was an internal error): exact against the int8 reference."""
    from hwc import isa

    b = QBuilder(seed=5)
    x = b.input("x", (1, 8, 2, 5000), zp=1)
    y = b.input("y", (1, 8, 2, 5000), zp=-3)
    g = b.output(b.add(b.maxpool(x, 2, 1, (0, 0, 1, 1)), y))
    art = check_exact(g, small_act(T8, 65536))
    vec = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.VEC]
    assert max(i.get("n_inner") for i in vec) == 4095 and {i.get("in_so") for i in vec} == {0}
    assert sum(i.get("n_inner") for i in vec if i.get("op") == int(isa.VecOp.ADD)) == 2 * 5000


def test_one_row_of_a_per_channel_layer_goes_in_channel_groups_before_column_bands():
    """A residual add over one row of 64 channels (8 lines a pixel) and 300 pixels on a 2,048-line ACT: channel
    groups (no halo) rather than column bands, exact; a convolution's one row goes in column bands (its groups would
    each read the whole input row)."""
    b = QBuilder(seed=8)
    x = b.input("x", (1, 64, 1, 300), zp=2)
    y = b.input("y", (1, 64, 1, 300), zp=-1)
    art = check_exact(b.output(b.add(x, y)), small_act(T8, 2048))
    assert art.report["act_fit"]["channels"].get("qadd", 0) >= 2 and not art.report["act_fit"].get("column_bands")
    b = QBuilder(seed=8)
    x = b.input("x", (1, 64, 1, 300), zp=2)
    art = check_exact(b.output(b.conv(x, 64, k=(1, 3), pads=[0, 1, 0, 1])), small_act(T8, 2048))
    assert art.report["act_fit"]["column_bands"].get("qconv", 0) >= 2 and not art.report["act_fit"]["channels"]
