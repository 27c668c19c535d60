"""Errors hwc raises on purpose.

Every error a user can cause is a `UserError`: one paragraph saying what is wrong, where,
and what to do. The CLI prints it and exits with code 2. Anything else that escapes is a
bug in hwc (exit code 1).
"""

from __future__ import annotations


class HwcError(Exception):
    """Base class of hwc's own errors."""


class UserError(HwcError):
    """Bad input or an unsupported model: the user can fix it. CLI exit code 2."""


class ModelError(UserError):
    """The model file cannot be read, is not ONNX, or is invalid."""


class UnsupportedError(UserError):
    """The model uses something hwc does not support (op, attribute, dtype, dynamic shape).

    `items` lists every offending place, so one run reports all of them.
    """

    def __init__(self, message: str, items: list[str] | None = None):
        super().__init__(message)
        self.items = list(items or [])


class InputError(UserError):
    """Run-time inputs do not match the model (name, shape, dtype, file)."""


class TargetError(UserError):
    """A target description (YAML) is invalid or inconsistent."""


class VerifyError(HwcError):
    """The IR verifier found a malformed graph: an internal error (a pass or importer bug)."""
