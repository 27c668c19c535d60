"""`hwc opt` (hwc.passes.cli) and the pass options for `hwc build`."""

import argparse

import onnx
import pytest
from onnx_helpers import ort_run
from passes_helpers import zoo_model
from rich.console import Console

from hwc.errors import UserError
from hwc.passes.cli import add_parser, add_pass_options, pass_options
from hwc.zoo import random_inputs


def run_opt(*argv):
    p = argparse.ArgumentParser(prog="hwc")
    add_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(["opt", *argv])
    con = Console(record=True, width=160)
    assert args.fn(args, console=con) == 0
    return con.export_text()


@pytest.fixture(scope="module")
def resnet8_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "resnet8.onnx"
    onnx.save(zoo_model("resnet8"), path)
    return path


def test_opt_writes_valid_onnx_and_prints_the_table(resnet8_file, tmp_path):
    out = tmp_path / "r8_opt.onnx"
    text = run_opt(str(resnet8_file), "-o", str(out), "--target", "tile8x8")
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert "fuse/fold_batchnorm #1" in text and "total" in text and "nodes: 29 -> 18" in text
    assert "merge_fc declined 1x [gemm0]: no other Gemm/MatMul" in text
    assert f"wrote {out}" in text
    feeds = {k: v[0] for k, v in random_inputs(zoo_model("resnet8"), 1).items()}
    ref = ort_run(zoo_model("resnet8"), feeds)["output"]
    assert abs(ort_run(m, feeds)["output"] - ref).max() <= 1e-5 * abs(ref).max()


def test_opt_custom_domain_dump_stop_and_prune(resnet8_file, tmp_path):
    out = tmp_path / "r8.onnx"
    text = run_opt(str(resnet8_file), "-o", str(out), "--custom-domain", "--dump-after", "fold_batchnorm",
                   "--stop-after", "fuse_activation", "--prune", "0.0")
    assert "// after pass fuse/fold_batchnorm round 0 (changed)" in text
    assert "stopped after pass 'fuse_activation' (--stop-after)" in text
    assert {n.domain for n in onnx.load(out).graph.node} == {"", "hwc"}
    text = run_opt(str(resnet8_file), "-o", str(out), "--prune", "0.3")
    assert "prune: zeroed the smallest 30.0% of 10 weight tensors" in text


def test_opt_errors_are_user_errors(resnet8_file, tmp_path):
    with pytest.raises(UserError, match="--stop-after 'fuse_elementwise': no pass of that name"):
        run_opt(str(resnet8_file), "-o", str(tmp_path / "x.onnx"), "--target", "tile8x8",
                "--stop-after", "fuse_elementwise")
    with pytest.raises(UserError, match="no such file"):
        run_opt(str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "x.onnx"))


def test_pass_options_for_hwc_build():
    p = argparse.ArgumentParser()
    add_pass_options(p)
    assert pass_options(p.parse_args([])) == {"dump_after": None, "stop_after": None, "prune": 0.0}
    args = p.parse_args(["--dump-after", "cse", "--stop-after", "dce", "--prune", "0.5"])
    assert pass_options(args) == {"dump_after": "cse", "stop_after": "dce", "prune": 0.5}
