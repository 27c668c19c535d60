"""The CPU kernels: one emitter per kernel family (lowering.py sets attrs["kernel"]).

Each emitter writes the body of one specialized function from a `codegen.Ctx`: the
instruction, its buffers' types and layouts, pointers, and constants for weights.bin.
"""

from hwc.backends.cpu.kernels.elementwise import emit_ew
from hwc.backends.cpu.kernels.gemm import emit_conv, emit_gemm, emit_qconv, emit_qgemm
from hwc.backends.cpu.kernels.int8 import INT8_EMITTERS
from hwc.backends.cpu.kernels.misc import emit_reduce, emit_softmax
from hwc.backends.cpu.kernels.movement import MOVE_EMITTERS
from hwc.backends.cpu.kernels.pool import emit_gpool, emit_pool

EMITTERS = {
    "ew": emit_ew,
    "conv": emit_conv,
    "gemm": emit_gemm,
    "pool": emit_pool,
    "gpool": emit_gpool,
    "softmax": emit_softmax,
    "logsoftmax": emit_softmax,
    "reducemean": emit_reduce,
    "reducesum": emit_reduce,
    "reducemax": emit_reduce,
    "reducemin": emit_reduce,
    **MOVE_EMITTERS,
    "qconv": emit_qconv,
    "qgemm": emit_qgemm,
    **INT8_EMITTERS,
}
