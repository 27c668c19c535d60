"""The tile scheduler: tile layers -> a command stream, a DRAM image and a memory map.

Pipeline (one function each):
1. `assign_geometry`: every ACT tensor gets the padding its consumers need (a halo
   filled with its zero point, or -128 for max pooling) and residual pairs share one
   geometry so one VEC instruction walks both.
2. `plan_act`: ACT lines for every tensor, shared between tensors whose lifetimes (in
   layers) do not overlap (hwc.lower.memplan, unit = lines).
3. `emit_*`: per layer, the compute instructions, grouped by the weight blocks they use.
   Convolution: for each output-channel block (cob), for each pixel tile (as many output
   rows as the accumulators hold), one GEMM per nonzero weight block (tap ky,kx x input
   block), the first resetting the accumulators; then one PPU writes the requantized
   lines into the output's grid.
4. `finalize`: weight groups alternate between the two WGT banks; the LOAD of group k+1
   is placed before the compute of group k (waiting for compute idle, so group k-1 has
   released that bank), which makes every weight load after the first overlap compute.
   A compute instruction waits for the LOAD unit only when it needs the most recently
   issued LOAD (all earlier ones are complete by then: the LOAD unit is serial).

Timing and semantics of every instruction: docs/tile.md; encoding: hwc/isa.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwc import isa
from hwc.errors import UnsupportedError
from hwc.isa import Mem, Op, VecOp, Wait
from hwc.lower.memplan import Interval, check_plan, lower_bound, naive_total, peak, plan_best
from hwc.tile.layers import AddLayer, ConvLayer, GapLayer, MaxPoolLayer, TilePlan, TileTensor

INT8_MIN = -128


@dataclass
class Emitted:
    """A compute instruction and the LOADs (ids) it needs to be complete."""

    insn_args: tuple
    needs: frozenset = frozenset()
    layer: int = -1
    wait: Wait = Wait.NONE     # explicit waits (hazards on units other than LOAD)


@dataclass
class Group:
    """Compute instructions using one set of weight blocks (None: no weights)."""

    blocks: list[bytes] | None
    compute: list[Emitted] = field(default_factory=list)
    index: dict[bytes, int] = field(default_factory=dict)   # block bytes -> position (dedup)
    bank: int = 0
    load_id: int = -1
    est: int = 0      # estimated compute cycles (for sizing the next group's load)

    def block(self, data: bytes) -> int:
        if data not in self.index:
            self.index[data] = len(self.blocks)
            self.blocks.append(data)
        return self.index[data]


@dataclass
class TileProgram:
    program: list[isa.Insn]
    dram: bytearray                 # constant image: params + weight groups
    dram_regions: list[dict]        # name, offset, size, kind
    inputs: dict[str, int]          # tile tensor -> DRAM byte offset
    outputs: dict[str, int]
    dram_bytes: int                 # total DRAM footprint incl. inputs and outputs
    act_plan: dict                  # ACT memory report (lines)
    layers: list[dict]              # per layer: name, op, macs, instruction range
    insn_layer: list[int]           # layer index of every instruction (-1: none)


class Codegen:
    def __init__(self, plan: TilePlan, target: dict, double_buffer: bool = True, dram_base: int = 0,
                 tiling: str = "cost"):
        feats = target.get("features", {})
        self.post_unit = bool(feats.get("post_unit"))   # v2: PPU/VEC/FILL overlap the array
        self.depthwise = bool(feats.get("depthwise"))   # v2: GEMM.dw
        self.tiling = tiling          # v2 pixel-tile policy: "cost" (model), "quarter" or "max"
        self._halo_pending = None     # v2: output halo FILLs wait for the layer's first PPU
        self._post_writes = None      # v2: lines the last POST instruction writes (None: nothing pending)
        self._acc_half = 0
        self.plan = plan
        self.dram_base = dram_base  # byte address of this program's data in external memory (beat aligned)
        self.double_buffer = double_buffer
        self.t = target
        self.n = target["array"]["rows"]
        sp = target["scratchpad"]
        self.act_lines, self.acc_lines = sp["act_lines"], sp["acc_lines"]
        self.bank_blocks, self.param_entries = sp["wgt_bank_blocks"], sp["param_entries"]
        self.beat = target["bus"]["bytes"]
        self.peb = isa.param_entry_beats(self.n, self.beat)
        self.groups: list[Group] = []
        self.params: list[bytes] = []
        self.param_index: dict[bytes, int] = {}
        self.layer = -1
        self.temps: list[tuple[TileTensor, int]] = []   # (tensor, layer step) scratch for max pooling

    # ---- helpers ------------------------------------------------------------------------------
    def tensor(self, name: str) -> TileTensor:
        return self.plan.tensors[name]

    def param(self, bias, mult, shift, z_out: int, lo: int, hi: int) -> int:
        n = self.n

        def lanes(v, fill):
            out = np.full(n, fill, np.int64)
            v = np.asarray(v).reshape(-1)
            out[:len(v)] = v
            return out

        data = isa.pack_param_entry(lanes(bias, 0), lanes(mult, 1 << 30), lanes(shift, 1), z_out, lo, hi, n, self.beat)
        if data not in self.param_index:
            self.param_index[data] = len(self.params)
            self.params.append(data)
        return self.param_index[data]

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
            grown = len(g.blocks) + len(new)
            # A group's load overlaps the previous group's compute: grow it only while its load
            # (N beats a block) fits in that compute time, so that every load after the first hides.
            # (The first group's load cannot hide: it holds a single request.)
            prev = [x for x in self.groups[:-1] if x.blocks is not None]
            budget = prev[-1].est if prev else 0
            if not g.blocks or (grown <= self.bank_blocks and grown * self.n <= budget):
                return g
        g = Group([])
        self.groups.append(g)
        return g

    def compute(self, g: Group, opcode: Op, needs=(), wait: Wait = Wait.NONE, region=None, **fields) -> None:
        """Append a compute instruction. `region` = (tensor, channel block or None for all, first row,
        end row) of the ACT lines a POST instruction writes, or a GEMM reads (v2 hazard tracking)."""
        if self.post_unit:
            # v2 hazards (docs/tile-v2.md): a PPU reads accumulators GEMMs write, a FILL may overwrite
            # lines in-flight GEMMs still read: both wait for COMPUTE. A GEMM waits for POST only when it
            # reads lines the last POST instruction writes: that one is the only POST work possibly in
            # flight (when a POST instruction issues, every earlier one has finished).
            if opcode in (Op.PPU, Op.FILL):
                wait |= Wait.COMPUTE
            if opcode == Op.GEMM and _overlaps(region, self._post_writes):
                wait |= Wait.POST
            if wait & Wait.POST:
                self._post_writes = None
            if opcode in (Op.PPU, Op.VEC, Op.FILL):
                self._post_writes = region if region is not None else ("*", None, -1 << 30, 1 << 30)
            if opcode == Op.PPU and self._halo_pending is not None:
                pending, self._halo_pending = self._halo_pending, None
                g.compute.append(Emitted((opcode, fields), frozenset(needs), self.layer, wait))
                for t in pending:  # the layer's output halos, once its first PPU has drained GEMMs
                    self.fill_halo(g, t)
                return
        g.compute.append(Emitted((opcode, fields), frozenset(needs), self.layer, wait))
        lines = fields.get("n_outer", 1) * fields.get("n_inner", fields.get("count", 1))
        g.est += {Op.GEMM: max(lines, self.n + 2), Op.PPU: lines + 20, Op.VEC: 3 * lines + 15}.get(opcode, lines + 2)

    # ---- 1. geometry --------------------------------------------------------------------------
    def assign_geometry(self) -> None:
        for layer in self.plan.layers:
            if isinstance(layer, ConvLayer):
                t = self.tensor(layer.src)
                t.need_pads(layer.pads, t.zp)
            elif isinstance(layer, MaxPoolLayer):
                self.tensor(layer.src).need_pads(layer.pads, INT8_MIN)
        changed = True
        while changed:  # residual operands and their output share one geometry
            changed = False
            for layer in self.plan.layers:
                if isinstance(layer, AddLayer):
                    ts = [self.tensor(layer.a), self.tensor(layer.b), self.tensor(layer.dst)]
                    for k in range(4):
                        m = max(t.pads[k] for t in ts)
                        for t in ts:
                            if t.pads[k] != m:
                                t.pads[k] = m
                                changed = True
                    for t in ts:
                        if t.fill is None and any(t.pads):
                            t.fill = t.zp

    # ---- 2. ACT memory plan ---------------------------------------------------------------
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

    def plan_act(self) -> dict:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        steps = len(self.plan.layers)
        for name in self.plan.inputs:
            first[name] = 0
            last[name] = 0
        for i, layer in enumerate(self.plan.layers):
            for name in _reads(layer):
                last[name] = max(last.get(name, i), i)
            first.setdefault(layer.dst, i)
            last[layer.dst] = max(last.get(layer.dst, i), i)
        for i, add in self.fused_adds.items():  # a fused add writes its output during the conv (step i)
            first[add.dst] = min(first[add.dst], i)
            for name in _reads(add):
                first[name] = min(first.get(name, i), i)
        for name in self.plan.outputs:
            last[name] = steps
        ivs = [Interval(n, self.tensor(n).lines, first[n], last[n]) for n in first]
        ivs += [Interval(t.name, t.lines, step, step) for t, step in self.temps]
        offsets, how = plan_best(ivs, 1)
        check_plan(offsets, ivs)
        need = peak(offsets, ivs)
        if need > self.act_lines:
            big = max(ivs, key=lambda iv: iv.size)
            raise UnsupportedError(
                f"the model's activations need {need} ACT lines at once but target {self.t['name']!r} has "
                f"{self.act_lines} (scratchpad.act_lines); the largest tensor {big.name!r} alone takes {big.size} "
                f"lines ({self.tensor(big.name).cb} channel blocks x {self.tensor(big.name).hp}x"
                f"{self.tensor(big.name).wp} padded pixels). Use a target with more act_lines; spilling activations "
                f"to external memory is not implemented.", [big.name])
        for t, _ in self.temps:
            t.base = offsets[t.name]
        for n in first:
            self.tensor(n).base = offsets[n]
        return {"peak_lines": need, "lower_bound_lines": lower_bound(ivs), "naive_lines": naive_total(ivs),
                "act_lines": self.act_lines, "method": how,
                "peak_bytes": need * self.n, "lower_bound_bytes": lower_bound(ivs) * self.n,
                "naive_bytes": naive_total(ivs) * self.n,
                "buffers": [{"name": iv.name, "offset": offsets[iv.name], "size": iv.size, "start": iv.start,
                             "end": iv.end} for iv in ivs]}  # lines; steps = layers (the report's plot)

    # ---- 3. layers ------------------------------------------------------------------------------
    def fill_halo(self, g: Group, t: TileTensor) -> None:
        if t.fill is None or not any(t.pads):
            return
        pt, pl, pb, pr = t.pads
        v = t.fill & 0xFF
        for cb in range(t.cb):
            runs = [(t.line(cb, -pt, -pl), pt * t.wp + pl)]
            runs += [(t.line(cb, y, t.w), pr + pl) for y in range(t.h - 1)]
            runs.append((t.line(cb, t.h - 1, t.w), pr + pb * t.wp))
            for addr, count in runs:
                if count:
                    self.compute(g, Op.FILL, region=(t.name, cb, -1 << 30, 1 << 30), addr=addr, count=count,
                                 value=v)

    def emit_conv(self, layer: ConvLayer, loads: dict) -> None:
        n = self.n
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        m, c, kh, kw = layer.weight.shape
        sh, sw = layer.strides
        dh, dw = layer.dilations
        pt, pl, _, _ = layer.pads
        ho, wo = dst.h, dst.w
        acc_cap = self.acc_lines // 2 if self.post_unit else self.acc_lines  # v2: two halves, ping-pong
        if wo > acc_cap:
            raise UnsupportedError(f"layer {layer.name!r}: an output row of {wo} pixels does not fit "
                                   f"{acc_cap} accumulator lines", [layer.name])
        rows_per_tile = max(1, min(ho, acc_cap // wo))
        if self.post_unit and self.tiling == "cost":
            rows_per_tile = self._tile_rows(layer, ho, wo, rows_per_tile)
        elif self.post_unit and self.tiling == "quarter":
            rows_per_tile = min(rows_per_tile, max(-(-ho // 4), -(-8 * n // wo)))
        cbo, cbi = -(-m // n), -(-c // n)
        wpad = np.zeros((cbo * n, cbi * n, kh, kw), np.int8)
        wpad[:m, :c] = layer.weight
        needs_in = loads.get(layer.src, ())
        dw_mode = (self.depthwise and layer.group == c == m and kw > 1 and src.s2d == dst.s2d == 1)
        for cob in range(cbo):
            # a tap: (ky, first input column, input block, weight block, dw, skip, column step)
            taps = self._dw_taps(layer, wpad, cob) if dw_mode else None
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
            lanes = slice(cob * n, min(m, (cob + 1) * n))
            entry = self.param(layer.bias[lanes], layer.mult[lanes], layer.shift[lanes], layer.z_out, layer.lo,
                               layer.hi)
            chunks = [taps[i:i + self.bank_blocks] for i in range(0, len(taps), self.bank_blocks)]
            tiles = [(oy0, min(rows_per_tile, ho - oy0)) for oy0 in range(0, ho, rows_per_tile)]
            g = self.weighted([t[3] for t in chunks[0]]) if len(chunks) == 1 else None
            acc = self._acc_base()
            for oy0, rows in tiles:
                for ci, chunk in enumerate(chunks):
                    if len(chunks) > 1:  # the cob's weights exceed a bank: reload them per pixel tile
                        g = self.weighted([t[3] for t in chunk])
                    for k, (ky, x0, cib, data, dwf, skip, si) in enumerate(chunk):
                        y0 = oy0 * sh + ky * dh - pt
                        self.compute(g, Op.GEMM, needs=needs_in, region=(src.name, cib, y0, y0 + (rows - 1) * sh + 1),
                                     wblk=g.block(data),
                                     act=src.line(cib, oy0 * sh + ky * dh - pt, x0),
                                     acc=acc, n_outer=rows, n_inner=wo + skip, act_so=sh * src.wp, act_si=si,
                                     acc_so=wo, acc_si=1, reset=int(ci == 0 and k == 0), dw=dwf, skip=skip)
                self.compute(g, Op.PPU, region=(dst.name, cob, oy0, oy0 + rows), acc=acc, out=dst.line(cob, oy0, 0),
                             n_outer=rows, n_inner=wo, acc_so=wo, acc_si=1, out_so=dst.wp, out_si=1, param=entry)
                if self.layer in self.fused_adds:
                    self.emit_add(self.fused_adds[self.layer], loads, cbs=[cob], rows=(oy0, rows))
                acc = self._next_acc()

    def _tile_rows(self, layer: ConvLayer, ho: int, wo: int, most: int) -> int:
        """v2: output rows per pixel tile. More tiles let a tile's PPU (and fused add) overlap the next
        tile's GEMMs, but cost a weight preload per GEMM when tiles are short: pick the cheapest by a
        small cost model (GEMM cycles vs the post-processing left exposed after the last tile)."""
        n = self.n
        m, c, kh, kw = layer.weight.shape
        cbo = -(-m // n)
        taps = kh * max(1, kw if layer.group == 1 else 1) * (1 if layer.group > 1 else -(-c // n))
        fused = self.layer in self.fused_adds
        best = None
        for r in sorted({most, *(max(1, -(-ho // k)) for k in (2, 4, 8, 16))}):
            if r > most:
                continue
            tiles = -(-ho // r)
            p = r * wo
            gemm_tile = taps * max(p, n + 2)
            post_tile = p + 20 + (3 * p + 15 if fused else 0)
            cost = cbo * tiles * max(gemm_tile, post_tile) + post_tile
            if best is None or cost < best[0]:
                best = (cost, r)
        return best[1]

    def _acc_base(self) -> int:
        return self._acc_half * (self.acc_lines // 2) if self.post_unit else 0

    def _next_acc(self) -> int:
        """v2: consecutive pixel tiles alternate accumulator halves (the PPU drains one while GEMMs fill the other)."""
        self._acc_half ^= 1
        return self._acc_base()

    def _dw_taps(self, layer: ConvLayer, wpad: np.ndarray, cob: int):
        """Depthwise-mode taps (docs/tile-v2.md): per kernel row and column phase of the stride, one GEMM
        whose weight column c multiplies the line streamed c earlier: taps kx of phase a at offsets
        d = (kx*dx - pl - a) / sx land in column dmax - d. None when the kernel does not fit the mode."""
        n = self.n
        _, _, kh, kw = wpad.shape
        sx, dx, pl = layer.strides[1], layer.dilations[1], layer.pads[1]
        taps = []
        for ky in range(kh):
            for a in range(sx):
                kxs = [kx for kx in range(kw) if (kx * dx - pl - a) % sx == 0]
                if not kxs:
                    continue
                d = {kx: (kx * dx - pl - a) // sx for kx in kxs}
                dmin, dmax = min(d.values()), max(d.values())
                skip = dmax - dmin
                if skip > 7 or skip >= n:
                    return None
                blk = np.zeros((n, n), np.int8)
                for kx in kxs:
                    for r in range(n):
                        blk[r, dmax - d[kx]] = wpad[cob * n + r, cob * n + r, ky, kx]
                if blk.any():
                    taps.append((ky, sx * dmin + a, cob, blk.tobytes(), 1, skip, sx))
        return taps

    def emit_gap(self, layer: GapLayer, loads: dict) -> None:
        """Global average: every pixel of every input block accumulated into one ACC line per output
        block; with stacked pixels (fold f) lane c + C*a of the input adds into channel c."""
        n = self.n
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        c = src.c // layer.fold
        if dst.cb > self.acc_lines:
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
        for ob in range(dst.cb):
            self.compute(g, Op.GEMM, needs=needs_in, region=(src.name, None, 0, src.h),
                         wblk=g.block(zero_b), act=src.line(0, 0, 0), acc=acc + ob, n_outer=1,
                         n_inner=1, act_so=0, act_si=0, acc_so=0, acc_si=0, reset=1)
            for ib in range(src.cb):
                if (ob, ib) in blocks:
                    self.compute(g, Op.GEMM, needs=needs_in, region=(src.name, ib, 0, src.h),
                                 wblk=g.block(blocks[ob, ib]), act=src.line(ib, 0, 0),
                                 acc=acc + ob, n_outer=src.h, n_inner=src.w, act_so=src.wp, act_si=1, acc_so=0,
                                 acc_si=0, reset=0)
        entry = self.param(np.full(n, layer.bias), np.full(n, layer.mult), np.full(n, layer.shift), layer.z_out,
                           layer.lo, layer.hi)
        self.compute(g, Op.PPU, region=(dst.name, None, 0, 1), acc=acc, out=dst.line(0, 0, 0), n_outer=1,
                     n_inner=dst.cb, acc_so=0, acc_si=1, out_so=0, out_si=dst.hp * dst.wp, param=entry)
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
        for cb in (cbs if cbs is not None else range(a.cb)):
            self.compute(g, Op.VEC, needs=needs, region=(o.name, cb, y0, y0 + nrows), op=int(VecOp.ADD),
                         a=a.line(cb, y0, 0), b=b.line(cb, y0, 0), out=o.line(cb, y0, 0), n_outer=nrows,
                         n_inner=a.w, in_so=a.wp, in_si=1, out_so=o.wp, out_si=1, param=entry)

    def emit_maxpool(self, layer: MaxPoolLayer, loads: dict, temps: dict) -> None:
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        kh, kw = layer.kernel
        sh, sw = layer.strides
        pt, pl, _, _ = layer.pads
        ho, wo = dst.h, dst.w
        g = self.last()
        needs = loads.get(layer.src, ())
        rows = (ho - 1) * sh + kh   # input rows the vertical pass reads, from row -pt
        u, v = temps[layer.name]

        def vmax(a, b, out, n_outer, n_inner, in_so, in_si, out_so, out_si):
            self.compute(g, Op.VEC, needs=needs, op=int(VecOp.MAX), a=a, b=b, out=out, n_outer=n_outer,
                         n_inner=n_inner, in_so=in_so, in_si=in_si, out_so=out_so, out_si=out_si, param=0)

        for cb in range(src.cb):
            # horizontal: u[y, x0] = max over kx of src[y, x0 + kx], for the needed rows and pooled columns
            if kw == 1:
                hsrc = src
            else:
                hsrc = u
                for kx in range(1, kw):
                    a = src.line(cb, -pt, -pl) if kx == 1 else u.line(cb, -pt, -pl)
                    vmax(a, src.line(cb, -pt, -pl + kx), u.line(cb, -pt, -pl), rows, wo, src.wp, sw, u.wp, sw)
            # vertical: max over ky, the last step writes the output grid
            if kh == 1:
                vmax(hsrc.line(cb, -pt, -pl), hsrc.line(cb, -pt, -pl), dst.line(cb, 0, 0), ho, wo, sh * src.wp, sw,
                     dst.wp, 1)
                continue
            for ky in range(1, kh):
                a = hsrc.line(cb, -pt, -pl) if ky == 1 else v.line(cb, -pt, -pl)
                b = hsrc.line(cb, -pt + ky, -pl)
                last = ky == kh - 1
                out, out_so, out_si = (dst.line(cb, 0, 0), dst.wp, 1) if last else (v.line(cb, -pt, -pl),
                                                                                    sh * src.wp, sw)
                vmax(a, b, out, ho, wo, sh * src.wp, sw, out_so, out_si)

    # ---- 4. the program -----------------------------------------------------------------------
    def run(self) -> TileProgram:
        plan = self.plan
        self.assign_geometry()
        temps = {}
        for i, layer in enumerate(plan.layers):
            if isinstance(layer, MaxPoolLayer):
                src = self.tensor(layer.src)
                pair = []
                for tag in ("h", "v"):
                    t = TileTensor(f"{layer.name}.{tag}", src.c, src.h, src.w, src.zp, self.n, list(src.pads))
                    plan.tensors[t.name] = t
                    self.temps.append((t, i))
                    pair.append(t)
                temps[layer.name] = tuple(pair)
        self.fused_adds = self._fusable_adds() if self.post_unit else {}
        act = self.plan_act()
        # input loads are LOAD ids 1.. (0 = params)
        loads = {name: (1 + k,) for k, name in enumerate(plan.inputs)}
        for name in plan.inputs:
            self.fill_halo(self.last(), self.tensor(name))
        layer_records = []
        for i, layer in enumerate(plan.layers):
            self.layer = i
            start_group = len(self.groups)
            if self.post_unit and isinstance(layer, (ConvLayer, GapLayer)):
                self._halo_pending = [self.tensor(layer.dst)]
                if i in self.fused_adds:
                    self._halo_pending.append(self.tensor(self.fused_adds[i].dst))
            elif not (isinstance(layer, AddLayer) and (i - 1) in self.fused_adds):
                self.fill_halo(self.last(), self.tensor(layer.dst))
            if isinstance(layer, ConvLayer):
                self.emit_conv(layer, loads)
            elif isinstance(layer, GapLayer):
                self.emit_gap(layer, loads)
            elif isinstance(layer, AddLayer):
                if (i - 1) not in self.fused_adds:
                    self.emit_add(layer, loads)
            elif isinstance(layer, MaxPoolLayer):
                self.emit_maxpool(layer, loads, temps)
            layer_records.append({"name": layer.name, "op": layer.op, "macs": layer.macs,
                                  "groups": [start_group, len(self.groups)]})
        self.layer = -1
        return self.finalize(act, layer_records)

    def finalize(self, act: dict, layer_records: list[dict]) -> TileProgram:
        plan = self.plan
        n, beat = self.n, self.beat
        if len(self.params) > self.param_entries:
            raise UnsupportedError(
                f"the model needs {len(self.params)} requantization parameter sets but target {self.t['name']!r} "
                f"has {self.param_entries} (scratchpad.param_entries); use a target with more.", [])
        # DRAM image from dram_base: params, then weight groups, then inputs and outputs (beat aligned).
        base = self.dram_base
        dram = bytearray(b"".join(self.params))
        regions = [{"name": "params", "offset": base, "size": len(dram), "kind": "params",
                    "entries": len(self.params), "entry_beats": self.peb}]
        weighted = [g for g in self.groups if g.blocks is not None and g.blocks]
        for k, g in enumerate(weighted):
            g.bank = k % 2 if self.double_buffer else 0
            off = len(dram)
            dram += b"".join(g.blocks)
            regions.append({"name": f"weights.group{k}", "offset": base + off, "size": len(dram) - off,
                            "kind": "weights", "blocks": len(g.blocks), "bank": g.bank})
            g.dram = base + off
        const_bytes = len(dram)
        io_off = base + _align(const_bytes, beat)
        inputs, outputs = {}, {}
        for name in plan.inputs:
            t = self.tensor(name)
            inputs[name] = io_off
            regions.append({"name": f"input.{name}", "offset": io_off, "size": t.cb * t.h * t.w * n, "kind": "input"})
            io_off += _align(t.cb * t.h * t.w * n, beat)
        for name in plan.outputs:
            t = self.tensor(name)
            outputs[name] = io_off
            regions.append({"name": f"output.{name}", "offset": io_off, "size": t.cb * t.h * t.w * n,
                            "kind": "output"})
            io_off += _align(t.cb * t.h * t.w * n, beat)

        prog: list[isa.Insn] = []
        insn_layer: list[int] = []
        last_load = [-1]

        def emit(opcode, wait=Wait.NONE, layer=-1, **f):
            prog.append(isa.make(opcode, wait, **f))
            insn_layer.append(layer)

        def load(load_id, **f):
            emit(Op.LOAD, f.pop("wait", Wait.NONE), **f)
            last_load[0] = load_id

        if self.params:
            load(0, mem=int(Mem.PARAM), dram=base // beat, sram=0, rows=1, row_beats=len(self.params) * self.peb,
                 dram_stride=0, sram_stride=0)
        for k, name in enumerate(plan.inputs):
            t = self.tensor(name)
            for cb in range(t.cb):
                load(1 + k, mem=int(Mem.ACT), dram=(inputs[name] // beat) + cb * t.h * t.w, sram=t.line(cb, 0, 0),
                     rows=t.h, row_beats=t.w, dram_stride=t.w, sram_stride=t.wp)
        wid = {id(g): 1000 + k for k, g in enumerate(weighted)}

        def load_group(g, wait):
            load(wid[id(g)], wait=wait, mem=int(Mem.WGT), dram=g.dram // beat,
                 sram=g.bank * self.bank_blocks * n, rows=1, row_beats=len(g.blocks) * n, dram_stride=0,
                 sram_stride=0)

        if weighted and self.double_buffer:
            load_group(weighted[0], Wait.NONE)
        wi = 0
        for g in self.groups:
            is_w = g.blocks is not None and g.blocks
            if is_w:
                if not self.double_buffer:  # ablation: load each group only once the previous one is done
                    load_group(g, Wait.COMPUTE)
                elif wi + 1 < len(weighted):
                    load_group(weighted[wi + 1], Wait.COMPUTE if wi >= 1 else Wait.NONE)
                wi += 1
            for e in g.compute:
                op, fields = e.insn_args
                needs = set(e.needs)
                if op in (Op.PPU, Op.VEC):
                    needs.add(0)
                if is_w and op == Op.GEMM:
                    needs.add(wid[id(g)])
                fields = dict(fields)
                if op == Op.GEMM and is_w:
                    fields["wblk"] += g.bank * self.bank_blocks
                wait = (Wait.LOAD if last_load[0] in needs else Wait.NONE) | e.wait
                emit(op, wait, e.layer, **fields)
        for k, name in enumerate(plan.outputs):
            t = self.tensor(name)
            for cb in range(t.cb):
                first_wait = Wait.COMPUTE | (Wait.POST if self.post_unit else Wait.NONE)
                emit(Op.STORE, first_wait if (k == 0 and cb == 0) else Wait.NONE,
                     dram=(outputs[name] // beat) + cb * t.h * t.w, sram=t.line(cb, 0, 0), rows=t.h, row_beats=t.w,
                     dram_stride=t.w, sram_stride=t.wp)
        emit(Op.FINISH, Wait.ALL)
        for rec in layer_records:
            idx = [i for i, li in enumerate(insn_layer) if li == layer_records.index(rec)]
            rec["insns"] = [min(idx), max(idx) + 1] if idx else [0, 0]
            del rec["groups"]
        return TileProgram(prog, dram, regions, inputs, outputs, io_off, act, layer_records, insn_layer)


def _reads(layer) -> list[str]:
    if isinstance(layer, AddLayer):
        return [layer.a, layer.b]
    return [layer.src]


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


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
