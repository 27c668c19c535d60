"""Schema of `kind: cpu` target descriptions, with one clear error per mistake.

Every key but `name` and `kind` is optional; "host" and "auto" are resolved when a
model is built (hwc/backends/cpu/target.py), so one description serves any machine:

    triple: host            LLVM target triple, or host (the machine hwc runs on)
    cpu: host               LLVM CPU name (e.g. znver3, cortex-m4), or host
    features: host          LLVM feature string (e.g. "+avx2,+fma"), host, or "" (the CPU's defaults)
    simd_bits: auto         vector width the kernels are written for: 32 (scalar), 64, 128, 256, 512, or auto
    vector_registers: auto  vector registers the register blocking may use (4..64), or auto
    alignment: 64           byte alignment of the three memory regions and of every buffer in them
"""

from __future__ import annotations

from typing import Any

from hwc.errors import TargetError

DEFAULTS: dict[str, Any] = {
    "triple": "host", "cpu": "host", "features": "host", "simd_bits": "auto", "vector_registers": "auto",
    "alignment": 64,
}
KNOWN = {"name", "kind", "description", "energy_pj", *DEFAULTS}  # energy_pj: checked by hwc/report/energy.py
SIMD_BITS = (32, 64, 128, 256, 512)


def validate_cpu(doc: dict, where: str) -> dict:
    extra = sorted(set(doc) - KNOWN)
    if extra:
        raise TargetError(f"Target {where}: unknown key {extra[0]!r} for kind 'cpu' (known keys: "
                          f"{', '.join(sorted(KNOWN))}).")
    if "energy_pj" in doc:
        from hwc.report.energy import energy_table

        energy_table({**doc, "name": where})  # raises TargetError on a bad entry
    out = {**DEFAULTS, **doc}
    for key in ("triple", "cpu", "features", "description"):
        if key in out and not isinstance(out[key], str):
            raise TargetError(f"Target {where}: {key!r} must be str, not {out[key]!r}.")
    if not out["triple"]:
        raise TargetError(f"Target {where}: 'triple' must be an LLVM target triple or 'host', not ''.")
    bits = out["simd_bits"]
    if bits != "auto" and (isinstance(bits, bool) or bits not in SIMD_BITS):
        raise TargetError(f"Target {where}: 'simd_bits' must be auto or one of "
                          f"{', '.join(map(str, SIMD_BITS))}, not {bits!r}.")
    regs = out["vector_registers"]
    if regs != "auto" and (isinstance(regs, bool) or not isinstance(regs, int) or not 4 <= regs <= 64):
        raise TargetError(f"Target {where}: 'vector_registers' must be auto or an integer in 4..64, "
                          f"not {regs!r}.")
    align = out["alignment"]
    if isinstance(align, bool) or not isinstance(align, int) or align < 4 or align & (align - 1):
        raise TargetError(f"Target {where}: 'alignment' must be a power of two >= 4, not {align!r}.")
    return out
