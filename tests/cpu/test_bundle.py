"""The bundle contract: `hwc build --target cpu -o OUT` writes model.o, model.h,
weights.bin, main.c and a Makefile that builds with gcc and runs; the object has one
global symbol, calls nothing outside itself, refuses misaligned buffers, is byte-identical
across builds; cross builds give objects of the right machine."""

from __future__ import annotations

import ctypes
import functools
import re
import shutil
import subprocess

import numpy as np
import pytest

import hwc
from hwc.errors import UserError
from hwc.zoo import MODELS, random_inputs


def needs_gcc(fn):
    """gcc and make come from scripts/ensure-tools.sh (`make test`): when missing the test fails, never skips."""
    @functools.wraps(fn)
    def wrapped(*a, **k):
        assert shutil.which("gcc") and shutil.which("make"), "gcc/make missing: run `make setup`"
        return fn(*a, **k)
    return wrapped


@pytest.fixture(scope="module")
def small_cnn_bundle(tmp_path_factory):
    m = MODELS["small_cnn"]()
    art = hwc.build(m, target="cpu")
    out = art.save(tmp_path_factory.mktemp("bundle") / "out")
    return m, art, out


def test_bundle_files_and_header(small_cnn_bundle):
    _, art, out = small_cnn_bundle
    for f in ("model.o", "model.h", "weights.bin", "main.c", "Makefile", "report.json", "model.json"):
        assert (out / f).is_file(), f
    h = (out / "model.h").read_text()
    sizes = {k: int(v) for k, v in re.findall(r"#define SMALL_CNN_(\w+_SIZE|ALIGNMENT) (\d+)", h)}
    assert sizes["WEIGHTS_SIZE"] == (out / "weights.bin").stat().st_size
    assert sizes["ALIGNMENT"] == 64
    assert "int small_cnn(const uint8_t *constant_weights, uint8_t *mutable_io, uint8_t *activations);" in h
    assert "#define SMALL_CNN_INPUT_INPUT_OFFSET" in h and "#define SMALL_CNN_OUTPUT_OUTPUT_OFFSET" in h
    loaded = hwc.load(out)
    x = {k: v[0] for k, v in random_inputs(MODELS["small_cnn"](), seed=3).items()}
    np.testing.assert_array_equal(loaded.run(x)["output"], art.run(x)["output"])


@needs_gcc
def test_object_symbols(small_cnn_bundle):
    _, _, out = small_cnn_bundle
    undefined = subprocess.run(["nm", "-u", str(out / "model.o")], capture_output=True, text=True, check=True)
    assert undefined.stdout.strip() == "", f"model.o needs symbols from outside: {undefined.stdout}"
    defined = subprocess.run(["nm", "-g", "--defined-only", str(out / "model.o")], capture_output=True, text=True,
                             check=True).stdout.split()
    assert defined[-2:] == ["T", "small_cnn"] and len(defined) == 3


@needs_gcc
def test_example_main_builds_and_matches(small_cnn_bundle, tmp_path):
    m, art, out = small_cnn_bundle
    subprocess.run(["make", "-C", str(out)], check=True, capture_output=True)
    x = random_inputs(m, seed=9)["input"][0]
    x.tofile(tmp_path / "in.bin")
    r = subprocess.run([str(out / "main"), "-w", str(out / "weights.bin"), "-n", "10", str(tmp_path / "in.bin"),
                        str(tmp_path / "out.bin")], capture_output=True, text=True, check=True)
    assert "median of 10 runs" in r.stdout
    y = np.fromfile(tmp_path / "out.bin", np.float32).reshape(1, 10)
    np.testing.assert_array_equal(y, art.run({"input": x})["output"])


def test_misaligned_pointers_are_refused(small_cnn_bundle):
    _, art, _ = small_cnn_bundle
    nm = art.native
    w, io, act = nm.args
    for args in ((w + 4, io, act), (w, io + 1, act), (w, io, act + 32)):
        assert nm.fn(*args) == 1
    assert nm.fn(w, io, act) == 0
    nm.check()


def test_canaries_catch_a_stray_write(small_cnn_bundle):
    from hwc.errors import HwcError

    _, art, _ = small_cnn_bundle
    nm = art.native
    nm.check()
    end = nm.act.start + nm.act.size
    saved = int(nm.act.raw[end])
    ctypes.memset(nm.act.address + nm.act.size, saved ^ 0xFF, 1)  # what an out-of-bounds store would do
    with pytest.raises(HwcError, match="canaries of activations"):
        nm.check()
    nm.act.raw[end] = saved
    nm.check()


def test_deterministic_build(tmp_path):
    m = MODELS["resnet8"]()
    a = hwc.build(m, target="cpu").save(tmp_path / "a")
    b = hwc.build(m, target="cpu").save(tmp_path / "b")
    for f in ("model.o", "weights.bin", "model.h", "report.json", "model.json"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


@pytest.mark.parametrize("triple,cpu,machine", [("thumbv7em-none-eabi", "cortex-m4", 40),
                                                 ("aarch64-linux-gnu", "cortex-a72", 183)])
def test_cross_compile(triple, cpu, machine):
    m = MODELS["ds_cnn"]()
    art = hwc.build(m, target="cpu", triple=triple, cpu=cpu)
    obj = art.files["model.o"]
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == machine
    assert art.info["cpu"]["triple"] == triple and not art.info["cpu"]["host"]
    with pytest.raises(UserError, match="not for this machine"):
        art.run({k: v[0] for k, v in random_inputs(m).items()})
    x = {k: v[0] for k, v in random_inputs(m).items()}
    assert art.run(x, engine="reference")["output"].shape == (1, 12)


@needs_gcc
@pytest.mark.parametrize("graph_name, entry", [("t", "t"), ("w", "w"), ("now", "now"), ("main", "main_model"),
                                               ("int", "int_model"), ("hwc_run", "hwc_run_model")])
def test_example_main_builds_whatever_the_model_is_called(graph_name, entry, tmp_path):
    """An entry point named like one of main.c's locals or helpers, a C keyword or main: main.c compiles and its
    output equals the Python run (main.c calls the entry through hwc_run; reserved names get a suffix)."""
    m = MODELS["small_mlp"]()
    m.graph.name = graph_name
    art = hwc.build(m, target="cpu")
    out = art.save(tmp_path / "out")
    assert f"int {entry}(const uint8_t *constant_weights" in (out / "model.h").read_text()
    subprocess.run(["make", "-C", str(out)], check=True, capture_output=True)
    x = random_inputs(m, seed=4)["input"][0]
    x.tofile(tmp_path / "in.bin")
    subprocess.run([str(out / "main"), "-w", str(out / "weights.bin"), str(tmp_path / "in.bin"),
                    str(tmp_path / "out.bin")], capture_output=True, text=True, check=True)
    want = art.run({"input": x})["output"]
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", np.float32).reshape(want.shape), want)
