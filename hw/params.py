"""Hardware parameters, derived from a validated tile target and nothing else.

Every size in hw/ comes from `TileParams.from_target(target)`: the array size, memory
depths, bus width, read latency and FIFO depth from the YAML; field and address widths
from hwc/isa.py. No module in hw/ contains a size of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Mux, Value

from hwc import isa

#: Width of a beat address on the external ports (the LOAD/STORE `dram` field).
DRAM_ADDR_BITS = isa.LAYOUT[isa.Op.LOAD]["dram"][1].width
#: Width of a burst length on the dmem read port (the LOAD `row_beats` field).
LEN_BITS = isa.LAYOUT[isa.Op.LOAD]["row_beats"][1].width
#: Width of the program counter / instruction index and of imem addresses.
PC_BITS = DRAM_ADDR_BITS
#: Width of the cycle counter.
CYCLE_BITS = 32
#: Attributes of a register that duplicates another one on purpose (a copy per consumer, so a
#: high-fanout or long net is split; hw/synth.py keeps yosys from merging the copies again).
DUP = {"hwc_dup": 1}


def bits_for(n: int) -> int:
    """Address bits of a memory with n rows (at least 1)."""
    return max(1, (n - 1).bit_length())


@dataclass(frozen=True)
class TileParams:
    name: str
    config_name: str
    n: int                # array rows = cols = lanes of a line
    beat_bytes: int       # external bus bytes per beat (= n in v1)
    read_latency: int     # cycles from an accepted read request to its first beat
    fifo_depth: int       # instruction prefetch FIFO entries
    act_lines: int
    acc_lines: int
    wgt_bank_blocks: int
    param_entries: int
    post_unit: bool = False   # tile v2 (docs/tile-v2.md): PPU/VEC/FILL in their own POST unit
    depthwise: bool = False   # tile v2: GEMM.dw / GEMM.skip
    wgt_read_rows: int = 1    # weight rows the GEMM's preload reads per cycle (scratchpad.wgt_read_rows)
    dw_lines: int = 0         # lines of each GEMM.dwp row buffer (scratchpad.dw_line_buffer; 0: no GEMM.dwp)
    dw9: bool = False         # GEMM.dw9: a ninth PE per row for GEMM.dwp (features.dw_ninth_tap)
    dw_post: bool = False     # PPU.dw: a 3x3 depthwise stage in the post-processing (features.dw_post)

    @classmethod
    def from_target(cls, target: dict) -> TileParams:
        if target.get("kind") != "tile" or "derived" not in target:
            raise ValueError("TileParams needs a validated tile target (hwc.targets.load_target), "
                             f"not {target.get('name', target)!r}")
        sp = target["scratchpad"]
        return cls(name=target["name"], config_name=target["derived"]["config_name"],
                   n=target["array"]["rows"], beat_bytes=target["bus"]["bytes"],
                   read_latency=target["bus"]["read_latency"], fifo_depth=target["decoder"]["fifo_depth"],
                   act_lines=sp["act_lines"], acc_lines=sp["acc_lines"], wgt_bank_blocks=sp["wgt_bank_blocks"],
                   param_entries=sp["param_entries"],
                   post_unit=target["features"]["post_unit"], depthwise=target["features"]["depthwise"],
                   wgt_read_rows=sp["wgt_read_rows"], dw_lines=sp["dw_line_buffer"],
                   dw9=target["features"]["dw_ninth_tap"], dw_post=target["features"]["dw_post"])  # (schema defaults)

    # ---- derived sizes ----
    @property
    def log2n(self) -> int:
        return self.n.bit_length() - 1

    @property
    def tree_levels(self) -> int:
        """Levels of the adder tree of one array row (log2 N)."""
        return self.log2n

    @property
    def beat_bits(self) -> int:
        return 8 * self.beat_bytes

    @property
    def line_bits(self) -> int:
        return 8 * self.n

    @property
    def acc_line_bits(self) -> int:
        return 32 * self.n

    @property
    def wgt_bank_rows(self) -> int:
        return self.wgt_bank_blocks * self.n

    @property
    def wgt_rows(self) -> int:
        return 2 * self.wgt_bank_rows

    @property
    def wgt_blocks(self) -> int:
        return 2 * self.wgt_bank_blocks

    @property
    def log2r(self) -> int:
        """log2 of wgt_read_rows: the preload reads words of that many consecutive rows of a block."""
        return self.wgt_read_rows.bit_length() - 1

    @property
    def preload_cycles(self) -> int:
        """WGT reads that preload one weight block (isa.Timing.PRELOAD)."""
        return isa.preload_cycles(self.n, self.wgt_read_rows)

    @property
    def param_entry_beats(self) -> int:
        return isa.param_entry_beats(self.n, self.beat_bytes)

    @property
    def param_beats(self) -> int:
        return self.param_entries * self.param_entry_beats

    @property
    def act_bits(self) -> int:
        return bits_for(self.act_lines)

    @property
    def acc_bits(self) -> int:
        return bits_for(self.acc_lines)

    @property
    def wgt_bits(self) -> int:
        return bits_for(self.wgt_rows)

    @property
    def param_bits(self) -> int:
        return bits_for(self.param_beats)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("n", "beat_bytes", "read_latency", "fifo_depth", "act_lines",
                                              "acc_lines", "wgt_bank_blocks", "param_entries",
                                              "param_entry_beats", "wgt_read_rows")}


def field(word: Value, op: isa.Op, name: str) -> Value:
    """The bits of field `name` of an `op` instruction word (signed if the field is)."""
    pos, f = isa.LAYOUT[op][name]
    v = word[pos:pos + f.width]
    return v.as_signed() if f.signed else v


def dw_out_rows(word: Value) -> Value:
    """PPU.dw's output rows (isa.ppu_out_dims; signed: none or fewer with context rows, a BAD_FIELD). Stride 2:
    the rows of phase dws[0] in dwc[0] .. n_outer - 1 - dwc[1]."""
    no, dws, dwc = (field(word, isa.Op.PPU, k) for k in ("n_outer", "dws", "dwc"))
    return Mux(dws[1], ((no + 1 - dwc[1] - dws[0]) >> 1) - (dwc[0] & ~dws[0]), no - dwc[0] - dwc[1])


def opcode(word: Value) -> Value:
    return word[isa.OPCODE_LSB:isa.OPCODE_LSB + isa.OPCODE_BITS]


def wait_mask(word: Value) -> Value:
    return word[isa.WAIT_LSB:isa.WAIT_LSB + isa.WAIT_BITS]
