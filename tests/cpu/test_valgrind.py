"""One model (ResNet-8: padding, residual adds, pooling, softmax) runs clean under valgrind's
memcheck through the bundle's own main.c: no invalid read or write, no use of an
uninitialized byte (main.c leaves the activations uninitialized), no leak. Built for
x86-64-v3 (AVX2): valgrind 3.19 does not decode AVX-512."""

import shutil
import subprocess

import numpy as np

import hwc
from hwc.zoo import MODELS, random_inputs


def test_resnet8_memcheck_clean(tmp_path):
    assert shutil.which("valgrind") and shutil.which("gcc"), "valgrind/gcc missing: run `make setup` (ensure-tools.sh)"
    m = MODELS["resnet8"]()
    art = hwc.build(m, target="cpu", cpu="x86-64-v3")
    out = art.save(tmp_path / "out")
    subprocess.run(["make", "-C", str(out)], check=True, capture_output=True)
    x = random_inputs(m, seed=4)["input"][0]
    x.tofile(tmp_path / "in.bin")
    r = subprocess.run(["valgrind", "--tool=memcheck", "--error-exitcode=99", "--leak-check=full",
                        "--errors-for-leak-kinds=all", "--track-origins=yes", str(out / "main"), "-w",
                        str(out / "weights.bin"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR SUMMARY: 0 errors" in r.stderr
    y = np.fromfile(tmp_path / "out.bin", np.float32).reshape(1, 10)
    np.testing.assert_array_equal(y, art.run({"input": x})["output"])
