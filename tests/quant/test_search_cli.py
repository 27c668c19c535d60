"""quant-search, `hwc build --int8 --calib [--quant-config]`, the saved artifact and the report,
on the digits MLP of examples/ (trained on sklearn's digits, 397 labelled test images)."""

import json
from pathlib import Path

import numpy as np
import pytest

import hwc
from hwc.cli import main
from hwc.errors import UserError
from hwc.quant.config import QuantConfig

EX = Path(__file__).resolve().parents[2] / "examples"
MLP, CALIB, TEST = EX / "digits_mlp.onnx", EX / "digits_calib_mlp.npz", EX / "digits_test_mlp.npz"


def test_quant_search_then_build_then_run(tmp_path, capsys):
    cfg_path = tmp_path / "q.json"
    rc = main(["quant-search", str(MLP), "--calib", str(CALIB), "--eval", str(TEST), "--max-loss", "0.005",
               "-o", str(cfg_path), "--jobs", "2"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "float32 (reference)" in text and "percentile99.99/pc" in text and "prune0.5" in text
    cfg = QuantConfig.load(cfg_path)
    picked = cfg.search["picked"]
    assert picked["loss"] <= 0.005 and cfg.search["metric"] == "accuracy"

    out = tmp_path / "art"
    assert main(["build", str(MLP), "--target", "ref", "--calib", str(CALIB), "--quant-config", str(cfg_path),
                 "-o", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["quant"]["config"]["method"] == cfg.method
    t = rep["quant"]["tensors"]["input_q"]
    assert set(t) >= {"scale", "zero_point", "range", "min", "max", "method", "clipped"}
    meta = json.loads((out / "graph.json").read_text())["metadata"]["quant"]
    assert meta["histograms"]["input"]["counts"]                   # kept for the report's plots

    assert main(["run", str(out), "--input", str(TEST), "-o", str(tmp_path / "y.npz")]) == 0
    y = np.load(tmp_path / "y.npz")["logits"]
    labels = np.load(TEST)["labels"]
    acc = float(np.mean(y.reshape(len(y), -1).argmax(1) == labels))
    assert acc == pytest.approx(picked["metric"])                  # the build reproduces the search


def test_int8_build_runs_the_int8_reference_and_round_trips(tmp_path):
    art = hwc.build(MLP, target="ref", calib=CALIB, quant_config={"method": "mse", "bias_correction": True})
    assert art.info["int8"] and {"QGemm", "Quantize", "Dequantize"} <= set(art.graph.op_counts())
    data = np.load(TEST)
    x, labels = data["input"], data["labels"]
    y = art.run({"input": x})["logits"]
    f = hwc.build(MLP, target="ref").run({"input": x})["logits"]
    acc_q = np.mean(y.reshape(len(y), -1).argmax(1) == labels)
    acc_f = np.mean(f.reshape(len(f), -1).argmax(1) == labels)
    assert acc_q >= acc_f - 0.005                                  # measured: 94.46% float, 94.46% int8
    art.save(tmp_path / "a")
    again = hwc.load(tmp_path / "a").run({"input": x})["logits"]
    np.testing.assert_array_equal(again, y)
    from hwc.quant.build import report_lines

    lines = report_lines(art.report["quant"])
    assert "int8 (calibration, 200 calibration samples" in lines[0] and any("input_q" in ln for ln in lines)


def test_int8_without_calibration_is_a_clear_error(capsys):
    with pytest.raises(UserError, match="needs calibration data"):
        hwc.build(MLP, target="ref", int8=True)
    assert main(["build", str(MLP), "--int8"]) == 2
    assert "--calib" in capsys.readouterr().err


def test_bad_quant_configs_are_user_errors(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps({"format": "hwc-quant-config-1", "method": "kl"}))
    with pytest.raises(UserError, match="'method' must be one of"):
        QuantConfig.load(p)
    p.write_text(json.dumps({"format": "something"}))
    with pytest.raises(UserError, match="not an hwc quant-config"):
        QuantConfig.load(p)
    p.write_text(json.dumps({"format": "hwc-quant-config-1", "prune": 1.5}))
    with pytest.raises(UserError, match="'prune'"):
        QuantConfig.load(p)
    cfg = QuantConfig(method="percentile", percentile=99.9, per_channel=False, prune=0.25, headroom=0.1)
    cfg.save(p)
    assert QuantConfig.load(p) == cfg
