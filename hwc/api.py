"""The Python API (contract): `hwc.build`, `Artifact.run/save`, `hwc.load`."""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from hwc.analysis import summary
from hwc.artifact import Artifact, RefArtifact, load
from hwc.errors import UnsupportedError
from hwc.frontend.onnx_import import import_onnx
from hwc.targets import load_target

__all__ = ["build", "load"]


def build(
    model: str | os.PathLike | onnx.ModelProto,
    target: str = "ref",
    calib=None,
    int8: bool = False,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
) -> Artifact:
    """Compile `model` (a path or ModelProto) for `target` (a bundled name or a YAML path)."""
    tgt = load_target(target)
    graph = import_onnx(model if isinstance(model, onnx.ModelProto) else Path(model), input_shapes)
    if int8 or calib is not None:
        raise UnsupportedError("int8 builds need the quantizer, which this version of hwc does not "
                               "have yet; build without --int8/--calib for the float reference.")
    if tgt["kind"] != "ref":
        raise UnsupportedError(f"Target kind {tgt['kind']!r} ({tgt['name']}) has no backend in this "
                               f"version of hwc yet; use --target ref.")
    report = {"target": tgt["name"], **summary(graph)}
    return RefArtifact(tgt, graph, report, {"int8": False})
