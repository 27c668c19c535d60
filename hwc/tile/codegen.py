"""The tile scheduler: tile layers -> a command stream, a DRAM image and a memory map.

Pipeline (one function each):
1. `assign_geometry`: every ACT tensor gets the padding its consumers need (a halo
   filled with its zero point, or -128 for max pooling; a max pool beside a padded conv of an
   unclamped tensor reads real pixels only) and residual pairs share one geometry so one VEC
   instruction walks both.
2. `plan_act`: ACT lines for every tensor, shared between tensors whose lifetimes (in
   layers) do not overlap (hwc.lower.memplan, unit = lines).
3. `emit_*`: per layer, the compute instructions, grouped by the weight blocks they use.
   Convolution: for each output-channel block (cob), for each pixel tile (as many output
   rows as the accumulators hold), one GEMM per nonzero weight block (tap ky,kx x input
   block), the first resetting the accumulators; then one PPU writes the requantized
   lines into the output's grid.
4. `finalize` (`hwc.tile.place`): the LOADs and STOREs placed around the compute groups. Weight
   groups alternate between the two WGT banks; group k+1 loads behind group k's first GEMM (no
   GEMM reads the bank group k-1 used by then), so every weight load after the first overlaps
   compute. A compute instruction waits for the LOAD unit only when it needs the most recently
   issued LOAD (all earlier ones are complete by then: the LOAD unit is serial). A model input
   loads in row chunks per channel block, in the order the first layer's GEMMs read them; the
   params load in parts, the first layer's behind its first loads.

v2 (post unit): a layer's output halo FILLs are dripped between later GEMMs where POST is
idle (at most into the consumer layer, whose GEMMs take the FILLs they read first), instead
of a batch that would block the in-order issue; depthwise layers pick one of four schedules
(docs/tile-v2.md, "Depthwise schedules").

Timing and semantics of every instruction: docs/tile.md; encoding: hwc/isa.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from hwc import isa
from hwc.errors import UnsupportedError
from hwc.isa import Op, VecOp, Wait
from hwc.lower.memplan import Interval, check_plan, lower_bound, naive_total, peak, plan_best
from hwc.tile.bands import ActOverflow, RowTooWide
from hwc.tile.layers import (
    DWS_OF,
    MAX_PHASES,
    AddLayer,
    ConcatLayer,
    ConvLayer,
    GapLayer,
    MaxPoolLayer,
    TilePlan,
    TileTensor,
    dw_post_pairs,
    reads,
)

INT8_MIN = -128
#: A model input is loaded per channel block in about this many row chunks (a first-layer GEMM waits for
#: the chunks it reads only), each of at least MIN_CHUNK_LINES lines (a LOAD costs a bus latency).
INPUT_CHUNKS = 8
MIN_CHUNK_LINES = 64
#: A tensor's halo between its first and last rows (a row's right pad and the next row's left pad) is filled by
#: strided FILLs of up to this many runs: one FILL per row cost its issue overhead per row on POST.
HALO_ROWS_PER_FILL = 16
#: The first weight group grows over its layer while its weights load in at most 1/FIRST_GROUP_SHARE of its
#: estimated compute (`Codegen.weighted`).
FIRST_GROUP_SHARE = 4
#: v2: a convolution over one row is computed as FOLD_MIN_ROWS .. FOLD_MAX_ROWS rows of at least FOLD_MIN_WIDTH
#: pixels (`Codegen._fold_width`), so that its pixel tiles split the row.
FOLD_MIN_ROWS, FOLD_MAX_ROWS, FOLD_MIN_WIDTH = 2, 32, 8
#: The write region of a POST instruction whose region is unknown: it may write any ACT line.
_EVERYWHERE = ("*", None, -1 << 30, 1 << 30)


@dataclass
class Emitted:
    """A compute instruction and the LOADs (ids) it needs to be complete."""

    insn_args: tuple
    needs: frozenset = frozenset()
    layer: int = -1
    wait: Wait = Wait.NONE     # explicit waits (hazards on units other than LOAD)
    writes: tuple | None = None  # POST: the ACT region it writes (tensor, block or None, first row, end row)
    reads: tuple | None = None   # a GEMM: the ACT region it reads (`Codegen._first_chunk`)


@dataclass
class Group:
    """Compute instructions using one set of weight blocks (None: no weights)."""

    blocks: list[bytes] | None
    compute: list[Emitted] = field(default_factory=list)
    index: dict[bytes, int] = field(default_factory=dict)   # block bytes -> position (dedup)
    bank: int = 0
    load_id: int = -1
    est: int = 0      # estimated compute cycles (for sizing the next group's load)
    layer: int = -1   # the layer that opened it
    block_bytes: int = 0  # bytes of one block (0: a block is whatever `block` is given)

    def block(self, data: bytes) -> int:
        """The position of weight `data` in the group (appended if new). A GEMM.dw9 weight is two blocks, the
        second's first row the ninth PE's weights: consecutive positions, the GEMM naming the first."""
        if data not in self.index:
            self.index[data] = len(self.blocks)
            size = self.block_bytes or len(data)
            self.blocks += [data[i:i + size] for i in range(0, len(data), size)]
        return self.index[data]


@dataclass
class TileProgram:
    program: list[isa.Insn]         # (bytes, as isa.to_bytes, in the candidate search's worker answers)
    dram: bytearray                 # constant image: params + weight groups
    dram_regions: list[dict]        # name, offset, size, kind
    inputs: dict[str, int]          # tile tensor -> DRAM byte offset
    outputs: dict[str, int]
    dram_bytes: int                 # total DRAM footprint incl. inputs and outputs
    act_plan: dict                  # ACT memory report (lines)
    layers: list[dict]              # per layer: name, op, macs, instruction range
    insn_layer: list[int]           # layer index of every instruction (-1: none)
    emitted_at: dict = field(default_factory=dict)   # (group, index in it) -> instruction of each compute one
    views: dict = field(default_factory=dict)        # input -> the `views.Piece`s its LOADs read (no DRAM region)
    wgt_layer: dict = field(default_factory=dict)    # weight LOAD instruction -> {layer: its share of the blocks}


def _input_chunks(t: TileTensor, step: int) -> list[tuple[int, int, int, int]]:
    """A model input's LOAD chunks (b0, b1, r0, r1): rows [r0, r1) of channel blocks [b0, b1), `step` rows each,
    so that the first layer starts on the first rows while the next ones load. A tensor whose channel block is
    fewer than MIN_CHUNK_LINES lines and unpadded in ACT (an FC layer's input: a line per sample) loads several
    whole blocks per chunk instead: a LOAD costs about LOAD_OVERHEAD + LM cycles besides its beats."""
    if t.h * t.w < MIN_CHUNK_LINES and t.hp == t.h and t.wp == t.w:
        per = -(-MIN_CHUNK_LINES // (t.h * t.w))
        return [(b, min(t.cb, b + per), 0, t.h) for b in range(0, t.cb, per)]
    return [(cb, cb + 1, r, min(t.h, r + step)) for r in range(0, t.h, step) for cb in range(t.cb)]


def _widest_pads(ts: list[TileTensor]) -> bool:
    """Give tensors that share one geometry (a residual add's operands and output, an in-place Concat's parts and
    output) each side's largest pad; whether any changed."""
    changed = False
    for k in range(4):
        m = max(t.pads[k] for t in ts)
        for t in ts:
            if t.pads[k] != m:
                t.pads[k], changed = m, True
    return changed


def _column_chunks(t: TileTensor) -> list[tuple[int, int, int, int]]:
    """The LOAD chunks (b, b + 1, x0, x1) of a one-row input a folded convolution reads (`Codegen._fold_width`):
    columns [x0, x1) of channel block b, in about INPUT_CHUNKS pieces of at least MIN_CHUNK_LINES lines."""
    step = max(MIN_CHUNK_LINES, -(-t.w // INPUT_CHUNKS))
    return [(cb, cb + 1, x, min(t.w, x + step)) for x in range(0, t.w, step) for cb in range(t.cb)]


class Codegen:
    #: the depthwise schedules `_dw_plan` prices (docs/tile-v2.md, "Depthwise schedules")
    DW_MODES = ("diag", "rows", "cols", "image", "pitch", "pitch+", "pcols", "pitch2")

    def __init__(self, plan: TilePlan, target: dict, double_buffer: bool = True, dram_base: int = 0,
                 tiling: str = "cost", lag_ppu: bool = True, bus_groups: bool = False, fuse_pools: bool = True,
                 col_chunks: bool = True):
        feats = target["features"]  # (validated: hwc/targets/tile_schema.py fills the defaults)
        self.post_unit = feats["post_unit"]   # v2: PPU/VEC/FILL overlap the array
        self.depthwise = feats["depthwise"]   # v2: GEMM.dw
        self.dw_lines = target["scratchpad"]["dw_line_buffer"]  # GEMM.dwp rows
        self.dw9 = feats["dw_ninth_tap"]      # GEMM.dw9: column 8 of a row-buffer GEMM on 8 columns
        self.dw_post = feats["dw_post"]       # PPU.dw: a 3x3 depthwise stage in the post-processing
        self.fused_dws: dict[int, ConvLayer] = {}   # conv layer index -> the depthwise layer its PPU.dw computes
        self.dw_layouts: dict[int, tuple[int, int, int]] = {}   # conv layer index -> `_dw_layout` of its pair
        self.tiling = tiling          # v2 pixel-tile policy: "cost" (model), "quarter" or "max"
        self.bus_groups = bus_groups  # weight groups after a bus-bound one grow to the bank (`weighted`)
        self.bus_bound = False        # (set by `weighted`: some group was sized behind a bus-bound one)
        self._wbeats = None           # (`_weight_beats`)
        self._halo_pending = None     # v2: output halo FILLs wait for the layer's first PPU
        self._drip: list[tuple] = []  # v2: halo FILL runs not yet emitted (dripped between GEMMs)
        self._clock = [0, 0]          # v2: estimated GEMM stream time, estimated time POST is free
        self._recent = [0] * isa.PPU_MAX_LAG  # v2: the estimated array cycles of the latest GEMMs
        self.timing = isa.Timing.from_target(target)
        t = self.timing
        # v2: GEMM cycles a lag PPU's GEMMs ahead must stream so that the next GEMM issues behind the PPU in time
        # (the PPU waits for the GEMM before them to complete, the next one then preloads)
        self._lag_cover = t.GEMM_LATENCY + t.IDLE_LAG + 1 + t.PRELOAD + t.GEMM_SETUP
        self._post_writes = None      # v2: lines the last POST instruction writes (None: nothing pending)
        self._post_before = None      # v2: the one's before it, when both are PPU.dw (its drain overlaps the last)
        self._last_dw = None          # v2: the last POST instruction when it is a PPU.dw (its Emitted)
        self._acc_slot = 0   # v2: the accumulator slot of the next pixel tile (`_next_acc`)
        self._later_post = None       # v2: a PPU (and fused add) to emit behind the next GEMM, with PPU.lag
        self._later_region = None     # v2: what that PPU writes, when it is the previous layer's (None: this one's)
        self._later_add = None        # v2: (GEMMs of the tile to emit first, the fused add of a lag PPU)
        self._tail = None             # v2: ((tensor, block, first row, end row), cycles) the last PPU (+add) writes
        self.lag_ppu = self.post_unit and lag_ppu
        self.fuse_pools = fuse_pools  # v2: a max pool after a conv runs during it (`_fusable_pools`)
        self.fused_pools: dict[int, MaxPoolLayer] = {}
        self.pool_spill: set[int] = set()
        self.plan = plan
        self.dram_base = dram_base  # byte address of this program's data in external memory (beat aligned)
        self.double_buffer = double_buffer
        self.t = target
        self.n = target["array"]["rows"]
        sp = target["scratchpad"]
        self.act_lines, self.acc_lines = sp["act_lines"], sp["acc_lines"]
        # v2: the accumulators in three slots, taken in turn by consecutive pixel tiles, when every output row fits
        # a third (else two). A tile's PPU is emitted at the latest among the next tile's GEMMs, and POST runs one
        # instruction at a time in program order: so when tile t+3's first GEMM issues, PPU t+1 has issued and
        # PPU t, which read the slot that GEMM writes, has finished (a PPU.dw behind a PPU.dw: has read it all).
        # With two slots the first GEMM of every tile waits for POST instead (the lag PPU two tiles back reads its
        # slot): ResNet-8 201,293 -> 200,348 cycles on tile8x8, 17,398 -> 17,126 on tile32x32; DS-CNN tile32x32
        # 5,346 -> 5,234; MobileNet tile32x32 26,319 -> 26,065 (tile8x8 134,701 -> 134,826: its smaller tiles).
        self.folds: dict[str, int] = {}   # v2: conv layer name -> its fold (`_fold_width`)
        self._concat_candidates: list[ConcatLayer] = []
        self.in_place: dict[str, ConcatLayer] = {}   # Concats their parts' producers write (`_alias_concats`)
        widest = max((plan.tensors[layer.dst].w for layer in plan.layers if isinstance(layer, ConvLayer)), default=0)
        self.acc_slots = 3 if widest <= self.acc_lines // 3 else 2
        self.bank_blocks, self.param_entries = sp["wgt_bank_blocks"], sp["param_entries"]
        self.beat = target["bus"]["bytes"]
        self.peb = isa.param_entry_beats(self.n, self.beat)
        self.groups: list[Group] = []
        self.params: list[bytes] = []
        self.param_index: dict[bytes, int] = {}
        self.neg_entries: set[int] = set()   # first entries of PPU.neg pairs (`param`)
        self.layer = -1
        # model input -> its LOAD chunks: (first channel block, end channel block, first row, end row)
        self.in_chunks: dict[str, list[tuple[int, int, int, int]]] = {}
        self.in_cols: set[str] = set()   # model inputs whose chunks are columns of their one row (`_column_chunks`)
        self.col_chunks = col_chunks     # (whether such inputs are chunked so)
        self.temps: list[tuple[TileTensor, int]] = []   # (tensor, layer step) scratch for max pooling

    # ---- helpers ------------------------------------------------------------------------------
    def tensor(self, name: str) -> TileTensor:
        return self.plan.tensors[name]

    def param(self, bias, mult, shift, z_out: int, lo: int, hi: int, mult_neg=None) -> int:
        """The PARAM entry of a requantization (deduplicated). With `mult_neg` (a fused LeakyReLU) two consecutive
        entries, the second holding the multipliers of negative lanes (isa.pack_neg_entry): every PPU reading it
        is a PPU.neg (`compute`)."""
        data = self._entry_bytes(bias, mult, shift, z_out, lo, hi)
        if mult_neg is not None:
            data += isa.pack_neg_entry(self._lanes(mult_neg, 1 << 30), self.n, self.beat)
        if data not in self.param_index:
            self.param_index[data] = len(self.params)
            if mult_neg is None:
                self.params.append(data)
            else:
                half = len(data) // 2
                self.neg_entries.add(len(self.params))
                self.params += [data[:half], data[half:]]
        return self.param_index[data]

    def _lanes(self, v, fill) -> np.ndarray:
        """A per-lane parameter padded to the N lanes with `fill`."""
        out = np.full(self.n, fill, np.int64)
        v = np.asarray(v).reshape(-1)
        out[:len(v)] = v
        return out

    def _entry_bytes(self, bias, mult, shift, z_out: int, lo: int, hi: int) -> bytes:
        lanes = self._lanes
        return isa.pack_param_entry(lanes(bias, 0), lanes(mult, 1 << 30), lanes(shift, 1), z_out, lo, hi, self.n,
                                    self.beat)

    def param_dw(self, conv: ConvLayer, dw: ConvLayer, lanes: slice, dwf: int = 0) -> int:
        """PPU.dw's three consecutive PARAM entries for output block `lanes` of `conv` followed by depthwise `dw`:
        the conv's requantization (its z_out is the depthwise layer's padding), the depthwise layer's, and its
        taps (byte (3 ky + kx) N + lane)."""
        n = self.n
        first = self._entry_bytes(conv.bias[lanes], conv.mult[lanes], conv.shift[lanes], conv.z_out, conv.lo, conv.hi)
        plain = dw.plain or dw
        c = plain.weight.shape[0]
        # PPU.dwf: lane l is channel l mod c of a pixel (c lanes a pixel); else lanes past the channels are an
        # input padded to N channels (`layers.space_to_depth(padded=...)`)
        tiled = dwf and dw.plain is None   # (a stacked layer's requantization is per stacked channel already)
        bias, mult, shift = (np.tile(v, n // c) if tiled else v for v in (dw.bias, dw.mult, dw.shift))
        second = self._entry_bytes(bias[lanes], mult[lanes], shift[lanes], dw.z_out, dw.lo, dw.hi)
        taps = np.zeros((3, 3, n), np.int8)
        ch = np.arange(lanes.start, lanes.stop)
        ch = ch % c if dwf else ch[ch < c]
        taps[:, :, :len(ch)] = plain.weight[ch, ch].transpose(1, 2, 0)
        raw = taps.tobytes()
        third = raw + bytes(len(first) - len(raw))
        key = first + second + third
        if key not in self.param_index:   # (a group of three: its entries are consecutive)
            self.param_index[key] = len(self.params)
            self.params += [first, second, third]
        return self.param_index[key]

    def _fusable_dws(self) -> dict[int, ConvLayer]:
        """features.dw_post: conv layer index -> the 3x3 depthwise layer right after it that is the only reader of
        its output (and whose own output is not the operand of a residual add fused into it: `_fusable_adds` would
        emit that add with the depthwise layer, which is not emitted); the conv's PPU.dw then computes the depthwise
        layer from its requantized output (docs/tile-v2.md,
        "Depthwise in the post-processing"). The conv's output is never stored: pixel tiles of row bands
        (`_dw_bands`), a padded row within the row buffers, laid out as `_dw_layout` takes."""
        out = {}
        for i, dw in dw_post_pairs(self.plan).items():
            if i in self.fused_adds or (i + 1) in self.fused_adds:
                continue
            mid = self.tensor(self.plan.layers[i].dst)
            layout = self._dw_layout(mid, dw)
            if layout is None:
                if mid.s2d > 1 and dw.plain is None:
                    raise UnsupportedError(f"layer {dw.name!r}: its input was laid out for PPU.dw, which cannot "
                                           f"take it (internal: layers.dw_post_flat and Codegen._fusable_dws "
                                           f"disagree)", [dw.name])
                continue
            out[i] = dw
            self.dw_layouts[i] = layout
            mid.pads, mid.fill, mid.tail = [0, 0, 0, 0], None, 0   # (never written: no halo)
        return out

    def _dw_layout(self, mid: TileTensor, dw: ConvLayer) -> tuple[int, int, int] | None:
        """How PPU.dw takes `mid`, the input of depthwise layer `dw`: (pixel phases, PPU.dwf, row pitch - 1 in
        positions), or None. One pixel per line: (1, 0, width). Stacked, laid out for it
        (`layers.space_to_depth(flat=...)`: `dw` reads it one pixel per line, was not rewritten), of k blocks a line
        (N channels a pixel, or N / 2 for a stride-2 layer: q = 1 or 2 pixels a block): output block b of the conv
        goes to accumulator line k X + b (`emit_conv`), so the accumulators hold the row in pixel order, q pixels a
        line: (k, log2 q, k x width). Stacked f = 2 or 4 pixels of N / f lanes in one block, the depthwise layer's
        output stacked alike, stride 1: PPU.dwf shifts the window by N / f lanes (1, log2 f, lines)."""
        dst, f, n = self.tensor(dw.dst), mid.s2d, self.n
        plain = dw.plain or dw
        if f == 1:
            layout, ok = (1, 0, mid.w), dst.s2d == 1
        elif dw.plain is None:   # (k blocks a stacked line, q pixels a block: q = 2 takes a stride-2 layer only)
            k, c = max(1, mid.c // n), plain.weight.shape[0]
            q = f // k
            layout = (k, q.bit_length() - 1, mid.w * k)
            ok = (mid.c == k * n and f == k * q and (q == 1 or (q == 2 and c * 2 == n and plain.strides == (2, 2)))
                  and mid.shift == 0 and mid.w * f == mid.w0 and dst.s2d == 1 and k <= MAX_PHASES)
        else:
            layout = (1, f.bit_length() - 1, mid.w)
            ok = (f in (2, 4) and dst.s2d == f and mid.c == dst.c == n and mid.shift == dst.shift == 0
                  and mid.w * f == mid.w0 and dst.w * f == dst.w0 and DWS_OF[plain.strides, tuple(plain.pads)] == 0)
        width = layout[2]
        ok = ok and isa.DWP_MIN_PITCH <= width + 1 <= self.dw_lines and min(mid.h, 4) * width <= self._acc_cap()
        return layout if ok else None

    def last(self) -> Group:
        """The group compute is appended to (instructions keep program order)."""
        if not self.groups:
            self.groups.append(Group(None))
        return self.groups[-1]

    def weighted(self, blocks: list[bytes]) -> Group:
        """The last group if it is weighted and has room for `blocks`, else a new one."""
        g = self.groups[-1] if self.groups else None
        if g is not None and g.blocks is not None:
            new = {b for b in blocks if b not in g.index}
            grown = len(g.blocks) + sum(len(b) // (self.n * self.n) for b in new)   # (a GEMM.dw9 weight: two)
            # A group's load overlaps the previous group's compute: grow it only while its load
            # (N beats a block) fits in that compute time, so that every load after the first hides.
            # (The first group's load cannot hide: it holds a single request.)
            prev = [x for x in self.groups[:-1] if x.blocks is not None]
            budget = prev[-1].est if prev else 0
            if len(prev) >= 2 and prev[-1].est < len(prev[-1].blocks) * self.n \
                    and budget < self.bank_blocks * self.n \
                    and self._weight_beats() - (sum(len(x.blocks) for x in prev) + grown) * self.n >= 2 * g.est:
                # The previous group's load outlasted its compute: the bus bounds this stretch, no load hides, and
                # each LOAD's fixed 11-19 cycles (overhead and latency) every few blocks add up. The search's
                # `bus_groups` candidate grows such groups to the bank. Not where the loads still to come (about)
                # would not cover twice this group's compute: behind the last loads a big group's compute (a PPU
                # between each of its layers) is exposed. FC autoencoder, tile8x8 / tile32x32 / tile32x32 at batch
                # 8: 38,427 / 10,399 / 10,873 cycles before; grown to 1,024 beats without this guard 36,659 /
                # 9,467 / 9,920, with it 36,275 / 9,435 / 9,883; to the bank (1,024 / 2,048 beats) 36,275 / 9,364 /
                # 9,817; to 512 beats 36,593 / 9,545 / 9,996.
                self.bus_bound = True
                if self.bus_groups:
                    budget = self.bank_blocks * self.n
            if len(prev) == 2:
                # the params' first part (up to all of them) loads in the same window, beside or before this group
                # (`finalize`: the shorter of it and the second group first): MobileNet tile8x8 135,185 -> 134,701
                budget -= self._param_beats()
            if len(prev) == 1:  # the bus also brings the model inputs' later chunks during the first group
                budget -= sum((b1 - b0) * (r1 - r0) * (1 if name in self.in_cols else self.tensor(name).w)
                              for name, chunks in self.in_chunks.items()
                              for b0, b1, r0, r1 in chunks[1:]) * self.n // self.beat
                if self.in_chunks and g.layer != self.layer:
                    budget = 0   # and the first group's compute waits for them: the second holds one layer
            if not g.blocks or (grown <= self.bank_blocks and grown * self.n <= budget):
                return g
            # The first group may take more of the first layer's weights, when they load in a small share of the
            # compute before them and in less time than the params, which otherwise go first (when the first
            # group has no PPU) and hold the second group back: the array then computes while the bus brings the
            # params and the next groups (DS-CNN tile8x8: 49,756 -> 49,073 cycles). Not when loading is as long
            # as computing (an FC layer at a small batch).
            if not prev and g.layer == self.layer and grown <= self.bank_blocks and \
                    FIRST_GROUP_SHARE * grown * self.n <= g.est and grown * self.n <= self._param_beats():
                return g
        g = Group([], layer=self.layer, block_bytes=self.n * self.n)
        self.groups.append(g)
        return g

    def _weight_beats(self) -> int:
        """About the beats of all the model's weights (dense blocks; a depthwise layer's diagonal ones)."""
        if self._wbeats is None:
            n, blocks = self.n, 0
            for layer in self.plan.layers:
                if isinstance(layer, ConvLayer):
                    m, c, kh, kw = layer.weight.shape
                    blocks += -(-m // n) * (1 if layer.group == c == m else -(-c // n)) * kh * kw
            self._wbeats = blocks * n
        return self._wbeats

    def _param_beats(self) -> int:
        """About the beats of all the params (one entry per output block of every layer that post-processes, two
        with a fused LeakyReLU)."""
        blocks = sum(self.tensor(layer.dst).cb * (1 + (getattr(layer, "mult_neg", None) is not None))
                     for layer in self.plan.layers if not isinstance(layer, MaxPoolLayer | ConcatLayer))
        return blocks * self.peb

    def compute(self, g: Group, opcode: Op, needs=(), wait: Wait = Wait.NONE, region=None, drip: bool = True,
                halos: bool = True, drains: bool = False, cols=None, **fields) -> None:
        """Append a compute instruction. `region` = (tensor, channel block or None for all, first row,
        end row) of the ACT lines a POST instruction writes, or a GEMM reads (v2 hazard tracking); `cols`: the
        columns a GEMM reads of a one-row input (`in_cols`).
        `drip`: pending halo FILLs may follow this GEMM (not before a GEMM that waits for POST). `halos`: a VEC
        may read or write halo lines (then every pending FILL goes first; a residual add touches none). `drains`: the
        next instruction waits for this GEMM to complete (FILLs may use POST until then)."""
        if opcode == Op.PPU and fields.get("param") in self.neg_entries:
            fields["neg"] = 1   # (its entry pair holds a fused LeakyReLU's multipliers of negative lanes: `param`)
        if opcode == Op.VEC:
            pieces = _vec_legal(fields)
            if len(pieces) > 1:   # (rows wider than its fields: one VEC a row and piece)
                for k, piece in enumerate(pieces):
                    self.compute(g, opcode, needs, wait if k == 0 else Wait.NONE, region, drip, halos, drains,
                                 **piece)
                return
            fields = pieces[0]
        if self.post_unit:
            # v2 hazards (docs/tile-v2.md): a PPU reads accumulators GEMMs write, a FILL may overwrite
            # lines in-flight GEMMs still read: both wait for COMPUTE. A GEMM waits for POST only when it
            # reads lines the last POST instruction writes: that one is the only POST work possibly in flight
            # (when a POST instruction issues, every earlier one has finished), but for a PPU.dw after a PPU.dw,
            # which may issue while the one before drains its second pipe: a GEMM reading what that one writes
            # makes the PPU.dw after it wait for POST instead (waiting itself, it would wait for both:
            # MobileNetV1-0.25 tile32x32 12,106 cycles against 11,942).
            if opcode == Op.FILL or (opcode == Op.PPU and not fields.get("lag")):
                wait |= Wait.COMPUTE
            if opcode == Op.GEMM:
                self._fills_before(g, region)
            elif opcode == Op.VEC and halos:
                self.flush_fills(g)
            elif opcode == Op.PPU:
                self._next_input_fills(g)
            if opcode == Op.GEMM and _overlaps(region, self._post_before):
                self._last_dw.wait |= Wait.POST
                self._post_before = None
            if opcode == Op.GEMM and _overlaps(region, self._post_writes):
                wait |= Wait.POST
            if wait & Wait.POST:
                self._post_writes = self._post_before = None
            if opcode in (Op.PPU, Op.VEC, Op.FILL):
                dw = bool(opcode == Op.PPU and fields.get("dw"))
                self._post_before = self._post_writes if dw and self._last_dw is not None else None
                self._post_writes = region if region is not None else _EVERYWHERE
            if opcode == Op.PPU and self._halo_pending is not None:
                # The layer's output halos: this first PPU waits for COMPUTE, so every GEMM before it (the
                # earlier layers', which may read lines aliasing the output) has finished; the GEMMs after it
                # read this layer's input only. So the FILLs need no wait: they are dripped between later
                # GEMMs where POST is idle (a batch of them would block the in-order issue of GEMMs).
                pending, self._halo_pending = self._halo_pending, None
                for t in pending:
                    self._drip += [(self.layer, *run) for run in self._halo_runs(t)]
            self._estimate(opcode, fields, wait)
        if opcode == Op.GEMM and region is not None and region[0] in self.in_chunks:
            needs = self._needed_chunks(needs, region, cols)
        writes = (region or _EVERYWHERE) if opcode in (Op.PPU, Op.VEC, Op.FILL) else None
        g.compute.append(Emitted((opcode, fields), frozenset(needs), self.layer, wait, writes,
                                 region if opcode == Op.GEMM else None))
        if self.post_unit and opcode in (Op.PPU, Op.VEC, Op.FILL):
            self._last_dw = g.compute[-1] if opcode == Op.PPU and fields.get("dw") else None
        lines = _lines(fields)
        # the group's compute time, which the next group's LOAD must fit in: the array's (v2: the PPU and VEC run
        # beside it; counting them made groups too large to load in time: DS-CNN tile32x32 41.7 -> 43.6% without)
        if opcode == Op.GEMM:
            g.est += self._gemm_cycles(lines)
        elif not self.post_unit:
            g.est += {Op.PPU: lines + 20, Op.VEC: 3 * lines + 15}.get(opcode, lines + 2)
        if opcode == Op.GEMM and self._drip and drip:
            self._drip_fills(g, lines, drains)

    def _gemm_cycles(self, lines: int) -> int:
        """Cycles a GEMM of `lines` occupies the array in a back-to-back run: its stream, at least its
        successor's weight preload (PRELOAD + GEMM_SETUP) plus the issue cycle."""
        return max(lines, self.timing.PRELOAD + self.timing.GEMM_SETUP + 1)

    def _needed_chunks(self, needs, region, cols=None) -> tuple:
        """A GEMM reading rows [y0, y1) of channel block cb (None: all) of a model input needs only the
        input's LOAD chunks holding them; of a one-row input chunked by columns (`in_cols`), the chunks holding
        the columns `cols` it reads (None: all)."""
        name, cb, y0, y1 = region
        if name in self.in_cols:
            y0, y1 = cols or (-1 << 30, 1 << 30)
        keep = [d for d in needs if not (isinstance(d, tuple) and d[0] == name)]
        return tuple(keep) + tuple((name, c) for c, (b0, b1, r0, r1) in enumerate(self.in_chunks[name])
                                   if r0 < y1 and y0 < r1 and (cb is None or b0 <= cb < b1))

    def _estimate(self, opcode: Op, fields: dict, wait: Wait = Wait.NONE) -> None:
        """v2: a rough clock of the GEMM stream and of POST, to place dripped FILLs where POST is idle."""
        t, lines = self.timing, _lines(fields)
        if opcode == Op.GEMM:
            if wait & Wait.POST:
                self._clock[0] = max(self._clock)
            self._recent = self._recent[1:] + [self._gemm_cycles(lines)]
            self._clock[0] += self._recent[-1]
            return
        start = self._clock[1]
        if opcode == Op.PPU and fields.get("dw") and self._last_dw is not None:   # (issues while that one drains)
            start -= t.PPU_DW_DRAIN
        if opcode == Op.PPU and fields.get("lag"):  # waits for the GEMMs before the latest `lag` ones
            start = max(start, self._clock[0] - sum(self._recent[-fields["lag"]:]) + t.GEMM_LATENCY)
        if wait & Wait.COMPUTE:  # waits for the GEMMs to drain
            start = max(self._clock[0] + t.GEMM_LATENCY, self._clock[1])
            self._clock[0] = start + t.PRELOAD + t.GEMM_SETUP
        self._clock[1] = start + _post_busy(t, opcode, fields) + 1

    def _drip_fills(self, g: Group, lines: int, drains: bool = False) -> None:
        """After a GEMM streaming `lines`: as many pending halo FILLs as POST can take (idle by the GEMM's
        start, estimated) while the next GEMM's issue may still wait (about lines - PRELOAD cycles; `drains`: until
        the GEMM completes)."""
        t = self.timing
        gemm_start = self._clock[0] - self._gemm_cycles(lines)
        # the next GEMM must issue by about gemm_start + lines - PRELOAD; FILLs issue once POST is free
        room = gemm_start + lines + (t.GEMM_LATENCY if drains else -t.PRELOAD - 4) - max(self._clock[1], gemm_start)
        while self._drip and room > 0:
            d = self._drip.pop(0)
            room -= (_post_busy(t, Op.VEC, d[3]) if _is_vec(d) else t.FILL_OVERHEAD + d[5] * d[3]) + 2
            self._emit_drip(g, d)

    def _fills_before(self, g: Group, read) -> None:
        """Before a GEMM reading `read`: the pending FILLs up to the last one it reads (it then waits POST)."""
        last = max((k for k, d in enumerate(self._drip) if _overlaps(read, d[1])), default=-1)
        for _ in range(last + 1):
            self._emit_drip(g, self._drip.pop(0))

    def _next_input_fills(self, g: Group) -> None:
        """Before a PPU: the pending FILLs of the layer input's next channel block, so that they run on POST
        before this PPU and the next block's GEMMs need not wait for them behind it."""
        prev = [d for d in self._drip if d[0] < self.layer and not _is_vec(d)]
        if prev:
            key = prev[0][1][:2]
            take = [d for d in prev if d[1][:2] == key]
            self._drip = [d for d in self._drip if d not in take]
            for d in take:
                self._emit_fill(g, *d[1:])

    def _emit_drip(self, g: Group, d: tuple) -> None:
        """A pending entry of `_drip`: a halo FILL, or a fused max pool's VEC (`_queue_pool`)."""
        if not _is_vec(d):
            self._emit_fill(g, *d[1:])
            return
        _, region, _, fields, pool = d   # (the pool's instruction wherever it goes: the report's layer)
        self._post_writes, self._post_before, self._last_dw = region, None, None
        self._estimate(Op.VEC, fields)
        g.compute.append(Emitted((Op.VEC, fields), frozenset(), pool, Wait.NONE, region))

    def _emit_fill(self, g: Group, region, addr: int, count: int, value: int, rows: int = 1, stride: int = 0) -> None:
        self._post_writes, self._post_before, self._last_dw = region, None, None
        self._estimate(Op.FILL, {"count": rows * count})
        g.compute.append(Emitted((Op.FILL, {"addr": addr, "count": count, "value": value, "rows": rows,
                                            "stride": stride}), frozenset(),
                                 self.layer, Wait.NONE, region or _EVERYWHERE))
        # (the group estimate counts dripped FILLs, unlike PPU/VEC: without them MobileNet tile32x32 measured
        # 22.1 -> 21.8%, DS-CNN tile8x8 78.8 -> 79.1%)
        g.est += rows * count + 2

    def flush_fills(self, g: Group | None = None, before: int | None = None) -> None:
        """v2: the pending halo FILLs (of layers before `before`; None: all). A layer's output halo may be
        pending into its consumer (that layer's GEMMs take the FILLs they read first) but not beyond:
        the tensor's lines may be reused once its consumers are done."""
        while self._drip and (before is None or self._drip[0][0] < before):
            self._emit_drip(g or self.last(), self._drip.pop(0))

    # ---- 1. geometry --------------------------------------------------------------------------
    def assign_geometry(self) -> None:
        floor: dict[str, int] = {}    # the smallest code a layer's output can hold (its clamp)
        for layer in self.plan.layers:
            if isinstance(layer, ConvLayer | GapLayer):
                floor[layer.dst] = layer.lo
            elif isinstance(layer, AddLayer):
                floor[layer.dst] = layer.attrs.get("lo", INT8_MIN)
            elif isinstance(layer, MaxPoolLayer):
                floor[layer.dst] = floor.get(layer.src, INT8_MIN)
            elif isinstance(layer, ConcatLayer):
                floor[layer.dst] = min(floor.get(x, INT8_MIN) for x in layer.srcs)
        for layer in self.plan.layers:
            if isinstance(layer, ConvLayer):
                t = self.tensor(layer.src)
                t.need_pads(layer.pads, t.zp, layer.name)
        self.edge_pools: set[str] = set()
        for layer in self.plan.layers:
            if isinstance(layer, MaxPoolLayer):
                # a max pool's halo may hold any value no larger than every pixel: the convolutions' zero
                # point serves when the tensor is clamped at or above it (a ReLU) and every window holds a
                # pixel (pads smaller than the window). When the halo holds a larger value for another reader,
                # the max pool reads real pixels only: its edge windows over their taps inside the tensor
                # (`emit_maxpool`), at a few more VEC commands and no halo of its own.
                kh, kw = layer.kernel
                whole = all(p < k for p, k in zip(layer.pads, (kh, kw, kh, kw)))
                t = self.tensor(layer.src)
                serves = floor.get(layer.src) if whole else None
                if (whole and any(layer.pads) and t.fill is not None and t.fill != INT8_MIN
                        and not (serves is not None and t.fill <= serves)):
                    self.edge_pools.add(layer.name)
                    t.pads[1] = max(t.pads[1], layer.pads[1])   # (the temporaries hold windows from column -pl)
                    continue
                t.need_pads(layer.pads, INT8_MIN, layer.name, serves)
        concats = [layer for layer in self.plan.layers if isinstance(layer, ConcatLayer)]
        made = {layer.dst: layer for layer in self.plan.layers}
        parts = [p for layer in concats for p in layer.srcs]
        # Concats whose parts' producers may write the output in place (`_alias_concats`): every part made by a tile
        # layer other than a Concat, read here only once and by no other Concat, not a segment input or output
        self._concat_candidates = [
            layer for layer in concats
            if all(p in made and not isinstance(made[p], ConcatLayer) and parts.count(p) == 1
                   and p not in self.plan.inputs and p not in self.plan.outputs for p in layer.srcs)]
        changed = True
        while changed:  # residual operands and their output share one geometry; so do in-place Concats' parts
            changed = False
            for layer in list(self._concat_candidates):
                ts = [self.tensor(p) for p in layer.srcs] + [self.tensor(layer.dst)]
                fills = {t.fill for t in ts if t.fill is not None}
                if len(fills) > 1:   # (one halo value for every part: else copies)
                    self._concat_candidates.remove(layer)
                    continue
                changed |= _widest_pads(ts)
                for t in ts:
                    if fills and t.fill is None:
                        t.fill, changed = next(iter(fills)), True
            for layer in self.plan.layers:
                if isinstance(layer, AddLayer):
                    ts = [self.tensor(layer.a), self.tensor(layer.b), self.tensor(layer.dst)]
                    changed |= _widest_pads(ts)
                    for t in ts:
                        if t.fill is None and any(t.pads):
                            t.fill = t.zp
        for t in self.plan.tensors.values():
            t.share_pad_column()

    def _alias_concats(self) -> dict[str, ConcatLayer]:
        """Concats whose parts' producers write the output in place: each part is the output's channel blocks from
        its first on (TileTensor.whole, cb0; it lives as long as the output, `plan_act`), so the Concat costs no
        instruction. A candidate (`assign_geometry`: the parts and the output given one geometry and halo) whose
        geometry still differs (a pad column shared by one and not another), whose part a PPU.dw writes or a folded
        convolution computes, keeps its VEC copies (`emit_concat`)."""
        out = {}
        mids = {self.plan.layers[i].dst for i in self.fused_dws} | {dw.dst for dw in self.fused_dws.values()}
        folded = {layer.dst for layer in self.plan.layers if layer.name in self.folds}
        for layer in self._concat_candidates:
            o = self.tensor(layer.dst)
            ts = [self.tensor(p) for p in layer.srcs]
            geo = lambda t: (t.pads, t.tail, t.h, t.w, t.s2d, t.fill, t.n)   # noqa: E731
            if any(geo(t) != geo(o) or t.name in mids or t.name in folded for t in ts) or o.s2d != 1:
                continue
            first = 0
            for t in ts:
                t.whole, t.cb0 = o.name, first
                first += t.cb
            out[layer.name] = layer
        return out

    # ---- 2. ACT memory plan ---------------------------------------------------------------
    def _fold_width(self, i: int, layer) -> int | None:
        """v2: a convolution over one row (a 1-d signal) has one pixel tile per output block: its PPU, and its
        fused max pool's VECs, then have no later GEMMs of the layer to run beside. Folded, the row is computed
        as rows of `w` pixels (a divisor of its width): row j of the fold is pixels j w .. j w + w - 1, whose
        inputs follow each other in the row's lines (`_gemm_fields`, `_ppu_fields`), so pixel tiles of a few
        fold rows split the row. None: not folded (other layouts; fewer than FOLD_MIN_ROWS rows of at least
        FOLD_MIN_WIDTH pixels). The most rows up to FOLD_MAX_ROWS, or for a row that needs more to fit an accumulator
        slot, the fewest that do."""
        if not (self.post_unit and isinstance(layer, ConvLayer)) or i in self.fused_dws or i in self.fused_adds:
            return None
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        if not (src.h == dst.h == 1 and layer.weight.shape[2] == 1 and src.s2d == dst.s2d == 1 and dst.shift == 0
                and src.shift == 0 and layer.group == 1 and layer.pads[0] == layer.pads[2] == 0
                and layer.weight.shape[:2] != (1, 1)):   # (one channel: the depthwise mode's)
            return None
        wo, cap = dst.w, self._acc_cap()   # (a fold row must fit an accumulator slot: more rows for wide ones)
        ok = [k for k in range(FOLD_MIN_ROWS, min(wo // FOLD_MIN_WIDTH, 4095) + 1)
              if wo % k == 0 and wo // k <= cap]
        rows = max((k for k in ok if k <= FOLD_MAX_ROWS), default=None) or min(ok, default=None)
        return None if rows is None else wo // rows

    def _fusable_adds(self) -> dict[int, AddLayer]:
        """v2: conv layer index -> the residual add right after it that reads its output: the add runs
        tile by tile after each PPU (on POST, overlapping the conv's next GEMMs) instead of after the layer."""
        out = {}
        layers = self.plan.layers
        for i in range(len(layers) - 1):
            conv, add = layers[i], layers[i + 1]
            if not (isinstance(conv, ConvLayer) and isinstance(add, AddLayer) and conv.dst in (add.a, add.b)):
                continue
            other = add.b if conv.dst == add.a else add.a
            if other == conv.dst or self.tensor(conv.dst).s2d != self.tensor(add.dst).s2d:
                continue
            out[i] = add
        return out

    def _fusable_pools(self) -> dict[int, MaxPoolLayer]:
        """v2: conv layer index -> the max pool right after it that reads its output: the pool's VECs for the rows
        of each finished pixel tile are dripped between the conv's next GEMMs (`_queue_pool`, like the halo FILLs)
        instead of running after the layer while the array idles (docs/proposal-fused-pool.md). Not a pool over
        real pixels only (`edge_pools`), nor after a conv whose PPU runs a depthwise stage or that such a stage
        computes, nor stacked pixels."""
        out = {}
        layers = self.plan.layers
        for i in range(len(layers) - 1):
            conv, pool = layers[i], layers[i + 1]
            if not (isinstance(conv, ConvLayer) and isinstance(pool, MaxPoolLayer) and pool.src == conv.dst):
                continue
            if pool.name in self.edge_pools or i in self.fused_dws or (i - 1) in self.fused_dws or i in self.fused_adds:
                continue
            if self.tensor(conv.dst).s2d != 1 or self.tensor(pool.dst).s2d != 1:
                continue
            out[i] = pool
        return out

    def _queue_pool(self, ob: int, y0: int, y1: int) -> None:
        """After the PPUs writing rows [y0, y1) of output block `ob` of the conv whose max pool is fused
        (`fused_pools`): the pool's VECs for the output rows now computable (every input row of their windows
        written), pending in `_drip` behind the PPUs (and the halo FILLs) they read. A folded conv
        (`_fold_width`) writes its one row in pieces: [y0, y1) are columns then, and a 1 x k pool's VECs go by
        output columns."""
        pool = self.fused_pools[self.layer]
        src = self.tensor(pool.src)
        spans = self._pool_rows.setdefault((self.layer, ob), [])
        spans.append((y0, y1))
        done = 0
        for a, b in sorted(spans):   # (the rows written from row 0 on, without a gap)
            if a > done:
                break
            done = max(done, b)
        dst = self.tensor(pool.dst)
        cols = self.plan.layers[self.layer].name in self.folds
        if cols and pool.kernel[0] > 1:   # (over the pads' rows too: the whole row at once)
            done, cols = (src.h if done >= src.w else 0), False
        k, s, p, size, whole = (pool.kernel[1], pool.strides[1], pool.pads[1], dst.w, src.w) if cols else \
            (pool.kernel[0], pool.strides[0], pool.pads[0], dst.h, src.h)
        p1 = size if done >= whole else max(0, min(size, (done - 1 + p - (k - 1)) // s + 1))
        p0 = self._pool_done.get((self.layer, ob), 0)
        if p1 > p0:
            self._pool_done[self.layer, ob] = p1
            # (pending into the layer after the pool when that is a conv (`pool_spill`), whose GEMMs take the VECs
            # they read first, `_fills_before`, as they take halo FILLs: the pool's last rows then run beside its
            # first GEMMs. Other readers of the pool need them done when their layer starts, `flush_fills`)
            tag = self.layer + 1 if self.layer in self.pool_spill else self.layer
            sink = lambda fields, region: self._drip.extend(   # noqa: E731
                (tag, region, "VEC", f, self.layer + 1) for f in _vec_legal(fields))
            if cols:
                self.emit_maxpool(pool, {}, self._pool_temps, cbs=[ob], out_rows=(0, 1), out_cols=(p0, p1),
                                  sink=sink)
            else:
                self.emit_maxpool(pool, {}, self._pool_temps, cbs=[ob], out_rows=(p0, p1), sink=sink)

    def _order_for_fusion(self) -> None:
        """v2: a residual add is fused with the convolution right before it, whose GEMMs hide the add's VEC
        work. In [Y, X, add(X, Y)] with X the cheaper convolution (a 1x1 shortcut) and X not reading Y, run X
        first: the add then rides on Y's GEMMs instead of following X's few alone."""
        layers = self.plan.layers
        for i in range(2, len(layers)):
            y, x, add = layers[i - 2], layers[i - 1], layers[i]
            if not (isinstance(add, AddLayer) and isinstance(x, ConvLayer) and isinstance(y, ConvLayer)):
                continue
            if {x.dst, y.dst} != {add.a, add.b} or x.src == y.dst or y.macs <= x.macs:
                continue
            if self.tensor(y.dst).s2d != self.tensor(add.dst).s2d:
                continue
            layers[i - 2], layers[i - 1] = x, y

    def plan_act(self) -> dict:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        steps = len(self.plan.layers)
        for name in self.plan.inputs:
            first[name] = 0
            last[name] = 0
        for i, layer in enumerate(self.plan.layers):
            for name in reads(layer):
                last[name] = max(last.get(name, i), i)
            first.setdefault(layer.dst, i)
            last[layer.dst] = max(last.get(layer.dst, i), i)
        for i, add in self.fused_adds.items():  # a fused add writes its output during the conv (step i)
            first[add.dst] = min(first[add.dst], i)
            for name in reads(add):
                first[name] = min(first.get(name, i), i)
        for name in self.plan.outputs:
            last[name] = steps
        for i, dw in self.fused_dws.items():   # PPU.dw writes the depthwise layer's output during the conv
            first[dw.dst] = min(first[dw.dst], i)
        for i, pool in self.fused_pools.items():   # a fused max pool writes its output during the conv
            first[pool.dst] = min(first[pool.dst], i)
            if i in self.pool_spill:   # (and maybe during the conv after it: `_queue_pool`)
                for name in (pool.src, pool.dst):
                    last[name] = max(last[name], i + 2)
        fused = {i + 1: i for i in self.fused_pools}   # (a fused pool's step -> its conv's: its temporaries too)
        ends = {i + 1: i + 2 for i in self.pool_spill}
        mids = {self.plan.layers[i].dst for i in self.fused_dws}   # (PPU.dw: never written)
        first = {k: v for k, v in first.items() if k not in mids}
        for layer in self.in_place.values():   # (its parts are its lines: one buffer from the first part's writes)
            first[layer.dst] = min(first[p] for p in [layer.dst, *layer.srcs])
            last[layer.dst] = max(last[p] for p in [layer.dst, *layer.srcs])
            for p in layer.srcs:
                del first[p]
        ivs = [Interval(n, self.tensor(n).lines, first[n], last[n]) for n in first]
        ivs += [Interval(t.name, t.lines, fused.get(step, step), ends.get(step, step)) for t, step in self.temps]
        offsets, how = plan_best(ivs, 1)
        check_plan(offsets, ivs)
        need = peak(offsets, ivs)
        if need > self.act_lines:
            big = max(ivs, key=lambda iv: iv.size)
            raise ActOverflow(
                f"the activations need {need} ACT lines at once but target {self.t['name']!r} has "
                f"{self.act_lines} (scratchpad.act_lines); the largest tensor {big.name!r} alone takes {big.size} "
                f"lines ({self.tensor(big.name).cb} channel blocks x {self.tensor(big.name).hp}x"
                f"{self.tensor(big.name).wp} padded pixels). Use a target with more act_lines or a smaller input.",
                [big.name], layers={layer.name: sum(self.tensor(x).lines for x in {*reads(layer), layer.dst}
                                                    if x in first) for layer in self.plan.layers},
                need=need, have=self.act_lines)
        for t, _ in self.temps:
            t.base = offsets[t.name]
        for n in first:
            self.tensor(n).base = offsets[n]
        for layer in self.in_place.values():
            o = self.tensor(layer.dst)
            for p in layer.srcs:
                self.tensor(p).base = o.base + self.tensor(p).cb0 * o.block_lines
        return {"peak_lines": need, "lower_bound_lines": lower_bound(ivs), "naive_lines": naive_total(ivs),
                "act_lines": self.act_lines, "method": how,
                "peak_bytes": need * self.n, "lower_bound_bytes": lower_bound(ivs) * self.n,
                "naive_bytes": naive_total(ivs) * self.n,
                "buffers": [{"name": iv.name, "offset": offsets[iv.name], "size": iv.size, "start": iv.start,
                             "end": iv.end} for iv in ivs]}  # lines; steps = layers (the report's plot)

    # ---- 3. layers ------------------------------------------------------------------------------
    def _halo_runs(self, t: TileTensor) -> list[tuple]:
        """The FILL runs of a tensor's halo: (region, first line, count, byte) each; a run's region names the
        rows it touches (the top rows and row 0's left pad; row y's right pad and row y+1's left pad; ...)."""
        if t.fill is None or not any(t.pads):
            return []
        pt, pl, pb, pr = t.pads
        runs = []
        step = HALO_ROWS_PER_FILL
        for cb in range(t.cb):
            # (first line, lines per run, runs, first row touched, end row): the rows between the first and the
            # last in strided FILLs of up to HALO_ROWS_PER_FILL runs, a row pitch apart
            spans = [(t.line(cb, -pt, -pl), pt * t.wp + pl, 1, -pt, 1)]
            spans += [(t.line(cb, y, t.w), pr + pl, min(step, t.h - 1 - y), y, min(y + step, t.h - 1) + 1)
                      for y in range(0, t.h - 1, step)]
            spans.append((t.line(cb, t.h - 1, t.w), pr + pb * t.wp + t.tail, 1, t.h - 1,
                          t.h + pb))
            runs += [(t.region(cb, y0, y1), addr, count, t.fill & 0xFF, rows, t.wp)
                     for addr, count, rows, y0, y1 in spans if count]
        return runs

    def fill_halo(self, g: Group, t: TileTensor) -> None:
        for region, addr, count, value, rows, stride in self._halo_runs(t):
            self.compute(g, Op.FILL, region=region, addr=addr, count=count, value=value, rows=rows, stride=stride)

    def emit_conv(self, layer: ConvLayer, loads: dict) -> None:
        n = self.n
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        m, c, kh, kw = layer.weight.shape
        sh, sw = layer.strides
        dh, dw = layer.dilations
        pt, pl, _, _ = layer.pads
        ho, wo = dst.h, dst.w
        fold = self.folds.get(layer.name)   # one row as rows of `fold` pixels (`_fold_width`)
        acc_cap = self._acc_cap()
        # (`bands.fit_act` then computes the layer in column bands; folded, its tiles are fold rows, each fits a slot)
        if wo > acc_cap and not fold:
            raise RowTooWide(f"layer {layer.name!r}: an output row of {wo} pixels does not fit {acc_cap} accumulator "
                             f"lines", [layer.name], layer.name, wo, acc_cap)
        if fold:
            ho, wo = wo // fold, fold
        rows_per_tile = max(1, min(ho, acc_cap // wo))
        cbo, cbi = -(-m // n), -(-c // n)
        wpad = np.zeros((cbo * n, cbi * n, kh, kw), np.int8)
        wpad[:m, :c] = layer.weight
        # depthwise mode; also over stacked pixels (`space_to_depth`) of whole channel blocks: every weight block
        # (output block, input block, tap) is then diagonal or zero (`_dw_taps`: "rows", "cols" and "image")
        dw_mode = (self.depthwise and kw > 1 and layer.group * src.s2d == c and layer.group * dst.s2d == m
                   and (src.s2d == dst.s2d == 1 or layer.group % n == 0))
        mode = "rows"   # depthwise: one of DW_MODES (docs/tile-v2.md, "Depthwise schedules")
        dw_cost = None
        if dw_mode and self.tiling in ("cost", "quarter"):  # ("quarter" tiles the other layers its own way)
            rows_per_tile, mode, dw_cost = self._dw_plan(layer, wpad, ho, wo, rows_per_tile)
        elif self.post_unit and (self.tiling == "cost" or (self.tiling == "quarter" and self.layer in self.fused_adds)):
            # ("quarter": a fused add's VEC work, 3 cycles a line, wants the tiles of the cost model)
            rows_per_tile = self._tile_rows(layer, ho, wo, rows_per_tile)
        elif self.post_unit and self.tiling == "quarter":
            rows_per_tile = min(rows_per_tile, max(-(-ho // 4), -(-8 * n // wo)))
        fdw = self.fused_dws.get(self.layer)   # PPU.dw: row bands, whose PPUs compute the depthwise layer `fdw`
        # whole-block pixels (`_dw_layout`): output block b is pixel phase b (layers._s2d_conv_weights); its GEMMs
        # write pixel f X + b of a row to accumulator line f X + b, and one PPU.dw reads the whole row
        phases, ppu_dwf, _ = self.dw_layouts[self.layer] if fdw is not None else (1, 0, 0)
        needs_in = loads.get(layer.src, ())
        tiles = _tile_list(ho, rows_per_tile)

        def real(w0: int, w1: int) -> tuple[int, int]:   # (the output rows fold rows w0 .. w1 - 1 are in)
            return (0, 1) if fold else (w0, w1)
        bands = None
        if fdw is not None:   # row bands of the image, each tile with the rows around it (`_dw_bands`)
            bands = self._dw_bands(layer, fdw, self._conv_taps(layer, wpad, 0, mode, dw_mode), cbo // phases, mode)
            tiles = [(r0, rows) for r0, rows, *_ in bands]
            self._tail = None
        elif self.post_unit:
            tiles = self._stagger(layer, mode, tiles, self._conv_taps(layer, wpad, 0, mode, dw_mode), dw_cost)
        # (output block, pixel tile) in turn: block by block; PPU.dw over stacked pixels: the phases of a tile
        # one after the other, into one accumulator tile
        order = [(cob, ti) for cob in range(cbo) for ti in range(len(tiles))] if phases == 1 else \
            [(ob * phases + b, ti) for ob in range(cbo // phases) for ti in range(len(tiles)) for b in range(phases)]
        per_block = {}
        acc = self._acc_base()
        for cob, ti in order:
            if cob not in per_block:
                taps = self._conv_taps(layer, wpad, cob, mode, dw_mode)
                lanes = slice(cob * n, min(m, (cob + 1) * n))
                if fdw is not None:
                    pieces = [(0, wo * phases, self.param_dw(layer, fdw, lanes if phases == 1 else slice(0, n),
                                                             ppu_dwf))]
                else:
                    entry = self.param(layer.bias[lanes], layer.mult[lanes], layer.shift[lanes], layer.z_out,
                                       layer.lo, layer.hi, None if layer.mult_neg is None else layer.mult_neg[lanes])
                    pieces = self._ppu_pieces(layer, lanes, entry, mode)
                chunks = [taps[i:i + self.bank_blocks] for i in range(0, len(taps), self.bank_blocks)]
                per_block[cob] = taps, pieces, chunks
            taps, pieces, chunks = per_block[cob]
            if len(chunks) == 1 and (ti == 0 or phases > 1):
                g = self.weighted([t[3] for t in chunks[0]])
            oy0, rows = tiles[ti]
            gi = streamed = 0   # GEMMs of this tile emitted so far, their estimated array cycles
            last = cob == cbo - 1 and ti == len(tiles) - 1   # its PPU drains the array: FILLs may go first
            for ci, chunk in enumerate(chunks):
                if len(chunks) > 1:  # the cob's weights exceed a bank: reload them per pixel tile
                    g = self.weighted([t[3] for t in chunk])
                for k, (kk, off, cib, data, dwf, skip, si) in enumerate(chunk):
                    f = self._gemm_fields(layer, mode, oy0, rows, kk, off, cib, skip, si)
                    if phases > 1:
                        assert (f["n_inner"], f["acc_so"], f["acc_si"]) == (wo, wo, 1) and "acc_off" not in f
                        f.update(acc_so=wo * phases, acc_si=phases, acc_off=cob)
                    # a deferred PPU (below) of the previous tile goes behind this tile's first GEMMs; with two
                    # accumulator slots the first waits for POST: the PPU before that one reads the slot it writes
                    first = ci == 0 and k == 0
                    tile_end = ci == len(chunks) - 1 and k == len(chunk) - 1
                    if self._later_post and self._later_region and _overlaps(f["region"], self._later_region):
                        later, self._later_post = self._later_post, None   # (the previous layer's last PPU
                        later(g, gi)                                        # writes what this GEMM reads)
                    self.compute(g, Op.GEMM, needs=needs_in, wblk=g.block(data), acc=acc + f.pop("acc_off", 0),
                                 cols=f.pop("cols", None),
                                 reset=int(first), dw=dwf, skip=skip, dw9=int(len(data) > n * n),
                                 wait=Wait.POST if first and self._later_post and self.acc_slots == 2
                                 else Wait.NONE,
                                 drip=not (tile_end and self.lag_ppu and not last),
                                 drains=tile_end and last, **f)
                    gi += 1
                    streamed += self._gemm_cycles(f["n_outer"] * f["n_inner"])
                    if self._later_post and (streamed >= self._lag_cover or gi == isa.PPU_MAX_LAG or tile_end):
                        if cob == cbo - 1 and ti == len(tiles) - 1:
                            self._own_fills(g)
                        later, self._later_post = self._later_post, None
                        later(g, gi)
                    if self._later_add is not None and gi >= self._later_add[0]:
                        self._later_add[1](g)
                        self._later_add = None
            if self._later_add is not None:  # a tile of few GEMMs: the add goes before its PPU
                self._later_add[1](g)
                self._later_add = None
            if cob % phases != phases - 1:
                continue   # (the next phase's GEMMs fill the same accumulators: one PPU.dw after the last)
            ob = cob // phases   # the output block

            # the rows it writes: the tile's; PPU.dw: its band's (`_dw_bands`); folded: fold rows w0 .. w1 - 1
            w0, w1 = (oy0, oy0 + rows) if fdw is None else bands[ti][3]

            def post(g, lag=0, acc=acc, oy0=oy0, rows=rows, ob=ob, pieces=pieces, ti=ti, w0=w0, w1=w1):
                # (lag: the GEMMs of the next tile emitted before this PPU, which may stream while it waits)
                fields = self._ppu_fields(layer, mode, acc, rows)
                out = dst if fdw is None else self.tensor(fdw.dst)
                if fdw is not None:
                    plain = fdw.plain or fdw
                    fields.update(dw=1, dws=DWS_OF[plain.strides, tuple(plain.pads)], dwc=bands[ti][2], dwf=ppu_dwf,
                                  out_so=out.wp,
                                  n_inner=wo * phases, acc_so=wo * phases)
                for x0, x1, e in pieces:   # a shifted output's edge columns first (docs/tile-v2.md)
                    f = fields if len(pieces) == 1 else dict(fields, acc=fields["acc"] + x0, n_inner=x1 - x0)
                    line = out.line(ob, 0, w0 * fold + x0) if fold else out.line(ob, w0, x0)
                    self.compute(g, Op.PPU, region=out.region(ob, *real(w0, w1)), out=line, param=e, lag=lag, **f)
                if self.layer in self.fused_adds:
                    def add(g, oy0=oy0, rows=rows, ob=ob):
                        self.emit_add(self.fused_adds[self.layer], loads, cbs=[ob], rows=(oy0, rows))
                    if lag:
                        # the lag PPU starts once the previous tile's GEMMs are done and the add's VEC
                        # issues only after it: behind the GEMM streaming then, not blocking the next
                        t = self.timing
                        gemm = self._gemm_cycles(rows * wo)
                        self._later_add = (lag + -(-(t.GEMM_LATENCY + t.PPU_OVERHEAD + rows * wo) // gemm), add)
                    else:
                        add(g)
                if self.layer in self.fused_pools:
                    self._queue_pool(ob, w0 * fold, w1 * fold) if fold else self._queue_pool(ob, w0, w1)

            if self._lags(layer, mode, taps, rows) and not last:
                # v2, PPU.lag: the PPU issues behind the next tile's first k GEMMs and waits only for the
                # GEMMs before those, so the array streams on instead of draining at every tile. k: as
                # few as stream long enough to cover the wait for this tile's last GEMM to complete and
                # the next GEMM's preload (`_lag_cover`); behind one short GEMM the array would idle (`_lags`)
                self._later_post = post
                self._later_region = None
            elif last and self._lag_across(layer):
                # the layer's last PPU lags into the next layer's first GEMMs that do not read what it
                # writes (`_later_region`; the next layer's first tile reads those rows last, `_stagger`)
                def across(g, lag, me=self.layer, post=post):
                    now, pending = self.layer, self._halo_pending   # (the next layer's halo waits for
                    self.layer, self._halo_pending = me, None       # that layer's own first PPU)
                    post(g, lag)
                    self.layer, self._halo_pending = now, pending
                self._later_post = across
                self._later_region = (dst if fdw is None else self.tensor(fdw.dst)).region(ob, *real(w0, w1))
            else:
                if last and self.post_unit:
                    # channel block 0's output halo runs while the array drains (when this last PPU writes
                    # another block): the next layer's first GEMMs read it and need not wait behind the PPU
                    # (all the other blocks' halos too measured slower on MobileNet tile32x32)
                    mine = [d for d in self._drip if d[0] == self.layer and d[1][1] == 0 != cob and not _is_vec(d)]
                    self._drip = [d for d in self._drip if d not in mine]
                    for d in mine:
                        self._emit_fill(g, *d[1:])
                post(g)
            acc = self._next_acc()
        # v2: the post-processing of the last pixel tile runs on POST while the next layer's GEMMs start
        oy0, rows = tiles[-1]
        written = self.fused_adds[self.layer].dst if self.layer in self.fused_adds else \
            dst.name if fdw is None else fdw.dst
        w0, w1 = (oy0, oy0 + rows) if fdw is None else bands[-1][3]
        self._tail = (self.tensor(written).region((cbo - 1) // phases, *real(w0, w1)), self._tile_cost(layer, rows)[1])

    def _dw_bands(self, layer: ConvLayer, fdw: ConvLayer, taps: list[tuple], blocks: int, mode: str) -> list[tuple]:
        """PPU.dw (`fdw` after `layer`): the depthwise layer's input rows in bands, each band's pixel tile with the
        row before and after it as context rows (PPU.dwc: computed again, only read), so that a band's PPU.dw runs
        while the array computes the next band. [(first tile row, tile rows, dwc, (first, end output row))], the
        band count by a two-stage pipeline model (the GEMMs of `taps` per block and pixel phase, then the PPU.dw,
        for each of the `blocks` output blocks in turn, behind the producer's last PPU; a band's context rows cost
        their GEMM lines again);
        the "max" tiling policy takes the fewest bands that fit instead (the search compares). With stride 2 a band
        starts at an odd row, so that its tile starts at an even one (PPU.dws counts the tile's rows)."""
        mid, t = self.tensor(layer.dst), self.timing
        phases, _, width = self.dw_layouts[self.layer]
        h, wo, plain = mid.h, mid.w, fdw.plain or fdw
        stride, dws = plain.strides[0], DWS_OF[plain.strides, tuple(plain.pads)]
        best = None
        # the producer's last PPU (`_tail`, still on POST when this layer starts): a first band whose GEMMs read
        # none of its rows streams meanwhile (as `_stagger` for the other layers). MobileNetV1-0.25 tile32x32
        # 12,899 -> 12,482 cycles, DS-CNN 3,874 -> 3,641
        tail = self._tail if self._tail is not None and self._tail[0][0] == layer.src else None

        def free(r0: int, rows: int) -> bool:
            return not any(_overlaps(self._gemm_fields(layer, mode, r0, rows, kk, off, cib, skip, si)["region"],
                                     tail[0]) for kk, off, cib, _, _, skip, si in taps)
        options, firsts = [], {2, 3, 4, 6}
        if tail is not None:   # (the longest first band reading none of them, one row less, half of it)
            most = next((r for r in range(h - 2, 1, -1) if free(0, r + 1)), 0)
            firsts |= {x for x in (most, most - 1, most // 2) if x >= 2}
        for k in range(1, max(1, min(h // 2, 32)) + 1):
            options.append([0] + [round(j * h / k) for j in range(1, k)] + [h])
            if tail is not None and k > 1:   # a short first band, the rest even
                for first in sorted(firsts):
                    rest = h - first
                    if rest >= 2 * (k - 1):
                        options.append([0, first] + [first + round(j * rest / (k - 1)) for j in range(1, k - 1)] + [h])
        for cuts in options:
            k = len(cuts) - 1
            if stride == 2:
                cuts = [0] + [c | 1 for c in cuts[1:-1]] + [h]
            if any(b - a < 2 for a, b in zip(cuts, cuts[1:])) and k > 1:
                continue
            bands = []
            for j, (a, b) in enumerate(zip(cuts, cuts[1:])):
                r0, r1 = a - (j > 0), b + (j < k - 1)
                dwc = int(j > 0) | int(j < k - 1) << 1
                ys = [r0 + y for y in isa.ppu_dw_rows(r1 - r0, dws, dwc)]
                if not ys or (r1 - r0) * width > self._acc_cap():
                    break
                bands.append((r0, r1 - r0, dwc, ((ys[0] - (dws & 1)) // stride, (ys[-1] - (dws & 1)) // stride + 1)))
            else:
                ge = pe = busy = tail[1] if tail is not None else 0
                if busy and free(bands[0][0], bands[0][1]):
                    ge = 0
                for j, (_, rows, dwc, _) in enumerate(bands * blocks):
                    if j:
                        ge = max(ge, busy)
                    ge += len(taps) * phases * self._gemm_cycles(rows * wo)
                    pe = max(pe, ge + t.GEMM_LATENCY) + t.ppu_busy(rows, width, 1, dwc)
                if best is None or pe < best[0]:
                    best = (pe, bands)
                if self.tiling == "max":
                    break
        assert best is not None, "Codegen._fusable_dws admits an image whose bands fit"
        return best[1]

    def _own_fills(self, g: Group) -> None:
        """v2, in a layer's last pixel tile: this layer's output halo FILLs still pending (POST had no room between
        the GEMMs) go before the PPU of the tile before. Behind it, the next layer's first GEMM, which reads them,
        waited for that PPU too (MobileNetV1-0.25 tile32x32: 300-400 cycles at each of three layers; block 0's
        FILLs only, the block the next layer's first GEMMs read: 24,385 -> 24,361 there, DS-CNN 4,952 -> 4,970)."""
        mine = [d for d in self._drip if d[0] == self.layer and not _is_vec(d)]
        self._drip = [d for d in self._drip if d not in mine]
        for d in mine:
            self._emit_fill(g, *d[1:])

    def _lags(self, layer: ConvLayer, mode: str, taps: list[tuple], rows: int) -> bool:
        """v2: may a pixel tile's PPU lag behind the next tile's first GEMMs (PPU.lag)? With two GEMMs a tile or
        more, or one that streams long enough to cover the wait (`_lag_cover`): behind one short GEMM the array
        idled about GEMM_LATENCY cycles a tile (the FC autoencoder at batch 8, 8-line GEMMs)."""
        if not self.lag_ppu or not taps:
            return False
        if len(taps) >= 2:
            return True
        kk, off, cib, _, _, skip, si = taps[0]
        f = self._gemm_fields(layer, mode, 0, rows, kk, off, cib, skip, si)
        return f["n_outer"] * f["n_inner"] >= self._lag_cover

    def _lag_across(self, layer: ConvLayer) -> bool:
        """v2: may this layer's last PPU lag into the next layer (a convolution, which then emits it, `emit_conv`)?
        Not with a fused add (its VEC follows the PPU), nor while this layer's output halo waits for a PPU, and
        only with three accumulator slots (with two, the next layer's first GEMM waits for POST anyway: measured
        slower on DS-CNN tile32x32). ResNet-8 200,348 -> 200,240 cycles on tile8x8, 17,126 -> 16,961 on
        tile32x32; DS-CNN 44,326 -> 44,188 and 5,234 -> 5,021; MobileNet 134,826 -> 134,317 and 26,065 -> 25,496."""
        nxt = self.layer + (2 if self.layer in self.fused_dws else 1)
        return (self.lag_ppu and self.acc_slots == 3 and self.layer not in self.fused_adds
                and self._halo_pending is None and nxt < len(self.plan.layers)
                and isinstance(self.plan.layers[nxt], ConvLayer))

    def _ppu_pieces(self, layer: ConvLayer, lanes: slice, entry: int, mode: str) -> list[tuple[int, int, int]]:
        """The column ranges of a pixel tile's PPUs and their param entries: one, or for a shifted stacked
        output (layers.space_to_depth) first its edge columns, whose pad pixels' lanes get multiplier and
        bias 0 so that the PPU writes the zero point there (the padding its readers expect)."""
        dst = self.tensor(layer.dst)
        f, w2 = dst.s2d, dst.w
        pad = {x: [b for b in range(f) if not 0 <= f * x + b - dst.shift < dst.w0] for x in {0, w2 - 1}}
        pad = {x: bs for x, bs in pad.items() if bs and f > 1}
        if not pad:
            return [(0, w2, entry)]
        assert mode == "rows", mode   # a stacked output: no depthwise mode
        m = dst.c // f                        # channels per pixel: lane c + m*b holds pixel f*X + b - shift
        out = []
        for x in sorted(pad):
            keep = np.array([(k // m) not in pad[x] for k in range(lanes.start, lanes.stop)])
            e = self.param(np.where(keep, layer.bias[lanes], 0), np.where(keep, layer.mult[lanes], 0),
                           layer.shift[lanes], layer.z_out, layer.lo, layer.hi,
                           None if layer.mult_neg is None else np.where(keep, layer.mult_neg[lanes], 0))
            out.append((x, x + 1, e))
        lo, hi = (1 if 0 in pad else 0), (w2 - 1 if w2 - 1 in pad else w2)
        if hi > lo:
            out.append((lo, hi, entry))
        return out

    def _conv_taps(self, layer: ConvLayer, wpad: np.ndarray, cob: int, mode: str, dw_mode: bool) -> list[tuple]:
        """The GEMMs of output block `cob` in a pixel tile, in issue order. A tap: (ky, first input column,
        input block, weight block, dw, skip, column step); "cols": (kx, first input row offset, input block,
        weight block, 1, skip, row step)."""
        n = self.n
        _, cbi_n, kh, kw = wpad.shape
        cbi = cbi_n // n
        pl, sw, dw = layer.pads[1], layer.strides[1], layer.dilations[1]
        taps = self._dw_taps(layer, wpad, cob, mode) if dw_mode and mode != "diag" else None
        if taps is None:
            taps = []
            for ky in range(kh):
                for kx in range(kw):
                    for cib in range(cbi):
                        blk = wpad[cob * n:(cob + 1) * n, cib * n:(cib + 1) * n, ky, kx]
                        if blk.any():
                            taps.append((ky, kx * dw - pl, cib, np.ascontiguousarray(blk).tobytes(), 0, 0, sw))
        if not taps:  # all-zero weights: one zero block still resets the accumulators
            taps = [(0, 0, 0, bytes(n * n), 0, 0, sw)]
        # v2: when a layer starts, POST may still be writing the input's last channel block (its
        # producer's last PPU or VEC): taps reading it go last, so the others overlap that work.
        taps.sort(key=lambda t: t[2] == cbi - 1)
        return taps

    def _stagger(self, layer: ConvLayer, mode: str, tiles: list[tuple], taps: list[tuple], dw_cost) -> list[tuple]:
        """v2: when this layer starts, POST still post-processes the producer's last pixel tile (`_tail`); the
        GEMMs of this layer's first tile that do not read those rows stream meanwhile. A shorter first tile
        may read none of them: keep it when the cost model says the overlap pays for the extra tile."""
        tail, self._tail = self._tail, None
        if tail is None or tail[0][0] != layer.src:
            return tiles
        region, busy = tail
        ho, r = self.tensor(layer.dst).h, tiles[0][1]

        def overlap(rows: int) -> tuple[int, bool]:
            t = 0
            for kk, off, cib, _, _, skip, si in taps:
                f = self._gemm_fields(layer, mode, 0, rows, kk, off, cib, skip, si)
                if _overlaps(f["region"], region):
                    return t, False
                t += self._gemm_cycles(f["n_outer"] * f["n_inner"])
            return t, True

        cbo = -(-layer.weight.shape[0] // self.n)

        def cost(ts: list[tuple]) -> int:
            per = [self._tile_cost(layer, rows, dw_cost) for _, rows in ts]
            return cbo * sum(p[0] for p in per) + per[-1][1] + max(0, busy - overlap(ts[0][1])[0])

        if overlap(r)[1]:
            return tiles
        best = (cost(tiles), tiles)
        first = next((k for k in range(r - 1, 0, -1) if overlap(k)[1]), 0)
        if first:
            rest = ho - first
            k = -(-rest // r)
            even = [rest // k + (j < rest % k) for j in range(k)]   # the other rows in tiles of equal size
            for sizes in ([min(r, rest - y) for y in range(0, rest, r)], even):
                cand = [(0, first)] + [(first + sum(sizes[:j]), sz) for j, sz in enumerate(sizes)]
                if self._tiles_fit(layer, mode, cand):
                    best = min(best, (cost(cand), cand), key=lambda b: b[0])
        return best[1]

    def _gemm_fields(self, layer: ConvLayer, mode: str, oy0: int, rows: int, kk: int, off: int, cib: int,
                     skip: int, si: int) -> dict:
        """The stream of one GEMM of a pixel tile: `rows` output rows from oy0, for a tap (kk, off)."""
        src, wo = self.tensor(layer.src), self.tensor(layer.dst).w
        (sh, sw), (dh, dw), (pt, pl) = layer.strides, layer.dilations, layer.pads[:2]
        if mode == "cols":  # down the columns: line j of column ox is input row y0 + j * si
            y0 = oy0 * sh + off
            return dict(region=src.region(cib, y0, y0 + (rows + skip - 1) * si + 1),
                        act=src.line(cib, y0, kk * dw - pl), n_outer=wo, n_inner=rows + skip, act_so=sw,
                        act_si=si * src.wp, acc_so=rows, acc_si=1)
        if mode == "pitch2":  # phase `off` of the columns: every padded row, every other column, pitch = phase cols
            kw, a = layer.weight.shape[3], off
            n_rows, q = self._pitch2_lines(layer, rows)[0], self._phase_cols(layer, 0)
            y0 = oy0 * sh - pt
            last = max(range(a, kw, 2))   # the phase's last tap column: output (y, x) at its line
            return dict(region=src.region(cib, y0, y0 + n_rows), act=src.line(cib, y0, a - pl), n_outer=n_rows,
                        n_inner=self._phase_cols(layer, a), act_so=src.wp, act_si=2, acc_so=q, acc_si=1, dwp=1,
                        acc_off=(kw - 1) // 2 - last // 2)
        if mode == "pcols":  # GEMM.dwp down the columns (kk = -2), then "cols" GEMMs into its output lines
            kh, kw = layer.weight.shape[2:]
            kx0, y0 = self._pcols_first(layer), oy0 - pt
            lines, pitch = self._pcols_lines(layer, rows)
            if kk == -2:
                return dict(region=src.region(cib, y0, y0 + pitch), act=src.line(cib, y0, kx0 - pl),
                            n_outer=lines // pitch, n_inner=pitch, act_so=1, act_si=src.wp, acc_so=pitch, acc_si=1,
                            dwp=1)
            f = self._gemm_fields(layer, "cols", oy0, rows, kk, off, cib, skip, si)
            return dict(f, acc_so=pitch, acc_off=(kw - 1 - kx0) * pitch + kh - 1)
        if mode in ("pitch", "pitch+"):  # GEMM.dwp: whole padded rows, n_inner = the row pitch; kk = -1 marks it
            y0 = oy0 * sh - pt
            kh, kw = layer.weight.shape[2:]
            e = self._pitch_shift(layer, mode)
            if kk == -1:
                n_rows = (rows - 1) * sh + (kh - 1) * dh + 1 + (mode == "pitch+")
                return dict(region=src.region(cib, y0, y0 + n_rows), act=src.line(cib, y0, -pl) + e, n_outer=n_rows,
                            n_inner=src.wp, act_so=src.wp, act_si=1, acc_so=src.wp, acc_si=1, dwp=1)
            if kk == -4:  # the first outputs of the first row for masked tap (0, off): their input line, a pad
                kx = off
                return dict(region=src.region(cib, y0, y0 + 1), act=src.line(cib, y0, kx * dw - pl), n_outer=1,
                            n_inner=min(wo, -(-(e - kx * dw) // sw)), act_so=0, act_si=sw, acc_so=0, acc_si=sw,
                            acc_off=(kh - 1) * dh * src.wp + (kw - 1) * dw - e)
            # a tap the row buffers do not reach: a diagonal block over the outputs' inputs, accumulated
            # into the lines where the row-buffer GEMM leaves each output (its last tap's line)
            ky, kx = kk, off
            return dict(region=src.region(cib, y0 + ky * dh, y0 + ky * dh + (rows - 1) * sh + 1),
                        act=src.line(cib, y0 + ky * dh, kx * dw - pl), n_outer=rows, n_inner=wo, act_so=sh * src.wp,
                        act_si=sw, acc_so=sh * src.wp, acc_si=sw,
                        acc_off=(kh - 1) * dh * src.wp + (kw - 1) * dw - e)
        if mode == "image":  # the padded rows in one stream: every tap is a fixed distance back
            y0 = oy0 * sh - pt
            return dict(region=src.region(cib, y0, y0 + (rows - 1) * sh + (layer.weight.shape[2] - 1) * dh + 1),
                        act=src.line(cib, y0, -pl), n_outer=1, n_inner=self._image_lines(layer, rows), act_so=0,
                        act_si=1, acc_so=0, acc_si=1)
        fold = self.folds.get(layer.name)
        if fold:   # fold rows oy0 .. oy0 + rows - 1 of one row (`_fold_width`): each one's inputs sw * fold lines on
            x0 = off + oy0 * fold * sw   # (`cols`: the columns it reads, for a one-row input's LOAD chunks)
            return dict(region=src.region(cib, 0, 1), act=src.line(cib, 0, x0), n_outer=rows, n_inner=fold + skip,
                        act_so=fold * sw, act_si=si, acc_so=fold, acc_si=1,
                        cols=(x0, x0 + (rows - 1) * fold * sw + (fold + skip - 1) * si + 1))
        y0 = oy0 * sh + kk * dh - pt
        return dict(region=src.region(cib, y0, y0 + (rows - 1) * sh + 1), act=src.line(cib, y0, off),
                    n_outer=rows, n_inner=wo + skip, act_so=sh * src.wp, act_si=si, acc_so=wo, acc_si=1)

    def _ppu_fields(self, layer: ConvLayer, mode: str, acc: int, rows: int) -> dict:
        """How the PPU reads a pixel tile's accumulators (as the GEMMs of `mode` left them)."""
        dst, wo = self.tensor(layer.dst), self.tensor(layer.dst).w
        if mode == "cols":  # column by column
            return dict(acc=acc, n_outer=wo, n_inner=rows, acc_so=rows, acc_si=1, out_so=1, out_si=dst.wp)
        if mode == "pitch2":  # output (y, x) at line (2y + kh-1) * q + x + (kw-1) // 2
            kh, kw = layer.weight.shape[2:]
            q = self._phase_cols(layer, 0)
            return dict(acc=acc + (kh - 1) * q + (kw - 1) // 2, n_outer=rows, n_inner=wo, acc_so=2 * q, acc_si=1,
                        out_so=dst.wp, out_si=1)
        if mode == "pcols":  # column by column, output (y, x) at its last tap's line
            kh, kw = layer.weight.shape[2:]
            pitch = self._pcols_lines(layer, rows)[1]
            return dict(acc=acc + (kw - 1 - self._pcols_first(layer)) * pitch + kh - 1, n_outer=wo, n_inner=rows,
                        acc_so=pitch, acc_si=1, out_so=1, out_si=dst.wp)
        if mode in ("image", "pitch", "pitch+"):  # output (y, x) at its last tap's line; the rest are not outputs
            (sh, sw), (dh, dw), (_, _, kh, kw) = layer.strides, layer.dilations, layer.weight.shape
            wp, e = self.tensor(layer.src).wp, (self._pitch_shift(layer, mode) if mode != "image" else 0)
            return dict(acc=acc + (kh - 1) * dh * wp + (kw - 1) * dw - e, n_outer=rows, n_inner=wo, acc_so=sh * wp,
                        acc_si=sw, out_so=dst.wp, out_si=1)
        fold = self.folds.get(layer.name)
        if fold:   # (`_fold_width`: the fold rows follow each other in the output row)
            return dict(acc=acc, n_outer=rows, n_inner=fold, acc_so=fold, acc_si=1, out_so=fold, out_si=1)
        return dict(acc=acc, n_outer=rows, n_inner=wo, acc_so=wo, acc_si=1, out_so=dst.wp, out_si=1)

    def _image_lines(self, layer: ConvLayer, rows: int) -> int:
        """Lines an "image" depthwise GEMM streams for `rows` output rows (up to the last output's last tap)."""
        (sh, sw), (dh, dw), (_, _, kh, kw) = layer.strides, layer.dilations, layer.weight.shape
        wp, wo = self.tensor(layer.src).wp, self.tensor(layer.dst).w
        return ((rows - 1) * sh + (kh - 1) * dh) * wp + (wo - 1) * sw + (kw - 1) * dw + 1

    def _phase_cols(self, layer: ConvLayer, a: int) -> int:
        """"pitch2": the padded input columns of phase a (x = a - pl, a - pl + 2, ...) up to the last output's
        last tap, the pitch of its GEMM."""
        pl, wo = layer.pads[1], self.tensor(layer.dst).w
        x_last = (wo - 1) * layer.strides[1] + (layer.weight.shape[3] - 1) * layer.dilations[1] - pl
        return (x_last + pl - a) // 2 + 1

    def _pitch2_lines(self, layer: ConvLayer, rows: int) -> tuple[int, int]:
        """"pitch2" for `rows` output rows: (padded input rows streamed, accumulator lines used)."""
        n_rows = 2 * (rows - 1) + layer.weight.shape[2]
        return n_rows, n_rows * self._phase_cols(layer, 0) + 1

    def _pcols_first(self, layer: ConvLayer) -> int:
        """"pcols": the first kernel column in the row-buffer GEMM. All when they fit the array's columns;
        otherwise from the second on (6 taps of a 3x3 on 8 columns), the first in a "cols" GEMM: that streams one
        padded column fewer and the first kernel column's lines, against 8 taps and a diagonal ninth over the
        outputs ("pitch" down the columns); it is shorter on images more than twice as tall as wide."""
        kh, kw = layer.weight.shape[2:]
        return 0 if isa.DWP_TAPS * (kw - 1) + kh <= self.n + self.dw9 else 1   # (GEMM.dw9: a ninth column)

    def _pcols_lines(self, layer: ConvLayer, rows: int) -> tuple[int, int]:
        """"pcols" for `rows` output rows: (lines of the row-buffer GEMM, its pitch: padded rows per column)."""
        kh, kw = layer.weight.shape[2:]
        pitch = rows + kh - 1
        return (self.tensor(layer.dst).w + kw - 1 - self._pcols_first(layer)) * pitch, pitch

    def _pitch_shift(self, layer: ConvLayer, mode: str = "pitch") -> int:
        """"pitch": lines the last output's last tap lies past its padded row (a right pad stored in the next
        row's left pad, `TileTensor.share_pad_column`). The GEMM starts that many lines later, so that it ends
        there; those first lines of the first row then read zero through the row buffers (not the pad's zero
        point): a tap reading them is added by a GEMM over the first outputs (`_dw_taps`), or is diagonal anyway.
        "pitch+" starts on time and streams one padded row more instead (cheaper when a row is shorter than a
        GEMM's preload)."""
        if mode == "pitch+":
            return 0
        src, wo = self.tensor(layer.src), self.tensor(layer.dst).w
        x_last = (wo - 1) * layer.strides[1] + (layer.weight.shape[3] - 1) * layer.dilations[1] - layer.pads[1]
        return max(0, x_last - (src.w + src.pads[3] - 1))

    def _pitch_lines(self, layer: ConvLayer, rows: int, mode: str = "pitch") -> int:
        """Lines a "pitch" (GEMM.dwp) depthwise GEMM streams for `rows` output rows: whole padded rows ("pitch+":
        one more)."""
        (sh, _), (dh, _), kh = layer.strides, layer.dilations, layer.weight.shape[2]
        return ((rows - 1) * sh + (kh - 1) * dh + 1 + (mode == "pitch+")) * self.tensor(layer.src).wp

    def _tile_rows(self, layer: ConvLayer, ho: int, wo: int, most: int, dw: tuple | None = None):
        """v2: output rows per pixel tile. More tiles let a tile's PPU (and fused add) overlap the next
        tile's GEMMs, but cost a weight preload per GEMM when tiles are short: pick the cheapest by a
        small cost model (GEMM cycles vs the post-processing left exposed after the last tile).
        `dw` = (GEMMs per tile, skip, mode) for a depthwise-mode layer: then returns (cost, rows)."""
        cbo = -(-layer.weight.shape[0] // self.n)
        best = None
        for r in sorted({most, *(max(1, -(-ho // k)) for k in (2, 4, 8, 16) if self.post_unit)}):
            if r > most or (dw is not None and not self._tiles_fit(layer, dw[2], _tile_list(ho, r))):
                continue
            per, post_tile = self._tile_cost(layer, r, dw)
            cost = cbo * -(-ho // r) * per + post_tile
            if best is None or cost < best[0]:
                best = (cost, r)
        return best if dw is not None else best[1]

    def _tiles_fit(self, layer: ConvLayer, mode: str, tiles: list[tuple[int, int]]) -> bool:
        """"pcols": every pixel tile's pitch (its padded rows) at least the row buffers' DWP_MIN_PITCH."""
        return mode != "pcols" or all(self._pcols_lines(layer, rows)[1] >= isa.DWP_MIN_PITCH for _, rows in tiles)

    def _tile_cost(self, layer: ConvLayer, r: int, dw: tuple | None = None) -> tuple[int, int]:
        """The cost model of one pixel tile of `r` output rows and one output block: (cycles it occupies, its
        post-processing). `dw` as for `_tile_rows`."""
        n, fold = self.n, self.folds.get(layer.name)
        wo = fold or self.tensor(layer.dst).w
        _, c, kh, kw = layer.weight.shape
        taps = kh * max(1, kw if layer.group == 1 else 1) * (1 if layer.group > 1 else -(-c // n))
        p = r * wo
        if dw is None:
            gemm_tile = taps * self._gemm_cycles(p)
        else:
            ntaps, skip, mode, fixes = dw
            if mode in ("pitch", "pitch+"):  # the row-buffer GEMM, then one over the outputs per tap it does not
                # reach, and one over the first outputs per tap it read zero for (a few lines; none with "pitch+")
                gemm_tile = self._gemm_cycles(self._pitch_lines(layer, r, mode)) + \
                    (ntaps - 1 - fixes) * self._gemm_cycles(p) + fixes * self._gemm_cycles(1)
            elif mode == "pitch2":  # one GEMM per column phase over every padded row of the tile
                n_rows = self._pitch2_lines(layer, r)[0]
                gemm_tile = sum(self._gemm_cycles(n_rows * self._phase_cols(layer, a)) for a in range(ntaps))
            elif mode == "pcols":  # the row-buffer GEMM down the columns, then "cols" GEMMs
                gemm_tile = self._gemm_cycles(self._pcols_lines(layer, r)[0]) + \
                    (ntaps - 1) * self._gemm_cycles(wo * (r + skip))
            else:
                lines = {"rows": r * (wo + skip), "cols": wo * (r + skip), "diag": p}.get(mode) or \
                    self._image_lines(layer, r)
                gemm_tile = ntaps * self._gemm_cycles(lines)
        t = self.timing
        fused = self.layer in self.fused_dws   # (PPU.dw: the row pitch of `_dw_layout`)
        post_tile = t.ppu_busy(r, self.dw_layouts[self.layer][2] if fused else wo, fused) + \
            (t.VEC_OVERHEAD + t.VEC_CYCLES_PER_LINE * p if self.layer in self.fused_adds else 0)
        # each POST instruction issues IDLE_LAG after the previous one ends; the output's halo FILLs (one run per
        # row: a row's right pad and the next one's left pad) share POST with the tile's PPU
        dst = self.tensor(layer.dst)
        post_tile += t.IDLE_LAG * (2 if self.layer in self.fused_adds else 1)
        if dst.fill is not None and (dst.pads[1] or dst.pads[3]):
            post_tile += r * (t.FILL_OVERHEAD + dst.pads[1] + dst.pads[3] + t.IDLE_LAG)
        pool = self.fused_pools.get(self.layer)
        if pool is not None:   # its VECs for the tile's rows (`_queue_pool`): kw - 1 over the rows, kh - 1 down
            (kh, kw), pw = pool.kernel, self.tensor(pool.dst).w
            rows_out = -(-r // pool.strides[0])
            vecs = [(r if kh > 1 else rows_out) * pw] * (kw - 1) + [rows_out * pw] * (kh - 1)
            if fold:   # (a 1 x k pool over the tile's pixels)
                vecs = [-(-p // pool.strides[1])] * (kw - 1) + [pw] * (kh - 1)
            post_tile += sum(t.VEC_OVERHEAD + t.VEC_CYCLES_PER_LINE * lines + t.IDLE_LAG for lines in vecs)
        # a PPU that cannot go behind the next tile's first GEMM (PPU.lag) drains the array per tile
        # a PPU that cannot go behind the next tile's first GEMM (PPU.lag) drains the array per tile. One GEMM a tile
        # lags too when it is long (`_lags`), but the model charges the drain but for "pitch+" (one GEMM by design):
        # crediting "image" and dense tiles with it measured slower (DS-CNN tile32x32 4,970 -> 5,053 cycles,
        # MobileNetV1-0.25 24,769 -> 25,076: fewer, longer tiles whose last PPU the next layer waits for)
        gemms = dw[0] if dw is not None else taps
        lag = gemms >= 2 or (dw is not None and dw[2] == "pitch+"
                             and self._pitch_lines(layer, r, "pitch+") >= self._lag_cover)
        drain = 0 if self.lag_ppu and lag else t.GEMM_LATENCY + t.PRELOAD + t.GEMM_SETUP
        return max(gemm_tile, post_tile) + drain, post_tile

    def _dw_plan(self, layer: ConvLayer, wpad: np.ndarray, ho: int, wo: int, most: int) -> tuple:
        """Depthwise mode: rows per tile and the stream, whichever the cost model prefers: "diag" (no mode: a
        diagonal block per tap), "rows" (a GEMM
        per kernel row, its columns in the array's columns), "cols" (the same down the columns) or
        "image" (all taps in one GEMM over whole padded rows, when every tap is fewer than N lines back).
        A "rows" or "cols" GEMM wastes `skip` lines per inner loop: along a short row that is a large share;
        "image" wastes the padding columns but streams every line once."""
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        acc_cap = self._acc_cap()
        best = None
        for mode in self.DW_MODES:
            taps = [None] * (layer.weight.shape[2] * layer.weight.shape[3]) if mode == "diag" else \
                self._dw_taps(layer, wpad, 0, mode)
            if taps is None:
                continue
            cap = most
            if mode in ("cols", "pcols") and not (layer.strides[0] * src.wp <= 127 and dst.wp <= 127):
                continue  # act_si and the PPU's out_si are 8-bit fields
            if mode == "pitch2":  # the accumulator lines of the phase streams within a half
                cap = max((r for r in range(1, most + 1) if self._pitch2_lines(layer, r)[1] <= acc_cap
                           and self._pitch2_lines(layer, r)[0] <= 4095), default=0)
                if not cap:
                    continue
            if mode == "pcols":  # the pitch (padded rows per column) within the row buffers, the lines in a half
                cap = max((r for r in range(1, most + 1) if self._pcols_lines(layer, r)[1] <= self.dw_lines
                           and self._pcols_lines(layer, r)[0] <= min(acc_cap, 4095)), default=0)
                if not cap:
                    continue
            if mode in ("image", "pitch", "pitch+"):
                def lines(r, mode=mode):
                    return self._image_lines(layer, r) if mode == "image" else self._pitch_lines(layer, r, mode)
                cap = max((r for r in range(1, most + 1) if lines(r) <= min(acc_cap, 4095)), default=0)
                if not cap:
                    continue
            skip = max((t[5] for t in taps if t), default=0)
            dw = (max(1, len(taps)), skip, mode, sum(1 for t in taps if t and t[0] == -4))
            plan = self._tile_rows(layer, ho, wo, cap, dw)
            if plan is None:  # no tiling fits the mode
                continue
            cost, rows = plan
            if best is None or cost < best[0]:
                best = (cost, rows, mode, dw)
        return best[1:] if best else (self._tile_rows(layer, ho, wo, most), "rows", None)

    def _acc_cap(self) -> int:
        """The accumulator lines of a pixel tile (v2: a slot, `_acc_base`)."""
        return self.acc_lines // self.acc_slots if self.post_unit else self.acc_lines

    def _acc_base(self) -> int:
        return self._acc_slot * (self.acc_lines // self.acc_slots) if self.post_unit else 0

    def _next_acc(self) -> int:
        """v2: consecutive pixel tiles take the accumulator slots in turn (the PPU drains one while GEMMs fill
        another)."""
        self._acc_slot = (self._acc_slot + 1) % self.acc_slots
        return self._acc_base()

    def _dwp_block(self, blk: np.ndarray) -> bytes:
        """A row-buffer GEMM's weights: an N x N block, or with a ninth column (GEMM.dw9, the tap in column 8)
        two blocks, the second's first row holding column 8 (byte r for row r) and the rest zero."""
        n = self.n
        data = np.ascontiguousarray(blk[:, :n]).tobytes()
        if blk.shape[1] > n and blk[:, n:].any():
            data += np.ascontiguousarray(blk[:, n]).tobytes() + bytes(n * (n - 1))
        return data

    def _dw_taps(self, layer: ConvLayer, wpad: np.ndarray, cob: int, mode: str = "rows"):
        """Depthwise-mode taps (docs/tile-v2.md): per kernel row and column phase of the stride, one GEMM
        whose weight column c multiplies the line streamed c earlier: taps kx of phase a at offsets
        d = (kx*dx - pl - a) / sx land in column dmax - d. "cols": the same with rows and columns swapped.
        "image": one GEMM, tap (ky, kx) in column (kh-1-ky)*dy*Wp + (kw-1-kx)*dx. None when the kernel does
        not fit the mode."""
        n = self.n
        _, _, kh, kw = wpad.shape
        diag = lambda ky, kx, cib=cob: np.diagonal(wpad[cob * n:(cob + 1) * n, cib * n:(cib + 1) * n, ky, kx])  # noqa: E731
        # stacked pixels (s2d > 1): output block cob reads every input block whose (diagonal) weights are not zero,
        # by "rows", "cols" or "image" GEMMs; the other modes read the output's own block only
        stacked = self.tensor(layer.src).s2d > 1 or self.tensor(layer.dst).s2d > 1
        if stacked and mode not in ("rows", "cols", "image"):
            return None
        cibs = range(wpad.shape[1] // n) if stacked else (cob,)
        if mode in ("pitch", "pitch+"):  # GEMM.dwp: tap (ky, kx) in column DWP_TAPS*(kh-1-ky) + kw-1-kx; the rest
            src = self.tensor(layer.src)    # diagonal. "pitch+": only where "pitch" starts late, and its extra row
            wp = src.wp                     # stays within the ACT memory
            if not (self.dw_lines and layer.dilations == (1, 1) and kh <= isa.DWP_ROWS and kw <= isa.DWP_TAPS
                    and isa.DWP_MIN_PITCH <= wp <= self.dw_lines) or (mode == "pitch+" and not (
                        self._pitch_shift(layer) and src.base + src.lines + wp <= self.act_lines)):
                return None
            cols = n + 1 if self.dw9 else n   # GEMM.dw9: column 8, the ninth PE (weights: the next block's row 0)
            blk = np.zeros((n, cols), np.int8)
            rest, fix = [], []
            e = self._pitch_shift(layer, mode)
            for ky in range(kh):
                for kx in range(kw):
                    c = isa.DWP_TAPS * (kh - 1 - ky) + kw - 1 - kx
                    tap = np.diag(diag(ky, kx)).astype(np.int8).tobytes()
                    if c < cols:
                        blk[:, c] = diag(ky, kx)
                        if ky == 0 and kx < e and diag(ky, kx).any():
                            # the GEMM starts e lines late: this tap read zero for the first outputs of the first
                            # row (their input is a pad): a GEMM over those outputs adds it (`_gemm_fields`)
                            fix.append((-4, kx, cob, tap, 0, 0, layer.strides[1]))
                    elif diag(ky, kx).any():
                        rest.append((ky, kx, cob, tap, 0, 0, layer.strides[1]))
            return [(-1, 0, cob, self._dwp_block(blk), 1, 0, 1)] + rest + fix
        if mode == "pitch2":  # GEMM.dwp at stride 2: one GEMM per column phase a, over the phase's columns
            if not (self.dw_lines and layer.dilations == (1, 1) and layer.strides == (2, 2) and kh <= isa.DWP_ROWS
                    and 2 <= kw <= 2 * (isa.DWP_TAPS - 1) and self._phase_cols(layer, 1) >= isa.DWP_MIN_PITCH
                    and self._phase_cols(layer, 0) <= self.dw_lines):
                return None
            taps = []
            for a in range(2):
                kxs = list(range(a, kw, 2))
                blk = np.zeros((n, n), np.int8)
                for ky in range(kh):
                    for kx in kxs:   # rows back in chains, phase columns back within one
                        blk[:, isa.DWP_TAPS * (kh - 1 - ky) + (kxs[-1] - kx) // 2] = diag(ky, kx)
                if blk.any():
                    taps.append((-3, a, cob, blk.tobytes(), 1, 0, 1))
            return taps
        if mode == "pcols":  # GEMM.dwp down the columns: tap (ky, kx) in column DWP_TAPS*(kw-1-kx) + kh-1-ky
            if not (self.dw_lines and layer.dilations == (1, 1) and layer.strides == (1, 1) and kh <= isa.DWP_TAPS
                    and kw <= isa.DWP_ROWS and 2 <= kw):
                return None
            kx0 = self._pcols_first(layer)
            blk = np.zeros((n, n + self.dw9), np.int8)
            for ky in range(kh):
                for kx in range(kx0, kw):
                    blk[:, isa.DWP_TAPS * (kw - 1 - kx) + kh - 1 - ky] = diag(ky, kx)
            # the kernel columns the row buffers do not reach: the "cols" GEMMs of those columns
            rest = [t for t in self._dw_taps(layer, wpad, cob, "cols") if t[0] < kx0]
            return [(-2, 0, cob, self._dwp_block(blk), 1, 0, 1)] + rest
        if mode == "image":
            (dy, dx), wp = layer.dilations, self.tensor(layer.src).wp
            if (kh - 1) * dy * wp + (kw - 1) * dx >= n:
                return None
            # two taps the same distance back (a kernel row wider than the padded row pitch, e.g. a one-pixel
            # wide input: rows share their pad column) would need one column: not this mode
            if kh > 1 and (kw - 1) * dx >= dy * wp:
                return None
            taps = []
            for cib in cibs:
                blk = np.zeros((n, n), np.int8)
                for ky in range(kh):
                    for kx in range(kw):
                        blk[:, (kh - 1 - ky) * dy * wp + (kw - 1 - kx) * dx] = diag(ky, kx, cib)
                if blk.any() or not stacked:
                    taps.append((0, 0, cib, blk.tobytes(), 1, 0, 1))
            return taps
        if mode == "cols":
            kh, kw = kw, kh
            sx, dx, pl = layer.strides[0], layer.dilations[0], layer.pads[0]
        else:
            sx, dx, pl = layer.strides[1], layer.dilations[1], layer.pads[1]
        tap = (lambda ky, kx, cib: diag(kx, ky, cib)) if mode == "cols" else diag
        taps = []
        for ky in range(kh):
            for a in range(sx):
                phase = [kx for kx in range(kw) if (kx * dx - pl - a) % sx == 0]
                for cib in cibs:
                    kxs = [kx for kx in phase if tap(ky, kx, cib).any()] if stacked else phase
                    if not kxs:
                        continue
                    d = {kx: (kx * dx - pl - a) // sx for kx in kxs}
                    dmin, dmax = min(d.values()), max(d.values())
                    skip = dmax - dmin
                    if skip > 7 or skip >= n:
                        return None
                    blk = np.zeros((n, n), np.int8)
                    for kx in kxs:
                        blk[:, dmax - d[kx]] = tap(ky, kx, cib)
                    if blk.any():
                        taps.append((ky, sx * dmin + a, cib, blk.tobytes(), 1, skip, sx))
        return taps

    def emit_gap(self, layer: GapLayer, loads: dict) -> None:
        """Global average: every pixel of every input block accumulated into one ACC line per output
        block; with stacked pixels (fold f) lane c + C*a of the input adds into channel c."""
        n = self.n
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        c = src.c // layer.fold
        if dst.cb > self._acc_cap():   # (one accumulator line per channel block, in the tile's slot)
            raise UnsupportedError(f"layer {layer.name!r}: {dst.cb} channel blocks exceed the accumulators",
                                   [layer.name])
        blocks = {}
        for ob in range(dst.cb):
            for ib in range(src.cb):
                blk = np.zeros((n, n), np.int8)
                for lane in range(n):
                    ch = ib * n + lane
                    if ch < src.c and ob * n <= ch % c < (ob + 1) * n:
                        blk[ch % c - ob * n, lane] = 1
                if blk.any():
                    blocks[ob, ib] = blk.tobytes()
        zero_b = bytes(n * n)
        g = self.weighted([zero_b, *blocks.values()])
        needs_in = loads.get(layer.src, ())
        acc = self._acc_base()
        # v2: the rows the producer's last PPU (or add) may still be writing (`_tail`) are summed last, by
        # GEMMs of their own: the others stream meanwhile
        tail, self._tail = self._tail, None
        split = {}
        if tail is not None and tail[0][0] == src.name and 0 < tail[0][2] < src.h:
            split[tail[0][1]] = tail[0][2]
        # the output blocks' accumulator lines start at zero: one GEMM of a zero block writes them all (the sums
        # below add every line into one accumulator line, reset=0; MobileNetV1-0.25 tile32x32: 8 GEMMs of one
        # line, 10 cycles each, before)
        self.compute(g, Op.GEMM, needs=needs_in, region=src.region(0, 0, 1),
                     wblk=g.block(zero_b), act=src.line(0, 0, 0), acc=acc, n_outer=1,
                     n_inner=dst.cb, act_so=0, act_si=0, acc_so=0, acc_si=1, reset=1)
        runs = []
        for ob in range(dst.cb):
            for ib in range(src.cb):
                if (ob, ib) in blocks:
                    y = split.get(ib, 0)
                    runs += [(ob, ib, y0, y1) for y0, y1 in ((0, y), (y, src.h)) if y1 > y0]
        runs.sort(key=lambda r: _overlaps(src.region(r[1], r[2], r[3]), tail[0]) if tail else False)
        for ob, ib, y0, y1 in runs:
            self.compute(g, Op.GEMM, needs=needs_in, region=src.region(ib, y0, y1), wblk=g.block(blocks[ob, ib]),
                         act=src.line(ib, y0, 0), acc=acc + ob, n_outer=y1 - y0, n_inner=src.w, act_so=src.wp,
                         act_si=1, acc_so=0, acc_si=0, reset=0)
        entry = self.param(np.full(n, layer.bias), np.full(n, layer.mult), np.full(n, layer.shift), layer.z_out,
                           layer.lo, layer.hi)
        self.compute(g, Op.PPU, region=dst.region(None, 0, 1), acc=acc, out=dst.line(0, 0, 0), n_outer=1,
                     n_inner=dst.cb, acc_so=0, acc_si=1, out_so=0, out_si=dst.block_lines, param=entry)
        self._next_acc()

    def emit_add(self, layer: AddLayer, loads: dict, cbs=None, rows=None) -> None:
        """Residual add on VEC: every channel block, all rows (or the given blocks and rows: fused)."""
        a, b, o = self.tensor(layer.a), self.tensor(layer.b), self.tensor(layer.dst)
        at = layer.attrs
        entry = self.param([at["z_a"], at["z_b"]], [at["mult_a"], at["mult_b"]], [at["shift"]], at["z_out"],
                           at["lo"], at["hi"])
        g = self.last()
        needs = tuple(loads.get(layer.a, ())) + tuple(loads.get(layer.b, ()))
        y0, nrows = rows if rows is not None else (0, a.h)
        # (one VEC over the rows reads a and b at one row pitch: operands laid out with different pads, e.g. one
        # sharing its pad column (`share_pad_column`), take a VEC per row)
        runs = [(y0, nrows)] if a.wp == b.wp else [(y, 1) for y in range(y0, y0 + nrows)]
        for cb in (cbs if cbs is not None else range(a.cb)):
            for y, k in runs:
                self.compute(g, Op.VEC, needs=needs, region=o.region(cb, y, y + k), halos=False, op=int(VecOp.ADD),
                             a=a.line(cb, y, 0), b=b.line(cb, y, 0), out=o.line(cb, y, 0), n_outer=k,
                             n_inner=a.w, in_so=a.wp, in_si=1, out_so=o.wp, out_si=1, param=entry)

    def emit_concat(self, layer: ConcatLayer, loads: dict) -> None:
        """Concat along the channels on VEC: each part's channel blocks copied (a max of a line with itself) into
        the output's blocks from the part's first one on, a VEC per block over its rows (pixels only: the output's
        halo is its own FILLs'). Every part but the last has a multiple of N channels (`concat_why_not`)."""
        o, g = self.tensor(layer.dst), self.last()
        first = 0
        for name in layer.srcs:
            t = self.tensor(name)
            for cb in range(t.cb):
                self.compute(g, Op.VEC, needs=tuple(loads.get(name, ())), region=o.region(first + cb, 0, o.h),
                             op=int(VecOp.MAX), a=t.line(cb, 0, 0), b=t.line(cb, 0, 0), out=o.line(first + cb, 0, 0),
                             n_outer=t.h, n_inner=t.w, in_so=t.wp, in_si=1, out_so=o.wp, out_si=1, param=0)
            first += t.cb

    def emit_maxpool(self, layer: MaxPoolLayer, loads: dict, temps: dict, cbs=None, out_rows=None,
                     sink=None, out_cols=None) -> None:
        """Max pool on VEC: a horizontal pass (max over the kernel's columns, into scratch `u`) and a vertical one
        (max over its rows, the last step into the output). `cbs`, `out_rows` = (first, end): those channel blocks
        and output rows only (`out_cols`: those output columns of a 1 x k pool), and `sink(fields, region)` takes
        each VEC instead of `compute` (a fused pool, `_queue_pool`: its VECs carry the region they write)."""
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        kh, kw = layer.kernel
        sh, sw = layer.strides
        pt, pl, _, _ = layer.pads
        ho, wo = dst.h, dst.w
        g = self.last()
        needs = loads.get(layer.src, ())
        u, v = temps[layer.name]
        if layer.name in self.edge_pools:   # real pixels only: each run of windows over its taps inside
            assert out_rows is None
            rows, cols = _tap_runs(ho, sh, pt, kh, src.h), _tap_runs(wo, sw, pl, kw, src.w)
            y0, y1 = min(o * sh - pt + a for o, _, a, _ in rows), max((o - 1) * sh - pt + b for _, o, _, b in rows)
        else:               # the halo holds -128 or a value below every pixel: whole windows
            p0, p1 = out_rows or (0, ho)
            rows, cols = [(p0, p1, 0, kh - 1)], [(*(out_cols or (0, wo)), 0, kw - 1)]
            assert out_cols is None or kh == 1
            y0, y1 = p0 * sh - pt, (p1 - 1) * sh - pt + kh - 1

        def vmax(a, b, out, n_outer, n_inner, in_so, in_si, out_so, out_si, region):
            fields = dict(op=int(VecOp.MAX), a=a, b=b, out=out, n_outer=n_outer, n_inner=n_inner, in_so=in_so,
                          in_si=in_si, out_so=out_so, out_si=out_si, param=0)
            if sink is not None:
                sink(fields, region)
            else:
                self.compute(g, Op.VEC, needs=needs, **fields)

        def chain(tap, acc, out, taps, n_outer, n_inner, in_so, in_si, out_so, out_si, acc_region, out_region):
            """out = max over taps of tap(t): acc(...) the running maximum (in place) until the last step."""
            first, last = taps[0], taps[-1]
            if first == last:   # one tap: a copy
                vmax(tap(first), tap(first), out, n_outer, n_inner, in_so, in_si, out_so, out_si, out_region)
                return
            for t in range(first + 1, last + 1):
                a = tap(first) if t == first + 1 else acc
                o, so, si, r = (out, out_so, out_si, out_region) if t == last else (acc, in_so, in_si, acc_region)
                vmax(a, tap(t), o, n_outer, n_inner, in_so, in_si, so, si, r)

        for cb in (cbs if cbs is not None else range(src.cb)):
            if kh == 1 and kw > 1:   # one row a window (a 1-d signal): the horizontal pass writes the output grid
                (r0, r1, _, _), = rows
                yf = r0 * sh - pt
                for o0, o1, a, b in cols:
                    x = o0 * sw - pl
                    chain(lambda kx, x=x, cb=cb, yf=yf: src.line(cb, yf, x + kx), u.line(0, yf, x),
                          dst.line(cb, r0, o0), (a, b), r1 - r0, o1 - o0, sh * src.wp, sw, dst.wp, 1,
                          (u.name, 0, yf, yf + (r1 - r0 - 1) * sh + 1), dst.region(cb, r0, r1))
                continue
            # horizontal: u[y, x] = max over kx of src[y, x*sw - pl + kx] (stored at column x*sw - pl), for
            # the rows the vertical pass reads
            if kw == 1:
                hsrc, hb = src, cb
            else:
                hsrc, hb = u, 0
                for o0, o1, a, b in cols:
                    x = o0 * sw - pl
                    chain(lambda kx, x=x, cb=cb: src.line(cb, y0, x + kx), u.line(0, y0, x), u.line(0, y0, x), (a, b),
                          y1 - y0 + 1, o1 - o0, src.wp, sw, src.wp, sw, (u.name, 0, y0, y1 + 1),
                          (u.name, 0, y0, y1 + 1))
            # vertical: max over ky, the last step writes the output grid
            for o0, o1, a, b in rows:
                y, x = o0 * sh - pt, -pl
                chain(lambda ky, y=y, t=hsrc, hb=hb, x=x: t.line(hb, y + ky, x), v and v.line(0, y + a, x),
                      dst.line(cb, o0, 0), (a, b), o1 - o0, wo, sh * src.wp, sw, dst.wp, 1,
                      v and (v.name, 0, y0, y1 + 1), dst.region(cb, o0, o1))

    # ---- 4. the program -----------------------------------------------------------------------
    def run(self) -> TileProgram:
        plan = self.plan
        self.assign_geometry()
        temps = {}
        for i, layer in enumerate(plan.layers):
            if isinstance(layer, MaxPoolLayer):
                src = self.tensor(layer.src)
                pair = []
                for tag, used in (("h", layer.kernel[1] > 1), ("v", layer.kernel[0] > 1)):
                    if not used:   # (a pass over one tap needs no scratch: `emit_maxpool`)
                        pair.append(None)
                        continue
                    t = TileTensor(f"{layer.name}.{tag}", min(src.c, self.n), src.h, src.w, src.zp, self.n,
                                   list(src.pads))
                    plan.tensors[t.name] = t
                    self.temps.append((t, i))
                    pair.append(t)
                temps[layer.name] = tuple(pair)
        if self.post_unit:
            self._order_for_fusion()
        self.fused_adds = self._fusable_adds() if self.post_unit else {}
        self.fused_dws = self._fusable_dws() if self.dw_post else {}
        self.fused_pools = self._fusable_pools() if self.post_unit and self.fuse_pools else {}
        # fused pools whose VECs left after the conv may run during the next layer, a conv (`_queue_pool`); what
        # they read and write then lives through that layer (`plan_act`)
        self.pool_spill = {i for i in self.fused_pools
                           if i + 2 < len(plan.layers) and isinstance(plan.layers[i + 2], ConvLayer)}
        self._pool_temps, self._pool_rows, self._pool_done = temps, {}, {}
        self.folds = {layer.name: w for i, layer in enumerate(plan.layers)
                      if (w := self._fold_width(i, layer)) is not None}
        self.in_place = self._alias_concats()
        try:
            act = self.plan_act()
        except ActOverflow:
            if not self.fused_pools:
                raise
            self.fused_pools, self.pool_spill = {}, set()   # (fused, the pools' lines are live longer: not where
            act = self.plan_act()                            # ACT is that tight)
        # LOAD ids: -1 and -2 the params (two parts), (input, chunk) a model input's rows in chunks (so that
        # the first layer starts on the first rows while the next ones load), 1000 + k weight group k.
        loads = {}
        for name in plan.inputs:
            t = self.tensor(name)
            step = max(1, -(-t.h // INPUT_CHUNKS), -(-MIN_CHUNK_LINES // t.w))
            self.in_chunks[name] = _input_chunks(t, step)
            if self.col_chunks and t.h == 1 and t.w >= 2 * MIN_CHUNK_LINES and any(
                    isinstance(layer, ConvLayer) and layer.src == name and layer.name in self.folds
                    for layer in plan.layers):
                self.in_chunks[name] = _column_chunks(t)
                self.in_cols.add(name)
            loads[name] = tuple((name, c) for c in range(len(self.in_chunks[name])))
        for name in plan.inputs:
            if self.post_unit:  # dripped: a first-layer GEMM waits for the FILLs of the rows it reads only
                self._drip += [(-1, *run) for run in self._halo_runs(self.tensor(name))]
            else:
                self.fill_halo(self.last(), self.tensor(name))
        layer_records = []
        for i, layer in enumerate(plan.layers):
            self.flush_fills(before=i - 1)
            self.layer = i
            start_group = len(self.groups)
            if (i - 1) in self.fused_dws:   # computed by the layer before's PPU.dw
                layer_records.append({"name": layer.name, "op": layer.op, "macs": 0, "fused_into":
                                      plan.layers[i - 1].name, "groups": [start_group, start_group]})
                continue
            if (i - 1) in self.fused_pools:   # computed during the conv before (`_queue_pool`)
                layer_records.append({"name": layer.name, "op": layer.op, "macs": 0, "fused_into":
                                      plan.layers[i - 1].name, "groups": [start_group, start_group]})
                self._tail = None
                continue
            if self.post_unit and isinstance(layer, (ConvLayer, GapLayer)):
                self._halo_pending = [self.tensor(layer.dst if i not in self.fused_dws else self.fused_dws[i].dst)]
                if i in self.fused_adds:
                    self._halo_pending.append(self.tensor(self.fused_adds[i].dst))
                if i in self.fused_pools:
                    self._halo_pending.append(self.tensor(self.fused_pools[i].dst))
            elif not (isinstance(layer, AddLayer) and (i - 1) in self.fused_adds) and layer.name not in self.in_place:
                self.fill_halo(self.last(), self.tensor(layer.dst))   # (an in-place Concat's halo: its parts')
            fused_add = isinstance(layer, AddLayer) and (i - 1) in self.fused_adds
            if not isinstance(layer, (ConvLayer, GapLayer)) and not fused_add:
                self._tail = None   # (a conv or global pool reads it: `_stagger`, `emit_gap`)
            if isinstance(layer, ConvLayer):
                self.emit_conv(layer, loads)
            elif isinstance(layer, GapLayer):
                self.emit_gap(layer, loads)
            elif isinstance(layer, AddLayer):
                if (i - 1) not in self.fused_adds:
                    self.emit_add(layer, loads)
            elif isinstance(layer, MaxPoolLayer):
                self.emit_maxpool(layer, loads, temps)
            elif isinstance(layer, ConcatLayer) and layer.name not in self.in_place:
                self.emit_concat(layer, loads)
            rec = {"name": layer.name, "op": layer.op, "macs": layer.macs, "groups": [start_group, len(self.groups)]}
            if i in self.fused_dws:   # (its PPU.dw computes the depthwise layer after it: its MACs too)
                rec.update(macs=layer.macs + self.fused_dws[i].macs, dw_post=self.fused_dws[i].name)
            if layer.name in self.folds:   # (its one row computed as rows of this many pixels: `_fold_width`)
                rec["fold"] = self.folds[layer.name]
            if layer.name in self.in_place:   # (its parts' producers wrote it: no instruction)
                rec["in_place"] = True
            layer_records.append(rec)
        self.flush_fills()
        self.layer = -1
        for name in plan.inputs:
            self._first_chunk(name)
        self._finals = (act, layer_records)
        return self.finalize(act, copy.deepcopy(layer_records))

    def _first_chunk(self, name: str) -> None:
        """Model input `name`'s first LOAD chunk: the rows the first pixel tile reads (its GEMMs up to the next
        that starts a sum), not a fixed step, so that no row more than it needs comes before the first GEMM
        (MobileNetV1-0.25 tile32x32: 35 rows instead of three chunks of 13). The instructions' chunks follow."""
        old, t = self.in_chunks[name], self.tensor(name)
        if len(old) < 2 or old[0][1] - old[0][0] > 1 or name in self.in_cols:   # (an FC layer's input: whole blocks
            return                                                               # per chunk; column chunks)
        step = old[0][3] - old[0][2]
        reads = [e for g in self.groups for e in g.compute if e.reads is not None and e.reads[0] == name]
        if not reads:
            return
        end = reads[0].reads[3]
        for e in reads[1:]:
            if e.insn_args[1]["reset"]:
                break
            end = max(end, e.reads[3])
        if end <= step or end >= t.h:
            return
        cuts = [0, end] + list(range(end + step, t.h, step)) + [t.h]
        new = [(cb, cb + 1, a, b) for a, b in zip(cuts, cuts[1:]) if b > a for cb in range(t.cb)]
        self.in_chunks[name] = new
        for g in self.groups:
            for e in g.compute:
                if any(isinstance(d, tuple) and d[0] == name for d in e.needs):
                    keep = [d for d in e.needs if not (isinstance(d, tuple) and d[0] == name)]
                    e.needs = frozenset(keep) | (
                        frozenset(self._needed_chunks((), e.reads)) if e.reads is not None and e.reads[0] == name
                        else frozenset((name, c) for c in range(len(new))))

    def refinalize(self, loads: str, split: bool = False, timed: tuple | None = None) -> TileProgram:
        """The same schedule with another LOAD placement policy (after `run`). `timed`: (a program of this
        schedule, the issue cycle of each of its instructions in the tile model), to prefetch weights by
        (`finalize`)."""
        act, layer_records = self._finals
        times = None if timed is None else {k: int(timed[1][i]) for k, i in timed[0].emitted_at.items()}
        return self.finalize(act, copy.deepcopy(layer_records), loads, split, times)

    def finalize(self, act: dict, layer_records: list[dict], loads: str = "eager", split: bool = False,
                 times: dict | None = None) -> TileProgram:
        """The program: LOADs and STOREs placed around the compute groups (`hwc.tile.place`). `loads`: "eager" puts
        a deferred load (the params, the second weight group) after the next GEMM; "paced" only once the GEMMs since
        the last LOAD cover its estimated duration. `split`: the first weight group loads in pieces. `times`: the
        issue cycle of every compute instruction, (group, index) -> cycle, in this schedule's program without
        prefetch: later groups' weights are then prefetched into a bank still in use."""
        from hwc.tile.place import Placement

        return Placement(self, loads, split, times).program(act, layer_records)


def _post_busy(t: isa.Timing, op: Op, fields: dict) -> int:
    """Cycles a PPU, VEC or FILL keeps POST busy (hwc.isa.Timing)."""
    lines = _lines(fields)
    if op == Op.PPU:
        return t.ppu_busy(fields["n_outer"], fields["n_inner"], fields.get("dw", 0), fields.get("dwc", 0),
                          fields.get("neg", 0))
    if op == Op.VEC:
        return t.VEC_OVERHEAD + t.VEC_CYCLES_PER_LINE * lines
    return t.FILL_OVERHEAD + lines


def _lines(fields: dict) -> int:
    """The lines a GEMM, PPU or VEC loops over, or a FILL writes."""
    return fields.get("n_outer", fields.get("rows", 1)) * fields.get("n_inner", fields.get("count", 1))


def _tile_list(ho: int, r: int) -> list[tuple[int, int]]:
    return [(oy0, min(r, ho - oy0)) for oy0 in range(0, ho, r)]


def _overlaps(read, written) -> bool:
    """Whether a GEMM's read region meets the last POST instruction's write region (both
    (tensor, channel block or None, first row, end row); an unknown write region meets everything)."""
    if read is None or written is None:
        return written is not None
    if written[0] == "*":
        return True
    if read[0] != written[0]:
        return False
    if read[1] is not None and written[1] is not None and read[1] != written[1]:
        return False
    return read[2] < written[3] and written[2] < read[3]


def _tap_runs(n_out: int, stride: int, pad: int, k: int, size: int) -> list[tuple[int, int, int, int]]:
    """Runs of output positions [o0, o1) whose window taps inside [0, size) are the same [a, b] (a window
    starting at o*stride - pad): the interior one run, each edge position one of its own."""
    runs: list[tuple[int, int, int, int]] = []
    for o in range(n_out):
        s0 = o * stride - pad
        a, b = max(0, -s0), min(k - 1, size - 1 - s0)
        if a > b:
            raise AssertionError("a max pool window without a pixel")   # (pads < kernel: `assign_geometry`)
        if runs and runs[-1][1] == o and runs[-1][2:] == (a, b):
            runs[-1] = (runs[-1][0], o + 1, a, b)
        else:
            runs.append((o, o + 1, a, b))
    return runs


#: VEC's loop counts (12 bits) and outer strides (12 bits, signed): `Codegen.compute` splits a VEC beyond them.
VEC_MAX_COUNT, VEC_MAX_STRIDE = (1 << 12) - 1, (1 << 11) - 1


def _is_vec(d: tuple) -> bool:
    """Whether a `_drip` entry is a fused max pool's VEC (layer, region, "VEC", fields, the pool's layer), not a
    FILL."""
    return d[2] == "VEC"


def _vec_legal(fields: dict) -> list[dict]:
    """A VEC as VECs whose fields fit: an unused outer stride (one row thousands of lines apart) zeroed, rows wider
    than the fields one row and piece at a time (`_vec_pieces`)."""
    if fields["n_outer"] == 1:
        fields = dict(fields, **{k: 0 for k in ("in_so", "out_so") if abs(fields[k]) > VEC_MAX_STRIDE})
    if _vec_fits(fields):
        return [fields]
    return [q for piece in _vec_pieces(fields) for q in _vec_legal(piece)]


def _vec_fits(f: dict) -> bool:
    return (f["n_outer"] <= VEC_MAX_COUNT and f["n_inner"] <= VEC_MAX_COUNT
            and (f["n_outer"] == 1 or max(abs(f["in_so"]), abs(f["out_so"])) <= VEC_MAX_STRIDE))


def _vec_pieces(f: dict) -> list[dict]:
    """A VEC whose counts or outer strides do not fit its fields (a row of thousands of pixels: a 1-d signal) as VECs
    that do, in the same order: one a row (outer strides 0), each row in pieces of at most VEC_MAX_COUNT lines."""
    out = []
    for o in range(f["n_outer"]):
        for i0 in range(0, f["n_inner"], VEC_MAX_COUNT):
            n = min(VEC_MAX_COUNT, f["n_inner"] - i0)
            out.append(dict(f, a=f["a"] + o * f["in_so"] + i0 * f["in_si"], b=f["b"] + o * f["in_so"] + i0 * f["in_si"],
                            out=f["out"] + o * f["out_so"] + i0 * f["out_si"], n_outer=1, n_inner=n, in_so=0,
                            out_so=0))
    return out
