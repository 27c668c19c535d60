"""The quant-config: every knob of post-training quantization, as a small JSON file.

`hwc quant-search` writes one (the configuration it picked); `hwc build --quant-config`
and `hwc.build(..., quant_config=...)` read it. Format (all keys optional except
"format"; the defaults are those of `QuantConfig`):

    {
      "format": "hwc-quant-config-1",
      "method": "percentile",      range of every activation tensor, from its calibration
                                   histogram: "minmax" (observed min/max), "percentile"
                                   (drop the (100 - p)% tails, half each side), "entropy"
                                   (the clipping that minimizes the KL divergence between
                                   the float and the quantized histogram, TensorRT-style) or
                                   "mse" (the clipping that minimizes the expected squared
                                   quantization error: clipping + rounding noise)
      "percentile": 99.99,         p of "percentile"
      "headroom": 0.0,             widen every calibrated activation range by this fraction at
                                   both ends (0.25: [1.25 lo, 1.25 hi]) -- for calibration data
                                   sparser than what the model will see: values beyond the
                                   observed range saturate, which costs more than coarser steps
      "per_channel": true,         weights: one symmetric scale per output channel (true)
                                   or one per tensor (false)
      "prune": 0.0,                magnitude pruning before quantization: this fraction of
                                   each Conv/Gemm/MatMul weight tensor (the smallest |w|)
                                   is set to 0
      "bias_correction": true,     shift each layer's int32 bias by the mean error its
                                   quantization causes on the calibration data (per channel)
      "float_nodes": ["fc"],       nodes (names of the optimized float graph) kept in float
                                   (a Dequantize before, a Quantize after); cpu/ref targets
      "bins": 2048,                histogram bins per tensor
      "search": {...}              written by quant-search for the record (metrics of the
                                   pick, the budget); ignored when read
    }

The defaults (percentile 99.99, per channel, bias correction) are the configuration that
measured best or within 0.3 dB of the best on 3 of the 4 MLPerf Tiny zoo models
(BENCHMARKS.md, Quantization). The calibration data are not part of the config: a build with a config still needs
`--calib`, and recomputes the ranges with the config's method.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hwc.errors import UserError

FORMAT = "hwc-quant-config-1"
METHODS = ("minmax", "percentile", "entropy", "mse")


@dataclass(frozen=True)
class QuantConfig:
    method: str = "percentile"
    percentile: float = 99.99
    headroom: float = 0.0
    per_channel: bool = True
    prune: float = 0.0
    bias_correction: bool = True
    float_nodes: tuple[str, ...] = ()
    bins: int = 2048
    search: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.method not in METHODS:
            raise UserError(f"quant-config: 'method' must be one of {', '.join(METHODS)}, not {self.method!r}")
        if not 50.0 < float(self.percentile) <= 100.0:
            raise UserError(f"quant-config: 'percentile' must be in (50, 100], not {self.percentile!r}")
        if not 0.0 <= float(self.headroom) <= 4.0:
            raise UserError(f"quant-config: 'headroom' must be a fraction in [0, 4], not {self.headroom!r}")
        if not 0.0 <= float(self.prune) < 1.0:
            raise UserError(f"quant-config: 'prune' must be a fraction in [0, 1), not {self.prune!r}")
        if not (isinstance(self.bins, int) and 64 <= self.bins <= 1 << 16):
            raise UserError(f"quant-config: 'bins' must be an integer in [64, 65536], not {self.bins!r}")
        object.__setattr__(self, "float_nodes", tuple(str(n) for n in self.float_nodes))
        object.__setattr__(self, "percentile", float(self.percentile))
        object.__setattr__(self, "prune", float(self.prune))
        object.__setattr__(self, "headroom", float(self.headroom))

    def label(self) -> str:
        """A short name for tables: 'mse/pc', 'percentile99.99/pt prune0.5 float[fc]'."""
        m = f"percentile{self.percentile:g}" if self.method == "percentile" else self.method
        s = f"{m}/{'pc' if self.per_channel else 'pt'}"
        if self.headroom:
            s += f"+h{self.headroom:g}"
        if self.bias_correction:
            s += "+bc"
        if self.prune:
            s += f" prune{self.prune:g}"
        if self.float_nodes:
            s += f" float[{','.join(self.float_nodes)}]"
        return s

    def with_(self, **changes) -> QuantConfig:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["float_nodes"] = list(self.float_nodes)
        if not self.search:
            d.pop("search")
        return {"format": FORMAT, **d}

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str = "quant-config") -> QuantConfig:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise UserError(f"{where}: not an hwc quant-config (format {got!r}, expected {FORMAT!r}); "
                            f"write one with `hwc quant-search`.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(doc) - known - {"format"})
        if unknown:
            raise UserError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**{k: v for k, v in doc.items() if k in known})

    def save(self, path: str | os.PathLike) -> Path:
        from hwc.artifact import write_output

        text = json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"
        write_output(path, lambda f: f.write(text.encode()))   # (whole or not at all; a bad path: exit 2)
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> QuantConfig:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"quant-config {str(p)!r} does not exist; write one with `hwc quant-search`.")
        try:
            doc = json.loads(p.read_text())
        except ValueError as e:
            raise UserError(f"quant-config {str(p)!r} is not valid JSON ({e}).") from None
        return cls.from_json(doc, where=f"quant-config {str(p)!r}")


def as_config(cfg: QuantConfig | dict | str | os.PathLike | None) -> QuantConfig:
    """A QuantConfig from a config, a JSON dict, a path, or None (the defaults)."""
    if cfg is None:
        return QuantConfig()
    if isinstance(cfg, QuantConfig):
        return cfg
    if isinstance(cfg, dict):
        return QuantConfig.from_json({"format": FORMAT, **cfg})
    return QuantConfig.load(cfg)
