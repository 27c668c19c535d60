"""A small CNN through the whole chain: float model -> int8 -> tile program -> RTL (cocotb + Icarus).
The RTL's outputs and cycle count must equal the Python tile model's, whose outputs equal the
int8 reference interpreter's and the CPU int8 bundle's (ARCHITECTURE.md, the bit-exact chain)."""

from pathlib import Path

import numpy as np

import hwc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_digits_cnn_rtl_equals_model_equals_int8_reference(tmp_path):
    art = hwc.build(EXAMPLES / "digits_cnn.onnx", target="tile8x8", calib=EXAMPLES / "digits_calib.npz")
    art = hwc.load(art.save(tmp_path / "out"))  # through the files, as `hwc sim` does
    x = np.load(EXAMPLES / "digits_test.npz")["input"]
    ref = art.run({"input": x[:3]}, engine="reference")["logits"]
    model = art.run({"input": x[:3]}, engine="model")["logits"]
    np.testing.assert_array_equal(model, ref)
    model_cycles = art.last_run["cycles"]
    rtl = art.run({"input": x[0]}, engine="rtl")["logits"]
    rtl_cycles = art.last_run["cycles"]
    np.testing.assert_array_equal(rtl, model[0])
    assert rtl_cycles == model_cycles == art.report["cycles"]


def test_bit_exact_chain_includes_the_cpu_int8_bundle():
    """The same int8 graph compiled for the CPU gives the same bits as the tile and the reference."""
    from hwc.targets import load_target

    from hwc.backends.cpu import build_artifact

    tile = hwc.build(EXAMPLES / "digits_cnn.onnx", target="tile8x8", calib=EXAMPLES / "digits_calib.npz", hdl=False)
    cpu = build_artifact(load_target("cpu"), tile.graph, {}, {"int8": True})
    x = {"input": np.load(EXAMPLES / "digits_test.npz")["input"][:40]}
    ref = tile.run(x, engine="reference")["logits"]
    np.testing.assert_array_equal(tile.run(x, engine="model")["logits"], ref)
    np.testing.assert_array_equal(cpu.run(x)["logits"], ref)
