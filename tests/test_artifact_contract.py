"""The build folder contract of ARCHITECTURE.md: what model.json, memory_map.json and report.json hold, checked
against what a user can compute without hwc (the files' own sizes, numpy quantization, hand-counted bytes)."""

import json

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_helpers import F32, model, tiny_cnn

from hwc.cli import main
from hwc.frontend import import_onnx
from hwc.lower.memplan import plan_graph


@pytest.fixture(scope="module")
def tile_build(tmp_path_factory):
    """y = Conv(x) and xo = Identity(x) on tile8x8: xo is x through the int8 input encoding and back."""
    tmp = tmp_path_factory.mktemp("tile")
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
               helper.make_node("Identity", ["x"], ["xo"])],
              [("x", F32, [1, 3, 6, 6])], [("y", F32, [1, 4, 6, 6]), ("xo", F32, [1, 3, 6, 6])], {"w": w})
    onnx.save(m, tmp / "m.onnx")
    x = np.random.default_rng(2).standard_normal((8, 1, 3, 6, 6)).astype(np.float32)
    np.savez(tmp / "calib.npz", x=x)
    np.savez(tmp / "x.npz", x=x[0])
    out = tmp / "out"
    assert main(["build", str(tmp / "m.onnx"), "--target", "tile8x8", "--calib", str(tmp / "calib.npz"),
                 "-o", str(out), "--no-hdl"]) == 0
    assert main(["run", str(out), "--input", str(tmp / "x.npz"), "-o", str(tmp / "y.npz")]) == 0
    return out, x[0], np.load(tmp / "y.npz")


def _json(path):
    return json.loads(path.read_text())


def test_model_json_gives_the_int8_encoding_a_host_needs(tile_build):
    """A host that quantizes x with model.json's encoding (numpy only) gets exactly the tile's view of x (xo), and
    the tile's output y lies on its own encoding's int8 grid."""
    out, x, ys = tile_build
    mj = _json(out / "model.json")
    enc = {t["name"]: t["quantization"] for t in mj["inputs"] + mj["outputs"]}
    assert enc["x"]["dtype"] == "int8" and enc["xo"] == enc["x"]
    s, zp = enc["x"]["scale"], enc["x"]["zero_point"]
    codes = np.clip(np.round(x.astype(np.float64) / s) + zp, -128, 127)
    np.testing.assert_allclose(ys["xo"], (codes - zp) * s, rtol=1e-6, atol=1e-7)
    k = ys["y"].astype(np.float64) / enc["y"]["scale"] + enc["y"]["zero_point"]
    np.testing.assert_allclose(k, np.round(k), atol=1e-3)
    k = np.round(k)
    assert k.min() >= -128 and k.max() <= 127 and len(np.unique(k)) > 10


def test_memory_map_names_every_buffer_and_matches_the_files(tile_build):
    out, _, _ = tile_build
    mm, rep = _json(out / "memory_map.json"), _json(out / "report.json")
    for r in mm["dram"] + mm["act"]:
        assert {"name", "offset", "size", "bank", "unit"} <= set(r), r
    assert {r["bank"] for r in mm["dram"]} == {"dram"} and {r["bank"] for r in mm["act"]} == {"act"}
    dram = sorted(mm["dram"], key=lambda r: r["offset"])
    assert all(a["offset"] + a["size"] <= b["offset"] for a, b in zip(dram, dram[1:]))   # disjoint
    weights = [r for r in dram if r["kind"] in ("params", "weights")]
    assert sum(r["size"] for r in weights) == (out / "weights.bin").stat().st_size == rep["weights_bytes"]
    assert next(r for r in dram if r["kind"] == "program")["size"] == (out / "program.bin").stat().st_size
    banks = [r["wgt_bank"] for r in dram if r["kind"] == "weights"]
    assert banks and banks == [k % 2 for k in range(len(banks))]   # double-buffered: the groups alternate
    sizes = rep["sizes"]
    assert sizes["program_bytes"] == (out / "program.bin").stat().st_size
    assert sizes["weights_bytes"] == (out / "weights.bin").stat().st_size
    assert sizes["dram_bytes"] == dram[-1]["offset"] + dram[-1]["size"]
    assert sizes["activations_bytes"] == rep["memory"]["peak_bytes"]


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_report_has_the_contract_keys_and_sizes_match_the_files(tmp_path, target):
    onnx.save(tiny_cnn(), tmp_path / "cnn.onnx")
    out = tmp_path / "out"
    assert main(["build", str(tmp_path / "cnn.onnx"), "--target", target, "-o", str(out),
                 "--input-shape", "x=1x3x8x8"]) == 0
    rep = _json(out / "report.json")
    assert {"target", "macs", "memory", "weights_bytes", "layers", "sizes"} <= set(rep)
    mem = rep["memory"]
    assert 0 < mem["lower_bound_bytes"] <= mem["peak_bytes"] <= mem["naive_bytes"]
    assert rep["sizes"]["activations_bytes"] == mem["peak_bytes"]
    if target == "cpu":
        assert rep["sizes"]["object_bytes"] == (out / "model.o").stat().st_size
        assert rep["sizes"]["weights_bytes"] == (out / "weights.bin").stat().st_size


def test_reference_memory_plan_by_hand():
    """x -> Relu a -> Neg b -> Relu c -> Neg d -> y, 4x1000 float32 each: a, b, c are intermediates of 16,000
    bytes; a and c never live together, so the plan needs two of them (the naive total is three)."""
    m = model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
               helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Neg", ["c"], ["y"])],
              [("x", F32, [4, 1000])], [("y", F32, [4, 1000])])
    mem = plan_graph(import_onnx(m))
    assert (mem["peak_bytes"], mem["lower_bound_bytes"], mem["naive_bytes"]) == (32_000, 32_000, 48_000)
    offs = {b["name"]: b["offset"] for b in mem["buffers"]}
    assert offs["a"] == offs["c"] != offs["b"]
