"""The tile hardware in Amaranth HDL (installed as hwc.hw)."""
