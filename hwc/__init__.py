"""hwc: an ahead-of-time neural-network compiler for CPUs and a generated int8 tile.

    import hwc
    art = hwc.build("model.onnx", target="cpu")
    outs = art.run({"input": x})
    art.save("out/"); art = hwc.load("out/")
"""

__version__ = "0.1.0"

from hwc.api import build, load  # noqa: E402

__all__ = ["build", "load", "__version__"]
