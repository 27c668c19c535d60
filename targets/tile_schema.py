"""Schema of `kind: tile` target descriptions, with one clear error per mistake.

The validated description is a plain dict (the YAML's structure) with derived entries
added under `derived` (canonical name, bytes of each memory, peak MACs per cycle).
"""

from __future__ import annotations

from typing import Any

from hwc.errors import TargetError

#: key -> (type, required); nested sections are dicts of the same form.
SCHEMA: dict[str, Any] = {
    "name": (str, True),
    "kind": (str, True),
    "description": (str, False),
    "array": {"rows": (int, True), "cols": (int, True)},
    "dtypes": {"operand_bits": (int, True), "acc_bits": (int, True)},
    "scratchpad": {"act_lines": (int, True), "acc_lines": (int, True), "wgt_bank_blocks": (int, True),
                   "param_entries": (int, True), "wgt_read_rows": (int, False),
                   "dw_line_buffer": (int, False)},
    "bus": {"bytes": (int, True), "read_latency": (int, True)},
    "decoder": {"fifo_depth": (int, True)},
    "clock_mhz": ((int, float), True),
    "fpga": {"device": (str, False), "package": (str, False)},
    "energy_pj": (dict, False),
    # Tile v2 (docs/tile-v2.md): post-processing in its own unit, concurrent with the array;
    # the array's depthwise mode; on 8-column arrays a ninth PE per row for the depthwise
    # mode over rows (GEMM.dw9); a 3x3 depthwise stage in the post-processing (PPU.dw). Absent means false
    # (the v1 tile of docs/tile.md).
    "features": {"post_unit": (bool, False), "depthwise": (bool, False), "dw_ninth_tap": (bool, False),
                 "dw_post": (bool, False)},
}

#: Largest value of each size the ISA's fields can address (hwc/isa.py).
ISA_LIMITS = {
    ("scratchpad", "act_lines"): 1 << 16,
    ("scratchpad", "acc_lines"): 1 << 14,
    ("scratchpad", "param_entries"): 1 << 10,
}


def _check(doc: dict, schema: dict, where: str, path: str) -> None:
    extra = sorted(set(doc) - set(schema))
    if extra:
        raise TargetError(f"Target {where}: unknown key {path}{extra[0]!r} (known keys here: "
                          f"{', '.join(sorted(schema))}).")
    for key, spec in schema.items():
        if isinstance(spec, dict):
            if key not in doc:
                if any(req for _, req in spec.values()):
                    raise TargetError(f"Target {where}: missing section {path}{key!r}.")
                continue
            if not isinstance(doc[key], dict):
                raise TargetError(f"Target {where}: {path}{key!r} must be a mapping.")
            _check(doc[key], spec, where, f"{path}{key}.")
            continue
        typ, required = spec
        if key not in doc:
            if required:
                raise TargetError(f"Target {where}: missing key {path}{key!r}.")
            continue
        v = doc[key]
        if (isinstance(v, bool) and typ is not bool) or not isinstance(v, typ):
            tname = typ.__name__ if isinstance(typ, type) else "number"
            raise TargetError(f"Target {where}: {path}{key!r} must be {tname}, not {v!r}.")


def _pow2(where: str, key: str, v: int) -> None:
    if v <= 0 or v & (v - 1):
        raise TargetError(f"Target {where}: {key!r} must be a positive power of two, not {v}.")


def validate_tile(doc: dict, where: str) -> dict:
    _check(doc, SCHEMA, where, "")
    rows, cols = doc["array"]["rows"], doc["array"]["cols"]
    for key in ("rows", "cols"):
        _pow2(where, f"array.{key}", doc["array"][key])
    if rows != cols:
        raise TargetError(f"Target {where}: the array must be square in this version (rows {rows} != cols "
                          f"{cols}); an activation line is both an input and an output of a block.")
    if rows < 2 or rows > 64:
        raise TargetError(f"Target {where}: array size {rows} is outside the supported 2..64.")
    if doc["dtypes"] != {"operand_bits": 8, "acc_bits": 32}:
        raise TargetError(f"Target {where}: dtypes must be operand_bits 8 and acc_bits 32 (int8 x int8 -> "
                          f"int32, the integer semantics of hwc/quant/arith.py); got {doc['dtypes']}.")
    sp = doc["scratchpad"]
    for key in ("act_lines", "acc_lines", "wgt_bank_blocks", "param_entries"):
        _pow2(where, f"scratchpad.{key}", sp[key])
    wr = sp.get("wgt_read_rows", 1)
    _pow2(where, "scratchpad.wgt_read_rows", wr)
    if wr > rows:
        raise TargetError(f"Target {where}: scratchpad.wgt_read_rows {wr} exceeds the block's {rows} rows (it is "
                          f"how many weight rows the GEMM's preload reads per cycle).")
    dwl = sp.get("dw_line_buffer", 0)
    if dwl:
        _pow2(where, "scratchpad.dw_line_buffer", dwl)
        if not doc.get("features", {}).get("depthwise"):
            raise TargetError(f"Target {where}: scratchpad.dw_line_buffer ({dwl}) needs features.depthwise: true "
                              f"(it is the row buffer of the depthwise mode; 0 or absent without it).")
        if not 8 <= dwl <= 4096:
            raise TargetError(f"Target {where}: scratchpad.dw_line_buffer must be 8..4096 lines (the longest "
                              f"padded row a depthwise GEMM streams over rows), not {dwl}.")
    if doc.get("features", {}).get("dw_ninth_tap"):
        if not dwl:
            raise TargetError(f"Target {where}: features.dw_ninth_tap needs scratchpad.dw_line_buffer (the ninth PE "
                              f"takes its line from the depthwise mode's second row buffer).")
        if cols != 8:
            raise TargetError(f"Target {where}: features.dw_ninth_tap is for arrays of 8 columns (the ninth PE "
                              f"completes a 3x3 kernel's row-buffer taps), not {cols}.")
    if doc.get("features", {}).get("dw_post") and not (dwl and doc["features"].get("post_unit")):
        raise TargetError(f"Target {where}: features.dw_post needs features.post_unit and scratchpad.dw_line_buffer "
                          f"(the depthwise stage is part of the post-processing unit, and its two row buffers "
                          f"are dw_line_buffer lines long).")
    if sp["act_lines"] < 4 * rows:
        raise TargetError(f"Target {where}: scratchpad.act_lines {sp['act_lines']} is too small for one "
                          f"block: it needs at least {4 * rows} lines (input, output and padding of one "
                          f"{rows}-pixel tile).")
    if sp["acc_lines"] < rows:
        raise TargetError(f"Target {where}: scratchpad.acc_lines {sp['acc_lines']} is too small for one "
                          f"block ({rows} lines).")
    for (sec, key), limit in ISA_LIMITS.items():
        if doc[sec][key] > limit:
            raise TargetError(f"Target {where}: {sec}.{key} {doc[sec][key]} exceeds what the instruction "
                              f"fields address ({limit}).")
    if 2 * sp["wgt_bank_blocks"] > 1 << 12:
        raise TargetError(f"Target {where}: scratchpad.wgt_bank_blocks {sp['wgt_bank_blocks']} exceeds "
                          f"what the instruction fields address (2048 per bank).")
    bus = doc["bus"]
    _pow2(where, "bus.bytes", bus["bytes"])
    if bus["bytes"] != cols:
        raise TargetError(f"Target {where}: bus.bytes ({bus['bytes']}) must equal array.cols ({cols}) in "
                          f"this version: one activation line is one beat.")
    if not 1 <= bus["read_latency"] <= 255:
        raise TargetError(f"Target {where}: bus.read_latency must be 1..255 cycles, not {bus['read_latency']}.")
    _pow2(where, "decoder.fifo_depth", doc["decoder"]["fifo_depth"])
    if not doc["clock_mhz"] > 0:
        raise TargetError(f"Target {where}: clock_mhz must be positive.")
    if "energy_pj" in doc:
        from hwc.report.energy import energy_table

        energy_table({**doc, "name": where})  # raises TargetError on a bad entry
    out = dict(doc)
    out["features"] = {"post_unit": False, "depthwise": False, "dw_ninth_tap": False, "dw_post": False,
                       **doc.get("features", {})}
    out["scratchpad"] = {"wgt_read_rows": 1, "dw_line_buffer": 0, **sp}
    out["derived"] = {
        "config_name": f"{rows}x{cols}_i8w8a32_act{sp['act_lines']}_acc{sp['acc_lines']}"
                       f"_wgt{sp['wgt_bank_blocks']}x2" + (f"r{wr}" if wr > 1 else "") + f"_bus{bus['bytes'] * 8}"
                       + "".join(f"_{tag}" for key, tag in (("post_unit", "post"), ("depthwise", "dw"))
                                 if out["features"][key]) + (f"{dwl}" if dwl else "")
                       + ("_dw9" if out["features"]["dw_ninth_tap"] else "")
                       + ("_dwpost" if out["features"]["dw_post"] else ""),
        "macs_per_cycle": rows * cols,
        "act_bytes": sp["act_lines"] * cols,
        "acc_bytes": sp["acc_lines"] * rows * 4,
        "wgt_bytes": 2 * sp["wgt_bank_blocks"] * rows * cols,
        "peak_gops": 2 * rows * cols * doc["clock_mhz"] / 1000,
    }
    return out
