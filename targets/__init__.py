"""Target descriptions (YAML), installed as package data of hwc.targets."""
