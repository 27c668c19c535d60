import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from report_helpers import build_saved  # noqa: E402


@pytest.fixture(scope="session")
def resnet8_tile(tmp_path_factory) -> Path:
    """ResNet-8 built for tile8x8 (int8, no Verilog) and saved: report.json + report.html."""
    return build_saved("resnet8", "tile8x8", tmp_path_factory.mktemp("r8") / "out")


@pytest.fixture(scope="session")
def small_cnn_cpu(tmp_path_factory) -> Path:
    return build_saved("small_cnn", "cpu", tmp_path_factory.mktemp("cnn_cpu") / "out")
