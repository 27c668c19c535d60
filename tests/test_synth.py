"""FPGA flow: tile.v passes yosys synthesis (default suite, fast structural check); the full
ECP5 place-and-route and bitstream (slow). Plus the `hwc hw` / `hwc synth` CLI wiring."""

from __future__ import annotations

import argparse
import json

import pytest
from hwc.hw import cli as hwcli
from hwc.hw.generate import generate
from hwc.hw.synth import synth, write_wrapper, yosys_check
from hwc.targets import load_target, tile_variant

from hwc.errors import TargetError


@pytest.fixture(scope="module")
def tile8(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth8")
    info = generate(load_target("tile8x8"), out)
    return out, info


def test_tile8x8_passes_yosys_without_errors_or_latches(tile8):
    out, info = tile8
    r = yosys_check(out)
    assert r["errors"] == 0 and r["latches"] == 0, r["log"]
    cells = r["cells"]
    # the memories are inferred as memories (not flip-flops), the arithmetic is there
    assert cells.get("$mem_v2", 0) >= 5
    assert sum(v for k, v in cells.items() if k in ("$mul", "$macc", "$macc_v2")) > 0
    assert not any("dlatch" in k.lower() for k in cells)


@pytest.mark.slow
def test_tile8x8_v2_passes_yosys_without_errors_or_latches(tmp_path):
    """The v2 tile (POST unit, depthwise mode): the same structural check (about 4 minutes)."""
    t = tile_variant(load_target("tile8x8"), post_unit=True, depthwise=True)
    generate(t, tmp_path)
    r = yosys_check(tmp_path)
    assert r["errors"] == 0 and r["latches"] == 0, r["log"]
    assert r["cells"].get("$mem_v2", 0) >= 6  # the ACC copy is a memory too
    assert not any("dlatch" in k.lower() for k in r["cells"])


@pytest.mark.slow
def test_tile8x8_with_the_depthwise_stage_passes_yosys_without_errors_or_latches(tmp_path):
    """features.dw_post (PPU.dw, its drain overlapped by the next PPU.dw: docs/tile-v2.md), on the tile8x8
    geometry: the same structural check (about 4 minutes)."""
    t = tile_variant(load_target("tile8x8"), dw_post=True)
    assert t["features"]["dw_post"]
    generate(t, tmp_path)
    r = yosys_check(tmp_path)
    assert r["errors"] == 0 and r["latches"] == 0, r["log"]
    assert not any("dlatch" in k.lower() for k in r["cells"])


def test_wrapper_keeps_every_port(tile8):
    out, info = tile8
    write_wrapper(out)
    text = (out / "synth_top.v").read_text()
    for p in info["ports"]:
        if p["name"] not in ("clk", "rst"):
            assert f".{p['name']}(" in text
    nin = sum(p["width"] for p in info["ports"] if p["dir"] == "in") - 2
    assert f"reg [{nin - 1}:0] sh;" in text


def _parser():
    p = argparse.ArgumentParser(prog="hwc")
    sub = p.add_subparsers(dest="command", required=True)
    hwcli.add_parser(sub)
    return p


def test_cli_hw_writes_files_atomically(tmp_path, capsys):
    args = _parser().parse_args(["hw", "--target", "tile8x8", "-o", str(tmp_path / "hw")])
    assert args.fn(args) == 0
    names = sorted(p.name for p in (tmp_path / "hw").iterdir())
    assert names == ["tile.json", "tile.v"], "no temporary files left behind"
    info = json.loads((tmp_path / "hw" / "tile.json").read_text())
    assert info["config_name"] == load_target("tile8x8")["derived"]["config_name"]
    assert "tile8x8" in capsys.readouterr().out or info["config_name"]
    with pytest.raises(TargetError, match="tile targets only"):
        generate(load_target("cpu"), tmp_path / "cpu")


def test_cli_synth_rejects_a_folder_without_tile_v(tmp_path):
    args = _parser().parse_args(["synth", str(tmp_path), "--device", "xc7"])
    with pytest.raises(Exception, match="hwc hw"):
        args.fn(args)


def test_synth_rejects_an_unknown_placer_or_router_before_running_a_tool(tmp_path):
    from hwc.hw.synth import SynthError

    with pytest.raises(SynthError, match="unknown nextpnr placer 'fast': choose one of static, heap, sa"):
        synth(tmp_path, "ecp5-85k", placer="fast")
    with pytest.raises(SynthError, match="unknown nextpnr router 'router3'"):
        synth(tmp_path, "ecp5-85k", router="router3")
    assert not any(tmp_path.iterdir())   # nothing written


def test_synth_takes_a_tile_build_folder(tmp_path, tile8):
    """`hwc synth` on a `hwc build --target tile8x8` folder (tile.v, model.json, no tile.json): the description is
    that of `hwc hw` for the same target (written beside tile.v); a tile.v that is not its target's is refused."""
    from hwc.hw.synth import SynthError, tile_info

    from hwc.artifact import load
    from hwc.frontend import import_onnx
    from hwc.quant.build import quantize_model
    from hwc.tile.build import build_tile
    from hwc.zoo import MODELS, random_inputs

    t = load_target("tile8x8")
    m = MODELS["small_cnn"]()
    build_tile(quantize_model(import_onnx(m), t, random_inputs(m, n=4, seed=1)), t, hdl=True).save(tmp_path / "out")
    assert load(tmp_path / "out").tile_v and not (tmp_path / "out" / "tile.json").exists()
    assert tile_info(tmp_path / "out", "out") == tile8[1]
    assert json.loads((tmp_path / "out" / "tile.json").read_text()) == tile8[1]
    (tmp_path / "out" / "tile.json").unlink()
    with open(tmp_path / "out" / "tile.v", "a") as f:
        f.write("// edited\n")
    with pytest.raises(SynthError, match="is not the tile of its model.json's target 'tile8x8'"):
        tile_info(tmp_path / "out", "out")


@pytest.mark.slow
def test_ecp5_place_and_route_tile8x8(tile8):
    """Goal of issue 6: tile8x8 on an ECP5-85F at >= 100 MHz, with a bitstream."""
    out, _ = tile8
    r = synth(out, "ecp5-85k", freq_mhz=150)
    assert (out / "tile.bit").stat().st_size > 100_000
    assert r["fmax_mhz"] >= 100, r
    res = r["resources"]
    assert 0 < res["DP16KD"] <= 208 and 0 < res["MULT18X18D"] <= 156
    assert json.loads((out / "synth.json").read_text())["fmax_mhz"] == r["fmax_mhz"]
    assert (r["seed"], r["placer"], r["router"]) == (1, "static", "router1")   # hw/synth.py's defaults


@pytest.mark.slow
def test_xc7_estimate_tile8x8(tile8):
    out, _ = tile8
    r = synth(out, "xc7")
    assert r["resources"]["DSP48E1"] > 0 and r["resources"]["LUT"] > 0


def test_hardware_elaborates_each_v2_feature_only_when_enabled(tmp_path):
    """Tile v2 (docs/tile-v2.md) is generated per target: the POST unit (its ACC copy, its busy bit on
    dbg_unit_busy) and the depthwise mode (the line shift register) appear in tile.v only when their
    feature is on, independently; with both off the tile is v1 (the whole-tile tests check its timing)."""
    import json

    t = load_target("tile8x8")
    marks = {"post_unit": ("acc_post", "post_busy_q"), "depthwise": ("sr_clr1", "t0_dw")}
    for post in (False, True):
        for dw in (False, True):
            out = tmp_path / f"p{int(post)}d{int(dw)}"
            generate(tile_variant(t, post_unit=post, depthwise=dw), out)
            text = (out / "tile.v").read_text()
            for feat, on in (("post_unit", post), ("depthwise", dw)):
                for name in marks[feat]:
                    assert (name in text) == on, (feat, on, name)
            ports = {q["name"]: q["width"] for q in json.loads((out / "tile.json").read_text())["ports"]}
            assert ports["dbg_unit_busy"] == (4 if post else 3)
