"""What an int8 build does with an imported model: optimize, quantize, report.

    q = quantize_model(graph, target, calib="calib.npz", quant_config="q.json")

- A QDQ model (QuantizeLinear/DequantizeLinear inside) is imported with its own scales
  (`qdq.import_qdq`); calibration data are not needed and are ignored.
- Otherwise the float graph goes through the target's optimizer pipeline (BatchNorm
  folding, bias/activation fusion, ...) without `fuse_elementwise` (a fused elementwise
  chain would hide a residual Add from the quantizer), then is calibrated on `calib`
  and quantized with the quant-config (defaults: `QuantConfig()`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from hwc.errors import InputError, UserError
from hwc.ir.graph import Graph
from hwc.quant.config import QuantConfig, as_config


def quant_pipeline(target: dict[str, Any]):
    """The optimizer pipeline run before quantization."""
    from hwc.passes.manager import without
    from hwc.passes.pipeline import default_pipeline

    return without(default_pipeline(target), "fuse_elementwise")


def optimize_for_quant(g: Graph, target: dict[str, Any]) -> Graph:
    from hwc.passes import optimize

    return optimize(g, target, pipeline=quant_pipeline(target))[0]


def load_data(data: str | os.PathLike | dict | None, g: Graph, what: str, keep: tuple[str, ...] = ()
              ) -> dict[str, np.ndarray]:
    """Samples in the CLI layout from an .npz/.npy path or a dict: {input: [N, *shape]} (+ `keep` keys)."""
    from hwc.data import load_named_arrays

    return load_named_arrays(data, list(g.inputs), what[:1].upper() + what[1:], keep)


def quantize_model(g: Graph, target: dict[str, Any], calib=None, quant_config=None, *,
                   progress: bool = False) -> Graph:
    """The int8 graph of an imported model (see the module docstring)."""
    from hwc.quant.qdq import import_qdq, is_qdq
    from hwc.quant.quantize import quantize

    cfg = as_config(quant_config)
    if is_qdq(g):
        return import_qdq(g, cfg)
    if calib is None:
        raise UserError("An int8 build needs calibration data: pass --calib DATA.npz (API: calib=), an .npz "
                        "keyed by the model's input names with the samples on a leading axis (a few hundred "
                        "representative inputs), or build a model that is already quantized (QDQ).")
    data = load_data(calib, g, "calibration data")
    fg = optimize_for_quant(g, target)
    q = quantize(fg, data, cfg, progress=progress)
    q.metadata["quant"]["notes"] = calibration_warnings(data) + q.metadata["quant"]["notes"]
    return q


def calibration_warnings(data: dict[str, np.ndarray]) -> list[str]:
    """Notes ("warning: ...") on calibration data the int8 ranges cannot be chosen well from: one sample, or an
    input whose samples are all the same (e.g. zeros). The build goes on (a user may mean it); the CLI prints them."""
    out = []
    for name, x in sorted(data.items()):
        if not np.issubdtype(x.dtype, np.floating):
            continue
        if len(x) < 2:
            out.append(f"warning: the calibration data hold one sample of input {name!r}: the int8 ranges fit that "
                       f"sample only; calibrate with a few hundred representative inputs")
        elif float(x.max()) == float(x.min()) or all(np.array_equal(x[0], x[i]) for i in range(1, len(x))):
            out.append(f"warning: all {len(x)} calibration samples of input {name!r} are the same"
                       f"{' (every value ' + repr(float(x.min())) + ')' if float(x.max()) == float(x.min()) else ''}"
                       f": the int8 ranges fit that one input only; calibrate with representative inputs")
    return out


def quantized_inputs(q: Graph) -> list[str]:
    """The graph inputs of an int8 graph that a Quantize (or QDQ QuantizeLinear) node turns
    into int8 codes at run time."""
    return sorted({n.inputs[0] for n in q.nodes if n.op in ("Quantize", "QuantizeLinear") and n.inputs[0] in q.inputs})


def io_quantization(q: Graph) -> dict[str, dict]:
    """The int8 encoding at each graph input and output of an int8 graph (model.json's "quantization"):
    {name: {"scale", "zero_point", "dtype": "int8"}} for an input that a Quantize (or QuantizeLinear)
    node turns into codes and an output that a Dequantize (or DequantizeLinear) node produces. Other
    inputs and outputs (float graphs, float parts) are absent. A per-channel encoding gives lists."""
    def enc(node) -> dict | None:
        if node.op in ("Quantize", "Dequantize"):
            scale, zp = node.attrs["scale"], node.attrs.get("zero_point", 0)
        else:
            scale = q.const(node.inputs[1]) if len(node.inputs) > 1 else None
            zp = q.const(node.inputs[2]) if len(node.inputs) > 2 else np.zeros((), np.int8)
            if scale is None or zp is None:
                return None
            scale, zp = np.asarray(scale).tolist(), np.asarray(zp).tolist()
        return {"scale": scale, "zero_point": zp, "dtype": "int8"}

    out = {}
    for n in q.nodes:
        if n.op in ("Quantize", "QuantizeLinear") and n.inputs[0] in q.inputs and n.inputs[0] not in out:
            e = enc(n)
            if e:
                out[n.inputs[0]] = e
        if n.op in ("Dequantize", "DequantizeLinear") and n.outputs[0] in q.outputs:
            e = enc(n)
            if e:
                out[n.outputs[0]] = e
    return out


def check_quantized_inputs(feeds: dict[str, np.ndarray], names: list[str]) -> None:
    """Reject NaN in the inputs `names` (see `quantized_inputs`) of one run.

    int8 has no code for NaN: quantizing it would give a silent, meaningless -128 (arith.quantize),
    so the run stops with the input's name instead. Infinities are fine: they saturate.
    """
    for name in names:
        x = feeds[name]
        if np.issubdtype(x.dtype, np.floating) and np.isnan(x).any():
            raise InputError(f"Input {name!r} holds NaN values ({int(np.isnan(x).sum())} of {x.size}). This "
                             f"int8 model turns the input into int8 codes, and NaN has none, so the result would "
                             f"be meaningless. Replace or drop the NaN values before the run (e.g. numpy.nan_to_num, "
                             f"or fix the preprocessing that produced them), or use a float build (without --int8), "
                             f"which passes NaN through.")


def quant_report(q: Graph) -> dict:
    """The `quant` section of report.json: per-tensor encodings, node decisions, config."""
    meta = q.metadata["quant"]
    nodes = meta["nodes"]
    count = {m: sum(d["mode"] == m for d in nodes) for m in ("int8", "folded", "float")}
    return {
        "mode": meta["mode"],
        "config": meta["config"],
        "calibration_samples": meta.get("calibration_samples"),
        "nodes": count,
        "float_nodes": [{"node": d["node"], "op": d["op"], "reason": d["reason"]}
                        for d in nodes if d["mode"] == "float"],
        "tensors": meta["tensors"],
        "notes": meta.get("notes", []),
    }


def report_lines(rep: dict) -> list[str]:
    """The quantization part of the text report."""
    c = rep["config"]
    cfg = QuantConfig.from_json(c)
    head = f"int8 ({rep['mode']}"
    head += f", {rep['calibration_samples']} calibration samples, {cfg.label()})" if rep["mode"] != "qdq" else ")"
    n = rep["nodes"]
    lines = [f"{head}: {n['int8']} nodes int8, {n['folded']} folded into a clamp, {n['float']} float"]
    for d in rep["float_nodes"]:
        lines.append(f"  float: {d['node']} ({d['op']}): {d['reason']}")
    lines.append(f"  {'tensor':<28} {'scale':>11} {'zp':>5} {'range':>25} {'method':>10} {'clipped':>8}")
    for name, t in rep["tensors"].items():
        lo, hi = t["range"]
        lines.append(f"  {name[:28]:<28} {t['scale']:>11.5g} {t['zero_point']:>5d} "
                     f"{f'[{lo:.4g}, {hi:.4g}]':>25} {t['method']:>10} {100 * t['clipped']:>7.3f}%")
    lines += [f"  note: {x}" for x in rep["notes"]]
    return lines
