"""The default pass pipeline, per target kind, and `optimize` (what `hwc opt`/`hwc build` run).

The pipeline is an explicit list; a backend takes it as is or edits it with
`manager.without / insert_after / replace`. Order matters where one pass feeds another:
simplification first (so fusion sees canonical graphs), clamps merged before activations
fuse, BN folded before its Relu fuses, pruning after BN folding (it prunes the weights
that run), FC merging after activation fusion (merged products must agree on theirs).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hwc.errors import HwcError, UserError
from hwc.ir.graph import Graph
from hwc.ir.verify import verify
from hwc.passes.batchnorm import batchnorm_to_scale_shift, fold_batchnorm
from hwc.passes.cleanup import collapse_reshapes, cse, dce, fold_pad, remove_identities
from hwc.passes.clip import merge_clips
from hwc.passes.elementwise import fuse_elementwise
from hwc.passes.fold import fold_constants, fold_weight_transposes
from hwc.passes.fuse import fuse_activation, fuse_bias, matmul_to_gemm
from hwc.passes.manager import Fixpoint, PassContext, PassManager, Pipeline, Stats
from hwc.passes.merge_fc import merge_fc
from hwc.passes.prune import prune as prune_pass
from hwc.passes.transpose import collapse_transposes, sink_transposes


def default_pipeline(target: dict[str, Any], *, prune: float = 0.0) -> Pipeline:
    """The explicit pass list for `target` (a loaded target description)."""
    pipeline = [
        Fixpoint("simplify", (
            remove_identities,       # Identity/Dropout, no-op Reshape/Transpose/Pad/Cast/...
            fold_weight_transposes,  # Transpose of a weight -> the transposed constant
            fold_constants,          # all-constant nodes (shape arithmetic, weight math)
            collapse_transposes,     # Transpose chains -> one, or none
            sink_transposes,         # a Transpose moved through elementwise ops to cancel
            collapse_reshapes,       # Reshape/Flatten chains -> one Reshape
            cse,                     # duplicated subexpressions and constants -> one
            dce,                     # dead branches, unused constants
        )),
        matmul_to_gemm,              # 2-d MatMul by a constant is an FC layer: a Gemm
        Fixpoint("fuse", (
            fuse_bias,               # Add of a per-channel constant -> bias
            fold_batchnorm,          # BN -> the preceding Conv/Gemm's weights and bias
            fold_pad,                # Pad -> the Conv/pool's own padding
            merge_clips,             # Relu->Clip, Clip->Clip -> one clamp; Clip(0, inf) -> Relu
            fuse_activation,         # Relu/Clip/LeakyRelu/... -> the Conv/Gemm's act
        )),
        batchnorm_to_scale_shift,    # BNs that did not fold: Mul + Add per channel
    ]
    if prune > 0:
        pipeline.append(prune_pass)  # --prune: zero the smallest weights, report the error
    pipeline.append(merge_fc)        # FC nodes sharing an input/weight, when the target's blocks say so
    if target["kind"] != "tile":
        # cpu/ref run an elementwise chain as one loop. The tile runs residual adds and
        # activations in its post-processing unit as quantized ops, so they stay apart.
        pipeline.append(fuse_elementwise)
    pipeline.append(Fixpoint("cleanup", (remove_identities, fold_constants, cse, dce)))
    return pipeline


def optimize(graph: Graph, target: str | Path | dict[str, Any] = "ref", *, debug: bool | None = None,
             dump_after: str | None = None, stop_after: str | None = None, prune: float = 0.0,
             pipeline: Pipeline | None = None, dump=print) -> tuple[Graph, Stats]:
    """Run the target's pipeline (or `pipeline`) on a copy of `graph`; returns (graph, stats).

    debug (default: the HWC_DEBUG environment variable, set by `hwc --debug`) verifies
    the IR after every pass. dump_after prints the graph after every run of the named
    pass ("all": after every pass); stop_after ends the pipeline after its first run.
    prune is the --prune fraction in [0, 1) (0: off).
    """
    from hwc.targets import load_target

    tgt = target if isinstance(target, dict) else load_target(target)
    if not 0.0 <= prune < 1.0:
        raise UserError(f"'--prune' must be a fraction in [0, 1), not {prune!r} (e.g. --prune 0.3 zeroes the "
                        f"smallest 30% of every weight).")
    if debug is None:
        debug = bool(os.environ.get("HWC_DEBUG"))
    g = graph.copy()
    pl = default_pipeline(tgt, prune=prune) if pipeline is None else pipeline
    stats = PassManager(pl, PassContext(tgt, prune), debug=debug, dump_after=dump_after,
                        stop_after=stop_after, dump=dump).run(g)
    verify(g, "the graph optimizer")
    if g.inputs != graph.inputs or g.outputs != graph.outputs:
        raise HwcError(f"the graph optimizer changed the graph's inputs/outputs {graph.inputs}/{graph.outputs} "
                       f"into {g.inputs}/{g.outputs}: a pass bug")
    return g, stats
