"""The pass manager: pipeline editing, fixed points, debug verification, dump/stop, stats."""

import numpy as np
import pytest
from passes_helpers import context, new_graph, node, rand, target
from rich.console import Console

from hwc.errors import UserError, VerifyError
from hwc.ir.types import TensorType
from hwc.passes import Fixpoint, PassManager, PassResult, default_pipeline, graph_pass, optimize
from hwc.passes.manager import insert_after, pass_names, replace, without


def relu_chain(n=3):
    g = new_graph(x=(2, 4))
    y = "x"
    for _ in range(n):
        y = node(g, "Identity", [y])
    g.make_node("Relu", [y], outputs=["y"], name="relu")
    g.outputs = ["y"]
    return g


@graph_pass("drop_one_identity")
def drop_one_identity(g, ctx):
    """Removes the first Identity it finds (one per run)."""
    for n in g.nodes:
        if n.op == "Identity":
            g.remove_node(n)
            g.replace_uses(n.outputs[0], n.inputs[0])
            return PassResult(True)
    return PassResult(False)


@graph_pass("noop")
def noop(g, ctx):
    """Does nothing."""
    return PassResult(False)


def ctx(name="ref"):
    return context(name)


def test_fixpoint_repeats_until_nothing_changes():
    g = relu_chain(3)
    stats = PassManager([Fixpoint("loop", (drop_one_identity, noop))], ctx()).run(g)
    assert [n.op for n in g.nodes] == ["Relu"]
    runs = [(r.name, r.round, r.changed) for r in stats.runs]
    assert runs == [x for k in range(4) for x in (("drop_one_identity", k, k < 3), ("noop", k, False))]
    assert stats.nodes_before == 4 and stats.nodes_after == 1
    assert [(r.nodes_before, r.nodes_after) for r in stats.runs if r.name == "drop_one_identity"] == \
        [(4, 3), (3, 2), (2, 1), (1, 1)]


def test_fixpoint_that_never_settles_is_reported():
    @graph_pass("flip")
    def flip(g, ctx):
        g.nodes[0].attrs["alpha"] = 0.5 if g.nodes[0].attrs["alpha"] != 0.5 else 0.25
        return PassResult(True)

    g = new_graph(x=(2,))
    g.make_node("LeakyRelu", ["x"], outputs=["y"])
    g.outputs = ["y"]
    stats = PassManager([Fixpoint("forever", (flip,), max_rounds=3)], ctx()).run(g)
    assert len(stats.runs) == 3
    assert any("still changed the graph after 3 rounds" in line for line in stats.report_lines())


def test_debug_verifies_after_every_pass_and_names_the_pass():
    @graph_pass("breaks_types")
    def breaks(g, ctx):
        g.values["y"].type = TensorType("float32", (9,))
        return PassResult(True)

    g = relu_chain(1)
    with pytest.raises(VerifyError, match="after pass 'breaks_types'"):
        PassManager([noop, breaks], ctx(), debug=True).run(g)
    PassManager([noop], ctx(), debug=False).run(relu_chain(1))


def test_debug_catches_a_pass_that_lies_about_changing_nothing():
    @graph_pass("sneaky")
    def sneaky(g, ctx):
        drop_one_identity(g, ctx)
        return PassResult(False)

    with pytest.raises(VerifyError, match="'sneaky' changed graph 't' but reported no change"):
        PassManager([sneaky], ctx(), debug=True).run(relu_chain(1))


def test_dump_after_and_stop_after():
    dumps = []
    pm = PassManager([Fixpoint("loop", (drop_one_identity,)), noop], ctx(), dump_after="drop_one_identity",
                     stop_after="drop_one_identity", dump=dumps.append)
    g = relu_chain(3)
    stats = pm.run(g)
    assert len(stats.runs) == 1 and stats.stopped_after == "drop_one_identity"
    assert len(dumps) == 1 and dumps[0].startswith("// after pass loop/drop_one_identity round 0 (changed)")
    assert "Relu(" in dumps[0] and len(g.nodes) == 3
    assert "stopped after pass 'drop_one_identity'" in stats.report_lines()[-1]


def test_unknown_pass_names_are_user_errors_listing_the_passes():
    with pytest.raises(UserError, match=r"--stop-after 'nope': no pass of that name .* Passes: drop_one_identity"):
        PassManager([drop_one_identity], ctx(), stop_after="nope")
    with pytest.raises(UserError, match="--dump-after 'fuse_elementwise'"):
        optimize(relu_chain(), "tile8x8", dump_after="fuse_elementwise")  # not in the tile pipeline


def test_pipeline_is_an_editable_list_per_target():
    ref, tile = default_pipeline(target("ref")), default_pipeline(target("tile8x8"))
    assert "fuse_elementwise" in pass_names(ref) and "fuse_elementwise" not in pass_names(tile)
    assert "merge_fc" in pass_names(tile)
    assert "prune" not in pass_names(ref) and "prune" in pass_names(default_pipeline(target("cpu"), prune=0.5))
    dropped = without(ref, "cse", "fuse")
    assert "cse" not in pass_names(dropped) and "fold_batchnorm" not in pass_names(dropped)
    assert "dce" in pass_names(dropped)
    extended = insert_after(ref, "matmul_to_gemm", noop)
    assert pass_names(extended)[pass_names(extended).index("matmul_to_gemm") + 1] == "noop"
    assert pass_names(replace(ref, "merge_fc", noop)).count("merge_fc") == 0


def test_optimize_accepts_a_custom_pipeline_and_keeps_the_callers_graph():
    g = relu_chain(2)
    g2, stats = optimize(g, "ref", pipeline=[Fixpoint("loop", (drop_one_identity,))])
    assert len(g.nodes) == 3 and len(g2.nodes) == 1
    assert g2.inputs == ["x"] and g2.outputs == ["y"]


def test_stats_table_has_one_row_per_run_and_a_compact_form():
    g = new_graph(x=(1, 8))
    rng = np.random.default_rng(0)
    h = node(g, "Gemm", ["x", rand(rng, 8, 4)])
    g.make_node("Relu", [h], outputs=["y"])
    g.outputs = ["y"]
    _, stats = optimize(g, "cpu", debug=True)
    con = Console(record=True, width=200)
    con.print(stats.table())
    con.print(stats.table(compact=True))
    text = con.export_text()
    assert "fuse/fuse_activation #1" in text and "merge_fc" in text and "total" in text
    row = next(r for r in stats.rows() if r["pass"] == "fuse/fuse_activation #1")
    assert (row["nodes_before"], row["nodes_after"], row["changed"]) == (2, 1, True)
    assert stats.to_dict()["nodes_before"] == 2 and stats.to_dict()["nodes_after"] == 1
    assert stats.ops_after == {"Gemm": 1}
