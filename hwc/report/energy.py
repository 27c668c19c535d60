"""Energy per inference: event counts (hwc/report/events.py) priced by a per-event table.

The table comes from the target description's optional `energy_pj` mapping (picojoules per
event; per byte for memories); keys it leaves out take the defaults below, which are the
45 nm, 0.9 V figures of M. Horowitz, "Computing's energy problem (and what we can do about
it)", ISSCC 2014, p. 10-14:

| key | default pJ | from Horowitz 2014 |
|---|---:|---|
| mac_int8 | 0.23 | 8-bit multiply 0.2 + 8-bit add 0.03 |
| add_int8 | 0.03 | 8-bit add |
| add_int32 | 0.1 | 32-bit add |
| mult_int32 | 3.1 | 32-bit multiply |
| mac_fp32 | 4.6 | fp32 multiply 3.7 + fp32 add 0.9 |
| add_fp32 | 0.9 | fp32 add |
| mult_fp32 | 3.7 | fp32 multiply |
| sram_read_byte | 1.25 | 8 KB SRAM, 64-bit read 10 pJ / 8 bytes |
| sram_write_byte | 1.25 | the same figure for a write (the paper gives one access energy) |
| dram_byte | 162.5 | DRAM 1.3-2.6 nJ per 64-bit access: the low end, / 8 bytes |

`energy(events, table)` splits the total into compute, on-chip memory and off-chip memory.
These are dynamic energies only (no leakage): an optimization that only saves time (weight
double-buffering) changes the cycles, not the events, and so not this figure.
"""

from __future__ import annotations

from hwc.errors import TargetError
from hwc.report.events import CATEGORIES, EVENTS

SOURCE = ("M. Horowitz, \"Computing's energy problem (and what we can do about it)\", ISSCC 2014 "
          "(45 nm, 0.9 V)")

DEFAULT_PJ: dict[str, float] = {
    "mac_int8": 0.23,
    "add_int8": 0.03,
    "add_int32": 0.1,
    "mult_int32": 3.1,
    "mac_fp32": 4.6,
    "add_fp32": 0.9,
    "mult_fp32": 3.7,
    "sram_read_byte": 1.25,
    "sram_write_byte": 1.25,
    "dram_byte": 162.5,
}


def energy_table(target: dict) -> dict:
    """{"pj": {key: pJ}, "source": str, "defaults": [keys taken from DEFAULT_PJ]} for a target."""
    given = dict(target.get("energy_pj") or {})
    where = target.get("name", "?")
    source = given.pop("source", None)
    unknown = sorted(set(given) - set(DEFAULT_PJ))
    if unknown:
        raise TargetError(f"Target {where}: unknown key energy_pj.{unknown[0]!r} (known keys: "
                          f"{', '.join(DEFAULT_PJ)}, source).")
    for k, v in given.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise TargetError(f"Target {where}: energy_pj.{k} must be a non-negative number of picojoules, "
                              f"not {v!r}.")
    if source is not None and not isinstance(source, str):
        raise TargetError(f"Target {where}: energy_pj.source must be a string naming where the figures come from.")
    pj = {k: float(given.get(k, DEFAULT_PJ[k])) for k in DEFAULT_PJ}
    defaults = [k for k in DEFAULT_PJ if k not in given]
    if source is None:
        source = SOURCE if not given else f"target {where} energy_pj (no source named); other entries: {SOURCE}"
    return {"pj": pj, "source": source, "defaults": defaults}


def energy(events: dict, pj: dict[str, float]) -> dict:
    """{"compute_pj", "onchip_pj", "offchip_pj", "total_pj"} of an event count."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for k, n in events.items():
        cat, price = EVENTS[k]
        out[cat] += n * pj[price]
    res = {f"{c}_pj": _round(out[c]) for c in CATEGORIES}
    res["total_pj"] = _round(sum(res.values()))
    return res


def _round(x: float) -> float:
    """Picojoules to 1e-6 pJ: no float noise in report.json."""
    return round(x, 6)
