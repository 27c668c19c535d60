"""The fast Python model of the tile and the cocotb testbenches (installed as hwc.sim)."""
