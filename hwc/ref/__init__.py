"""numpy reference interpreters: float (interp) and, later, int8."""
