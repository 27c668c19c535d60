"""Shared by the pass tests: run one pass, compare against the reference interpreter.

Numerical equality: the optimized graph's outputs against the reference interpreter on
the *unoptimized* graph, for random inputs, with

    |got - ref| <= RTOL * |ref| + RTOL * max|ref|     (RTOL = 1e-5)

i.e. rtol 1e-5 plus an atol of 1e-5 times the output's scale: folding BN or a bias
into a product changes float32 rounding (the new weights are rounded once), and an
output element near zero would otherwise be judged on its rounding noise alone.
"""

from __future__ import annotations

import inspect

import numpy as np
from hwc.targets import load_target

from hwc.ir.graph import Graph
from hwc.ir.types import TensorType
from hwc.ir.verify import verify
from hwc.passes.manager import Pass, PassContext, PassResult
from hwc.ref.interp import run_graph
from hwc.zoo import MODELS

RTOL = 1e-5
F32 = "float32"


def feeds_for(g: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {i: rng.standard_normal(g.type(i).shape).astype(g.type(i).np_dtype) for i in g.inputs}


def assert_same(before: Graph, after: Graph, n: int = 3, seed: int = 0, exact: bool = False) -> None:
    """`after` computes what the reference computes on `before` (see module docstring)."""
    rng = np.random.default_rng(seed)
    assert after.inputs == before.inputs and after.outputs == before.outputs
    for _ in range(n):
        feeds = feeds_for(before, rng)
        ref, got = run_graph(before, feeds), run_graph(after, feeds)
        for o in before.outputs:
            assert got[o].dtype == ref[o].dtype and got[o].shape == ref[o].shape, o
            if exact:
                np.testing.assert_array_equal(got[o], ref[o], err_msg=o)
            else:
                scale = float(np.max(np.abs(ref[o]), initial=0.0))
                np.testing.assert_allclose(got[o], ref[o], rtol=RTOL, atol=RTOL * scale, err_msg=o)


def run_pass(g: Graph, p: Pass, target: str = "ref", prune: float = 0.0) -> tuple[Graph, PassResult]:
    """Run one pass on a copy of `g`, verify the result, check it against the reference."""
    verify(g)
    g2 = g.copy()
    res = p(g2, context(target, prune))
    verify(g2, f"pass {p.name}")
    assert_same(g, g2)
    return g2, res


def target(name: str) -> dict:
    return load_target(name)


def context(target_name: str = "ref", prune: float = 0.0) -> PassContext:
    return PassContext(load_target(target_name), prune)


def reasons(res: PassResult) -> list[str]:
    return [r for _, r in res.declined]


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def new_graph(**inputs: tuple[int, ...]) -> Graph:
    g = Graph("t")
    for name, shape in inputs.items():
        g.add_input(name, TensorType(F32, shape))
    return g


def rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def node(g: Graph, op: str, inputs: list, attrs: dict | None = None, name: str | None = None) -> str:
    """Add a node; inputs that are arrays become constants. Returns its (first) output."""
    ins = [g.add_const(x, "c") if isinstance(x, np.ndarray) else x for x in inputs]
    return g.make_node(op, ins, attrs, name=name).outputs[0]


def conv_attrs(k: int = 3, pad: int = 1, stride: int = 1, group: int = 1) -> dict:
    return {"strides": [stride, stride], "pads": [pad] * 4, "dilations": [1, 1], "group": group}


def bn_params(g: Graph, rng: np.random.Generator, c: int) -> list[str]:
    """Constants gamma, beta, mean, var with non-trivial statistics."""
    ps = [rng.uniform(0.5, 1.5, c), rng.normal(0, 0.1, c), rng.normal(0, 0.3, c), rng.uniform(0.5, 2.0, c)]
    return [g.add_const(p.astype(np.float32), h) for p, h in zip(ps, ("gamma", "beta", "mean", "var"))]


def zoo_model(name: str):
    """A zoo model; ending at the logits where it has a Softmax (random models give a near-uniform
    softmax, which would hide errors)."""
    builder = MODELS[name]
    return builder(softmax=False) if "softmax" in inspect.signature(builder).parameters else builder()
