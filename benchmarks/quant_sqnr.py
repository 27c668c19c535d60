"""Quantization benchmark: hwc int8 vs onnxruntime's quantize_static, and the digits accuracy.

    python benchmarks/quant_sqnr.py [--models resnet8,ds_cnn,...] [--calib 200] [--test 200]
                                    [--jobs 2] [--digits] [--json out.json]

Zoo models (random weights, hwc.zoo, ending at the logits): both sides quantize the SAME
float graph -- hwc's optimized graph (BatchNorm folded, bias and activation fused),
exported to ONNX for onnxruntime -- from the SAME calibration inputs, and are measured on
the SAME held-out inputs (both drawn with zoo.random_inputs, seeds 1 and 2). The metric is
the output SQNR against the float model, 10 log10(sum y^2 / sum (y - y_int8)^2), over
all held-out outputs.

- onnxruntime: quantize_static, QDQ format, int8 activations and int8 weights, MinMax and
  Percentile (its default 99.999), per-tensor and per-channel -- 4 configurations; the
  QDQ model runs in onnxruntime (CPU provider, which fuses Q/DQ into int8 kernels).
- hwc: stage 1 of `quant-search` (5 range methods x per-channel/per-tensor, then bias
  correction and range headroom on the best) -- 14 configurations, run by the int8 reference.
"Best" on each side is the configuration with the highest held-out SQNR (both sides select
on the same held-out data, so neither gains from the selection).

--digits: the digits MLP and CNN of examples/ (trained, CNN with BatchNorm): top-1 float
vs int8 on the 397 test images, calibrated on examples/digits_calib*.npz -- with the
default quant-config, and with quant-search's best unpruned configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hwc.targets import load_target  # noqa: E402

from hwc import zoo  # noqa: E402
from hwc.export_onnx import export_onnx  # noqa: E402
from hwc.frontend import import_onnx  # noqa: E402
from hwc.quant.build import optimize_for_quant  # noqa: E402
from hwc.quant.config import QuantConfig  # noqa: E402
from hwc.quant.search import HEADROOMS, _Pool, best_of, make_problem, sqnr_db, stage1, top1  # noqa: E402

ZOO = ("resnet8", "ds_cnn", "mobilenet_v1_025", "fc_autoencoder")
SOFTMAX = ("resnet8", "ds_cnn", "mobilenet_v1_025")


# ---- onnxruntime ---------------------------------------------------------------------------
def ort_quantize(model: onnx.ModelProto, feeds: dict, method: str, per_channel: bool) -> onnx.ModelProto:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            n = len(next(iter(feeds.values())))
            self.it = iter([{k: v[i] for k, v in feeds.items()} for i in range(n)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "m.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        cm = {"MinMax": CalibrationMethod.MinMax, "Percentile": CalibrationMethod.Percentile}[method]
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, per_channel=per_channel, calibrate_method=cm)
        return onnx.load(dst)


def ort_run(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    # the QDQ file as written: the fused int8 kernels of the graph optimizations sum products in saturating int16
    # on x86 CPUs without VNNI, which would make the result depend on the machine (tests/quant/test_qdq.py)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    n = len(next(iter(feeds.values())))
    res = [s.run(None, {k: v[i] for k, v in feeds.items()}) for i in range(n)]
    return {name: np.stack([r[j] for r in res]) for j, name in enumerate(names)}


# ---- one zoo model ---------------------------------------------------------------------------
def zoo_model(name: str, n_calib: int, n_test: int, jobs: int) -> dict:
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime's "consider pre-processing" warning
    m = zoo.MODELS[name](**({"softmax": False} if name in SOFTMAX else {}))
    tgt = load_target("ref")
    fg = optimize_for_quant(import_onnx(m), tgt)
    calib = zoo.random_inputs(m, n_calib, seed=1)
    test = zoo.random_inputs(m, n_test, seed=2)
    p = make_problem(fg, calib, test)
    ref = p.reference[fg.outputs[0]]
    row = {"model": name, "calib": n_calib, "test": n_test, "ort": {}, "hwc": {}}

    float_onnx = export_onnx(fg)
    for method in ("MinMax", "Percentile"):
        for pc in (False, True):
            t0 = time.perf_counter()
            qm = ort_quantize(float_onnx, calib, method, pc)
            y = ort_run(qm, test)[fg.outputs[0]]
            label = f"{method}/{'pc' if pc else 'pt'}"
            row["ort"][label] = round(sqnr_db(ref, y), 2)
            print(f"  {name} onnxruntime {label}: {row['ort'][label]:.2f} dB ({time.perf_counter() - t0:.1f} s)",
                  flush=True)

    pool = _Pool(p, jobs)
    try:
        rs = pool.map(stage1(QuantConfig()))
        rs += pool.map([best_of(rs, by_sqnr=True).cfg.with_(bias_correction=True)])
        rs += pool.map([best_of(rs, by_sqnr=True).cfg.with_(headroom=h) for h in HEADROOMS])
    finally:
        pool.close()
    for r in rs:
        row["hwc"][r.cfg.label()] = round(r.sqnr_db, 2) if not r.error else r.error
        print(f"  {name} hwc {r.cfg.label()}: {r.sqnr_db:.2f} dB ({r.seconds:.1f} s) {r.error}", flush=True)
    hb = max((r for r in rs if not r.error), key=lambda r: r.sqnr_db)
    ob = max(row["ort"], key=row["ort"].get)
    row["hwc_best"] = [hb.cfg.label(), round(hb.sqnr_db, 2)]
    row["ort_best"] = [ob, row["ort"][ob]]
    row["margin_db"] = round(hb.sqnr_db - row["ort"][ob], 2)
    return row


# ---- digits ----------------------------------------------------------------------------------
def digits(jobs: int) -> list[dict]:
    """Float vs int8 top-1 on the digits test set: the default config (no selection), and the
    best unpruned configuration of quant-search stage 1 (selected on the same test set)."""
    import hwc
    from hwc.quant.search import search

    ex = ROOT / "examples"
    rows = []
    for name, calib, test in (("mlp", "digits_calib_mlp.npz", "digits_test_mlp.npz"),
                              ("cnn", "digits_calib.npz", "digits_test.npz")):
        model = ex / f"digits_{name}.onnx"
        data = dict(np.load(ex / test))
        x, labels = data["input"], data["labels"]
        yf = hwc.build(model, target="ref").run({"input": x})["logits"]
        yq = hwc.build(model, target="ref", calib=ex / calib).run({"input": x})["logits"]
        acc_f, acc_q = float(np.mean(top1(yf) == labels)), float(np.mean(top1(yq) == labels))
        g = optimize_for_quant(import_onnx(model), load_target("ref"))
        p = make_problem(g, dict(np.load(ex / calib)), data)
        _, rs = search(p, jobs=jobs, stages=(1,))
        best = best_of(rs)
        rows.append({"model": f"digits_{name}", "n": len(labels), "float": acc_f,
                     "default": [QuantConfig().label(), acc_q, round(sqnr_db(yf, yq), 2)],
                     "searched": [best.cfg.label(), best.metric, round(best.sqnr_db, 2)]})
        print(f"  digits {name}: float {100 * acc_f:.2f}%  int8 default {QuantConfig().label()} {100 * acc_q:.2f}%  "
              f"searched {best.cfg.label()} {100 * best.metric:.2f}%", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--calib", type=int, default=200)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--digits", action="store_true", help="also the digits accuracy (examples/)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    out = {"zoo": [], "digits": []}
    if args.digits:
        out["digits"] = digits(args.jobs)
    for name in [m for m in args.models.split(",") if m]:
        t0 = time.perf_counter()
        out["zoo"].append(zoo_model(name, args.calib, args.test, args.jobs))
        r = out["zoo"][-1]
        print(f"{name}: hwc best {r['hwc_best'][0]} {r['hwc_best'][1]:.2f} dB vs onnxruntime best "
              f"{r['ort_best'][0]} {r['ort_best'][1]:.2f} dB: {r['margin_db']:+.2f} dB "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
