"""Frontends: ONNX import into the graph IR."""

from hwc.frontend.onnx_import import import_onnx, load_model

__all__ = ["import_onnx", "load_model"]
