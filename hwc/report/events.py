"""Event counts: what an inference does, counted per layer, for the energy estimate.

An event count is a dict of non-negative numbers keyed by `EVENTS` (a missing key is 0).
Every event has one price in the energy table (hwc/report/energy.py) and belongs to one
of three categories: compute, on-chip memory, off-chip memory.

Tile targets (`tile_events`): counted exactly from the command stream, instruction by
instruction (docs/tile.md gives each instruction's accesses):

- LOAD: on chip, writes `total` beats into ACT/WGT/PARAM; off chip, reads `total` beats.
- STORE: on chip, reads `total` ACT lines; off chip, writes `total` beats.
- GEMM: P*N*N int8 MACs and P*N int32 adds (the accumulation); on chip, N WGT rows read
  (the preload), P ACT lines read, P ACC lines read and written (read-modify-write, also
  with reset: the hardware reads and adds 0).
- PPU: per lane of its P lines, 1 int32 mult and 3 int32 adds (bias, rounding, zero point);
  on chip, one PARAM entry read, P ACC lines read, P ACT lines written. PPU.dw (features.dw_post) over its
  Q = (n_outer + 1)(n_inner + 1) + 1 stream positions: the first requantization per position, per lane 9 int8
  MACs (the depthwise stage), the second requantization per output, 3 PARAM entries, P ACC lines read, the
  two row buffers written and read once per position, one ACT line written per output (isa.ppu_out_dims).
- VEC: ADD per lane 2 int32 mults and 5 int32 adds; MAX per lane 1 int8 compare (an 8-bit
  add); on chip, one PARAM entry read, 2P ACT lines read, P written.
- FILL: on chip, `count` ACT lines written.
- every instruction: its 16 bytes fetched from external memory.

(P = n_outer * n_inner, N = the array size, `total` = rows * row_beats, a line = a beat
= N bytes, an ACC line = 4N bytes, a PARAM entry = PARAM_ENTRY_BEATS beats.)

CPU and reference targets (`graph_events`): an estimate from the graph, stated as one:
MACs of Conv/Gemm/MatMul (int8 or fp32 by the node's input type), one add per output
element of every other node; on-chip traffic = every node reads its inputs and writes its
outputs once (activations assumed cache-resident), weights read once; off-chip = the
weights, the inputs and the outputs once per inference. Instruction overhead of a CPU
(fetch, decode, register file) is not counted: the CPU figure is a lower bound.
"""

from __future__ import annotations

from hwc import isa
from hwc.analysis import node_macs

#: event -> (category, its price in the energy table)
EVENTS: dict[str, tuple[str, str]] = {
    "mac_int8": ("compute", "mac_int8"),
    "add_int8": ("compute", "add_int8"),
    "add_int32": ("compute", "add_int32"),
    "mult_int32": ("compute", "mult_int32"),
    "mac_fp32": ("compute", "mac_fp32"),
    "add_fp32": ("compute", "add_fp32"),
    "mult_fp32": ("compute", "mult_fp32"),
    "act_read_bytes": ("onchip", "sram_read_byte"),
    "act_write_bytes": ("onchip", "sram_write_byte"),
    "wgt_read_bytes": ("onchip", "sram_read_byte"),
    "wgt_write_bytes": ("onchip", "sram_write_byte"),
    "acc_read_bytes": ("onchip", "sram_read_byte"),
    "acc_write_bytes": ("onchip", "sram_write_byte"),
    "param_read_bytes": ("onchip", "sram_read_byte"),
    "param_write_bytes": ("onchip", "sram_write_byte"),
    "rowbuf_read_bytes": ("onchip", "sram_read_byte"),     # PPU.dw's row buffers
    "rowbuf_write_bytes": ("onchip", "sram_write_byte"),
    "dram_act_read_bytes": ("offchip", "dram_byte"),
    "dram_wgt_read_bytes": ("offchip", "dram_byte"),
    "dram_param_read_bytes": ("offchip", "dram_byte"),
    "dram_act_write_bytes": ("offchip", "dram_byte"),
    "insn_fetch_bytes": ("offchip", "dram_byte"),
}
CATEGORIES = ("compute", "onchip", "offchip")

#: int8 event -> its float32 counterpart (the float32 variant of the same work)
TO_FP32 = {"mac_int8": "mac_fp32", "add_int8": "add_fp32", "add_int32": "add_fp32", "mult_int32": "mult_fp32"}
#: events whose bytes are int8 data: 4x as many bytes in float32 (ACC lines are 32-bit already;
#: PARAM entries and instructions do not change)
INT8_BYTES = ("act_read_bytes", "act_write_bytes", "wgt_read_bytes", "wgt_write_bytes", "dram_act_read_bytes",
              "dram_wgt_read_bytes", "dram_act_write_bytes")


def add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def clean(ev: dict) -> dict:
    """Sorted keys, zero counts dropped (the report.json form)."""
    return {k: ev[k] for k in sorted(ev) if ev[k]}


def to_fp32(ev: dict) -> dict:
    """The same work in float32: int8/int32 operations become fp32 ones, int8 bytes 4x."""
    out: dict = {}
    for k, v in ev.items():
        k2 = TO_FP32.get(k, k)
        out[k2] = out.get(k2, 0) + (4 * v if k in INT8_BYTES else v)
    return clean(out)


def to_int8(ev: dict) -> dict:
    """The same work in int8 (the inverse view for a float32 build): fp32 MACs -> int8 MACs,
    fp32 adds/mults -> int32, activation and weight bytes / 4."""
    back = {"mac_fp32": "mac_int8", "add_fp32": "add_int32", "mult_fp32": "mult_int32"}
    out: dict = {}
    for k, v in ev.items():
        k2 = back.get(k, k)
        out[k2] = out.get(k2, 0) + (v / 4 if k in INT8_BYTES else v)
    return clean(out)


# ---- tile: exact counts from the command stream ------------------------------------------------
def insn_events(insn: isa.Insn, n: int, beat: int, peb: int) -> dict:
    """Events of one tile instruction (see the module docstring)."""
    op = insn.op
    ev: dict = {"insn_fetch_bytes": isa.INSN_BYTES}
    if op == isa.Op.LOAD:
        nbytes = insn.rows * insn.row_beats * beat
        mem = {isa.Mem.ACT: "act", isa.Mem.WGT: "wgt", isa.Mem.PARAM: "param"}[isa.Mem(insn.mem)]
        ev[f"{mem}_write_bytes"] = nbytes
        ev[f"dram_{mem}_read_bytes"] = nbytes
    elif op == isa.Op.STORE:
        nbytes = insn.rows * insn.row_beats * beat
        ev["act_read_bytes"] = nbytes
        ev["dram_act_write_bytes"] = nbytes
    elif op == isa.Op.GEMM:
        p = insn.n_outer * insn.n_inner
        ev.update(mac_int8=p * n * n, add_int32=p * n, wgt_read_bytes=n * n, act_read_bytes=p * n,
                  acc_read_bytes=4 * p * n, acc_write_bytes=4 * p * n)
    elif op == isa.Op.PPU and insn.get("dw"):
        p = insn.n_outer * insn.n_inner
        q = isa.ppu_dw_positions(insn.n_outer, insn.n_inner, insn.get("dwc"))
        oo, oi = isa.ppu_out_dims(insn.n_outer, insn.n_inner, insn.get("dws"), insn.get("dwc"), insn.get("dwf"))
        ev.update(mult_int32=(q + oo * oi) * n, add_int32=3 * (q + oo * oi) * n, mac_int8=9 * q * n,
                  param_read_bytes=isa.DW_POST_ENTRIES * peb * beat, acc_read_bytes=4 * p * n,
                  rowbuf_read_bytes=2 * q * n, rowbuf_write_bytes=2 * q * n, act_write_bytes=oo * oi * n)
    elif op == isa.Op.PPU:
        p = insn.n_outer * insn.n_inner
        ev.update(mult_int32=p * n, add_int32=3 * p * n, param_read_bytes=peb * beat, acc_read_bytes=4 * p * n,
                  act_write_bytes=p * n)
    elif op == isa.Op.VEC:
        p = insn.n_outer * insn.n_inner
        if insn.get("op") == isa.VecOp.ADD:  # the VEC field "op", not the opcode
            ev.update(mult_int32=2 * p * n, add_int32=5 * p * n)
        else:
            ev["add_int8"] = p * n
        ev.update(param_read_bytes=peb * beat, act_read_bytes=2 * p * n, act_write_bytes=p * n)
    elif op == isa.Op.FILL:
        ev["act_write_bytes"] = insn.count * n
    return ev


def weight_load_owner(program: list[isa.Insn], insn_layer: list[int], n: int, bank_blocks: int) -> list[int]:
    """insn_layer with every weight LOAD given the layer of the first later GEMM reading the
    bank it wrote (the group it loads); other LOADs, the STOREs and FINISH keep theirs (-1:
    inputs, outputs and setup)."""
    owner = list(insn_layer)
    for k, ins in enumerate(program):
        if ins.op != isa.Op.LOAD or ins.mem != isa.Mem.WGT:
            continue
        bank = ins.sram // (bank_blocks * n)
        for j in range(k + 1, len(program)):
            if program[j].op == isa.Op.GEMM and program[j].wblk // bank_blocks == bank:
                owner[k] = insn_layer[j]
                break
    return owner


def tile_events(program: list[isa.Insn], owner: list[int], n_layers: int, target: dict) -> tuple[list[dict], dict]:
    """(events of each layer, events of the rest: inputs, outputs, parameters, FINISH)."""
    n = target["array"]["rows"]
    beat = target["bus"]["bytes"]
    peb = isa.param_entry_beats(n, beat)
    layers: list[dict] = [{} for _ in range(n_layers)]
    rest: dict = {}
    for ins, li in zip(program, owner):
        ev = insn_events(ins, n, beat, peb)
        if 0 <= li < n_layers:
            layers[li] = add(layers[li], ev)
        else:
            rest = add(rest, ev)
    return [clean(e) for e in layers], clean(rest)


# ---- CPU / reference: an estimate from the graph -----------------------------------------------
def graph_events(g) -> tuple[list[dict], dict]:
    """(events of each node in order, events of the rest: weights, inputs and outputs once)."""
    per_node = []
    for nd in g.nodes:
        ev: dict = {}
        macs = node_macs(g, nd)
        in_types = [g.type(i) for i in nd.inputs if i]
        int8 = bool(in_types) and in_types[0].dtype in ("int8", "uint8")
        if macs:
            ev["mac_int8" if int8 else "mac_fp32"] = macs
        else:
            elems = sum(g.type(o).size for o in nd.outputs if o)
            ev["add_int32" if int8 else "add_fp32"] = elems
        for i in nd.inputs:
            if not i:
                continue
            key = "wgt_read_bytes" if g.values[i].is_const else "act_read_bytes"
            ev[key] = ev.get(key, 0) + g.type(i).nbytes
        ev["act_write_bytes"] = sum(g.type(o).nbytes for o in nd.outputs if o)
        per_node.append(clean(ev))
    rest = {"dram_wgt_read_bytes": sum(v.type.nbytes for v in g.values.values() if v.is_const),
            "dram_act_read_bytes": sum(g.type(i).nbytes for i in g.inputs),
            "dram_act_write_bytes": sum(g.type(o).nbytes for o in g.outputs)}
    return per_node, clean(rest)
