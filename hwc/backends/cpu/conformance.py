"""ONNX's backend node test cases through the compiled CPU path.

Every case the importer supports (hwc.frontend.conformance) and whose graph the CPU
backend compiles is compiled to an object file, linked, run on the case's inputs and
compared with ONNX's expected outputs using the suite's own tolerances (rtol 1e-3,
atol 1e-7 unless the case says otherwise). Cases whose graph the backend does not
compile are counted as "not compiled", with the reason (an UnsupportedError).

    python -m hwc.backends.cpu.conformance [-k FILTER] [-v]
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx

from hwc.errors import UnsupportedError, UserError
from hwc.frontend.conformance import attribute_slot_inputs, compare, iter_cases, split_inputs


@dataclass
class CpuCaseResult:
    name: str
    status: str  # passed, failed, not-imported, not-compiled, crash
    detail: str = ""


def run_case_cpu(case, target) -> CpuCaseResult:
    from hwc.backends.cpu.compiler import compile_graph
    from hwc.backends.cpu.lowering import check_supported
    from hwc.backends.cpu.runner import NativeModel
    from hwc.frontend.onnx_import import import_onnx

    try:
        model = onnx.load(str(case.model_path))
        data_sets = case.data_sets(model)
    except Exception as e:
        return CpuCaseResult(case.name, "crash", f"cannot load: {e}")
    rtol, atol = case.tolerances()
    slots = attribute_slot_inputs(model)
    for k, (inputs, expected) in enumerate(data_sets):
        feeds, bind, shapes = split_inputs(model, inputs, slots)
        try:
            g = import_onnx(model, input_shapes=shapes, bind=bind)
        except UserError as e:
            return CpuCaseResult(case.name, "not-imported", str(e).splitlines()[0])
        except Exception as e:
            return CpuCaseResult(case.name, "crash", f"import: {e}")
        try:
            check_supported(g)
        except UnsupportedError as e:
            return CpuCaseResult(case.name, "not-compiled", "; ".join(e.items) or str(e))
        try:
            build = compile_graph(g, target)
            nm = NativeModel(build.compiled.object, build.name, build.compiled.weights, build.io_spec(),
                             build.sizes, target.alignment)
            got = nm.run({n: feeds[n] for n in g.inputs}, check_weights=True)
        except UnsupportedError as e:
            return CpuCaseResult(case.name, "not-compiled", "; ".join(e.items) or str(e))
        except Exception as e:
            return CpuCaseResult(case.name, "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        for vi, ref in zip(model.graph.output, expected):
            out = got.get(vi.name)
            if out is None and vi.name in g.inputs:
                out = feeds[vi.name]
            why = compare(out, ref, rtol, atol)
            if why:
                return CpuCaseResult(case.name, "failed", f"data set {k}, output {vi.name!r}: {why}")
    return CpuCaseResult(case.name, "passed")


@dataclass
class CpuSummary:
    results: list[CpuCaseResult] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        return dict(Counter(r.status for r in self.results))

    def cases(self, status: str) -> list[CpuCaseResult]:
        return [r for r in self.results if r.status == status]


def run_suite_cpu(pattern: str = "", every: int = 1, root=None) -> CpuSummary:
    """Run the node cases (every `every`-th one whose name contains `pattern`)."""
    from hwc.backends.cpu.target import CpuTarget
    from hwc.targets import load_target

    target = CpuTarget.resolve(load_target("cpu"))
    t0 = time.perf_counter()
    s = CpuSummary()
    for i, case in enumerate(iter_cases(root, pattern)):
        if i % every:
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            s.results.append(run_case_cpu(case, target))
    s.seconds = time.perf_counter() - t0
    return s


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser("python -m hwc.backends.cpu.conformance")
    p.add_argument("-k", "--filter", default="")
    p.add_argument("-v", "--verbose", action="count", default=0)
    args = p.parse_args(argv)
    s = run_suite_cpu(args.filter)
    for status in ("failed", "crash") + (("not-compiled",) if args.verbose else ()):
        for r in s.cases(status):
            print(f"{status}: {r.name}: {r.detail if args.verbose > 1 else r.detail.splitlines()[0][:300]}")
    print(s.counts(), f"({s.seconds:.1f} s)")
    return 1 if s.cases("failed") or s.cases("crash") else 0


if __name__ == "__main__":
    raise SystemExit(main())
