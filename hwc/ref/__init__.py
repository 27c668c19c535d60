"""numpy reference interpreters: float (interp) and int8 (int8, registered into interp's KERNELS)."""

from hwc.ref import int8  # noqa: F401  (registers the quantized ops' kernels)
