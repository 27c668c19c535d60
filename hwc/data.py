"""Reading the data files of the CLI contract: an .npz keyed by input names, or an .npy for
a single-input model (optionally with a leading samples axis)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hwc.errors import InputError


def load_named_arrays(data: str | os.PathLike | dict, names: list[str], what: str,
                      keep: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The arrays for `names` (plus any `keep` keys) from an .npz/.npy path or a dict."""
    if isinstance(data, dict):
        out = {k: np.asarray(v) for k, v in data.items()}
    else:
        p = Path(data)
        if not p.is_file():
            raise InputError(f"{what} file {str(p)!r} does not exist.")
        try:
            loaded = np.load(p, allow_pickle=False)
        except Exception as e:
            # (numpy's message for a file that is neither suggests allow_pickle: not advice to pass on)
            why = "neither an .npy nor an .npz (zip) file" if "pickle" in str(e) else str(e)
            raise InputError(f"Cannot read {what.lower()} file {str(p)!r} as .npy/.npz ({why}). Save it with "
                             f"numpy.savez(path, **{{name: array}}), or numpy.save for a single-input model.") from None
        if isinstance(loaded, np.ndarray):
            if len(names) != 1:
                raise InputError(f"{what} file {str(p)!r} is a single .npy array, but the model has {len(names)} "
                                 f"inputs {names}; use an .npz keyed by those names.")
            out = {names[0]: loaded}
        else:
            with loaded:
                out = {k: loaded[k] for k in loaded.files}
    missing = [n for n in names if n not in out]
    if missing:
        raise InputError(f"{what} has no array for input(s) {missing} (it holds {sorted(out)}); save it as an "
                         f".npz keyed by the model's input names (samples, if several, on a leading axis).")
    return {k: v for k, v in out.items() if k in names or k in keep}
