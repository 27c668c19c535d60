"""The cpu target description (schema and its messages), unsupported models (a clear error
naming op and node, no fallback), and the CLI pieces the backend provides."""

from __future__ import annotations

import argparse

import pytest
from hwc.targets import load_target
from onnx import helper
from onnx_helpers import F32, model

import hwc
from hwc.backends.cpu.cli import add_bench_parser, add_build_options
from hwc.backends.cpu.target import CpuTarget
from hwc.errors import TargetError, UnsupportedError


def test_bundled_cpu_target_resolves_to_the_host():
    desc = load_target("cpu")
    assert desc["kind"] == "cpu" and desc["alignment"] == 64
    t = CpuTarget.resolve(desc)
    assert t.host and t.simd_bits in (128, 256, 512) and t.lanes == t.simd_bits // 32
    m4 = CpuTarget.resolve(desc, "thumbv7em-none-eabi", "cortex-m4")
    assert (m4.simd_bits, m4.host) == (32, False)
    assert CpuTarget.resolve(desc, cpu="x86-64-v3").simd_bits == 256


@pytest.mark.parametrize("text,msg", [
    ("kind: cpu\nsimd_bits: 100\n", "'simd_bits' must be auto or one of 32, 64, 128, 256, 512, not 100"),
    ("kind: cpu\nalignment: 48\n", "'alignment' must be a power of two >= 4, not 48"),
    ("kind: cpu\nvector_registers: 2\n", "'vector_registers' must be auto or an integer in 4..64, not 2"),
    ("kind: cpu\ncolour: red\n", "unknown key 'colour' for kind 'cpu'"),
    ("kind: cpu\ntriple: 3\n", "'triple' must be str, not 3"),
])
def test_cpu_target_errors(tmp_path, text, msg):
    p = tmp_path / "t.yaml"
    p.write_text(text)
    with pytest.raises(TargetError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        load_target(str(p))


def test_unknown_triple_is_a_target_error():
    with pytest.raises(TargetError, match="not known to LLVM"):
        CpuTarget.resolve(load_target("cpu"), "nonsense-none-none")


def test_unsupported_op_names_op_and_node():
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2], name="pool3d")
    m = model([node], [("x", F32, [1, 2, 4, 4, 4])], [("y", F32, [1, 2, 3, 3, 3])])
    with pytest.raises(UnsupportedError, match=r"MaxPool node 'pool3d': 3-d pooling") as e:
        hwc.build(m, target="cpu")
    assert e.value.items == ["MaxPool node 'pool3d': 3-d pooling (the CPU backend compiles 1-d and 2-d)"]


def test_triple_only_for_cpu_targets():
    node = helper.make_node("Relu", ["x"], ["y"])
    m = model([node], [("x", F32, [4])], [("y", F32, [4])])
    with pytest.raises(hwc.errors.UserError, match="apply to targets of kind cpu"):
        hwc.build(m, target="ref", triple="aarch64-linux-gnu")


def test_cli_pieces(tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_build_options(p)
    args = p.parse_args(["--triple", "aarch64-linux-gnu", "--cpu", "cortex-a72"])
    assert (args.triple, args.cpu) == ("aarch64-linux-gnu", "cortex-a72")
    top = argparse.ArgumentParser()
    sub = top.add_subparsers()
    add_bench_parser(sub)
    args = top.parse_args(["bench", "small_mlp", "--seconds", "0.2", "--json", str(tmp_path / "b.json")])
    assert args.fn(args) == 0
    import json

    r = json.loads((tmp_path / "b.json").read_text())
    assert r["hwc_us"] > 0 and r["ort_us"] > 0 and r["speedup"] > 0 and r["max_abs_err_vs_ref"] < 1e-4
    assert "onnxruntime" in capsys.readouterr().out
