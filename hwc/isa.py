"""The tile's instruction set: the one definition of every opcode and field.

The hardware decoder (`hw/`), the scheduler (`hwc/tile/`), the Python tile model and
the disassembler all import this module; nothing else knows bit positions. Behaviour and
timing are specified in docs/tile.md.

An instruction is 128 bits, little-endian (16 bytes in program.bin). Bits [3:0] are the
opcode, bits [7:4] the wait mask (LOAD, COMPUTE, STORE, POST idle); the
opcode's fields follow from bit 8 upward in the order listed in FORMATS.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

INSN_BITS = 128
INSN_BYTES = INSN_BITS // 8
HEADER_BITS = 8
OPCODE_LSB, OPCODE_BITS = 0, 4  # bits [3:0]
WAIT_LSB, WAIT_BITS = 4, 4      # bits [7:4]: LOAD, COMPUTE, STORE, POST idle (POST: targets with features.post_unit)


class Op(enum.IntEnum):
    NOP = 0
    LOAD = 1
    STORE = 2
    GEMM = 3
    PPU = 4
    VEC = 5
    FILL = 6
    FINISH = 15


class Wait(enum.IntFlag):
    """Units an instruction waits on (until they are idle) before it issues."""

    NONE = 0
    LOAD = 1
    COMPUTE = 2
    STORE = 4
    POST = 8     # the post-processing unit (PPU, VEC, FILL) of targets with features.post_unit
    ALL = 15


class Mem(enum.IntEnum):
    """On-chip memory a LOAD writes."""

    ACT = 0
    WGT = 1
    PARAM = 2


class VecOp(enum.IntEnum):
    MAX = 0
    ADD = 1


class ErrorCode(enum.IntEnum):
    """`status.error_code` of a halted tile (docs/tile.md, "Errors"); checked at issue, in this priority."""

    NONE = 0
    ILLEGAL_OPCODE = 1  # the opcode is not an Op
    BAD_FIELD = 2       # a count is 0, LOAD.mem is not a Mem, or VEC.op is not a VecOp
    OUT_OF_RANGE = 3    # an address leaves its memory (ACT/ACC/WGT/PARAM, or the 2**28-beat external space)


ERROR_CODE_BITS = 2


class Unit(enum.IntEnum):
    DECODER = 0
    LOAD = 1
    COMPUTE = 2
    STORE = 3


UNIT_OF = {Op.NOP: Unit.DECODER, Op.FINISH: Unit.DECODER, Op.LOAD: Unit.LOAD, Op.STORE: Unit.STORE,
           Op.GEMM: Unit.COMPUTE, Op.PPU: Unit.COMPUTE, Op.VEC: Unit.COMPUTE, Op.FILL: Unit.COMPUTE}


@dataclass(frozen=True)
class Field:
    name: str
    width: int
    signed: bool = False
    doc: str = ""
    default: int | None = None   # fields added later (v2) default to their v1 meaning

    @property
    def lo_val(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi_val(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


def F(name, width, doc="", signed=False, default=None) -> Field:
    return Field(name, width, signed, doc, default)


#: The largest PPU.lag (tile v2): a PPU may issue while up to this many of the latest GEMMs are in flight.
PPU_MAX_LAG = 3

#: GEMM.dwp (depthwise over rows): the taps of one kernel row sit in DWP_TAPS consecutive columns, kernel rows
#: DWP_TAPS columns apart; the row pitch (n_inner) must be at least DWP_MIN_PITCH lines (the row buffers'
#: read latency) and at most scratchpad.dw_line_buffer.
DWP_TAPS = 3
DWP_ROWS = 3
DWP_MIN_PITCH = 4


def ppu_dw_positions(n_outer: int, n_inner: int, dwc: int = 0) -> int:
    """The stream positions of a PPU.dw: the tile's rows and the bottom pad row (not after a context row, `dwc`
    bit 1) at a pitch of n_inner + 1 (the left pad column is the row before's right pad), and the last output's
    bottom-right pad."""
    return (n_outer + 1 - (dwc >> 1)) * (n_inner + 1) + 1


def ppu_dw_rows(n_outer: int, dws: int = 0, dwc: int = 0) -> list[int]:
    """The tile rows whose stride-1 outputs a PPU.dw writes: all but context rows (`dwc` bit 0 the first, bit 1
    the last: rows of the image another PPU.dw writes, here only read), and with stride 2 (`dws` 2 or 3) those of
    the phase dws & 1 (the tile's row 0 counts as even)."""
    rows = range(dwc & 1, n_outer - (dwc >> 1))
    return [y for y in rows if dws < 2 or y % 2 == dws & 1]


def ppu_out_dims(n_outer: int, n_inner: int, dws: int = 0, dwc: int = 0, dwf: int = 0) -> tuple[int, int]:
    """The output grid of a PPU in lines (PPU.dw with stride 2, `dws` = 2 or 3: every other row and column of the
    stride-1 outputs, from the first (2) or the second (3), but with two pixels a line (`dwf` = 1) one output
    pixel every line; without its context rows, `dwc`, `ppu_dw_rows`)."""
    if dws < 2:
        return n_outer - (dwc & 1) - (dwc >> 1), n_inner
    phase = dws & 1
    return len(ppu_dw_rows(n_outer, dws, dwc)), n_inner if dwf else (n_inner + 1 - phase) >> 1


def dwp_delays(n: int, pitch: int, dw9: bool = False) -> list[int | None]:
    """GEMM.dwp: the lines back column c of an n-column array reads (None: it reads zero); with GEMM.dw9 (an
    8-column array) one more, column 8."""
    cols = DWP_TAPS * DWP_ROWS if dw9 else n
    return [c % DWP_TAPS + (c // DWP_TAPS) * pitch if c < DWP_TAPS * DWP_ROWS else None for c in range(cols)]


#: Field layout of every opcode, from bit 8 upward.
FORMATS: dict[Op, tuple[Field, ...]] = {
    Op.NOP: (),
    Op.FINISH: (),
    Op.LOAD: (
        F("mem", 2, "destination memory (Mem: ACT, WGT, PARAM)"),
        F("dram", 28, "external beat address of row 0"),
        F("sram", 18, "destination address of row 0 (ACT line / WGT row / PARAM beat)"),
        F("rows", 14, "number of rows"),
        F("row_beats", 14, "beats per row (= lines / weight rows / param beats)"),
        F("dram_stride", 24, "beats between external rows"),
        F("sram_stride", 16, "destination units between rows"),
    ),
    Op.STORE: (
        F("dram", 28, "external beat address of row 0"),
        F("sram", 18, "ACT line of row 0"),
        F("rows", 14, "number of rows"),
        F("row_beats", 14, "lines (= beats) per row"),
        F("dram_stride", 24, "beats between external rows"),
        F("sram_stride", 16, "ACT lines between rows"),
    ),
    Op.GEMM: (
        F("wblk", 12, "weight block (bank * wgt_bank_blocks + index)"),
        F("act", 16, "ACT line of the first input"),
        F("acc", 16, "ACC line of the first output"),
        F("n_outer", 12, "outer loop count"),
        F("n_inner", 12, "inner loop count"),
        F("act_so", 16, "ACT stride of the outer loop", signed=True),
        F("act_si", 8, "ACT stride of the inner loop", signed=True),
        F("acc_so", 14, "ACC stride of the outer loop"),
        F("acc_si", 4, "ACC stride of the inner loop"),
        F("reset", 1, "1: acc = W@x (start a sum); 0: acc += W@x"),
        F("dw", 1, "depthwise mode (features.depthwise): PE (r, c) takes lane r of the line streamed c earlier",
          default=0),
        F("skip", 3, "depthwise mode: the first `skip` lines of every inner loop write no accumulator", default=0),
        F("dwp", 1, "depthwise mode over rows (scratchpad.dw_line_buffer): column c takes the line streamed "
          "c % 3 + (c // 3) * n_inner earlier in this GEMM (c < 9; the others read zero)", default=0),
        F("dw9", 1, "with dwp, on an 8-column array with features.dw_ninth_tap: a ninth PE per row "
          "is column 8 (the line streamed 2 + 2 * n_inner earlier), its weights WGT row N of the block (the next "
          "block's first row, byte r for row r); the preload reads one word more", default=0),
    ),
    Op.PPU: (
        F("acc", 16, "ACC line of the first input"),
        F("out", 16, "ACT line of the first output"),
        F("n_outer", 12, "outer loop count"),
        F("n_inner", 12, "inner loop count"),
        F("acc_so", 14, "ACC stride of the outer loop"),
        F("acc_si", 4, "ACC stride of the inner loop"),
        F("out_so", 16, "ACT stride of the outer loop", signed=True),
        F("out_si", 8, "ACT stride of the inner loop", signed=True),
        F("param", 10, "PARAM entry (bias, mult, shift per lane; z_out, lo, hi)"),
        F("lag", PPU_MAX_LAG.bit_length(), "tile v2, k > 0: issue once every GEMM but the k most recently "
          "issued ones has completed (the next pixel tile's first k GEMMs may stream meanwhile); ignored by v1",
          default=0),
        F("dw", 1, "features.dw_post: the requantized tile, padded by one pixel of entry param's z_out, goes "
          "through a 3x3 depthwise stage (taps: entry param + 2, byte 3*ky + kx of lane l at (3*ky + kx) * N + l) "
          "requantized with entry param + 1; n_inner + 1 must be DWP_MIN_PITCH .. scratchpad.dw_line_buffer",
          default=0),
        F("dws", 2, "with dw: 0 stride 1; 2 stride 2 with one pixel of padding on every side (the outputs at even "
          "rows and columns of the stride-1 ones); 3 stride 2 padded only at the bottom and the right (the odd "
          "ones); 1 is a BAD_FIELD. The outputs: ppu_out_dims", default=0),
        F("dwc", 2, "with dw, context rows: bit 0 the tile's first row, bit 1 its last, are rows of the image, not "
          "padding, whose outputs this PPU does not write (another PPU.dw's tile holds the rows around them): a "
          "tile of whole rows of a taller image (ppu_dw_rows). A BAD_FIELD without dw or without an output row",
          default=0),
        F("dwf", 2, "with dw: a line holds 2**dwf pixels of N >> dwf lanes (stacked, pixel p in lanes "
          "p * (N >> dwf) ..): a pixel's left and right neighbours are the lanes N >> dwf below and above, across "
          "into the line before and after. With stride 2 (dws) only dwf = 1: the output pixel of a line is its "
          "first pixel (dws 2) or its second (3, whose window lanes 0 .. N/2 - 1 then compute: centre and right "
          "one pixel further), written to lanes 0 .. N/2 - 1 of one output line per line (the other lanes: the "
          "same window one pixel further). 3, or 2 with dws, is a BAD_FIELD", default=0),
        F("neg", 1, "a fused LeakyReLU / PReLU (arith.requantize's mult_neg): a lane whose acc + bias is negative "
          "multiplies by the lane's entry of the first 4N bytes of PARAM entry param + 1 (int32 each: "
          "pack_neg_entry) instead of its mult; the PPU reads NEG_BEATS more beats first. With dw a BAD_FIELD",
          default=0),
    ),
    Op.VEC: (
        F("op", 2, "VecOp: MAX or ADD"),
        F("a", 16, "ACT line of the first a operand"),
        F("b", 16, "ACT line of the first b operand"),
        F("out", 16, "ACT line of the first output"),
        F("n_outer", 12, "outer loop count"),
        F("n_inner", 12, "inner loop count"),
        F("in_so", 12, "ACT stride of the outer loop for a and b", signed=True),
        F("in_si", 6, "ACT stride of the inner loop for a and b", signed=True),
        F("out_so", 12, "ACT stride of the outer loop for out", signed=True),
        F("out_si", 6, "ACT stride of the inner loop for out", signed=True),
        F("param", 10, "PARAM entry (ADD only)"),
    ),
    Op.FILL: (
        F("addr", 16, "first ACT line"),
        F("count", 16, "number of lines per run"),
        F("value", 8, "byte written to every lane (int8 as two's complement)"),
        F("rows", 12, "number of runs (`count` lines each, `stride` lines apart): a tensor's halo, row by row",
          default=1),
        F("stride", 16, "ACT lines from a run to the next", default=0),
    ),
}


def _offsets() -> dict[Op, dict[str, tuple[int, Field]]]:
    out = {}
    for op, fields in FORMATS.items():
        pos = HEADER_BITS
        table = {}
        for f in fields:
            table[f.name] = (pos, f)
            pos += f.width
        if pos > INSN_BITS:
            raise AssertionError(f"{op.name}: fields need {pos} bits, more than {INSN_BITS}")
        out[op] = table
    return out


#: op -> field name -> (lsb position, Field)
LAYOUT = _offsets()


@dataclass(frozen=True)
class Insn:
    """A decoded instruction: opcode, wait mask and field values (signed where declared)."""

    op: Op
    wait: Wait = Wait.NONE
    fields: tuple[tuple[str, int], ...] = ()

    def __getattr__(self, name):
        for k, v in self.fields:
            if k == name:
                return v
        raise AttributeError(name)

    def get(self, name: str) -> int:
        return dict(self.fields)[name]

    def __str__(self) -> str:
        w = "" if not self.wait else " wait=" + "|".join(u.name for u in Wait if u and u in self.wait
                                                           and u != Wait.ALL)
        args = " ".join(f"{k}={v}" for k, v in self.fields)
        return f"{self.op.name}{w}{' ' + args if args else ''}"


def _specs() -> dict[Op, tuple]:
    """op -> (field names in layout order, defaults, {name: (lo, hi)}, ((lsb, mask), ...)): make/encode's tables."""
    out = {}
    for op, table in LAYOUT.items():
        out[op] = (tuple(table), {k: f.default for k, (_, f) in table.items() if f.default is not None},
                   {k: (f.lo_val, f.hi_val) for k, (_, f) in table.items()},
                   tuple((pos, (1 << f.width) - 1) for pos, f in table.values()))
    return out


_SPECS = _specs()


#: make's instructions by (op, wait, fields as given): a scheduler's candidates re-make the same ones (each
#: finalize of a search, ResNet-8 tile8x8: 97k calls for 10k instructions); Insn is immutable, so they are shared
_MADE: dict = {}


def make(op: Op, wait: Wait = Wait.NONE, /, **values: int) -> Insn:
    """Build an instruction, checking every field is present and fits its width."""
    key = (op, wait, *values.items())
    try:
        return _MADE[key]
    except (KeyError, TypeError):   # (TypeError: an unhashable value, which the checks below report)
        pass
    insn = _make(op, wait, values)
    if len(_MADE) >= 1 << 18:
        _MADE.clear()
    _MADE[key] = insn
    return insn


def _make(op: Op, wait: Wait, values: dict) -> Insn:
    names, defaults, ranges, _ = _SPECS[op]
    if defaults:
        values = {**defaults, **values}
    if values.keys() != ranges.keys():
        missing = [k for k in names if k not in values]
        extra = [k for k in values if k not in ranges]
        raise ValueError(f"{op.name}: missing fields {missing}, unknown fields {extra}")
    out = []
    for k, (lo, hi) in ranges.items():
        v = int(values[k])
        if not lo <= v <= hi:
            f = LAYOUT[op][k][1]
            raise ValueError(f"{op.name}.{k} = {v} does not fit {f.width} "
                             f"{'signed ' if f.signed else ''}bits [{lo}, {hi}]")
        out.append((k, v))
    return Insn(op, wait if type(wait) is Wait else Wait(wait), tuple(out))


def encode(insn: Insn) -> int:
    word = insn.__dict__.get("_word")   # (cached: an Insn is immutable, and make shares them)
    if word is None:
        word = _encode(insn)
        object.__setattr__(insn, "_word", word)
    return word


def _encode(insn: Insn) -> int:
    word = (int(insn.op) << OPCODE_LSB) | (int(insn.wait) << WAIT_LSB)
    names, _, _, places = _SPECS[insn.op]
    if len(insn.fields) == len(names) and all(a == b for (a, _), b in zip(insn.fields, names)):
        for (_, v), (pos, mask) in zip(insn.fields, places):
            word |= (v & mask) << pos
        return word
    values = dict(insn.fields)  # fields in another order (an Insn built by hand)
    for name, (pos, mask) in zip(names, places):
        word |= (values[name] & mask) << pos
    return word


def decode(word: int) -> Insn:
    """Decode a 128-bit word; raises ValueError for an unknown opcode."""
    code = (word >> OPCODE_LSB) & ((1 << OPCODE_BITS) - 1)
    try:
        op = Op(code)
    except ValueError:
        raise ValueError(f"illegal opcode {code}") from None
    values = {}
    for name, (pos, f) in LAYOUT[op].items():
        v = (word >> pos) & ((1 << f.width) - 1)
        if f.signed and v >> (f.width - 1):
            v -= 1 << f.width
        values[name] = v
    return Insn(op, Wait((word >> WAIT_LSB) & ((1 << WAIT_BITS) - 1)), tuple(values.items()))


def to_bytes(program: list[Insn]) -> bytes:
    return b"".join(encode(i).to_bytes(INSN_BYTES, "little") for i in program)


def from_bytes(data: bytes) -> list[Insn]:
    if len(data) % INSN_BYTES:
        raise ValueError(f"program length {len(data)} is not a multiple of {INSN_BYTES}")
    return [decode(int.from_bytes(data[i:i + INSN_BYTES], "little")) for i in range(0, len(data), INSN_BYTES)]


# ---- PARAM entries ---------------------------------------------------------------------------
def param_entry_bytes(n: int) -> int:
    """Bytes of one PARAM entry before padding: bias[n] i32, mult[n] i32, shift[n] u8, z/lo/hi."""
    return 4 * n + 4 * n + n + 3


def param_entry_beats(n: int, beat_bytes: int) -> int:
    return -(-param_entry_bytes(n) // beat_bytes)


def pack_param_entry(bias, mult, shift, z_out: int, lo: int, hi: int, n: int, beat_bytes: int) -> bytes:
    """The bytes of one PARAM entry (padded to whole beats), layout as docs/tile.md."""
    import numpy as np

    bias = np.asarray(bias, np.int32)
    mult = np.asarray(mult, np.int32)
    shift = np.asarray(shift, np.uint8)
    if not (bias.shape == mult.shape == shift.shape == (n,)):
        raise ValueError(f"param entry arrays must have shape ({n},)")
    raw = (bias.astype("<i4").tobytes() + mult.astype("<i4").tobytes() + shift.tobytes()
           + np.array([z_out, lo, hi], np.int8).tobytes())
    return raw + b"\0" * (param_entry_beats(n, beat_bytes) * beat_bytes - len(raw))


def neg_beats(n: int, beat_bytes: int) -> int:
    """PARAM beats a PPU.neg reads of its second entry: the N int32 multipliers of negative lanes."""
    return -(-4 * n // beat_bytes)


def pack_neg_entry(mult_neg, n: int, beat_bytes: int) -> bytes:
    """PPU.neg's second PARAM entry (param + 1): mult_neg[n] int32 first, the rest zero (padded to an entry)."""
    import numpy as np

    mult_neg = np.asarray(mult_neg, np.int32)
    if mult_neg.shape != (n,):
        raise ValueError(f"mult_neg must have shape ({n},)")
    raw = mult_neg.astype("<i4").tobytes()
    return raw + b"\0" * (param_entry_beats(n, beat_bytes) * beat_bytes - len(raw))


def unpack_param_entry(data: bytes, n: int) -> dict:
    import numpy as np

    bias = np.frombuffer(data, "<i4", n, 0).astype(np.int32)
    mult = np.frombuffer(data, "<i4", n, 4 * n).astype(np.int32)
    shift = np.frombuffer(data, np.uint8, n, 8 * n).astype(np.int32)
    z_out, lo, hi = (int(v) for v in np.frombuffer(data, np.int8, 3, 9 * n))
    return {"bias": bias, "mult": mult, "shift": shift, "z_out": z_out, "lo": lo, "hi": hi}


# ---- timing (docs/tile.md section 4) ---------------------------------------------------------
#: Register stages between an instruction's imem data and its FIFO write (error checks; hw/fetch.py).
PREDECODE_STAGES = 9
#: Register stages of the PPU/VEC lane pipeline (hw/post.py).
POST_PIPE_STAGES = 13
#: PPU.dw (features.dw_post): register stages of the depthwise stage between the two requantizations (the
#: window's lines, the products, two adder levels; hw/post.py), and the PARAM entries such a PPU reads.
DW_POST_STAGES = 4
DW_POST_ENTRIES = 3
#: Register stages of the MAC array before its adder tree (hw/mac.py): the x copy that feeds the
#: multipliers, the products, and the products again; then log2 N adder-tree levels.
MAC_PIPE_STAGES = 3
#: On-chip memory read latency: the address registered, the block RAM, the read data registered
#: (a block RAM's output is slow: nothing but a register may follow it in the same cycle).
MEM_LATENCY = 3
#: A write request is performed this many cycles later (its address and data registered, then the RAM).
MEM_WRITE_LATENCY = 1
#: The issue stage sees the units' idle/accept state through registers: a unit that ends (or, for a
#: GEMM, starts its stream) in cycle t counts as idle (accepting) from cycle t + IDLE_LAG (hw/tile.py).
IDLE_LAG = 1


def preload_cycles(n: int, wgt_read_rows: int, dw9: bool = False) -> int:
    """Cycles of WGT reads that preload one N x N weight block, `wgt_read_rows` rows a cycle
    (scratchpad.wgt_read_rows; docs/tile-v2.md, section 3); GEMM.dw9: one word more (its row N is the
    first of the next block's words)."""
    return n // wgt_read_rows + (1 if dw9 else 0)


@dataclass(frozen=True)
class Timing:
    """The tile's timing constants for one target: the only definition (the RTL asserts its
    pipeline depths against them at elaboration; the Python model computes with them).

    Per instruction, with `P = n_outer * n_inner` and `total = rows * row_beats`:
      fetch    instruction k may issue from request(k) + FETCH_LATENCY
      issue    a unit it waits for (or needs) must have ended by issue - IDLE_LAG (GEMM: the previous
               GEMM's stream_start <= issue - IDLE_LAG)
      LOAD     busy LOAD_OVERHEAD + Lm + total
      STORE    busy STORE_OVERHEAD + total
      GEMM     stream_start = max(issue + PRELOAD + GEMM_SETUP, previous stream_end); stream_end = stream_start + P;
               (GEMM.dw9: PRELOAD_DW9)
               idle at stream_end + GEMM_LATENCY
      PPU      busy PPU_OVERHEAD + P; PPU.dw: PPU_DW_OVERHEAD + (n_outer + 1) * (n_inner + 1) + 1 (the tile's
               padded rows streamed at a pitch of n_inner + 1, the pads of two rows sharing a column);
               PPU.neg: NEG_BEATS more
      VEC      busy VEC_OVERHEAD + VEC_CYCLES_PER_LINE * P
      FILL     busy FILL_OVERHEAD + rows * count
    A PPU.dw right after a PPU.dw needs POST free only up to PPU_DW_DRAIN cycles before the end of the one
    before it (its second pipe draining); every other POST instruction (and every wait for POST) needs POST idle.
    """

    N: int                   # array size
    LM: int                  # bus.read_latency
    FIFO_DEPTH: int          # decoder.fifo_depth
    PARAM_ENTRY_BEATS: int   # beats of one PARAM entry
    FETCH_LATENCY: int       # Lm + PREDECODE_STAGES + 2 (FIFO write, head register)
    LOAD_OVERHEAD: int       # 2 + WL: requests from issue + 1; each beat registered, then written
    STORE_OVERHEAD: int      # 2 + ML: ACT read, FIFO, posted beat
    PRELOAD: int             # N / scratchpad.wgt_read_rows: cycles of WGT reads that preload one weight block
    PRELOAD_DW9: int         # the same for a GEMM.dw9 block (N + 1 rows: one word more)
    GEMM_SETUP: int          # 1: the swap waits ML cycles after the first line's read, as the rows do
    GEMM_LATENCY: int        # ML + 1 + MAC_PIPE_STAGES + log2 N + WL: ACT read, x reg, MAC, tree, add, write
    PPU_OVERHEAD: int        # PEB + 2 ML + WL + POST_PIPE_STAGES + 2: PARAM reads, prepare, ACC reads, pipe, write
    PPU_DW_OVERHEAD: int     # PPU_OVERHEAD + DW_POST_STAGES + POST_PIPE_STAGES: the stage and its second pipe (the
                             # two more entries are read while the PPU streams)
    PPU_DW_DRAIN: int        # the last cycles of a PPU.dw a next PPU.dw may issue in: its second pipe draining
    NEG_BEATS: int           # PPU.neg: the beats of entry param + 1 it reads before it streams (neg_beats)
    VEC_OVERHEAD: int        # PEB + 2 ML + WL + POST_PIPE_STAGES + 1: as the PPU, the last write is in the last frame
    VEC_CYCLES_PER_LINE: int  # read a, read b, write: the single compute ACT port
    FILL_OVERHEAD: int       # 1 + WL: one write request per cycle from issue + 1, performed WL later
    IDLE_LAG: int            # a unit's end (GEMM: stream start) is seen by the issue stage this much later

    def ppu_busy(self, n_outer: int, n_inner: int, dw: int = 0, dwc: int = 0, neg: int = 0) -> int:
        """Cycles a PPU keeps its unit busy (PPU.dw: the padded rows at a pitch of n_inner + 1, and the stage;
        PPU.neg: the beats of its second entry)."""
        if dw:
            return self.PPU_DW_OVERHEAD + ppu_dw_positions(n_outer, n_inner, dwc)
        return self.PPU_OVERHEAD + n_outer * n_inner + (self.NEG_BEATS if neg else 0)

    @classmethod
    def from_target(cls, target: dict) -> Timing:
        n = target["array"]["rows"]
        lm = target["bus"]["read_latency"]
        peb = param_entry_beats(n, target["bus"]["bytes"])
        ml, wl = MEM_LATENCY, MEM_WRITE_LATENCY
        return cls(N=n, LM=lm, FIFO_DEPTH=target["decoder"]["fifo_depth"], PARAM_ENTRY_BEATS=peb,
                   FETCH_LATENCY=lm + PREDECODE_STAGES + 2, LOAD_OVERHEAD=2 + wl, STORE_OVERHEAD=2 + ml,
                   PRELOAD=preload_cycles(n, target["scratchpad"]["wgt_read_rows"]),
                   PRELOAD_DW9=preload_cycles(n, target["scratchpad"]["wgt_read_rows"], dw9=True),
                   GEMM_SETUP=1, GEMM_LATENCY=ml + 1 + MAC_PIPE_STAGES + (n.bit_length() - 1) + wl,
                   PPU_OVERHEAD=peb + 2 * ml + wl + POST_PIPE_STAGES + 2,
                   PPU_DW_OVERHEAD=peb + 2 * ml + wl + 2 * POST_PIPE_STAGES + DW_POST_STAGES + 2,
                   PPU_DW_DRAIN=POST_PIPE_STAGES + wl, NEG_BEATS=neg_beats(n, target["bus"]["bytes"]),
                   VEC_OVERHEAD=peb + 2 * ml + wl + POST_PIPE_STAGES + 1,
                   VEC_CYCLES_PER_LINE=3, FILL_OVERHEAD=1 + wl,
                   IDLE_LAG=IDLE_LAG)
