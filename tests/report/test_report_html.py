"""report.html: written by every build, every number read from report.json, deterministic."""

from __future__ import annotations

import argparse
import json
import math
import re

import pytest
from report_helpers import build_saved, page_cells, resolve

from hwc.cli import main
from hwc.errors import UserError
from hwc.report import cli as report_cli
from hwc.report.html import render


def _check_cells(folder) -> int:
    rep = json.loads((folder / "report.json").read_text())
    cells = page_cells((folder / "report.html").read_text())
    for c in cells:
        v = resolve(rep, c["src"])
        assert c["value"] == v, c
        text = c["text"].strip().replace(",", "").replace("+", "")
        pct = text.endswith("%")
        shown = float(text.rstrip("%")) / (100 if pct else 1)
        decimals = len(text.rstrip("%").partition(".")[2].partition("e")[0])
        tol = 0.51 * 10 ** -decimals / (100 if pct else 1)
        assert math.isclose(shown, v * c["scale"], rel_tol=1e-4, abs_tol=tol), c
    return len(cells)


def test_tile_report_numbers_are_the_numbers_of_report_json(resnet8_tile):
    n = _check_cells(resnet8_tile)
    rep = json.loads((resnet8_tile / "report.json").read_text())
    srcs = {c["src"] for c in page_cells((resnet8_tile / "report.html").read_text())}
    # the headline figures and every layer's are on the page
    for key in ("macs", "cycles", "utilization", "memory/peak_bytes", "memory/lower_bound_bytes",
                "energy/total/total_pj", "energy/total/compute_pj", "energy/total/onchip_pj",
                "energy/total/offchip_pj"):
        assert key in srcs, key
    for i in range(len(rep["layers"])):
        assert {f"layers/{i}/macs", f"layers/{i}/cycles", f"layers/{i}/utilization",
                f"layers/{i}/bytes_offchip"} <= srcs
    for i, v in enumerate(rep["energy"]["variants"]):
        assert f"energy/variants/{i}/total_pj" in srcs, v["key"]
    assert n > 200


def test_cpu_and_reference_reports_are_read_from_report_json(small_cnn_cpu, tmp_path):
    assert _check_cells(small_cnn_cpu) > 20
    rep = json.loads((small_cnn_cpu / "report.json").read_text())
    assert rep["memory"]["buffers"] and max(b["offset"] + b["size"] for b in rep["memory"]["buffers"]) \
        == rep["memory"]["peak_bytes"]
    ref = build_saved("small_cnn", "ref", tmp_path / "ref")
    assert _check_cells(ref) > 10


def test_the_page_is_a_function_of_report_json_alone(resnet8_tile, small_cnn_cpu):
    for folder in (resnet8_tile, small_cnn_cpu):
        rep = json.loads((folder / "report.json").read_text())
        assert render(rep) == (folder / "report.html").read_text()


def test_the_page_is_self_contained(resnet8_tile):
    text = (resnet8_tile / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", text)
    assert "<script" not in text and "@import" not in text
    assert text.count("<svg") == 6


def test_every_build_writes_report_html(tmp_path, small_cnn_cpu, resnet8_tile):
    onnx_path = tmp_path / "cnn.onnx"
    import onnx

    from hwc import zoo

    onnx.save(zoo.small_cnn(0), onnx_path)
    assert main(["build", str(onnx_path), "--target", "ref", "-o", str(tmp_path / "ref")]) == 0
    for folder in (tmp_path / "ref", small_cnn_cpu, resnet8_tile):
        text = (folder / "report.html").read_text()
        assert text.startswith("<!DOCTYPE html>") and "</html>" in text


def test_build_twice_gives_identical_report_json_and_html(tmp_path):
    for target in ("tile8x8", "ref"):
        a = build_saved("small_cnn", target, tmp_path / f"{target}_a")
        b = build_saved("small_cnn", target, tmp_path / f"{target}_b")
        for name in ("report.json", "report.html"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), (target, name)
        rep = json.loads((a / "report.json").read_text())
        assert not any(k in json.dumps(rep) for k in ('"seconds"', '"time_ms"', '"timestamp"')), target


def _report_cmd(argv):
    p = argparse.ArgumentParser()
    report_cli.add_parser(p.add_subparsers())
    args = p.parse_args(argv)
    return args.fn(args)


def test_text_report_shows_the_same_figures(resnet8_tile, capsys):
    assert _report_cmd(["report", str(resnet8_tile), "--width", "200"]) == 0
    out = capsys.readouterr().out
    rep = json.loads((resnet8_tile / "report.json").read_text())
    assert f"{rep['cycles']:,}" in out and f"{rep['macs']:,}" in out and f"{rep['utilization']:.1%}" in out
    for v in rep["energy"]["variants"]:
        assert v["label"] in out and f"{v['total_pj'] * 1e-6:,.3f}" in out
    for layer in rep["layers"]:
        assert layer["name"] in out and f"{layer['cycles']:,}" in out
    for title in ("Layers", "Timeline", "Memory plan", "Quantization", "Energy per layer"):
        assert title in out
    assert f"{rep['memory']['peak_bytes']:,}" in out and "report.html" in out
    ch = rep["schedule"][0]  # the scheduler's choices
    assert f"pixel tiling {ch['tiling']}, loads {ch['loads']}" in out


def test_text_report_of_a_folder_without_report_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="has no report.json"):
        _report_cmd(["report", str(tmp_path)])
