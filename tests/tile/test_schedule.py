"""The tile scheduler, op by op and shape by shape: the tile model's outputs must equal the
int8 reference interpreter's exactly (hypothesis draws odd sizes, strides, pads, groups)."""

from pathlib import Path

import numpy as np
import pytest
from hwc.targets import load_target, tile_variant
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from qgraphs import QBuilder

from hwc.errors import TargetError, UnsupportedError, UserError
from hwc.ir import verify
from hwc.ref.interp import run_graph
from hwc.tile.build import build_tile, schedule

# the bundled targets (tile v2, docs/tile-v2.md: the post-processing unit and the depthwise mode)
# and their v1 variants (docs/tile.md), all checked in the model; without the depthwise stage in the
# post-processing (the bundled tile32x32 has it: test_depthwise_in_the_post_processing), so that the array's
# depthwise schedules are what these tests exercise
TARGETS = {name: tile_variant(load_target(name), post_unit=True, depthwise=True, dw_post=False)
           for name in ("tile8x8", "tile32x32")}
for _name in ("tile8x8", "tile32x32"):
    TARGETS[f"{_name}-v1"] = tile_variant(TARGETS[_name], post_unit=False, depthwise=False)


def check_exact(g, target, seed=0, im2col=True, pin=None):
    """Build for the tile (no HDL), run the tile model, compare every output with the int8 reference."""
    verify(g)
    art = build_tile(g, target, hdl=False, im2col=im2col, pin=pin)
    rng = np.random.default_rng(seed)
    feeds = {name: rng.integers(-128, 128, g.type(name).shape).astype(np.int8) for name in g.inputs}
    got = art.run(feeds, engine="model")
    want = run_graph(g, feeds)
    for name in g.outputs:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"output {name}")
    return art


conv_cases = st.fixed_dictionaries({
    "c": st.integers(1, 40), "m": st.integers(1, 40), "h": st.integers(1, 11), "w": st.integers(1, 13),
    "k": st.sampled_from([1, 2, 3, 5]), "stride": st.sampled_from([1, 2, 3]),
    "pads": st.lists(st.integers(0, 2), min_size=4, max_size=4), "depthwise": st.booleans(),
    "dil": st.sampled_from([1, 1, 2]), "relu": st.booleans(), "target": st.sampled_from(sorted(TARGETS)),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases)
def test_conv_shapes(case):
    span = (case["k"] - 1) * case["dil"] + 1
    h, w = case["h"] + span, case["w"] + span  # at least one output pixel
    b = QBuilder(seed=case["c"] * 100 + case["m"])
    x = b.input("x", (1, case["c"], h, w), zp=-7)
    group = case["c"] if case["depthwise"] else 1
    m = case["c"] if case["depthwise"] else case["m"]
    y = b.conv(x, m, k=case["k"], stride=case["stride"], pads=case["pads"], group=group, relu=case["relu"],
               dil=case["dil"])
    # a second layer reads the first from the scratchpad (not a host-prepared input)
    z = b.conv(y, 5, k=3, pads=[1, 1, 2, 1])
    check_exact(b.output(z), TARGETS[case["target"]])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 70), st.integers(1, 50), st.integers(1, 9), st.sampled_from(sorted(TARGETS)))
def test_gemm_batched(k, m, batch, target):
    b = QBuilder(seed=k + m)
    x = b.input("x", (batch, k), zp=3)
    check_exact(b.output(b.gemm(x, m)), TARGETS[target])


def test_fc_input_loads_whole_blocks_per_load():
    """An FC layer's input holds a line per sample in each channel block (8 lines at batch 8): it loads 8
    blocks (64 lines) per LOAD, not one LOAD per block (each costs the bus's latency besides its beats)."""
    from hwc import isa

    b = QBuilder(seed=4)
    x = b.input("x", (8, 200), zp=3)    # 25 channel blocks of 8 lines on tile8x8
    art = check_exact(b.output(b.gemm(b.gemm(x, 24), 10)), TARGETS["tile8x8"])
    io = art.info["tile"]["segments"][0]["inputs"][0]
    beat = TARGETS["tile8x8"]["bus"]["bytes"]
    loads = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.ACT
             and io["dram"] // beat <= i.get("dram") < io["dram"] // beat + 200]
    assert [i.get("rows") * i.get("row_beats") for i in loads] == [64, 64, 64, 8]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_flatten_gemm_is_a_whole_input_conv(target):
    b = QBuilder(seed=3)
    x = b.input("x", (1, 5, 6, 7), zp=1)
    y = b.conv(x, 12, relu=True)
    check_exact(b.output(b.gemm(b.flatten(y), 10)), TARGETS[target])


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
@pytest.mark.parametrize("shape", [(1, 1, 8, 1), (1, 16, 1, 11), (1, 4, 8, 8)])
def test_flatten_gemm_of_a_segment_input(target, shape):
    """Flatten + Gemm straight on a tensor the tile does not produce (the model input; the output of a host LUT):
    it was scheduled as a 1x1 conv of C*H*W channels over the C-channel image (wrong outputs, or a crash)."""
    b = QBuilder(seed=1)
    x = b.input("x", shape, zp=3)
    check_exact(b.output(b.gemm(b.flatten(x), 10)), TARGETS[target])
    b = QBuilder(seed=1)
    x = b.input("x", shape, zp=3)
    check_exact(b.output(b.gemm(b.flatten(b.lut(b.conv(x, 8))), 10)), TARGETS[target])


def test_flatten_gemm_of_an_earlier_segments_output():
    """The same behind a max pool too large for ACT, run in row bands (segments of their own): the Gemm's segment
    reads the pooled rows where the bands stored them. 65 channels of 9 x 9 had failed to build (an ACT address out
    of range). ACT of 8,192 lines: the input takes 6,561, the pool's two one-block temporaries 1,458."""
    from hwc.targets.tile_schema import validate_tile

    doc = {k: v for k, v in TARGETS["tile8x8"].items() if k != "derived"}
    doc["scratchpad"] = dict(doc["scratchpad"], act_lines=8192)
    b = QBuilder(seed=1)
    x = b.input("x", (1, 65, 27, 27), zp=3)
    art = check_exact(b.output(b.gemm(b.flatten(b.maxpool(x, 2, 3)), 10)), validate_tile(doc, "tile8x8 (8192)"))
    assert art.report["act_fit"]["bands"] == {"maxpool": 2}
    assert {d["node"]: d.get("segment") for d in art.report["partition"]}["qgemm"] == 2


pool_cases = st.fixed_dictionaries({
    "c": st.integers(1, 20), "h": st.integers(3, 12), "w": st.integers(3, 12), "k": st.sampled_from([1, 2, 3]),
    "s": st.sampled_from([1, 2, 3]), "pad": st.sampled_from([0, 1]), "kind": st.sampled_from(["max", "avg"]),
    "target": st.sampled_from(sorted(TARGETS)),
})


@settings(max_examples=40, deadline=None)
@given(pool_cases)
def test_pooling(case):
    pad = min(case["pad"], case["k"] - 1)
    b = QBuilder(seed=case["c"])
    x = b.input("x", (1, 4, case["h"] + 2, case["w"] + 2), zp=-2)
    y = b.conv(x, case["c"], relu=True)  # pool a tile-resident tensor
    pool = b.maxpool if case["kind"] == "max" else b.avgpool
    z = pool(y, k=case["k"], s=case["s"], pads=(pad, pad, pad, pad))
    check_exact(b.output(z), TARGETS[case["target"]])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_padded_max_pool_and_padded_conv_read_one_tensor(target):
    """An Inception block: a padded max pool and a padded conv read one ReLU output. The tile keeps one
    halo per tensor; the conv's zero point serves the max pool (every pixel is >= it, every window holds
    a pixel). On the unclamped model input the zero point does not serve: the max pool reads real pixels
    only (its edge windows over their taps inside), and most edge windows of an input below the zero
    point would differ if it read the halo."""
    b = QBuilder(seed=3)
    x = b.input("x", (1, 6, 7, 9), zp=-3)
    y = b.conv(x, 12, relu=True)
    c = b.conv(y, 8, pads=[1, 1, 1, 1])
    m = b.maxpool(y, 3, 1, (1, 1, 1, 1))
    check_exact(b.output(c, m), TARGETS[target])
    b = QBuilder(seed=3)
    x = b.input("x", (1, 6, 7, 9), zp=-3)
    c, m = b.conv(x, 8, pads=[1, 1, 1, 1]), b.maxpool(x, 3, 1, (1, 1, 1, 1))
    g = b.output(c, m)
    art = check_exact(g, TARGETS[target])
    feeds = {"x": np.full((1, 6, 7, 9), -100, np.int8)}   # every pixel below the halo's -3
    np.testing.assert_array_equal(art.run(feeds, engine="model")[m], run_graph(g, feeds)[m])
    assert (run_graph(g, feeds)[m] == -100).all()
    b = QBuilder(seed=3)   # pads as large as the window: windows without a pixel need the -128 halo itself
    x = b.input("x", (1, 6, 7, 9), zp=-3)
    c, m = b.conv(x, 8, pads=[1, 1, 1, 1]), b.maxpool(x, 2, 1, (2, 0, 0, 0))
    g = b.output(c, m)
    conv, pool = (n.name for n in g.nodes)
    with pytest.raises(UnsupportedError, match=f"{conv!r} pads it with -3 and {pool!r} with -128. {pool!r} has pads"):
        build_tile(g, TARGETS[target], hdl=False)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({"h": st.integers(3, 12), "w": st.integers(3, 12), "k": st.sampled_from([2, 3]),
                              "s": st.sampled_from([2, 3]), "pad": st.sampled_from([0, 1]), "relu": st.booleans(),
                              "target": st.sampled_from(sorted(TARGETS))}))
def test_ceil_mode_max_pool(case):
    """ceil_mode max pooling (Caffe-style GoogLeNet, SqueezeNet) runs on the tile as the same pool with the end
    pads its last windows reach: on a ReLU output (the zero point serves as the halo) and on an unclamped tensor a
    padded conv reads too (real pixels only). The last windows hold fewer pixels than the kernel."""
    k, s = case["k"], case["s"]
    pad = min(case["pad"], k - 1)
    b = QBuilder(seed=case["h"] * 13 + case["w"])
    x = b.input("x", (1, 3, case["h"], case["w"]), zp=-2)
    y = b.conv(x, 10, relu=case["relu"], pads=[1, 1, 1, 1])
    m = b.maxpool(y, k, s, (pad,) * 4, ceil=True)
    outs = [m] if case["relu"] else [m, b.conv(y, 4, pads=[1, 1, 1, 1])]
    g = b.output(*outs)
    art = check_exact(g, TARGETS[case["target"]], seed=case["k"])
    assert {d["node"]: d["where"] for d in art.report["partition"]}[g.nodes[1].name] == "tile"


edge_pool_cases = st.fixed_dictionaries({
    "c": st.integers(1, 40), "h": st.integers(1, 9), "w": st.integers(1, 9), "k": st.sampled_from([2, 3, 5]),
    "s": st.sampled_from([1, 2, 3]), "pads": st.lists(st.integers(0, 4), min_size=4, max_size=4),
    "target": st.sampled_from(sorted(TARGETS)),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edge_pool_cases)
def test_max_pool_over_real_pixels_only(case):
    """A padded max pool of a tensor whose halo holds a padded conv's zero point (the model input): edge
    windows run over their taps inside the tensor, any kernel, stride and (asymmetric) pads, channels
    over several blocks. Inputs below the zero point make a wrong halo read visible."""
    k = case["k"]
    pads = [min(p, k - 1) for p in case["pads"]]
    h, w = case["h"] + k - 1, case["w"] + k - 1
    b = QBuilder(seed=case["c"])
    x = b.input("x", (1, case["c"], h, w), zp=40)
    g = b.output(b.conv(x, 5, pads=[1, 1, 1, 1]), b.maxpool(x, k, case["s"], pads))
    check_exact(g, TARGETS[case["target"]], seed=case["h"])


rect_pool_cases = st.fixed_dictionaries({
    "c": st.integers(1, 40), "h": st.integers(1, 6), "w": st.integers(4, 40), "kh": st.sampled_from([1, 2, 3]),
    "kw": st.sampled_from([1, 2, 4]), "sh": st.sampled_from([1, 2]), "sw": st.sampled_from([1, 3, 4]),
    "pad": st.booleans(), "edge": st.booleans(), "target": st.sampled_from(sorted(TARGETS)),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rect_pool_cases)
def test_rectangular_max_pool(case):
    """Max pools with different kernel heights and widths and strides (1 x k over a 1-d signal's row, k x 1), on
    a ReLU output and, with `edge`, on the model input beside a padded conv (real pixels only). A pool one row
    high writes its output from the horizontal pass; it and a pool one column wide use one scratch tensor."""
    kh, kw = case["kh"], case["kw"]
    pads = [min(int(case["pad"]), kh - 1), min(int(case["pad"]), kw - 1)] * 2
    h, w = case["h"] + kh - 1, case["w"]
    b = QBuilder(seed=case["c"] + 7 * h)
    x = b.input("x", (1, case["c"], h, w), zp=30)
    if case["edge"]:
        g = b.output(b.conv(x, 5, pads=[1, 1, 1, 1]), b.maxpool(x, (kh, kw), (case["sh"], case["sw"]), pads))
    else:
        g = b.output(b.maxpool(b.conv(x, 9, relu=True), (kh, kw), (case["sh"], case["sw"]), pads))
    check_exact(g, TARGETS[case["target"]], seed=h + w)


fused_pool_cases = st.fixed_dictionaries({
    "c1": st.integers(1, 40), "c2": st.integers(1, 70), "h": st.integers(4, 20), "w": st.integers(4, 20),
    "k": st.sampled_from([2, 3]), "s": st.sampled_from([1, 2, 3]), "pad": st.booleans(),
    "target": st.sampled_from([t for t in sorted(TARGETS) if TARGETS[t]["features"]["post_unit"]]),
})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fused_pool_cases)
def test_max_pools_fused_with_their_convolution(case):
    """Two conv + max pool pairs, channels over several blocks, images over several pixel tiles: exact against
    the int8 reference whether the search runs the pools during their convs (`Codegen._fusable_pools`: the VECs of
    each finished pixel tile dripped between GEMMs) or after them, and pinned either way."""
    k, s = case["k"], case["s"]
    pad = int(case["pad"])
    b = QBuilder(seed=case["c1"] * 7 + case["h"])
    x = b.input("x", (1, 3, case["h"] + 2 * k, case["w"] + 2 * k), zp=-6)
    y = b.maxpool(b.conv(x, case["c1"], relu=True), k, s, (pad,) * 4)
    z = b.maxpool(b.conv(y, case["c2"], relu=True), k, s, (pad,) * 4)
    g = b.output(z)
    t = TARGETS[case["target"]]
    art = check_exact(g, t, seed=case["w"])
    fused = art.report["schedule"][0]["fuse_pools"]
    pools = [L for L in art.report["layers"] if L["op"] == "MaxPool"]
    assert all(bool(L.get("fused_into")) == fused for L in pools)
    other = dict(art.report["schedule"][0], fuse_pools=not fused)
    check_exact(g, t, seed=case["w"], pin=[other])


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_a_fused_max_pool_runs_beside_the_gemms(target):
    """A 3x3 conv from one channel block to three over 16 x 16 pixels (nine GEMM lines a pixel, several pixel
    tiles a block), then a 2x2 max pool: the search runs the pool during the conv. Its VECs sit between the conv's
    GEMMs (the first before the conv's last GEMM), and it takes fewer cycles than the same schedule with the pool
    after the conv (measured: tile8x8 7,741 against 9,532, tile32x32 7,908 against 9,828). Both exact."""
    from hwc import isa

    t = TARGETS[target]
    n = t["array"]["rows"]
    b = QBuilder(seed=5)
    x = b.input("x", (1, n, 16, 16), zp=-6)
    g = b.output(b.conv(b.maxpool(b.conv(x, 3 * n, relu=True), 2, 2), 8, k=1, pads=[0] * 4))
    art = check_exact(g, t)
    assert art.report["schedule"][0]["fuse_pools"]
    prog = isa.from_bytes(art.program)
    vecs = [k for k, i in enumerate(prog) if i.op == isa.Op.VEC]
    gemms = [k for k, i in enumerate(prog) if i.op == isa.Op.GEMM]
    conv_gemms = [k for k in gemms if k < max(vecs)]
    assert min(vecs) < max(conv_gemms)
    apart = check_exact(g, t, pin=[dict(art.report["schedule"][0], fuse_pools=False)])
    assert not apart.report["schedule"][0]["fuse_pools"]
    assert art.report["cycles"] < apart.report["cycles"]


def test_a_max_pool_is_not_fused_where_act_is_too_tight_for_it():
    """Fused, a max pool's output and temporaries are live during the conv too. Where ACT holds the unfused plan
    exactly and not the fused one, the build runs the pool after the conv, in one segment, instead of cutting the
    model (probe 8, seed 3506: three segments and 5,472 cycles instead of one and 3,927)."""
    from hwc.targets.tile_schema import validate_tile

    t = TARGETS["tile8x8"]
    b = QBuilder(seed=4)
    x = b.input("x", (1, 8, 14, 14), zp=-6)
    g = b.output(b.conv(b.maxpool(b.conv(x, 16, relu=True), 2, 2), 8, k=1, pads=[0] * 4))
    pin = build_tile(g, t, hdl=False).report["schedule"][0]
    lines = {f: build_tile(g, t, hdl=False, pin=[dict(pin, fuse_pools=f)]).report["memory"]["act_lines_used"]
             for f in (True, False)}
    assert lines[False] <= 1024 < lines[True]   # (ACT sizes are powers of two)
    doc = {k: v for k, v in t.items() if k != "derived"}
    doc["scratchpad"] = dict(doc["scratchpad"], act_lines=1024)
    art = check_exact(g, validate_tile(doc, "tight"), pin=[dict(pin, fuse_pools=True)])
    assert art.report["segments"] == 1 and not art.report["schedule"][0]["fuse_pools"]


one_row_cases = st.fixed_dictionaries({
    "c": st.integers(1, 40), "m": st.sampled_from([5, 8, 16, 32, 40, 64, 70]), "w": st.integers(16, 260),
    "k": st.sampled_from([1, 3, 5]),
    "s": st.sampled_from([1, 2, 4]), "pool": st.sampled_from([0, 2, 4]), "add": st.booleans(),
    "target": st.sampled_from(sorted(TARGETS)),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(one_row_cases)
def test_one_row_convolutions_folded(case):
    """1-d signals: two convolutions over one row (strided, padded, channels over several blocks), each maybe
    followed by a 1 x k max pool, the second maybe with a residual add. On tile v2 a convolution whose row
    width has a divisor of 8 or more pixels a fold row is folded (`Codegen._fold_width`): its pixel tiles split
    the row. Exact against the int8 reference, folded or not (v1, widths without such a divisor)."""
    k, s, m = case["k"], case["s"], case["m"]
    b = QBuilder(seed=case["c"] * 11 + case["w"])
    x = b.input("x", (1, case["c"], 1, case["w"]), zp=-7)
    y = b.conv(x, m, k=(1, k), stride=(1, s), pads=[0, (k - 1) // 2, 0, k // 2], relu=True)
    if case["pool"]:
        y = b.maxpool(y, (1, case["pool"]), (1, case["pool"]))
    z = b.conv(y, m, k=(1, 3), pads=[0, 1, 0, 1], relu=not case["add"])
    if case["add"]:
        z = b.add(y, z, relu=True)
    if case["pool"] and b.g.type(z).shape[3] >= case["pool"]:
        z = b.maxpool(z, (1, case["pool"]), (1, 2))
    t = TARGETS[case["target"]]
    art = check_exact(b.output(z), t, seed=case["w"])
    for layer in art.report["layers"]:
        if layer["op"] != "QConv":
            continue
        w = layer["out_shape"][3]
        fold = layer.get("fold")
        assert fold is None or (w % fold == 0 and fold >= 8 and 2 <= w // fold <= 32)
        assert fold is None or t["features"]["post_unit"]


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_a_folded_one_row_conv_overlaps_its_post_processing(target, monkeypatch):
    """A 1 x 3 conv over one row of 512 pixels, one channel block in and out, then a 1 x 4 max pool. Folded into
    32 rows of 16 pixels, the row goes in several pixel tiles: their PPUs and the pool's VECs run beside the next
    tiles' GEMMs, and it takes fewer cycles than the same layers computed as one tile (`_fold_width` off;
    measured: tile8x8 3,295 against 4,060, tile32x32 3,333 against 4,098). Both exact."""
    from hwc import isa
    from hwc.tile.codegen import Codegen

    t = TARGETS[target]
    n = t["array"]["rows"]
    b = QBuilder(seed=6)
    x = b.input("x", (1, n, 1, 512), zp=-3)
    g = b.output(b.maxpool(b.conv(x, n, k=(1, 3), pads=[0, 1, 0, 1], relu=True), (1, 4), (1, 4)))
    art = check_exact(g, t)
    conv = next(L for L in art.report["layers"] if L["op"] == "QConv")
    assert conv["fold"] == 16
    prog = isa.from_bytes(art.program)
    ops = [i.op for i in prog]
    last_gemm = max(k for k, op in enumerate(ops) if op == isa.Op.GEMM)
    assert ops.count(isa.Op.PPU) > 1 and ops.index(isa.Op.PPU) < last_gemm
    assert any(op == isa.Op.VEC for op in ops[:last_gemm])   # (the pool fused: VECs between the GEMMs)
    import io

    from rich.console import Console

    from hwc.report.text import summary

    console = Console(record=True, width=300, file=io.StringIO())   # (`hwc report` names it)
    console.print(summary(art.report))
    assert f"{conv['name']} (16 pixels)" in console.export_text()
    monkeypatch.setattr(Codegen, "_fold_width", lambda self, i, layer: None)
    whole = check_exact(g, t)
    assert "fold" not in next(L for L in whole.report["layers"] if L["op"] == "QConv")
    assert art.report["cycles"] < whole.report["cycles"]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_one_row_max_pool_is_one_pass(target):
    """A 1 x 4 max pool over a one-row tensor of one channel block: three VECs (max of taps 0 and 1, then 2, then 3,
    the last into the output), no vertical copy, no second scratch tensor."""
    b = QBuilder(seed=2)
    x = b.input("x", (1, 5, 1, 64), zp=-4)
    g = b.output(b.maxpool(b.conv(x, 6, k=(1, 3), pads=[0, 1, 0, 1], relu=True), (1, 4), (1, 4)))
    from hwc import isa

    art = check_exact(g, TARGETS[target])
    assert sum(i.op == isa.Op.VEC for i in isa.from_bytes(art.program)) == 3
    pool = g.nodes[-1].name
    assert [a["name"] for a in art.memory_map["act"] if a["name"].startswith(pool + ".")] == [pool + ".h"]


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("c", [3, 8, 21, 64])
def test_residual_add_and_global_pool(target, c):
    b = QBuilder(seed=c)
    x = b.input("x", (1, c, 9, 7), zp=4)
    y = b.conv(x, c, relu=True)
    z = b.conv(y, c, pads=[1, 1, 1, 1])
    s = b.add(y, z, relu=True)
    check_exact(b.output(b.gap(s)), TARGETS[target])


def test_im2col_of_a_thin_first_layer_is_exact_and_counted():
    b = QBuilder(seed=9)
    x = b.input("x", (1, 3, 12, 12), zp=-3)
    g = b.output(b.conv(x, 16, stride=2, pads=[0, 0, 1, 1]))
    art = check_exact(g, TARGETS["tile8x8"])
    assert art.report["host"]["im2col"], "27 taps fill 27 of 32 lanes instead of 3 of 8: im2col must be chosen"
    plain = check_exact(g, TARGETS["tile8x8"], im2col=False)
    assert art.report["cycles"] < plain.report["cycles"]


def test_double_buffered_weight_loads_are_hidden():
    b = QBuilder(seed=1)
    x = b.input("x", (1, 32, 16, 16), zp=0)
    y = b.conv(x, 64)
    y = b.conv(y, 64)
    art = check_exact(b.output(y), TARGETS["tile8x8"])
    rep = art.report
    assert rep["weight_load_cycles"] > 0
    assert rep["weight_load_hidden"] >= 0.9, rep["weight_load_hidden"]


def test_inconsistent_target_yaml(tmp_path):
    import yaml

    doc = yaml.safe_load(open(load_target.__globals__["resources"].files("hwc.targets") / "tile8x8.yaml"))
    doc["bus"]["bytes"] = 16
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(TargetError, match=r"bus.bytes \(16\) must equal array.cols \(8\)"):
        load_target(str(p))
    doc["bus"]["bytes"] = 8
    doc["scratchpad"]["act_lines"] = 16
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(TargetError, match="act_lines 16 is too small for one block"):
        load_target(str(p))
    doc["scratchpad"]["act_lines"] = 8192
    doc["array"]["rows"] = 12
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(TargetError, match="'array.rows' must be a positive power of two, not 12"):
        load_target(str(p))
    doc["array"]["rows"] = 8
    for rows, msg in ((3, "'scratchpad.wgt_read_rows' must be a positive power of two, not 3"),
                      (16, "scratchpad.wgt_read_rows 16 exceeds the block's 8 rows")):
        doc["scratchpad"]["wgt_read_rows"] = rows
        p.write_text(yaml.safe_dump(doc))
        with pytest.raises(TargetError, match=msg):
            load_target(str(p))
    doc["scratchpad"]["wgt_read_rows"] = 2
    # the ninth depthwise PE goes with the row buffers, on an 8-column array
    doc["scratchpad"]["dw_line_buffer"] = 0
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(TargetError, match="features.dw_ninth_tap needs scratchpad.dw_line_buffer"):
        load_target(str(p))
    doc32 = yaml.safe_load(open(load_target.__globals__["resources"].files("hwc.targets") / "tile32x32.yaml"))
    doc32["features"]["dw_ninth_tap"] = True
    p.write_text(yaml.safe_dump(doc32))
    with pytest.raises(TargetError, match="features.dw_ninth_tap is for arrays of 8 columns"):
        load_target(str(p))


@pytest.mark.parametrize("c", [4, 8, 16])
def test_stacking_thin_tensors_is_exact_and_faster(c):
    """Thin tensors on the 32x32 tile carry 32/c pixels per line; conv, residual add and global pooling
    run on the stacked layout and give the same bits."""
    b = QBuilder(seed=c)
    x = b.input("x", (1, c, 8, 16), zp=2)
    y = b.conv(x, c, relu=True)
    z = b.conv(y, c, stride=1, pads=[1, 1, 1, 1])
    s = b.add(y, z)
    d = b.conv(s, 2 * c, stride=2, pads=[0, 0, 1, 1])
    g = b.output(b.gap(d), s)
    target = TARGETS["tile32x32"]
    stacked = check_exact(g, target)
    flat = build_tile(g, target, hdl=False, stack=False)
    assert stacked.report["cycles"] < flat.report["cycles"]


@pytest.mark.parametrize("target", ["tile8x8", "tile8x8-v1"])
def test_double_buffering_ablation(target):
    b = QBuilder(seed=5)
    x = b.input("x", (1, 16, 16, 16), zp=0)
    g = b.output(b.conv(b.conv(x, 64), 64))
    on = check_exact(g, TARGETS[target])
    off = build_tile(g, TARGETS[target], hdl=False, double_buffer=False)
    feeds = {"x": np.random.default_rng(2).integers(-128, 128, (1, 16, 16, 16)).astype(np.int8)}
    np.testing.assert_array_equal(off.run(feeds)[g.outputs[0]], run_graph(g, feeds)[g.outputs[0]])
    assert 0.9 < on.report["weight_load_hidden"]
    assert on.report["cycles"] < off.report["cycles"]
    if target.endswith("-v1"):  # v1: a single-banked load waits for every compute instruction (PPUs too)
        assert off.report["weight_load_hidden"] < 0.05
    else:  # v2: without the second bank a load still overlaps the POST unit's PPUs, never a GEMM
        assert off.report["weight_load_hidden"] < 0.6


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_host_fallback_between_tile_segments(target):
    """Nodes the tile cannot run (a lookup table; a reshape that changes the channel-blocked layout)
    end a tile segment: the host runs them and the next segment continues, bit-exact end to end."""
    b = QBuilder(seed=11)
    x = b.input("x", (1, 6, 8, 8), zp=-1)
    y = b.conv(x, 8, relu=True)
    y = b.lut(y)                               # host
    y = b.conv(y, 8, stride=2, pads=[1, 1, 1, 1])
    y = b.reshape(y, (1, 32, 2, 2))            # host: a different channel blocking
    y = b.conv(y, 12, k=1, pads=[0, 0, 0, 0])
    art = check_exact(b.output(y), TARGETS[target])
    rep = art.report
    assert rep["segments"] == 3
    where = {d["op"]: d["where"] for d in rep["partition"]}
    assert where["QLut"] == "host" and where["Reshape"] == "host" and where["QConv"] == "tile"
    assert [layer["op"] for layer in rep["layers"]] == ["QConv"] * 3
    starts = [layer["start"] for layer in rep["layers"]]
    assert starts == sorted(starts) and rep["layers"][-1]["end"] <= rep["cycles"]
    assert art.last_run["segments"] == 3 and art.last_run["cycles"] == rep["cycles"]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 20), st.integers(3, 12), st.integers(3, 12), st.sampled_from([1, 2]), st.sampled_from([2, 3, 5]),
       st.lists(st.integers(0, 2), min_size=4, max_size=4), st.sampled_from(["tile8x8", "tile32x32"]))
@example(5, 3, 3, 2, 2, [0, 0, 0, 0], "tile8x8")
@example(7, 5, 4, 2, 3, [1, 0, 0, 0], "tile8x8")
@example(6, 3, 4, 2, 3, [0, 0, 0, 0], "tile8x8")
@example(12, 9, 7, 1, 3, [1, 1, 1, 1], "tile8x8")
@example(20, 10, 6, 1, 3, [1, 1, 1, 1], "tile32x32")
def test_depthwise_mode(c, h, w, stride, k, pads, target):
    """v2 depthwise mode: exact in every schedule; on real images used, and faster than without it."""
    from hwc import isa

    pads = [min(p, k - 1) for p in pads]
    b = QBuilder(seed=c + h)
    x = b.input("x", (1, c, h + k, w + k), zp=5)
    y = b.conv(x, c, relu=True)
    z = b.conv(y, c, k=k, stride=stride, pads=pads, group=c)
    art = check_exact(b.output(z), TARGETS[target])
    prog = isa.from_bytes(art.program)
    lines = lambda p: sum(i.get("n_outer") * i.get("n_inner") for i in p if i.op == isa.Op.GEMM)
    v1 = build_tile(b.g, TARGETS[target + "-v1"], hdl=False)
    if 2 * c > TARGETS[target]["array"]["rows"]:  # thinner tensors are stacked (several pixels a line) instead
        used = any(i.op == isa.Op.GEMM and i.get("dw") for i in prog)
        # the schedule is chosen by a cost model (docs/tile-v2.md, "Depthwise schedules"): on tiny maps it
        # may trade lines for fewer GEMMs, and it is a heuristic (hypothesis found maps of 5x4 where it
        # costs 1% against diagonal blocks). Where the mode clearly pays, a 3x3 kernel at stride 1 over a
        # real image, it must be used and be faster than without it.
        if k == 3 and stride == 1 and h >= 6 and w >= 6:
            nodw = build_tile(b.g, tile_variant(TARGETS[target], depthwise=False), hdl=False)
            assert used and lines(prog) < lines(isa.from_bytes(v1.program))
            assert art.report["cycles"] < nodw.report["cycles"]


def test_cli_v2_target_builds_with_hdl(tmp_path, capsys):
    """A target YAML with v2 features builds with HDL (the RTL implements tile v2, docs/tile-v2.md: tile.v
    with the POST unit and the depthwise mode) and with --no-hdl (the cycle model runs it, exactly)."""
    import yaml

    from hwc.cli import main

    examples = Path(__file__).resolve().parents[2] / "examples"
    doc = yaml.safe_load(open(load_target.__globals__["resources"].files("hwc.targets") / "tile8x8.yaml"))
    doc["features"] = {"post_unit": True, "depthwise": True}
    p = tmp_path / "tile8x8-v2.yaml"
    p.write_text(yaml.safe_dump(doc))
    args = ["build", str(examples / "digits_cnn.onnx"), "--target", str(p), "--calib",
            str(examples / "digits_calib.npz")]
    assert main([*args, "-o", str(tmp_path / "hdl")]) == 0
    text = (tmp_path / "hdl" / "tile.v").read_text()
    assert "acc_post" in text and "post_busy_q" in text, "the v2 tile.v has the POST unit and its ACC copy"
    assert main([*args, "-o", str(tmp_path / "v2"), "--no-hdl"]) == 0
    assert not (tmp_path / "v2" / "tile.v").exists()
    assert main(["sim", str(tmp_path / "v2"), "--input", str(examples / "digits_test.npz")]) == 0
    assert "outputs == int8 reference" in capsys.readouterr().out


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_on_a_tall_narrow_image_streams_down_the_columns(stride):
    """A depthwise GEMM wastes `skip` lines per inner loop: on a 3-pixel-wide image, streaming along the
    rows wastes 2 of every 5; the scheduler streams down the columns instead (a kernel column per GEMM),
    exactly, with fewer lines than the row-wise stream. (A tile without the row buffers of GEMM.dwp: with
    them the "pitch" schedule streams fewer still, test_depthwise_over_rows below.)"""
    from hwc import isa

    c, h, w = 16, 30, 3
    b = QBuilder(seed=stride)
    x = b.input("x", (1, c, h, w), zp=3)
    y = b.conv(x, c, k=1, relu=True)
    z = b.conv(y, c, k=3, stride=stride, pads=[1, 1, 1, 1], group=c)
    art = check_exact(b.output(z), tile_variant(TARGETS["tile8x8"], dw_line_buffer=0))
    prog = isa.from_bytes(art.program)
    dw = [i for i in prog if i.op == isa.Op.GEMM and i.get("dw")]
    wp = w + 1                                   # the row pitch (pads 1 and 1 share a column)
    assert dw and all(i.get("act_si") == stride * wp for i in dw), "the depthwise GEMMs must stream down columns"
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    taps = 3 * stride                            # per kernel row (row-wise) or column: one GEMM per stride phase
    row_wise = 2 * taps * ho * (wo + 2)          # 2 channel blocks, skip <= 2 per output row
    assert sum(i.get("n_outer") * i.get("n_inner") for i in dw) < row_wise


@pytest.mark.parametrize("target,c,h,w,stride,kind,ninth", [
    ("tile8x8", 16, 12, 12, 1, "rows", True), ("tile8x8", 8, 25, 25, 1, "rows", True),
    ("tile8x8", 16, 21, 21, 2, "rows", True), ("tile8x8", 16, 21, 21, 2, "phases", False),
    ("tile8x8", 16, 12, 12, 1, "rows", False), ("tile32x32", 32, 20, 20, 1, "rows", False),
    ("tile8x8", 16, 25, 5, 1, "rows", True), ("tile8x8", 16, 25, 2, 1, "cols", True),
    ("tile8x8", 16, 25, 2, 1, "cols", False)])
def test_depthwise_over_rows(target, c, h, w, stride, kind, ninth):
    """GEMM.dwp: one depthwise GEMM streams whole padded rows, a kernel row in 3 columns, the rows a row pitch
    apart through the row buffers ("pitch"; with the left and right pads in one column a row of w pixels is
    w + 1 lines). tile8x8 holds all 9 taps with its ninth PE (GEMM.dw9; without it 8, the ninth tap a diagonal
    GEMM over the outputs), at stride 1 and 2 (every row streamed, every other output read), tile32x32 all 9 in
    its columns; the tap of the first output that reads the line before the GEMM (it starts one line late) is
    added by a GEMM over that output. Too short a pitch (w = 2: 3 lines): down the padded columns ("pcols", 9 or
    6 taps, the first kernel column then in a "cols" GEMM); stride 2 without the ninth PE: one GEMM per column
    phase over every other column ("pitch2": 6 taps and 3). Exact against the int8 reference, chosen by the cost
    model, and it streams fewer lines than the best schedule without the row buffers."""
    from hwc import isa

    b = QBuilder(seed=c + h)
    x = b.input("x", (1, c, h, w), zp=3)
    y = b.conv(x, c, k=1, relu=True)
    g = b.output(b.conv(y, c, k=3, stride=stride, pads=[1, 1, 1, 1], group=c, relu=True))
    wp = w + 1   # the row pitch: the left and right pads share a column (TileTensor.share_pad_column)
    lines = []
    tile = TARGETS[target] if ninth == TARGETS[target]["features"]["dw_ninth_tap"] else \
        tile_variant(TARGETS[target], dw_ninth_tap=ninth)
    for t in (tile, tile_variant(tile, dw_line_buffer=0)):
        art = check_exact(g, t)
        prog = isa.from_bytes(art.program)
        lines.append(sum(i.get("n_outer") * i.get("n_inner") for i in prog if i.op == isa.Op.GEMM))
        if t is tile:
            dwp = [i for i in prog if i.op == isa.Op.GEMM and i.get("dwp")]
            assert all(i.get("dw9") == (ninth and kind != "phases") for i in dwp), "the ninth PE where it exists"
            assert dwp, "the row buffers are used"
            if kind == "cols":  # down the columns: the pitch is the padded rows of a pixel tile's columns, the next
                # column a line on, every padded column (x = -1 to w) with 9 taps, or from x = 0 with 6
                assert all(i.get("act_si") == wp and i.get("act_so") == 1 and i.get("n_outer") == w + 1 + ninth
                           and i.get("n_inner") <= h + 2 for i in dwp)
                assert ninth == all(not i.get("dw") or i.get("dwp") for i in prog if i.op == isa.Op.GEMM)
            elif kind == "phases":  # every other column of every padded row: the even and the odd ones
                assert all(i.get("act_si") == 2 and i.get("act_so") == wp for i in dwp)
                assert {i.get("n_inner") for i in dwp} == {(w + 3) // 2, (w + 2) // 2}   # up to x = w (a pad)
            else:
                assert all(i.get("n_inner") == wp and i.get("act_si") == 1 for i in dwp), "rows of the padded width"
    assert lines[0] < lines[1], lines


def test_the_first_layer_starts_before_the_whole_input_is_loaded():
    """The input loads in row chunks per channel block; a first-layer GEMM waits for the chunks it reads
    only, so compute starts long before the input's last beat (it used to wait for all of them)."""
    b = QBuilder(seed=4)
    x = b.input("x", (1, 32, 32, 32), zp=1)
    g = b.output(b.conv(b.conv(x, 16, pads=[1, 1, 1, 1], relu=True), 16))
    art = check_exact(g, TARGETS["tile8x8"])
    input_beats = 32 * 32 * 32 // 8              # 4 channel blocks x 1024 pixels, a line a beat
    assert art.report["layers"][0]["start"] < input_beats // 4


def test_the_first_input_chunk_holds_the_rows_the_first_pixel_tile_reads():
    """`Codegen._first_chunk`: the input's first LOAD brings the rows the first layer's first pixel tile reads, no
    more (r output rows of a 3x3 stride-1 convolution padded by one read input rows 0 .. r), then fixed chunks."""
    from hwc import isa

    b = QBuilder(seed=4)
    x = b.input("x", (1, 8, 40, 16), zp=1)     # one channel block on tile8x8
    g = b.output(b.conv(b.conv(x, 16, pads=[1, 1, 1, 1], relu=True), 16))
    prog = isa.from_bytes(check_exact(g, TARGETS["tile8x8"]).program)
    acts = [i for i in prog if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.ACT]
    r = next(i for i in prog if i.op == isa.Op.GEMM).get("n_outer")
    assert r < 39 and acts[0].get("rows") == r + 1, (r, acts[0])
    assert sum(i.get("rows") for i in acts) == 40 and len({i.get("rows") for i in acts[1:-1]}) == 1


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_output_halos_do_not_stall_the_array(target):
    """A pointwise layer whose output a padded depthwise layer reads: the halo FILLs (strided, up to 16 padded
    rows each, per channel block) run on POST between the layer's GEMMs, not in one batch that blocks their issue: from
    the layer's first GEMM to its last, the array streams all but a few percent of the cycles."""
    from hwc.sim.model import TileModel

    from hwc import isa

    b = QBuilder(seed=8)
    c = 4 * TARGETS[target]["array"]["rows"]
    x = b.input("x", (1, c, 24, 24), zp=0)
    y = b.conv(b.conv(x, c, k=1), c, k=1, relu=True)       # the second layer is measured
    z = b.conv(y, c, k=3, pads=[1, 1, 1, 1], group=c)
    art = check_exact(b.output(z), TARGETS[target])
    io = art.info["tile"]["segments"][0]
    res = TileModel(TARGETS[target]).run(art.program, art.memory_image(), io["prog_offset"] // isa.INSN_BYTES)
    prog = isa.from_bytes(art.program)
    (_, tp, _), = schedule(b.g, TARGETS[target])       # the same program, with each instruction's layer
    assert isa.to_bytes(tp.program) == art.program
    gemms = [k for k, i in enumerate(prog) if i.op == isa.Op.GEMM and tp.insn_layer[k] == 1]
    lines = sum(prog[k].get("n_outer") * prog[k].get("n_inner") for k in gemms)
    assert lines == 4 * 4 * 576                   # cbo x cbi blocks of 576 pixels: the layer's GEMMs
    latency = isa.Timing.from_target(TARGETS[target]).GEMM_LATENCY
    span = res.end[gemms[-1]] - latency - res.start[gemms[0]]
    assert span <= 1.03 * lines, (span, lines)
    # the halo: 26 x 25 padded lines (the left and right pads share a column) and the last pad row's right pad,
    # less 24 x 24 per channel block, in strided FILLs of up to 16 row-gaps each
    fills = [i for i in prog if i.op == isa.Op.FILL]
    assert sum(i.get("rows") * i.get("count") for i in fills) == 4 * (26 * 25 + 1 - 24 * 24)
    assert len(fills) == 4 * (2 + -(-23 // 16))


def _timeline(g, target, pin=None):
    """The built artifact, its program, the model's per-instruction times and each instruction's layer."""
    from hwc.sim.model import TileModel

    from hwc import isa

    art = check_exact(g, target)
    pin = pin or art.report["schedule"]
    art = build_tile(g, target, hdl=False, pin=pin)
    io = art.info["tile"]["segments"][0]
    res = TileModel(target).run(art.program, art.memory_image(), io["prog_offset"] // isa.INSN_BYTES)
    (_, tp, _), = schedule(g, target, pin=pin)
    assert isa.to_bytes(tp.program) == art.program
    return art, isa.from_bytes(art.program), res, tp.insn_layer


def test_the_next_layer_streams_while_the_last_tile_is_post_processed():
    """A residual block's last pixel tile is post-processed (PPU, then the fused add on VEC, 3 cycles a line)
    while the next layer's GEMMs stream: the next layer's first pixel tile is cut short enough not to read
    the rows still being written, so its first GEMM starts before that work ends (it used to wait for it)."""
    from hwc import isa

    # (a weight preload of one row a cycle: its costlier short GEMMs make the cost model pick pixel tiles of 4
    # rows, so the block's last tile leaves a long tail; with the bundled 4 rows a cycle the tiles are single
    # rows and the tail is one row's PPU and add)
    target = tile_variant(TARGETS["tile32x32"], wgt_read_rows=1)
    n = target["array"]["rows"]
    b = QBuilder(seed=5)
    x = b.input("x", (1, n, 16, 16), zp=0)
    y = b.conv(x, n, pads=[1, 1, 1, 1], relu=True)
    s = b.add(b.conv(y, n, pads=[1, 1, 1, 1]), y, relu=True)
    g = b.output(b.conv(s, n, stride=2, pads=[1, 1, 1, 1]))
    art, prog, res, layer = _timeline(g, target, [{"tiling": "cost", "loads": "eager", "im2col": False}])
    post = [k for k, i in enumerate(prog) if layer[k] == 1 and i.op in (isa.Op.PPU, isa.Op.VEC)]
    assert prog[post[-1]].op == isa.Op.VEC                        # the fused add ends the block
    nxt = [k for k, i in enumerate(prog) if layer[k] == 3 and i.op == isa.Op.GEMM]
    assert res.start[nxt[0]] < res.end[post[-1]] - 100, (res.start[nxt[0]], res.end[post[-1]])
    assert not prog[nxt[0]].wait & isa.Wait.POST


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_a_residual_add_rides_on_the_longer_branch(target):
    """[3x3 conv, 1x1 shortcut conv, add] is scheduled as [shortcut, 3x3 conv + add]: the add's VEC work
    (fused, tile by tile) overlaps the 3x3 conv's GEMMs instead of following the shortcut's one GEMM."""
    from hwc import isa

    n = TARGETS[target]["array"]["rows"]
    b = QBuilder(seed=6)
    x = b.input("x", (1, n, 12, 12), zp=2)
    y = b.conv(x, n, pads=[1, 1, 1, 1], relu=True)
    main = b.conv(y, 2 * n, pads=[1, 1, 1, 1])
    short = b.conv(y, 2 * n, k=1)
    g = b.output(b.add(main, short, relu=True))
    art, prog, res, layer = _timeline(g, TARGETS[target])
    vec_layers = {layer[k] for k, i in enumerate(prog) if i.op == isa.Op.VEC}
    assert len(vec_layers) == 1
    gemms = [k for k, i in enumerate(prog) if i.op == isa.Op.GEMM and layer[k] in vec_layers]
    assert len(gemms) >= 9 * 2, len(gemms)           # the 3x3 conv's GEMMs (9 taps x 2 output blocks)
    names = [r["name"] for r in art.report["layers"]]
    node = {nd.outputs[0]: nd.name for nd in g.nodes}
    assert names.index(node[short]) < names.index(node[main])


@pytest.mark.parametrize("target,c,size", [("tile32x32", 16, 12), ("tile32x32", 8, 12), ("tile8x8", 4, 16),
                                           ("tile32x32-v1", 16, 12)])
def test_shifted_stacking_is_exact_and_reads_fewer_blocks(target, c, size):
    """Two pixels per line (c channels on 2c lanes): a 3x3 convolution between tensors aligned alike reads
    three kernel-column blocks per output line, between alignments one pixel apart two. The scheduler
    shifts every other tensor (its producer writes the pad pixels of the edge lines as the zero point) and
    keeps the shift when the model says it is faster; residual operands share one alignment. (On tile8x8 a
    12x12 image no longer gains from it since PPU.lag > 1 made the unshifted tiles cheaper: 16x16 does.)"""
    from hwc import isa

    b = QBuilder(seed=c)
    x = b.input("x", (1, 2 * c, size, size), zp=3)
    y = b.conv(x, c, k=1, relu=True)
    z = b.conv(b.conv(y, c, pads=[1, 1, 1, 1], relu=True), c, pads=[1, 1, 1, 1])
    s = b.add(z, y, relu=True)
    g = b.output(b.conv(s, 2 * c, pads=[1, 1, 1, 1], stride=2))
    art = check_exact(g, TARGETS[target])
    choice = art.report["schedule"][0]
    assert choice["shift"], choice
    plain = build_tile(g, TARGETS[target], hdl=False, pin=[dict(choice, shift=False)])
    lines = [sum(i.get("n_outer") * i.get("n_inner") for i in isa.from_bytes(a.program) if i.op == isa.Op.GEMM)
             for a in (art, plain)]
    assert lines[0] < lines[1], lines
    assert art.report["cycles"] < plain.report["cycles"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 4, 8, 16]), st.integers(2, 6).map(lambda k: 2 * k), st.integers(3, 9),
       st.sampled_from([1, 2, 3, 5]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
       st.lists(st.integers(0, 2), min_size=4, max_size=4), st.booleans())
def test_shifted_stacking_chains(c, w, h, k, stride, dil, pads, residual):
    """Random thin chains on tile32x32, stacked, with and without shifted alignments: exact."""
    span = (k - 1) * dil + 1
    assume(span <= h + pads[0] + pads[2] and span <= w + pads[1] + pads[3])
    b = QBuilder(seed=c * 100 + w)
    x = b.input("x", (1, 2 * c, h, w), zp=-2)
    y = b.conv(x, c, k=1, relu=True)
    z = b.conv(y, c, k=k, pads=pads, dil=dil, relu=True)
    if residual and b.g.type(z).shape == b.g.type(y).shape:
        z = b.add(z, y, relu=True)
    z = b.conv(z, c, k=3, stride=stride, pads=[1, 1, 1, 1])
    g = b.output(b.conv(z, 3, k=1))
    choice = check_exact(g, TARGETS["tile32x32"]).report["schedule"][0]
    check_exact(g, TARGETS["tile32x32"], pin=[dict(choice, shift=not choice["shift"])])  # and the other way


def test_the_first_blocks_halo_is_filled_while_the_array_drains():
    """A pointwise layer of two output blocks feeding a padded depthwise layer: block 0's halo FILLs run
    while the array drains before the pointwise layer's last PPU (which writes block 1), so the depthwise
    layer's first GEMM (block 0) starts before that PPU ends instead of waiting behind it for the FILLs."""
    from hwc import isa

    target = TARGETS["tile32x32"]
    n = target["array"]["rows"]
    b = QBuilder(seed=12)
    x = b.input("x", (1, 2 * n, 25, 5), zp=1)
    y = b.conv(x, 2 * n, k=1, relu=True)
    g = b.output(b.conv(y, 2 * n, k=3, pads=[1, 1, 1, 1], group=2 * n))
    art, prog, res, layer = _timeline(g, target)
    last_ppu = max(k for k, i in enumerate(prog) if layer[k] == 0 and i.op == isa.Op.PPU)
    first = min(k for k, i in enumerate(prog) if layer[k] == 1 and i.op == isa.Op.GEMM)
    assert res.start[first] < res.end[last_ppu], (res.start[first], res.end[last_ppu])


def test_left_and_right_pads_share_a_column():
    """A tensor padded 1 on the left and right is stored with a row pitch of w + 1 lines: pixel (y, w), the right
    pad, is line (y + 1, -1), the next row's left pad (TileTensor.share_pad_column), plus one tail line per
    channel block for the last pad row's right pad. A right pad wider than the left one keeps its lines. Exact
    against the int8 reference; the memory map reports the pitch."""
    b = QBuilder(seed=12)
    x = b.input("x", (1, 16, 10, 7), zp=-5)
    y = b.conv(x, 16, k=1, relu=True)
    z = b.conv(y, 16, k=3, pads=[1, 1, 1, 1], group=16, relu=True)        # reads y: pads 1, 1, 1, 1
    u = b.conv(z, 16, k=3, stride=2, pads=[0, 0, 1, 1], group=16)          # reads z: no left pad
    check_exact(b.output(u), TARGETS["tile8x8"])
    from hwc.tile.build import schedule

    (plan, _, _), = schedule(b.g, TARGETS["tile8x8"])
    t_y, t_z = plan.tensors[y], plan.tensors[z]
    assert t_y.pads == [1, 1, 1, 0] and t_y.wp == 8 and t_y.tail == 1 and t_y.block_lines == 12 * 8 + 1
    # (3, 7) is (4, -1); the last pad row's right pad (10, 7) is the tail line, the next block follows it
    assert t_y.line(0, 3, 7) == t_y.line(0, 4, -1) and t_y.line(1, -1, -1) == t_y.line(0, 10, 7) + 1
    assert t_z.pads == [0, 0, 1, 1] and t_z.wp == 8 and t_z.tail == 0


def test_the_candidate_search_in_worker_processes_gives_the_same_programs(monkeypatch):
    """A big segment's candidates are generated and timed in forked workers (hwc.tile.build.search_jobs); the
    choices, programs and images must be those of the search in one process, and the winner still exact."""
    import hwc.tile.build as tb
    from hwc import isa

    b = QBuilder(seed=4)
    x = b.input("x", (1, 3, 16, 16), zp=-3)     # a thin first layer: with and without the host im2col
    y = b.conv(x, 16, relu=True)
    y = b.conv(y, 24, stride=2, relu=True)
    g = b.output(b.gap(b.conv(y, 8, k=1)))
    target = TARGETS["tile8x8"]
    here, programs = [], tb._programs
    monkeypatch.setattr(tb, "_programs", lambda *a, **k: here.append(a) or programs(*a, **k))

    def flat(segments):
        return [(isa.to_bytes(prog.program), bytes(prog.dram), prog.layers, choice) for _, prog, choice in segments]

    serial = schedule(g, target, jobs=1)
    assert len(here) == 2 * 3, "jobs=1: both im2col variants x three tiling policies, in this process"
    parallel = schedule(g, target, jobs=2)
    assert len(here) == 6, "jobs=2: the candidates ran in the workers"
    assert flat(parallel) == flat(serial)
    assert all(isinstance(i, isa.Insn) for i in parallel[0][1].program), "the winner's program is instructions"
    assert tb.search_jobs(1) == 1 and tb.search_jobs(3) == 3
    monkeypatch.setenv("HWC_JOBS", "1")
    assert tb.search_jobs() == 1
    check_exact(g, target)
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:   # a pool's worker is daemonic: it may not fork
        assert pool.apply(tb.search_jobs, (2,)) == 1
        assert pool.apply(_schedule_bytes, (g, target)) == flat(serial)
    monkeypatch.setenv("HWC_JOBS", "two")
    with pytest.raises(UserError, match="HWC_JOBS='two' is not a number of processes"):
        schedule(g, target)


def _schedule_bytes(g, target):
    from hwc import isa

    return [(isa.to_bytes(prog.program), bytes(prog.dram), prog.layers, choice)
            for _, prog, choice in schedule(g, target, jobs=2)]


@pytest.mark.parametrize("target", ["tile32x32", "tile8x8"])
@pytest.mark.parametrize("stride, k, pads", [(1, 3, [1, 1, 1, 1]), (2, 3, [0, 0, 1, 1]), (1, 5, [2, 2, 1, 2])])
def test_depthwise_over_stacked_pixels_runs_in_the_depthwise_mode(target, stride, k, pads):
    """A depthwise layer whose input holds two pixels a line (its producer's input was thin: `space_to_depth`)
    and whole channel blocks per pixel: every weight block is diagonal, so its GEMMs run in the depthwise
    mode over both input blocks instead of as dense blocks of zeros (MobileNetV1-0.25's third depthwise layer
    on tile32x32: 5,448 -> 1,767 cycles). Exact against the int8 reference."""
    from hwc import isa

    t = TARGETS[target]
    n = t["array"]["rows"]
    b = QBuilder(seed=stride + k)
    x = b.input("x", (1, n // 2, 9, 12), zp=3)        # n/2 channels: two pixels a line
    y = b.conv(x, n, k=1, relu=True)                  # n channels, stacked as its input
    g = b.output(b.conv(y, n, k=k, stride=stride, pads=pads, group=n))
    art = check_exact(g, t)
    stacked = {a["name"]: a["pixels_per_line"] for a in art.memory_map["act"]}
    assert max(stacked.values()) == 2, stacked
    gemms = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.GEMM]
    assert any(i.dw for i in gemms), "the depthwise layer streams in the depthwise mode"
    dense = sum(i.n_outer * i.n_inner for i in gemms if not i.dw)
    assert dense <= 2 * 9 * 6 * 2, "only the pointwise layer's GEMMs are dense (its 2 blocks x 54 lines x 2)"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["tile8x8", "tile32x32"]), st.sampled_from([1, 2]), st.integers(2, 6).map(lambda k: 2 * k),
       st.integers(3, 9), st.sampled_from([2, 3, 5]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
       st.lists(st.integers(0, 2), min_size=4, max_size=4), st.booleans())
@example("tile32x32", 1, 6, 5, 5, 2, 2, [2, 1, 2, 2], False)   # (a one-pixel-wide tensor: test below)
def test_depthwise_over_stacked_pixels_chains(target, blocks, w, h, k, stride, dil, pads, residual):
    """Random chains through depthwise layers over stacked pixels of whole channel blocks (1 or 2 per pixel):
    kernels, strides, dilations and pads drawn; both alignments; exact against the int8 reference."""
    t = TARGETS[target]
    n = t["array"]["rows"]
    span = (k - 1) * dil + 1
    assume(span <= h + pads[0] + pads[2] and span <= w + pads[1] + pads[3])
    b = QBuilder(seed=blocks * 1000 + w * 10 + k)
    x = b.input("x", (1, n // 2, h, w), zp=-2)                  # thin: two pixels a line
    y = b.conv(x, blocks * n, k=1, relu=True)
    z = b.conv(y, blocks * n, k=k, pads=pads, dil=dil, group=blocks * n, relu=True)
    if residual and b.g.type(z).shape == b.g.type(y).shape:
        z = b.add(z, y, relu=True)
    z = b.conv(z, blocks * n, k=3, stride=stride, pads=[1, 1, 1, 1], group=blocks * n)
    g = b.output(b.conv(z, 3, k=1))
    choice = check_exact(g, t).report["schedule"][0]
    check_exact(g, t, pin=[dict(choice, shift=not choice["shift"])])  # and the other alignment


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
@pytest.mark.parametrize("h,w,stride", [(1, 1, 2), (3, 1, 2), (2, 1, 1), (2, 2, 2)])
def test_depthwise_over_a_one_pixel_wide_input(target, h, w, stride):
    """A 3x3 depthwise layer over a tensor one pixel wide: its rows share their pad column, so the padded row pitch
    (2) is shorter than the kernel row and two taps are the same distance back. The "image" mode (all taps in one
    GEMM, a column per distance) gave wrong results there on tile32x32 (the cost model picked it); now it does not
    take such a kernel. Every tiling policy, exact against the int8 reference."""
    n = TARGETS[target]["array"]["rows"]
    b = QBuilder(seed=h * 10 + w)
    x = b.input("x", (1, n, h, w), zp=-2)
    z = b.conv(x, n, k=3, stride=stride, pads=[1, 1, 1, 1], group=n)
    g = b.output(b.conv(z, 3, k=1))
    for tiling in ("cost", "quarter", "max"):
        check_exact(g, TARGETS[target], pin=[dict(tiling=tiling, loads="eager", split=False, bus_groups=False,
                                                  shift=False, im2col=False)])


def _exact_timeline(g, target, pin: dict):
    """`check_exact` with one pinned choice, and the program's instructions and tile-model run (its timeline)."""
    from hwc.sim.model import TileModel

    from hwc import isa

    art = check_exact(g, target, pin=[pin])
    io = art.info["tile"]["segments"][0]
    res = TileModel(target).run(art.program, art.memory_image(), io["prog_offset"] // isa.INSN_BYTES)
    return art, isa.from_bytes(art.program), res


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_the_first_weight_group_loads_in_pieces(target):
    """`split` (Codegen.finalize): the first weight group's blocks load in pieces in the order its GEMMs first
    read them, each piece before its first GEMM: the first LOAD holds only the first GEMM's block, each GEMM
    issues only after the piece holding its blocks is in, and the weight loads hide more (the first GEMM starts
    earlier). The results equal the int8 reference's either way."""

    from hwc import isa

    t = TARGETS[target]
    n = t["array"]["rows"]
    b = QBuilder(seed=31)
    x = b.input("x", (1, 3 * n, 10, 10), zp=1)
    y = b.conv(x, 2 * n, k=1, pads=[0, 0, 0, 0], relu=True)      # 2 x 3 blocks, each read by its own GEMMs
    g = b.output(b.conv(y, n, k=1, pads=[0, 0, 0, 0]))
    pin = {"tiling": "cost", "loads": "eager", "im2col": False, "shift": False}
    runs = {}
    for split in (False, True):
        art, prog, res = _exact_timeline(g, t, dict(pin, split=split))
        assert art.report["schedule"][0]["split"] is split
        runs[split] = (prog, res, art.report)
    prog, res, _ = runs[True]
    wl = [k for k, i in enumerate(prog) if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT]
    gemms = [k for k, i in enumerate(prog) if i.op == isa.Op.GEMM]
    unsplit = [i for i in runs[False][0] if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT]
    first_group = unsplit[0].get("row_beats") // n
    assert first_group >= 3
    sizes, total = [], 0
    for k in wl:
        if total < first_group:
            sizes.append(prog[k].get("row_beats") // n)
            total += sizes[-1]
    assert total == first_group and sizes[:2] == [1, 2], sizes     # 1 block, 2, 4, ..., the rest
    assert all(b >= 2 * a for a, b in zip(sizes, sizes[1:-1])), sizes
    for k in gemms[:first_group]:
        w = prog[k].get("wblk") * n    # (its first weight line; the LOAD that wrote it last before it)
        load = max(j for j in wl if j < k and prog[j].get("sram") <= w < prog[j].get("sram") + prog[j].get("row_beats"))
        assert res.issue[k] >= res.end[load], "a GEMM issued before its weights were in"
    assert res.issue[gemms[0]] < runs[False][1].issue[[k for k, i in enumerate(runs[False][0])
                                                       if i.op == isa.Op.GEMM][0]]
    assert runs[True][2]["weight_load_hidden"] > runs[False][2]["weight_load_hidden"]


def test_pick_prefers_the_smaller_program_unless_both_are_about_as_small():
    """`_pick`: among candidates within SAME_SPEED of the fastest, the smallest program, except that programs
    within SAME_SIZE of the smallest count as equally small and the fastest of those is kept."""
    from types import SimpleNamespace

    from hwc.tile.build import SAME_SIZE, SAME_SPEED, _pick

    x = SimpleNamespace(cb=1, h=4, w=4)

    def cand(cycles, insns, name, viewed=False):   # (one input: written by the host, or read in place)
        return (cycles, SimpleNamespace(inputs=["x"], tensors={"x": x}),
                SimpleNamespace(program=[0] * insns, views={"x": ()} if viewed else {}), name)

    assert SAME_SPEED == SAME_SIZE == 0.01
    assert _pick([cand(1000, 600, "a"), cand(1009, 100, "b")])[3] == "b"        # 0.9% slower, 6x smaller
    assert _pick([cand(1000, 101, "a"), cand(1009, 100, "b")])[3] == "a"        # 1% larger: as small
    assert _pick([cand(1000, 102, "a"), cand(1009, 100, "b")])[3] == "b"        # 2% larger
    assert _pick([cand(1000, 600, "a"), cand(1011, 100, "b")])[3] == "a"        # 1.1% slower
    # as fast, fewer bytes the host writes (an input read where an earlier segment stored it) before smaller
    assert _pick([cand(1000, 100, "a"), cand(1009, 600, "b", viewed=True)])[3] == "b"
    assert _pick([cand(1000, 100, "a"), cand(1011, 600, "b", viewed=True)])[3] == "a"   # 1.1% slower


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_after_the_first_group_the_shorter_load_goes_first(target):
    """The two LOADs that follow the first weight group (the params' first part, the second group's weights) go
    shorter first (`Codegen.finalize`): on DS-CNN tile32x32 the second group's 64 beats go before 200 beats of
    params, on tile8x8 80 beats of params before the second group's 192. The results equal the int8 reference's."""
    from hwc import isa
    from hwc.frontend import import_onnx
    from hwc.quant.build import quantize_model
    from hwc.zoo import MODELS, random_inputs

    t = TARGETS[target]
    model = MODELS["ds_cnn"]()
    g = quantize_model(import_onnx(model), t, random_inputs(model, n=4, seed=3))
    art = build_tile(g, t, hdl=False, pin=[{"tiling": "quarter", "loads": "eager", "im2col": True, "shift": False,
                                            "split": False}])
    feeds = {k: v[:1] for k, v in random_inputs(model, n=1, seed=9).items()}
    np.testing.assert_array_equal(art.run(feeds, engine="model")[g.outputs[0]],
                                  art.run(feeds, engine="reference")[g.outputs[0]])
    prog = isa.from_bytes(art.program)
    loads = [i for i in prog if i.op == isa.Op.LOAD and i.get("mem") in (isa.Mem.WGT, isa.Mem.PARAM)]
    beats = [(i.get("mem"), i.get("rows") * i.get("row_beats")) for i in loads]
    assert beats[0][0] == isa.Mem.WGT
    follow = beats[1:3]    # the first group's followers
    assert {m for m, _ in follow} == {isa.Mem.WGT, isa.Mem.PARAM}, beats[:4]
    assert follow[0][1] <= follow[1][1], follow


def _two_convs(t, width, seed):
    """Two 3x3 convolutions of 8 channels over 12 x `width` pixels in quarter pixel tiles, checked exactly: the
    program and each instruction's layer."""
    from hwc import isa

    b = QBuilder(seed=seed)
    x = b.input("x", (1, 8, 12, width), zp=1)
    y = b.conv(x, 8, pads=[1, 1, 1, 1], relu=True)
    g = b.output(b.conv(y, 8, pads=[1, 1, 1, 1]))
    pin = [{"tiling": "quarter", "loads": "eager", "im2col": False, "shift": False, "split": False}]
    art = check_exact(g, t, pin=pin)
    (_, tp, _), = schedule(g, t, pin=pin)
    assert isa.to_bytes(tp.program) == art.program
    return isa.from_bytes(art.program), tp.insn_layer


@pytest.mark.parametrize("acc_lines, slots", [(2048, 3), (128, 2)])
def test_pixel_tiles_take_three_accumulator_slots_when_rows_fit(acc_lines, slots):
    """v2 (Codegen.acc_slots): consecutive pixel tiles take the accumulator slots in turn, three when every output row
    fits a third of the accumulators, else two; with three no tile's first GEMM waits for POST (the PPU that read its
    slot has finished once the PPU after it has issued), with two it does. Exact against the int8 reference."""
    from hwc.targets.tile_schema import validate_tile

    from hwc import isa

    base = TARGETS["tile8x8"]
    doc = {k: v for k, v in base.items() if k != "derived"}
    doc["scratchpad"] = dict(base["scratchpad"], acc_lines=acc_lines)
    t = validate_tile(doc, "test")
    prog, layer = _two_convs(t, 48, seed=33)          # rows of 48 pixels: more than 128 // 3 accumulator lines
    firsts = [i for k, i in enumerate(prog) if i.op == isa.Op.GEMM and i.get("reset") and layer[k] == 0]
    assert len(firsts) >= 4
    assert sorted({i.get("acc") for i in firsts}) == [k * (acc_lines // slots) for k in range(slots)]
    # (the program's first GEMM waits for the input's halo FILLs on POST)
    post_waits = [k for k, i in enumerate(firsts[1:]) if int(i.wait) & isa.Wait.POST]
    assert (post_waits == []) == (slots == 3), post_waits


def test_a_layers_last_ppu_lags_into_the_next_layer():
    """With three accumulator slots (Codegen._lag_across) a layer's last PPU is emitted behind the next convolution's
    first GEMMs, with PPU.lag = their count, none of which reads the rows it writes; the first GEMM that does waits for
    POST (or for a later POST instruction to issue). Exact against the int8 reference."""
    from hwc import isa

    prog, layer = _two_convs(TARGETS["tile8x8"], 16, seed=35)
    last_ppu = max(k for k, i in enumerate(prog) if i.op == isa.Op.PPU and layer[k] == 0)
    before = [k for k in range(last_ppu) if prog[k].op == isa.Op.GEMM and layer[k] == 1]
    assert 1 <= len(before) <= isa.PPU_MAX_LAG and prog[last_ppu].get("lag") == len(before)


    def lines(i, base, so, si):
        return {i.get(base) + a * i.get(so) + c * i.get(si) for a in range(i.get("n_outer"))
                for c in range(i.get("n_inner"))}

    written = lines(prog[last_ppu], "out", "out_so", "out_si")
    assert all(not lines(prog[k], "act", "act_so", "act_si") & written for k in before)
    readers = [k for k in range(last_ppu, len(prog)) if prog[k].op == isa.Op.GEMM and layer[k] == 1
               and lines(prog[k], "act", "act_so", "act_si") & written]
    # the first GEMM reading those rows waits for POST, or another POST instruction issues between them (POST runs
    # one at a time: when it issues, that PPU has finished)
    r = readers[0]
    posts = [k for k in range(last_ppu + 1, r) if prog[k].op in (isa.Op.PPU, isa.Op.VEC, isa.Op.FILL)]
    assert int(prog[r].wait) & isa.Wait.POST or posts, (r, posts)


def test_depthwise_over_rows_streams_a_row_more_rather_than_a_one_line_gemm(monkeypatch):
    """"pitch+": with the left and right pads in one column, a "pitch" GEMM starts a line late (it ends at the last
    output's last tap) and a one-line GEMM adds the tap (0, 0) of the tile's first output, ~10 cycles on tile32x32
    for a line. On DS-CNN's 25x5 maps (a 6-line pitch) the GEMM starts on time and streams one padded row more:
    no one-line GEMMs, fewer cycles than without "pitch+". Exact against the int8 reference."""
    from hwc import isa
    from hwc.tile.codegen import Codegen

    c, h, w = 64, 25, 5
    b = QBuilder(seed=41)
    x = b.input("x", (1, c, h, w), zp=3)
    y = b.conv(x, c, k=1, relu=True)
    g = b.output(b.conv(b.conv(y, c, k=3, pads=[1, 1, 1, 1], group=c, relu=True), c, k=1))
    t = TARGETS["tile32x32"]
    art = check_exact(g, t)
    prog = isa.from_bytes(art.program)
    wp = w + 1
    dwp = [i for i in prog if i.op == isa.Op.GEMM and i.get("dwp")]
    assert dwp and all(i.get("n_inner") == wp for i in dwp)
    # a tile of r output rows streams r + 3 padded rows (r + 2 with "pitch"), over both channel blocks
    assert sum(i.get("n_outer") - 3 for i in dwp) == 2 * h, [i.get("n_outer") for i in dwp]
    ones = [i for i in prog if i.op == isa.Op.GEMM and i.get("n_outer") * i.get("n_inner") == 1]
    assert not ones, "no one-line GEMMs"
    monkeypatch.setattr(Codegen, "DW_MODES", tuple(m for m in Codegen.DW_MODES if m != "pitch+"))
    before = check_exact(g, t)
    old = isa.from_bytes(before.program)
    assert [i for i in old if i.op == isa.Op.GEMM and i.get("n_outer") * i.get("n_inner") == 1], \
        "without it the one-line GEMMs are back"
    assert art.report["cycles"] < before.report["cycles"], (art.report["cycles"], before.report["cycles"])


def test_a_tile_of_one_long_gemm_lags_its_ppu(monkeypatch):
    """PPU.lag behind a pixel tile of a single GEMM (Codegen._lags): when that GEMM streams at least `_lag_cover`
    cycles, the PPU of the tile before goes behind it instead of draining the array at every tile (MobileNetV1-0.25's
    thin pointwise layers on tile32x32). Every PPU but the layer's last lags; fewer cycles than without; exact."""
    from hwc import isa
    from hwc.tile.codegen import Codegen

    b = QBuilder(seed=43)
    x = b.input("x", (1, 8, 40, 40), zp=1)
    g = b.output(b.conv(b.conv(x, 8, k=1, relu=True), 8, k=1))
    t = TARGETS["tile8x8"]
    pin = [{"tiling": "quarter", "loads": "eager", "im2col": False, "shift": False, "split": False}]
    art = check_exact(g, t, pin=pin)
    (_, tp, _), = schedule(g, t, pin=pin)
    prog, layer = tp.program, tp.insn_layer
    gemms = [k for k, i in enumerate(prog) if i.op == isa.Op.GEMM and layer[k] == 0]
    ppus = [k for k, i in enumerate(prog) if i.op == isa.Op.PPU and layer[k] == 0]
    assert len(gemms) == len(ppus) >= 4, "one GEMM a pixel tile"
    assert all(prog[k].get("n_outer") * prog[k].get("n_inner") >= 24 for k in gemms)
    assert all(prog[k].get("lag") == 1 for k in ppus[:-1]), [prog[k].get("lag") for k in ppus]
    monkeypatch.setattr(Codegen, "_lags", lambda self, layer, mode, taps, rows: self.lag_ppu and len(taps) >= 2)
    before = check_exact(g, t, pin=pin)
    assert art.report["cycles"] < before.report["cycles"], (art.report["cycles"], before.report["cycles"])


def test_a_post_bound_layers_halo_fills_go_before_its_last_ppus(monkeypatch):
    """When POST has no room between a layer's GEMMs for its output halo FILLs (Codegen._own_fills), they go before
    the PPU of its second-to-last pixel tile, not after it: the next layer's first GEMM, which reads the halo, then
    needs no POST wait behind that PPU. Fewer cycles than without; exact against the int8 reference."""
    from hwc import isa
    from hwc.tile.codegen import Codegen

    b = QBuilder(seed=5)
    x = b.input("x", (1, 16, 24, 24), zp=1)
    y = b.conv(x, 32, k=1, relu=True)
    g = b.output(b.conv(b.conv(y, 32, k=3, pads=[1, 1, 1, 1], group=32, relu=True), 64, k=1))
    t = TARGETS["tile32x32"]
    pin = [{"tiling": "quarter", "loads": "paced", "im2col": False, "shift": False, "split": False}]
    runs = []
    for off in (False, True):
        if off:
            monkeypatch.setattr(Codegen, "_own_fills", lambda self, g: None)
        art = check_exact(g, t, pin=pin)
        (_, tp, _), = schedule(g, t, pin=pin)
        first = next(i for k, i in enumerate(tp.program) if i.op == isa.Op.GEMM and tp.insn_layer[k] == 1)
        runs.append((art.report["cycles"], bool(int(first.wait) & isa.Wait.POST)))
    assert runs[0][1] is False and runs[1][1] is True, runs
    assert runs[0][0] < runs[1][0], runs


@pytest.mark.parametrize("c, m, h, w, k, stride, pads, shift", [
    (3, 8, 24, 24, 3, 2, [1, 1, 1, 1], True), (3, 8, 24, 24, 3, 2, [0, 0, 1, 1], False),
    (3, 16, 12, 16, 3, 1, [1, 1, 1, 1], True), (2, 8, 9, 20, 5, 2, [2, 1, 2, 2], False),
    (4, 8, 10, 8, 3, 2, [1, 1, 1, 1], False)])
def test_the_host_builds_a_thin_first_layers_rows_into_stacked_outputs(c, m, h, w, k, stride, pads, shift):
    """im2row (layers.im2row_first_layer): a thin first layer whose output is stacked f pixels a line runs as a
    (k x 1) convolution over host-built windows of stride*(f-1) + k pixels, k lines per output line and block, exact
    against the int8 reference (shifted and unshifted outputs, strides 1 and 2, asymmetric pads); on MobileNet's
    shape (3 channels, 3x3, stride 2, 8 outputs) faster than the host im2col. A window wider than a line (4
    channels x 9 pixels) is not rewritten: the pinned choice falls back, still exact."""
    from hwc import isa

    b = QBuilder(seed=c + m + h)
    x = b.input("x", (1, c, h, w), zp=5)
    y = b.conv(x, m, k=k, stride=stride, pads=pads, relu=True)
    g = b.output(b.conv(y, m, k=3, pads=[1, 1, 1, 1]))
    t = TARGETS["tile32x32"]
    pin = [{"tiling": "quarter", "loads": "eager", "im2col": "rows", "shift": shift, "split": False}]
    art = check_exact(g, t, pin=pin, seed=1)
    if c * (stride * 3 + k) > 32:   # (f = 4 at least: 8 channels stacked into 32 lanes)
        assert art.report["schedule"][0]["im2col"] is False
        return
    assert art.report["schedule"][0]["im2col"] == "rows"
    (plan, tp, _), = schedule(g, t, pin=pin)
    dst = plan.tensors[plan.layers[0].dst]
    f, src = dst.s2d, plan.tensors[plan.inputs[0]]
    assert f > 1 and src.c == c * (stride * (f - 1) + k) and src.s2d == 1
    gemms = [i for j, i in enumerate(tp.program) if i.op == isa.Op.GEMM and tp.insn_layer[j] == 0]
    assert sum(i.get("n_outer") * i.get("n_inner") for i in gemms) == k * dst.cb * dst.h * dst.w, \
        "k lines per output line and channel block"
    if (c, m, k, stride) == (3, 8, 3, 2):
        other = check_exact(g, t, pin=[dict(pin[0], im2col=True)], seed=1)
        assert art.report["cycles"] < other.report["cycles"], (art.report["cycles"], other.report["cycles"])


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.sampled_from([2, 4, 8]), st.integers(2, 8).map(lambda k: 2 * k), st.integers(3, 11),
       st.sampled_from([1, 2, 3]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
       st.lists(st.integers(0, 2), min_size=4, max_size=4), st.booleans(), st.sampled_from(["tile8x8", "tile32x32"]))
def test_im2row_shapes(c, m, w, h, k, stride, dil, pads, shift, target):
    """im2row on random thin first layers (channels, outputs, kernel, stride, dilation, pads, shifted or not, both
    tiles; the window must fit a line and the output be stacked, else the pinned choice falls back: about a quarter of
    the cases run by rows): exact against the int8 reference."""
    span = (k - 1) * dil + 1
    b = QBuilder(seed=c * 100 + m + w)
    x = b.input("x", (1, c, h + span, w + span), zp=-9)
    y = b.conv(x, m, k=k, stride=stride, pads=pads, dil=dil, relu=True)
    g = b.output(b.conv(y, 5, k=3, pads=[1, 1, 1, 1]))
    pin = [{"tiling": "quarter", "loads": "eager", "im2col": "rows", "shift": shift, "split": False}]
    art = check_exact(g, TARGETS[target], pin=pin, seed=c + k)
    assert art.report["schedule"][0]["im2col"] in ("rows", False)


def test_a_ppu_gets_its_params_before_the_next_chunk_its_tile_does_not_read(monkeypatch):
    """LOAD placement (hwc.tile.place, `_needs_first`): the next input chunk or weight piece loads one ahead of
    its first reader, but when a PPU whose params are not in yet comes before that reader, the params load first
    (behind the chunk they held the PPU, and the in-order issue behind it). DS-CNN on tile8x8: fewer cycles than
    without; exact against the int8 reference."""
    from hwc.frontend import import_onnx
    from hwc.quant.build import quantize_model
    from hwc.tile import place
    from hwc.zoo import MODELS, random_inputs

    t = TARGETS["tile8x8"]
    model = MODELS["ds_cnn"]()
    g = quantize_model(import_onnx(model), t, random_inputs(model, n=8, seed=3))
    pin = [{"tiling": "cost", "loads": "paced", "im2col": True, "shift": False, "split": True}]
    feeds = {k: v[0] for k, v in random_inputs(model, n=1, seed=9).items()}
    cycles = []
    for off in (False, True):
        if off:
            monkeypatch.setattr(place, "_needs_first", lambda *a: False)
        art = build_tile(g, t, hdl=False, pin=pin)
        got, want = art.run(feeds, engine="model"), art.run(feeds, engine="reference")
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
        cycles.append(art.report["cycles"])
    assert cycles[0] < cycles[1], cycles


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_bus_bound_weight_groups_grow(target):
    """`bus_groups` (Codegen.weighted): behind a weight group whose load outlasts its compute (FC layers at batch
    1: each weight block serves one line), groups grow to the bank instead of matching that short compute,
    so fewer LOADs pay their fixed cost. Fewer weight LOADs, fewer cycles, the search picks it, and the outputs
    equal the int8 reference's either way. (On a small chain it can be slower: the search then keeps the
    small groups.)"""
    from hwc import isa
    t = TARGETS[target]
    b = QBuilder(seed=47)
    x = b.input("x", (1, 640), zp=3)    # shaped like the FC autoencoder (hwc.zoo.fc_autoencoder)
    for m in (128, 128, 128, 128, 8, 128, 128, 128, 128, 640):
        x = b.gemm(x, m)
    g = b.output(x)
    pin = {"tiling": "cost", "loads": "eager", "im2col": False, "shift": False, "split": False}
    runs = {}
    for bus in (False, True):
        art = check_exact(g, t, pin=[dict(pin, bus_groups=bus)])
        assert art.report["schedule"][0]["bus_groups"] is bus
        loads = [i.get("rows") * i.get("row_beats") for i in isa.from_bytes(art.program)
                 if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT]
        runs[bus] = art.report["cycles"], loads
    (slow, few), (fast, grown) = runs[False], runs[True]
    assert len(grown) < len(few) and sum(grown) == sum(few)
    bank = t["scratchpad"]["wgt_bank_blocks"] * t["array"]["rows"]    # beats (a block: N beats of N bytes)
    assert max(few) < max(grown) <= bank
    assert fast < slow, runs
    assert check_exact(g, t).report["schedule"][0]["bus_groups"] is True


@pytest.mark.parametrize("target,c,m,h,w,layers,stride,pads", [
    ("tile8x8", 8, 16, 5, 5, 1, 1, [1] * 4), ("tile8x8", 24, 24, 5, 5, 2, 1, [1] * 4),
    ("tile8x8", 3, 20, 7, 3, 1, 1, [1] * 4), ("tile32x32", 16, 64, 25, 5, 2, 1, [1] * 4),
    ("tile32x32", 32, 40, 6, 6, 1, 1, [1] * 4), ("tile8x8", 8, 16, 7, 6, 2, 2, [1] * 4),
    ("tile8x8", 8, 16, 8, 7, 1, 2, [0, 0, 1, 1]), ("tile32x32", 32, 64, 12, 12, 2, 2, [0, 0, 1, 1])])
def test_depthwise_in_the_post_processing(target, c, m, h, w, layers, stride, pads):
    """features.dw_post: a convolution followed by a 3x3 stride-1 depthwise layer (its only reader) runs as one
    layer, whose PPU.dw computes the depthwise layer from the requantized output (docs/tile-v2.md, "Depthwise in
    the post-processing"): exact against the int8 reference, one PPU.dw per output block and layer, no depthwise
    GEMM, and fewer cycles than the same target without the stage (the depthwise layers on the array). Stride 2
    (PPU.dws) with one pixel of padding all round, or TensorFlow's "same" padding of an even size (bottom and right
    only): every other stride-1 output, from the first or the second."""
    from hwc import isa

    b = QBuilder(seed=c + m + h)
    y = b.input("x", (1, c, h, w), zp=3)
    for k in range(layers):
        y = b.conv(y, m, k=1, relu=True)
        y = b.conv(y, m, k=3, stride=stride if k == layers - 1 else 1,
                   pads=pads if k == layers - 1 else [1, 1, 1, 1], group=m, relu=k % 2 == 0)
    g = b.output(y)
    with_stage = tile_variant(TARGETS[target], dw_post=True)
    art = check_exact(g, with_stage)
    prog = isa.from_bytes(art.program)
    n = with_stage["array"]["rows"]
    assert sum(1 for i in prog if i.op == isa.Op.PPU and i.get("dw")) == layers * -(-m // n)
    assert {i.get("dws") for i in prog if i.op == isa.Op.PPU and i.get("dw")} >= {0 if stride == 1 else
                                                                                   2 + (pads[0] == 0)}
    assert not any(i.get("dw") for i in prog if i.op == isa.Op.GEMM)
    assert art.report["macs"] == sum(layer["macs"] for layer in art.report["layers"]), "the fused layers' MACs"
    without = check_exact(g, TARGETS[target])
    assert art.report["cycles"] < without.report["cycles"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({
    "c": st.integers(1, 40), "m": st.integers(1, 70), "h": st.integers(1, 12), "w": st.integers(3, 14),
    "k": st.sampled_from([1, 3]), "relu": st.booleans(), "zp": st.integers(-30, 30),
    "dw": st.sampled_from([(1, (1, 1, 1, 1)), (2, (1, 1, 1, 1)), (2, (0, 0, 1, 1))]),
    "target": st.sampled_from(["tile8x8", "tile32x32"])}))
@example({"c": 1, "m": 16, "h": 1, "w": 10, "k": 1, "relu": False, "zp": 0, "dw": (1, (1, 1, 1, 1)),
          "target": "tile32x32"})   # (16 channels stacked two pixels a line: PPU.dwf = 1)
@example({"c": 9, "m": 1, "h": 10, "w": 9, "k": 1, "relu": False, "zp": 0, "dw": (1, (1, 1, 1, 1)),
          "target": "tile8x8"})   # (two row bands, PPU.dwc)
def test_depthwise_in_the_post_processing_any_shape(case):
    """PPU.dw on shapes hypothesis picks: a convolution (1x1 or 3x3, any channel counts, channel counts not
    multiples of N), then a 3x3 depthwise layer (stride 1, or 2 in both paddings PPU.dws takes) and a convolution
    that reads it: exact against the int8
    reference, and fused wherever the rules of `Codegen._fusable_dws` hold (the pitch w + 1 within 4 .. the row
    buffers, the image in an accumulator slot; a thin tensor stacked 2**dwf pixels a line, PPU.dwf)."""
    from hwc import isa

    b = QBuilder(seed=case["c"] * 1000 + case["m"] * 10 + case["h"])
    x = b.input("x", (1, case["c"], case["h"], case["w"]), zp=case["zp"])
    y = b.conv(x, case["m"], k=case["k"], relu=case["relu"])
    stride, pads = case["dw"]
    assume(pads[0] or case["h"] > 1)   # (one row padded below only: no stride-2 output)
    d = b.conv(y, case["m"], k=3, stride=stride, pads=list(pads), group=case["m"], relu=not case["relu"])
    g = b.output(b.conv(d, 5, k=1))
    art = check_exact(g, tile_variant(TARGETS[case["target"]], dw_post=True))
    fused = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("dw")]
    if fused:
        # (whole rows, 2**dwf pixels a line: a thin tensor stays stacked, PPU.dwf; the whole image a tile, or row
        # bands whose PPU.dws read the rows beside them as context, PPU.dwc: `Codegen._dw_bands`)
        assert all((i.get("n_outer") == case["h"] or i.get("dwc")) and i.get("n_inner") == -(-case["w"] >> i.get("dwf"))
                   for i in fused)
        if stride == 1:   # (every output row written once)
            blocks = len({i.get("out") for i in fused if not i.get("dwc") & 1})
            assert sum(len(isa.ppu_dw_rows(i.get("n_outer"), 0, i.get("dwc"))) for i in fused) == case["h"] * blocks


@pytest.mark.parametrize("target,c,h,w", [("tile32x32", 16, 8, 10), ("tile8x8", 4, 6, 8), ("tile32x32", 16, 7, 12)])
def test_depthwise_in_the_post_processing_of_stacked_pixels(target, c, h, w):
    """MobileNet's 24x24 stretch on tile32x32: a thin input stacked two pixels a line (c = N/2 channels) makes the
    N-channel 1x1 convolution after it write two pixels a line too (two output blocks, one per pixel). Laid out for
    PPU.dw (`layers.dw_post_flat`), its GEMMs write pixel 2X + b of block b to accumulator line 2X + b, and one
    PPU.dw reads the row unstacked: both depthwise layers (stride 1, then 2) fused, exact against the int8
    reference, faster than the default stacking (pinned), which fuses neither."""
    from hwc import isa

    t = tile_variant(TARGETS[target], dw_post=True)
    n = t["array"]["rows"]
    b = QBuilder(seed=c + h)
    x = b.input("x", (1, c, h, w), zp=-5)
    y = b.conv(x, c, k=3, group=c, relu=True)      # (stacked: c channels, two pixels a line)
    y = b.conv(y, n, k=1, relu=True)
    y = b.conv(y, n, k=3, group=n, relu=True)
    y = b.conv(y, n, k=1, relu=True)
    y = b.conv(y, n, k=3, stride=2, group=n, relu=True)
    g = b.output(b.conv(y, 2 * n, k=1))
    art = check_exact(g, t)
    choice = art.report["schedule"][0]
    assert choice["flat"] is True
    prog = isa.from_bytes(art.program)
    fused = [i for i in prog if i.op == isa.Op.PPU and i.get("dw")]
    assert len(fused) == 2 and {i.get("n_inner") for i in fused} == {w}
    assert any(i.get("acc_si") == 2 for i in prog if i.op == isa.Op.GEMM), "a stacked output written unstacked"
    stacked = check_exact(g, t, pin=[dict(choice, flat=False)])
    assert stacked.report["cycles"] > art.report["cycles"]
    assert not any(i.get("dw") for i in isa.from_bytes(stacked.program) if i.op == isa.Op.PPU)


@pytest.mark.parametrize("target,c,h,w,stride,pads", [
    ("tile32x32", 32, 36, 30, 1, [1] * 4), ("tile32x32", 32, 35, 30, 2, [1] * 4),
    ("tile32x32", 40, 34, 29, 2, [0, 0, 1, 1]), ("tile8x8", 8, 40, 30, 1, [1] * 4),
    ("tile8x8", 8, 41, 25, 2, [1] * 4)])
def test_depthwise_in_the_post_processing_in_row_bands(target, c, h, w, stride, pads):
    """An image taller than an accumulator slot holds: PPU.dw in row bands (Codegen._dw_bands), each band's tile
    with the rows around it as context rows (PPU.dwc: bit 0 the first row, bit 1 the last), computed again and
    only read. Exact against the int8 reference; the bands write every output row once, in order; a band after
    the first starts at an odd row with stride 2 (its tile at an even one)."""
    from hwc import isa

    t = tile_variant(TARGETS[target], dw_post=True)
    b = QBuilder(seed=h + w)
    x = b.input("x", (1, c, h, w), zp=7)
    y = b.conv(x, c, k=1, relu=True)
    y = b.conv(y, c, k=3, stride=stride, pads=pads, group=c, relu=True)
    g = b.output(b.conv(y, 3, k=1))
    art = check_exact(g, t)
    fused = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("dw")]
    n = t["array"]["rows"]
    blocks = -(-c // n)
    assert len(fused) >= 2 * blocks and len(fused) % blocks == 0
    per_block = fused[:len(fused) // blocks]
    assert [i.get("dwc") for i in per_block] == [2] + [3] * (len(per_block) - 2) + [1]
    out_h = (h + pads[0] + pads[2] - 3) // stride + 1
    rows = [isa.ppu_out_dims(i.get("n_outer"), i.get("n_inner"), i.get("dws"), i.get("dwc"))[0] for i in per_block]
    assert sum(rows) == out_h
    starts = [i.get("out") for i in per_block]
    pitch = per_block[0].get("out_so")
    assert [(s - starts[0]) // pitch for s in starts] == [sum(rows[:k]) for k in range(len(rows))]
    assert max(i.get("n_outer") * w for i in fused) <= t["scratchpad"]["acc_lines"] // 2


@pytest.mark.parametrize("target,c,h,w", [("tile32x32", 8, 9, 12), ("tile8x8", 4, 7, 10), ("tile8x8", 2, 6, 16)])
def test_depthwise_in_the_post_processing_of_thin_stacked_pixels(target, c, h, w):
    """MobileNet's 48x48 stretch on tile32x32: thin tensors (c = N/4, N/2 channels) stacked several pixels a line.
    A stride-1 depthwise layer over them runs in PPU.dw with PPU.dwf (the window's neighbours c lanes away, across
    into the lines beside), reading and writing the stacked lines; a stride-2 one after a thin layer, padded to N
    channels (`layers.space_to_depth(padded=...)`: one pixel per output block, written one pixel per accumulator
    line); or ("pairs", c = N/4) that input stacked too, its conv's blocks of two pixels written in pixel order and
    read two pixels a line (PPU.dwf = 1 at stride 2). Exact against the int8 reference; all three depthwise layers
    fused, faster than without the layouts."""
    from hwc import isa

    t = tile_variant(TARGETS[target], dw_post=True)
    n = t["array"]["rows"]
    b = QBuilder(seed=c + h + w)
    x = b.input("x", (1, c, h, w), zp=3)
    y = b.conv(x, c, k=1, relu=True)
    y = b.conv(y, c, k=3, group=c, relu=True)                    # stacked N / c pixels a line: PPU.dwf
    y = b.conv(y, 2 * c, k=1, relu=True)
    y = b.conv(y, 2 * c, k=3, stride=2, group=2 * c, relu=True)  # stride 2, thin: padded to N channels
    y = b.conv(y, n, k=1, relu=True)
    y = b.conv(y, n, k=3, group=n)
    g = b.output(b.conv(y, 3, k=1))
    best = check_exact(g, t)   # (the search's pick; on small images all of them one pixel a line may win)
    choice = best.report["schedule"][0]
    art = check_exact(g, t, pin=[dict(choice, flat="blocks")])
    fused = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("dw")]
    assert {i.get("dwf") for i in fused} >= {(n // c).bit_length() - 1}
    assert {(i.get("dws"), i.get("dwf") > 0) for i in fused} == {(0, True), (2, False), (0, False)}
    assert sum(1 for layer in art.report["layers"] if layer.get("dw_post")) == 3
    plain = check_exact(g, t, pin=[dict(choice, flat=False)])
    assert plain.report["cycles"] > art.report["cycles"] >= best.report["cycles"]
    if 4 * c == n:   # the stride-2 layer's input of N/2 channels: also stacked, read two pixels a line ("pairs")
        pairs = check_exact(g, t, pin=[dict(choice, flat="pairs")])
        fused = [i for i in isa.from_bytes(pairs.program) if i.op == isa.Op.PPU and i.get("dw")]
        assert any(i.get("dws") == 2 and i.get("dwf") == 1 for i in fused)
        assert sum(1 for layer in pairs.report["layers"] if layer.get("dw_post")) == 3
        assert pairs.report["cycles"] >= best.report["cycles"]


@pytest.mark.parametrize("w", [64, 100, 126])
def test_depthwise_in_the_post_processing_of_pairs_wider_than_the_row_buffers(w):
    """MobileNet at 128x128 on tile32x32: a stride-2 depthwise layer of N/2 channels over rows of 64 pixels and
    more, whose padded row exceeds the 64-line row buffers one pixel a position, but not two ("pairs": blocks of
    two pixels, PPU.dwf = 1; `layers.dw_post_flat` offers it only so). Fused, exact; the search picks it."""
    from hwc import isa

    t = tile_variant(TARGETS["tile32x32"], dw_post=True)
    n = t["array"]["rows"]
    b = QBuilder(seed=w)
    x = b.input("x", (1, n // 2, 6, w), zp=-2)
    y = b.conv(x, n // 2, k=1, relu=True)
    y = b.conv(y, n // 2, k=3, stride=2, group=n // 2, relu=True)
    g = b.output(b.conv(y, n, k=1))
    art = check_exact(g, t)
    assert art.report["schedule"][0]["flat"] == "pairs"
    fused = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU and i.get("dw")]
    assert fused and all(i.get("dws") == 2 and i.get("dwf") == 1 for i in fused)
    assert sum(1 for layer in art.report["layers"] if layer.get("dw_post")) == 1


def test_an_input_row_no_window_reads_is_not_loaded():
    """A 2x2 stride-2 pool over 19 rows reads 18: the last row's input chunk has no reader. It was loaded at the
    end of the program, over lines the output lived in by then (found by a random-graph probe: the last row of the
    output wrong). Exact; the input's LOADs cover the 18 rows read only."""
    from hwc import isa

    b = QBuilder(seed=142313)
    x = b.input("x", (1, 32, 19, 16), zp=5)
    y = b.avgpool(x, 2, 2)
    y = b.conv(y, 32, k=1, pads=[0] * 4, group=32)
    g = b.output(b.add(y, b.conv(y, 32, k=3), relu=True))
    art = check_exact(g, TARGETS["tile32x32"])
    act_loads = [i for i in isa.from_bytes(art.program) if i.op == isa.Op.LOAD and i.get("mem") == int(isa.Mem.ACT)]
    assert sum(i.get("rows") * i.get("row_beats") for i in act_loads) == 18 * 16


def test_depthwise_in_the_post_processing_at_most_eight_pixels_a_block_line():
    """A 2-channel tensor stacks 16 pixels a line on tile32x32; padded to 32 channels for a stride-2 depthwise
    layer's PPU.dw, its producer's GEMMs would write every 16th accumulator line, past GEMM.acc_si's 15 (a crash
    found by a random-graph probe): `layers.MAX_PHASES` caps it at 8. Every layout: builds, exact."""
    from hwc import isa
    from hwc.tile.layers import MAX_PHASES

    assert MAX_PHASES <= isa.LAYOUT[isa.Op.GEMM]["acc_si"][1].hi_val
    t = tile_variant(TARGETS["tile32x32"], dw_post=True)
    b = QBuilder(seed=5)
    x = b.input("x", (1, 2, 6, 32), zp=3)
    y = b.conv(x, 2, k=1, relu=True)
    y = b.conv(y, 2, k=3, stride=2, group=2, relu=True)
    g = b.output(b.conv(y, 4, k=1))
    choice = check_exact(g, t).report["schedule"][0]
    for flat in (False, True, "blocks"):
        art = check_exact(g, t, pin=[dict(choice, flat=flat)])
        assert max(i.get("acc_si") for i in isa.from_bytes(art.program) if i.op == isa.Op.GEMM) <= MAX_PHASES


def test_depthwise_in_the_post_processing_needs_its_pairs():
    """PPU.dw only where it is exact: not for a stride-2 depthwise layer padded otherwise than PPU.dws knows, a 5x5
    one, a stride-1 one padded asymmetrically, or a convolution whose output has a second reader (it must then be
    stored); the target feature needs the row buffers."""
    from hwc import isa

    t = tile_variant(TARGETS["tile8x8"], dw_post=True)
    for stride, k, second, pads in ((2, 3, False, [1, 0, 1, 0]), (1, 5, False, [2] * 4), (1, 3, True, [1] * 4),
                                    (1, 3, False, [0, 0, 1, 1])):
        b = QBuilder(seed=k)
        x = b.input("x", (1, 8, 6, 6), zp=3)
        y = b.conv(x, 8, k=1, relu=True)
        d = b.conv(y, 8, k=k, stride=stride, pads=pads, group=8, relu=True)
        g = b.output(d, y) if second else b.output(d)
        prog = isa.from_bytes(check_exact(g, t).program)
        assert not any(i.get("dw") for i in prog if i.op == isa.Op.PPU)
    with pytest.raises(TargetError, match="dw_post"):
        tile_variant(TARGETS["tile8x8"], dw_post=True, post_unit=False)


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
@pytest.mark.parametrize("after", ["add", "add_conv", "maxpool"])
def test_depthwise_in_the_post_processing_before_a_residual_add(target, after):
    """A pointwise + depthwise pair whose output a residual add reads right after it: the add is fused into the
    depthwise layer's tiles (`_fusable_adds`), so that pair stays on the array (the add would otherwise have no
    layer to ride on); other readers (a max pool) leave it fused. Exact against the int8 reference either way."""
    from hwc import isa

    b = QBuilder(seed=7)
    x = b.input("x", (1, 32, 9, 7), zp=2)
    d = b.conv(b.conv(x, 32, k=1, relu=True), 32, k=3, pads=[1, 1, 1, 1], group=32, relu=True)
    o = {"add": lambda: b.add(d, x, relu=True), "add_conv": lambda: b.conv(b.add(d, x), 16, k=3),
         "maxpool": lambda: b.maxpool(d, 2, 2)}[after]()
    art = check_exact(b.output(o), tile_variant(TARGETS[target], dw_post=True))
    fused = any(i.get("dw") for i in isa.from_bytes(art.program) if i.op == isa.Op.PPU)
    assert fused == (after == "maxpool")


def _random_chain(rng, b):
    """A random chain: 1x1 and 3x3 convolutions of 2-64 channels, stride-1 and stride-2 depthwise layers in both
    paddings, residual adds, max pools; images up to 33 rows."""
    c = int(rng.choice([2, 4, 8, 16, 32, 40]))
    y = b.input("x", (1, c, int(rng.integers(3, 34)), 4 * int(rng.integers(1, 8))), zp=int(rng.integers(-9, 9)))
    y = b.conv(y, int(rng.choice([2, 4, 8, 16, 32])), k=1, relu=True)   # (at least one layer for the tile)
    hist = [y]
    for _ in range(int(rng.integers(2, 7))):
        op, shp = rng.choice(["pw", "dw", "dw2", "add", "pool", "conv3"]), b.g.type(y).shape
        if op == "pw":
            y = b.conv(y, int(rng.choice([2, 4, 8, 16, 32, 48])), k=1, relu=bool(rng.integers(0, 2)))
        elif op == "conv3":
            y = b.conv(y, int(rng.choice([8, 16, 32])), k=3, relu=True)
        elif op == "dw":
            y = b.conv(y, shp[1], k=3, pads=[1, 1, 1, 1], group=shp[1], relu=bool(rng.integers(0, 2)))
        elif op == "dw2" and shp[2] >= 2 and shp[3] >= 3:
            pads = [1, 1, 1, 1] if rng.integers(0, 2) else [0, 0, 1, 1]
            y = b.conv(y, shp[1], k=3, stride=2, pads=pads, group=shp[1], relu=True)
        elif op == "add" and any(b.g.type(z).shape == shp and z != y for z in hist):
            y = b.add(y, next(z for z in hist if b.g.type(z).shape == shp and z != y), relu=True)
        elif op == "pool" and shp[2] >= 2 and shp[3] >= 2:
            y = b.maxpool(y, 2, 2)
        else:
            continue
        hist.append(y)
    return b.output(y)


@pytest.mark.parametrize("seed", range(6))
def test_depthwise_in_the_post_processing_random_graphs(seed):
    """Random chains (1x1 and 3x3 convolutions of 2-64 channels, stride-1 and stride-2 depthwise layers in both
    paddings, residual adds, max pools; images up to 33 rows) on both tiles with the stage, built with every
    PPU.dw layout the search tries (`flat` False / True / "blocks", the search's other choices kept): exact against
    the int8 reference. (Such probes found three of this feature's bugs: tests above.)"""
    from hwc import isa

    rng = np.random.default_rng(seed)
    kinds = set()
    for it in range(12):
        t = tile_variant(TARGETS[str(rng.choice(["tile8x8", "tile32x32"]))], dw_post=True)
        g = _random_chain(rng, QBuilder(seed=seed * 100 + it))
        choice = check_exact(g, t, seed=it).report["schedule"][0]
        for flat in (False, True, "blocks", "pairs"):
            art = check_exact(g, t, seed=it, pin=[dict(choice, flat=flat)])
            kinds |= {(i.get("dws"), i.get("dwc"), i.get("dwf")) for i in isa.from_bytes(art.program)
                      if i.op == isa.Op.PPU and i.get("dw")}
    assert kinds, "no PPU.dw at all: the probe probes nothing"


def _weight_hazards(prog, res, n: int, bank: int) -> tuple[list[str], int]:
    """Check every WGT block's LOADs against the GEMMs reading it, on the tile model's timeline: a GEMM issues
    only after the LOAD that wrote its block last has completed (read after write), and a LOAD issues only once
    every GEMM before it in the program that reads the block's old contents streams, i.e. has preloaded its
    weights (write after read). Returns the violations and the LOADs into a bank while GEMMs after them still
    read other blocks of that bank that an earlier LOAD wrote (the bank shared between two groups' weights)."""
    from hwc import isa

    writer: dict[int, int] = {}     # block -> the LOAD that wrote it last
    readers: dict[int, list] = {}   # block -> GEMMs that read it since
    loads, bad, shared = [], [], set()
    for k, i in enumerate(prog):
        if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.WGT:
            lo, hi = i.get("sram") // n, (i.get("sram") + i.get("rows") * i.get("row_beats")) // n
            for b in range(lo, hi):
                bad += [f"LOAD {k} over block {b} before GEMM {r} read it" for r in readers.get(b, ())
                        if res.start[r] > res.issue[k]]
                writer[b], readers[b] = k, []
            loads.append((k, lo, hi))
        elif i.op == isa.Op.GEMM:
            blocks = (i.get("wblk"), i.get("wblk") + 1) if i.get("dw9") else (i.get("wblk"),)
            for b in blocks:
                w = writer.get(b)
                if w is None or res.issue[k] < res.end[w]:
                    bad.append(f"GEMM {k} read block {b} before LOAD {w} wrote it")
                readers.setdefault(b, []).append(k)
                shared |= {j for j, lo, hi in loads if w < j < k and not lo <= b < hi and lo // bank == b // bank}
    return bad, len(shared)


@pytest.mark.parametrize("case,v1", [("fc", False), ("cnn", False), ("cnn", True)])
def test_weights_prefetched_into_blocks_the_group_before_is_done_with(case, v1):
    """`prefetch` (Codegen.finalize with the tile model's timeline): group k + 2's weights load into group k's
    bank while group k computes, as its GEMMs are done with the blocks. On a tile with 8-block banks (v2 and v1): exact
    against the int8 reference, some LOAD writes a bank while the GEMMs after it still read other blocks of it,
    and no GEMM reads a block before its LOAD is in or while a LOAD overwrites it (the model's timeline)."""
    from hwc.targets.tile_schema import validate_tile


    base = load_target("tile8x8")
    doc = {k: v for k, v in base.items() if k != "derived"}
    t = validate_tile(dict(doc, scratchpad=dict(base["scratchpad"], wgt_bank_blocks=8)), "tile8x8 (8-block banks)")
    if v1:   # (the tile of docs/tile.md: no post-processing unit beside the array)
        t = tile_variant(t, post_unit=False, depthwise=False)
    b = QBuilder(seed=47)
    if case == "fc":
        x = b.input("x", (1, 64), zp=3)
        for m in (32, 32, 32, 32, 32, 32):
            x = b.gemm(x, m)
    else:
        x = b.input("x", (1, 8, 8, 8), zp=1)
        for m in (8, 16, 8, 16, 8):
            x = b.conv(x, m, 3, pads=[1] * 4, relu=True)
    g = b.output(x)
    choice = build_tile(g, t, hdl=False).report["schedule"][0]
    runs = {}
    for pre in (False, True):
        art, prog, res = _exact_timeline(g, t, dict(choice, prefetch=pre))
        assert art.report["schedule"][0]["prefetch"] is pre
        runs[pre] = _weight_hazards(prog, res, t["array"]["rows"], t["scratchpad"]["wgt_bank_blocks"])
    assert runs[False][0] == [] and runs[True][0] == [], runs
    assert runs[True][1] > 0 and runs[False][1] == 0, runs


@pytest.mark.parametrize("seed", [1, 2])
def test_prefetched_weights_on_random_graphs(seed):
    """Weights prefetched (`prefetch` pinned) on random chains (`_random_chain`) on both tiles, with banks of 4
    blocks so that the chains span several weight groups: exact against the int8 reference, and the WGT hazard
    check of every block on the model's timeline holds (`_weight_hazards`)."""
    from hwc.targets.tile_schema import validate_tile

    rng = np.random.default_rng(seed)
    shared = 0
    for it in range(8):
        base = TARGETS[str(rng.choice(["tile8x8", "tile32x32"]))]
        doc = {k: v for k, v in base.items() if k != "derived"}
        t = validate_tile(dict(doc, scratchpad=dict(base["scratchpad"], wgt_bank_blocks=4)), "4-block banks")
        g = _random_chain(rng, QBuilder(seed=seed * 100 + it))
        choice = build_tile(g, t, hdl=False).report["schedule"][0]
        art, prog, res = _exact_timeline(g, t, dict(choice, prefetch=True))
        bad, k = _weight_hazards(prog, res, t["array"]["rows"], t["scratchpad"]["wgt_bank_blocks"])
        assert bad == [], bad
        shared += k
    assert shared, "no LOAD into a bank still in use: the probe probes nothing"


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
@pytest.mark.parametrize("h", [5, 6, 7, 9])
def test_a_one_channel_conv_before_a_one_channel_depthwise_layer(target, h):
    """A 3x3 conv of one channel to one is a depthwise layer to the scheduler (GEMM.dw), not a PPU.dw producer: paired
    with the one-channel depthwise layer after it, every output was wrong (a random-graph probe). Exact."""
    t = tile_variant(TARGETS[target], dw_post=True)
    b = QBuilder(seed=684405 + h)
    x = b.input("x", (1, 1, h, 6), zp=18)
    g = b.output(b.conv(b.conv(x, 1, k=3), 1, k=3))
    check_exact(g, t)


store_cases = st.fixed_dictionaries({
    "c": st.integers(1, 40), "h": st.integers(2, 14), "w": st.integers(2, 14),
    "kind": st.sampled_from(["conv", "conv_s2", "dw", "pair", "pool", "add"]),
    "target": st.sampled_from(["tile8x8", "tile32x32", "tile32x32-dw_post", "tile8x8-v1"]),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(store_cases)
def test_outputs_are_stored_in_row_pieces_once_written(case):
    """Every output channel block in pieces of rows, each STOREd once the POST instruction writing it last is done
    (here pieces of one row at least: STORE_PIECE_LINES = 1): exact against the int8 reference, whatever writes the
    output (PPU of a conv, PPU.dw of a conv + depthwise pair, max pooling's VEC, a residual add's VEC), also an
    output a later layer reads; the STOREs cover every row of every output block once."""
    from hwc import isa
    from hwc.tile import place

    targets = dict(TARGETS, **{"tile32x32-dw_post": load_target("tile32x32")})
    c, h, w = case["c"], case["h"] + 2, case["w"] + 2
    b = QBuilder(seed=c * 100 + h * 10 + w)
    x = b.input("x", (1, c, h, w), zp=-5)
    kind = case["kind"]
    if kind in ("conv", "conv_s2"):
        y = b.conv(x, c + 3, relu=True, stride=1 if kind == "conv" else 2)
    elif kind == "dw":
        y = b.conv(x, c, group=c)
    elif kind == "pair":   # (PPU.dw on the bundled tile32x32)
        y = b.conv(b.conv(x, c, k=1, pads=[0] * 4), c, group=c)
    elif kind == "pool":
        y = b.maxpool(b.conv(x, c))
    else:
        y = b.add(x, b.conv(x, c))
    z = b.conv(y, 4, k=1, pads=[0] * 4)   # (y is read on the tile after it is stored, too)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(place, "STORE_PIECE_LINES", 1)
        art = check_exact(b.output(y, z), targets[case["target"]])
    n = targets[case["target"]]["array"]["rows"]
    stored = sorted((i.get("dram"), i.get("rows") * i.get("row_beats")) for i in isa.from_bytes(art.program)
                    if i.op == isa.Op.STORE)
    beat = targets[case["target"]]["bus"]["bytes"]
    regions = sorted((t["dram"] // beat, -(-t["c"] // n) * t["h"] * t["w"])
                     for io in art.info["tile"]["segments"] for t in io["outputs"])
    # (each output's region, in order, piece after piece without a gap or an overlap)
    at = iter(stored)
    for start, size in regions:
        end = start
        while end < start + size:
            a, k = next(at)
            assert a == end, (a, end)
            end += k
        assert end == start + size


def test_a_large_output_is_stored_while_the_tile_computes():
    """A 32x32 output of 8 channels on tile8x8 (1,024 lines a block): its STOREs go out in pieces as its rows are
    written, the first long before the last GEMM, and the program is faster than with each block stored whole
    after its last write (side by side); the RTL runs it as the model does (outputs and cycles)."""
    from hwc.sim.model import TileModel
    from test_rtl_end_to_end import _rtl_equals_model_equals_reference

    from hwc import isa
    from hwc.tile import place

    target = load_target("tile8x8")
    b = QBuilder(seed=12)
    x = b.input("x", (1, 8, 32, 32), zp=1)
    g = b.output(b.conv(b.conv(x, 8, relu=True), 8))
    art = build_tile(g, target, hdl=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(place, "STORE_PIECE_LINES", 1 << 30)
        whole = build_tile(g, target, hdl=False)
    prog = isa.from_bytes(art.program)
    res = TileModel(target).run(art.program, art.memory_image(), art.info["tile"]["segments"][0]["prog_offset"] // 16)
    stores = [k for k, i in enumerate(prog) if i.op == isa.Op.STORE]
    gemms = [k for k, i in enumerate(prog) if i.op == isa.Op.GEMM]
    assert len(stores) >= 1024 // place.STORE_PIECE_LINES
    assert res.issue[stores[0]] < res.issue[gemms[len(gemms) * 3 // 4]]   # (in the second layer's first half)
    assert len([i for i in isa.from_bytes(whole.program) if i.op == isa.Op.STORE]) == 1
    assert art.report["cycles"] < whole.report["cycles"] - 0.5 * 1024
    _rtl_equals_model_equals_reference(art, g, {"x": np.random.default_rng(1).integers(-128, 128, (1, 8, 32, 32))
                                                .astype(np.int8)})


@pytest.mark.parametrize("h, w", [(3, 3), (7, 11), (6, 5)])
@pytest.mark.parametrize("target", sorted(TARGETS) + ["tile32x32-bundled"])
def test_a_residual_add_of_operands_with_different_row_pitches(target, h, w):
    """x + MaxPool3x3(x, pads 1): x is held with pads all around for the pool (-128 halo) and the pool's output
    shares its pad column (one row pitch less): the add reads each operand at its own pitch (a random-graph
    probe's wrong result: 6 of 9 outputs wrong on every target)."""
    t = load_target("tile32x32") if target == "tile32x32-bundled" else TARGETS[target]
    for c in (1, 5):
        b = QBuilder(seed=h * w + c)
        x = b.input("x", (1, c, h, w), zp=-3)
        check_exact(b.output(b.add(b.maxpool(x, 3, 1, (1, 1, 1, 1)), x)), t, seed=c)


def test_a_residual_add_of_operands_with_different_row_pitches_through_the_rtl():
    """The add of operands at two row pitches (a VEC per row) on the bundled tile8x8's RTL: equal to the model and
    the int8 reference, cycles too."""
    from test_rtl_end_to_end import _rtl_equals_model_equals_reference

    b = QBuilder(seed=3)
    x = b.input("x", (1, 5, 6, 5), zp=-3)
    g = b.output(b.add(b.maxpool(x, 3, 1, (1, 1, 1, 1)), x))
    art = build_tile(g, load_target("tile8x8"), hdl=True)
    _rtl_equals_model_equals_reference(art, g, {"x": np.random.default_rng(2).integers(-128, 128, (1, 5, 6, 5))
                                                .astype(np.int8)})


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_per_layer_weight_loads_follow_the_blocks_their_gemms_read(target):
    """report.json's per-layer weight-load cycles and hidden share, recomputed from the instruction stream alone:
    every weight LOAD writes blocks of WGT; each block is charged to the layer of the first GEMM that reads it
    after that LOAD (before another LOAD overwrites it), the LOAD's cycles shared by blocks; hidden = the part
    of its cycles during which a GEMM, PPU, VEC or FILL is busy (the tile model's timeline)."""
    b = QBuilder(seed=4)
    x = b.input("x", (1, 16, 10, 10), zp=0)
    y = b.conv(b.conv(b.conv(x, 48), 64, k=1), 80)
    from hwc import isa

    art, prog, res, layer_of = _timeline(b.output(b.gap(y)), TARGETS[target])
    n = TARGETS[target]["array"]["rows"]
    busy = sorted((int(res.issue[k]) + 1, int(res.end[k])) for k, i in enumerate(prog)
                  if i.op in (isa.Op.GEMM, isa.Op.PPU, isa.Op.VEC, isa.Op.FILL))
    want: dict[int, list[float]] = {}
    for k, i in enumerate(prog):
        if i.op != isa.Op.LOAD or i.get("mem") != isa.Mem.WGT:
            continue
        first, count = i.get("sram") // n, i.get("row_beats") // n
        owner, live = {}, set(range(first, first + count))
        for j in range(k + 1, len(prog)):
            q = prog[j]
            if q.op == isa.Op.LOAD and q.get("mem") == isa.Mem.WGT:   # (overwritten from here on)
                live -= set(range(q.get("sram") // n, q.get("sram") // n + q.get("row_beats") // n))
            if q.op == isa.Op.GEMM:
                for blk in range(q.get("wblk"), q.get("wblk") + 1 + q.get("dw9")):
                    if blk in live:
                        owner.setdefault(blk, layer_of[j])
        assert len(owner) == count, "every block loaded is read"
        s, e = int(res.issue[k]) + 1, int(res.end[k])
        hidden = sum(max(0, min(e, b1) - max(s, b0)) for b0, b1 in _merged(busy))
        for li in owner.values():
            acc = want.setdefault(li, [0.0, 0.0])
            acc[0] += (e - s) / count
            acc[1] += hidden / count
    (_, tp, _), = schedule(b.g, TARGETS[target], pin=art.report["schedule"])
    got = {layer["name"]: (layer["weight_load_cycles"], layer["weight_load_hidden"]) for layer in art.report["layers"]}
    assert len(want) >= 3
    for li, (cycles, hidden) in want.items():
        name = tp.layers[li]["name"]
        assert got[name][0] == round(cycles), (name, got[name], want[li])
        assert got[name][1] == pytest.approx(hidden / cycles), (name, got[name], want[li])
    assert all(c == 0 for name, (c, _) in got.items() if name not in {tp.layers[li]["name"] for li in want})
    assert sum(c for c, _ in got.values()) == pytest.approx(art.report["weight_load_cycles"], abs=len(got))


def _merged(spans):
    out = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return out


_HASH_SEED_BUILD = """
import hashlib, json, sys
sys.path.insert(0, {here!r})
from qgraphs import QBuilder
from hwc.targets import load_target
from hwc.tile.build import build_tile
b = QBuilder(seed=5)
x = b.input("x", (1, 8, 6, 6), zp=3)
outs = [b.conv(x, 8 + 4 * i, k=1, pads=[0] * 4) for i in range(5)]
art = build_tile(b.output(*outs), load_target("tile8x8"), hdl=False)
blob = art.program + art.const + json.dumps([art.memory_map, art.info], sort_keys=True).encode()
print(hashlib.sha256(blob).hexdigest())
"""


def test_build_does_not_depend_on_the_string_hash_seed():
    """Builds are byte-identical across processes: a segment with several outputs ordered them by a set of names
    (Python's per-process string hash), which moved their DRAM addresses (random probe 7, an Inception block).
    Five outputs of one segment, built under four PYTHONHASHSEED values: one program, constants and memory map."""
    import os
    import subprocess
    import sys

    code = _HASH_SEED_BUILD.format(here=str(Path(__file__).parent))
    digests = set()
    for seed in ("0", "1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, HWC_JOBS="1")
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        digests.add(res.stdout.strip())
    assert len(digests) == 1, digests


def test_a_model_without_tile_work_is_a_clear_error():
    """A model whose int8 part only moves data (a Reshape) has nothing for the tile: a clear error saying so and where
    to build it, not an empty list of reasons; one whose layers the tile cannot run names each with its reason."""
    b = QBuilder(seed=1)
    x = b.input("x", (1, 3, 1, 14), zp=2)
    g = b.output(b.reshape(x, (1, 3, 1, 14)))   # (the same layout: free on the tile, and nothing else)
    with pytest.raises(UnsupportedError, match=r"the model computes nothing the tile could run: its nodes only move "
                                               r"data \(Reshape\), which the host does\. Build it for --target cpu"):
        build_tile(g, TARGETS["tile8x8"], hdl=False)
    b = QBuilder(seed=1)
    x = b.input("x", (1, 3, 4, 4), zp=2)
    n = b.g.make_node("Concat", [x, x], {"axis": 1})
    b.g.values[n.outputs[0]].quant = b.g.values[x].quant
    g = b.output(n.outputs[0])
    with pytest.raises(UnsupportedError, match=rf"no layer of this model can run on the tile.*node {n.name!r}: input "
                                               r"'x' has 3 channels, not a multiple of the tile's 8 lanes"):
        build_tile(g, TARGETS["tile8x8"], hdl=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 2, 3]), st.integers(2, 40), st.integers(5, 90), st.integers(1, 5), st.sampled_from([1, 2]),
       st.lists(st.integers(0, 4), min_size=2, max_size=2), st.integers(40, 400),
       st.sampled_from(["tile8x8", "tile32x32"]))
def test_windows_of_a_thin_one_row_first_layer(c, m, k, stride, dil, pads, w, target):
    """A strided 1-d convolution on a thin input (1-3 channels, a kernel wider than the pixels a line holds), pinned
    to the host's windows (`layers.windows_first_layer`: one line per output pixel holding the next L padded pixels,
    then a dilated convolution of ceil(extent / L) taps), and to the host im2col: both exact against the int8
    reference (asymmetric pads, dilation, widths the windows do not divide). Where the layer has no such window
    (stride wider than a line's pixels, kernel within one window) the pinned choice falls back, still exact."""
    b = QBuilder(seed=c * 1000 + k * 10 + stride)
    x = b.input("x", (1, c, 1, w + (k - 1) * dil), zp=-11)
    y = b.conv(x, m, k=(1, k), stride=(1, stride), pads=[0, pads[0], 0, pads[1]], dil=dil, relu=True)
    g = b.output(b.conv(y, 6, k=(1, 3), pads=[0, 1, 0, 1]))
    t = TARGETS[target]
    base = {"tiling": "cost", "loads": "eager", "shift": False, "split": False}
    art = check_exact(g, t, pin=[dict(base, im2col="windows")], seed=k)
    n, extent = t["array"]["rows"], (k - 1) * dil + 1
    window = n // c // stride * stride
    assert art.report["schedule"][0]["im2col"] == ("windows" if 0 < window < extent else False)
    check_exact(g, t, pin=[dict(base, im2col=True)], seed=k)


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_windows_load_a_third_of_the_im2col_of_a_1x80_stride_4_layer(target):
    """M5's first layer (one channel, 1 x 80, stride 4) over 2,000 samples: the host im2col copies each sample 20
    times (3 lines a pixel on tile32x32, 10 on tile8x8); windows of 32 (8) samples a line copy it 8 (2) times and the
    tile runs 3 (10) taps of dilation 8 (2) over them: the same GEMM lines, fewer input beats. The search picks the
    windows; exact, and both pinned side by side: fewer input beats and fewer cycles (measured: tile8x8 518 against
    5,000 beats, 26,891 against 30,230 cycles; tile32x32 516 against 1,500, 3,795 against 4,625)."""
    t = TARGETS[target]
    n = t["array"]["rows"]
    b = QBuilder(seed=80)
    x = b.input("x", (1, 1, 1, 2000), zp=3)
    y = b.maxpool(b.conv(x, 32, k=(1, 80), stride=(1, 4), pads=[0, 39, 0, 40], relu=True), (1, 4), (1, 4))
    g = b.output(b.conv(y, 32, k=(1, 3), pads=[0, 1, 0, 1]))
    art = check_exact(g, t)
    assert art.report["schedule"][0]["im2col"] == "windows"
    pin = art.report["schedule"]
    im2col = check_exact(g, t, pin=[dict(pin[0], im2col=True)])
    lines = {a.report["schedule"][0]["im2col"]: a.report["layers"][0]["array_lines"] for a in (art, im2col)}
    assert lines["windows"] == lines[True] == 500 * -(-80 // n) * (32 // n)   # (the same GEMM lines)
    from hwc import isa

    loaded = [sum(i.get("rows") * i.get("row_beats") for i in isa.from_bytes(a.program)
                  if i.op == isa.Op.LOAD and i.get("mem") == isa.Mem.ACT) for a in (art, im2col)]
    assert loaded[0] < loaded[1] / 2
    assert art.report["cycles"] < im2col.report["cycles"]


# ---- Concat along the channels (VEC copies of whole channel blocks) ------------------------------------------
def _random_concat_graph(rng, b, n, shared=False):
    """Branches off one tensor (1x1 and 3x3 convolutions, a max pool of stride 1, the tensor itself) concatenated,
    maybe twice the same part, then a consumer (a 3x3 convolution, a max pool, or nothing: a graph output); channel
    counts multiples of the array's n but for the last part's. `shared`: the parts made by convolutions have the
    Concat's zero point (as the quantizer makes them, `share_concat_encodings`), so that they can be written in
    place (`Codegen._alias_concats`); otherwise each its own."""
    h, w = int(rng.integers(2, 14)), int(rng.integers(2, 14))
    x = b.input("x", (1, int(rng.choice([n, 2 * n])), h, w), zp=int(rng.integers(-9, 9)))
    zx = int(rng.integers(-20, 20))
    x = b.conv(x, int(rng.choice([n, 2 * n])), k=1, relu=bool(rng.integers(0, 2)), zp_out=zx)
    zp = zx if shared else None
    parts = []
    for _ in range(int(rng.integers(2, 4))):
        kind = rng.choice(["1x1", "3x3", "pool", "self"] if not shared else ["1x1", "3x3", "3x3", "pool"])
        if kind == "1x1":
            parts.append(b.conv(x, n * int(rng.integers(1, 3)), k=1, relu=True, zp_out=zp))
        elif kind == "3x3":
            parts.append(b.conv(x, n, k=3, pads=[1, 1, 1, 1], relu=bool(rng.integers(0, 2)), zp_out=zp))
        elif kind == "pool":
            parts.append(b.maxpool(x, 3, 1, pads=(1, 1, 1, 1)))
        else:
            parts.append(x)
    last = int(rng.integers(1, 2 * n + 1))
    parts.append(b.conv(x, last, k=1, relu=True, zp_out=zp))   # (the last part may end mid-block)
    y = b.concat(*parts)
    after = rng.choice(["conv", "pool", "none"])
    if after == "conv":
        y = b.conv(y, int(rng.choice([n, 2 * n])), k=3, pads=[1, 1, 1, 1], relu=True)
    elif after == "pool" and h >= 2 and w >= 2:
        y = b.maxpool(y, 2, 2)
    return b.output(y)


def _concat_kinds(target, seed) -> list[bool]:
    """Four random Concat graphs (every other one with shared zero points) on `target`, each exact against the
    int8 reference with its Concat on the tile in one segment; whether each Concat was written in place."""
    t = TARGETS[target] if target in TARGETS else load_target(target)
    n = t["array"]["rows"]
    rng = np.random.default_rng(500 + seed)
    kinds = []
    for it in range(4):
        g = _random_concat_graph(rng, QBuilder(seed=seed * 10 + it), n, shared=it % 2 == 1)
        art = check_exact(g, t, seed=it)
        where = {d["op"]: d["where"] for d in art.report["partition"]}
        assert where["Concat"] == "tile" and art.report["segments"] == 1, art.report["partition"]
        rec = next((rec for rec in art.report["layers"] if rec["op"] == "Concat"), None)   # (None: no instruction)
        kinds.append(rec is None or rec.get("in_place", False))
    return kinds


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32", "tile8x8-v1"])
@pytest.mark.parametrize("seed", range(4))
def test_channel_concat_runs_on_the_tile(target, seed):
    """Random branches concatenated along the channels: exact against the int8 reference, with the Concat on the
    tile (one segment): written in place by the parts' producers where they share its layout and halo value, else
    VEC copies of each channel block. Shared zero points give in-place Concats."""
    kinds = _concat_kinds(target, seed)
    assert any(kinds[1::2]), kinds


def test_both_concat_kinds_run_in_the_random_graphs():
    """The random Concats include VEC copies (parts whose halos hold different values) and in-place ones (unshared
    parts with no halo to fill are in place too)."""
    kinds = [k for seed in range(4) for k in _concat_kinds("tile8x8", seed)]
    assert not all(kinds) and any(kinds), kinds


def test_a_concat_of_parts_not_block_aligned_runs_on_the_host():
    """On tile32x32 a part of 8 channels (not the last) would need its lanes shifted: the host runs the Concat,
    says why, and the answer is still exact."""
    b = QBuilder(seed=3)
    x = b.input("x", (1, 8, 6, 6))
    y = b.concat(b.conv(x, 8, k=1, relu=True), b.conv(x, 8, k=3, pads=[1, 1, 1, 1]))
    g = b.output(b.conv(y, 8, k=1))
    art = check_exact(g, load_target("tile32x32"))
    d = next(d for d in art.report["partition"] if d["op"] == "Concat")
    assert d["where"] == "host" and "not a multiple of the tile's 32 lanes" in d["why"], d
