"""Backends: code generation for a target kind (cpu: LLVM)."""
