"""Every zoo model (MLPerf-Tiny shapes), compiled for the host, against the float reference
(rtol 1e-4), imported as is and after the graph optimizer; int8 builds bit-exact with the
int8 reference, on the int8 tensors themselves."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import assert_close, compile_and_load
from hwc.targets import load_target

import hwc
from hwc.backends.cpu.compiler import compile_graph
from hwc.frontend import import_onnx
from hwc.lower.memplan import Interval, check_plan, intervals_of
from hwc.passes import optimize
from hwc.quant.build import quantize_model
from hwc.ref.interp import run_graph
from hwc.zoo import MODELS, random_inputs


@pytest.mark.parametrize("optimized", [False, True], ids=["imported", "optimized"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_float(name, optimized):
    kwargs = {"softmax": False} if name in ("resnet8", "ds_cnn", "mobilenet_v1_025") else {}
    m = MODELS[name](**kwargs)
    g = import_onnx(m)
    if optimized:
        g = optimize(g, "cpu")[0]
    x = random_inputs(m, n=2, seed=1)
    build, nm = compile_and_load(g)
    for i in range(2):
        feeds = {k: v[i] for k, v in x.items()}
        assert_close(nm.run(feeds, check_weights=True), run_graph(g, feeds))
    mem = build.plan
    assert mem.lower_bound_bytes <= mem.workspace_bytes <= mem.naive_bytes
    ivs = [Interval(i.name, -(-i.size // 64) * 64, i.start, i.end)
           for i in intervals_of(build.program, mem.order)]
    check_plan(mem.offsets, ivs)


def test_api_build_run_and_report():
    m = MODELS["resnet8"]()
    art = hwc.build(m, target="cpu")
    x = {k: v[0] for k, v in random_inputs(m, seed=2).items()}
    assert_close(art.run(x), art.run(x, engine="reference"))
    mem = art.report["memory"]
    assert {"peak_bytes", "lower_bound_bytes", "naive_bytes"} <= set(mem)
    assert mem["lower_bound_bytes"] <= mem["peak_bytes"] <= mem["naive_bytes"]
    assert art.report["weights_bytes"] == len(art.files["weights.bin"])


def _int8_core(g):
    """The int8 graph cut before its final Dequantize (+ float tail): int8 outputs."""
    g = g.copy()
    prod = g.producers()
    outs = []
    for o in g.outputs:
        n = prod[o]
        while n.op != "Dequantize":
            n = prod[n.inputs[0]]
        outs.append(n.inputs[0])
    keep = []
    needed = set(outs)
    for n in reversed(g.nodes):
        if any(o in needed for o in n.outputs):
            keep.append(n)
            needed.update(i for i in n.inputs if i)
    g.nodes = list(reversed(keep))
    g.outputs = outs
    g.prune_values()
    return g


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_int8_bit_exact(name):
    m = MODELS[name]()
    q = quantize_model(import_onnx(m), load_target("cpu"), random_inputs(m, n=4, seed=3), None)
    core = _int8_core(q)
    assert all(core.type(o).dtype == "int8" for o in core.outputs)
    build, nm = compile_and_load(core)
    x = random_inputs(m, n=2, seed=5)
    for i in range(2):
        feeds = {k: v[i] for k, v in x.items()}
        got, ref = nm.run(feeds, check_weights=True), run_graph(core, feeds)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])


def test_int8_build_through_the_api():
    m = MODELS["small_cnn"]()
    art = hwc.build(m, target="cpu", calib=random_inputs(m, n=8, seed=3))
    assert art.info["int8"]
    x = random_inputs(m, n=3, seed=4)
    got, ref = art.run(x), art.run(x, engine="reference")
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])


def test_int8_global_max_pool():
    """The quantizer keeps GlobalMaxPool in int8 (a max moves codes unchanged): the CPU backend
    compiles it, bit-exact with the int8 reference."""
    from onnx import helper
    from onnx_helpers import F32, model

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalMaxPool", ["c"], ["y"])]
    m = model(nodes, [("x", F32, [1, 3, 5, 7])], [("y", F32, [1, 20, 1, 1])],
              {"W": (rng.standard_normal((20, 3, 3, 3)) * 0.3).astype(np.float32)})
    art = hwc.build(m, target="cpu", calib={"x": rng.standard_normal((8, 1, 3, 5, 7)).astype(np.float32)})
    assert "GlobalMaxPool" in {n.op for n in art.graph.nodes}
    x = {"x": rng.standard_normal((3, 1, 3, 5, 7)).astype(np.float32)}
    got, ref = art.run(x), art.run(x, engine="reference")
    np.testing.assert_array_equal(got["y"], ref["y"])


def test_compiled_code_is_vectorized():
    """The optimized IR of a conv model carries vector FMAs of the target's width, and the
    object calls nothing outside itself."""
    g = optimize(import_onnx(MODELS["resnet8"]()), "cpu")[0]
    from cpu_helpers import host_target

    t = host_target()
    build = compile_graph(g, t)
    ir = build.compiled.optimized_ir
    assert f"<{t.lanes} x float>" in ir
    assert f"llvm.fma.v{t.lanes}f32" in ir
    assert "declare" not in "\n".join(line for line in ir.splitlines() if "llvm." not in line)


def test_only_used_kernels_are_emitted():
    """One specialized function per instruction, nothing else: a Gemm-only model has no
    convolution, pooling or transcendental code."""
    g = optimize(import_onnx(MODELS["small_mlp"]()), "cpu")[0]
    from cpu_helpers import host_target

    build = compile_graph(g, host_target())
    assert [k.split("_", 2)[2] for k in build.compiled.kernels] == ["gemm", "gemm"]
    ir = build.compiled.ir_text
    assert "double" not in ir and "hwc_k2" not in ir
