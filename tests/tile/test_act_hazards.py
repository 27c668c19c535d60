"""ACT hazards on the tile model's timeline. The model executes each instruction's data effect in program order
at its issue, so the bit-exact tests cannot see a GEMM that, on the hardware, reads ACT lines before the POST
instruction or LOAD writing them has finished (or a FILL overwriting lines a GEMM in flight still reads): only the
RTL would, and only where the timing happens to race. The scheduler avoids them with wait bits and with the rule
that a POST instruction issues only once the one before it has finished (`Codegen.compute`). This checks that
rule's outcome independently: every ACT line's readers start after its last writer ended, and every writer
starts after the readers of the previous contents ended, with each instruction's lines computed from its fields
(docs/tile.md, docs/tile-v2.md) and its times from the model's Result."""

import numpy as np
import pytest
from hwc.sim.model import TileModel
from hwc.targets import load_target, tile_variant
from qgraphs import QBuilder
from test_schedule import TARGETS, _random_chain, check_exact

from hwc import isa
from hwc.frontend import import_onnx
from hwc.isa import Mem, Op, Wait
from hwc.quant.build import quantize_model
from hwc.tile.build import build_tile
from hwc.zoo import MODELS, random_inputs


def _lines(base: int, no: int, so: int, ni: int, si: int) -> np.ndarray:
    """ACT lines base + i * so + j * si, i < no, j < ni."""
    return (base + np.arange(no)[:, None] * so + np.arange(ni)[None, :] * si).ravel()


def _access(i: isa.Insn) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(lines read, lines written) of ACT by one instruction."""
    f = i.get
    if i.op == Op.GEMM:
        return [_lines(f("act"), f("n_outer"), f("act_so"), f("n_inner"), f("act_si"))], []
    if i.op == Op.PPU:
        oo, oi = isa.ppu_out_dims(f("n_outer"), f("n_inner"), f("dws"), f("dwc"), f("dwf"))
        return [], [_lines(f("out"), oo, f("out_so"), oi, f("out_si"))]
    if i.op == Op.VEC:
        args = (f("n_outer"), f("in_so"), f("n_inner"), f("in_si"))
        return ([_lines(f("a"), *args), _lines(f("b"), *args)],
                [_lines(f("out"), f("n_outer"), f("out_so"), f("n_inner"), f("out_si"))])
    if i.op == Op.FILL:
        return [], [_lines(f("addr"), f("rows"), f("stride"), f("count"), 1)]
    if i.op in (Op.LOAD, Op.STORE) and (i.op == Op.STORE or f("mem") == Mem.ACT):
        lines = _lines(f("sram"), f("rows"), f("sram_stride"), f("row_beats"), 1)
        return ([lines], []) if i.op == Op.STORE else ([], [lines])
    return [], []


def act_hazards(prog: list, res, act_lines: int) -> list[str]:
    """Read-after-write and write-after-read violations on ACT lines, by the model's timeline. A GEMM reads its
    lines from MEM_LATENCY + 1 cycles before its stream starts (a conservative margin) to its stream's end; every
    other instruction reads and writes from its issue to its end. A VEC whose operand has the output's lines at the
    same positions (in place: a max pool's running maximum) reads each of them before it writes it: not a hazard."""
    ml = isa.MEM_LATENCY
    written = np.full(act_lines, -1, np.int64)   # the cycle the last write of each line has ended
    writer = np.full(act_lines, -1, np.int64)
    read_end = np.full(act_lines, -1, np.int64)   # the latest read end of its current contents
    reader = np.full(act_lines, -1, np.int64)
    bad = []
    for k, i in enumerate(prog):
        reads, writes = _access(i)
        if i.op == Op.GEMM:
            r0, r1 = int(res.start[k]) - ml - 1, int(res.start[k]) + i.get("n_outer") * i.get("n_inner")
        else:
            r0, r1 = int(res.issue[k]), int(res.end[k])
        for lines in reads:
            late = lines[written[lines] > r0]
            if late.size:
                w = int(writer[late[0]])
                bad.append(f"{i.op.name} {k} reads line {late[0]} from cycle {r0}, {prog[w].op.name} {w} writes it "
                           f"until {int(written[late[0]])}")
            upd = read_end[lines] < r1
            reader[lines[upd]] = k
            read_end[lines] = np.maximum(read_end[lines], r1)
        inplace = np.zeros(0, np.int64)
        if i.op == Op.VEC and (i.get("in_so"), i.get("in_si")) == (i.get("out_so"), i.get("out_si")):
            same = [r for r, base in zip(reads, (i.get("a"), i.get("b"))) if base == i.get("out")]
            other = [r for r, base in zip(reads, (i.get("a"), i.get("b"))) if base != i.get("out")]
            if same:
                inplace = np.setdiff1d(same[0], np.concatenate(other) if other else same[0][:0])
        for lines in writes:
            late_read = (read_end[lines] > r0) & ~((reader[lines] == k) & np.isin(lines, inplace))
            early = lines[late_read]
            if early.size:
                rd = int(reader[early[0]])
                bad.append(f"{i.op.name} {k} writes line {early[0]} from cycle {r0}, {prog[rd].op.name} {rd} reads "
                           f"it until {int(read_end[early[0]])}")
            written[lines], writer[lines], read_end[lines] = r1, k, -1
    return bad


def post_hazards(prog: list, target: dict) -> list[str]:
    """v2 (a POST unit; in v1 the PPU, VEC and FILL are the compute unit's, which runs one instruction at a time,
    GEMMs included): GEMMs reading ACT lines that a POST instruction possibly still in flight writes, by the ISA's
    rules alone (no timing): at a GEMM's issue the POST instructions possibly in flight are the last one issued
    before it and, when that one is a PPU.dw right after a PPU.dw and did not wait for POST, the one before it too
    (docs/tile-v2.md, "PPU.dw after PPU.dw"); an instruction that waits for POST (the GEMM itself included) ends
    them all."""
    bad, inflight = [], []   # [(instruction, lines it writes)]
    if not target["features"]["post_unit"]:
        return bad
    for k, i in enumerate(prog):
        if i.wait & Wait.POST:
            inflight = []
        reads, writes = _access(i)
        if i.op == Op.GEMM:
            bad += [f"GEMM {k} reads lines {prog[j].op.name} {j} may still write" for j, lines in inflight
                    if np.intersect1d(reads[0], lines).size]
        elif i.op in (Op.PPU, Op.VEC, Op.FILL):
            dw = i.op == Op.PPU and i.get("dw")
            behind = dw and inflight and prog[inflight[-1][0]].op == Op.PPU and prog[inflight[-1][0]].get("dw")
            inflight = inflight[-1:] if behind else []
            inflight.append((k, writes[0]))
    return bad


def _timeline(art, target):
    io = art.info["tile"]["segments"][0]
    res = TileModel(target).run(art.program, art.memory_image(), io["prog_offset"] // isa.INSN_BYTES, data=False)
    return isa.from_bytes(art.program), res


def _hazards(art, target) -> list[str]:
    """The ACT and POST hazards of a one-segment build's program on the tile model's timeline."""
    prog, res = _timeline(art, target)
    return act_hazards(prog, res, target["scratchpad"]["act_lines"]) + post_hazards(prog, target)


def _fused_and_not_without_hazards(g, target) -> None:
    """g built with its max pools pinned fused and not (`fuse_pools`): each exact and without hazards."""
    pin = build_tile(g, target, hdl=False).report["schedule"][0]
    for fuse in (True, False):
        art = check_exact(g, target, pin=[dict(pin, fuse_pools=fuse)])
        assert art.report["schedule"][0]["fuse_pools"] == fuse
        bad = _hazards(art, target)
        assert bad == [], (fuse, bad[:5])


@pytest.mark.parametrize("model,target", [("ds_cnn", "tile8x8"), ("ds_cnn", "tile32x32"),
                                          ("mobilenet_v1_025", "tile32x32"), ("fc_autoencoder", "tile8x8"),
                                          ("resnet8", "tile32x32"), ("mobilenet_v1_025", "tile8x8"),
                                          ("resnet8", "tile8x8")])
def test_no_act_hazards_in_the_benchmark_models(model, target):
    t = load_target(target)
    m = MODELS[model]()
    q = quantize_model(import_onnx(m), t, random_inputs(m, n=8, seed=3))
    art = build_tile(q, t, hdl=False)
    prog, res = _timeline(art, t)
    assert res.done
    bad = act_hazards(prog, res, t["scratchpad"]["act_lines"]) + post_hazards(prog, t)
    assert bad == [], bad[:5]


@pytest.mark.parametrize("seed", range(4))
def test_no_act_hazards_on_random_graphs(seed):
    """Random chains (`test_schedule._random_chain`) on the bundled tiles (with the depthwise stage on tile32x32)
    and on the test targets (the array's depthwise schedules) and their v1 variants."""
    rng = np.random.default_rng(1000 + seed)
    names = ["tile8x8", "tile32x32"]
    for it in range(6):
        choice = str(rng.choice(names + sorted(TARGETS)))
        t = load_target(choice) if choice in names else TARGETS[choice]
        g = _random_chain(rng, QBuilder(seed=seed * 100 + it))
        art = build_tile(g, t, hdl=False)
        bad = _hazards(art, t)
        assert bad == [], (choice, bad[:5])


def test_the_check_finds_a_gemm_that_does_not_wait_for_post(monkeypatch):
    """The probe probes: with the GEMMs' POST waits left out (`Codegen.compute` never sees an overlap), a model
    whose GEMMs read what the PPU before them wrote has read-after-write hazards."""
    from hwc.tile import codegen

    t = tile_variant(load_target("tile8x8"), dw_post=False)
    b = QBuilder(seed=5)
    x = b.input("x", (1, 8, 6, 6), zp=1)
    g = b.output(b.conv(b.conv(x, 8, k=1, relu=True), 8, k=1))
    art = build_tile(g, t, hdl=False)
    assert act_hazards(*_timeline(art, t), t["scratchpad"]["act_lines"]) == []
    monkeypatch.setattr(codegen, "_overlaps", lambda read, written: False)
    art = build_tile(g, t, hdl=False)
    bad = act_hazards(*_timeline(art, t), t["scratchpad"]["act_lines"])
    assert any(s.startswith("GEMM") and "PPU" in s for s in bad), bad


def test_a_ppu_dw_waits_where_a_gemm_reads_what_the_ppu_dw_before_it_writes(monkeypatch):
    """PPU.dw after PPU.dw: where a GEMM after the second reads lines the first writes, the second waits for POST
    (`Codegen.compute`), so that the first has finished when the GEMM issues. MobileNetV1-0.25 on tile32x32 (its 3x3
    layers: the next layer's GEMMs read the fused layer's blocks while the last PPU.dw runs): no hazard by the ISA's
    rules (`post_hazards`), and with the rule left out some."""
    from hwc.tile import codegen

    t = load_target("tile32x32")
    m = MODELS["mobilenet_v1_025"]()
    q = quantize_model(import_onnx(m), t, random_inputs(m, n=8, seed=3))
    pin = build_tile(q, t, hdl=False).report["schedule"]
    prog = isa.from_bytes(build_tile(q, t, hdl=False, pin=pin).program)
    assert post_hazards(prog, t) == []
    assert any(i.op == Op.PPU and i.get("dw") and i.wait & Wait.POST for i in prog)
    compute = codegen.Codegen.compute

    def without_the_rule(self, *a, **k):
        self._post_before = None
        return compute(self, *a, **k)

    monkeypatch.setattr(codegen.Codegen, "compute", without_the_rule)
    bad = post_hazards(isa.from_bytes(build_tile(q, t, hdl=False, pin=pin).program), t)
    assert bad and all(s.startswith("GEMM") and "PPU" in s for s in bad), bad[:3]


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
@pytest.mark.parametrize("k,s,pads", [(2, 2, (0, 0, 0, 0)), (3, 2, (1, 1, 1, 1)), (3, 1, (0, 1, 2, 0))])
@pytest.mark.parametrize("clamped", [True, False])
def test_max_pool_channel_blocks_reuse_its_temporaries_without_hazards(target, k, s, pads, clamped):
    """A max pool's two temporaries hold one channel block; each block's passes reuse them, so every write of a
    block must start after the previous block's reads ended (POST runs in order): checked on the timeline, with
    the outputs exact against the int8 reference (three channel blocks and a partial one). Unclamped and read
    by a padded conv too, the pool runs over real pixels only (edge windows in runs of their own)."""
    t = load_target(target)
    n = t["array"]["rows"]
    b = QBuilder(seed=k * 10 + s)
    x = b.input("x", (1, 5, 12, 11), zp=-3)
    y = b.conv(x, 3 * n + 3, relu=clamped)
    outs = [b.conv(b.maxpool(y, k, s, pads=pads), 8, k=1, pads=[0] * 4)]
    if not clamped:
        outs.append(b.conv(y, 4, pads=[1, 1, 1, 1]))
    art = check_exact(b.output(*outs), t)
    prog, res = _timeline(art, t)
    assert sum(1 for i in prog if i.op == Op.VEC) >= 4 * 2   # (four channel blocks, two passes at least)
    bad = act_hazards(prog, res, t["scratchpad"]["act_lines"]) + post_hazards(prog, t)
    assert bad == [], bad[:5]


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
@pytest.mark.parametrize("k,s,pads", [(2, 2, (0, 0, 0, 0)), (3, 2, (1, 1, 1, 1))])
def test_a_max_pool_fused_with_its_convolution_has_no_hazards(target, k, s, pads):
    """A max pool run during its conv (`Codegen._fusable_pools`): its VECs read rows the conv's PPUs wrote and
    write its output and temporaries while the conv's GEMMs stream (those live from the conv's step on), and the
    next conv reads the output: no ACT hazard on the timeline, pinned fused and not, both exact."""
    t = load_target(target)
    n = t["array"]["rows"]
    b = QBuilder(seed=k + s)
    x = b.input("x", (1, n, 14, 13), zp=-3)
    g = b.output(b.conv(b.maxpool(b.conv(x, 3 * n, relu=True), k, s, pads=pads), 8, k=1, pads=[0] * 4))
    _fused_and_not_without_hazards(g, t)


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_a_fused_max_pool_beside_a_conv_reading_its_input(target):
    """The shape of probe 8 seed 3157: a conv's output goes to a max pool (a model output) and to another conv.
    Fused or not, exact and without ACT hazards."""
    t = load_target(target)
    n = t["array"]["rows"]
    b = QBuilder(seed=9)
    x = b.input("x", (1, 6, 11, 11), zp=-3)
    y = b.conv(x, 2 * n, relu=True)
    g = b.output(b.maxpool(y, 2, 2), b.conv(y, 3 * n + 1, k=1, pads=[0] * 4))
    _fused_and_not_without_hazards(g, t)


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_a_fused_max_pools_vecs_left_for_the_next_conv(target):
    """A fused max pool's VECs still pending after its conv run during the next layer when that is a conv
    (`Codegen.pool_spill`). Here that conv reads the model input, neither the pool's input nor its output: its
    output may not take their lines (or the pool's temporaries) while those VECs still read and write them, so
    they live through it (`plan_act`). Exact and without hazards; without the longer lifetimes the model's
    outputs differ (the conv's output overwrote the pool's input)."""
    t = load_target(target)
    n = t["array"]["rows"]
    b = QBuilder(seed=0)
    x = b.input("x", (1, 6, 12, 12), zp=-3)
    p = b.maxpool(b.conv(x, n, relu=True), 2, 2)
    z = b.conv(x, n + 3, k=1, pads=[0] * 4)
    g = b.output(p, b.conv(z, 5, k=1, pads=[0] * 4))
    pin = build_tile(g, t, hdl=False).report["schedule"][0]
    art = check_exact(g, t, pin=[dict(pin, fuse_pools=True)])
    assert art.report["schedule"][0]["fuse_pools"]
    _, pool, nxt, _ = art.report["layers"]
    assert pool["fused_into"] and pool["end"] > nxt["start"]   # (its last VECs went into the next conv)
    bad = _hazards(art, t)
    assert bad == [], bad[:5]


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_a_one_row_input_loads_in_column_chunks(target):
    """A one-row model input read by a folded conv (`Codegen.in_cols`) loads in column chunks, and each GEMM waits
    for the chunks holding the columns it reads only: the first GEMM streams before the input's last LOAD has ended.
    Exact, and no ACT hazard on the timeline (every GEMM's lines loaded before it reads them)."""
    t = load_target(target)
    n = t["array"]["rows"]
    b = QBuilder(seed=21)
    x = b.input("x", (1, n, 1, 1024), zp=4)
    g = b.output(b.conv(x, 2 * n, k=(1, 5), pads=[0, 2, 0, 2], relu=True))
    art = check_exact(g, t)
    assert art.report["layers"][0]["fold"]
    prog, res = _timeline(art, t)
    loads = [k for k, i in enumerate(prog) if i.op == Op.LOAD and i.get("mem") == Mem.ACT]
    first = next(k for k, i in enumerate(prog) if i.op == Op.GEMM)
    assert len(loads) >= 4 and res.start[first] < max(res.end[k] for k in loads)
    bad = act_hazards(prog, res, t["scratchpad"]["act_lines"]) + post_hazards(prog, t)
    assert bad == [], bad[:5]


@pytest.mark.parametrize("target", ["tile8x8", "tile32x32"])
def test_no_act_hazards_around_a_channel_concat(target):
    """The Concat's VEC copies, or its parts' PPUs writing it in place, against the GEMMs reading its output and the
    halo FILLs (`test_schedule._random_concat_graph`)."""
    from test_schedule import _random_concat_graph

    t = load_target(target)
    rng = np.random.default_rng(77)
    for it in range(4):
        g = _random_concat_graph(rng, QBuilder(seed=700 + it), t["array"]["rows"], shared=it % 2 == 1)
        art = build_tile(g, t, hdl=False)
        bad = _hazards(art, t)
        assert bad == [], bad[:5]
