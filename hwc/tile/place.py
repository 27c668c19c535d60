"""LOAD and STORE placement: a `Codegen` schedule's compute groups -> one program (`Codegen.finalize`).

The compute instructions are fixed by the time this runs (`Codegen.run`); what is placed here is where the
LOADs (model input chunks, requantization params, weight groups) and the output STOREs go between them, and
which compute instruction waits for the LOAD unit. The LOAD unit is serial and instructions issue in order, so
a LOAD blocks every instruction behind it until the LOAD before it has completed: loads go in as late as
possible, one ahead of their use.

- Weight groups alternate between the two WGT banks. Group k+1 loads right behind group k's first GEMM: a
  GEMM issues only once the one before it streams (has read all its weights), so by then no GEMM reads the
  bank group k-1 used, and the LOAD needs no wait.
- A model input loads in row chunks per channel block, in the order the GEMMs first read them, each GEMM
  waiting for its own chunks, one more chunk in flight.
- The params load in parts: the first weighted group's behind its first chunks, the rest deferred, one at a
  time where the GEMMs since the last LOAD cover it (`loads="paced"`) or behind the next GEMM (`"eager"`).
- `split`: the first weight group, which has no compute to hide behind, loads in pieces in the order its GEMMs
  first read them (`first_pieces`).
- `times` (prefetch): with the tile model's timeline of the same schedule, group k+2's weights go into group
  k's bank while group k computes, as its GEMMs are done with the blocks (`Placement.prefetch`).
- v2: an output channel block is stored once the POST instruction writing it last has had time to finish.

docs/tile-v2.md ("Weights prefetched into a bank still in use", "The first weight group in pieces") has the
measurements behind each rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwc import isa
from hwc.errors import UnsupportedError
from hwc.isa import Mem, Op, Wait
from hwc.tile.codegen import Group, TileProgram, _lines, _overlaps, _post_busy

#: The params after the first weight group's load in parts of at least this many beats, one at a time
#: where the LOAD unit has room (a single big LOAD would block the issue when a PPU first needs it).
PARAM_PART_BEATS = 256
#: Weights prefetched into a bank the group before computes from (`Placement.prefetch`) load in pieces of at least
#: this many blocks (besides the last): a LOAD costs LOAD_OVERHEAD + LM cycles of the bus besides its beats.
#: (MobileNetV1-0.25 tile32x32: 12,212 cycles from 1 to 32 blocks, 12,230 at 64.)
PREFETCH_MIN_BLOCKS = 8


@dataclass
class _Ahead:
    """A weight group being prefetched into the bank of the group computing now."""

    group: Group           # the group whose blocks load
    split: int             # its blocks [0, split) sit where the computing group's are; [split, ..) are free at once
    last_use: dict         # block of the computing group -> index of the last GEMM reading it
    past: bool = False     # blocks [split, ..) loaded
    done: int = 0          # blocks [0, done) loaded
    ids: list = field(default_factory=list)   # the LOAD ids of its pieces

    def left(self) -> tuple[int, int]:
        """The blocks still to load when the group's own turn comes: [done, end)."""
        return self.done, self.split if self.past else len(self.group.blocks)


class Placement:
    """One program of a Codegen's schedule (after `Codegen.run`), with one LOAD placement policy."""

    def __init__(self, cg, loads: str = "eager", split: bool = False, times: dict | None = None):
        self.cg, self.loads, self.times = cg, loads, times
        self.n, self.beat, self.timing = cg.n, cg.beat, cg.timing
        self.prog: list[isa.Insn] = []
        self.insn_layer: list[int] = []
        self.wgt_layer: dict[int, dict] = {}   # weight LOAD instruction -> {layer: its share of the blocks}
        self.emitted_at: dict[tuple[int, int], int] = {}   # (group, index) -> instruction
        self.last_load = -1    # the id of the LOAD emitted last
        self.debt = 0          # estimated cycles the LOAD unit is busy ahead of the GEMMs emitted since
        # (with `times`) the issue cycle of the compute instruction emitted last, and when the LOAD unit is free
        self.now, self.load_free = 0, 0
        self.loaded: set = set()          # input chunks and first-group pieces loaded
        self.deferred: list[tuple] = []   # (LOAD id, its emitter): loads waiting for room, in order
        self.stored: set = set()
        self.pending: list[list] = []     # [output, channel block, estimated cycles until POST is idle]
        self.prefetched: dict[int, _Ahead] = {}   # id(group) -> its prefetch state
        self.ahead: _Ahead | None = None          # the group being prefetched now
        self.owed: dict[int, tuple] = {}  # id(group) -> (group, first block, end block): its LOAD still to place
        self.wi = 0                       # weighted groups entered
        self._dram_image()
        self._plan_loads(split)
        self._plan_stores()

    # ---- the DRAM image ----------------------------------------------------------------------
    def _dram_image(self) -> None:
        """Params, then the weight groups (each gets its bank and DRAM address), then inputs and outputs (beat
        aligned), from the Codegen's dram_base."""
        cg, beat, n = self.cg, self.beat, self.n
        if len(cg.params) > cg.param_entries:
            raise UnsupportedError(
                f"the model needs {len(cg.params)} requantization parameter sets but target {cg.t['name']!r} "
                f"has {cg.param_entries} (scratchpad.param_entries); use a target with more.", [])
        base = cg.dram_base
        dram = bytearray(b"".join(cg.params))
        regions = [{"name": "params", "offset": base, "size": len(dram), "kind": "params",
                    "entries": len(cg.params), "entry_beats": cg.peb}]
        self.weighted = [g for g in cg.groups if g.blocks]
        for k, g in enumerate(self.weighted):
            g.bank = k % 2 if cg.double_buffer else 0
            off = len(dram)
            dram += b"".join(g.blocks)
            regions.append({"name": f"weights.group{k}", "offset": base + off, "size": len(dram) - off,
                            "kind": "weights", "blocks": len(g.blocks), "wgt_bank": g.bank})
            g.dram = base + off
        io_off = base + _align(len(dram), beat)
        self.inputs, self.outputs = {}, {}
        # inputs whose rows an earlier segment stored, laid out as here: the LOADs read them there (`views`)
        self.views = {name: v for name, v in cg.plan.views.items()
                      if name in cg.plan.inputs and name not in cg.plan.im2col and all(
                          p.layout == (cg.tensor(name).c, cg.tensor(name).w, cg.tensor(name).s2d) for p in v)}
        for kind, names, at in (("input", cg.plan.inputs, self.inputs), ("output", cg.plan.outputs, self.outputs)):
            for name in names:
                if name in self.views:
                    continue
                t = cg.tensor(name)
                at[name] = io_off
                regions.append({"name": f"{kind}.{name}", "offset": io_off, "size": t.cb * t.h * t.w * n,
                                "kind": kind})
                io_off += _align(t.cb * t.h * t.w * n, beat)
        self.dram, self.regions, self.dram_bytes = dram, regions, io_off

    # ---- what loads, in which order ------------------------------------------------------------
    def _plan_loads(self, split: bool) -> None:
        """LOAD ids: (input, chunk) a model input's rows, 1000 + k weight group k (its prefetched pieces
        (1000 + k) * 10,000 + j), -1 - k the params' part k, ("weights", k) piece k of the first group (`split`)."""
        cg, weighted = self.cg, self.weighted
        self.wid = {id(g): 1000 + k for k, g in enumerate(weighted)}
        self.pieces, self.extra = first_pieces(weighted[0]) if weighted and cg.double_buffer and split else ({}, {})
        order = [d for g in cg.groups for e in g.compute
                 for d in sorted(e.needs | self.extra.get(id(e), frozenset()),
                                 key=lambda d: (d not in self.pieces, str(d)))
                 if isinstance(d, tuple)]
        order += [(name, c) for name in cg.plan.inputs for c in range(len(cg.in_chunks[name]))]
        self.order = list(dict.fromkeys(order))
        self.group_chunks = {id(g): {d for e in g.compute for d in e.needs | self.extra.get(id(e), frozenset())
                                     if isinstance(d, tuple)} for g in cg.groups}
        # The params' first part: the first weighted group's entries (all of them when it has no PPU, e.g. its PPU
        # lags into the next group: limiting the part to the next group's entries measured slower on DS-CNN and
        # the FC autoencoder); the rest in parts of at least PARAM_PART_BEATS.
        first_w = next((k for k, g in enumerate(cg.groups) if g.blocks), len(cg.groups))
        head = 1 + max((e.insn_args[1]["param"] + _dw_entries(e.insn_args[1]) for g in cg.groups[:first_w + 1]
                        for e in g.compute if e.insn_args[0] in (Op.PPU, Op.VEC)), default=len(cg.params) - 1)
        step = max(1, -(-PARAM_PART_BEATS // cg.peb))
        bounds = [0, head] + list(range(head + step, len(cg.params), step)) + [len(cg.params)]
        bounds = sorted(set(b for b in bounds if b <= len(cg.params)))
        self.parts = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, 0)]
        self.part_of = {e: k for k, (lo, hi) in enumerate(self.parts) for e in range(lo, hi)}
        # The first group's followers: the params' first part and the second group's weights, the shorter LOAD
        # first, then the other params' parts.
        self.deferred = [(-1, lambda: self.load_params(0))]
        if weighted and cg.double_buffer and len(weighted) > 1:
            lo, hi = self.parts[0]
            first = len(weighted[1].blocks) * self.n < (hi - lo) * cg.peb
            self.deferred.insert(0 if first else 1, (self.wid[id(weighted[1])],
                                                     lambda: self.load_group(weighted[1], Wait.NONE)))
        self.deferred += [(-1 - k, lambda k=k: self.load_params(k)) for k in range(1, len(self.parts))]

    def _plan_stores(self) -> None:
        """v2: each output channel block in pieces of rows (`store_pieces`: at the row ends of the POST
        instructions writing it, STORE_PIECE_LINES lines at least), and the POST instruction writing each piece
        last (`early_stores`). v1: whole blocks, at the end."""
        cg = self.cg
        writers = [e for g in cg.groups for e in g.compute if e.writes is not None] if cg.post_unit else []
        self.store_order = []
        for name in cg.plan.outputs:
            t = cg.tensor(name)
            for cb in range(t.cb):
                ends = {min(max(e.writes[3], 0), t.h) for e in writers
                        if e.writes[0] != "*" and _overlaps((name, cb, 0, t.h), e.writes)}
                self.store_order += [(name, cb, r0, r1) for r0, r1 in store_pieces(ends, t.h, t.w)]
        self.last_writer = {}
        for e in writers:
            for d in self.store_order:
                if _overlaps(d, e.writes):
                    self.last_writer[d] = id(e)

    # ---- emitting --------------------------------------------------------------------------------
    def emit(self, opcode: Op, wait: Wait = Wait.NONE, layer: int = -1, **f) -> None:
        self.prog.append(isa.make(opcode, wait, **f))
        self.insn_layer.append(layer)

    def load(self, load_id, **f) -> None:
        self.emit(Op.LOAD, f.pop("wait", Wait.NONE), **f)
        self.last_load = load_id
        cost = f["rows"] * f["row_beats"] + self.timing.LOAD_OVERHEAD + self.timing.LM
        self.load_free = max(self.load_free, self.now) + cost
        if not isinstance(load_id, tuple):  # input chunks are paced by their GEMMs already
            self.debt = max(self.debt, 0) + cost

    def load_chunk(self, d) -> None:
        """An input chunk (or a piece of the first weight group), unless loaded."""
        if d in self.loaded:
            return
        self.loaded.add(d)
        if d in self.pieces:
            self.load_group(self.weighted[0], Wait.NONE, *self.pieces[d], load_id=d)
            return
        name, c = d
        t, beat = self.cg.tensor(name), self.beat
        b0, b1, r0, r1 = self.cg.in_chunks[name][c]
        if name in self.cg.in_cols:   # columns [r0, r1) of a one-row input (`Codegen.in_cols`)
            for b in range(b0, b1):
                if name in self.views:
                    p, = [p for p in self.views[name] if p.lo <= 0 < p.hi]
                    dram = p.dram // beat + (p.row - p.lo) * t.w + b * p.pitch * t.w
                else:
                    dram = self.inputs[name] // beat + b * t.h * t.w
                self.load(d, mem=int(Mem.ACT), dram=dram + r0, sram=t.line(b, 0, r0), rows=1, row_beats=r1 - r0,
                          dram_stride=0, sram_stride=0)
            return
        if name in self.views:   # rows where an earlier segment stored them: LOADs per piece (source) they span
            whole = r1 - r0 == t.h and t.hp == t.h and t.wp == t.w   # (unpadded whole blocks: one LOAD a piece)
            for p in self.views[name]:
                lo, hi = max(r0, p.lo), min(r1, p.hi)
                if lo >= hi:
                    continue
                src = p.dram // beat + (p.row + lo - p.lo) * t.w   # (row lo of channel block 0; blocks p.pitch rows
                if whole:                                           # apart)
                    self.load(d, mem=int(Mem.ACT), dram=src + b0 * p.pitch * t.w, sram=t.line(b0, lo, 0),
                              rows=b1 - b0, row_beats=(hi - lo) * t.w, dram_stride=p.pitch * t.w,
                              sram_stride=t.block_lines)
                    continue
                for b in range(b0, b1):
                    self.load(d, mem=int(Mem.ACT), dram=src + b * p.pitch * t.w, sram=t.line(b, lo, 0),
                              rows=hi - lo, row_beats=t.w, dram_stride=t.w, sram_stride=t.wp)
            return
        if b1 - b0 > 1:  # whole unpadded channel blocks, contiguous in DRAM and ACT: one row of beats
            self.load(d, mem=int(Mem.ACT), dram=(self.inputs[name] // beat) + b0 * t.h * t.w, sram=t.line(b0, 0, 0),
                      rows=1, row_beats=(b1 - b0) * t.h * t.w, dram_stride=0, sram_stride=0)
            return
        self.load(d, mem=int(Mem.ACT), dram=(self.inputs[name] // beat) + (b0 * t.h + r0) * t.w,
                  sram=t.line(b0, r0, 0), rows=r1 - r0, row_beats=t.w, dram_stride=t.w, sram_stride=t.wp)

    def load_params(self, part: int) -> None:
        lo, hi = self.parts[part]
        peb = self.cg.peb
        if hi > lo:
            self.load(-1 - part, mem=int(Mem.PARAM), dram=self.cg.dram_base // self.beat + lo * peb, sram=lo * peb,
                      rows=1, row_beats=(hi - lo) * peb, dram_stride=0, sram_stride=0)

    def load_group(self, g: Group, wait: Wait, lo: int = 0, hi: int | None = None, load_id=None) -> None:
        """Group g's weight blocks [lo, hi) (all of them by default)."""
        n = self.n
        hi = len(g.blocks) if hi is None else hi
        owners = [owner for b, owner in enumerate(block_layers(g)) if lo <= b < hi]
        self.wgt_layer[len(self.prog)] = {li: owners.count(li) / len(owners) for li in sorted(set(owners))}
        self.load(self.wid[id(g)] if load_id is None else load_id, wait=wait, mem=int(Mem.WGT),
                  dram=g.dram // self.beat + lo * n, sram=(g.bank * self.cg.bank_blocks + lo) * n, rows=1,
                  row_beats=(hi - lo) * n, dram_stride=0, sram_stride=0)

    def flush(self, upto=None, most: int | None = None) -> None:
        """The deferred loads, up to the one with id `upto` (None: all), at most `most` of them."""
        ids = [d for d, _ in self.deferred]
        k = len(self.deferred) if upto is None else (ids.index(upto) + 1 if upto in ids else 0)
        k = k if most is None else min(k, most)
        for _, fn in self.deferred[:k]:
            fn()
        del self.deferred[:k]

    # ---- output stores ---------------------------------------------------------------------------
    def store(self, name: str, cb: int, r0: int, r1: int, wait: Wait = Wait.NONE) -> None:
        """Rows [r0, r1) of an output's channel block."""
        t = self.cg.tensor(name)
        self.emit(Op.STORE, wait, dram=(self.outputs[name] // self.beat) + (cb * t.h + r0) * t.w,
                  sram=t.line(cb, r0, 0), rows=r1 - r0, row_beats=t.w, dram_stride=t.w, sram_stride=t.wp)

    def early_stores(self, e, op: Op, fields: dict) -> None:
        """v2: a piece of an output channel block (`_plan_stores`) is stored once the POST instruction that writes
        it last has had time to finish (estimated by the GEMMs emitted since): a STORE does not issue while POST is
        busy, and POST instructions run one at a time in program order, so by its issue every write to the piece
        is done. It then moves beside the compute instead of after it (the output lines are live to the end; the
        STORE unit has its own bus channel). v1 and the rest: at the end."""
        t = self.timing
        if op == Op.GEMM:
            for p in self.pending:
                p[1] -= self.cg._gemm_cycles(_lines(fields))
        elif e.writes is not None:
            busy = _post_busy(t, op, fields) + t.IDLE_LAG
            for p in self.pending:  # a STORE behind this POST instruction waits for it too
                p[1] += busy
            self.pending.extend([d, busy] for d in self.store_order if self.last_writer.get(d) == id(e))
        while self.pending and self.pending[0][1] <= 0:
            d = self.pending.pop(0)[0]
            self.stored.add(d)
            self.store(*d)

    # ---- prefetch --------------------------------------------------------------------------------
    def prefetch(self, ei: int) -> None:
        """The next piece of the group ahead whose blocks are free once instruction `ei` of the group computing
        now has issued, when the LOAD unit is about idle (by the clock of `times`): first the blocks past the
        computing group's, then the others from the first as they are done with (a block is free once the GEMM
        after its last reader has issued: that one has read its weights), in pieces of PREFETCH_MIN_BLOCKS."""
        if self.times is None or self.load_free > self.now:
            return
        if self.deferred:   # (the params first: behind a prefetch, the LOAD a PPU waits for would hold up the issue)
            self.flush(most=1)
            return
        a = self.ahead
        if a is None:
            return
        if not a.past and a.split < len(a.group.blocks):
            lo, hi = a.split, len(a.group.blocks)
            a.past = True
        else:
            free = next((b for b in range(a.split) if a.last_use.get(b, -1) >= ei), a.split)
            if free - a.done < min(PREFETCH_MIN_BLOCKS, a.split - a.done) or free <= a.done:
                return
            lo, hi = a.done, free
            a.done = free
        pid = self.wid[id(a.group)] * 10_000 + len(a.ids)   # (a piece's LOAD id; at most 4,096 blocks in WGT)
        self.load_group(a.group, Wait.NONE, lo, hi, load_id=pid)
        a.ids.append(pid)
        if a.done == a.split and (a.past or a.split == len(a.group.blocks)):
            self.ahead = None

    def pay(self, g: Group | None = None) -> bool:
        """An owed LOAD: group g's (before its first GEMM), or any once the LOAD unit is about idle."""
        key = id(g) if g is not None else next(iter(self.owed), None)
        if key in self.owed and (g is not None or self.load_free <= self.now):
            G, lo, hi = self.owed.pop(key)
            self.load_group(G, Wait.NONE, lo, hi)
            return True
        return False

    # ---- the program -----------------------------------------------------------------------------
    def program(self, act: dict, layer_records: list[dict]) -> TileProgram:
        """The whole program (a TileProgram); `layer_records` gain their instruction ranges."""
        cg = self.cg
        if self.order:
            self.load_chunk(self.order[0])
        if self.weighted and cg.double_buffer and not self.pieces:
            self.load_group(self.weighted[0], Wait.NONE)
        for gi, g in enumerate(cg.groups):
            self._group(gi, g)
        # the rest of the first group's pieces; an input chunk no instruction reads (the last row of an odd-sized
        # input under a stride-2 window) is not loaded at all: here, at the end, its lines may be another tensor's
        needed = {d for g in cg.groups for e in g.compute for d in e.needs | self.extra.get(id(e), frozenset())}
        for d in self.order:
            if d in needed or d in self.pieces:
                self.load_chunk(d)
        self.flush()
        first_wait = Wait.COMPUTE | (Wait.POST if cg.post_unit else Wait.NONE)
        rest: list[list] = []   # the pieces not stored yet, those next to each other in one STORE
        for name, cb, r0, r1 in (d for d in self.store_order if d not in self.stored):
            if rest and rest[-1][:2] == [name, cb] and rest[-1][3] == r0:
                rest[-1][3] = r1
            else:
                rest.append([name, cb, r0, r1])
        for k, d in enumerate(rest):
            self.store(*d, wait=first_wait if k == 0 else Wait.NONE)
        self.emit(Op.FINISH, Wait.ALL)
        span: dict[int, list[int]] = {}   # layer -> [first instruction, last + 1]
        for i, li in enumerate(self.insn_layer):
            span.setdefault(li, [i, i])[1] = i + 1
        for k, rec in enumerate(layer_records):
            rec["insns"] = span.get(k, [0, 0])
            del rec["groups"]
        return TileProgram(self.prog, self.dram, self.regions, self.inputs, self.outputs, self.dram_bytes, act,
                           layer_records, self.insn_layer, self.emitted_at, self.views, self.wgt_layer)

    def _group(self, gi: int, g: Group) -> None:
        """Group `gi`'s compute instructions, with the loads placed around them."""
        cg = self.cg
        is_w = bool(g.blocks)
        after_first = None   # the group whose load goes behind this group's first GEMM
        self.ahead = None
        if is_w:
            if not cg.double_buffer:  # ablation: load each group only once the previous one is done
                self.flush()
                self.load_group(g, Wait.COMPUTE)
            elif self.wi >= 1:
                self.flush(self.wid[id(g)])
                if self.loads == "eager":
                    self.flush(most=1)
                if self.wi + 1 < len(self.weighted):
                    after_first = self.weighted[self.wi + 1]
            self.wi += 1
        for ei, e in enumerate(g.compute):
            op, fields = e.insn_args
            needs = set(e.needs | self.extra.get(id(e), frozenset()))
            if op in (Op.PPU, Op.VEC):
                needs |= _param_loads(fields, self.part_of)
            if is_w and op == Op.GEMM and not (self.pieces and g is self.weighted[0]):
                self.pay(g)
                needs.add(self.wid[id(g)])
                needs.update(self.prefetched[id(g)].ids if id(g) in self.prefetched else ())
            fields = dict(fields)
            if op == Op.GEMM and is_w:
                fields["wblk"] += g.bank * cg.bank_blocks
            chunks = sorted((d for d in needs if isinstance(d, tuple)), key=self.order.index)
            for d in chunks:
                self.load_chunk(d)
            for d in needs:
                self.flush(d)
            wait = (Wait.LOAD if self.last_load in needs else Wait.NONE) | e.wait
            self.emit(op, wait, e.layer, **fields)
            self.emitted_at[gi, ei] = len(self.prog) - 1
            if self.times is not None:
                self.now = self.times[gi, ei]
            self.early_stores(e, op, fields)
            if after_first is not None and op == Op.GEMM:
                self._behind_first_gemm(g, ei, after_first)
                after_first = None
            nxt = next((d for d in self.order if d not in self.loaded), None)
            if op == Op.GEMM:
                self.debt -= cg._gemm_cycles(fields["n_outer"] * fields["n_inner"])
            if chunks and nxt in self.group_chunks[id(g)]:
                # the next chunk loads while this one is computed on; but a PPU before its first reader whose
                # params are not in yet gets them first (behind that chunk they held up a short first tile)
                part = next((k for k, _ in self.deferred
                             if k < 0 and _needs_first(g.compute[ei + 1:], nxt, k, self.part_of, self.extra)), None)
                if part is not None:   # (DS-CNN tile8x8: 44,188 -> 44,049 cycles)
                    self.flush(part)
                self.load_chunk(nxt)
            elif op == Op.GEMM and (self.loads == "eager" or self.debt <= 0):
                self.flush(most=1)
            if op == Op.GEMM and not self.pay():
                self.prefetch(ei)
        assert after_first is None, "a weighted group without a GEMM would leave its follower unloaded"

    def _behind_first_gemm(self, g: Group, ei: int, nxt: Group) -> None:
        """Behind group g's first GEMM (instruction `ei`): the next group `nxt`'s weights, and (with `times`) the
        group after it starts prefetching into g's bank."""
        # the params parts this group's PPUs and VECs still need go first: behind the next group's weights their
        # first PPU waited for both (MobileNetV1-0.25 tile32x32: 16,943 -> 16,579 cycles)
        want = set().union(*(_param_loads(x.insn_args[1], self.part_of) for x in g.compute[ei + 1:]
                             if x.insn_args[0] in (Op.PPU, Op.VEC)))
        ids = [d for d, _ in self.deferred]
        if want & set(ids):
            self.flush(max((d for d in want if d in ids), key=ids.index))
        # The next group's weights go into the bank the previous group's GEMMs read. A GEMM issues only once the
        # one before it streams, i.e. has read all its weights: so once this group's first GEMM has issued, no GEMM
        # reads that bank any more, and the LOAD needs no wait (it used to go before that GEMM with Wait.COMPUTE,
        # holding it back while the LOAD unit was busy). Deferring it further, behind the params parts, measured
        # slower (MobileNet tile32x32).
        a = self.prefetched.get(id(nxt))
        if a is None:
            self.load_group(nxt, Wait.NONE)
        elif a.left()[0] < a.left()[1]:
            # the blocks left, once the LOAD unit is about idle (behind a prefetch still running, a LOAD would hold
            # up the issue of everything after it), at the latest before the group's first GEMM
            self.owed[id(nxt)] = (nxt, *a.left())
            self.pay()
        if self.times is not None and self.wi + 1 < len(self.weighted):
            last_use = {}   # (the blocks of this group a GEMM reads last; a GEMM.dw9 weight is two blocks)
            for k, x in enumerate(g.compute):
                if x.insn_args[0] == Op.GEMM:
                    b = x.insn_args[1]["wblk"]
                    for bb in (b, b + 1) if x.insn_args[1].get("dw9") else (b,):
                        last_use[bb] = k
            G = self.weighted[self.wi + 1]
            self.ahead = self.prefetched[id(G)] = _Ahead(G, min(len(G.blocks), len(g.blocks)), last_use)


def block_layers(g: Group) -> list[int]:
    """The layer of each weight block of group g: the layer of the first GEMM that reads it (-1: none)."""
    out = [-1] * len(g.blocks)
    for e in reversed(g.compute):
        if e.insn_args[0] == Op.GEMM:
            f = e.insn_args[1]
            for b in range(f["wblk"], f["wblk"] + 1 + f.get("dw9", 0)):
                out[b] = e.layer
    return out


def first_pieces(g: Group) -> tuple[dict, dict]:
    """The first weight group's load in pieces (`split`): {piece id: (first block, end block)} and
    {id(GEMM Emitted): the pieces it reads}. One piece (no split) when the first GEMM reads every block.
    The first piece holds the first GEMM's blocks, each next one is at least twice as large as the one before
    (a LOAD costs a bus latency)."""
    gemms = [e for e in g.compute if e.insn_args[0] == Op.GEMM]
    if not gemms:
        return {}, {}
    bounds = [0]
    for e in gemms:
        f = e.insn_args[1]
        need = f["wblk"] + 1 + f.get("dw9", 0)
        if need > bounds[-1]:
            last = bounds[-1] - (bounds[-2] if len(bounds) > 1 else 0)   # (the previous piece's size)
            bounds.append(min(len(g.blocks), max(need, bounds[-1] + 2 * last)))
    if bounds[-1] < len(g.blocks):
        bounds.append(len(g.blocks))
    if len(bounds) <= 2:
        return {}, {}
    pieces = {("weights", k): (lo, hi) for k, (lo, hi) in enumerate(zip(bounds, bounds[1:]))}
    extra = {}
    for e in gemms:
        f = e.insn_args[1]
        first, last = f["wblk"], f["wblk"] + f.get("dw9", 0)
        extra[id(e)] = frozenset(p for p, (lo, hi) in pieces.items() if lo <= last and first < hi)
    return pieces, extra


def _dw_entries(fields: dict) -> int:
    """The PARAM entries a PPU reads after its first (PPU.dw: two more; PPU.neg: one, the negative multipliers)."""
    return isa.DW_POST_ENTRIES - 1 if fields.get("dw") else 1 if fields.get("neg") else 0


def _param_loads(fields: dict, part_of: dict) -> set[int]:
    """The params LOADs (-1 - part) holding the entries a PPU or VEC reads."""
    return {-1 - part_of.get(fields.get("param", 0) + k, 0) for k in range(1 + _dw_entries(fields))}


def _needs_first(rest: list, chunk, part: int, part_of: dict, extra: dict) -> bool:
    """Does a PPU or VEC of `rest` needing the params LOAD `part` (-1 - its part) come before any instruction needing
    `chunk` (an input chunk or a piece of the first weight group, `extra`)?"""
    for e in rest:
        if chunk in e.needs or chunk in extra.get(id(e), ()):
            return False
        op, fields = e.insn_args
        if op in (Op.PPU, Op.VEC) and part in _param_loads(fields, part_of):
            return True
    return False


#: An output channel block is stored in pieces of at least this many lines (beats), each once the POST instruction
#: writing it last is done (`Placement.early_stores`), so that the STOREs of a large output overlap the compute
#: instead of following it (the last piece may be shorter).
STORE_PIECE_LINES = 256


def store_pieces(ends: set[int], h: int, w: int) -> list[tuple[int, int]]:
    """Rows [0, h) cut at `ends` (the rows where writes end) into pieces of at least STORE_PIECE_LINES lines."""
    out, r0 = [], 0
    for r in sorted(ends | {h}):
        if r > r0 and ((r - r0) * w >= STORE_PIECE_LINES or r == h):
            out.append((r0, r))
            r0 = r
    return out


def _align(x: int, a: int) -> int:
    return -(-x // a) * a
