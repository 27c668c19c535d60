"""Lowering: the low-level IR over explicit buffers and the static memory planner."""
