"""Calibration: run the float graph over samples, histogram every tensor, choose ranges.

Two passes over the calibration samples (batched through `runner.iter_batches`): the
first finds each tensor's min and max, the second fills a histogram of `bins` equal bins
over [min, max]. A range method then picks the real interval [lo, hi] that int8 will
cover (`choose_range`), and `arith.choose_qparams` turns it into scale and zero point:

- minmax:     [min, max] -- nothing clipped, the coarsest resolution.
- percentile: the (100-p)/2 % and (100+p)/2 % quantiles (read from the histogram, linear
              inside a bin). A tensor with min >= 0 (after a ReLU) keeps lo = 0.
- mse:        the [lo, hi] minimizing the expected squared error of quantize-dequantize
              over the histogram: sum over clipped mass of (x - bound)^2 plus, for the
              mass inside, the rounding noise step^2 / 12 (step = (hi - lo) / 255).
              Both ends are searched independently (a grid of 128 candidates each, every
              end on a bin edge), in O(1) per candidate with prefix sums.
- entropy:    the clipping minimizing KL(P || Q) (TensorRT's method): P is the histogram
              restricted to [lo, hi] with the clipped mass added to the edge bins, Q the
              same histogram merged into 255 quantization steps and spread uniformly back
              over the non-empty bins of each step. Both ends shrink by the same factor c,
              down to a range of 256 bins (below that KL is 0 by construction). The
              bin holding 0 is left out (after a ReLU it is a spike of exact zeros,
              which int8 represents exactly).

Every range is widened to contain 0 (a tensor after a ReLU gets [0, hi]: z = -128), so
the ReLU's clamp is free and the quantizer drops it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwc.errors import InputError
from hwc.ir.graph import Graph
from hwc.quant.runner import iter_batches

#: Candidate bounds per end searched by "mse"; shrink factors tried by "entropy".
_GRID = 128


@dataclass
class TensorStats:
    """What calibration saw of one float tensor."""

    min: float
    max: float
    count: int
    hist: np.ndarray  # int64 [bins] over [min, max] (one bin when min == max)

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.min, self.max, len(self.hist) + 1)

    def to_json(self, bins: int = 64) -> dict:
        """A downsampled histogram for reports: {"range": [min, max], "counts": [...]}."""
        h = self.hist
        if len(h) > bins and len(h) % bins == 0:
            h = h.reshape(bins, -1).sum(axis=1)
        return {"range": [self.min, self.max], "counts": h.astype(int).tolist()}


def calibration_tensors(g: Graph) -> list[str]:
    """The float, non-constant tensors of `g` (graph inputs and node outputs)."""
    names = list(g.inputs) + [o for n in g.nodes for o in n.outputs if o]
    return [t for t in names if g.type(t).dtype == "float32" and not g.values[t].is_const]


def collect_stats(g: Graph, feeds: dict[str, np.ndarray], *, bins: int = 2048, chunk: int = 32,
                  progress: bool = False, tensors: list[str] | None = None) -> dict[str, TensorStats]:
    """Histograms of every float tensor of `g` over the samples `feeds` ({input: [N, *shape]})."""
    names = tensors if tensors is not None else calibration_tensors(g)
    n_total = len(next(iter(feeds.values())))
    lo = {t: math.inf for t in names}
    hi = {t: -math.inf for t in names}
    for t in names:   # (the inputs first: the model run on inf/NaN would warn before the error)
        if t in feeds and np.issubdtype(feeds[t].dtype, np.floating) and not np.all(np.isfinite(feeds[t])):
            raise _non_finite(g, t, feeds, feeds[t], 0)
    with _progress(progress, 2 * n_total, f"calibrating {g.name}") as advance, np.errstate(all="ignore"):
        # (numpy's warnings off: a tensor the float model makes non-finite is the error below, naming it)
        start = 0
        for n, env in iter_batches(g, feeds, chunk=chunk, keep=True):
            for t in names:
                x = env[t]
                if not np.all(np.isfinite(x)):
                    raise _non_finite(g, t, feeds, feeds.get(t, x), start if t not in feeds else 0)
                lo[t] = min(lo[t], float(x.min()))
                hi[t] = max(hi[t], float(x.max()))
            start += n
            advance(n)
        hists = {t: np.zeros(bins if hi[t] > lo[t] else 1, np.int64) for t in names}
        for n, env in iter_batches(g, feeds, chunk=chunk, keep=True):
            for t in names:
                h = hists[t]
                if len(h) == 1:
                    h[0] += env[t].size
                else:
                    h += np.histogram(env[t], bins=bins, range=(lo[t], hi[t]))[0]
            advance(n)
    return {t: TensorStats(lo[t], hi[t], int(hists[t].sum()), hists[t]) for t in names}


def _non_finite(g: Graph, t: str, feeds: dict[str, np.ndarray], x: np.ndarray, start: int) -> InputError:
    """The error for inf/NaN in tensor t, whose samples [start, start + len(x)) are `x`: it
    names the bad samples, so the user can find them in the data."""
    n_total = len(next(iter(feeds.values())))
    bad = start + np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
    if t in g.inputs:
        which = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        return InputError(f"Calibration data: input {t!r} has non-finite values (inf/NaN) in sample"
                          f"{'s' if len(bad) > 1 else ''} {which} (of {n_total}, counting from 0). int8 ranges "
                          f"cannot be chosen from them: remove or fix those samples (e.g. keep only the samples "
                          f"where numpy.isfinite(x).all()) and build again.")
    i = int(bad[0])
    node = g.producers()[t]
    finite = all(np.isfinite(v[i]).all() for v in feeds.values() if np.issubdtype(v.dtype, np.floating))
    why = ("although the sample's inputs are finite: the float model overflows or leaves its domain on it "
           "(e.g. Log or Div of 0)" if finite else "because the sample's inputs are not finite")
    return InputError(f"Calibration sample {i} (of {n_total}, counting from 0) makes tensor {t!r} (output of node "
                      f"{node.name!r}, {node.op}) non-finite (inf/NaN), {why}. int8 ranges cannot be chosen "
                      f"from it: remove that sample from the calibration data, or check that it is preprocessed "
                      f"like the model's real inputs.")


class _progress:
    """A rich progress bar on stderr (or nothing); `with` gives an advance(n) function."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled, self.total, self.label = enabled, total, label

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task(self.label + " (2 passes)", total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc):
        if self.enabled:
            self.bar.__exit__(*exc)
        return False


# ---- range methods ---------------------------------------------------------------------
def choose_range(st: TensorStats, method: str, percentile: float = 99.99) -> tuple[float, float]:
    """The real interval [lo, hi] int8 will cover for this tensor (before widening to 0)."""
    if st.max <= st.min or method == "minmax":
        return st.min, st.max
    if method == "percentile":
        return _percentile_range(st, percentile)
    if method == "mse":
        return _mse_range(st)
    if method == "entropy":
        return _kl_range(st)
    raise ValueError(f"unknown range method {method!r}")


def clipped_fraction(st: TensorStats, lo: float, hi: float) -> float:
    """Share of the calibration values outside [lo, hi] (bins entirely outside count)."""
    if st.count == 0 or len(st.hist) == 1:
        return 0.0
    e = st.edges
    outside = st.hist[(e[1:] <= lo) | (e[:-1] >= hi)].sum()
    # the part of the partially clipped edge bins, spread linearly
    for b in (np.searchsorted(e, lo, "right") - 1, np.searchsorted(e, hi, "right") - 1):
        if 0 <= b < len(st.hist) and e[b] < lo < e[b + 1]:
            outside += st.hist[b] * (lo - e[b]) / (e[b + 1] - e[b])
        if 0 <= b < len(st.hist) and e[b] < hi < e[b + 1]:
            outside += st.hist[b] * (e[b + 1] - hi) / (e[b + 1] - e[b])
    return float(outside / st.count)


def _quantile(st: TensorStats, q: float) -> float:
    cdf = np.concatenate([[0], np.cumsum(st.hist)]) / st.count
    return float(np.interp(q, cdf, st.edges))


def _percentile_range(st: TensorStats, p: float) -> tuple[float, float]:
    tail = (100.0 - p) / 200.0
    lo = st.min if st.min >= 0 else _quantile(st, tail)
    hi = st.max if st.max <= 0 else _quantile(st, 1.0 - tail)
    return lo, hi


def _prefix(st: TensorStats):
    e = st.edges
    c = (e[:-1] + e[1:]) / 2
    n = st.hist.astype(np.float64)
    z = np.zeros(1)
    return (e, np.concatenate([z, np.cumsum(n)]), np.concatenate([z, np.cumsum(n * c)]),
            np.concatenate([z, np.cumsum(n * c * c)]))


def _end_candidates(st: TensorStats, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bin-edge indices usable as lo (edges <= 0) and hi (edges >= 0), _GRID of each at most."""
    nb = len(e) - 1
    zero = int(np.clip(np.searchsorted(e, 0.0), 0, nb))
    lo_idx = np.unique(np.linspace(0, zero, _GRID).round().astype(int)) if st.min < 0 else np.array([0])
    hi_idx = np.unique(np.linspace(zero, nb, _GRID).round().astype(int)) if st.max > 0 else np.array([nb])
    return lo_idx, hi_idx


def _mse_range(st: TensorStats) -> tuple[float, float]:
    e, s0, s1, s2 = _prefix(st)
    nb = len(e) - 1
    li, hj = _end_candidates(st, e)
    a = np.minimum(e[li], 0.0)[:, None]          # candidate lo bounds
    b = np.maximum(e[hj], 0.0)[None, :]          # candidate hi bounds
    i, j = li[:, None], hj[None, :]
    left = s2[i] - 2 * a * s1[i] + a * a * s0[i]                       # bins below lo
    right = (s2[nb] - s2[j]) - 2 * b * (s1[nb] - s1[j]) + b * b * (s0[nb] - s0[j])
    inside = s0[j] - s0[i]
    step = (b - a) / 255.0
    err = left + right + inside * step * step / 12.0
    k = np.unravel_index(np.argmin(err), err.shape)
    lo = st.min if li[k[0]] == 0 else float(e[li[k[0]]])
    hi = st.max if hj[k[1]] == nb else float(e[hj[k[1]]])
    return lo, hi


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Move a little mass onto the empty bins so KL stays finite (as TensorRT/MXNet do)."""
    zero = p == 0
    nz = int((~zero).sum())
    if nz == 0:
        return p
    take = eps * zero.sum() / nz
    return p + eps * zero - take * ~zero


def _kl(sliced: np.ndarray, left: float, right: float, levels: int = 255) -> float:
    """KL(P || Q): P is the sliced histogram with the clipped mass added to its edge bins,
    Q the sliced histogram *without* it, merged into `levels` steps and spread uniformly
    over the non-empty bins of each step -- so clipping mass costs divergence."""
    n = len(sliced)
    p = sliced.astype(np.float64).copy()
    p[0] += left
    p[-1] += right
    groups = np.minimum((np.arange(n) * levels) // n, levels - 1)
    nz = p > 0
    mass = np.bincount(groups, weights=sliced, minlength=levels)
    cnt = np.bincount(groups, weights=nz, minlength=levels)
    q = np.where(nz, mass[groups] / np.maximum(cnt[groups], 1), 0.0)
    if q.sum() <= 0:
        return math.inf
    ps, qs = _smooth(p / p.sum()), _smooth(q / q.sum())
    m = ps > 0
    return float(np.sum(ps[m] * np.log(ps[m] / np.maximum(qs[m], 1e-30))))


def _kl_range(st: TensorStats) -> tuple[float, float]:
    e = st.edges
    nb = len(st.hist)
    hist = st.hist.astype(np.float64).copy()
    # The bin holding 0 is left out: after a ReLU it holds a spike of exact zeros, which
    # int8 represents exactly, and which would otherwise pull the range down.
    hist[int(np.clip(np.searchsorted(e, 0.0, "right") - 1, 0, nb - 1))] = 0
    best, best_c = math.inf, 1.0
    for c in np.linspace(1.0, 0.02, _GRID):
        lo, hi = min(st.min * c, 0.0), max(st.max * c, 0.0)
        i = int(np.clip(np.searchsorted(e, lo, "right") - 1, 0, nb - 1))
        j = int(np.clip(np.searchsorted(e, hi, "left"), i + 1, nb))
        if j - i < 256:  # fewer bins than quantization steps: KL is 0 by construction
            break
        d = _kl(hist[i:j], float(hist[:i].sum()), float(hist[j:].sum()))
        if d < best - 1e-12:
            best, best_c = d, c
    return st.min * best_c if st.min < 0 else st.min, st.max * best_c if st.max > 0 else st.max
