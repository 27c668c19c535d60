"""The accuracy search (`hwc quant-search`): measure quantization configurations, pick one.

Accuracy is measured, not assumed. Every candidate configuration (`QuantConfig`) is
quantized from the calibration data and run by the int8 reference on the evaluation
data; its outputs are compared with the float model's on the same inputs:

- with `labels` in the evaluation data: top-1 accuracy (argmax of the first output);
  the loss is float accuracy - int8 accuracy;
- without: top-1 agreement with the float model (same argmax), loss = 1 - agreement;
- always: the output SQNR in dB, 10 log10(sum y_float^2 / sum (y_float - y_int8)^2).

The search is staged (a full grid would be the product of every knob):
  1. range method x weight granularity: minmax, percentile 99.99 and 99.999, entropy,
     mse, each per-channel and per-tensor; then the best of those with bias correction;
     then the best so far with 10 / 25 / 50 % range headroom;
  2. pruning 25 / 50 / 75 % on the best configuration of stage 1;
  3. cpu target only: the best configuration with the first, the last, or both compute
     layers kept in float.
Candidates of a stage run in parallel in a process pool. "Best" within a stage is the
lowest loss, then the highest SQNR (without labels: the highest SQNR -- top-1 agreement
means little for a regression output such as an autoencoder's). The pick over all stages is the *cheapest*
configuration whose loss is within the budget (`max_loss`), ties to the lowest loss:

    cost = MACs done in int8 with a non-zero weight (tile targets: all int8 MACs -- the
           array does not skip zeros) + 4 x MACs left in float

`model bytes` is the int8 graph's constant data (int8 weights, int32 biases, requant
parameters, tables, and float weights of float layers).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context

import numpy as np

from hwc.ir.graph import Graph
from hwc.quant.config import QuantConfig
from hwc.quant.runner import run_batched

#: A float MAC costs this many int8 MACs in the search's cost model.
FLOAT_MAC_COST = 4
PRUNE_LEVELS = (0.25, 0.5, 0.75)
HEADROOMS = (0.1, 0.25, 0.5)


@dataclass
class Result:
    cfg: QuantConfig
    metric: float = math.nan      # accuracy (labels) or top-1 agreement
    sqnr_db: float = math.nan
    loss: float = math.nan
    bytes: int = 0
    macs: int = 0                 # all MACs of the model
    cost: int = 0
    int8_nodes: int = 0
    float_nodes: int = 0
    seconds: float = 0.0
    error: str = ""
    stage: int = 0

    def ok(self, max_loss: float) -> bool:
        return not self.error and self.loss <= max_loss + 1e-12

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("metric", "sqnr_db", "loss", "bytes", "macs", "cost", "int8_nodes",
                                            "float_nodes", "seconds", "error", "stage")}
        return {"config": self.cfg.label(), **{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                               for k, v in d.items()}}


@dataclass
class Problem:
    """What every candidate is measured on (sent once to each worker process)."""

    graph: Graph                       # the optimized float graph
    calib: dict[str, np.ndarray]       # {input: [N, *shape]}
    feeds: dict[str, np.ndarray]       # evaluation inputs
    reference: dict[str, np.ndarray]   # float outputs on `feeds`
    labels: np.ndarray | None = None
    target_kind: str = "ref"
    float_metric: float = math.nan
    _prepared: dict = field(default_factory=dict)


# ---- metrics ------------------------------------------------------------------------------
def sqnr_db(ref: np.ndarray, y: np.ndarray) -> float:
    ref, y = np.asarray(ref, np.float64), np.asarray(y, np.float64)
    noise = float(np.sum((ref - y) ** 2))
    signal = float(np.sum(ref ** 2))
    return math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def top1(y: np.ndarray) -> np.ndarray:
    return np.asarray(y).reshape(len(y), -1).argmax(axis=1)


def metrics(p: Problem, outs: dict[str, np.ndarray]) -> tuple[float, float, float]:
    """(metric, loss, SQNR dB) of outputs against the float reference / labels."""
    o = p.graph.outputs[0]
    ref = np.concatenate([p.reference[k].reshape(-1) for k in p.graph.outputs])
    got = np.concatenate([outs[k].reshape(-1) for k in p.graph.outputs])
    s = sqnr_db(ref, got)
    if p.labels is not None:
        acc = float(np.mean(top1(outs[o]) == p.labels))
        return acc, p.float_metric - acc, s
    agree = float(np.mean(top1(outs[o]) == top1(p.reference[o])))
    return agree, 1.0 - agree, s


def cost_of(q: Graph, target_kind: str) -> tuple[int, int, int]:
    """(all MACs, cost, constant bytes) of an int8 graph under the search's cost model."""
    from hwc.analysis import node_macs

    macs = cost = 0
    for n in q.nodes:
        m = node_macs(q, n)
        macs += m
        if n.op in ("QConv", "QGemm"):
            w = q.const(n.inputs[1])
            density = 1.0 if target_kind == "tile" else float(np.count_nonzero(w)) / max(w.size, 1)
            cost += int(round(m * density))
        else:
            cost += FLOAT_MAC_COST * m
    nbytes = sum(v.type.nbytes for v in q.values.values() if v.is_const)
    return macs, cost, nbytes


# ---- one candidate -------------------------------------------------------------------------
def evaluate(p: Problem, cfg: QuantConfig) -> Result:
    """Quantize with `cfg` and measure; errors become a Result with `error` set."""
    from hwc.quant.calibrate import collect_stats
    from hwc.quant.quantize import prepare, quantize

    t0 = time.perf_counter()
    r = Result(cfg)
    try:
        key = (cfg.prune, cfg.bins)
        if key not in p._prepared:
            prep = prepare(p.graph, cfg)
            p._prepared[key] = (prep, collect_stats(prep, p.calib, bins=cfg.bins))
        prep, stats = p._prepared[key]
        q = quantize(p.graph, p.calib, cfg, stats=stats, prepared=prep)
        outs = run_batched(q, p.feeds)
        r.metric, r.loss, r.sqnr_db = metrics(p, outs)
        r.macs, r.cost, r.bytes = cost_of(q, p.target_kind)
        modes = [d["mode"] for d in q.metadata["quant"]["nodes"]]
        r.int8_nodes, r.float_nodes = modes.count("int8"), modes.count("float")
    except Exception as e:  # a candidate that fails is reported, not fatal
        r.error = f"{type(e).__name__}: {e}"
    r.seconds = time.perf_counter() - t0
    return r


_WORKER: dict = {}


def _init_worker(p: Problem) -> None:
    _WORKER["p"] = p


def _run_candidate(cfg: QuantConfig) -> Result:
    return evaluate(_WORKER["p"], cfg)


# ---- the staged search ---------------------------------------------------------------------
def stage1(base: QuantConfig) -> list[QuantConfig]:
    methods = [("minmax", 99.99), ("percentile", 99.99), ("percentile", 99.999), ("entropy", 99.99),
               ("mse", 99.99)]
    return [base.with_(method=m, percentile=pct, per_channel=pc, prune=0.0, float_nodes=(), bias_correction=False,
                       headroom=0.0)
            for pc in (True, False) for m, pct in methods]


def compute_nodes(g: Graph) -> list[str]:
    return [n.name for n in g.nodes if n.op in ("Conv", "Gemm", "MatMul")]


def best_of(results: list[Result], by_sqnr: bool = False) -> Result | None:
    """The most accurate result: lowest loss then highest SQNR, or (`by_sqnr`) highest SQNR."""
    good = [r for r in results if not r.error]
    key = (lambda r: -r.sqnr_db) if by_sqnr else (lambda r: (round(r.loss, 9), -r.sqnr_db))
    return min(good, key=key) if good else None


def pick(results: list[Result], max_loss: float) -> Result | None:
    """The cheapest result within the loss budget (ties: lowest loss, highest SQNR, fewest bytes)."""
    ok = [r for r in results if r.ok(max_loss)]
    return min(ok, key=lambda r: (r.cost, round(r.loss, 9), -r.sqnr_db, r.bytes)) if ok else None


class _Pool:
    """A process pool (spawned workers, each holding the Problem) or, for jobs=1, in-process."""

    def __init__(self, p: Problem, jobs: int):
        self.p, self.jobs = p, jobs
        self.ex = None
        if jobs > 1:
            self.ex = ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_init_worker,
                                          initargs=(p,))

    def map(self, cfgs: list[QuantConfig], done=None) -> list[Result]:
        if self.ex is None:
            out = []
            for c in cfgs:
                out.append(evaluate(self.p, c))
                if done:
                    done(out[-1])
            return out
        futs = [self.ex.submit(_run_candidate, c) for c in cfgs]
        out = []
        for f in futs:
            out.append(f.result())
            if done:
                done(out[-1])
        return out

    def close(self):
        if self.ex is not None:
            self.ex.shutdown()


def search(p: Problem, *, max_loss: float = 0.01, jobs: int | None = None, base: QuantConfig | None = None,
           stages: tuple[int, ...] = (1, 2, 3), progress=None, queued=None) -> tuple[Result | None, list[Result]]:
    """Run the staged search; returns (the pick or None, every result in order). `progress(result)`
    is called as each candidate is measured, `queued(n)` before each batch of n candidates."""
    base = base or QuantConfig()
    jobs = jobs or min(os.cpu_count() or 1, 8)
    results: list[Result] = []
    pool = _Pool(p, jobs)

    def run(cfgs, stage):
        if queued:
            queued(len(cfgs))
        rs = pool.map(cfgs, progress)
        for r in rs:
            r.stage = stage
        results.extend(rs)
        return rs

    by_sqnr = p.labels is None  # without labels, SQNR says more than top-1 agreement
    try:
        best = None
        if 1 in stages:
            rs = run(stage1(base), 1)
            best = best_of(rs, by_sqnr)
            if best is not None:
                rs += run([best.cfg.with_(bias_correction=True)], 1)
                best = best_of(rs, by_sqnr)
                rs += run([best.cfg.with_(headroom=h) for h in HEADROOMS], 1)
                best = best_of(rs, by_sqnr)
        best_cfg = best.cfg if best is not None else base
        if 2 in stages:
            run([best_cfg.with_(prune=f) for f in PRUNE_LEVELS], 2)
        if 3 in stages and p.target_kind == "cpu":
            names = compute_nodes(p.graph)
            if names:
                variants = {(names[0],), (names[-1],), tuple(dict.fromkeys((names[0], names[-1])))}
                run([best_cfg.with_(float_nodes=v) for v in sorted(variants)], 3)
    finally:
        pool.close()
    return pick(results, max_loss), results


def make_problem(graph: Graph, calib: dict, evaluation: dict, target_kind: str = "ref") -> Problem:
    """The Problem of an optimized float graph and data in the CLI layout ({name: [N, *shape]})."""
    from hwc.quant.runner import stack_samples

    labels = evaluation.get("labels")
    c = stack_samples(graph, calib, "calibration data")
    e = stack_samples(graph, {k: v for k, v in evaluation.items() if k != "labels"}, "evaluation data")
    ref = run_batched(graph, e)
    p = Problem(graph, c, e, ref, None if labels is None else np.asarray(labels).reshape(-1), target_kind)
    if p.labels is not None:
        n = len(next(iter(e.values())))
        if len(p.labels) != n:
            raise ValueError(f"evaluation data: {len(p.labels)} labels for {n} samples")
        p.float_metric = float(np.mean(top1(ref[graph.outputs[0]]) == p.labels))
    else:
        p.float_metric = 1.0
    return p
