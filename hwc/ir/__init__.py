"""The graph IR: typed values, nodes with normalized attributes, a verifier, a printer."""

from hwc.ir.graph import Graph, Node, QuantParams, Value
from hwc.ir.ops import OPS
from hwc.ir.types import DTYPES, TensorType
from hwc.ir.verify import verify

__all__ = ["DTYPES", "OPS", "Graph", "Node", "QuantParams", "TensorType", "Value", "verify"]
