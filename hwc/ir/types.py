"""Tensor types of the graph IR: a dtype from a closed set and a static shape."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The dtypes the IR knows, by name. Nothing else enters the IR.
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}

_SHORT = {"float32": "f32", "int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64", "bool": "b"}


def dtype_name(dt) -> str:
    """The IR name of a numpy dtype; raises KeyError for dtypes the IR does not know."""
    dt = np.dtype(dt)
    for name, d in DTYPES.items():
        if d == dt:
            return name
    raise KeyError(str(dt))


@dataclass(frozen=True)
class TensorType:
    """A static tensor type: `dtype` is a key of DTYPES, `shape` a tuple of ints >= 0."""

    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown IR dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.np_dtype.itemsize

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(dtype_name(array.dtype), tuple(array.shape))

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape) if self.shape else ""
        return f"{_SHORT[self.dtype]}[{dims}]"
