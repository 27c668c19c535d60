"""hwc: an ahead-of-time neural-network compiler for CPUs and a generated int8 tile."""

__version__ = "0.1.0"
