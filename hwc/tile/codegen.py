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
    def __init__(self, plan: TilePlan, target: dict, double_buffer: bool = True, dram_base: int = 0):
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

    def compute(self, g: Group, opcode: Op, needs=(), **fields) -> None:
        g.compute.append(Emitted((opcode, fields), frozenset(needs), self.layer))
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
                    self.compute(g, Op.FILL, addr=addr, count=count, value=v)

    def emit_conv(self, layer: ConvLayer, loads: dict) -> None:
        n = self.n
        src, dst = self.tensor(layer.src), self.tensor(layer.dst)
        m, c, kh, kw = layer.weight.shape
        sh, sw = layer.strides
        dh, dw = layer.dilations
        pt, pl, _, _ = layer.pads
        ho, wo = dst.h, dst.w
        if wo > self.acc_lines:
            raise UnsupportedError(f"layer {layer.name!r}: an output row of {wo} pixels does not fit the "
                                   f"{self.acc_lines} accumulator lines", [layer.name])
        rows_per_tile = max(1, min(ho, self.acc_lines // wo))
        cbo, cbi = -(-m // n), -(-c // n)
        wpad = np.zeros((cbo * n, cbi * n, kh, kw), np.int8)
        wpad[:m, :c] = layer.weight
        needs_in = loads.get(layer.src, ())
        for cob in range(cbo):
            taps = []
            for ky in range(kh):
                for kx in range(kw):
                    for cib in range(cbi):
                        blk = wpad[cob * n:(cob + 1) * n, cib * n:(cib + 1) * n, ky, kx]
                        if blk.any():
                            taps.append((ky, kx, cib, np.ascontiguousarray(blk).tobytes()))
            if not taps:  # all-zero weights: one zero block still resets the accumulators
                taps = [(0, 0, 0, bytes(n * n))]
            lanes = slice(cob * n, min(m, (cob + 1) * n))
            entry = self.param(layer.bias[lanes], layer.mult[lanes], layer.shift[lanes], layer.z_out, layer.lo,
                               layer.hi)
            chunks = [taps[i:i + self.bank_blocks] for i in range(0, len(taps), self.bank_blocks)]
            tiles = [(oy0, min(rows_per_tile, ho - oy0)) for oy0 in range(0, ho, rows_per_tile)]
            g = self.weighted([t[3] for t in chunks[0]]) if len(chunks) == 1 else None
            for oy0, rows in tiles:
                for ci, chunk in enumerate(chunks):
                    if len(chunks) > 1:  # the cob's weights exceed a bank: reload them per pixel tile
                        g = self.weighted([t[3] for t in chunk])
                    for k, (ky, kx, cib, data) in enumerate(chunk):
                        self.compute(g, Op.GEMM, needs=needs_in, wblk=g.block(data),
                                     act=src.line(cib, oy0 * sh + ky * dh - pt, kx * dw - pl),
                                     acc=0, n_outer=rows, n_inner=wo, act_so=sh * src.wp, act_si=sw,
                                     acc_so=wo, acc_si=1, reset=int(ci == 0 and k == 0))
                self.compute(g, Op.PPU, acc=0, out=dst.line(cob, oy0, 0), n_outer=rows, n_inner=wo,
                             acc_so=wo, acc_si=1, out_so=dst.wp, out_si=1, param=entry)

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
        for ob in range(dst.cb):
            self.compute(g, Op.GEMM, needs=needs_in, wblk=g.block(zero_b), act=src.line(0, 0, 0), acc=ob, n_outer=1,
                         n_inner=1, act_so=0, act_si=0, acc_so=0, acc_si=0, reset=1)
            for ib in range(src.cb):
                if (ob, ib) in blocks:
                    self.compute(g, Op.GEMM, needs=needs_in, wblk=g.block(blocks[ob, ib]), act=src.line(ib, 0, 0),
                                 acc=ob, n_outer=src.h, n_inner=src.w, act_so=src.wp, act_si=1, acc_so=0, acc_si=0,
                                 reset=0)
        entry = self.param(np.full(n, layer.bias), np.full(n, layer.mult), np.full(n, layer.shift), layer.z_out,
                           layer.lo, layer.hi)
        self.compute(g, Op.PPU, acc=0, out=dst.line(0, 0, 0), n_outer=1, n_inner=dst.cb, acc_so=0, acc_si=1,
                     out_so=0, out_si=dst.hp * dst.wp, param=entry)

    def emit_add(self, layer: AddLayer, loads: dict) -> None:
        a, b, o = self.tensor(layer.a), self.tensor(layer.b), self.tensor(layer.dst)
        at = layer.attrs
        entry = self.param([at["z_a"], at["z_b"]], [at["mult_a"], at["mult_b"]], [at["shift"]], at["z_out"],
                           at["lo"], at["hi"])
        g = self.last()
        needs = tuple(loads.get(layer.a, ())) + tuple(loads.get(layer.b, ()))
        for cb in range(a.cb):
            self.compute(g, Op.VEC, needs=needs, op=int(VecOp.ADD), a=a.line(cb, 0, 0), b=b.line(cb, 0, 0),
                         out=o.line(cb, 0, 0), n_outer=a.h, n_inner=a.w, in_so=a.wp, in_si=1, out_so=o.wp,
                         out_si=1, param=entry)

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
        act = self.plan_act()
        # input loads are LOAD ids 1.. (0 = params)
        loads = {name: (1 + k,) for k, name in enumerate(plan.inputs)}
        for name in plan.inputs:
            self.fill_halo(self.last(), self.tensor(name))
        layer_records = []
        for i, layer in enumerate(plan.layers):
            self.layer = i
            start_group = len(self.groups)
            self.fill_halo(self.last(), self.tensor(layer.dst))
            if isinstance(layer, ConvLayer):
                self.emit_conv(layer, loads)
            elif isinstance(layer, GapLayer):
                self.emit_gap(layer, loads)
            elif isinstance(layer, AddLayer):
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
                wait = Wait.LOAD if last_load[0] in needs else Wait.NONE
                emit(op, wait, e.layer, **fields)
        for k, name in enumerate(plan.outputs):
            t = self.tensor(name)
            for cb in range(t.cb):
                emit(Op.STORE, Wait.COMPUTE if (k == 0 and cb == 0) else Wait.NONE,
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
