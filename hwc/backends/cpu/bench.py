"""`hwc bench MODEL --target cpu`: the compiled model against onnxruntime and the reference.

All three run in this process on the same input, interleaved round by round (a burst of
compiled calls, a burst of onnxruntime calls, then a reference call when there is time
left), so a slower or busier moment of the machine hits all of them alike. Each is timed
the way a Python caller uses it, numpy in and numpy out:

- hwc: copy the inputs into the I/O area, call the entry point (ctypes), copy the
  outputs out. `native_us` is the entry point alone, timed in the same loop;
- onnxruntime: `InferenceSession.run` with one intra-op and one inter-op thread, all
  graph optimizations (ORT_ENABLE_ALL), sequential execution;
- reference: hwc's numpy interpreter on the same (optimized) graph.

Figures: median latency, speed-up (onnxruntime / hwc), GFLOP/s (2 x MACs / hwc time),
code size (`size model.o`: text + data) against onnxruntime's shared library, and the
bottleneck: "arithmetic" when the run reaches half the single-core ceiling (numpy's
single-thread sgemm, measured once), "memory" when streaming the weights once per run
alone needs over 20 GB/s, "overhead" otherwise (the arithmetic is too small to matter).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

_CEILING_CODE = """
import time, numpy as np
a = np.random.default_rng(0).random((384, 384), dtype=np.float32); c = np.empty_like(a)
for _ in range(5): np.matmul(a, a, out=c)
ts = []
for _ in range(30):
    t = time.perf_counter(); np.matmul(a, a, out=c); ts.append(time.perf_counter() - t)
print(2 * 384 ** 3 / sorted(ts)[len(ts) // 2] / 1e9)
"""


def sgemm_ceiling() -> float:
    """GFLOP/s of numpy's single-thread sgemm on this machine (a fresh process: one thread)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", _CEILING_CODE], capture_output=True, text=True, env=env)
    try:
        return float(r.stdout.strip())
    except ValueError:
        return float("nan")


def code_size(obj: bytes) -> int:
    """text + data bytes of an object file (binutils `size`; the file size without it)."""
    tool = shutil.which("size")
    if tool is None:
        return len(obj)
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(obj)
        f.flush()
        out = subprocess.run([tool, f.name], capture_output=True, text=True).stdout.splitlines()
    try:
        text, data = out[1].split()[:2]
        return int(text) + int(data)
    except (IndexError, ValueError):
        return len(obj)


def ort_library_size() -> int:
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    libs = sorted(capi.glob("libonnxruntime.so*"), key=lambda p: -p.stat().st_size)
    return libs[0].stat().st_size if libs else 0


def ort_session(model_bytes: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def _hwc_caller(native, inputs: dict[str, np.ndarray]):
    """A zero-validation call: inputs in, entry point, outputs out (what run() does minus checks)."""
    ins = [(native.iobuf.view[s["offset"]:s["offset"] + s["bytes"]], inputs[s["name"]].reshape(-1).view(np.uint8))
           for s in native.io if s["kind"] == "input"]
    outs = [(s["name"], native.iobuf.view[s["offset"]:s["offset"] + s["bytes"]].view(s["dtype"]).reshape(s["shape"]))
            for s in native.io if s["kind"] == "output"]
    fn, args = native.fn, native.args

    def call():
        for dst, src in ins:
            dst[:] = src
        fn(*args)
        return {name: v.copy() for name, v in outs}
    return call


def bench(model, art=None, *, seconds: float = 3.0, ref_seconds: float = 1.0, ceiling: float | None = None,
          seed: int = 0) -> dict:
    """Benchmark one model (a path or ModelProto); returns the figures as a dict."""
    import onnx

    import hwc
    from hwc.analysis import graph_macs

    proto = onnx.load(str(model)) if not isinstance(model, onnx.ModelProto) else model
    art = art or hwc.build(proto, target="cpu")
    from hwc.ref.interp import run_graph

    rng = np.random.default_rng(seed)
    feeds = {i["name"]: rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in art.inputs}
    native = art.native
    hwc_call = _hwc_caller(native, feeds)
    sess = ort_session(proto.SerializeToString())
    ort_call = lambda: sess.run(None, feeds)
    fn, args = native.fn, native.args
    # warm up and check once that the three agree
    got, ref = art.run(feeds), run_graph(art.graph, feeds)
    for _ in range(20):
        hwc_call()
        ort_call()
    t_hwc, t_nat, t_ort, t_ref = [], [], [], []
    burst = 20
    start = time.perf_counter()
    ref_spent = 0.0
    while time.perf_counter() - start < seconds or len(t_hwc) < 5 * burst:
        for _ in range(burst):
            t0 = time.perf_counter_ns()
            hwc_call()
            t1 = time.perf_counter_ns()
            fn(*args)
            t2 = time.perf_counter_ns()
            t_hwc.append(t1 - t0)
            t_nat.append(t2 - t1)
        for _ in range(burst):
            t0 = time.perf_counter_ns()
            ort_call()
            t_ort.append(time.perf_counter_ns() - t0)
        if ref_spent < ref_seconds or len(t_ref) < 3:
            t0 = time.perf_counter_ns()
            run_graph(art.graph, feeds)
            dt = time.perf_counter_ns() - t0
            t_ref.append(dt)
            ref_spent += dt / 1e9
    med = lambda ts: float(np.median(ts)) / 1e3
    macs = graph_macs(art.graph)
    h, o, r, nat = med(t_hwc), med(t_ort), med(t_ref), med(t_nat)
    ceiling = ceiling if ceiling is not None else sgemm_ceiling()
    gflops = 2 * macs / h / 1e3
    weights = art.report.get("weights_bytes", 0)
    if gflops >= 0.5 * ceiling:
        bottleneck = "arithmetic"
    elif weights / (h * 1e-6) > 20e9:
        bottleneck = "memory"
    else:
        bottleneck = "overhead"
    max_err = max(float(np.max(np.abs(got[k] - ref[k]))) if got[k].size else 0.0 for k in got)
    return {
        "model": art.graph.name, "macs": macs, "hwc_us": h, "native_us": nat, "ort_us": o, "ref_us": r,
        "speedup": o / h, "gflops": gflops, "ceiling_gflops": ceiling, "bottleneck": bottleneck,
        "code_bytes": code_size(art.files["model.o"]), "ort_lib_bytes": ort_library_size(),
        "weights_bytes": weights, "workspace_bytes": art.report["memory"]["peak_bytes"],
        "runs": {"hwc": len(t_hwc), "ort": len(t_ort), "ref": len(t_ref)}, "max_abs_err_vs_ref": max_err,
        "simd_bits": art.info["cpu"]["simd_bits"], "cpu": art.info["cpu"]["cpu"],
    }
