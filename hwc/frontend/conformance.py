"""Conformance of the ONNX importer and the reference interpreter against ONNX's own
backend node test suite.

onnx >= 1.23 wheels no longer ship the node test data (``onnx/backend/test/data/node``),
only the Python generators that made it. `ensure_node_data` runs the generators of the
``node`` kind in-process (about 1,900 cases, 5-10 s, once) and writes them to a cache
folder in the layout onnx used to ship::

    <root>/<case name>/model.onnx
    <root>/<case name>/test_data_set_<k>/input_<i>.pb, output_<j>.pb

The root is ``$HWC_ONNX_TESTDATA`` if set, else ``~/.cache/hwc/onnx-node-tests-<onnx
version>``. A stamp file (``.hwc-stamp.json``) marks a complete folder; without it the
folder is regenerated (into a temporary folder, then renamed, so a half-written cache is
never used). A folder without the stamp that already holds ``test_*/model.onnx`` cases
(onnx's own ``data/node`` from an older wheel) is used as it is.

How a case runs (`run_case`):

- the inputs of ``test_data_set_*`` are read; integer (int32/int64) graph inputs are
  bound as constants, ``import_onnx(model, bind={...})``: in node tests they feed
  attribute-like slots (Reshape's shape, Slice's starts, Pad's pads, ...) that hwc
  folds into attributes at import. So are the few non-integer inputs that hwc also
  takes as build-time parameters (`ATTRIBUTE_SLOTS`: Clip's min/max, Pad's
  constant_value, Dropout's ratio/training_mode, Range's operands, Resize's and Upsample's
  roi/scales/sizes). Every other input
  stays a run-time input, its shape taken from the data;
- the model is imported, run with `hwc.ref.interp.run_graph`, and every output compared
  with the expected one as onnx's backend runner does: same shape, same dtype, and
  ``assert_allclose(rtol=1e-3, atol=1e-7)``: the tolerances every node case carries in
  onnx 1.23 (its runner only widens rtol for bfloat16 outputs, a dtype hwc does not
  have, and per-test overrides are the business of each backend, not of the suite); a
  case folder's ``data.json`` may override them, as in onnx's loader. Integer and bool
  outputs must be equal.

Classification:

- ``passed``: imported, ran, every output matches;
- ``failed``: imported and ran but an output differs (shape, dtype or values): a wrong
  answer, always a bug;
- ``unsupported``: the importer raised a `UserError`: the clean rejection of an op,
  attribute, dtype or input kind hwc does not handle. It should be an
  `UnsupportedError`: every suite model is valid, so a `ModelError` there is a wrong
  diagnosis (`Summary.misdiagnosed`). ``supported`` counts every other case;
- ``crash``: anything else escaped (import, verifier, interpreter): a bug to fix.

Run it::

    python -m hwc.frontend.conformance            # counts and the per-op table
    python -m hwc.frontend.conformance -v         # full tracebacks of failed/crashed cases
    python -m hwc.frontend.conformance -vv        # also every unsupported case and why
    python -m hwc.frontend.conformance -k gather  # only cases whose name contains 'gather'

``tests/test_conformance.py`` runs the whole suite (about 2 s, plus about 8 s the first
time to generate the data) and asserts no crash, no failure, no misdiagnosis and a floor
on the supported count.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from hwc.errors import UnsupportedError, UserError

STAMP = ".hwc-stamp.json"
ENV_VAR = "HWC_ONNX_TESTDATA"
#: onnx's backend runner defaults for node cases (onnx/backend/test/runner).
RTOL, ATOL = 1e-3, 1e-7
STATUSES = ("passed", "failed", "unsupported", "crash")


# ---- the data -----------------------------------------------------------------------------
def default_root() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/hwc").expanduser() / f"onnx-node-tests-{onnx.__version__}"


def _is_complete(root: Path) -> bool:
    if (root / STAMP).is_file():
        return True
    return root.is_dir() and any(root.glob("test_*/model.onnx"))


def ensure_node_data(root: str | os.PathLike | None = None) -> Path:
    """The folder of node test cases, generated from onnx's generators the first time."""
    root = Path(root) if root is not None else default_root()
    if _is_complete(root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".tmp-", dir=root.parent))
    try:
        n = _write_node_cases(tmp)
        (tmp / STAMP).write_text(json.dumps({"onnx": onnx.__version__, "cases": n}) + "\n")
        if root.is_dir() and not any(root.iterdir()):
            root.rmdir()
        try:
            os.rename(tmp, root)
        except OSError:
            if not _is_complete(root):  # else a concurrent run won the race: use its data
                raise RuntimeError(
                    f"cannot write the ONNX node test data to {root}: it exists, is not empty "
                    f"and holds no test cases. Empty it, or set ${ENV_VAR} to another "
                    f"folder.") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _write_node_cases(out: Path) -> int:
    """Run onnx's node test generators and write each case; returns the number of cases."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    for case in cases:
        d = out / case.name
        d.mkdir()
        (d / "model.onnx").write_bytes(case.model.SerializeToString())
        if (case.rtol, case.atol) != (RTOL, ATOL):
            (d / "data.json").write_text(json.dumps({"rtol": case.rtol, "atol": case.atol}))
        g = case.model.graph
        for k, (inputs, outputs) in enumerate(case.data_sets):
            ds = d / f"test_data_set_{k}"
            ds.mkdir()
            for j, v in enumerate(inputs):
                (ds / f"input_{j}.pb").write_bytes(_to_proto(v, g.input[j]).SerializeToString())
            for j, v in enumerate(outputs):
                (ds / f"output_{j}.pb").write_bytes(_to_proto(v, g.output[j]).SerializeToString())
    return len(cases)


def _to_proto(value, vi: onnx.ValueInfoProto):
    """Serialize one test value the way onnx's cmd_tools did (by the declared type)."""
    t = vi.type
    if t.HasField("map_type"):
        return numpy_helper.from_dict(value, vi.name)
    if t.HasField("sequence_type"):
        return numpy_helper.from_list(value, vi.name)
    if t.HasField("optional_type"):
        return numpy_helper.from_optional(value, vi.name)
    if isinstance(value, onnx.TensorProto):
        return value
    return numpy_helper.from_array(value, vi.name)


def _load_value(path: str, t: onnx.TypeProto):
    data = Path(path).read_bytes()
    if t.HasField("sequence_type"):
        return numpy_helper.to_list(onnx.SequenceProto.FromString(data))
    if t.HasField("optional_type"):
        return numpy_helper.to_optional(onnx.OptionalProto.FromString(data))
    if t.HasField("map_type"):
        return numpy_helper.to_dict(onnx.MapProto.FromString(data))
    return numpy_helper.to_array(onnx.TensorProto.FromString(data))


# ---- the cases ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    dir: Path

    @property
    def model_path(self) -> Path:
        return self.dir / "model.onnx"

    def tolerances(self) -> tuple[float, float]:
        f = self.dir / "data.json"
        if f.is_file():
            d = json.loads(f.read_text())
            return float(d.get("rtol", RTOL)), float(d.get("atol", ATOL))
        return RTOL, ATOL

    def data_sets(self, model: onnx.ModelProto) -> list[tuple[list, list]]:
        """[(inputs, expected outputs)] per test_data_set, in graph input/output order."""
        sets = []
        for ds in sorted(glob.glob(str(self.dir / "test_data_set_*"))):
            n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
            n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
            ins = [_load_value(os.path.join(ds, f"input_{i}.pb"), model.graph.input[i].type)
                   for i in range(n_in)]
            outs = [_load_value(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type)
                    for i in range(n_out)]
            sets.append((ins, outs))
        return sets


def iter_cases(root: str | os.PathLike | None = None, pattern: str = "") -> Iterator[Case]:
    root = ensure_node_data(root)
    for d in sorted(root.iterdir()):
        if (d / "model.onnx").is_file() and pattern in d.name:
            yield Case(d.name, d)


# ---- running one case ---------------------------------------------------------------------
@dataclass
class CaseResult:
    name: str
    op: str                  # the op under test
    ops: tuple[str, ...]     # every op type in the case's graph
    status: str              # one of STATUSES
    detail: str = ""
    error: str = ""          # the exception class, for unsupported and crash


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def _op_under_test(name: str, model: onnx.ModelProto, by_name: dict[str, str]) -> str:
    base = _EXPANDED.sub("", name)
    if base != name and base in by_name:
        return by_name[base]
    ops = [n.op_type for n in model.graph.node]
    if len(set(ops)) == 1:
        return ops[0]
    real = [o for o in ops if o not in ("Constant", "Identity")]
    return real[-1] if real else ops[-1]


#: Non-integer inputs that hwc takes as build-time parameters (attributes), by op and
#: input index: bound as constants like the integer inputs.
ATTRIBUTE_SLOTS: dict[str, tuple[int, ...]] = {
    "Clip": (1, 2), "Pad": (2,), "Dropout": (1, 2), "Range": (0, 1, 2),
    "Resize": (1, 2, 3), "Upsample": (1,),
}


def attribute_slot_inputs(model: onnx.ModelProto) -> set[str]:
    """Names of the graph values that feed an ATTRIBUTE_SLOTS input of some node."""
    return {n.input[i] for n in model.graph.node for i in ATTRIBUTE_SLOTS.get(n.op_type, ())
            if i < len(n.input) and n.input[i]}


def split_inputs(model, inputs, slots) -> tuple[dict, dict, dict]:
    """A test case's inputs as (feeds, bind, shapes): integer inputs and those feeding
    attribute-like slots are bound as constants (see the module docstring), the rest fed."""
    feeds, bind, shapes = {}, {}, {}
    for vi, v in zip(model.graph.input, inputs):
        if not isinstance(v, np.ndarray):
            continue  # sequences, maps, optionals: the importer rejects the input
        shapes[vi.name] = v.shape
        if v.dtype in (np.int32, np.int64) or vi.name in slots:
            bind[vi.name] = v
        else:
            feeds[vi.name] = v
    return feeds, bind, shapes


def run_case(case: Case, op: str = "") -> CaseResult:
    """Import and run one case with the reference interpreter; never raises."""
    from hwc.frontend.onnx_import import import_onnx
    from hwc.ref.interp import run_graph

    try:
        model = onnx.load(str(case.model_path))
    except Exception as e:  # a broken cache is a crash of the harness, say so
        return CaseResult(case.name, op or "?", (), "crash", f"cannot load model: {e}")
    ops = tuple(sorted({n.op_type for n in model.graph.node}))
    op = op or _op_under_test(case.name, model, {})
    res = lambda status, detail="", error="": CaseResult(case.name, op, ops, status, detail, error)
    try:
        data_sets = case.data_sets(model)
    except Exception as e:
        return res("crash", f"cannot load test data: {type(e).__name__}: {e}")
    rtol, atol = case.tolerances()
    slots = attribute_slot_inputs(model)
    for k, (inputs, expected) in enumerate(data_sets):
        feeds, bind, shapes = split_inputs(model, inputs, slots)
        try:
            g = import_onnx(model, input_shapes=shapes, bind=bind)
        except UserError as e:
            kind = "" if isinstance(e, UnsupportedError) else f"{type(e).__name__}: "
            why = " ".join(line.strip() for line in str(e).splitlines())
            return res("unsupported", kind + why, type(e).__name__)
        except Exception as e:
            return res("crash", f"import: {type(e).__name__}: {e}\n{traceback.format_exc()}",
                       type(e).__name__)
        try:
            got = run_graph(g, {n: feeds[n] for n in g.inputs})
        except Exception as e:
            return res("crash", f"run: {type(e).__name__}: {e}\n{traceback.format_exc()}",
                       type(e).__name__)
        for vi, ref in zip(model.graph.output, expected):
            why = compare(got.get(vi.name), ref, rtol, atol)
            if why:
                return res("failed", f"data set {k}, output {vi.name!r}: {why}")
    return res("passed")


def compare(out, ref, rtol: float = RTOL, atol: float = ATOL) -> str:
    """Why `out` does not match `ref` as onnx's runner checks it, or '' when it does."""
    if out is None:
        return "not produced"
    if not isinstance(ref, np.ndarray):
        return f"expected a {type(ref).__name__}, got a tensor"
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    if out.dtype != ref.dtype:
        return f"dtype {out.dtype}, expected {ref.dtype}"
    if np.issubdtype(ref.dtype, np.floating):
        if np.allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True):
            return ""
        bad = ~np.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {ref.size} values differ, e.g. at {list(i)}: "
                f"{out[i]!r} vs expected {ref[i]!r}")
    if np.array_equal(out, ref):
        return ""
    bad = out != ref
    i = tuple(int(x) for x in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {ref.size} values differ, e.g. at {list(i)}: "
            f"{out[i]!r} vs expected {ref[i]!r}")


# ---- the whole suite ----------------------------------------------------------------------
@dataclass
class Summary:
    results: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def found(self) -> int:
        return len(self.results)

    @property
    def supported(self) -> int:
        return self.found - self.count("unsupported")

    @property
    def passed(self) -> int:
        return self.count("passed")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def crashed(self) -> int:
        return self.count("crash")

    def counts(self) -> dict[str, int]:
        return {"found": self.found, "supported": self.supported, "passed": self.passed,
                "failed": self.failed, "crashed": self.crashed}

    def cases(self, status: str) -> list[CaseResult]:
        return [r for r in self.results if r.status == status]

    def misdiagnosed(self) -> list[CaseResult]:
        """Rejections that are not an UnsupportedError: every suite model is valid, so a
        ModelError ('your model is invalid') there is a wrong diagnosis."""
        return [r for r in self.cases("unsupported") if r.error != "UnsupportedError"]

    def by_op(self) -> dict[str, Counter]:
        """Op under test -> Counter of statuses (plus 'cases')."""
        table: dict[str, Counter] = {}
        for r in self.results:
            c = table.setdefault(r.op, Counter())
            c["cases"] += 1
            c[r.status] += 1
        return dict(sorted(table.items()))

    def unsupported_ops(self) -> list[tuple[str, int]]:
        """ONNX ops in the suite that hwc has no converter for, with how many cases use
        them, most used first."""
        from hwc.frontend.onnx_import import CONVERTERS

        n = Counter(o for r in self.results for o in r.ops if o not in CONVERTERS)
        return sorted(n.items(), key=lambda kv: (-kv[1], kv[0]))


def run_suite(root: str | os.PathLike | None = None, pattern: str = "") -> Summary:
    """Run every node case (whose name contains `pattern`) and classify it."""
    t0 = time.perf_counter()
    cases = list(iter_cases(root, pattern))
    summary = Summary()
    by_name: dict[str, str] = {}
    for case in cases:  # names sort so that a base case comes before its _expanded forms
        try:
            model = onnx.load(str(case.model_path), load_external_data=False)
            op = _op_under_test(case.name, model, by_name)
        except Exception:
            op = ""
        by_name[case.name] = op
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            summary.results.append(run_case(case, op))
    summary.seconds = time.perf_counter() - t0
    return summary


# ---- CLI ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    import argparse

    from rich.console import Console
    from rich.table import Table

    p = argparse.ArgumentParser("python -m hwc.frontend.conformance",
                                description="Run ONNX's backend node test suite through hwc's "
                                            "importer and reference interpreter.")
    p.add_argument("-k", "--filter", default="", help="only cases whose name contains this")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="-v: full details of failed and crashed cases; -vv: list unsupported "
                        "cases and why too")
    p.add_argument("--root", default=None,
                   help=f"data folder (default: ${ENV_VAR}, else under ~/.cache/hwc)")
    args = p.parse_args(argv)
    con = Console()
    s = run_suite(args.root, args.filter)

    t = Table(title="ONNX node tests by op under test")
    for col in ("op", "cases", "supported", "passed", "failed", "crash"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for op, c in s.by_op().items():
        sup = c["cases"] - c["unsupported"]
        style = "red" if c["failed"] or c["crash"] else ("dim" if not sup else None)
        t.add_row(op, str(c["cases"]), str(sup), str(c["passed"]), str(c["failed"]),
                  str(c["crash"]), style=style)
    con.print(t)
    ops = s.unsupported_ops()
    con.print(f"ONNX ops in the suite without an hwc converter ({len(ops)}): "
              + ", ".join(f"{o} ({n})" for o, n in ops))
    for status in ("failed", "crash") + (("unsupported",) if args.verbose >= 2 else ()):
        cases = s.cases(status)
        if cases:
            con.print(f"\n[bold]{status}[/bold] ({len(cases)}):")
            for r in cases:
                full = args.verbose and status != "unsupported"
                detail = r.detail if full else r.detail.splitlines()[0]
                con.print(f"  {r.name}: {detail}", markup=False, highlight=False, soft_wrap=True)
    counts = "  ".join(f"{k} {v}" for k, v in s.counts().items())
    con.print(f"\n{counts}  ({s.seconds:.1f} s)")
    return 1 if s.failed or s.crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
