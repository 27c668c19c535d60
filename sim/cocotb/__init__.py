"""cocotb test modules (run inside the simulator by hwc.sim.rtl; not imported by hwc itself)."""
