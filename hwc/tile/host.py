"""Host side of a tile run: tensors to and from the tile's DRAM layout, and the DRAM image.

In DRAM (and in ACT, without the halo) a tile tensor [C, H, W] is stored as CB channel
blocks of H x W lines; a line holds N int8 lanes, lane l of block b being channel b*N + l
(lanes past C are 0 on the way in and ignored on the way out).
"""

from __future__ import annotations

import numpy as np

from hwc.isa import INSN_BYTES


def pack(x: np.ndarray, c: int, h: int, w: int, n: int) -> bytes:
    """[C, H, W] int8 (any leading 1s, or [M, K] for a K x 1 x M tensor) -> DRAM bytes."""
    x = np.asarray(x, dtype=np.int8)
    x = x.reshape(c, h, w) if x.size == c * h * w and x.ndim != 2 else x.T.reshape(c, h, w)
    cb = -(-c // n)
    lines = np.zeros((cb * n, h, w), np.int8)
    lines[:c] = x
    return lines.reshape(cb, n, h, w).transpose(0, 2, 3, 1).tobytes()


def packed_bytes(c: int, h: int, w: int, n: int) -> int:
    """Bytes of a [C, H, W] tensor in external memory (`pack`: channel blocks of n lanes)."""
    return -(-c // n) * h * w * n


def stack_pixels(x: np.ndarray, f: int) -> np.ndarray:
    """[1, C, H, W] -> [1, C*f, H, W/f]: channel c + C*a of column U is pixel f*U + a (layers.space_to_depth)."""
    if f == 1:
        return x
    _, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(c, h, w // f, f).transpose(3, 0, 1, 2).reshape(1, c * f, h, w // f))


def unstack_pixels(x: np.ndarray, f: int) -> np.ndarray:
    """The inverse of `stack_pixels` on [C*f, H, W/f] -> [C, H, W]."""
    if f == 1:
        return x
    cf, h, wf = x.shape
    return np.ascontiguousarray(x.reshape(f, cf // f, h, wf).transpose(1, 2, 3, 0).reshape(cf // f, h, wf * f))


def unpack(data: bytes, c: int, h: int, w: int, n: int, shape: tuple[int, ...], s2d: int = 1) -> np.ndarray:
    """DRAM bytes -> the IR tensor of `shape` ([1, C, H, W], or [M, K] for a K x 1 x M tensor)."""
    cb = -(-c // n)
    lines = np.frombuffer(data, np.int8, cb * h * w * n).reshape(cb, h, w, n)
    chw = unstack_pixels(lines.transpose(0, 3, 1, 2).reshape(cb * n, h, w)[:c], s2d)
    c, w = chw.shape[0], chw.shape[2]
    if len(shape) == 2:
        return np.ascontiguousarray(chw.reshape(c, w).T)
    return np.ascontiguousarray(chw.reshape(shape))


def dram_image(const: bytes, program: bytes, prog_offset: int, total: int,
               inputs: dict[int, bytes]) -> bytearray:
    """The whole external memory before a run: constants, inputs, then the program."""
    mem = bytearray(max(total, prog_offset + len(program)))
    mem[:len(const)] = const
    for off, data in inputs.items():
        mem[off:off + len(data)] = data
    mem[prog_offset:prog_offset + len(program)] = program
    return mem


def program_offset(io_end: int) -> int:
    """The program follows the data, on an instruction boundary."""
    return -(-io_end // INSN_BYTES) * INSN_BYTES
