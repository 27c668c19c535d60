"""The Python API (contract): `hwc.build`, `Artifact.run/save`, `hwc.load`."""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from hwc.analysis import summary
from hwc.artifact import Artifact, RefArtifact, load
from hwc.errors import UnsupportedError, UserError
from hwc.frontend.onnx_import import import_onnx
from hwc.targets import load_target

__all__ = ["build", "load"]


def build(
    model: str | os.PathLike | onnx.ModelProto,
    target: str = "ref",
    calib=None,
    int8: bool = False,
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    quant_config=None,
    *,
    passes: dict | None = None,
    triple: str | None = None,
    cpu: str | None = None,
    hdl: bool = True,
) -> Artifact:
    """Compile `model` (a path or ModelProto) for `target` (a bundled name or a YAML path).

    int8 (implied by `calib` or `quant_config`): quantize, calibrating on `calib` (an
    .npz path or a dict {input: [N, *shape]}) with the knobs of `quant_config` (a path,
    dict or hwc.quant.config.QuantConfig, e.g. written by `hwc quant-search`). A QDQ
    model is imported with its own scales and needs no calibration data.
    `passes`: options of the graph optimizer (hwc.passes.optimize: dump_after,
    stop_after, prune). `triple`/`cpu` (kind cpu only): cross-compile for this LLVM
    target triple / CPU instead of the target file's (the host by default). `hdl` (kind
    tile only): False skips generating the tile's Verilog (tile.v), which takes seconds.
    """
    tgt = load_target(target)
    graph = import_onnx(model if isinstance(model, onnx.ModelProto) else Path(model), input_shapes)
    if (triple or cpu) and tgt["kind"] != "cpu":
        raise UserError(f"--triple/--cpu apply to targets of kind cpu, not to {tgt['name']!r} ({tgt['kind']}).")
    if tgt["kind"] not in ("ref", "cpu", "tile"):
        raise UnsupportedError(f"Target kind {tgt['kind']!r} ({tgt['name']}) has no backend in this "
                               f"version of hwc yet; use --target ref.")
    if int8 or calib is not None or quant_config is not None or tgt["kind"] == "tile":  # tiles are int8
        import sys

        from hwc.quant.build import quant_report, quantize_model
        from hwc.quant.search import cost_of

        hdl_job = None
        if tgt["kind"] == "tile" and hdl:  # tile.v converts on another core while we quantize and schedule
            from hwc.hw.hdl_cache import convert_in_background

            hdl_job = convert_in_background(tgt)
        try:
            graph = quantize_model(graph, tgt, calib, quant_config, progress=sys.stderr.isatty())
            report = {"target": tgt["name"], **summary(graph), "quant": quant_report(graph)}
            report["macs"] = cost_of(graph, tgt["kind"])[0]
            info = {"int8": True, "quant_mode": report["quant"]["mode"]}
            return _artifact(tgt, graph, report, info, triple, cpu, hdl, hdl_job)
        finally:
            if hdl_job is not None:
                from hwc.hw.hdl_cache import finish_background

                finish_background(hdl_job, kill=hdl_job.poll() is None)
    from hwc.passes import optimize

    graph, stats = optimize(graph, tgt, **(passes or {}))
    report = {"target": tgt["name"], **summary(graph), "passes": without_timings(stats.to_dict())}
    return _artifact(tgt, graph, report, {"int8": False}, triple, cpu, hdl)


def _artifact(tgt, graph, report, info, triple, cpu, hdl=True, hdl_job=None) -> Artifact:
    """The target kind's artifact for the optimized (or quantized) graph, its report completed
    with the data report.html and `hwc report` show (hwc.report.data). `hdl_job`: a tile.v conversion
    running in another process (hwc.hw.hdl_cache.convert_in_background)."""
    from hwc.report.data import complete

    art = _backend_artifact(tgt, graph, report, info, triple, cpu, hdl, hdl_job)
    complete(art)
    return art


def _backend_artifact(tgt, graph, report, info, triple, cpu, hdl, hdl_job=None) -> Artifact:
    """The target kind's backend builds the artifact."""
    if tgt["kind"] == "cpu":
        from hwc.backends.cpu import build_artifact

        return build_artifact(tgt, graph, report, info, triple=triple, cpu=cpu)
    if tgt["kind"] == "tile":
        from hwc.tile.build import build_tile

        art = build_tile(graph, tgt, hdl=hdl, hdl_job=hdl_job)
        art.report["quant"] = report["quant"]
        return art
    from hwc.lower.memplan import plan_graph

    report["memory"] = plan_graph(graph)
    return RefArtifact(tgt, graph, report, info)


def without_timings(doc):
    """A report without wall-clock fields, so that builds stay byte-identical."""
    if isinstance(doc, dict):
        return {k: without_timings(v) for k, v in doc.items() if k not in ("seconds", "time_ms")}
    if isinstance(doc, list):
        return [without_timings(v) for v in doc]
    return doc
