"""The resolved CPU target: triple, CPU, features, vector width and registers, alignment.

`CpuTarget.resolve(description)` turns a validated `kind: cpu` description (YAML, with
"host"/"auto" values) into concrete values for the machine that builds, and makes the
LLVM target machine. The vector width (`simd_bits`) and register count drive every
kernel's blocking (hwc/backends/cpu/kernels): nothing in the kernels assumes AVX2.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import llvmlite.binding as llvm

from hwc.errors import TargetError

#: CPUs whose widest useful vector unit is known, for cross builds with features "" (by name).
_CPU_SIMD = {
    512: ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
          "rocketlake", "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver4", "znver5",
          "x86-64-v4"),
    256: ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
          "znver1", "znver2", "znver3", "x86-64-v3", "bdver4"),
}


@functools.cache
def init_llvm() -> None:
    """Initialize every LLVM target once (llvm.initialize() is gone in llvmlite 0.50)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@dataclass(frozen=True)
class CpuTarget:
    triple: str
    cpu: str
    features: str
    simd_bits: int
    vector_registers: int
    alignment: int
    host: bool  # the code runs on this machine (the runner and the benchmark can execute it)

    @property
    def lanes(self) -> int:
        """float32 (and int32) lanes of one vector register."""
        return max(1, self.simd_bits // 32)

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def is_x86(self) -> bool:
        return self.arch in ("x86_64", "i386", "i686")

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def resolve(desc: dict, triple: str | None = None, cpu: str | None = None) -> CpuTarget:
        """Concrete values for a validated `kind: cpu` description; `triple`/`cpu` override it."""
        init_llvm()
        host_triple = llvm.get_process_triple()
        t = triple or desc.get("triple", "host")
        c = cpu or desc.get("cpu", "host")
        f = desc.get("features", "host")
        if t == "host":
            t = host_triple
        is_host = _same_arch(t, host_triple)
        if c == "host":
            c = llvm.get_host_cpu_name() if is_host else "generic"
        if f == "host":
            f = llvm.get_host_cpu_features().flatten() if is_host and c == llvm.get_host_cpu_name() else ""
        try:
            llvm.Target.from_triple(t)
        except RuntimeError as e:
            raise TargetError(f"Target triple {t!r} is not known to LLVM ({str(e).strip()}); use e.g. "
                              f"x86_64-unknown-linux-gnu, aarch64-linux-gnu or thumbv7em-none-eabi.") from None
        bits = desc.get("simd_bits", "auto")
        if bits == "auto":
            bits = _auto_simd_bits(t, c, f)
        regs = desc.get("vector_registers", "auto")
        if regs == "auto":
            regs = _auto_registers(t, bits)
        return CpuTarget(t, c, f, int(bits), int(regs), int(desc.get("alignment", 64)), is_host)

    def target_machine(self) -> llvm.TargetMachine:
        init_llvm()
        tgt = llvm.Target.from_triple(self.triple)
        reloc = "pic" if self.host or "linux" in self.triple else "static"
        return tgt.create_target_machine(cpu=self.cpu, features=self.features, opt=3, reloc=reloc,
                                         codemodel="default")


def _same_arch(triple: str, host: str) -> bool:
    a, b = triple.split("-"), host.split("-")
    return a[0] == b[0] and ("linux" in triple) == ("linux" in host)


def _auto_simd_bits(triple: str, cpu: str, features: str) -> int:
    arch = triple.split("-")[0]
    feats = set(features.split(","))
    if arch in ("x86_64", "i386", "i686"):
        if "+avx512f" in feats:
            return 512
        if "+avx2" in feats or "+avx" in feats:
            return 256
        for bits, names in _CPU_SIMD.items():
            if cpu in names:
                return bits
        return 128  # SSE2 is baseline on x86-64
    if arch in ("aarch64", "arm64"):
        return 128  # NEON
    if arch.startswith(("arm", "thumb")):
        return 128 if ("+neon" in feats or "+mve.fp" in feats) else 32
    return 128 if arch in ("riscv64",) and "+v" in feats else 32


def _auto_registers(triple: str, bits: int) -> int:
    arch = triple.split("-")[0]
    if arch in ("x86_64",):
        return 32 if bits >= 512 else 16
    if arch in ("aarch64", "arm64"):
        return 32
    return 16
