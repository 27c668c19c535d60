"""Target descriptions: one YAML file per target, validated here.

`load_target("tile8x8")` reads the bundled `tile8x8.yaml`; a path to a .yaml file reads
that file. Every size the compiler, hardware generator and simulator use comes from the
loaded description (no magic numbers elsewhere).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hwc.errors import TargetError

KINDS = ("ref", "cpu", "tile")


def bundled_targets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".yaml"))


def load_target(name_or_path: str | Path) -> dict[str, Any]:
    """The validated target description as a dict (see each kind's schema)."""
    text, where = _read(str(name_or_path))
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TargetError(f"Target {where}: not valid YAML ({e}).") from None
    if not isinstance(doc, dict):
        raise TargetError(f"Target {where}: expected a mapping of keys to values at the top level.")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise TargetError(f"Target {where}: 'kind' must be one of {', '.join(KINDS)}, not {kind!r}.")
    if kind == "tile":
        from hwc.targets.tile_schema import validate_tile

        return validate_tile(doc, where)
    if kind == "cpu":
        from hwc.targets.cpu_schema import validate_cpu

        doc.setdefault("name", Path(where).stem)
        return validate_cpu(doc, where)
    extra = set(doc) - {"name", "kind", "description"}
    if extra:
        raise TargetError(f"Target {where}: unknown key(s) {sorted(extra)} for kind {kind!r}.")
    doc.setdefault("name", Path(where).stem)
    return doc


def _read(spec: str) -> tuple[str, str]:
    if spec.endswith((".yaml", ".yml")) or "/" in spec:
        p = Path(spec)
        if not p.is_file():
            raise TargetError(f"Target file {spec!r} does not exist. Give a bundled target "
                              f"({', '.join(bundled_targets())}) or the path of a .yaml file.")
        return p.read_text(), spec
    res = resources.files(__name__) / f"{spec}.yaml"
    if not res.is_file():
        raise TargetError(f"Unknown target {spec!r}. Bundled targets: {', '.join(bundled_targets())}; "
                          f"or pass the path of a target .yaml file.")
    return res.read_text(), f"{spec}.yaml"


def tile_variant(target: dict[str, Any], wgt_read_rows: int | None = None, dw_line_buffer: int | None = None,
                 **features: bool) -> dict[str, Any]:
    """`target` (a validated tile target) with some `features` switched (docs/tile-v2.md) and optionally
    another `scratchpad.wgt_read_rows` or `scratchpad.dw_line_buffer` (0: no depthwise mode over rows; it
    goes with the depthwise mode), validated again so the derived values (the configuration name)
    follow: `tile_variant(t, post_unit=False, depthwise=False)` is the v1 tile of docs/tile.md. Without row
    buffers the ninth depthwise PE (features.dw_ninth_tap) goes too, unless asked for."""
    from hwc.targets.tile_schema import validate_tile

    doc = {k: v for k, v in target.items() if k != "derived"}
    doc["features"] = {**target.get("features", {}), **features}
    doc["scratchpad"] = dict(target["scratchpad"])
    if wgt_read_rows is not None:
        doc["scratchpad"]["wgt_read_rows"] = wgt_read_rows
    if dw_line_buffer is not None:
        doc["scratchpad"]["dw_line_buffer"] = dw_line_buffer
    if not doc["features"].get("depthwise"):
        doc["scratchpad"]["dw_line_buffer"] = 0
    if not doc["scratchpad"].get("dw_line_buffer") and "dw_ninth_tap" not in features:
        doc["features"]["dw_ninth_tap"] = False   # (it goes with the row buffers)
    if not (doc["scratchpad"].get("dw_line_buffer") and doc["features"].get("post_unit")) \
            and "dw_post" not in features:
        doc["features"]["dw_post"] = False        # (its row buffers are dw_line_buffer lines; it is part of POST)
    return validate_tile(doc, f"{target.get('name')} (variant)")
