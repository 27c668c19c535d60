"""`make bench`: run the benchmarks and write their sections of BENCHMARKS.md.

Each benchmark is a function returning (section title, markdown body); BENCHMARKS lists
them. A run rewrites only the sections it produced ("## TITLE" up to the next "## "),
so sections written by other scripts stay as they are.

    python benchmarks/run.py            # every benchmark
    python benchmarks/run.py cpu        # only those whose title contains "cpu"
    python benchmarks/run.py --print    # print the sections, do not touch BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import math
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"

#: The CPU benchmark's models: the zoo's MLPerf Tiny shapes (with their softmax) and two small ones.
CPU_MODELS = ("resnet8", "ds_cnn", "mobilenet_v1_025", "fc_autoencoder", "small_mlp", "small_cnn")


def bench_cpu(seconds: float = 4.0) -> tuple[str, str]:
    """hwc's compiled CPU bundle vs onnxruntime vs hwc's numpy reference (hwc.backends.cpu.bench)."""
    import onnxruntime

    import hwc
    from hwc.backends.cpu.bench import bench, ort_library_size, sgemm_ceiling
    from hwc.zoo import MODELS

    ceiling = sgemm_ceiling()
    rows = []
    for name in CPU_MODELS:
        m = MODELS[name]()
        art = hwc.build(m, target="cpu")
        r = bench(m, art, seconds=seconds, ceiling=ceiling)
        rows.append((name, r))
        print(f"  {name}: hwc {r['hwc_us']:.1f} us, onnxruntime {r['ort_us']:.1f} us ({r['speedup']:.2f}x)",
              file=sys.stderr)
    geo = math.exp(sum(math.log(r["speedup"]) for _, r in rows) / len(rows))
    cpu = rows[0][1]
    lines = [
        f"hwc's compiled bundle (`hwc build --target cpu`: model.o + model.h + weights.bin) against "
        f"onnxruntime {onnxruntime.__version__} (CPU provider, one intra-op and one inter-op thread, "
        f"ORT_ENABLE_ALL, sequential) and hwc's numpy reference, batch 1, float32. Machine: "
        f"{platform.machine()}, LLVM CPU `{cpu['cpu']}`, kernels written for {cpu['simd_bits']}-bit vectors; "
        f"single-core ceiling {ceiling:.0f} GFLOP/s (numpy's single-thread sgemm on this machine).",
        "",
        "Median latency over interleaved bursts (20 compiled calls, 20 onnxruntime calls, a reference call), "
        f"{seconds:.0f} s per model; each side is timed as a Python caller uses it: numpy inputs in, numpy "
        "outputs out (for hwc: copy into the I/O area, ctypes call, copy out; the entry point alone is the "
        "\"native\" column). Speed-up = onnxruntime / hwc. GFLOP/s = 2 x MACs / hwc time. Code: `size "
        "model.o` (text + data) vs onnxruntime's shared library "
        f"({ort_library_size() / 1e6:.1f} MB).",
        "",
        "| model | MACs | hwc µs | native µs | onnxruntime µs | speed-up | reference µs | GFLOP/s | "
        "bottleneck | model.o | weights | workspace |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['macs']:,} | {r['hwc_us']:.1f} | {r['native_us']:.1f} | {r['ort_us']:.1f} | "
            f"**{r['speedup']:.2f}x** | {r['ref_us']:,.0f} | {r['gflops']:.1f} | {r['bottleneck']} | "
            f"{r['code_bytes']:,} B | {r['weights_bytes']:,} B | {r['workspace_bytes']:,} B |")
    worst = min(rows, key=lambda t: t[1]["speedup"])
    lines += [
        "",
        f"Geometric-mean speed-up over onnxruntime: **{geo:.2f}x** (target >= 2x); lowest: {worst[0]} "
        f"{worst[1]['speedup']:.2f}x (target: none below 0.9x).",
        "",
        "Bottleneck (how it is named): *arithmetic* when the run reaches half the single-core ceiling; "
        "*memory* when streaming the weights once per run alone needs over 20 GB/s; *overhead* otherwise, "
        "where the arithmetic is too small to matter and what remains is the call itself (ctypes, copying "
        "inputs and outputs). Per model: the convolution models are arithmetic-bound (register-blocked "
        "GEMM micro-kernels near the FMA peak; depthwise layers are load-bound); the FC autoencoder "
        "streams ~1 MB of weights from L2 per run; the two small models take well under a microsecond "
        "in the entry point, the rest of their time is the Python call.",
        "",
        "```",
        "make bench                       # this section (benchmarks/run.py cpu)",
        "hwc bench resnet8 --target cpu   # one model (a zoo name or an .onnx file)",
        "```",
    ]
    return "CPU", "\n".join(lines)


BENCHMARKS: list[Callable[[], tuple[str, str]]] = [bench_cpu]


def replace_section(doc: str, title: str, body: str) -> str:
    """`doc` with section '## title' replaced (or appended), other sections untouched."""
    block = f"## {title}\n\n{body.strip()}\n"
    pat = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pat.search(doc):
        return pat.sub(lambda _: block + "\n", doc, count=1).rstrip() + "\n"
    return doc.rstrip() + "\n\n" + block


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("only", nargs="*", help="run only benchmarks whose name contains one of these")
    ap.add_argument("--print", action="store_true", help="print the sections instead of writing BENCHMARKS.md")
    args = ap.parse_args(argv)
    chosen = [f for f in BENCHMARKS if not args.only or any(o.lower() in f.__name__.lower() for o in args.only)]
    doc = DOC.read_text() if DOC.exists() else "# hwc benchmarks\n\nEach section gives the commands that produce " \
                                                  "its numbers.\n"
    for fn in chosen:
        print(f"running {fn.__name__} ...", file=sys.stderr)
        title, body = fn()
        if args.print:
            print(f"## {title}\n\n{body}\n")
        else:
            doc = replace_section(doc, title, body)
    if not args.print:
        DOC.write_text(doc)
        print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
