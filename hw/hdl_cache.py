"""The cache of converted tile.v texts ($HWC_CACHE/hdl), without Amaranth: a build whose tile.v is cached reads
it without importing the HDL (about 0.3 s). hwc.hw.generate converts and fills it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

from hwc import isa


def cache_root() -> Path:
    """Where hwc keeps what it can make again: $HWC_CACHE, default ~/.cache/hwc (hdl/ here, rtl/ for the
    compiled simulators of hwc.sim.rtl)."""
    return Path(os.environ.get("HWC_CACHE", Path.home() / ".cache" / "hwc"))


def _cache_key(target: dict) -> str:
    """What tile.v is a function of: the validated target, the generator's sources and Amaranth's version."""
    h = hashlib.sha256(json.dumps(target, sort_keys=True, default=str).encode()
                       + importlib.metadata.version("amaranth").encode())
    for path in sorted(Path(__file__).parent.glob("*.py")) + [Path(isa.__file__)]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:32]


def _cache_path(target: dict) -> Path:
    return cache_root() / "hdl" / f"{_cache_key(target)}.v"


def convert_in_background(target: dict) -> subprocess.Popen | None:
    """Start converting the tile of a validated target into the cache in another process, unless tile.v is
    cached already (None then). `hwc build` does so first and quantizes and schedules meanwhile, on another
    core; its `verilog_text` then waits for the process (`finish_background`) and reads the cache, or
    converts itself if the process failed to write it."""
    if _cache_path(target).is_file():
        return None
    code = ("import pickle, signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(1)); "  # (cleans up)
            "from hwc.hw.generate import verilog_text; verilog_text(pickle.load(sys.stdin.buffer))")
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        proc.stdin.write(pickle.dumps(target))
        proc.stdin.close()
    except OSError:
        return None
    return proc


def finish_background(proc: subprocess.Popen | None, kill: bool = False) -> None:
    """Wait for (or with `kill`, stop) a `convert_in_background` process."""
    if proc is None:
        return
    if kill:
        proc.terminate()   # (its temporary files go: write_atomic's cleanup runs on SIGTERM)
    proc.wait()


def cached_text(target: dict) -> str | None:
    """The cached tile.v of a validated target, or None."""
    try:
        return _cache_path(target).read_text()
    except OSError:
        return None
