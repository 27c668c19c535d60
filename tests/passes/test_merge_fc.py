"""merge_fc: FC nodes sharing an input merged, thin inputs sharing a weight stacked - per target."""

import numpy as np
import pytest
from passes_helpers import new_graph, node, ops, rand, reasons, run_pass

from hwc.passes.merge_fc import merge_fc


def shared_input(widths, op="Gemm", trans_b=(1, 0), bias=True, k=16, rows=1, act=""):
    rng = np.random.default_rng(sum(widths))
    g = new_graph(x=(rows, k))
    outs = []
    for i, n in enumerate(widths):
        tb = trans_b[i % len(trans_b)] if op == "Gemm" else 0
        w = rand(rng, n, k) if tb else rand(rng, k, n)
        attrs = {"transB": tb, "beta": 0.5, "act": act} if op == "Gemm" else {"act": act}
        ins = ["x", w] + ([rand(rng, n)] if bias and op == "Gemm" and i != 1 else [])
        g.make_node(op, [g.add_const(x) if isinstance(x, np.ndarray) else x for x in ins], attrs,
                    outputs=[f"y{i}"], name=f"fc{i}")
        outs.append(f"y{i}")
    g.outputs = outs
    return g


def test_two_thin_gemms_on_one_input_become_one_on_cpu():
    g2, res = run_pass(shared_input([5, 3]), merge_fc, "cpu")
    assert ops(g2) == ["Gemm", "Split"]
    assert g2.nodes[1].outputs == ["y0", "y1"] and g2.nodes[1].attrs["split"] == [5, 3]
    assert res.notes == ["merged 'fc0', 'fc1' (shared input 'x'): thin products (widths [5, 3] < 32): the input "
                         "is read once, not 2 times"]


def test_three_matmuls_with_activation_merge():
    g2, _ = run_pass(shared_input([4, 6, 2], op="MatMul", act="relu"), merge_fc, "ref")
    assert ops(g2) == ["MatMul", "Split"] and g2.nodes[0].attrs["act"] == "relu"


def test_tile_decision_counts_weight_blocks_of_the_array():
    # widths 5 + 3 fill one 8-row block together instead of two
    g2, res = run_pass(shared_input([5, 3], k=8), merge_fc, "tile8x8")
    assert ops(g2) == ["Gemm", "Split"]
    assert res.notes[0].endswith("widths [5, 3]: 1 weight block(s) of 8x8 merged instead of 2 (tile8x8)")
    # widths 16 + 8 already fill 8-row blocks: nothing to gain on tile8x8 ...
    g2, res = run_pass(shared_input([16, 8], k=8), merge_fc, "tile8x8")
    assert ops(g2) == ["Gemm", "Gemm"]
    assert reasons(res)[0] == ("shares input 'x' with 'fc0', 'fc1', but widths [16, 8] already fill 8-row blocks: "
                               "3 weight block(s) merged or not (tile8x8)")
    # ... but on a 32x32 array they share one block instead of two
    g2, res = run_pass(shared_input([16, 8], k=8), merge_fc, "tile32x32")
    assert ops(g2) == ["Gemm", "Split"]


def test_cpu_declines_wide_products():
    g2, res = run_pass(shared_input([64, 40]), merge_fc, "cpu")
    assert ops(g2) == ["Gemm", "Gemm"]
    assert reasons(res)[0].endswith("widths [64, 40] are not all thin (< 32): separate products already use the "
                                    "vector units")


def test_declines_when_the_inputs_differ():
    rng = np.random.default_rng(0)
    g = new_graph(a=(1, 8), b=(1, 8))
    g.make_node("Gemm", ["a", g.add_const(rand(rng, 8, 3))], outputs=["y"], name="fa")
    g.make_node("Gemm", ["b", g.add_const(rand(rng, 8, 5))], outputs=["z"], name="fb")
    g.outputs = ["y", "z"]
    g2, res = run_pass(g, merge_fc, "tile8x8")
    assert ops(g2) == ["Gemm", "Gemm"] and not res.changed
    assert res.declined == [(n, "no other Gemm/MatMul with constant weights shares its input or its weight")
                            for n in ("fa", "fb")]


def thin_inputs_sharing_a_weight(rows=(1, 2), dependent=False):
    rng = np.random.default_rng(1)
    g = new_graph(a=(rows[0], 16), b=(rows[1], 16))
    w, c = g.add_const(rand(rng, 16, 16), "W"), g.add_const(rand(rng, 16), "C")
    g.make_node("Gemm", ["a", w, c], {"act": "relu"}, outputs=["y"], name="fa")
    b = node(g, "Add", ["y", "b"]) if dependent else "b"
    g.make_node("Gemm", [b, w, c], {"act": "relu"}, outputs=["z"], name="fb")
    g.outputs = ["y", "z"]
    return g


@pytest.mark.parametrize("target", ["cpu", "tile8x8"])
def test_thin_inputs_sharing_a_weight_are_stacked(target):
    g2, res = run_pass(thin_inputs_sharing_a_weight(), merge_fc, target)
    assert ops(g2) == ["Concat", "Gemm", "Split"]
    assert g2.nodes[2].attrs == {"axis": 0, "split": [1, 2]}
    assert res.notes[0].startswith("stacked 'fa', 'fb' (shared weight 'W'): thin inputs (rows [1, 2] <")


def test_stacking_declines_dependent_and_thick_inputs():
    _, res = run_pass(thin_inputs_sharing_a_weight(dependent=True), merge_fc, "cpu")
    assert reasons(res)[0].endswith("input 'add' of 'fb' is computed from another candidate's output")
    _, res = run_pass(thin_inputs_sharing_a_weight(rows=(8, 4)), merge_fc, "tile8x8")
    assert reasons(res)[0].endswith("inputs of rows [8, 4] are not all thin (< 8, tile8x8)")


def test_cpu_thin_limit_follows_the_targets_vector_width(tmp_path):
    narrow = tmp_path / "cpu128.yaml"
    narrow.write_text("name: cpu128\nkind: cpu\nsimd_bits: 128\n")
    _, res = run_pass(shared_input([12, 4]), merge_fc, str(narrow))
    assert reasons(res)[0].endswith("widths [12, 4] are not all thin (< 8): separate products already use the "
                                    "vector units")
