"""Helpers of the CPU backend tests: compile a graph, run the real object code, compare
with the reference interpreter.

Float tolerance (the issue's rtol 1e-4): rtol=1e-4 and atol=1e-4 * max(1, max|ref|),
i.e. relative to the scale of the tensor compared, as in tests/test_zoo.py (the
reference accumulates in float64; the compiled code in float32 with FMAs). int8: exact.
"""

from __future__ import annotations

import functools

import numpy as np
from hwc.targets import load_target

from hwc.backends.cpu.compiler import compile_graph
from hwc.backends.cpu.runner import NativeModel
from hwc.backends.cpu.target import CpuTarget
from hwc.frontend import import_onnx
from hwc.ref.interp import run_graph

RTOL = 1e-4


@functools.cache
def host_target(**overrides) -> CpuTarget:
    return CpuTarget.resolve({**load_target("cpu"), **overrides})


def compile_and_load(g, target: CpuTarget | None = None):
    target = target or host_target()
    build = compile_graph(g, target)
    nm = NativeModel(build.compiled.object, build.name, build.compiled.weights, build.io_spec(), build.sizes,
                     target.alignment)
    return build, nm


def run_both(g, feeds, target=None):
    """(compiled outputs, reference outputs, build); the weights must be untouched after the run."""
    build, nm = compile_and_load(g, target)
    got = nm.run(feeds, check_weights=True)
    got2 = nm.run(feeds, check_weights=True)  # a second run: no state may leak between runs
    for k in got:
        np.testing.assert_array_equal(got[k], got2[k])
    return got, run_graph(g, feeds), build


def assert_close(got: dict, ref: dict, rtol: float = RTOL) -> None:
    assert set(got) == set(ref)
    for k in ref:
        g, r = got[k], np.asarray(ref[k])
        assert g.shape == r.shape and g.dtype == r.dtype, (k, g.shape, g.dtype, r.shape, r.dtype)
        if np.issubdtype(r.dtype, np.floating):
            scale = max(1.0, float(np.nanmax(np.abs(r[np.isfinite(r)]), initial=0.0)))
            np.testing.assert_allclose(g, r, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=k)
        else:
            np.testing.assert_array_equal(g, r, err_msg=k)


def check_model(m, feeds=None, optimize: bool = False, seed: int = 0, target=None):
    """Import an ONNX model, compile it, compare with the reference on random inputs."""
    g = import_onnx(m)
    if optimize:
        from hwc.passes import optimize as opt

        g = opt(g, "cpu")[0]
    if feeds is None:
        rng = np.random.default_rng(seed)
        feeds = {n: rng.standard_normal(g.type(n).shape).astype(g.type(n).np_dtype) for n in g.inputs}
    got, ref, build = run_both(g, feeds, target)
    assert_close(got, ref)
    return build
