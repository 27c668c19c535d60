"""The CLI contract: commands, exit codes, and one clear message for each kind of bad input."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx_helpers import F32, model, ort_run, tiny_cnn

from hwc.cli import main


@pytest.fixture
def cnn_path(tmp_path):
    p = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), p)
    return p


@pytest.fixture
def built(tmp_path, cnn_path):
    out = tmp_path / "out"
    assert main(["build", str(cnn_path), "--target", "ref", "-o", str(out), "--input-shape", "x=1x3x8x8"]) == 0
    return out


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_build_and_run_match_onnxruntime_with_samples_axis(tmp_path, built, capsys):
    x = np.random.default_rng(0).standard_normal((4, 1, 3, 8, 8)).astype(np.float32)  # 4 samples
    np.savez(tmp_path / "x.npz", x=x)
    rc, out, _ = run_cli(capsys, "run", built, "--input", tmp_path / "x.npz", "-o", tmp_path / "y.npz")
    assert rc == 0, out
    y = np.load(tmp_path / "y.npz")["y"]
    assert y.shape == (4, 1, 10)
    m = tiny_cnn(batch=1)
    for i in range(4):
        np.testing.assert_allclose(y[i], ort_run(m, {"x": x[i]})["y"], rtol=1e-4, atol=1e-5)
    np.save(tmp_path / "x1.npy", x[0])  # a single-input model also takes a .npy
    rc, _, _ = run_cli(capsys, "run", built, "--input", tmp_path / "x1.npy", "-o", tmp_path / "y1.npz")
    assert rc == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y1.npz")["y"], y[0])


def test_build_is_deterministic(tmp_path, cnn_path):
    for d in ("a", "b"):
        assert main(["build", str(cnn_path), "-o", str(tmp_path / d), "--input-shape", "x=1x3x8x8"]) == 0
    for f in ("graph.json", "graph.bin", "model.json", "report.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_entry_point_exit_code(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hwc.cli", "check", str(tmp_path / "none.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "no such file" in r.stderr and "Traceback" not in r.stderr


# ---- bad model files ---------------------------------------------------------------------
def test_missing_file(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "build", tmp_path / "nope.onnx", "-o", tmp_path / "o")
    assert rc == 2
    assert "Cannot read model" in err and "no such file. Check the path" in err
    assert not (tmp_path / "o").exists()


def test_truncated_file(tmp_path, cnn_path, capsys):
    data = cnn_path.read_bytes()
    bad = tmp_path / "trunc.onnx"
    bad.write_bytes(data[: len(data) // 2])
    rc, _, err = run_cli(capsys, "check", bad)
    assert rc == 2
    assert "it is not a valid ONNX file (protobuf decoding failed" in err
    assert "may be truncated or corrupt" in err


def test_corrupt_file(tmp_path, capsys):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(bytes(np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8)))
    rc, _, err = run_cli(capsys, "check", bad)
    assert rc == 2
    assert "not a valid ONNX file" in err or "is not an ONNX model" in err


def test_not_onnx(tmp_path, capsys):
    for name, data in (("notes.onnx", b"\n\x05hello"), ("empty.onnx", b"")):
        p = tmp_path / name
        p.write_bytes(data)
        rc, _, err = run_cli(capsys, "check", p)
        assert rc == 2
        assert ("the file decodes but is not an ONNX model" in err) or ("the file is empty" in err)


def test_checker_failure(tmp_path, capsys):
    m = tiny_cnn()
    m.graph.node[1].input[0] = "undefined_tensor"  # dangling edge: onnx.checker rejects it
    p = tmp_path / "bad.onnx"
    onnx.save(m, p)
    rc, _, err = run_cli(capsys, "build", p, "-o", tmp_path / "o")
    assert rc == 2
    assert "fails onnx.checker" in err and "undefined_tensor" in err


def test_unsupported_ops_listed(tmp_path, capsys):
    m = model(
        [helper.make_node("Erf", ["x"], ["a"], name="erf_1"),
         helper.make_node("Relu", ["a"], ["b"], name="relu_1"),
         helper.make_node("TopK", ["b", "k"], ["c", "i"])],  # (no name: named by its place)
        [("x", F32, [1, 4])], [("c", F32, [1, 2])], {"k": np.array([2], np.int64)}, opset=17)
    p = tmp_path / "unsup.onnx"
    onnx.save(m, p)
    rc, _, err = run_cli(capsys, "build", p, "-o", tmp_path / "o")
    assert rc == 2
    assert "2 node(s) hwc does not support" in err
    assert "Erf, node 'erf_1', opset 17" in err and "TopK, node '#2', opset 17" in err
    rc, out, err = run_cli(capsys, "check", p)
    assert rc == 2
    assert "erf_1: no converter for 'Erf'" in out and "node #2: no converter for 'TopK'" in out
    assert "2 of 3 nodes are not supported" in err


def test_unsupported_attribute_names_node(tmp_path, capsys):
    m = model([helper.make_node("Conv", ["x", "W"], ["y"], name="c1", auto_pad="BOGUS")],
              [("x", F32, [1, 1, 4, 4])], [("y", F32, [1, 1, 4, 4])], {"W": np.ones((1, 1, 1, 1), np.float32)})
    p = tmp_path / "attr.onnx"
    onnx.save(m, p)
    rc, _, err = run_cli(capsys, "build", p, "-o", tmp_path / "o")
    assert rc == 2
    assert "[Operator-'Conv', opset 17, node 'c1']: auto_pad 'BOGUS' is not supported" in err


def test_unbound_symbolic_dim(tmp_path, cnn_path, capsys):
    rc, _, err = run_cli(capsys, "build", cnn_path, "-o", tmp_path / "o")
    assert rc == 2
    assert "input 'x' has a symbolic dimension 'N' at axis 0" in err
    assert "--input-shape x=1x3x8x8" in err


def test_bad_input_shape_flag(tmp_path, cnn_path, capsys):
    rc, _, err = run_cli(capsys, "build", cnn_path, "-o", tmp_path / "o", "--input-shape", "x=1x3xbig")
    assert rc == 2 and "is not of the form NAME=D1xD2" in err
    rc, _, err = run_cli(capsys, "build", cnn_path, "-o", tmp_path / "o", "--input-shape", "x=0x3x8x8")
    assert rc == 2 and "every dimension at least 1" in err
    rc, _, err = run_cli(capsys, "build", cnn_path, "-o", tmp_path / "o", "--input-shape", "z=1x3x8x8")
    assert rc == 2 and "the model's inputs are ['x']" in err


def test_run_prints_nan_and_reads_a_non_npz_clearly(tmp_path, built, capsys):
    """Output values print as they are (rich markup off: "[nan, nan]" was swallowed as a tag); a file that is not
    an .npz gets hwc's advice, not numpy's allow_pickle one."""
    np.save(tmp_path / "x.npy", np.full((1, 3, 8, 8), np.nan, np.float32))
    rc, out, _ = run_cli(capsys, "run", built, "--input", tmp_path / "x.npy")
    assert rc == 0 and "y: float32[1x10] [nan, nan, nan, nan, nan, nan] ..." in out, out
    (tmp_path / "bad.npz").write_text("not a zip")
    rc, _, err = run_cli(capsys, "run", built, "--input", tmp_path / "bad.npz")
    assert rc == 2 and "neither an .npy nor an .npz" in err and "pickle" not in err, err


# ---- bad run-time inputs --------------------------------------------------------------------
@pytest.mark.parametrize("feeds, message", [
    ({"z": np.zeros((1, 3, 8, 8), np.float32)}, "has no array for input(s) ['x'] (it holds ['z'])"),
    ({"x": np.zeros((1, 3, 9, 8), np.float32)}, "Input 'x' has shape 1x3x9x8, but the model takes 1x3x8x8"),
    ({"x": np.zeros((1, 3, 8, 8), np.float64)}, "Input 'x' has dtype float64, but the model takes float32"),
])
def test_run_rejects_bad_inputs(tmp_path, built, capsys, feeds, message):
    np.savez(tmp_path / "bad.npz", **feeds)
    rc, _, err = run_cli(capsys, "run", built, "--input", tmp_path / "bad.npz")
    assert rc == 2
    assert message in err


def test_run_names_the_arrays_of_an_npz_it_does_not_use(tmp_path, built, capsys):
    """An .npz holding more than the inputs (labels, say) runs on the inputs, with a note naming the rest."""
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x, labels=np.arange(3))
    rc, out, err = run_cli(capsys, "run", built, "--input", tmp_path / "x.npz", "-o", tmp_path / "y.npz")
    assert rc == 0, err
    assert "also holds ['labels'], which are not inputs of the model ['x']: not used" in " ".join(err.split()), err
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], ort_run(tiny_cnn(batch=1), {"x": x})["y"],
                               rtol=1e-4, atol=1e-5)
    np.savez(tmp_path / "x2.npz", x=x)   # (no note when the file holds the inputs only)
    rc, _, err = run_cli(capsys, "run", built, "--input", tmp_path / "x2.npz")
    assert rc == 0 and "note" not in err, err


def test_run_rejects_unknown_input_name_in_api(built):
    import hwc
    from hwc.errors import InputError

    art = hwc.load(built)
    with pytest.raises(InputError, match=r"Unknown input name\(s\) \['xx'\]"):
        art.run({"x": np.zeros((1, 3, 8, 8), np.float32), "xx": np.zeros(1)})


def test_run_missing_input_file_and_bad_folder(tmp_path, built, capsys):
    rc, _, err = run_cli(capsys, "run", built, "--input", tmp_path / "none.npz")
    assert rc == 2 and "does not exist" in err
    rc, _, err = run_cli(capsys, "run", tmp_path, "--input", tmp_path / "none.npz")
    assert rc == 2 and "is not an hwc build folder" in err
    (tmp_path / "m.onnx").write_bytes(b"")   # the model given for the folder: no `-o m.onnx` advice
    rc, _, err = run_cli(capsys, "disasm", tmp_path / "m.onnx")
    assert rc == 2 and "is a file, not an hwc build folder" in err and "-o OUT` and pass OUT" in err, err


def test_build_never_deletes_a_folder_that_is_not_a_build(tmp_path, cnn_path, capsys):
    """-o naming a folder with other files: refused (exit 2), the files kept; a previous build is replaced whole,
    with the usual permissions (not mkdtemp's 0700)."""
    import os

    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "important.txt").write_text("precious")
    rc, _, err = run_cli(capsys, "build", cnn_path, "--target", "ref", "-o", mine, "--input-shape", "x=1x3x8x8")
    assert rc == 2 and "is not an hwc build folder" in err and "will not delete" in err
    assert (mine / "important.txt").read_text() == "precious" and (mine / "sub").is_dir()
    out = tmp_path / "out"
    for _ in range(2):   # a build folder is replaced
        rc, _, _ = run_cli(capsys, "build", cnn_path, "--target", "ref", "-o", out, "--input-shape", "x=1x3x8x8")
        assert rc == 0
    mask = os.umask(0)
    os.umask(mask)
    assert (out.stat().st_mode & 0o777) == 0o777 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx", "mine", "out"]   # nothing left behind


def test_build_into_the_current_folder(tmp_path, cnn_path, capsys, monkeypatch):
    """`-o .` inside a previous build folder rebuilds it (renaming '.' itself fails)."""
    out = tmp_path / "out"
    assert run_cli(capsys, "build", cnn_path, "--target", "ref", "-o", out, "--input-shape", "x=1x3x8x8")[0] == 0
    monkeypatch.chdir(out)
    rc, _, err = run_cli(capsys, "build", cnn_path, "--target", "ref", "-o", ".", "--input-shape", "x=1x3x8x8")
    assert rc == 0, err
    assert (out / "model.json").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx", "out"]


def test_unwritable_outputs_are_user_errors(tmp_path, built, cnn_path, capsys):
    """An -o that cannot be written (under a file, a folder for a file) is exit 2 naming it, for build, run and opt;
    nothing half-written is left."""
    (tmp_path / "afile").write_text("x")
    x = np.zeros((1, 3, 8, 8), np.float32)
    np.save(tmp_path / "x.npy", x)
    cases = [("build", cnn_path, "--target", "ref", "-o", tmp_path / "afile" / "sub", "--input-shape", "x=1x3x8x8"),
             ("run", built, "--input", tmp_path / "x.npy", "-o", tmp_path / "afile" / "y.npz"),
             ("run", built, "--input", tmp_path / "x.npy", "-o", tmp_path),
             ("opt", cnn_path, "-o", tmp_path / "afile" / "m.onnx", "--input-shape", "x=1x3x8x8")]
    for argv in cases:
        rc, _, err = run_cli(capsys, *argv)
        assert rc == 2 and "-o" in err and "internal error" not in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "cnn.onnx", "out", "x.npy"]


@pytest.mark.parametrize("damage", ["report.json", "graph.json", "program.bin", "program.bin cut", "weights.bin cut"])
def test_damaged_tile_build_folder(tmp_path, capsys, damage):
    """A tile build folder with a file missing or truncated: exit 2, 'rebuild it' (a cut program.bin ran, the
    model then stopped past its end: an internal error, exit 1; random probe 7)."""
    from onnx_helpers import tiny_cnn as cnn

    p = tmp_path / "cnn.onnx"
    onnx.save(cnn(), p)
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(0).standard_normal((4, 1, 3, 8, 8)).astype(np.float32))
    out = tmp_path / "out"
    assert main(["build", str(p), "--target", "tile8x8", "--calib", str(tmp_path / "calib.npz"), "-o", str(out),
                 "--no-hdl", "--input-shape", "x=1x3x8x8"]) == 0
    capsys.readouterr()
    f = out / damage.split()[0]
    if damage == "report.json":
        f.write_text(f.read_text()[:40])
    elif damage.endswith("cut"):
        f.write_bytes(f.read_bytes()[:-5])
    else:
        f.unlink()
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    for cmd in (["run", out, "--input", tmp_path / "x.npy"], ["disasm", out]):
        rc, _, err = run_cli(capsys, *cmd)
        assert rc == 2 and "incomplete or damaged hwc build folder" in err and "rebuild" in err, (cmd, err)
        if damage.endswith("cut"):
            assert f"{f.name} has {f.stat().st_size:,} bytes" in err, err


def test_tile_output_that_is_an_identity_of_the_input(tmp_path, capsys):
    """y = Conv(x) and xo = Identity(x) on the tile: `hwc run` gives both (xo as the tile sees it: x through the
    int8 input quantization), equal to the int8 reference."""
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
               helper.make_node("Identity", ["x"], ["xo"])],
              [("x", F32, [1, 3, 6, 6])], [("y", F32, [1, 4, 6, 6]), ("xo", F32, [1, 3, 6, 6])], {"w": w})
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    x = np.random.default_rng(2).standard_normal((8, 1, 3, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=x)
    np.savez(tmp_path / "x.npz", x=x[0])
    out = tmp_path / "out"
    assert main(["build", str(p), "--target", "tile8x8", "--calib", str(tmp_path / "calib.npz"), "-o", str(out),
                 "--no-hdl"]) == 0
    ys = {}
    for engine in ("model", "reference"):
        rc, _, err = run_cli(capsys, "run", out, "--input", tmp_path / "x.npz", "--engine", engine, "-o",
                             tmp_path / f"{engine}.npz")
        assert rc == 0, err
        ys[engine] = np.load(tmp_path / f"{engine}.npz")
    for name in ("y", "xo"):
        np.testing.assert_array_equal(ys["model"][name], ys["reference"][name])
    np.testing.assert_allclose(ys["model"]["xo"], x[0], atol=0.05)   # (one int8 step of the input's scale)


def test_tile_rejections_say_why_and_what_to_do(tmp_path, capsys):
    """A model no layer of which the tile runs: exit 2, the model's node names and the real reason (a Gemm the
    quantizer left float: why), no internal Quantize/Dequantize nodes, and what to do."""
    rng = np.random.default_rng(0)
    cases = {
        "conv1d": (model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", F32, [1, 3, 16])],
                         [("y", F32, [1, 4, 14])], {"w": rng.standard_normal((4, 3, 3)).astype(np.float32)}),
                   [1, 3, 16], ["node 'conv'", "1-d Conv: the tile runs 2-d windows"]),
        "gemm_t": (model([helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)], [("x", F32, [8, 1])],
                         [("y", F32, [1, 4])], {"w": rng.standard_normal((8, 4)).astype(np.float32)}),
                   [8, 1], ["node 'gemm'", "Gemm stays float32 (transA=1"]),
    }
    for name, (m, shape, wants) in cases.items():
        p = tmp_path / f"{name}.onnx"
        onnx.save(m, p)
        np.savez(tmp_path / "c.npz", x=rng.standard_normal((4, *shape)).astype(np.float32))
        rc, _, err = run_cli(capsys, "build", p, "--target", "tile8x8", "--calib", tmp_path / "c.npz", "-o",
                             tmp_path / name, "--no-hdl")
        assert rc == 2, err
        for want in wants + ["--target cpu"]:
            assert want in err, (name, want, err)
        assert "quantize" not in err.lower().replace("dequantize", "").replace("quantizer", ""), err


def test_degenerate_calibration_data_is_warned_about(tmp_path, cnn_path, capsys):
    """All-zero or single-sample calibration data build (a user may mean it) but stderr says why the int8 ranges
    will not fit real inputs; representative data give no warning."""
    rng = np.random.default_rng(0)
    cases = {"zeros": (np.zeros((8, 1, 3, 8, 8), np.float32), "all 8 calibration samples of input 'x' are the same"),
             "one": (rng.standard_normal((1, 1, 3, 8, 8)).astype(np.float32), "hold one sample of input 'x'"),
             "fine": (rng.standard_normal((8, 1, 3, 8, 8)).astype(np.float32), None)}
    for name, (x, want) in cases.items():
        np.savez(tmp_path / f"{name}.npz", x=x)
        rc, _, err = run_cli(capsys, "build", cnn_path, "--target", "tile8x8", "--calib", tmp_path / f"{name}.npz",
                             "-o", tmp_path / name, "--no-hdl", "--input-shape", "x=1x3x8x8")
        assert rc == 0, err
        assert (want in err) if want else ("warning" not in err), (name, err)


def test_check_with_a_target_builds_in_memory(tmp_path, cnn_path, capsys):
    """`hwc check --target`: the importer's table, then what the target makes of it: a tile build's placement
    (exit 0), or the target's reason for refusing the model (exit 2); nothing written."""
    rc, out, err = run_cli(capsys, "check", cnn_path, "--target", "tile8x8", "--input-shape", "x=1x3x8x8")
    assert rc == 0 and "tile8x8: builds;" in out and "on the tile" in out, (out, err)
    rng = np.random.default_rng(0)
    conv3d = model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", F32, [1, 2, 4, 4, 4])],
                   [("y", F32, [1, 3, 2, 2, 2])], {"w": rng.standard_normal((3, 2, 3, 3, 3)).astype(np.float32)})
    p = tmp_path / "c3.onnx"
    onnx.save(conv3d, p)
    for target, want in (("cpu", "3-d convolution"), ("tile8x8", "3-d Conv: the tile runs 2-d windows")):
        rc, out, err = run_cli(capsys, "check", p, "--target", target)
        assert rc == 2 and "supported by the importer" in out and want in err, (target, out, err)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["c3.onnx", "cnn.onnx"]


def test_check_with_a_target_says_which_band_copies_need_no_host(tmp_path, capsys):
    """`hwc check --target` of a model whose activations exceed ACT (MobileNetV1-0.25 at 160x160 on tile8x8): the
    bands; the bands' Slices of the quantized input and their Concat need no host work (the segments read the rows
    in external memory); the host runs the Softmax only (besides the quantization at the edges)."""
    from hwc import zoo

    p = tmp_path / "mb160.onnx"
    onnx.save(zoo.mobilenet_v1_025(input_size=160), p)
    rc, out, err = run_cli(capsys, "check", p, "--target", "tile8x8")
    text = " ".join(out.split())   # (the console wraps long lines)
    assert rc == 0 and "in row bands: conv0..conv7 (2)" in text, (out, err)
    assert "1 on the host" in text and "host: softmax0 (Softmax)" in text and "the host copies the rows" not in text
    for node in ("conv0.band0.in0 (Slice)", "conv0.band1.in0 (Slice)", "conv7.bands (Concat)"):
        assert f"in external memory: {node}: row bands of 'conv0..conv7'" in text, node
    assert "no host work: the next segment's LOADs read the rows where the tile stored them" in text


def test_float_with_calibration_or_a_tile_target_is_a_clear_error(tmp_path, cnn_path, capsys):
    """--float with --calib (or a tile target) built int8 without a word (docs audit); now exit 2 saying which
    option makes the build int8, and nothing is written. --float alone builds the float graph."""
    np.savez(tmp_path / "calib.npz", x=np.zeros((2, 1, 3, 8, 8), np.float32))
    shape = ("--input-shape", "x=1x3x8x8")
    for extra, what in ((("--calib", tmp_path / "calib.npz", "--target", "cpu"), "but --calib makes it int8"),
                        (("--target", "tile8x8"), "but --target tile8x8 (a tile runs int8 only)")):
        rc, _, err = run_cli(capsys, "build", cnn_path, "--float", *extra, *shape, "-o", tmp_path / "out")
        assert rc == 2 and what in err and "internal error" not in err, err
        assert not (tmp_path / "out").exists()
    rc, _, err = run_cli(capsys, "build", cnn_path, "--float", "--target", "ref", *shape, "-o", tmp_path / "out")
    assert rc == 0, err
    from hwc.artifact import load

    assert not load(tmp_path / "out").quantized   # (an int8 graph quantizes its inputs)
