"""The graph optimizer: named passes, an explicit per-target pipeline, a pass manager.

    from hwc.passes import optimize
    g2, stats = optimize(graph, "tile8x8")        # stats.table() is a rich Table

Passes live one family per module (fold, transpose, batchnorm, fuse, clip, merge_fc,
elementwise, cleanup, prune); `pipeline.default_pipeline(target)` lists them in order.
"""

from hwc.passes.manager import Fixpoint, Pass, PassContext, PassManager, PassResult, Stats, graph_pass
from hwc.passes.pipeline import default_pipeline, optimize

__all__ = ["Fixpoint", "Pass", "PassContext", "PassManager", "PassResult", "Stats", "default_pipeline",
           "graph_pass", "optimize"]
