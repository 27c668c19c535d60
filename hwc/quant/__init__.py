"""Quantization: integer semantics (arith), calibration, the int8 graph and its reference."""
