"""The CPU backend: LLVM code generation into a standalone object file.

    graph (optimized, float or int8) -> lowering.py (kernels, fusion, layouts, pads)
        -> hwc.lower.memplan (static memory plan) -> codegen.py + kernels/ (LLVM IR)
        -> model.o + model.h + weights.bin (bundle.py); runner.py runs it via ctypes

`build_artifact` is what `hwc.build(..., target="cpu")` calls.
"""

from hwc.backends.cpu.artifact import CpuArtifact, build_artifact

__all__ = ["CpuArtifact", "build_artifact"]
