"""Run a compiled model in this process: model.o linked into a shared object (gcc), called
through ctypes with buffers the runner owns, like any C caller would.

Every region (weights, I/O, activations) sits between canary bytes; after each run the
runner checks that none changed (and, with `check_weights`, that the weights did not
either): a kernel writing outside its buffers is caught at the run that does it.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from hwc.errors import HwcError, UserError

CANARY = 256  # guard bytes on each side of every region
_PATTERN = np.frombuffer(bytes(range(7, 256, 11)) * 64, np.uint8)


def link_shared(obj: bytes | Path, out: Path) -> Path:
    """gcc -shared model.o -> out (a .so loadable by ctypes)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise UserError("Running a CPU build needs a C compiler to link model.o (gcc); install it "
                        "(apt-get install -y gcc) or run with --engine reference.")
    with tempfile.TemporaryDirectory(prefix="hwc-link-") as tmp:
        src = Path(obj) if isinstance(obj, Path) else Path(tmp) / "model.o"
        if not isinstance(obj, Path):
            src.write_bytes(obj)
        r = subprocess.run([cc, "-shared", "-o", str(out), str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            raise HwcError(f"linking model.o failed: {r.stderr.strip()}")
    return out


class Region:
    """An aligned byte buffer with canaries on both sides."""

    def __init__(self, size: int, align: int):
        self.size = size
        self.raw = np.empty(size + 2 * CANARY + align, np.uint8)
        base = self.raw.ctypes.data
        start = (-(base + CANARY)) % align + CANARY
        self.start = start
        self.view = self.raw[start:start + size]
        self._guard_lo = slice(start - CANARY, start)
        self._guard_hi = slice(start + size, start + size + CANARY)
        self.raw[self._guard_lo] = _PATTERN[:CANARY]
        self.raw[self._guard_hi] = _PATTERN[:CANARY]

    @property
    def address(self) -> int:
        return self.raw.ctypes.data + self.start

    def canaries_ok(self) -> bool:
        return (np.array_equal(self.raw[self._guard_lo], _PATTERN[:CANARY])
                and np.array_equal(self.raw[self._guard_hi], _PATTERN[:CANARY]))


class NativeModel:
    """A loaded model: call `run(feeds)`; `fn` and the regions are there for benchmarks."""

    def __init__(self, obj: bytes | Path, entry: str, weights: bytes, io: list[dict], sizes: dict, align: int):
        self._dir = tempfile.mkdtemp(prefix="hwc-so-")
        try:
            so = link_shared(obj, Path(self._dir) / "model.so")
            self.lib = ctypes.CDLL(str(so))
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        self.fn = getattr(self.lib, entry)
        self.fn.argtypes = [ctypes.c_void_p] * 3
        self.fn.restype = ctypes.c_int
        self.io = io
        self.weights = Region(len(weights), align)
        self.weights.view[:] = np.frombuffer(weights, np.uint8)
        self._weights_copy = bytes(weights)
        self.iobuf = Region(sizes["io"], align)
        self.act = Region(sizes["activations"], align)
        self.args = (self.weights.address, self.iobuf.address, self.act.address)

    def call(self) -> None:
        rc = self.fn(*self.args)
        if rc != 0:
            raise HwcError(f"the compiled model returned {rc} (misaligned buffers)")

    def check(self, weights: bool = False) -> None:
        bad = [name for name, r in (("weights", self.weights), ("io", self.iobuf), ("activations", self.act))
               if not r.canaries_ok()]
        if weights and self.weights.view.tobytes() != self._weights_copy:
            bad.append("weights (contents)")
        if bad:
            raise HwcError(f"the compiled model wrote outside its buffers: canaries of {', '.join(bad)} changed")

    def run(self, feeds: dict[str, np.ndarray], check_weights: bool = False) -> dict[str, np.ndarray]:
        for spec in self.io:
            if spec["kind"] == "input":
                x = np.ascontiguousarray(feeds[spec["name"]], dtype=spec["dtype"])
                self.iobuf.view[spec["offset"]:spec["offset"] + spec["bytes"]] = x.reshape(-1).view(np.uint8)
        self.call()
        self.check(check_weights)
        out = {}
        for spec in self.io:
            if spec["kind"] == "output":
                raw = self.iobuf.view[spec["offset"]:spec["offset"] + spec["bytes"]]
                out[spec["name"]] = raw.view(spec["dtype"]).reshape(spec["shape"]).copy()
        return out

