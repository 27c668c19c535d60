"""Models and builds shared by the report tests."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import hwc
from hwc import zoo


def matmul_model() -> onnx.ModelProto:
    """y = x @ W.T + b with x [1, 8], W [8, 8]: one 8x8 weight block, one activation line."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 8)).astype(np.float32)
    b = rng.normal(size=(8,)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], "matmul",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def matmul_calib() -> dict:
    return {"x": np.random.default_rng(1).normal(size=(16, 1, 8)).astype(np.float32)}


def build_saved(name: str, target: str, folder: Path) -> Path:
    """hwc.build of a zoo model (8 random calibration samples; no Verilog) saved to folder."""
    m = zoo.MODELS[name](0)
    calib = zoo.random_inputs(m, n=8, seed=0) if target != "ref" and target != "cpu" else None
    art = hwc.build(m, target, calib=calib, int8=target.startswith("tile"), hdl=False)
    return art.save(folder)


def resolve(report: dict, path: str):
    """The value at a data-src path of report.html ("layers/3/macs"; "~1" is "/", "~0" is "~")."""
    node = report
    for key in path.split("/"):
        key = key.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


class Cells(HTMLParser):
    """Every element of a page with a data-src attribute: (path, data-value, data-scale, text)."""

    def __init__(self):
        super().__init__()
        self.cells: list[dict] = []
        self._open: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-src" in a:
            self._open.append({"tag": tag, "src": a["data-src"], "value": json.loads(a["data-value"]),
                               "scale": float(a["data-scale"]), "text": ""})

    def handle_data(self, data):
        for c in self._open:
            c["text"] += data

    def handle_endtag(self, tag):
        if self._open and self._open[-1]["tag"] == tag:
            self.cells.append(self._open.pop())


def page_cells(html_text: str) -> list[dict]:
    p = Cells()
    p.feed(html_text)
    return p.cells
