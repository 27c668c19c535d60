"""cocotb testbench of the whole generated tile (tile.v): memory model, driver, monitor, checker.

Run by `hwc.sim.rtl` (cocotb_tools.runner, Icarus). The scenarios to run come from the
directory named by $HWC_TB_DIR (written by hwc.sim.rtl.write_scenarios):
  scenarios.json   [{name, prog_addr, beat_bytes, read_latency, ready, max_cycles,
                     expect_cycles?, expect_regions?: [[byte, length, file]]}]
  <name>.dram.bin  the external memory image (program included)
Each scenario's outcome goes to <name>.result.json and <name>.after.bin (the image after
the run). The checker compares regions and cycle counts with the expectations it is given
and records every mismatch; the cocotb test fails if any scenario mismatched.

Timing convention (docs/tile.md section 5), one cycle = rising edge to rising edge: the
testbench samples the tile's outputs and drives its inputs at the falling edge, so what it
drives in cycle t is what the tile sees at the end of cycle t. A request accepted in cycle
t (valid and ready) gets its first beat in cycle t + Lm, then one beat per cycle, in order.
"""

from __future__ import annotations

import json
import os
import random
from collections import deque
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

INSN_BYTES = 16


class ExternalMemory:
    """The imem and dmem ports' memory: one image, `beat_bytes`-byte data beats, latency `lm`."""

    def __init__(self, dut, image: bytearray, beat_bytes: int, lm: int, ready: str = "always", seed: int = 0):
        self.dut, self.image, self.b, self.lm = dut, image, beat_bytes, lm
        self.ready_mode = ready
        self.rng = random.Random(seed)
        self.iq: deque = deque()   # (due cycle, data) instruction beats
        self.dq: deque = deque()   # (due cycle, data) data beats
        self.last_due = -1
        self.beats_read = self.beats_written = 0

    def _read(self, byte: int, n: int) -> int:
        chunk = bytes(self.image[byte:byte + n])
        return int.from_bytes(chunk + b"\0" * (n - len(chunk)), "little")

    def _ready(self) -> int:
        return 1 if self.ready_mode == "always" else int(self.rng.random() < 0.7)

    def step(self, cycle: int) -> None:
        """Everything the memory does in one cycle (called at its falling edge)."""
        d = self.dut
        ri, rr, rw = self._ready(), self._ready(), self._ready()
        d.imem_ready.value = ri
        d.dmem_rd_ready.value = rr
        d.dmem_wr_ready.value = rw
        if ri and d.imem_valid.value:
            a = int(d.imem_addr.value)
            self.iq.append((cycle + self.lm, self._read(a * INSN_BYTES, INSN_BYTES)))
        if rr and d.dmem_rd_valid.value:
            a, n = int(d.dmem_rd_addr.value), int(d.dmem_rd_len.value)
            for i in range(n):
                due = max(cycle + self.lm + i, self.last_due + 1)
                self.dq.append((due, self._read((a + i) * self.b, self.b)))
                self.last_due = due
        if rw and d.dmem_wr_valid.value:
            a = int(d.dmem_wr_addr.value)
            if (a + 1) * self.b > len(self.image):
                raise AssertionError(f"write to beat {a} outside the {len(self.image)}-byte image")
            self.image[a * self.b:(a + 1) * self.b] = int(d.dmem_wr_data.value).to_bytes(self.b, "little")
            self.beats_written += 1
        if self.iq and self.iq[0][0] == cycle:
            d.imem_data.value = self.iq.popleft()[1]
            d.imem_data_valid.value = 1
        else:
            d.imem_data_valid.value = 0
        if self.dq and self.dq[0][0] == cycle:
            d.dmem_rdata.value = self.dq.popleft()[1]
            d.dmem_rdata_valid.value = 1
            self.beats_read += 1
        else:
            d.dmem_rdata_valid.value = 0
        assert not (self.iq and self.iq[0][0] < cycle) and not (self.dq and self.dq[0][0] < cycle)


class Monitor:
    """Records the cycle of every issue (with its pc) and of done / error."""

    def __init__(self, dut):
        self.dut = dut
        self.issues: list[tuple[int, int]] = []
        self.units = len(dut.dbg_unit_busy)  # LOAD, COMPUTE, STORE (and POST on tile v2 targets)
        self.unit_busy = [0] * self.units
        self.done_cycle = self.error_cycle = None

    def sample(self, cycle: int) -> None:
        d = self.dut
        if d.dbg_issue.value:
            self.issues.append((int(d.dbg_pc.value), cycle))
        ub = int(d.dbg_unit_busy.value)
        for k in range(self.units):
            self.unit_busy[k] += (ub >> k) & 1
        if self.done_cycle is None and d.done.value:
            self.done_cycle = cycle
        if self.error_cycle is None and d.error.value:
            self.error_cycle = cycle


async def reset(dut) -> None:
    for name in ("start", "prog_addr", "imem_ready", "imem_data", "imem_data_valid", "dmem_rd_ready", "dmem_rdata",
                 "dmem_rdata_valid", "dmem_wr_ready"):
        getattr(dut, name).value = 0
    dut.rst.value = 1
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


async def run_scenario(dut, sc: dict, image: bytearray) -> dict:
    """Driver: reset, start the program, clock memory and monitor until the tile is idle."""
    await reset(dut)
    mem = ExternalMemory(dut, image, sc["beat_bytes"], sc["read_latency"], sc.get("ready", "always"),
                         sc.get("seed", 0))
    mon = Monitor(dut)
    dut.prog_addr.value = sc["prog_addr"]
    dut.start.value = 1
    await FallingEdge(dut.clk)
    dut.start.value = 0
    t0 = cycle = 0            # program cycle 0 is the cycle after the start pulse
    timeout = False
    while True:
        mem.step(cycle)
        mon.sample(cycle)
        if (mon.done_cycle is not None or mon.error_cycle is not None) and not dut.busy.value:
            break
        if cycle > sc.get("max_cycles", 1_000_000):
            timeout = True
            break
        await FallingEdge(dut.clk)
        cycle += 1
    return {"name": sc["name"], "timeout": timeout,
            "done": mon.done_cycle is not None, "error": mon.error_cycle is not None,
            "cycles": (mon.done_cycle if mon.done_cycle is not None else mon.error_cycle or 0) - t0,
            "cycle_counter": int(dut.cycles.value), "error_code": int(dut.error_code.value),
            "error_pc": int(dut.error_pc.value), "issues": mon.issues, "unit_busy": mon.unit_busy,
            "beats_read": mem.beats_read, "beats_written": mem.beats_written, "end_cycle": cycle}


def check(sc: dict, res: dict, image: bytearray, where: Path) -> list[str]:
    """Checker: regions and cycle count against the expectations in the scenario."""
    errs = []
    if res["timeout"]:
        errs.append(f"timeout after {res['end_cycle']} cycles")
    if res["cycles"] != res["cycle_counter"]:
        errs.append(f"monitor saw {res['cycles']} cycles but the tile's counter says {res['cycle_counter']}")
    if "expect_cycles" in sc and sc["expect_cycles"] != res["cycles"]:
        errs.append(f"cycles {res['cycles']} != expected {sc['expect_cycles']}")
    for byte, length, fname in sc.get("expect_regions", []):
        want = (where / fname).read_bytes()
        got = bytes(image[byte:byte + length])
        if got != want:
            bad = next(i for i in range(length) if got[i] != want[i])
            errs.append(f"region at byte {byte}: first difference at +{bad}: {got[bad]} != {want[bad]}")
    return errs


@cocotb.test()
async def scenarios(dut):
    where = Path(os.environ["HWC_TB_DIR"])
    Clock(dut.clk, 10, unit="ns").start()
    failures = {}
    for sc in json.loads((where / "scenarios.json").read_text()):
        image = bytearray((where / f"{sc['name']}.dram.bin").read_bytes())
        res = await run_scenario(dut, sc, image)
        res["mismatches"] = check(sc, res, image, where)
        (where / f"{sc['name']}.after.bin").write_bytes(image)
        (where / f"{sc['name']}.result.json").write_text(json.dumps(res))
        if res["mismatches"]:
            failures[sc["name"]] = res["mismatches"]
    assert not failures, f"scenarios with mismatches: {failures}"
