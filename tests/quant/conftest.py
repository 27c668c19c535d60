"""Make tests/ importable (onnx_helpers) for the quantizer tests in this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
