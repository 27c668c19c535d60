"""The two-level address loop every unit runs: `for i < n_outer: for j < n_inner`.

Pointers are generated incrementally (base + i*so + j*si without multipliers): a row
pointer advances by the outer stride, the element pointer by the inner stride. Strides
may be signed; pointers wrap modulo their width, which is harmless because the issue
stage has already checked every address the loop will produce (hw/fetch.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Module, Signal, Value


@dataclass
class Loop2D:
    """Registers and controls of one loop; `ptrs[k]` is the current address of stream k."""

    i: Signal
    j: Signal
    last_i: Signal
    last_j: Signal
    ptrs: list[Signal]

    @property
    def last(self) -> Value:
        return self.last_i & self.last_j


def loop2d(m: Module, name: str, *, load: Value, step: Value, n_outer: Value, n_inner: Value,
           streams: list[tuple[Value, Value, Value, int]], hold: dict[int, Value] | None = None) -> Loop2D:
    """Build a loop. `load` (priority) restarts it from the given counts and streams
    `(base, outer_stride, inner_stride, width)`; `step` advances it by one iteration.
    `hold[k]`: while true, an inner step leaves stream k's pointer where it is (the GEMM's
    depthwise `skip`: the first lines of a row produce no write, addresses count from the first
    written one); the outer step always moves it to the next row."""
    hold = hold or {}
    cw_o, cw_i = len(n_outer), len(n_inner)
    i = Signal(cw_o, name=f"{name}_i")
    j = Signal(cw_i, name=f"{name}_j")
    # `last_i` (i == n_outer - 1) and `last_j` (j == n_inner - 1) are registers, computed a cycle
    # ahead from i == n_outer - 2 and j == n_inner - 2 (modulo the counter width, so every count
    # behaves as the plain comparison would): the loop's end feeds wide enables (the next
    # instruction's load), so it starts from flip-flops instead of two 16-bit comparators.
    no_m2 = Signal(cw_o, name=f"{name}_no_m2", reset_less=True)
    ni_m1 = Signal(cw_i, name=f"{name}_ni_m1", reset_less=True)
    ni_m2 = Signal(cw_i, name=f"{name}_ni_m2", reset_less=True)
    last_i = Signal(name=f"{name}_last_i")
    last_j = Signal(name=f"{name}_last_j")
    ptrs = []
    with m.If(load):
        m.d.sync += [i.eq(0), j.eq(0), no_m2.eq(n_outer - 2), ni_m1.eq(n_inner - 1), ni_m2.eq(n_inner - 2),
                     last_i.eq(n_outer[:cw_o] == 1), last_j.eq(n_inner[:cw_i] == 1)]
    with m.Elif(step):
        with m.If(last_j):
            m.d.sync += [j.eq(0), i.eq(i + 1), last_j.eq(ni_m1 == 0), last_i.eq(i == no_m2)]
        with m.Else():
            m.d.sync += [j.eq(j + 1), last_j.eq(j == ni_m2)]
    for k, (base, so, si, width) in enumerate(streams):
        ptr = Signal(width, name=f"{name}_ptr{k}", reset_less=True)
        row = Signal(width, name=f"{name}_row{k}", reset_less=True)
        so_r = Signal(so.shape(), name=f"{name}_so{k}", reset_less=True)
        si_r = Signal(si.shape(), name=f"{name}_si{k}", reset_less=True)
        with m.If(load):
            m.d.sync += [ptr.eq(base), row.eq(base), so_r.eq(so), si_r.eq(si)]
        with m.Elif(step):
            with m.If(last_j):
                m.d.sync += [row.eq(row + so_r), ptr.eq(row + so_r)]
            with (m.Elif(~hold[k]) if k in hold else m.Else()):
                m.d.sync += ptr.eq(ptr + si_r)
        ptrs.append(ptr)
    return Loop2D(i, j, last_i, last_j, ptrs)
