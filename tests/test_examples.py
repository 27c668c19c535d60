"""The checked-in digits models and data of examples/ (made by examples/train_digits.py).

They import into hwc, hwc's float reference matches onnxruntime on every test digit
(`rtol=1e-4, atol=1e-4 * max(1, |ort|.max())`: relative to the scale of the logits), and
the top-1 accuracy from hwc's reference equals onnxruntime's and meets the targets.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from hwc.frontend import import_onnx
from hwc.ref.interp import run_graph

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
N_TEST, N_CALIB = 1797 - 1400, 200

#: name -> (model file, test data, calibration data, input shape, accuracy target, IR ops)
MODELS = {
    "cnn": ("digits_cnn.onnx", "digits_test.npz", "digits_calib.npz", (1, 1, 8, 8), 0.95,
            {"Conv": 2, "BatchNormalization": 2, "Relu": 2, "MaxPool": 2, "Reshape": 1,
             "Gemm": 1}),
    "mlp": ("digits_mlp.onnx", "digits_test_mlp.npz", "digits_calib_mlp.npz", (1, 64), 0.93,
            {"Gemm": 2, "Relu": 1}),
}


def _load(name):
    model_file, test_file, calib_file, *_ = MODELS[name]
    return onnx.load(EXAMPLES / model_file), np.load(EXAMPLES / test_file), \
        np.load(EXAMPLES / calib_file)


@pytest.fixture(scope="module", params=list(MODELS))
def outputs(request):
    """(name, hwc reference logits, onnxruntime logits, labels) on every test digit."""
    name = request.param
    model, test, _ = _load(name)
    g = import_onnx(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours = np.concatenate([run_graph(g, {"input": x})["logits"] for x in test["input"]])
    theirs = np.concatenate([sess.run(None, {"input": x})[0] for x in test["input"]])
    return name, ours, theirs, test["labels"]


@pytest.mark.parametrize("name", MODELS)
def test_files_have_the_documented_shapes(name):
    model, test, calib = _load(name)
    *_, in_shape, _, ops = MODELS[name]
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    g = import_onnx(model)
    assert g.op_counts() == ops
    assert g.type("input").shape == in_shape and g.type("logits").shape == (1, 10)
    # Data files: one extra leading axis of samples (the CLI contract), pixels in [0, 1].
    assert test["input"].shape == (N_TEST, *in_shape) and test["input"].dtype == np.float32
    assert test["labels"].shape == (N_TEST,) and test["labels"].dtype == np.int64
    assert calib["input"].shape == (N_CALIB, *in_shape) and calib["input"].dtype == np.float32
    for x in (test["input"], calib["input"]):
        assert x.min() == 0.0 and x.max() == 1.0
        np.testing.assert_array_equal(x * 16, np.round(x * 16))  # pixel / 16, exactly


def test_data_is_the_sklearn_split():
    from sklearn.datasets import load_digits

    d = load_digits()
    test, test_mlp = np.load(EXAMPLES / "digits_test.npz"), np.load(EXAMPLES / "digits_test_mlp.npz")
    np.testing.assert_array_equal(test["labels"], d.target[1400:])
    np.testing.assert_array_equal(test["labels"], test_mlp["labels"])
    np.testing.assert_array_equal(test["input"].reshape(N_TEST, 64), d.data[1400:] / 16)
    np.testing.assert_array_equal(test_mlp["input"].reshape(N_TEST, 64), d.data[1400:] / 16)
    # Calibration samples come from the training part, the same ones for both models.
    calib = np.load(EXAMPLES / "digits_calib.npz")["input"].reshape(N_CALIB, 64)
    calib_mlp = np.load(EXAMPLES / "digits_calib_mlp.npz")["input"].reshape(N_CALIB, 64)
    np.testing.assert_array_equal(calib, calib_mlp)
    train = {row.tobytes() for row in (d.data[:1400] / 16).astype(np.float32)}
    assert all(row.tobytes() in train for row in calib)
    assert len({row.tobytes() for row in calib}) > 0.95 * N_CALIB  # not one digit repeated


def test_reference_matches_onnxruntime(outputs):
    name, ours, theirs, _ = outputs
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(theirs).max()),
                               err_msg=name)


def test_accuracy(outputs):
    name, ours, theirs, labels = outputs
    acc = (ours.argmax(axis=1) == labels).mean()
    assert acc == (theirs.argmax(axis=1) == labels).mean()
    assert acc >= MODELS[name][4], f"{name}: accuracy {acc:.4f}"


@pytest.mark.slow
def test_training_reproduces_the_data(tmp_path):
    """The script runs (it fails below the accuracy targets) and rewrites the same data.

    The trained weights are byte-identical on this machine, but training amplifies the
    last bit of BLAS rounding, so other CPUs may differ: only the data is compared here.
    """
    script = EXAMPLES / "train_digits.py"
    r = subprocess.run([sys.executable, script, "--out", tmp_path], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for f in ("digits_test.npz", "digits_test_mlp.npz", "digits_calib.npz",
              "digits_calib_mlp.npz"):
        new, old = np.load(tmp_path / f), np.load(EXAMPLES / f)
        assert new.files == old.files
        for k in old.files:
            np.testing.assert_array_equal(new[k], old[k], err_msg=f"{f}: {k}")
