"""Build artifacts: what `hwc.build` returns, `art.save(dir)` writes and `hwc.load(dir)` reads.

Every artifact knows its inputs and outputs (name, shape, dtype) and validates what it is
given to run. Inputs may carry one extra leading axis of N samples beyond the declared
shape; outputs then carry the same axis (the CLI contract). Saving writes to a temporary
folder next to the destination and renames it into place, so an interrupted save never
leaves a half-written artifact.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

import hwc
from hwc.errors import InputError, UserError
from hwc.ir.graph import Graph
from hwc.ir.serialize import load_graph, save_graph

#: Artifact classes by the target kind they serve; each backend registers its own.
KINDS: dict[str, type[Artifact]] = {}
#: Modules that register a kind, imported by `load` when that kind is not registered yet.
BACKEND_MODULES: dict[str, str] = {"cpu": "hwc.backends.cpu", "tile": "hwc.tile.build"}


def register(kind: str):
    def deco(cls):
        cls.kind = kind
        KINDS[kind] = cls
        return cls
    return deco


def io_spec(g: Graph, names: list[str]) -> list[dict[str, Any]]:
    """Name, shape and dtype of each graph input or output; for an int8 graph, also the int8 encoding
    ("quantization": scale, zero_point) where a Quantize turns an input into codes or a Dequantize
    makes an output."""
    from hwc.quant.build import io_quantization

    enc = io_quantization(g) if "quant" in g.metadata else {}
    return [{"name": n, "shape": list(g.type(n).shape), "dtype": g.type(n).dtype,
             **({"quantization": enc[n]} if n in enc else {})} for n in names]


def _fmt_shape(shape) -> str:
    return "x".join(str(d) for d in shape) or "scalar"


def check_feeds(feeds: dict[str, Any], inputs: list[dict]) -> tuple[dict[str, np.ndarray], int | None]:
    """Validate run-time inputs; returns them as arrays and the samples count (None: no axis)."""
    if not isinstance(feeds, dict):
        raise InputError(f"Inputs must be a dict of input name -> array; got {type(feeds).__name__}.")
    expected = [i["name"] for i in inputs]
    unknown = sorted(set(feeds) - set(expected))
    if unknown:
        raise InputError(f"Unknown input name(s) {unknown}. The model's inputs are {expected}; "
                         f"key the data by these names (an .npz with these keys).")
    missing = [n for n in expected if n not in feeds]
    if missing:
        raise InputError(f"Missing input(s) {missing}. The model needs {expected}; "
                         f"provide an array for each (an .npz with these keys).")
    out, samples = {}, set()
    for spec in inputs:
        name, shape, dtype = spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"])
        x = np.asarray(feeds[name])
        if x.dtype != dtype:
            raise InputError(
                f"Input {name!r} has dtype {x.dtype}, but the model takes {dtype}. Convert it first "
                f"(e.g. x.astype(np.{dtype.name})); hwc does not cast silently.")
        if x.shape == shape:
            samples.add(None)
        elif x.shape[1:] == shape:
            samples.add(x.shape[0])
        else:
            raise InputError(
                f"Input {name!r} has shape {_fmt_shape(x.shape)}, but the model takes "
                f"{_fmt_shape(shape)} (optionally with one extra leading axis of N samples: "
                f"Nx{_fmt_shape(shape)}).")
        out[name] = x
    if len(samples) > 1:
        raise InputError(f"Inputs disagree on the samples axis (found {sorted(map(str, samples))}): "
                         f"give all inputs the same extra leading axis, or none.")
    return out, samples.pop() if samples else None


class Artifact:
    """A compiled model for one target."""

    kind = "base"
    engines: tuple[str, ...] = ("auto",)

    def __init__(self, target: dict, graph: Graph, report: dict | None = None, info: dict | None = None):
        self.target = target
        self.graph = graph
        self.report = report or {}
        self.info = info or {}
        self.inputs = io_spec(graph, graph.inputs)
        self.outputs = io_spec(graph, graph.outputs)
        from hwc.quant.build import quantized_inputs

        self.quantized = quantized_inputs(graph)   # inputs an int8 graph turns into codes: checked for NaN in `run`

    # ---- running ------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray], engine: str = "auto") -> dict[str, np.ndarray]:
        """Run on one input set, or on N samples stacked along an extra leading axis."""
        if engine not in self.engines:
            raise UserError(f"Engine {engine!r} is not available for target {self.target['name']!r}; "
                            f"choose one of {', '.join(self.engines)}.")
        feeds, n = check_feeds(feeds, self.inputs)
        from hwc.quant.build import check_quantized_inputs

        check_quantized_inputs(feeds, self.quantized)
        if n is None:
            return self._run_one(feeds, engine)
        results = [self._run_one({k: v[i] for k, v in feeds.items()}, engine) for i in range(n)]
        return {o["name"]: np.stack([r[o["name"]] for r in results]) if n else
                np.zeros((0, *o["shape"]), o["dtype"]) for o in self.outputs}

    def _run_one(self, feeds: dict[str, np.ndarray], engine: str) -> dict[str, np.ndarray]:
        raise NotImplementedError

    # ---- saving and loading -------------------------------------------------------
    def model_json(self) -> dict:
        return {
            "hwc_version": hwc.__version__,
            "kind": self.kind,
            "target": self.target,
            "inputs": self.inputs,
            "outputs": self.outputs,
            **self.info,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the artifact folder atomically; returns its path."""
        dest = Path(path).absolute()   # (`-o .`: the folder by its name, which can be renamed)
        if dest.exists() and not dest.is_dir():
            raise UserError(f"Output path {str(path)!r} exists and is not a folder; choose another -o.")
        if dest.is_dir() and any(dest.iterdir()) and not (dest / "model.json").is_file():
            raise UserError(f"Output folder {str(path)!r} exists, is not empty and is not an hwc build folder (no "
                            f"model.json): hwc replaces a build folder whole, and will not delete other files. "
                            f"Choose a new or empty folder for -o.")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        except OSError as e:
            raise UserError(f"Cannot create the output folder {str(path)!r}: {e.strerror} ({e.filename}). Choose a "
                            f"writable -o.") from None
        _usual_mode(tmp, 0o777)   # (mkdtemp makes it 0700)
        try:
            self._write(tmp)
            _write_json(tmp / "model.json", self.model_json())
            _write_json(tmp / "report.json", self.report)
            _write_report_html(tmp)
            if dest.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
                os.rename(dest, old / "x")
                os.rename(tmp, dest)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def _write(self, folder: Path) -> None:
        save_graph(self.graph, folder)

    @classmethod
    def _read(cls, folder: Path, model: dict) -> Artifact:
        report = json.loads((folder / "report.json").read_text())
        info = {k: v for k, v in model.items()
                if k not in ("hwc_version", "kind", "target", "inputs", "outputs")}
        return cls(model["target"], load_graph(folder), report, info)


def write_output(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Write a user's output file (`-o`) whole or not at all: `write(f)` fills a temporary file beside it, which
    then replaces it. A path that cannot be written is the user's error (CLI exit 2), named."""
    dest = Path(path).absolute()
    if dest.is_dir():
        raise UserError(f"Output path {str(path)!r} is a folder; give a file name for -o.")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
    except OSError as e:
        raise UserError(f"Cannot write {str(path)!r}: {e.strerror} ({e.filename}). Choose a writable -o.") from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        _usual_mode(tmp, 0o666)   # (mkstemp makes it 0600)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _usual_mode(path, mode: int) -> None:
    """Give a file or folder made by tempfile the permissions `mode` under the process's umask, as open() would."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, mode & ~mask)


def _write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def _write_report_html(folder: Path) -> None:
    """report.html, rendered from the report.json just written (hwc/report/html.py): one source."""
    from hwc.report.html import write

    write(folder, json.loads((folder / "report.json").read_text()))


def load(path: str | os.PathLike) -> Artifact:
    """Read an artifact folder written by `Artifact.save` (or `hwc build -o`)."""
    folder = Path(path)
    mj = folder / "model.json"
    if not folder.is_dir() or not mj.is_file():
        if folder.is_file():   # (e.g. the model itself)
            raise UserError(f"{str(folder)!r} is a file, not an hwc build folder. Build one with `hwc build "
                            f"{'MODEL.onnx' if folder.suffix != '.onnx' else folder} --target T -o OUT` and pass OUT.")
        raise UserError(f"{str(folder)!r} is not an hwc build folder (no model.json). Build one with "
                        f"`hwc build MODEL.onnx --target T -o {folder}`.")
    try:
        model = json.loads(mj.read_text())
        kind = model["kind"]
    except (ValueError, KeyError) as e:
        raise UserError(f"{str(mj)!r} is damaged ({e}); rebuild the folder with `hwc build`.") from None
    if kind not in KINDS and kind in BACKEND_MODULES:
        import importlib

        importlib.import_module(BACKEND_MODULES[kind])  # registers the kind's Artifact class
    if kind not in KINDS:
        raise UserError(f"{str(folder)!r} holds a {kind!r} artifact, which this hwc does not know.")
    try:
        return KINDS[kind]._read(folder, model)
    except (OSError, ValueError, KeyError) as e:   # a file missing, truncated or edited
        what = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else f"{type(e).__name__}: {e}"
        raise UserError(f"{str(folder)!r} is an incomplete or damaged hwc build folder ({what}); rebuild it with "
                        f"`hwc build`.") from None


@register("ref")
class RefArtifact(Artifact):
    """The reference target: runs the graph in the numpy reference interpreter."""

    engines = ("auto", "reference")

    def _run_one(self, feeds, engine):
        from hwc.ref.interp import run_graph

        return run_graph(self.graph, feeds)
